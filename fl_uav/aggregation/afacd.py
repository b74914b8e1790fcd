"""AFA-CD (Yang et al., 2022, Anarchic Federated Averaging, cross-device) server rule."""

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


class AFACD(Strategy):
    """w ← w − η̃ η (1/m) Σ_{k received} G_k = w + η̃ (1/m) Σ_k Δ_k / τ_k.

    AFA-CD server step (OSAFL digest §6.4): G_k = (1/τ_k) Σ_τ g_k is the drone's average
    per-step gradient, so η G_k = −Δ_k / τ_k with Δ_k the reported model delta and τ_k
    ``metrics[STEPS_KEY]``; m is the number of updates received. Equal weights: this is OSAFL
    with every score Δ_u ≡ 1. Updates without τ_k, or with ``num_samples == 0``, are skipped.
    Stateless, so the checkpoint is ``{}``.
    """

    name = 'afacd'

    def __init__(self, server_lr: float = 1.0) -> None:
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        self.server_lr = float(server_lr)

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable, skipped = with_step_counts(updates)
        if not usable:
            return keep_model(global_weights, skipped=skipped)
        m = len(usable)
        mean = weighted_sum([u.delta for u, _ in usable], [1.0 / (m * tau) for _, tau in usable],
                            list(global_weights))
        new = apply_step(global_weights, mean, self.server_lr)
        return AggregateResult(weights=new, empty=False,
                               used=senders([u for u, _ in usable]),
                               metrics={'participants': m, 'skipped': skipped})
