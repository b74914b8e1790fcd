"""Config of ``fl-uav experiment``: the same schema machinery and learning sections as the fleet.

Files live under config/experiments/ in ROS 2 parameter format (``/**: ros__parameters:``), so
one parser and one validator serve ``ros2 launch``, ``fl-uav sim`` and the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from fl_uav.aggregation.config import AggregationConfig
from fl_uav.compression.compressor import CompressionConfig
from fl_uav.configschema import require_choice
from fl_uav.learning.buffer import BufferConfig
from fl_uav.learning.config import LearningConfig
from fl_uav.learning.topup import check_generator_name
from fl_uav.sim.express import ExpressConfig, check_express

DATASETS = ('digits', 'fashion_mnist', 'image_folder', 'world')
PLANNERS = ('none', 'feddpq', 'lgc_ddpg', 'lgc_fixed', 'lgc_heuristic')
LGC_PLANNERS = ('lgc_ddpg', 'lgc_fixed', 'lgc_heuristic')
STEPS_SCALE_AUTO = 'auto'   # resources.lgc_steps_scale: fit h0 after a warm-up round
STEPS_SCALE_ONLINE = 'online'   # resources.lgc_steps_scale: refit H^beta every few rounds
PARTITIONS = ('iid', 'dirichlet', 'shards', 'location')
FILE_DATASETS = ('fashion_mnist', 'image_folder')   # the datasets data.path points at
SPLIT_DATASETS = ('digits', 'image_folder')   # no test split of their own: data.test_fraction
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
        the dataset's default location; digits ship with scikit-learn, world is rendered).
    partition: how the training set is split among the drones, iid | dirichlet | shards |
        location (location needs a dataset with positions: world).
    dirichlet_alpha (partition dirichlet): concentration α of each class's Dirichlet split
        over the drones; small α gives each drone few classes, large α tends to IID.
    shards_per_client (partition shards): single-class shards dealt to each drone, so the
        number of classes a drone holds.
    test_fraction: held-out share for datasets without a test split (digits, image_folder).
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


@dataclass(frozen=True)
class SystemConfig:
    """The radio and compute models that drive the simulated clock (SI units).

    Uplink: FedDPQ's link (eqs. (14)-(16), fl_uav.netmodel.radio.RadioLink) with bandwidth_hz,
    tx_power_w, interference_w and Rayleigh fading; drone k's distance to the station is drawn
    once, uniformly in [distance_min_m, distance_max_m]. Downlink: the model frame broadcast at
    downlink_rate_bit_s. Compute: FedDPQ eqs. (35)-(36) per SGD step (cpu_freq_hz,
    train_cycles_per_sample); FedDPQ eqs. (33)-(34) per sample generated by the data top-up
    (gen_cycles_per_sample, c0_gen). deadline_s: a drone whose compute + upload time exceeds it
    is late and its update is dropped (0 = no deadline). packet_errors: each upload is lost
    with FedDPQ eq. (16)'s probability q_u(p_u) (Rayleigh expectation, eq. (17)); its energy
    and airtime are spent all the same (off by default: the engine's earlier runs had none).
    Each upload draws one Rayleigh power gain ζ ~ Exp(1) for its whole duration (block fading,
    no retransmission or rate adaptation): a deep fade (ζ of 0.01 happens about once in 100
    uploads) stretches that upload's airtime and energy a hundredfold, and with deadline_s 0 the
    round's simulated time is its slowest drone's; set deadline_s to drop such a drone instead.

    bandwidth_hz: uplink bandwidth. tx_power_w: a drone's transmit power. interference_w:
    interference plus noise power at the station. distance_min_m, distance_max_m: range of
    the drones' distances to the station (each drawn once, uniformly). downlink_rate_bit_s:
    rate of the model broadcast. cpu_freq_hz: a drone's CPU frequency.
    train_cycles_per_sample: CPU cycles to train on one sample. gen_cycles_per_sample: CPU
    cycles to generate one top-up sample.
    """

    bandwidth_hz: float = 1e6
    tx_power_w: float = 0.1
    interference_w: float = 1.5e-8
    distance_min_m: float = 50.0
    distance_max_m: float = 500.0
    downlink_rate_bit_s: float = 20e6
    cpu_freq_hz: float = 1.5e9
    train_cycles_per_sample: float = 2.7e8
    gen_cycles_per_sample: float = 2.2e8
    deadline_s: float = 0.0
    packet_errors: bool = False

    def __post_init__(self) -> None:
        for name in ('bandwidth_hz', 'tx_power_w', 'distance_min_m', 'downlink_rate_bit_s',
                     'cpu_freq_hz', 'train_cycles_per_sample', 'gen_cycles_per_sample'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} must be > 0, got {getattr(self, name)}')
        for name in (f.name for f in fields(self) if f.type == 'float'):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f'{name} must be finite, got {getattr(self, name)}')
        if self.distance_max_m < self.distance_min_m:
            raise ValueError('distance_max_m must be >= distance_min_m')
        if self.interference_w < 0 or self.deadline_s < 0:
            raise ValueError('interference_w and deadline_s must be >= 0')


@dataclass(frozen=True)
class EngineConfig:
    """vectorized: train all drones at once (else one after another, the reference path);
    max_clients_per_chunk: memory bound of the vectorized path, drones trained together;
    torch_threads: PyTorch threads per process;
    workers: threads training chunks of drones at the same time on the vectorized path (one
    per core to use; results are bit-identical for any value; the chunks are still set by
    max_clients_per_chunk alone, so a fleet that fits one chunk runs on one thread);
    checkpoint_every: rounds between checkpoints (for --resume)."""

    vectorized: bool = True
    max_clients_per_chunk: int = 32
    torch_threads: int = 1
    workers: int = 1
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        if min(self.max_clients_per_chunk, self.torch_threads, self.workers,
               self.checkpoint_every) < 1:
            raise ValueError('max_clients_per_chunk, torch_threads, workers, checkpoint_every '
                             'must be >= 1')

    def build_trainer(self, model, train_config):
        """The vectorized trainer these settings describe (chunks, threads, workers)."""
        from fl_uav.learning.vectorized import VectorizedTrainer

        return VectorizedTrainer(model, train_config, self.max_clients_per_chunk,
                                 self.torch_threads, workers=self.workers)


@dataclass(frozen=True)
class ResourcesConfig:
    """Per-drone resource decisions made by a controller (issue 5 item 3; fl_uav.planning).

    planner: none (the configured knobs, the same for every drone) | feddpq (FedDPQ
        Algorithm 2, fl_uav.planning.feddpq_opt: run once before round 1 on the engine's own
        fleet, its per-drone transmit power, top-up factor Δ_u, prune ratio ρ_u and range
        bits δ_u applied every round) | lgc_ddpg | lgc_fixed | lgc_heuristic (LGC §3,
        fl_uav.planning.lgc_control: each drone's policy picks its local steps H and entries
        per channel D_n every round from its measured channel rates; lgc_fixed is LGC without
        DRL, the mid action every round; lgc_heuristic the cheapest-channel-first rule).
    feddpq_*: the optimiser's budget (BCD rounds, trials of the q block and of each vector
        block) and its fallback when one common packet-error target is infeasible (clip |
        error). The engine's system section, partition, model and batch define the fleet.
        feddpq_heterogeneity_label_scale: Z_u² += scale · TV_u² in the convergence model
        (fl_uav.planning.feddpq_opt.ConvergenceConstants; not in the paper, whose Z_u does not
        depend on Δ: 0 = FedDPQ's literal form; the default 400 is that module's).
    lgc_*: each drone's channels: one price (LGC Table 1, J/MB) and one bandwidth (Hz) per
        channel, as many as compression.lgc_channel_entries; lgc_channel_max_entries is D_n^max;
        lgc_max_local_steps is H_max (LGC eq. (10c)); lgc_hover_power_w is charged while the
        drone waits on its round (FedEx eq. (8); 0 = not modelled); lgc_entries_scale is the
        progress surrogate's k0 as a fraction of the model's entries and lgc_steps_scale its h0 in
        steps (fl_uav.planning.lgc_control: progress ∝ (1 − e^(−H/h0)) (1 − e^(−K/k0))), a
        number > 0 or ``auto``: the engine runs round 1 at the mid decision (the warm-up that
        lgc_fixed runs anyway, charged like any round), fits h0 to the training loss of the
        fleet's mean model after each local step of that round (fl_uav.planning.lgc_control.
        fit_steps_scale; capped at LINEAR_STEPS_FACTOR · lgc_max_local_steps), then
        trains the controllers and lets them act from round 2 (fl_uav.sim.resource_planning);
        lgc_ddpg_train_steps: DDPG steps per drone on the surrogate (before round 1, or after
        the warm-up with ``auto``). lgc_steps_scale_min_drop (auto only; 0 = off): the
        warm-up goes on, up to 5 rounds, until the measured loss falls by this fraction of
        its start within the round (a fit to a flatter curve measures noise).
        lgc_steps_scale ``online`` replaces the surrogate's (1 − e^(−H/h0)) with (H / H_max)^β
        refitted during the run: every lgc_refit_rounds rounds (rounds 1, 1 + K, 1 + 2K, ...)
        is a probe round in which one of lgc_probe_groups groups of drones (drone id modulo
        lgc_probe_groups, in turn; 1 = the whole fleet) takes the mid decision and the others
        their controller's; the engine measures the loss of the model the LGC server would
        produce had the group's drones stopped after h = 0..H steps and fits β
        (fl_uav.planning.lgc_control.fit_steps_exponent); after every informative probe each
        drone's DDPG is retrained from scratch on the refitted surrogate
        (lgc_ddpg_train_steps, seeded), or with lgc_finetune_steps > 0 fine-tuned from its
        current weights for that many steps after the first (off by default: an actor
        saturated at one end of its tanh does not move, fl_uav.planning.lgc_control.
        finetune_ddpg).
    lgc_plateau_window (0 = off; engine only, a configured lgc_steps_scale): a plain rule on
        top of the LGC policy (fl_uav.planning.resources.PlateauSwitch): once the best test
        accuracy of the last lgc_plateau_window rounds exceeds the best before them by less
        than lgc_plateau_min_gain (a fraction), every drone takes lgc_plateau_local_steps
        local steps for the rest of the run (its entries per channel stay the policy's).
        With lgc_fixed: "fixed-decision LGC, then H = 1 once the accuracy has plateaued".
    lgc_stall_window (0 = off; engine only): a guard on top of the LGC policy, not latched:
        in every round after one in which the best test accuracy of the last lgc_stall_window
        rounds gains less than lgc_stall_min_gain over the best before them, every drone takes
        the mid decision (what lgc_fixed does) instead of its policy's.

    feddpq_max_bcd_rounds: block-coordinate-descent rounds of the FedDPQ optimiser.
    feddpq_q_trials: trials of its q block. feddpq_block_trials: trials of each vector block.
    feddpq_fallback: clip | error, when one common packet-error target is infeasible.
    lgc_channel_energy_j_per_mb: each channel's price in J per MB sent (LGC Table 1).
    lgc_channel_bandwidth_hz: each channel's bandwidth in Hz.
    lgc_channel_max_entries: D_n^max, the most entries a drone may send on one channel.
    lgc_max_local_steps: H_max, the most local steps a policy may choose (LGC eq. (10c)).
    lgc_hover_power_w: power charged while a drone waits on its round (0 = not modelled).
    lgc_entries_scale: k0 of the progress surrogate, a fraction of the model's entries.
    lgc_steps_scale: h0 of the progress surrogate in local steps, a number > 0, ``auto``
        (fitted after a warm-up round) or ``online`` (refitted as (H / H_max)^β during the run).
    lgc_ddpg_train_steps: DDPG steps per drone on the surrogate.
    lgc_steps_scale_min_drop (``auto`` only; 0 = off): loss drop, as a fraction of its start,
        the warm-up waits for (up to 5 rounds) before it fits h0.
    lgc_refit_rounds (``online``): rounds between probe rounds, which refit β.
    lgc_finetune_steps (``online``; 0 = off): DDPG steps fine-tuning each drone's policy after
        a refit, instead of retraining it from scratch.
    lgc_probe_groups (``online``): groups of drones that take turns probing (1 = the whole
        fleet).
    lgc_plateau_min_gain: accuracy gain (a fraction) below which lgc_plateau_window sees a
        plateau.
    lgc_plateau_local_steps: local steps every drone takes once the plateau is reached.
    lgc_stall_min_gain: accuracy gain (a fraction) below which lgc_stall_window sees a stall.
    """

    planner: str = 'none'
    feddpq_max_bcd_rounds: int = 2
    feddpq_q_trials: int = 5
    feddpq_block_trials: int = 20
    feddpq_fallback: str = 'clip'
    feddpq_heterogeneity_label_scale: float = 400.0
    lgc_channel_energy_j_per_mb: tuple[float, ...] = (1296.0, 2851.2, 7128.0)
    lgc_channel_bandwidth_hz: tuple[float, ...] = (1e6, 5e6, 20e6)
    lgc_channel_max_entries: int = 6000
    lgc_max_local_steps: int = 10
    lgc_hover_power_w: float = 20.0
    lgc_entries_scale: float = 0.02
    lgc_steps_scale: float | str = 3.0
    lgc_ddpg_train_steps: int = 600
    lgc_steps_scale_min_drop: float = 0.0
    lgc_refit_rounds: int = 5
    lgc_finetune_steps: int = 0
    lgc_probe_groups: int = 4
    lgc_plateau_window: int = 0
    lgc_plateau_min_gain: float = 0.01
    lgc_plateau_local_steps: int = 1
    lgc_stall_window: int = 0
    lgc_stall_min_gain: float = 0.01

    def __post_init__(self) -> None:
        require_choice('resources.planner', self.planner, PLANNERS)
        require_choice('resources.feddpq_fallback', self.feddpq_fallback, ('clip', 'error'))
        for name in ('feddpq_max_bcd_rounds', 'feddpq_q_trials', 'feddpq_block_trials',
                     'lgc_channel_max_entries', 'lgc_max_local_steps', 'lgc_ddpg_train_steps',
                     'lgc_refit_rounds', 'lgc_probe_groups'):
            if getattr(self, name) < 1:
                raise ValueError(f'resources.{name} must be >= 1, got {getattr(self, name)}')
        if not 0 <= self.feddpq_heterogeneity_label_scale < math.inf:
            raise ValueError(f'resources.feddpq_heterogeneity_label_scale must be finite and '
                             f'>= 0, got '
                             f'{self.feddpq_heterogeneity_label_scale}')
        prices, bandwidths = self.lgc_channel_energy_j_per_mb, self.lgc_channel_bandwidth_hz
        if not prices or len(prices) != len(bandwidths):
            raise ValueError(f'resources.lgc_channel_energy_j_per_mb and '
                             f'lgc_channel_bandwidth_hz need one value per channel, got '
                             f'{list(prices)} and {list(bandwidths)}')
        if (any(not 0 <= p < math.inf for p in prices)
                or any(not 0 < b < math.inf for b in bandwidths)):
            raise ValueError(f'resources.lgc_channel_energy_j_per_mb must be finite and >= 0 '
                             f'J/MB and lgc_channel_bandwidth_hz finite and > 0 Hz, got '
                             f'{list(prices)} and {list(bandwidths)}')
        if not 0 <= self.lgc_hover_power_w < math.inf or not 0 < self.lgc_entries_scale <= 1:
            raise ValueError('resources.lgc_hover_power_w must be finite and >= 0 and '
                             'lgc_entries_scale in (0, 1]')
        if self.lgc_finetune_steps < 0:
            raise ValueError(f'resources.lgc_finetune_steps must be >= 0, got '
                             f'{self.lgc_finetune_steps}')
        if not 0.0 <= self.lgc_steps_scale_min_drop < 1.0:
            raise ValueError(f'resources.lgc_steps_scale_min_drop must be in [0, 1), got '
                             f'{self.lgc_steps_scale_min_drop}')
        if self.lgc_plateau_window < 0 or not 0.0 <= self.lgc_plateau_min_gain <= 1.0:
            raise ValueError(f'resources.lgc_plateau_window must be >= 0 and '
                             f'lgc_plateau_min_gain in [0, 1], got {self.lgc_plateau_window}, '
                             f'{self.lgc_plateau_min_gain}')
        if self.lgc_stall_window < 0 or not 0.0 <= self.lgc_stall_min_gain <= 1.0:
            raise ValueError(f'resources.lgc_stall_window must be >= 0 and lgc_stall_min_gain '
                             f'in [0, 1], got {self.lgc_stall_window}, {self.lgc_stall_min_gain}')
        if self.lgc_stall_window > 0 and not self.planner.startswith('lgc'):
            raise ValueError(f'resources.lgc_stall_window needs an lgc_* planner, got '
                             f'{self.planner!r}')
        if not 1 <= self.lgc_plateau_local_steps <= self.lgc_max_local_steps:
            raise ValueError(f'resources.lgc_plateau_local_steps must be in [1, '
                             f'lgc_max_local_steps = {self.lgc_max_local_steps}], got '
                             f'{self.lgc_plateau_local_steps}')
        h0 = self.lgc_steps_scale
        number = not isinstance(h0, str) and math.isfinite(h0) and h0 > 0
        if h0 not in (STEPS_SCALE_AUTO, STEPS_SCALE_ONLINE) and not number:
            raise ValueError(f'resources.lgc_steps_scale must be a number > 0, '
                             f'{STEPS_SCALE_AUTO!r} or {STEPS_SCALE_ONLINE!r}, got {h0!r}')
        if self.lgc_plateau_window > 0 and (not self.planner.startswith('lgc')
                                            or isinstance(h0, str)):
            raise ValueError(f'resources.lgc_plateau_window needs an lgc_* planner with a '
                             f'configured lgc_steps_scale (a number), got planner '
                             f'{self.planner!r}, lgc_steps_scale {h0!r}')


def check_planner_procedures(resources: ResourcesConfig, learning: LearningConfig,
                             compression: CompressionConfig,
                             aggregation: AggregationConfig) -> None:
    """The procedures a planner's knobs drive must be configured (the engine and the fleet):
    FedDPQ's ρ_u needs the feddpq client, δ_u the range quantizer, S the feddpq strategy;
    LGC's H the sgd client (dense model) and D_n the lgc compressor with one entry count per
    priced channel. Fails naming the key and the value it needs."""
    planner = resources.planner
    if planner == 'none':
        return
    if planner == 'feddpq':
        # The feddpq client runs plain SGD (FedDPQ eq. (5)): listed too, so one message names
        # every key to set (LearningConfig checks them once the client is feddpq).
        need = {'learning.client_algorithm': (learning.client_algorithm, 'feddpq'),
                'learning.optimizer': (learning.optimizer, 'sgd'),
                'learning.momentum': (learning.momentum, 0.0),
                'learning.weight_decay': (learning.weight_decay, 0.0),
                'compression.method': (compression.method, 'range'),
                'aggregation.strategy': (aggregation.strategy, 'feddpq')}
    else:
        need = {'learning.client_algorithm': (learning.client_algorithm, 'sgd'),
                'compression.method': (compression.method, 'lgc'),
                'learning.structured_keep': (learning.structured_keep, 1.0)}
        channels = len(resources.lgc_channel_energy_j_per_mb)
        if len(compression.lgc_channel_entries) != channels:
            raise ValueError(f'resources.planner {planner}: compression.lgc_channel_entries has '
                             f'{len(compression.lgc_channel_entries)} channels, '
                             f'resources.lgc_channel_energy_j_per_mb {channels}')
    unmet = [(f'{key} = {wanted!r} (got {value!r})', f'--set {key}={wanted}')
             for key, (value, wanted) in need.items() if value != wanted]
    if planner == 'feddpq' and aggregation.num_selected < 1:   # S, FedDPQ eq. (7)'s draws
        unmet.append((f'aggregation.num_selected >= 1 (got {aggregation.num_selected})',
                      '--set aggregation.num_selected=1'))
    if unmet:
        raise ValueError(f'resources.planner {planner} needs '
                         + ', '.join(text for text, _ in unmet) + ': '
                         + ' '.join(fix for _, fix in unmet))


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
    express: FedEx UAV express delivery (fl_uav.sim.express); when enabled, num_drones counts
    the ground clients, num_rounds the server updates. resources: per-drone resource
    decisions (:class:`ResourcesConfig`). target_accuracy: summary.json reports the fleet's
    cumulative modelled energy and the rounds to the first round at or above it (0 = none).
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
        check_express(self)
        check_resources(self)
