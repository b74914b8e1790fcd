"""The fleet's config tree: every key the nodes, the launcher and the tests read.

Sections map one-to-one to the parameter groups of config/fleet.yaml (``world.seed``,
``learning.lr``...). Algorithm-layer sections are the algorithm modules' own frozen configs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fl_uav.aggregation import STRATEGY_NAMES, build_strategy
from fl_uav.compression.compressor import CompressionConfig
from fl_uav.learning.buffer import BufferConfig
from fl_uav.learning.client_algorithms import CLIENT_ALGORITHMS, build_client_algorithm
from fl_uav.learning.models import MODEL_NAMES
from fl_uav.learning.training import OPTIMIZERS
from fl_uav.planning.coverage import CoverageConfig
from fl_uav.planning.geofence import Geofence, GeofenceConfig, resolve_geofence
from fl_uav.sim.autopilot import AutopilotSimConfig
from fl_uav.world.camera import CameraConfig
from fl_uav.world.landcover import WorldConfig


@dataclass(frozen=True)
class LearningConfig:
    """Onboard model and local training.

    model: architecture name; input_px: side of the model input (camera frames are resized);
    init_seed: seed of the initial global model; local_epochs, batch_size, lr, momentum,
    weight_decay, max_steps, optimizer ('sgd' | 'adam'): local training; lr_decay: the local
    learning rate in round r is lr · lr_decay^(r-1); min_samples_to_train: a drone with fewer
    buffered samples uploads an empty update instead of training. structured_keep < 1: each
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
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f'optimizer {self.optimizer!r} unknown; choices: '
                             f'{", ".join(OPTIMIZERS)}')
        if self.model not in MODEL_NAMES:
            raise ValueError(f'model {self.model!r} unknown; choices: {", ".join(MODEL_NAMES)}')
        if self.input_px not in (16, 32, 64):
            raise ValueError(f'input_px must be one of 16, 32, 64, got {self.input_px}')
        if self.min_samples_to_train < 1:
            raise ValueError(f'min_samples_to_train must be >= 1, got {self.min_samples_to_train}')
        if not (0.0 < self.lr <= 10.0):
            raise ValueError(f'lr must be in (0, 10], got {self.lr}')
        if not (0.0 <= self.momentum < 1.0):
            raise ValueError(f'momentum must be in [0, 1), got {self.momentum}')
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
        if name not in CLIENT_ALGORITHMS:
            raise ValueError(f'client_algorithm {name!r} unknown; choices: '
                             f'{", ".join(CLIENT_ALGORITHMS)}')
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

    def build_client(self):
        """One drone's configured client algorithm (fl_uav.learning.client_algorithms)."""
        return build_client_algorithm(
            self.client_algorithm, structured_keep=self.structured_keep,
            rho_steps=self.rho_steps, kappa_steps=self.kappa_steps,
            prune_fraction=self.prune_fraction, prune_fraction_max=self.prune_fraction_max,
            min_local_steps=self.min_local_steps, max_local_steps=self.max_local_steps)


@dataclass(frozen=True)
class AggregationConfig:
    """strategy: aggregation rule (see fl_uav.aggregation.STRATEGY_NAMES); server_lr: server
    step; proximal_mu (fedprox), score_interval (osafl, Υ), trimmed_beta (trimmed_mean),
    num_selected (feddpq: drones drawn with replacement per round, 0 = all), local_lr
    (2ceoafl: the drones' step size η̃), clip_norm (> 0: clip each delta's L2 norm first)."""

    strategy: str = 'fedavg'
    server_lr: float = 1.0
    proximal_mu: float = 0.01
    score_interval: int = 3
    trimmed_beta: float = 0.1
    num_selected: int = 0
    local_lr: float = 0.1
    clip_norm: float = 0.0

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGY_NAMES:
            raise ValueError(f'strategy {self.strategy!r} unknown; choices: '
                             f'{", ".join(STRATEGY_NAMES)}')
        if not self.server_lr > 0:
            raise ValueError(f'server_lr must be > 0, got {self.server_lr}')
        if self.proximal_mu < 0 or self.score_interval < 1 or self.num_selected < 0:
            raise ValueError('proximal_mu >= 0, score_interval >= 1, num_selected >= 0')
        if not 0.0 <= self.trimmed_beta < 0.5 or self.clip_norm < 0 or not self.local_lr > 0:
            raise ValueError('trimmed_beta in [0, 0.5), clip_norm >= 0, local_lr > 0')

    def build(self, num_clients: int, seed: int = 0):
        """The configured Strategy for a fleet of num_clients drones."""
        return build_strategy(self.strategy, server_lr=self.server_lr, num_clients=num_clients,
                              proximal_mu=self.proximal_mu, score_interval=self.score_interval,
                              trimmed_beta=self.trimmed_beta, num_selected=self.num_selected,
                              local_lr=self.local_lr, clip_norm=self.clip_norm, seed=seed)


