"""FedNova (Wang et al., NeurIPS 2020): normalized averaging by the local step counts τ_k."""

from __future__ import annotations

from collections.abc import Sequence

from fl_uav.aggregation._common import apply_step, keep_model, weighted_sum, with_step_counts
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)


class FedNova(Strategy):
    """w ← w + η_s · τ_eff · Σ_k p_k Δ_k / τ_k, with τ_eff = Σ_k p_k τ_k.

    FedNova normalized averaging with vanilla SGD (OSAFL digest §6.3): d_k = Δ_k / τ_k is the
    per-step update (the drone's delta already includes −η), p_k = n_k / Σ n_j over the updates
    that arrived, and τ_eff rescales the step to the average amount of local work.
    Each update must report τ_k as ``metrics[STEPS_KEY]`` (positive int); updates without it,
    or with ``num_samples == 0``, are skipped (counted in ``metrics['skipped']``).
    Stateless, so the checkpoint is ``{}``.
    """

    name = 'fednova'

    def __init__(self, server_lr: float = 1.0) -> None:
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        self.server_lr = float(server_lr)

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable, skipped = with_step_counts(updates)
        if not usable:
            return keep_model(global_weights, skipped=skipped)
        total = float(sum(u.num_samples for u, _ in usable))
        p = [u.num_samples / total for u, _ in usable]
        tau_eff = sum(pk * tau for pk, (_, tau) in zip(p, usable))
        direction = weighted_sum([u.delta for u, _ in usable],
                                 [pk / tau for pk, (_, tau) in zip(p, usable)],
                                 list(global_weights))
        new = apply_step(global_weights, direction, self.server_lr * tau_eff)
        return AggregateResult(weights=new, empty=False,
                               used=senders([u for u, _ in usable]),
                               metrics={'participants': len(usable), 'skipped': skipped,
                                        'tau_eff': tau_eff})
