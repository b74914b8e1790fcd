"""FedDPQ server (Hou et al., JSAC 2025): partial participation with replacement."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from fl_uav.aggregation._common import apply_step, keep_model, weighted_sum
from fl_uav.aggregation.knobs import DRAWS_KNOB
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)


class FedDPQ(Strategy):
    """𝒮^t = S i.i.d. draws with P(u) = τ_u;  w ← w + η (1/|K|) Σ_{u∈K} Δ_u.

    FedDPQ eq. (7) (selection with replacement, ∝ τ_u, uniform when ``shares`` is None) and
    eq. (18) (FedDPQ digest §2.4): K is the multiset of draws whose upload arrived; a drone
    drawn twice counts twice; the mean is over what arrived, not over S. Δ_u = −η_local Q(g_u)
    is the drone's delta, and ``server_lr`` scales it (1 = the paper's step).
    :meth:`configure_round` draws with a seeded generator and sends ``{DRAWS_KNOB: count}`` to
    every drone. Updates from drones not drawn this round are ignored; if the round was never
    configured, every update counts once. Checkpoint: JSON-compatible (generator state and the
    open selection).
    """

    name = 'feddpq'

    def __init__(self, num_selected: int, seed: int = 0,
                 shares: Mapping[int, float] | None = None, server_lr: float = 1.0) -> None:
        if num_selected < 1:
            raise ValueError(f'num_selected must be >= 1, got {num_selected}')
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        if shares is not None and (any(not v >= 0.0 for v in shares.values())
                                   or sum(shares.values()) <= 0.0):
            raise ValueError('shares must be >= 0 with a positive sum')
        self.num_selected = int(num_selected)
        self.shares = None if shares is None else {int(k): float(v) for k, v in shares.items()}
        self.server_lr = float(server_lr)
        self.rng = np.random.default_rng(seed)
        self.selection: dict[int, dict[int, int]] = {}

    def configure_round(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        drones = sorted(int(d) for d in drone_ids)
        if not drones:
            return {}
        if self.shares is None:
            p = np.full(len(drones), 1.0 / len(drones))
        else:
            p = np.array([self.shares.get(d, 0.0) for d in drones], np.float64)
            if p.sum() <= 0.0:
                raise ValueError('no drone of this round has a positive share')
            p = p / p.sum()
        picks = self.rng.choice(len(drones), size=self.num_selected, replace=True, p=p)
        counts = Counter(drones[i] for i in picks)
        self.selection = {int(round_index): dict(counts)}
        return {d: {DRAWS_KNOB: counts.get(d, 0)} for d in drones}

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        draws = self.selection.get(int(round_index))
        usable = [u for u in updates if u.num_samples > 0
                  and (draws is None or draws.get(u.sender, 0) > 0)]
        ignored = len(updates) - len(usable)
        if not usable:
            return keep_model(global_weights, ignored=ignored)
        counts = [1 if draws is None else draws[u.sender] for u in usable]
        total = sum(counts)
        mean = weighted_sum([u.delta for u in usable], [c / total for c in counts],
                            list(global_weights))
        new = apply_step(global_weights, mean, self.server_lr)
        return AggregateResult(weights=new, empty=False,
                               used=senders(usable),
                               metrics={'participants': len(usable), 'ignored': ignored,
                                        'arrived_draws': total})

    def state_dict(self) -> dict:
        return {'rng': self.rng.bit_generator.state,
                'selection': [[r, sorted([d, c] for d, c in s.items())]
                              for r, s in self.selection.items()]}

    def load_state_dict(self, state: Mapping) -> None:
        self.rng.bit_generator.state = state['rng']
        self.selection = {int(r): {int(d): int(c) for d, c in s}
                          for r, s in state['selection']}
