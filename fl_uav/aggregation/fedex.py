"""FedEx (Bian, Shen, Xu): server rule of indirect, UAV-ferried FL, Sync and Async variants."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fl_uav.aggregation._common import apply_step, keep_model, weighted_sum
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)


class _FedExBase(Strategy):
    """x ← x − (1/N) Σ u_k = x + (1/N) Σ Δ, added to the *current* model.

    Each update's delta is one cumulative local update (or a transporter's running sum u_k of
    them, FedEx eq. (12)) in the Δ = x_i − x_base sign (FedEx digest §8.2). N is the total
    number of clients, not the number collected; no staleness weight, no server rate (§8.1).
    The one-round lag (a CLU trained from the model delivered on the previous visit) is the
    drones' side; the first tour brings zero deltas, which is a normal, non-empty update.
    """

    def __init__(self, num_clients: int) -> None:
        if num_clients < 1:
            raise ValueError(f'num_clients must be >= 1, got {num_clients}')
        self.num_clients = int(num_clients)
        self.applied = 0

    def _apply(self, global_weights: Weights, usable: Sequence[ClientUpdate],
               **metrics: float) -> AggregateResult:
        total = weighted_sum([u.delta for u in usable], [1.0] * len(usable), list(global_weights))
        self.applied += 1
        return AggregateResult(weights=apply_step(global_weights, total, 1.0 / self.num_clients),
                               empty=False, used=senders(usable),
                               metrics={'participants': len(usable), 'version': self.applied,
                                        **metrics})

    def state_dict(self) -> dict:
        return {'applied': self.applied}

    def load_state_dict(self, state: Mapping) -> None:
        self.applied = int(state['applied'])


class FedExSync(_FedExBase):
    """FedEx-Sync, eq. (13): one update per round, x_{r+1} = x_r − (1/N) Σ_k u_k.

    Call once per round with every transporter's sum; the barrier (wait for all K) is the
    caller's (the ground station closes the round when all answered or at the deadline).
    Updates tagged with another round are ignored (``metrics['ignored']``). Checkpoint:
    JSON-compatible (the update counter).
    """

    name = 'fedex_sync'

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable = [u for u in updates if u.round_index == round_index]
        ignored = len(updates) - len(usable)
        if not usable:
            return keep_model(global_weights, ignored=ignored)
        return self._apply(global_weights, usable, ignored=ignored)


class FedExAsync(_FedExBase):
    """FedEx-Async, eqs. (14)–(15): on each return, x ← x − (1/N) Σ_{k∈S_t} u_k.

    Call whenever one or more transporters come back; updates of any round are applied to the
    current model (they are stale by design, at most 2Δ_k slots). ``metrics['max_lag']`` is
    the largest round_index − update.round_index. Checkpoint: JSON-compatible.
    """

    name = 'fedex_async'

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        if not updates:
            return keep_model(global_weights)
        lag = max(round_index - u.round_index for u in updates)
        return self._apply(global_weights, list(updates), max_lag=lag)
