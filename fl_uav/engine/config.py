"""Config of ``fl-uav experiment``: the same schema machinery and learning sections as the fleet.

Files live under config/experiments/ in ROS 2 parameter format (``/**: ros__parameters:``), so
one parser and one validator serve ``ros2 launch``, ``fl-uav sim`` and the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from fl_uav.aggregation.config import AggregationConfig
from fl_uav.compression.config import CompressionConfig
from fl_uav.configschema import require_choice
from fl_uav.engine.faults import FaultsConfig
from fl_uav.learning.buffer import BufferConfig
from fl_uav.learning.config import LearningConfig
from fl_uav.learning.topup import check_generator_name
from fl_uav.netmodel.config import SystemConfig
from fl_uav.planning.config import (
    STEPS_SCALE_AUTO,
    STEPS_SCALE_ONLINE,
    ResourcesConfig,
    check_planner_procedures,
)
from fl_uav.planning.express import ExpressConfig
from fl_uav.plugins import is_plugin_spec

DATASETS = ('digits', 'fashion_mnist', 'image_folder', 'world')
PARTITIONS = ('iid', 'dirichlet', 'shards', 'location', 'folders')
FILE_DATASETS = ('fashion_mnist', 'image_folder')   # the datasets data.path points at
SPLIT_DATASETS = ('digits', 'image_folder')   # data.test_fraction (image_folder: unless the
# folder has its own test/, which load_experiment_data checks)
DATA_KEY_NEEDS: dict[str, tuple[str, tuple[Any, ...]]] = {
    'dirichlet_alpha': ('partition', ('dirichlet',)),
    'shards_per_client': ('partition', ('shards',)),
    'path': ('dataset', FILE_DATASETS),
    'test_fraction': ('dataset', SPLIT_DATASETS),
    'world_samples': ('dataset', ('world',)),
    'arrivals_e': ('online', (True,)), 'arrivals_p': ('online', (True,)),
    'initial_samples': ('online', (True,)),
    'topup_factor': ('topup', (True,)), 'topup_generator': ('topup', (True,)),
}
"""data.<key> -> (the data key it depends on, the values under which it acts). A key set to
anything but its default under another value would be ignored (a bit-identical run that looks
like a result), so DataConfig refuses it, naming both keys; left at its default it is fine."""


@dataclass(frozen=True)
class DataConfig:
    """Which data and how it is split among drones.

    dataset: the data the drones train on, digits | fashion_mnist | image_folder | world (the
        synthetic aerial world).
    path: dataset root of the datasets read from files, fashion_mnist and image_folder ('' =
        the dataset's default location; digits ship with scikit-learn, world is rendered; an
        image_folder is path/<class>/*.png split at random, or path/test/<class>/ with
        path/train/<class>/ or path/clients/<folder>/<class>/, docs/cli.md).
    partition: how the training set is split among the drones, iid | dirichlet | shards |
        location (location needs a dataset with positions: world) | folders (image_folder
        with path/clients/: drone k trains on the k-th client folder in name order, as many
        drones as folders; the other partitions pool the folders).
    dirichlet_alpha (partition dirichlet): concentration α of each class's Dirichlet split
        over the drones; small α gives each drone few classes, large α tends to IID.
    shards_per_client (partition shards): single-class shards dealt to each drone, so the
        number of classes a drone holds.
    test_fraction: held-out share for datasets without a test split (digits, an image_folder
        without test/; with test/, a value other than the default is an error).
    A key that acts only under some partition, dataset, ``online`` or ``topup``
    (DATA_KEY_NEEDS) and is set to a non-default value under another is an error naming both
    keys, not silently ignored.
    max_test_samples: evaluate on at most this many held-out samples (0 = all).
    world_samples: frames rendered from the world (dataset: world).
    online: if true, each round drone k receives Binomial(arrivals_e, arrivals_p) new samples
        from its partition into its capped buffer (OSAFL's arrivals); initial_samples arrive
        before round 1. If false, each drone trains on its whole partition every round.
    arrivals_e (online): trials n of the Binomial(n, p) count of a drone's new samples per round.
    arrivals_p (online): success probability p of that Binomial.
    initial_samples (online): extra samples each drone receives in round 1.
    topup: FedDPQ's per-class top-up (eqs. (1)-(3), fl_uav.learning.topup): each drone adds
        synthetic samples so every class reaches ceil(topup_factor * its largest class count);
        topup_factor: FedDPQ's Delta (Table I: 0.1-0.4), the share of a drone's largest class
        count every class is topped up to. topup_generator: auto (by dataset) |
        augment_dihedral | augment_hflip | augment_shift (label-preserving augmentation, so a
        class the drone has no sample of stays empty). Generation is charged by FedDPQ eqs.
        (33)-(34) (system.gen_cycles_per_sample) when a drone's real data changed since it
        last generated. topup_generator may also be a plug-in ``package.module:Name`` (a
        fl_uav.learning.topup.Generator, fl_uav.plugins; engine only: the fleet's drones
        augment).
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
    topup: bool = False
    topup_factor: float = 0.4
    topup_generator: str = 'auto'

    def __post_init__(self) -> None:
        require_choice('dataset', self.dataset, DATASETS)
        require_choice('partition', self.partition, PARTITIONS)
        if self.dataset == 'image_folder' and not self.path:
            raise ValueError('dataset image_folder needs data.path (a folder of class folders)')
        if self.partition == 'location' and self.dataset != 'world':
            raise ValueError('partition location needs dataset world (samples with positions)')
        if self.partition == 'folders' and self.dataset != 'image_folder':
            raise ValueError('partition folders needs dataset image_folder (with '
                             'path/clients/<folder>/<class>/, one folder per drone)')
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
        if not 0.0 < self.topup_factor <= 1.0:
            raise ValueError(f'data.topup_factor (FedDPQ Delta) must be in (0, 1], got '
                             f'{self.topup_factor}')
        check_generator_name(self.topup_generator)   # a built-in name or module:Name
        self._check_unused_keys()

    def _check_unused_keys(self) -> None:
        """ValueError naming a key set (to a non-default value) where it has no effect."""
        defaults = {f.name: f.default for f in fields(self)}
        for key, (decider, acts_under) in DATA_KEY_NEEDS.items():
            value, setting = getattr(self, key), getattr(self, decider)
            if value != defaults[key] and setting not in acts_under:
                under = ' or '.join(str(v).lower() for v in acts_under)
                raise ValueError(
                    f'data.{key} = {value!r} has no effect with data.{decider} = '
                    f'{str(setting).lower() if isinstance(setting, bool) else repr(setting)} '
                    f'(it acts only with data.{decider} {under}): set data.{decider} or '
                    f'leave data.{key} out')


BACKENDS = ('local', 'ray')
RAY_CLIENTS = ('sgd', 'osafl')
"""learning.client_algorithm values engine.backend ray runs: the vectorizable clients (those
whose ``vectorizable`` is True in fl_uav.learning.client_algorithms; a test keeps the two in
step), with no per-drone state to keep in the workers."""
_RAY_ADDRESS = re.compile(r'^[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}$')


@dataclass(frozen=True)
class EngineConfig:
    """vectorized: train all drones at once (else one after another, the reference path);
    max_clients_per_chunk: memory bound of the vectorized path, drones trained together;
    torch_threads: PyTorch threads per process (with backend ray: per Ray worker, which asks
    Ray for that many CPUs);
    workers: with backend local, threads training chunks of drones at the same time on the
    vectorized path (one per core to use), with backend ray the Ray actors training them;
    results are bit-identical for any value and either backend (the chunks are set by
    max_clients_per_chunk alone, so a fleet that fits one chunk trains on one worker);
    backend: where the drones train: local (this process) | ray (Ray actors on this machine or
    a cluster, fl_uav.engine.ray_backend, needing the ray package, docs/cli.md "Many machines:
    the Ray backend"; rounds.csv as local's but for wall_s; runs the vectorized sgd and osafl
    clients with the built-in stateless compressors, without express, resources.planner or
    data.topup);
    ray_address (backend ray): '' starts a local Ray with workers x torch_threads CPUs for the
    run and stops it after; auto joins the cluster running on this machine (ray start
    --head; Ray's rule: RAY_ADDRESS, else the cluster ray start recorded, else any Ray whose
    GCS runs here); host:port joins the cluster whose head listens there;
    checkpoint_every: rounds between checkpoints (for --resume)."""

    vectorized: bool = True
    max_clients_per_chunk: int = 32
    torch_threads: int = 1
    workers: int = 1
    checkpoint_every: int = 1
    backend: str = 'local'
    ray_address: str = ''

    def __post_init__(self) -> None:
        if min(self.max_clients_per_chunk, self.torch_threads, self.workers,
               self.checkpoint_every) < 1:
            raise ValueError('max_clients_per_chunk, torch_threads, workers, checkpoint_every '
                             'must be >= 1')
        require_choice('backend', self.backend, BACKENDS)
        if self.ray_address and self.backend != 'ray':
            raise ValueError(f'engine.ray_address = {self.ray_address!r} has no effect with '
                             f'engine.backend = {self.backend!r} (it acts only with '
                             f'engine.backend ray): set engine.backend or leave '
                             f'engine.ray_address out')
        if self.ray_address not in ('', 'auto') and not _RAY_ADDRESS.match(self.ray_address):
            raise ValueError(f'engine.ray_address must be empty (a local Ray), auto or '
                             f'host:port (the head of a Ray cluster), got {self.ray_address!r}')

    def build_trainer(self, model, train_config):
        """The vectorized trainer these settings describe (chunks, threads, workers)."""
        from fl_uav.learning.vectorized import VectorizedTrainer

        return VectorizedTrainer(model, train_config, self.max_clients_per_chunk,
                                 self.torch_threads,
                                 workers=self.workers if self.backend == 'local' else 1)


def check_express(config: ExperimentConfig) -> None:
    """Keys that must agree with ``express.enabled`` (each error names the key)."""
    e = config.express
    if not e.enabled:
        return
    want = f'fedex_{e.mode}'
    if config.aggregation.strategy != want:
        raise ValueError(f'aggregation.strategy must be {want} with express.mode {e.mode} '
                         f'(FedEx eqs. (13)-(15)), got {config.aggregation.strategy!r}')
    if config.learning.client_algorithm != 'sgd':
        raise ValueError(f'learning.client_algorithm must be sgd with express.enabled (FedEx '
                         f'eq. (10)), got {config.learning.client_algorithm!r}')
    if config.learning.lr_decay != 1.0:
        raise ValueError(f'learning.lr_decay must be 1.0 with express.enabled, got '
                         f'{config.learning.lr_decay}: the engine decays per server update, '
                         f'and FedEx-Async makes ~K updates per Sync round (FedEx gives no '
                         f'schedule), so Sync and Async would not get the same rate at a time')
    if config.compression.method != 'none':
        raise ValueError(f'compression.method must be none with express.enabled, got '
                         f'{config.compression.method!r}')
    if config.learning.structured_keep != 1.0:
        raise ValueError('learning.structured_keep must be 1.0 with express.enabled')
    if config.data.online or config.data.topup:
        raise ValueError('data.online and data.topup must be false with express.enabled '
                         '(FedEx clients hold fixed data)')
    if e.partition == 'location' and config.data.partition == 'folders':
        raise ValueError('express.partition location replaces data.partition folders (each '
                         'ground client its folder): set express.partition engine')
    if e.num_uavs > config.num_drones:
        raise ValueError(f'express.num_uavs ({e.num_uavs}) must not exceed num_drones (the '
                         f'ground clients, {config.num_drones})')




def check_backend(config: ExperimentConfig) -> None:
    """engine.backend ray runs what its workers can compute without per-drone state and
    without data made on the driver: fail at start, naming the key, for anything else."""
    if config.engine.backend != 'ray':
        return
    why = 'engine.backend ray'
    if config.express.enabled:
        raise ValueError(f'{why} does not run express mode (express.enabled): use engine.'
                         f'backend local')
    if not config.engine.vectorized:
        raise ValueError(f'{why} trains drones with the vectorized trainer: engine.vectorized '
                         f'must be true')
    if config.learning.client_algorithm not in RAY_CLIENTS:
        raise ValueError(f'{why} runs learning.client_algorithm {" or ".join(RAY_CLIENTS)} '
                         f'(the vectorized clients), got '
                         f'{config.learning.client_algorithm!r}: use engine.backend local')
    if config.resources.planner != 'none':
        raise ValueError(f'{why} does not run resources.planner {config.resources.planner} '
                         f'(its knobs and traces live in the driver): use engine.backend '
                         f'local')
    if config.data.topup:
        raise ValueError(f'{why} does not run data.topup (synthetic samples are made in the '
                         f'driver): use engine.backend local')
    method = config.compression.method
    if method == 'lgc' or is_plugin_spec(method):
        raise ValueError(f'{why} runs the built-in stateless compressors (none, qsgd, range, '
                         f'ceoafl), got compression.method {method!r} (per-drone state): use '
                         f'engine.backend local')


def check_resources(config: ExperimentConfig) -> None:
    """The planner's decisions need the procedures that consume them: fail at start, naming
    the keys, instead of silently ignoring a knob."""
    planner = config.resources.planner
    if planner == 'none':
        return
    if config.express.enabled:
        raise ValueError(f'resources.planner {planner} does not run with express.enabled')
    check_planner_procedures(config.resources, config.learning, config.compression,
                             config.aggregation)
    if planner == 'feddpq' and not config.data.topup:
        raise ValueError(f'resources.planner {planner} needs data.topup = True, got False')
    if (planner != 'feddpq' and config.resources.lgc_steps_scale
            in (STEPS_SCALE_AUTO, STEPS_SCALE_ONLINE) and not config.engine.vectorized):
        # the warm-up's (auto) or the probe rounds' (online) trace
        raise ValueError(f'resources.lgc_steps_scale {config.resources.lgc_steps_scale} needs '
                         f'engine.vectorized = True, got False')


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: data, drones, learning, aggregation, system models, engine.

    name: the run's name in its summary and plot legends. seed: the run's random draws (data
    split and partition, sample order, drone distances, drawn participants, packet losses,
    express routes), not the initial model (learning.init_seed). num_drones: drones (with
    express enabled, ground clients). num_rounds: rounds to run (express: server updates).
    express: FedEx UAV express delivery (fl_uav.engine.express); when enabled, num_drones counts
    the ground clients, num_rounds the server updates. resources: per-drone resource
    decisions (:class:`ResourcesConfig`). faults: drones that send poisoned updates
    (:class:`~fl_uav.engine.faults.FaultsConfig`). target_accuracy: summary.json reports the
    fleet's cumulative modelled energy and the rounds to the first round at or above it (0 =
    none).
    """

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
    express: ExpressConfig = field(default_factory=ExpressConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    target_accuracy: float = 0.0

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f'seed must be >= 0, got {self.seed}')
        if not 0.0 <= self.target_accuracy <= 1.0:
            raise ValueError(f'target_accuracy must be in [0, 1], got {self.target_accuracy}')
        if not 1 <= self.num_drones <= 100_000:
            raise ValueError(f'num_drones must be in [1, 100000], got {self.num_drones}')
        if not 1 <= self.num_rounds <= 100_000:
            raise ValueError(f'num_rounds must be in [1, 100000], got {self.num_rounds}')
        self.faults.check(self.num_drones)
        if self.express.enabled and self.faults.poison != 'none':
            raise ValueError(f'faults.poison {self.faults.poison} does not run with '
                             f'express.enabled (FedEx rounds carry running sums, not a '
                             f"drone's own update)")
        check_express(self)
        check_resources(self)
        check_backend(self)
