"""The ``learning.*`` config section: onboard model, local training and the client algorithm.

An algorithm-layer config (no ROS, no fleet): the fleet (fl_uav.fleet.config) and the
experiment engine (fl_uav.engine.config) both compose it, so ``learning.lr`` means the
same in ``fl-uav sim``, ``ros2 launch`` and ``fl-uav experiment``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fl_uav.configschema import require_choice
from fl_uav.learning.choices import CLIENT_ALGORITHMS, MODEL_NAMES, OPTIMIZERS
from fl_uav.learning.train_config import TrainConfig


@dataclass(frozen=True)
class LearningConfig:
    """Onboard model and local training.

    model: architecture name; input_px: side of the model input (camera frames and the
    image_folder dataset are resized to it; digits keep 8 px, Fashion-MNIST 28 px);
    init_seed: seed of the initial global model and of nothing else, independent of the
    experiment's ``seed`` (runs that differ only in ``seed`` start from the same model; set
    init_seed as well to vary the initialisation).
    local_epochs: passes over the drone's samples per round (max_steps caps them; the 2ceoafl,
    feddpq and osafl clients count their own steps). batch_size: local mini-batch size in
    samples. lr: local learning rate of round 1 (lr_decay lowers it later). momentum: momentum
    of the local optimizer (0 = plain SGD). weight_decay: L2 weight decay of the local
    optimizer. max_steps: cap on local SGD steps per round (0 = no cap).
    optimizer: local optimizer ('sgd' | 'adam'); lr_decay: the local
    learning rate in round r is lr · lr_decay^(r-1); min_samples_to_train: a drone with fewer
    buffered samples uploads an empty update instead of training. torch_threads: PyTorch
    threads of each fleet node (drone, ground station, ground client); the experiment engine
    uses engine.torch_threads instead. structured_keep < 1: each
    round the drone trains a physically smaller model keeping that fraction of each conv's
    filters (largest L1 norm in the received model; structured pruning with δ = 1 − keep) and
    uploads the update expanded back to the dense shape (zeros where pruned).

    client_algorithm: the drone's round procedure (fl_uav.learning.client_algorithms): sgd
    (the above) | 2ceoafl (2CEOAFL §2.2: rho_steps dense steps, a magnitude mask pruning
    prune_fraction δ, rewind, kappa_steps masked steps) | feddpq (FedDPQ eqs. (5), (9), (10):
    prune_fraction ρ_u magnitude pruning, kappa_steps gradient steps at the pruned point; the
    paper takes 1) | osafl (OSAFL §2.1: a uniform random number of local steps in
    [min_local_steps, max_local_steps] per drone and round) | scaffold (SCAFFOLD option II,
    per-drone control variates). prune_fraction_max > prune_fraction: the pruning ratio is
    drawn uniformly in [prune_fraction, prune_fraction_max] per drone and round (2CEOAFL's
    δ ~ U[0.05, 0.7]); 0 = fixed.

    rho_steps: dense local steps before pruning (client 2ceoafl, ρ).
    kappa_steps: local steps after pruning (2ceoafl: masked steps, κ; feddpq: gradient steps at
    the pruned point).
    prune_fraction: fraction of the weights pruned by magnitude each round (clients 2ceoafl δ
    and feddpq ρ_u; the lower end of the range when prune_fraction_max > 0).
    min_local_steps, max_local_steps: range of the local steps an osafl client draws uniformly
    per drone and round.
    """

    model: str = 'small_cnn'
    input_px: int = 32
    init_seed: int = 0
    local_epochs: int = 2
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    max_steps: int = 0
    min_samples_to_train: int = 16
    torch_threads: int = 1
    optimizer: str = 'sgd'
    lr_decay: float = 1.0
    structured_keep: float = 1.0
    client_algorithm: str = 'sgd'
    rho_steps: int = 1
    kappa_steps: int = 5
    prune_fraction: float = 0.2
    prune_fraction_max: float = 0.0
    min_local_steps: int = 1
    max_local_steps: int = 15

    def __post_init__(self) -> None:
        require_choice('optimizer', self.optimizer, OPTIMIZERS)
        require_choice('model', self.model, MODEL_NAMES)
        if self.input_px not in (16, 32, 64):
            raise ValueError(f'input_px must be one of 16, 32, 64, got {self.input_px}')
        if self.min_samples_to_train < 1:
            raise ValueError(f'min_samples_to_train must be >= 1, got {self.min_samples_to_train}')
        if not (0.0 < self.lr <= 10.0):
            raise ValueError(f'lr must be in (0, 10], got {self.lr}')
        if not (0.0 <= self.momentum < 1.0):
            raise ValueError(f'momentum must be in [0, 1), got {self.momentum}')
        if not 0.0 <= self.weight_decay < math.inf:
            raise ValueError(f'weight_decay must be >= 0 and finite, got {self.weight_decay}')
        if self.local_epochs < 1 or self.batch_size < 1 or self.max_steps < 0:
            raise ValueError('local_epochs and batch_size must be >= 1, max_steps >= 0')
        if not (0.0 < self.structured_keep <= 1.0):
            raise ValueError(f'structured_keep must be in (0, 1], got {self.structured_keep}')
        if not (0.0 < self.lr_decay <= 1.0):
            raise ValueError(f'lr_decay must be in (0, 1], got {self.lr_decay}')
        if self.torch_threads < 1:
            raise ValueError(f'torch_threads must be >= 1, got {self.torch_threads}')
        self._check_client_algorithm()

    def _check_client_algorithm(self) -> None:
        name = self.client_algorithm
        require_choice('client_algorithm', name, CLIENT_ALGORITHMS)
        if self.rho_steps < 0 or self.kappa_steps < 1:
            raise ValueError(f'rho_steps must be >= 0 and kappa_steps >= 1, got '
                             f'{self.rho_steps}, {self.kappa_steps}')
        if not 0.0 <= self.prune_fraction < 1.0:
            raise ValueError(f'prune_fraction must be in [0, 1), got {self.prune_fraction}')
        if self.prune_fraction_max and not (
                self.prune_fraction <= self.prune_fraction_max < 1.0):
            raise ValueError(f'prune_fraction_max must be 0 (fixed) or in [prune_fraction, 1), '
                             f'got {self.prune_fraction_max}')
        if not 1 <= self.min_local_steps <= self.max_local_steps:
            raise ValueError(f'need 1 <= min_local_steps <= max_local_steps, got '
                             f'{self.min_local_steps}, {self.max_local_steps}')
        if self.structured_keep < 1.0 and name != 'sgd':
            raise ValueError(f'structured_keep < 1 needs client_algorithm sgd, got {name!r}')
        if name in ('2ceoafl', 'feddpq') and self.optimizer != 'sgd':
            raise ValueError(f'client_algorithm {name} needs optimizer sgd, got '
                             f'{self.optimizer!r}')
        if name == 'feddpq' and (self.momentum or self.weight_decay):
            raise ValueError('client_algorithm feddpq runs plain SGD (FedDPQ eq. (5)): '
                             'momentum and weight_decay must be 0')

    def train_config(self) -> TrainConfig:
        """The local-training settings of these keys (the round's lr and knobs are applied by
        the caller with ``dataclasses.replace``)."""
        return TrainConfig(local_epochs=self.local_epochs, batch_size=self.batch_size,
                           lr=self.lr, momentum=self.momentum,
                           weight_decay=self.weight_decay, max_steps=self.max_steps,
                           optimizer=self.optimizer)

    def build_client(self):
        """One drone's configured client algorithm (fl_uav.learning.client_algorithms).

        Imported here, not at the top: the clients are torch code, and this module is read by
        every node's configuration (the autopilot simulator, the camera and the recorder train
        nothing and must start without torch). A module split does not help: the method is
        the config's public factory (the drone and the engine call it).
        """
        from fl_uav.learning.client_algorithms import build_client_algorithm

        return build_client_algorithm(
            self.client_algorithm, structured_keep=self.structured_keep,
            rho_steps=self.rho_steps, kappa_steps=self.kappa_steps,
            prune_fraction=self.prune_fraction, prune_fraction_max=self.prune_fraction_max,
            min_local_steps=self.min_local_steps, max_local_steps=self.max_local_steps)