@dataclass(frozen=True)
class RoundConfig:
    """num_rounds: rounds to run; deadline_s: wall seconds a round stays open;
    first_round_extra_s: extra time in round 1 for connect, arm and take-off;
    start_timeout_s: how long the station waits for drones to subscribe before round 1;
    eval_samples: size of the held-out set the station evaluates on; eval_seed: its seed."""

    num_rounds: int = 10
    deadline_s: float = 60.0
    first_round_extra_s: float = 60.0
    start_timeout_s: float = 60.0
    eval_samples: int = 1000
    eval_seed: int = 12345

    def __post_init__(self) -> None:
        if self.num_rounds < 1:
            raise ValueError(f'num_rounds must be >= 1, got {self.num_rounds}')
        if self.deadline_s <= 0 or self.first_round_extra_s < 0 or self.start_timeout_s <= 0:
            raise ValueError('deadline_s and start_timeout_s must be > 0, '
                             'first_round_extra_s >= 0')
        if self.eval_samples < 10:
            raise ValueError(f'eval_samples must be >= 10, got {self.eval_samples}')


@dataclass(frozen=True)
class FlightConfig:
    """How drones fly: connection URL template (``{port}`` = port_base + drone id), speed,
    take-off altitude and timeouts. A round's flight is cut short train_reserve_s before the
    round's deadline (but allowed at least min_flight_budget_s) so the drone can still train
    and upload in time."""

    url_template: str = 'udpin://127.0.0.1:{port}'
    port_base: int = 14540
    speed_m_s: float = 12.0
    takeoff_altitude_m: float = 30.0
    connect_timeout_s: float = 60.0
    land_on_finish: bool = True
    train_reserve_s: float = 20.0
    min_flight_budget_s: float = 5.0

    def __post_init__(self) -> None:
        if '{port}' not in self.url_template and '{' in self.url_template:
            raise ValueError(f'url_template may only use {{port}}, got {self.url_template!r}')
        if not (1 <= self.port_base <= 65000):
            raise ValueError(f'port_base must be in [1, 65000], got {self.port_base}')
        if not (0.5 <= self.speed_m_s <= 25.0):
            raise ValueError(f'speed_m_s must be in [0.5, 25], got {self.speed_m_s}')
        if self.train_reserve_s < 0 or self.min_flight_budget_s <= 0:
            raise ValueError('train_reserve_s must be >= 0 and min_flight_budget_s > 0')
        if not (2.0 <= self.takeoff_altitude_m <= 120.0):
            raise ValueError(f'takeoff_altitude_m must be in [2, 120], got '
                             f'{self.takeoff_altitude_m}')

    def url_for(self, drone_id: int) -> str:
        """MAVLink connection URL of one drone's autopilot."""
        return self.url_template.format(port=self.port_base + drone_id)


@dataclass(frozen=True)
class SimCameraConfig:
    """The embedded camera: frames per second per drone and render seed."""

    rate_hz: float = 10.0
    seed: int = 3

    def __post_init__(self) -> None:
        if not (0.1 <= self.rate_hz <= 60.0):
            raise ValueError(f'rate_hz must be in [0.1, 60], got {self.rate_hz}')


@dataclass(frozen=True)
class CodecConfig:
    """Bounds the ground station enforces on incoming frames."""

    max_frame_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_frame_bytes < 1024:
            raise ValueError(f'max_frame_bytes must be >= 1024, got {self.max_frame_bytes}')


@dataclass(frozen=True)
class FleetConfig:
    """Everything shared by the fleet's nodes."""

    num_drones: int = 4
    world: WorldConfig = field(default_factory=WorldConfig)
    camera: CameraConfig = field(default_factory=CameraConfig)
    sim_camera: SimCameraConfig = field(default_factory=SimCameraConfig)
    learning: LearningConfig = field(default_factory=LearningConfig)
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    rounds: RoundConfig = field(default_factory=RoundConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    coverage: CoverageConfig = field(default_factory=CoverageConfig)
    geofence: GeofenceConfig = field(default_factory=GeofenceConfig)
    flight: FlightConfig = field(default_factory=FlightConfig)
    autopilot: AutopilotSimConfig = field(default_factory=AutopilotSimConfig)
    codec: CodecConfig = field(default_factory=CodecConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)

    def __post_init__(self) -> None:
        if not (1 <= self.num_drones <= 250):
            raise ValueError(f'num_drones must be in [1, 250], got {self.num_drones}')
        fence = self.geofence_enu()      # the take-off is flown too: it must be in the band
        for key, up_m in (('flight.takeoff_altitude_m', self.flight.takeoff_altitude_m),
                          ('coverage.altitude_m', self.coverage.altitude_m)):
            if not fence.min_up_m <= up_m <= fence.max_up_m:
                raise ValueError(f'{key} {up_m} m is outside the geofence altitude band '
                                 f'[geofence.min_up_m, geofence.max_up_m] = '
                                 f'[{fence.min_up_m}, {fence.max_up_m}] m')
        # SCAFFOLD in the fleet: c and Δc_k travel as extra dense tensors of v1 frames.
        client, strategy = self.learning.client_algorithm, self.aggregation.strategy
        if (client == 'scaffold') != (strategy == 'scaffold'):
            raise ValueError(f'learning.client_algorithm scaffold and aggregation.strategy '
                             f'scaffold go together in the fleet, got {client!r} and '
                             f'{strategy!r}')
        if client == 'scaffold' and self.compression.method != 'none':
            raise ValueError(f'learning.client_algorithm scaffold needs compression.method none '
                             f'in the fleet (Δc travels as dense tensors beside the update), got '
                             f'{self.compression.method!r}')

    def geofence_enu(self) -> Geofence:
        """The drones' geofence (ENU m): geofence.source 'world' is the world less
        coverage.margin_m, 'box' the geofence.*_m limits."""
        return resolve_geofence(self.geofence, self.world.size_m, self.coverage.margin_m)
