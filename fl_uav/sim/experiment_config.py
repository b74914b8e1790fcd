"""Config of ``fl-uav experiment``: the same schema machinery and learning sections as the fleet.

Files live under config/experiments/ in ROS 2 parameter format (``/**: ros__parameters:``), so
one parser and one validator serve ``ros2 launch``, ``fl-uav sim`` and the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fl_uav.compression.compressor import CompressionConfig
from fl_uav.fleet.config import AggregationConfig, LearningConfig
from fl_uav.learning.buffer import BufferConfig

DATASETS = ('digits', 'fashion_mnist', 'image_folder', 'world')
PARTITIONS = ('iid', 'dirichlet', 'shards', 'location')


@dataclass(frozen=True)
class DataConfig:
    """Which data and how it is split among drones.

    dataset: digits | fashion_mnist | image_folder | world (the synthetic aerial world).
    path: dataset root ('' = the dataset's default location).
    partition: iid | dirichlet | shards | location (location needs a dataset with positions:
        world). dirichlet_alpha, shards_per_client: partition parameters.
    test_fraction: held-out share for datasets without a test split (digits, image_folder).
    max_test_samples: evaluate on at most this many held-out samples (0 = all).
    world_samples: frames rendered from the world (dataset: world).
    online: if true, each round drone k receives Binomial(arrivals_e, arrivals_p) new samples
        from its partition into its capped buffer (OSAFL's arrivals); initial_samples arrive
        before round 1. If false, each drone trains on its whole partition every round.
    """

    dataset: str = 'digits'
    path: str = ''
    partition: str = 'iid'
    dirichlet_alpha: float = 0.5
    shards_per_client: int = 2
    test_fraction: float = 0.2
    max_test_samples: int = 0
    world_samples: int = 6000
    online: bool = False
    arrivals_e: int = 20
    arrivals_p: float = 0.5
    initial_samples: int = 0

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f'dataset {self.dataset!r} unknown; choices: {", ".join(DATASETS)}')
        if self.partition not in PARTITIONS:
            raise ValueError(f'partition {self.partition!r} unknown; choices: '
                             f'{", ".join(PARTITIONS)}')
        if self.partition == 'location' and self.dataset != 'world':
            raise ValueError('partition location needs dataset world (samples with positions)')
        if not self.dirichlet_alpha > 0:
            raise ValueError(f'dirichlet_alpha must be > 0, got {self.dirichlet_alpha}')
        if self.shards_per_client < 1:
            raise ValueError(f'shards_per_client must be >= 1, got {self.shards_per_client}')
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f'test_fraction must be in (0, 1), got {self.test_fraction}')
        if self.max_test_samples < 0 or self.world_samples < 100:
            raise ValueError('max_test_samples must be >= 0 and world_samples >= 100')
        if self.arrivals_e < 0 or not 0.0 <= self.arrivals_p <= 1.0 or self.initial_samples < 0:
            raise ValueError('arrivals_e >= 0, arrivals_p in [0, 1], initial_samples >= 0')


@dataclass(frozen=True)
class SystemConfig:
    """The radio and compute models that drive the simulated clock (SI units).

    Uplink: FedDPQ's link (eqs. (14)-(16), fl_uav.netmodel.radio.RadioLink) with bandwidth_hz,
    tx_power_w, interference_w and Rayleigh fading; drone k's distance to the station is drawn
    once, uniformly in [distance_min_m, distance_max_m]. Downlink: the model frame broadcast at
    downlink_rate_bit_s. Compute: FedDPQ eqs. (35)-(36) per SGD step (cpu_freq_hz,
    train_cycles_per_sample). deadline_s: a drone whose compute + upload time exceeds it is late
    and its update is dropped (0 = no deadline).
    """

    bandwidth_hz: float = 1e6
    tx_power_w: float = 0.1
    interference_w: float = 1.5e-8
    distance_min_m: float = 50.0
    distance_max_m: float = 500.0
    downlink_rate_bit_s: float = 20e6
    cpu_freq_hz: float = 1.5e9
    train_cycles_per_sample: float = 2.7e8
    deadline_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ('bandwidth_hz', 'tx_power_w', 'distance_min_m', 'downlink_rate_bit_s',
                     'cpu_freq_hz', 'train_cycles_per_sample'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} must be > 0, got {getattr(self, name)}')
        if self.distance_max_m < self.distance_min_m:
            raise ValueError('distance_max_m must be >= distance_min_m')
        if self.interference_w < 0 or self.deadline_s < 0:
            raise ValueError('interference_w and deadline_s must be >= 0')


@dataclass(frozen=True)
class EngineConfig:
    """vectorized: train all drones at once (else one after another, the reference path);
    max_clients_per_chunk: memory bound of the vectorized path; torch_threads: per process;
    checkpoint_every: rounds between checkpoints (for --resume)."""

    vectorized: bool = True
    max_clients_per_chunk: int = 32
    torch_threads: int = 1
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        if self.max_clients_per_chunk < 1 or self.torch_threads < 1 or self.checkpoint_every < 1:
            raise ValueError('max_clients_per_chunk, torch_threads, checkpoint_every must be >= 1')


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: data, drones, learning, aggregation, system models, engine."""

    name: str = 'experiment'
    seed: int = 0
    num_drones: int = 10
    num_rounds: int = 10
    data: DataConfig = field(default_factory=DataConfig)
    learning: LearningConfig = field(default_factory=LearningConfig)
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    system: SystemConfig = field(default_factory=SystemConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self) -> None:
        if not 1 <= self.num_drones <= 100_000:
            raise ValueError(f'num_drones must be in [1, 100000], got {self.num_drones}')
        if not 1 <= self.num_rounds <= 100_000:
            raise ValueError(f'num_rounds must be in [1, 100000], got {self.num_rounds}')
