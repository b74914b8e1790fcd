"""2CEOAFL server update: dense aggregation of the drones' (pruned, quantised) gradients."""

from __future__ import annotations

from collections.abc import Sequence

from fl_uav.aggregation._common import LOCAL_LR_KEY, apply_step, keep_model, weighted_sum
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)


class TwoCEOAFL(Strategy):
    """w^{t+1} = w^t − η^t Σ_u α_u Π_u^t  with  Π_u = −Δ_u / η̃_u  (2CEOAFL eq. (13)).

    Π_u is the accumulated masked gradient Σ_τ g ⊙ m (2CEOAFL digest §2.2(c)); a drone that
    reports a model delta Δ_u = w_u − w^t after plain SGD with local rate η̃_u has
    Π_u = −Δ_u/η̃_u. η̃_u is ``metrics[LOCAL_LR_KEY]`` when present, else ``local_lr``.
    Pruned coordinates are zeros in Δ_u and are *not* renormalised per coordinate (§2.3).
    η^t = server_lr · lr_decay^⌊(t − 1)/decay_every⌋ (t = round_index, from 1).
    α_u: with ``num_clients`` = U, the fixed 1/U (a drone that did not report contributes 0);
    without it, 1/m over the m updates that arrived. Stateless, so the checkpoint is ``{}``.
    """

    name = '2ceoafl'

    def __init__(self, server_lr: float = 0.1, local_lr: float = 0.1,
                 num_clients: int | None = None, lr_decay: float = 1.0,
                 decay_every: int = 1) -> None:
        if not server_lr > 0.0 or not local_lr > 0.0:
            raise ValueError('server_lr and local_lr must be > 0')
        if num_clients is not None and num_clients < 1:
            raise ValueError(f'num_clients must be >= 1, got {num_clients}')
        if not 0.0 < lr_decay <= 1.0 or decay_every < 1:
            raise ValueError('lr_decay must be in (0, 1] and decay_every >= 1')
        self.server_lr, self.local_lr = float(server_lr), float(local_lr)
        self.num_clients = num_clients
        self.lr_decay, self.decay_every = float(lr_decay), int(decay_every)

    def server_lr_at(self, round_index: int) -> float:
        """η^t for this round."""
        return self.server_lr * self.lr_decay ** (max(round_index - 1, 0) // self.decay_every)

    def _local_lr(self, update: ClientUpdate) -> float | None:
        value = update.metrics.get(LOCAL_LR_KEY, self.local_lr)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0.0:
            return None
        return float(value)

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable = [(u, self._local_lr(u)) for u in updates if u.num_samples > 0]
        usable = [(u, lr) for u, lr in usable if lr is not None]
        skipped = len(updates) - len(usable)
        if not usable:
            return keep_model(global_weights, skipped=skipped)
        alpha = 1.0 / (self.num_clients if self.num_clients is not None else len(usable))
        eta = self.server_lr_at(round_index)
        # −η Σ α Π_u = η Σ α Δ_u / η̃_u
        step = weighted_sum([u.delta for u, _ in usable], [alpha / lr for _, lr in usable],
                            list(global_weights))
        new = apply_step(global_weights, step, eta)
        return AggregateResult(weights=new, empty=False,
                               used=senders([u for u, _ in usable]),
                               metrics={'participants': len(usable), 'skipped': skipped,
                                        'server_lr': eta})
