"""Local training hyper-parameters (torch-free).

:class:`TrainConfig` lives apart from the training loops (fl_uav.learning.training, which
re-exports it) so that the configs that build one (fl_uav.learning.config) import no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from fl_uav.configschema import require_choice
from fl_uav.learning.choices import OPTIMIZERS


@dataclass(frozen=True)
class TrainConfig:
    """Local training hyper-parameters.

    local_epochs: passes over the onboard buffer per round.
    max_steps: cap on SGD steps per round (0 = no cap).
    optimizer: 'sgd' (with momentum) or 'adam' (state reset every round).
    proximal_mu: FedProx's μ: the local objective gains μ/2·‖w − w_received‖² (0 = off).
    When training stops early (a newer round, the deadline) is not a hyper-parameter: see
    :class:`StopCondition`.
    """

    local_epochs: int = 2
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    max_steps: int = 0
    optimizer: str = 'sgd'
    proximal_mu: float = 0.0

    def __post_init__(self) -> None:
        require_choice('optimizer', self.optimizer, OPTIMIZERS)
        if self.local_epochs < 1:
            raise ValueError(f'local_epochs must be >= 1, got {self.local_epochs}')
        if self.batch_size < 1:
            raise ValueError(f'batch_size must be >= 1, got {self.batch_size}')
        if not (0.0 < self.lr <= 10.0):
            raise ValueError(f'lr must be in (0, 10], got {self.lr}')
        if not (0.0 <= self.momentum < 1.0):
            raise ValueError(f'momentum must be in [0, 1), got {self.momentum}')
        if self.weight_decay < 0.0:
            raise ValueError(f'weight_decay must be >= 0, got {self.weight_decay}')
        if self.max_steps < 0:
            raise ValueError(f'max_steps must be >= 0, got {self.max_steps}')
        if self.proximal_mu < 0:
            raise ValueError(f'proximal_mu must be >= 0, got {self.proximal_mu}')
