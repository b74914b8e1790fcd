"""FedAvg (McMahan et al., 2017): sample-weighted mean of the client deltas."""

from __future__ import annotations

from collections.abc import Sequence

from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
    weighted_mean_delta,
)


class FedAvg(Strategy):
    """w ← w + η_server · Σ_k n_k Δ_k / Σ_k n_k."""

    name = 'fedavg'

    def __init__(self, server_lr: float = 1.0) -> None:
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        self.server_lr = server_lr

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable = [u for u in updates if u.num_samples > 0]
        if not usable:
            return AggregateResult(weights=dict(global_weights), empty=True,
                                   metrics={'participants': 0})
        mean = weighted_mean_delta(usable, [u.num_samples for u in usable])
        new = {name: (global_weights[name] + self.server_lr * mean[name]).astype('float32')
               for name in global_weights}
        return AggregateResult(weights=new, empty=False, used=senders(usable),
                               metrics={'participants': len(usable),
                                        'samples': sum(u.num_samples for u in usable)})
