"""FedAvgM (Hsu, Qi and Brown, 2019: FedAvg with server momentum) as an fl_uav plug-in.

    PYTHONPATH=examples fl-uav experiment config/experiments/quick_digits.yaml \\
        --set aggregation.strategy=fedavgm:FedAvgM --out runs/fedavgm

The constructor names ``server_lr`` (aggregation.server_lr), so it gets it; ``momentum`` keeps
its default (another value: a factory, e.g. ``def fedavgm_99(server_lr): return
FedAvgM(server_lr, momentum=0.99)``, named as ``fedavgm:fedavgm_99``).
"""

from __future__ import annotations

import numpy as np

from fl_uav.aggregation.strategy import AggregateResult, Strategy, senders, weighted_mean_delta


class FedAvgM(Strategy):
    """v ← β v + Σ_k n_k Δ_k / Σ_k n_k ;  w ← w + η_server v  (v = 0 before round 1)."""

    name = 'fedavgm'

    def __init__(self, server_lr: float = 1.0, momentum: float = 0.9) -> None:
        self.server_lr, self.momentum = float(server_lr), float(momentum)
        self.velocity: dict[str, np.ndarray] = {}    # float64, one array per tensor

    def aggregate(self, round_index, global_weights, updates):
        usable = [u for u in updates if u.num_samples > 0]
        if not usable:    # nothing arrived: keep the model (and the velocity)
            return AggregateResult(dict(global_weights), empty=True, metrics={'participants': 0})
        mean = weighted_mean_delta(usable, [u.num_samples for u in usable])
        for name, step in mean.items():
            previous = self.velocity.get(name, np.zeros(step.shape, np.float64))
            self.velocity[name] = self.momentum * previous + step
        new = {name: (w + self.server_lr * self.velocity[name]).astype(w.dtype)
               for name, w in global_weights.items()}
        return AggregateResult(new, empty=False, used=senders(usable),
                               metrics={'participants': len(usable)})

    def state_dict(self) -> dict:
        return {'velocity': dict(self.velocity)}      # numpy arrays: into checkpoint.npz

    def load_state_dict(self, state) -> None:
        self.velocity = {n: np.asarray(v, np.float64) for n, v in state['velocity'].items()}
