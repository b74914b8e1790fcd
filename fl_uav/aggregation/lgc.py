"""LGC (layered gradient compression) server: sum the received layered deltas."""

from __future__ import annotations

from collections.abc import Sequence

from fl_uav.aggregation._common import apply_step, keep_model, weighted_sum
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)


class LGC(Strategy):
    """w̄ ← w̄ − η (1/M) Σ_{m, c received} g_{m,c} = w̄ + η (1/M) Σ Δ_{m,c}.

    LGC Algorithm 1 lines 20–21 in the asynchronous, proof-consistent form (LGC digest §2.2):
    every update that arrived is added, scaled by 1/M with M the whole fleet (not the number of
    senders). Several updates from one drone (one per layer/channel c, disjoint magnitude bands
    of Top_K) simply add up, so a lost layer just removes its band (§2.5). The paper has no
    server rate (η = 1); ``server_lr`` is η. Updates with ``num_samples == 0`` are ignored.
    Stateless, so the checkpoint is ``{}``.
    """

    name = 'lgc'

    def __init__(self, num_clients: int, server_lr: float = 1.0) -> None:
        if num_clients < 1:
            raise ValueError(f'num_clients must be >= 1, got {num_clients}')
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        self.num_clients = int(num_clients)
        self.server_lr = float(server_lr)

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable = [u for u in updates if u.num_samples > 0]
        if not usable:
            return keep_model(global_weights, layers=0)
        total = weighted_sum([u.delta for u in usable], [1.0] * len(usable),
                             list(global_weights))
        new = apply_step(global_weights, total, self.server_lr / self.num_clients)
        return AggregateResult(weights=new, empty=False,
                               used=senders(usable),
                               metrics={'participants': len({u.sender for u in usable}),
                                        'layers': len(usable)})
