"""The ``aggregation.*`` config section: which Strategy the station runs, with its parameters.

An algorithm-layer config (no ROS, no fleet), composed by the fleet's and the engine's configs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fl_uav.aggregation import build_strategy, check_strategy_name


@dataclass(frozen=True)
class AggregationConfig:
    """strategy: aggregation rule (see fl_uav.aggregation.STRATEGY_NAMES); server_lr: server
    step; proximal_mu (fedprox), score_interval (osafl, Υ), score_shrink_steps (osafl, k₀ of
    eq. (29): 0 = the paper's Δ_u ≈ λ_u), trimmed_beta (trimmed_mean),
    num_selected (feddpq: drones drawn with replacement per round, 0 = all), local_lr
    (2ceoafl: the drones' step size η̃), clip_norm (> 0: clip each delta's L2 norm first)."""

    strategy: str = 'fedavg'
    server_lr: float = 1.0
    proximal_mu: float = 0.01
    score_interval: int = 3
    score_shrink_steps: float = 0.0
    trimmed_beta: float = 0.1
    num_selected: int = 0
    local_lr: float = 0.1
    clip_norm: float = 0.0

    def __post_init__(self) -> None:
        check_strategy_name(self.strategy)   # a built-in name or a plug-in module:Name
        if not self.server_lr > 0:
            raise ValueError(f'server_lr must be > 0, got {self.server_lr}')
        if self.proximal_mu < 0 or self.score_interval < 1 or self.num_selected < 0:
            raise ValueError('proximal_mu >= 0, score_interval >= 1, num_selected >= 0')
        if not (math.isfinite(self.score_shrink_steps) and self.score_shrink_steps >= 0):
            raise ValueError(f'score_shrink_steps must be a finite number >= 0, got '
                             f'{self.score_shrink_steps}')
        if not 0.0 <= self.trimmed_beta < 0.5 or self.clip_norm < 0 or not self.local_lr > 0:
            raise ValueError('trimmed_beta in [0, 0.5), clip_norm >= 0, local_lr > 0')

    def build(self, num_clients: int, seed: int = 0):
        """The configured Strategy for a fleet of num_clients drones."""
        return build_strategy(self.strategy, server_lr=self.server_lr, num_clients=num_clients,
                              proximal_mu=self.proximal_mu, score_interval=self.score_interval,
                              score_shrink_steps=self.score_shrink_steps,
                              trimmed_beta=self.trimmed_beta, num_selected=self.num_selected,
                              local_lr=self.local_lr, clip_norm=self.clip_norm, seed=seed)
