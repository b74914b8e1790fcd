"""The experiment engine: the fleet's learning at research scale, in process, on a simulated clock.

It runs the same algorithm code as the ROS nodes (models, local training, the Strategy classes,
the wire codec's frame sizes) over many simulated drones. Every round: data arrives (online
mode) → every drone trains from the global model (all at once, vectorised over drones, or one
after another as the reference) → the simulated clock advances by each drone's compute time
(FedDPQ eqs. (35)-(36)) and upload airtime over a Rayleigh-faded link (eqs. (14)-(15)) → late
drones are dropped at the deadline → the Strategy aggregates → the global model is evaluated.
With ``resources.planner`` (fl_uav.planning.round_resources) each drone's knobs come from a
controller: FedDPQ's plan (transmit power, top-up Δ_u, pruning ρ_u, range bits δ_u) or LGC's
per-round policy (local steps H, entries per channel D_n over priced channels).

Results go to DIR/rounds.csv (one row per round, appended as it happens), DIR/summary.json and
plots; DIR/checkpoint.npz after every ``checkpoint_every`` rounds makes ``--resume`` possible.
All randomness is derived from (seed, round, purpose, drone) (:class:`Stream`,
:func:`stream_seed`), so a resumed run equals an uninterrupted one and no two purposes or drones
share a random stream, whatever the fleet size.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import math
import operator
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_uav.aggregation import ClientUpdate, Strategy
from fl_uav.aggregation._common import LOCAL_LR_KEY
from fl_uav.aggregation.feddpq import DRAWS_KNOB
from fl_uav.aggregation.fedprox import PROXIMAL_MU_KNOB
from fl_uav.aggregation.robust import NormClip
from fl_uav.aggregation.scaffold import Scaffold
from fl_uav.aggregation.strategy import (
    AggregationError,
    checked_aggregate,
    checked_configure_round,
)
from fl_uav.compression.codec import encoded_size
from fl_uav.compression.compressor import Compressor, NoCompression, decode_update_frame
from fl_uav.compression.config import PlannedCompressors
from fl_uav.compression.errors import FrameError, NonFiniteValues
from fl_uav.configschema import to_flat
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.express import EngineExpress, plan_express
from fl_uav.engine.resources import build_round_resources, write_knobs
from fl_uav.learning import partition
from fl_uav.learning.buffer import retained_positions
from fl_uav.learning.client_algorithms import (
    LOCAL_STEPS_KNOB,
    SERVER_CONTROL_KNOB,
    ClientAlgorithm,
    ClientResult,
    local_steps_result,
)
from fl_uav.learning.datasets import (
    Dataset,
    load_digits,
    load_fashion_mnist,
    load_image_folder,
    train_test_split_stratified,
)
from fl_uav.learning.divergence import DivergenceMonitor
from fl_uav.learning.models import build_model
from fl_uav.learning.pruning import pruned_training_model
from fl_uav.learning.topup import TOPUP_SEED_TAG, build_generator, top_up
from fl_uav.learning.training import NonFiniteLossError, TrainConfig, evaluate
from fl_uav.learning.vectorized import VectorizedTrainer, epoch_steps
from fl_uav.learning.weights import Weights, architecture_fingerprint, get_weights, set_weights
from fl_uav.netmodel.compute import CpuDevice
from fl_uav.netmodel.radio import RadioLink
from fl_uav.planning.config import KNOBS_FILE
from fl_uav.planning.feddpq_opt import BITS_KNOB, TOPUP_KNOB, TX_POWER_KNOB
from fl_uav.planning.lgc_control import ENTRIES_KNOB
from fl_uav.planning.resources import merge_knobs
from fl_uav.planning.round_resources import STEPS_SCALE_EVAL_SAMPLES, STEPS_SCALE_SAMPLE_TAG
from fl_uav.plugins import (
    attribute_snapshot,
    changed_attributes,
    is_plugin_spec,
    overrides_state_dict,
    plugin_sources,
    raised_at,
    seeded_global_random,
)
from fl_uav.streams import Stream, stream_rng, stream_seed

ROUNDS_FILE = 'rounds.csv'
SUMMARY_FILE = 'summary.json'
CHECKPOINT_FILE = 'checkpoint.npz'
CONFIG_FILE = 'config.json'
GIT_TIMEOUT_S = 5.0
"""Longest wait for git when a summary records the source commit."""
EXPRESS_FILE = 'express.json'
ROUND_COLUMNS = ('round', 'accuracy', 'loss', 'participants', 'late', 'lost', 'uplink_bytes',
                 'downlink_bytes', 'sim_round_s', 'sim_time_s', 'energy_mean_j',
                 'energy_max_j', 'energy_total_j', 'train_loss_mean', 'wall_s')
_INT_COLUMNS = ('round', 'participants', 'late', 'lost')
_BYTE_COLUMNS = ('uplink_bytes', 'downlink_bytes')    # ints, written as ints again on resume


class ExperimentError(RuntimeError):
    """The run cannot go on (e.g. a non-finite loss); partial results are on disk."""


@dataclass(frozen=True)
class TrainTestData:
    """Float32 N×C×H×W inputs in [0, 1] and int64 labels, split into train and test."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    train_positions_m: np.ndarray | None = None


def _as_inputs(dataset: Dataset) -> np.ndarray:
    return np.ascontiguousarray(dataset.as_float32(), np.float32)


def load_experiment_data(config: ExperimentConfig) -> TrainTestData:
    """Load and split the configured dataset (no downloads: packages and files only)."""
    data = config.data
    if data.dataset == 'fashion_mnist':
        kwargs = {'root': data.path} if data.path else {}
        train, test = (load_fashion_mnist(split='train', **kwargs),
                       load_fashion_mnist(split='test', **kwargs))
    elif data.dataset == 'world':
        return _world_data(config)
    else:
        full = (load_digits() if data.dataset == 'digits' else
                load_image_folder(data.path, image_px=config.learning.input_px))
        train, test = train_test_split_stratified(full, data.test_fraction,
                                                  stream_seed(config.seed, 0, Stream.SPLIT))
    test_x, test_y = _as_inputs(test), test.labels
    if data.max_test_samples and len(test_y) > data.max_test_samples:
        keep = stream_rng(config.seed, 0, Stream.TEST_SUBSET).permutation(len(test_y))
        keep = np.sort(keep[:data.max_test_samples])
        test_x, test_y = test_x[keep], test_y[keep]
    return TrainTestData(_as_inputs(train), train.labels, test_x, test_y, train.num_classes)


def _world_data(config: ExperimentConfig) -> TrainTestData:
    from fl_uav.fleet.config import FleetConfig
    from fl_uav.fleet.world_setup import map_labeler, world_map
    from fl_uav.world.camera import AerialRenderer
    from fl_uav.world.dataset import heldout_set, render_dataset, sample_poses, to_model_input
    from fl_uav.world.landcover import CLASS_NAMES

    fleet = FleetConfig()
    world = world_map(fleet.world)
    rng = stream_rng(config.seed, 0, Stream.WORLD_DATA)
    poses = sample_poses(world, config.data.world_samples, rng)
    renderer = AerialRenderer(world, fleet.camera, seed=config.seed)   # its stream unused:
    # render_dataset passes ``rng`` (the poses' stream) to every frame
    images, labels = render_dataset(world, renderer, map_labeler(fleet.world, fleet.camera),
                                    poses, rng)
    test_images, test_labels = heldout_set(world, fleet.camera)
    px = config.learning.input_px
    return TrainTestData(to_model_input(images, px), labels, to_model_input(test_images, px),
                         np.asarray(test_labels), len(CLASS_NAMES), poses[:, :2])


def partition_data(config: ExperimentConfig, data: TrainTestData) -> list[np.ndarray]:
    """Indices of each drone's share of the training set."""
    k, seed, d = config.num_drones, stream_seed(config.seed, 0, Stream.PARTITION), config.data
    if d.partition == 'iid':
        return partition.iid(data.train_y, k, seed)
    if d.partition == 'dirichlet':
        return partition.dirichlet(data.train_y, k, d.dirichlet_alpha, seed,
                                   min_size=min(10, len(data.train_y) // k))
    if d.partition == 'shards':
        return partition.label_shards(data.train_y, k, d.shards_per_client, seed)
    return partition.by_location(data.train_positions_m, k, seed)


def _all_finite(array: np.ndarray) -> bool:
    """No NaN or ±inf in ``array``: its float64 sum is finite exactly then (float32 values
    cannot overflow a float64 sum; NaN and inf propagate), one pass without a mask array."""
    return math.isfinite(float(np.sum(array, dtype=np.float64)))


class ExperimentEngine:
    """Runs an :class:`ExperimentConfig` and writes its results into ``out_dir``."""

    def __init__(self, config: ExperimentConfig, out_dir: Path,
                 data: TrainTestData | None = None) -> None:
        self.config = config
        self.out_dir = Path(out_dir)
        # FedEx: CARP is solved from the config alone, before the dataset loads, so an
        # infeasible plan (e.g. a budget below one tour) is reported at once.
        express_layout = plan_express(config) if config.express.enabled else None
        self.data = data if data is not None else load_experiment_data(config)
        self.parts = partition_data(config, self.data)
        sample_shape = self.data.train_x.shape[1:]
        self.model = build_model(config.learning.model, self.data.num_classes,
                                 input_px=sample_shape[-1], seed=config.learning.init_seed,
                                 in_channels=sample_shape[0])
        self.strategy = config.aggregation.build(config.num_drones, seed=config.seed)
        self.train_config = config.learning.train_config()
        self.link = RadioLink(bandwidth_hz=config.system.bandwidth_hz,
                              tx_power_w=config.system.tx_power_w,
                              interference_w=config.system.interference_w)
        self.cpu = CpuDevice(cpu_freq_hz=config.system.cpu_freq_hz,
                             train_cycles_per_sample=config.system.train_cycles_per_sample,
                             gen_cycles_per_sample=config.system.gen_cycles_per_sample)
        rng = stream_rng(config.seed, 0, Stream.DISTANCES)
        self.distance_m = rng.uniform(config.system.distance_min_m,
                                      config.system.distance_max_m, config.num_drones)
        self.weights: Weights = get_weights(self.model)
        self.shapes = {n: w.shape for n, w in self.weights.items()}
        self.fingerprint = architecture_fingerprint(self.weights)
        # FedEx express delivery: data assigned to the placed clients, runtime on the plan.
        self.express = (EngineExpress(config, self.data.train_y, self.data.num_classes,
                                      self.parts, self.weights, express_layout)
                        if express_layout is not None else None)
        if self.express is not None:
            self.parts = self.express.parts
        c = config.compression
        c.check_model_dim(sum(int(w.size) for w in self.weights.values()))   # fail at start
        self.compressor = c.build()
        # Plug-ins (module:Name specs) whose state_dict is the base's: their attributes as
        # built, so a checkpoint can tell whether they kept state it cannot hold.
        self._plugin_snapshots = _plugin_snapshots(config, self.strategy, self.compressor)
        # Per-drone state (SCAFFOLD's c_k, LGC's residual): one instance per drone, made on use.
        self._clients: dict[int, ClientAlgorithm] = {}
        self._compressors: dict[int, Compressor] = {}
        self._worker = copy.deepcopy(self.model)   # the model the client algorithms overwrite
        # All drones at once when the client computes what the vectorised trainer does.
        self._vectorized = (config.engine.vectorized
                            and config.learning.build_client().vectorizable)
        self.round_index = 0
        self.sim_time_s = 0.0
        self.last_round_drones: dict[int, dict[str, float]] = {}
        self.buffers: list[np.ndarray] = [np.zeros(0, np.int64) for _ in self.parts]
        self.consumed = np.zeros(config.num_drones, np.int64)
        self.topup_generator = (build_generator(config.data.topup_generator, 'chw',
                                                config.data.dataset)
                                if config.data.topup else None)
        self.topup_sources = [''] * config.num_drones   # what each drone last generated from
        self._trainer = (config.engine.build_trainer(self.model, self.train_config)
                         if config.engine.vectorized else None)
        self._planned = PlannedCompressors(config.compression)   # FedDPQ's δ_u, LGC's D_n
        # Per-drone resource decisions (config.resources): FedDPQ's plan is made here, once.
        down_s = 8 * encoded_size(self.weights, {'round': 1}) / config.system.downlink_rate_bit_s
        self.resources = build_round_resources(self, down_s)

    # --- data ----------------------------------------------------------------------------
    def _client_indices(self, round_index: int) -> list[np.ndarray]:
        """What each drone trains on this round (whole partition, or its online buffer)."""
        d = self.config.data
        if not d.online:
            return self.parts
        rng = stream_rng(self.config.seed, round_index, Stream.ARRIVALS)
        capacity = self.config.buffer.capacity_samples
        for k, part in enumerate(self.parts):
            new = rng.binomial(d.arrivals_e, d.arrivals_p)
            if round_index == 1:
                new += d.initial_samples
            start = int(self.consumed[k])
            fresh = part[start:start + new]
            self.consumed[k] += len(fresh)
            merged = np.concatenate([self.buffers[k], fresh])
            labels = self.data.train_y
            self.buffers[k] = merged[retained_positions(   # the onboard buffer's own rule
                labels[self.buffers[k]], labels[fresh], capacity, self.config.buffer.policy)]
        return self.buffers

    def _training_data(self, k: int, indices: np.ndarray, topup_factor: float | None = None
                       ) -> tuple[np.ndarray, np.ndarray, int]:
        """Drone k's (inputs, labels) this round, and how many samples to charge as generated.

        With data.topup, FedDPQ eqs. (1)-(3) add synthetic samples to the drone's real ones.
        They are made afresh each round from a per-drone seed, so they depend only on the real
        data: unchanged data give the same synthetic set (FedDPQ's one-time generation), and a
        resumed run the same set as an uninterrupted one. Generation is charged (FedDPQ eqs.
        (33)-(34)) only when the real data differ from those the drone last generated from.
        ``topup_factor``: the drone's own Δ_u (a planner's knob), else data.topup_factor.
        """
        x, y = self.data.train_x[indices], self.data.train_y[indices]
        if self.topup_generator is None:
            return x, y, 0
        rng = np.random.default_rng(np.random.SeedSequence([self.config.seed, TOPUP_SEED_TAG, k]))
        factor = self.config.data.topup_factor if topup_factor is None else float(topup_factor)
        made = top_up(x, y, self.data.num_classes, factor, self.topup_generator, rng)
        source = hashlib.blake2b(np.ascontiguousarray(indices, np.int64).tobytes(),
                                 digest_size=8).hexdigest()
        charged = made.generated_total if source != self.topup_sources[k] else 0
        self.topup_sources[k] = source
        return np.concatenate([x, made.images]), np.concatenate([y, made.labels]), charged

    # --- one round -----------------------------------------------------------------------
    def _plugin_fault(self, where: str, key: str, fault: str) -> ExperimentError:
        """The run stops on a strategy's or compressor's fault: where, which key's spec, what;
        the rounds (or FedEx updates) before are kept."""
        spec = operator.attrgetter(key)(self.config)
        return ExperimentError(f'{where}: {key} {spec!r}: {fault}; '
                               f'the {where.split()[0]}s before are in {self.out_dir} '
                               f'(--resume goes on from its last checkpoint)')

    def run_round(self) -> dict[str, Any]:
        """Train, time, aggregate and evaluate one round; returns its rounds.csv row.

        numpy's and Python's global random generators are seeded from (seed, round) for the
        round and put back after it: a plug-in that draws from them (``np.random.normal``)
        instead of its ``rng`` or ``seed`` still gives the same run for the same seed, and a
        resumed run the uninterrupted one's rounds."""
        with seeded_global_random(stream_seed(self.config.seed, self.round_index + 1,
                                              Stream.GLOBAL_RANDOM)):
            return self._run_round()

    def _run_round(self) -> dict[str, Any]:
        wall_start = time.perf_counter()
        r = self.round_index + 1
        if self.express is not None:
            return self._express_round(r, wall_start)
        indices = self._client_indices(r)
        active = [k for k, idx in enumerate(indices)
                  if len(idx) >= self.config.learning.min_samples_to_train]
        lr = self.config.learning.lr * self.config.learning.lr_decay ** (r - 1)
        try:
            knobs = checked_configure_round(self.strategy, r, active)
        except AggregationError as exc:
            raise self._plugin_fault(f'round {r}', 'aggregation.strategy', str(exc)) from exc
        mu = max((float(k.get(PROXIMAL_MU_KNOB, 0.0)) for k in knobs.values()), default=0.0)
        # Strategies that select drones (FedDPQ's draws) leave the others idle this round.
        active = [k for k in active if knobs.get(k, {}).get(DRAWS_KNOB, 1) > 0]
        # the planner's per-drone knobs (config.resources; none: no knobs)
        knobs = merge_knobs(knobs, self.resources.knobs(r, active))
        self.resources.record(r, knobs)
        mixed = {k: self._training_data(k, indices[k], knobs.get(k, {}).get(TOPUP_KNOB))
                 for k in active}   # (x, y, generated)
        client_data = [mixed[k][:2] for k in active]
        seeds = [stream_seed(self.config.seed, r, Stream.BATCHES, k) for k in active]
        config = dataclasses.replace(self.train_config, lr=lr, proximal_mu=mu)
        results = self._train_clients(r, active, client_data, seeds, config, knobs)
        if self.resources.wants_trace(r):   # lgc_steps_scale auto / online: the measurement
            self.resources.observe_trace(
                r, self._compressed_trace_losses(active, client_data, knobs,
                                                 self.resources.probe_drones(r))
                if self.resources.online else self._trace_losses(client_data))
        updates, times, energies, losses, uplink, lost = [], [], [], [], 0, 0
        self.last_round_drones: dict[int, dict[str, float]] = {}   # per drone, for inspection
        rng = stream_rng(self.config.seed, r, Stream.LINK)
        per_rng = stream_rng(self.config.seed, r, Stream.PACKET_ERRORS)
        system = self.config.system
        hover_w = self.resources.hover_power_w
        down_bits = 8 * encoded_size(self.weights, {'round': r})
        down_s = down_bits / self.config.system.downlink_rate_bit_s
        late = []
        batch = self.config.learning.batch_size   # FedDPQ eqs. (35)-(36): one dense SGD step;
        step_s = float(self.cpu.train_time_s(batch, 0.0))    # the client's relative cost
        step_j = float(self.cpu.train_energy_j(batch, 0.0))  # multiplies it per drone
        for k, result in zip(active, results):
            loss = float(result.mean_loss)
            if not math.isfinite(loss) or not all(_all_finite(v) for v in result.delta.values()):
                raise ExperimentError(f'round {r}, drone {k}: non-finite training loss '
                                      f'({loss}); partial results are in {self.out_dir}')
            knob = knobs.get(k, {})
            up_bytes, delta, channel_bytes = self._compress(k, r, result, knob)
            up_bits = 8 * up_bytes
            power_w = float(knob.get(TX_POWER_KNOB, system.tx_power_w))   # FedDPQ's p_u
            if channel_bytes is not None:   # LGC's channels: eq. (15b) with Table 1 prices
                up_s, comm_j = self.resources.upload(k, channel_bytes)
            else:                           # FedDPQ eqs. (14), (37)-(38)
                rate = float(self.link.sample_rate_bit_s(self.distance_m[k], rng,
                                                         tx_power_w=power_w))
                up_s = up_bits / max(rate, 1e-9)
                comm_j = power_w * up_s
            steps, dense_steps = result.steps, result.compute_dense_steps
            generated = mixed[k][2]   # FedDPQ eqs. (33)-(34): nothing generated, nothing spent
            gen_s = float(self.cpu.gen_time_s(generated)) if generated else 0.0
            gen_j = float(self.cpu.gen_energy_j(generated)) if generated else 0.0
            total_s = down_s + (dense_steps * step_s + gen_s) + up_s
            energy = (dense_steps * step_j + gen_j
                      + comm_j + hover_w * total_s)                  # hover: FedEx eq. (8)
            energies.append(energy)
            self.last_round_drones[k] = {'energy_j': energy, 'uplink_bytes': up_bytes,
                                         'steps': steps, 'upload_s': up_s}
            deadline = self.config.system.deadline_s
            if deadline and total_s > deadline:
                late.append(k)
                times.append(deadline)
                self._client(k).upload_lost()      # what never arrived must not change state
                self._compressor(k).upload_lost()
                continue
            times.append(total_s)
            if system.packet_errors and per_rng.random() < float(   # FedDPQ eqs. (16)-(17)
                    self.link.packet_error_prob(self.distance_m[k], power_w)):
                lost += 1
                self._client(k).upload_lost()
                self._compressor(k).upload_lost()
                continue
            losses.append(loss)
            uplink += up_bits // 8
            counts = np.bincount(mixed[k][1], minlength=self.data.num_classes)
            # η̃ for every client (the 2ceoafl strategy also pairs with sgd, osafl, ...);
            # the 2ceoafl client reports the same value in its metrics (2CEOAFL eq. (13)).
            updates.append(ClientUpdate(sender=k, round_index=r, delta=delta,
                                        num_samples=len(mixed[k][1]),
                                        metrics={'steps': steps, LOCAL_LR_KEY: lr,
                                                 'class_counts': counts.tolist(),
                                                 **result.metrics}))
        try:
            aggregated = checked_aggregate(self.strategy, r, self.weights, updates)
        except AggregationError as exc:
            raise self._plugin_fault(f'round {r}', 'aggregation.strategy', str(exc)) from exc
        self.weights = aggregated.weights
        set_weights(self.model, self.weights)
        accuracy, test_loss = evaluate(self.model, self.data.test_x, self.data.test_y)
        self.resources.observe_accuracy(r, accuracy)   # resources.lgc_plateau_* / lgc_stall_*
        round_s = max(times) if times else down_s
        self.sim_time_s += round_s
        self.round_index = r
        return {
            'round': r, 'accuracy': accuracy, 'loss': test_loss,
            'participants': len(updates), 'late': len(late), 'lost': lost,
            'uplink_bytes': uplink,
            'downlink_bytes': (down_bits // 8) * len(active), 'sim_round_s': round_s,
            'sim_time_s': self.sim_time_s,
            'energy_mean_j': float(np.mean(energies)) if energies else 0.0,
            'energy_max_j': float(np.max(energies)) if energies else 0.0,
            'energy_total_j': float(np.sum(energies)),   # every drone that trained
            'train_loss_mean': float(np.mean(losses)) if losses else math.nan,
            'wall_s': time.perf_counter() - wall_start,
        }

    def _express_round(self, r: int, wall_start: float) -> dict[str, Any]:
        """One FedEx server update (fl_uav.engine.express): a round in Sync, a landing in Async."""
        lr = self.config.learning.lr * self.config.learning.lr_decay ** (r - 1)
        try:
            fields = self.express.run_update(self, dataclasses.replace(self.train_config, lr=lr))
        except (NonFiniteLossError, FloatingPointError) as exc:
            raise ExperimentError(f'update {r}: non-finite training loss ({exc}); partial '
                                  f'results are in {self.out_dir}') from exc
        except AggregationError as exc:   # as _round's: the rule broke the contract
            raise self._plugin_fault(f'update {r}', 'aggregation.strategy', str(exc)) from exc
        self.weights = fields.pop('weights')
        set_weights(self.model, self.weights)
        accuracy, test_loss = evaluate(self.model, self.data.test_x, self.data.test_y)
        self.sim_time_s = fields['sim_time_s']
        self.round_index = r
        return {'round': r, 'accuracy': accuracy, 'loss': test_loss, **fields,
                'wall_s': time.perf_counter() - wall_start}

    # --- clients and their uploads ---------------------------------------------------------
    def _client(self, drone: int) -> ClientAlgorithm:
        """Drone ``drone``'s client algorithm instance (it holds that drone's state)."""
        if drone not in self._clients:
            self._clients[drone] = self.config.learning.build_client()
        return self._clients[drone]

    def _compressor(self, drone: int) -> Compressor:
        """The shared compressor, or the drone's own when the method keeps state (lgc) or may
        (a plug-in)."""
        method = self.config.compression.method
        if method != 'lgc' and not is_plugin_spec(method):
            return self.compressor
        if drone not in self._compressors:
            self._compressors[drone] = self.config.compression.build()
        return self._compressors[drone]

    def _train_clients(self, r: int, active: list[int], client_data, seeds: list[int],
                       config: TrainConfig, knobs: dict[int, dict]) -> list[ClientResult]:
        """Run every active drone's client algorithm on this round's global model.

        With ``engine.vectorized``, a ``vectorizable`` client (sgd; osafl, with its random
        κ_u^t from ``vectorized_steps``) trains all drones at once (fl_uav.learning.vectorized);
        every other algorithm runs drone by drone on its instance.
        """
        if self._vectorized:   # a planner's H (knob) per drone, else the client's own count
            steps = [knobs.get(k, {}).get(LOCAL_STEPS_KNOB) for k in active]
            steps = [int(s) if s is not None else self._client(k).vectorized_steps(seed)
                     for k, s, seed in zip(active, steps, seeds)]
            if all(s is None for s in steps):
                steps = None
            else:   # mixed: the others take the steps their epochs would (the same batches)
                steps = [s if s is not None else epoch_steps(config, len(labels))
                         for s, (_, labels) in zip(steps, client_data)]
            trace = ([len(labels) for _, labels in client_data] if self.resources.wants_trace(r)
                     else None)
            return self._train_vectorized(r, active, client_data, seeds, config, steps, trace,
                                          trace is not None and self.resources.online)
        shared = {}
        if isinstance(self.strategy, Scaffold):   # c travels with the model (in process)
            shared[SERVER_CONTROL_KNOB] = self.strategy.server_control(self.weights)
        results = []
        for k, (x, y), seed in zip(active, client_data, seeds):
            try:
                results.append(self._client(k).train(self._worker, self.weights, x, y, config,
                                                     seed, {**knobs.get(k, {}), **shared}))
            except NonFiniteLossError as exc:
                raise ExperimentError(f'round {r}, drone {k}: non-finite training loss ({exc});'
                                      f' partial results are in {self.out_dir}') from exc
        return results

    def _trace_sample(self, client_data) -> tuple[np.ndarray, np.ndarray]:
        """The seeded sample of the drones' own training data the traces are evaluated on."""
        x = np.concatenate([x for x, _ in client_data])
        y = np.concatenate([y for _, y in client_data])
        rng = np.random.default_rng(np.random.SeedSequence([self.config.seed,
                                                            STEPS_SCALE_SAMPLE_TAG]))
        pick = np.sort(rng.choice(len(y), min(len(y), STEPS_SCALE_EVAL_SAMPLES), replace=False))
        return x[pick], y[pick]

    def _trace_losses(self, client_data) -> list[float]:
        """Training loss of the trainer's ``last_mean_trace`` models (the fleet's FedAvg after
        h = 0, 1, ... local steps) on a seeded sample of the drones' own training data: the
        warm-up's measurement for ``resources.lgc_steps_scale: auto``."""
        x, y = self._trace_sample(client_data)
        losses = []
        for weights in self._trainer.last_mean_trace:
            set_weights(self._worker, weights)
            losses.append(float(evaluate(self._worker, x, y)[1]))
        return losses

    def _compressed_trace_losses(self, active: list[int], client_data,
                                 knobs: dict[int, dict], probe: set[int]) -> list[float]:
        """``resources.lgc_steps_scale: online``'s measurement: the training loss (same sample
        as :meth:`_trace_losses`) of the model the LGC server would produce had the drones in
        ``probe`` stopped after h = 0, 1, ... local steps and the others taken all of theirs,
        w + η/M Σ_k Top_{K_k}(e_k + Δ_k(h_k)), with each drone's own error memory e_k and this
        round's entries K_k = Σ_n D_n (LGC Algorithm 1 lines 8-11 and 20-21, all layers
        delivered). At h = 0 the probe's drones send their memory alone."""
        from fl_uav.compression.lgc import top_k_indices
        from fl_uav.compression.quantization import flatten, unflatten

        x, y = self._trace_sample(client_data)
        start, layout = flatten(self.weights)
        names = layout.names
        scale = float(self.strategy.server_lr) / float(self.strategy.num_clients)
        traces = self._trainer.last_client_trace
        memories, ks = [], []
        for k in active:
            encoder = getattr(self._compressor(k), 'encoder', None)
            memories.append(np.zeros_like(start) if encoder is None else encoder.residual)
            ks.append(min(int(sum(knobs[k][ENTRIES_KNOB])), start.size))
        losses = []
        length = max(len(t) for t, k in zip(traces, active) if k in probe)
        for h in range(length):
            total = np.zeros_like(start)
            for trace, memory, k, drone in zip(traces, memories, ks, active):
                step = min(h, len(trace) - 1) if drone in probe else len(trace) - 1
                local, _ = flatten({n: trace[step][n] for n in names})
                u = memory + (local - start)
                idx = top_k_indices(u, k)
                total[idx] += u[idx]
            set_weights(self._worker, unflatten(start + scale * total, layout))
            losses.append(float(evaluate(self._worker, x, y)[1]))
        return losses

    def _train_vectorized(self, r: int, active: list[int], client_data, seeds: list[int],
                          config: TrainConfig, steps: list[int] | None = None,
                          trace_weights: list[int] | None = None,
                          trace_clients: bool = False) -> list[ClientResult]:
        """The sgd client (structured pruning included, with the same kept-coordinate mask
        as :class:`SgdClient`, so the upload is charged as the fleet sends it) or, with
        ``steps``, the osafl client for all drones at once. ``trace_weights``: also record
        the trainer's ``last_mean_trace`` (see :meth:`_trace_losses`)."""
        model, start, index_map = self.model, self.weights, None
        keep = self.config.learning.structured_keep
        if keep < 1.0:   # structured pruning: every drone trains this round's smaller model
            model, start, index_map = pruned_training_model(self.model, self.weights, keep)
        trainer = (self._trainer if index_map is None
                   else self.config.engine.build_trainer(model, config))
        trainer.config = config
        try:
            updates = trainer.train(start, client_data, seeds, steps=steps,
                                    trace_weights=trace_weights, trace_clients=trace_clients)
        except NonFiniteLossError as exc:
            drone = self._first_diverging_drone(trainer, start, active, client_data, seeds,
                                                steps)
            raise ExperimentError(f'round {r}, drone {drone}: non-finite training loss ({exc});'
                                  f' partial results are in {self.out_dir}') from exc
        return [local_steps_result(update, start, len(labels), keep, index_map, self.shapes)
                for (_, labels), update in zip(client_data, updates)]

    def _compress(self, drone: int, r: int, result: ClientResult, knob: dict | None = None
                  ) -> tuple[int, Weights, list[int] | None]:
        """Encode one drone's update; returns (frame bytes sent, what the station decodes,
        bytes per LGC channel when a planner chose the entries, else None).

        Planner knobs: ``range_bits`` (FedDPQ's δ_u) picks that drone's range quantizer,
        ``lgc_channel_entries`` (LGC's D_n) that drone's layer sizes this round."""
        knob = knob or {}
        entries = knob.get(ENTRIES_KNOB)
        compressor = self._planned.select(self._compressor(drone), knob.get(BITS_KNOB), entries)
        plugin = is_plugin_spec(self.config.compression.method)
        if type(compressor) is NoCompression and result.mask is None:
            # A dense v1 frame carries the delta unchanged: charge its exact length unbuilt.
            return compressor.frame_size(result.delta), result.delta, None
        # a plug-in gets the tensors in the global model's order, as on a drone
        sent = {n: result.delta[n] for n in self.weights} if plugin else result.delta
        try:
            frame, delta = compressor.compress(
                sent, stream_rng(self.config.seed, r, Stream.COMPRESSOR, drone),
                round_index=r, sender=drone, fingerprint=self.fingerprint, mask=result.mask,
                metrics=result.metrics)
        except Exception as exc:
            if not plugin:   # a built-in's bug: its traceback
                raise
            raise self._plugin_fault(
                f'round {r}, drone {drone}', 'compression.method',
                f'{type(compressor).__name__}.compress raised {type(exc).__name__}: {exc}'
                f'{raised_at(exc)}') from exc
        if plugin:   # aggregate what the station would decode from the frame, checked
            delta = self._plugin_frame_delta(drone, r, frame, delta)
        channel_bytes = None
        if entries is not None:   # an unused channel (0 entries) sends nothing
            channel_bytes = [n if e > 0 else 0
                             for n, e in zip(compressor.last_frame_bytes, entries)]
        return len(frame), delta, channel_bytes

    def _plugin_frame_delta(self, drone: int, r: int, frame: bytes,
                            reported: Weights) -> Weights:
        """The delta the station decodes from a plug-in compressor's frame; ExperimentError
        if the frame is not one update frame of this drone, round and model, or if it decodes
        to something else than the delta the compressor reported (its error feedback and
        the engine would then differ from the fleet)."""
        spec = self.config.compression.method
        where = f'round {r}, drone {drone}: compression.method {spec!r}'
        try:
            decoded = decode_update_frame(frame, self.weights, self.fingerprint)
        except NonFiniteValues as exc:   # a frame, but of a NaN or Inf delta
            raise ExperimentError(f'{where} returned a frame the station refuses ({exc.reason}:'
                                  f' {exc}); the delta it encodes must be finite') from None
        except FrameError as exc:
            raise ExperimentError(f'{where} returned bytes the station cannot decode '
                                  f'({exc.reason}: {exc}); a compressor returns one codec v1 '
                                  f'UPDATE or v2 QSGD/range/raw frame (see fl_uav.compression.'
                                  f'compressor.Compressor)') from None
        if (decoded.sender, decoded.round_index) != (drone, r):
            raise ExperimentError(f'{where} wrote sender {decoded.sender}, round '
                                  f'{decoded.round_index} into its frame; the station would '
                                  f'refuse it (it was given sender {drone}, round {r})')
        for name, value in decoded.delta.items():
            mine = np.asarray(reported.get(name, np.nan), np.float64)
            if mine.shape != value.shape or not np.allclose(mine, value, rtol=1e-6,
                                                            atol=1e-7):
                raise ExperimentError(f'{where} reported a delta that differs from what its '
                                      f'frame decodes to (tensor {name!r}); compress must '
                                      f'return (frame, the delta the frame decodes to)')
        return decoded.delta

    @staticmethod
    def _first_diverging_drone(trainer: VectorizedTrainer, start: Weights, active: list[int],
                               client_data, seeds: list[int], steps: list[int] | None
                               ) -> int | str:
        """Replay the round one drone at a time to name the drone whose loss diverged: the
        same trainer (this round's model, structurally pruned or not), start weights and
        per-drone step counts (OSAFL's κ_u^t, Algorithm 1 line 4) as the failed round."""
        for i, (k, data, seed) in enumerate(zip(active, client_data, seeds)):
            try:
                trainer.train(start, [data], [seed],
                              steps=None if steps is None else [steps[i]])
            except NonFiniteLossError:
                return k
        return 'unknown'

    # --- checkpoints ---------------------------------------------------------------------
    def write_express(self) -> None:
        """DIR/express.json (FedEx plan and update log 1..round_index), written atomically.

        Written at checkpoints and at the end of a run, not per update (the log grows).
        """
        if self.express is None:
            return
        tmp = self.out_dir / (EXPRESS_FILE + '.tmp')
        tmp.write_text(json.dumps(self.express.summary(upto=self.round_index), indent=1))
        tmp.replace(self.out_dir / EXPRESS_FILE)

    def save_checkpoint(self) -> None:
        """Global weights, strategy state, clock and buffers, written atomically.

        In express mode express.json is written first: the update log a resume reads back.
        """
        self.write_express()
        write_knobs(self.resources, self.out_dir)
        meta = {'round_index': self.round_index, 'sim_time_s': self.sim_time_s,
                'consumed': self.consumed.tolist(), 'topup_sources': self.topup_sources,
                'strategy': None}
        arrays = {f'w/{n}': v for n, v in self.weights.items()}
        arrays.update({f'buffer/{k}': b for k, b in enumerate(self.buffers)})
        meta['strategy'] = _arrays_out(self.strategy.state_dict(), 'strategy', arrays)
        meta['unsaved_plugin_state'] = self._unsaved_plugin_state()
        if self.express is not None:   # the models the UAVs carry, their tours flown
            meta['express'] = self.express.runtime.state_dict(arrays)
        for tag, states in (('client', self._clients), ('compressor', self._compressors)):
            for k, owner in states.items():   # per-drone state: SCAFFOLD c_k, LGC residual
                arrays.update({f'{tag}/{k}/{key}': v for key, v in owner.state_dict().items()})
        try:
            meta_json = json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise ExperimentError(
                f'cannot checkpoint round {self.round_index}: the strategy state of '
                f'aggregation.strategy {self.config.aggregation.strategy!r} holds a value that '
                f'is neither JSON nor a numpy array ({exc}); state_dict() returns str-keyed '
                f'dicts, lists, JSON scalars and numpy arrays') from None
        tmp = self.out_dir / (CHECKPOINT_FILE + '.tmp.npz')
        np.savez(tmp, meta=np.frombuffer(meta_json.encode(), np.uint8), **arrays)
        tmp.replace(self.out_dir / CHECKPOINT_FILE)

    def _unsaved_plugin_state(self) -> dict[str, list[str]]:
        """Per plug-in key, the attributes a plug-in without its own state_dict changed since
        it was built (state a checkpoint does not hold); empty when there are none."""
        unsaved: dict[str, list[str]] = {}
        strategy = self._plugin_snapshots.get('aggregation.strategy')
        if strategy is not None:
            changed = changed_attributes(strategy, _unwrapped(self.strategy))
            if changed:
                unsaved['aggregation.strategy'] = changed
        compressor = self._plugin_snapshots.get('compression.method')
        if compressor is not None:
            changed = sorted({name for owner in self._compressors.values()
                              for name in changed_attributes(compressor, owner)})
            if changed:
                unsaved['compression.method'] = changed
        return unsaved

    def load_checkpoint(self) -> None:
        """Continue from DIR/checkpoint.npz."""
        path = self.out_dir / CHECKPOINT_FILE
        if not path.is_file():
            raise ExperimentError(f'cannot resume: {path} does not exist')
        with np.load(path) as archive:
            meta = json.loads(bytes(archive['meta']).decode())
            _refuse_unsaved_plugin_state(meta.get('unsaved_plugin_state') or {}, self.config,
                                         self.out_dir)
            self.weights = {n[2:]: archive[n].astype(np.float32) for n in archive.files
                            if n.startswith('w/')}
            self.buffers = [archive[f'buffer/{k}'] for k in range(self.config.num_drones)]
            strategy_state = _arrays_in(meta['strategy'], archive)
            if self.express is not None:
                self.express.runtime.load_state_dict(meta['express'], archive)
                self.express.log = self._express_log(meta)
            for tag, owner in (('client', self._client), ('compressor', self._compressor)):
                states: dict[int, dict[str, np.ndarray]] = {}
                for name in archive.files:
                    if name.startswith(tag + '/'):
                        _, k, key = name.split('/', 2)
                        states.setdefault(int(k), {})[key] = archive[name]
                for k, state in states.items():
                    owner(k).load_state_dict(state)
        self.round_index = int(meta['round_index'])
        self.sim_time_s = float(meta['sim_time_s'])
        knobs_path = self.out_dir / KNOBS_FILE
        if self.resources.resumes_from_knobs and knobs_path.is_file():
            try:
                self.resources.load_log(json.loads(knobs_path.read_text()), self.round_index)
            except ValueError as exc:
                raise ExperimentError(str(exc)) from exc
        self.consumed = np.asarray(meta['consumed'], np.int64)
        self.topup_sources = list(meta.get('topup_sources', self.topup_sources))
        self.strategy.load_state_dict(strategy_state)
        set_weights(self.model, self.weights)

    def _express_log(self, meta: dict[str, Any]) -> list[dict[str, Any]]:
        """The FedEx update log up to the checkpoint: from express.json (written with every
        checkpoint, perhaps later too), or from the checkpoint itself if an older one."""
        upto = self.express.runtime.update_index
        if 'express_log' in meta:
            return list(meta['express_log'])
        path = self.out_dir / EXPRESS_FILE
        log = (json.loads(path.read_text())['updates'] if path.is_file() else [])
        log = [u for u in log if u['update'] <= upto]
        if [u['update'] for u in log] != list(range(1, upto + 1)):
            raise ExperimentError(f'cannot resume: {path} does not hold the FedEx updates '
                                  f'1..{upto} of the checkpoint')
        return log


def _unwrapped(strategy: Strategy) -> Strategy:
    """The configured rule inside ``aggregation.clip_norm``'s NormClip wrapper."""
    return strategy.inner if isinstance(strategy, NormClip) else strategy


def _plugin_snapshots(config: ExperimentConfig, strategy: Strategy,
                      compressor: Compressor) -> dict[str, dict[str, Any] | None]:
    """{plug-in key: its attributes as built} for the strategy and compressor plug-ins that
    keep the base's empty state_dict (a plug-in that defines state_dict is trusted)."""
    snapshots = {}
    if (is_plugin_spec(config.aggregation.strategy)
            and not overrides_state_dict(_unwrapped(strategy), Strategy)):
        snapshots['aggregation.strategy'] = attribute_snapshot(_unwrapped(strategy))
    if (is_plugin_spec(config.compression.method)
            and not overrides_state_dict(compressor, Compressor)):
        snapshots['compression.method'] = attribute_snapshot(compressor)
    return snapshots


def _refuse_unsaved_plugin_state(unsaved: dict[str, list[str]], config: ExperimentConfig,
                                 out_dir: Path) -> None:
    """ExperimentError when the checkpoint was written while a plug-in held state it has no
    state_dict for: a resumed run would start that state over and differ from the run."""
    if not unsaved:
        return
    named = '; '.join(f'{key} {to_flat(config)[key]!r} changed {", ".join(names)}'
                      for key, names in sorted(unsaved.items()))
    raise ExperimentError(
        f'cannot resume {out_dir}: a plug-in kept state its checkpoint does not hold ({named}) '
        f'and defines no state_dict; give it state_dict()/load_state_dict() (or a state_dict '
        f'returning {{}} if those attributes are not state), then start the run again')


def _arrays_out(state: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """A JSON-able copy of a state tree whose numpy arrays move into ``arrays`` (npz entries)."""
    if isinstance(state, np.ndarray):
        arrays[path] = state
        return {'__npz__': path}
    if isinstance(state, dict):
        return {key: _arrays_out(value, f'{path}/{key}', arrays) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return [_arrays_out(value, f'{path}/{i}', arrays) for i, value in enumerate(state)]
    return state


def _arrays_in(state: Any, archive: Any) -> Any:
    """Inverse of :func:`_arrays_out`."""
    if isinstance(state, dict):
        if set(state) == {'__npz__'}:
            return np.array(archive[state['__npz__']])
        return {key: _arrays_in(value, archive) for key, value in state.items()}
    if isinstance(state, list):
        return [_arrays_in(value, archive) for value in state]
    return state


def _byte_count(text: str) -> int | float:
    """A bytes column as written: an int (older runs wrote '1234.0'), a float if fractional."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path, newline='') as f:
        rows = [{k: (0 if v in ('', None) else int(v)) if k in _INT_COLUMNS else
                 (math.nan if v in ('', None) else _byte_count(v) if k in _BYTE_COLUMNS
                  else float(v))   # '': a column older runs lack
                 for k, v in row.items()} for row in csv.DictReader(f)]
    for row in rows:
        if math.isnan(row.get('energy_total_j', math.nan)):   # older runs: mean × trained
            row['energy_total_j'] = row['energy_mean_j'] * (row['participants'] + row['late'])
    return rows


RESUME_MAY_CHANGE = ('num_rounds', 'engine.torch_threads', 'engine.workers',
                     'engine.checkpoint_every')
"""Keys a resumed run may set differently from the interrupted one: how long it runs and how
it uses the machine (workers are bit-identical), never what it computes."""


def _json_mapping(path: Path, prefix: str = '') -> dict[str, Any]:
    """A run file's JSON object, or ExperimentError (``prefix`` first) saying what is wrong."""
    if not path.is_file():
        raise ExperimentError(f'{prefix}{path} does not exist (not an experiment directory)')
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ExperimentError(f'{prefix}{path} is not readable JSON: {exc}') from exc
    if not isinstance(value, dict):
        raise ExperimentError(f'{prefix}{path} does not hold a JSON object')
    return value


def read_run_config(out_dir: Path) -> dict[str, Any]:
    """The flat config a run in ``out_dir`` was started with (its config.json)."""
    return _json_mapping(Path(out_dir) / CONFIG_FILE, 'cannot resume: ')


def check_resumable(config: ExperimentConfig, out_dir: Path) -> None:
    """ExperimentError naming every key (outside RESUME_MAY_CHANGE) whose value differs from
    the one the run in ``out_dir`` was started with: a resumed run is the same experiment."""
    saved = read_run_config(out_dir)
    given = json.loads(json.dumps(to_flat(config)))
    differ = [f'{key}: run {saved[key]!r}, given {given[key]!r}' for key in sorted(given)
              if key in saved and key not in RESUME_MAY_CHANGE and saved[key] != given[key]]
    if differ:
        raise ExperimentError(
            f'cannot resume {out_dir}: the config differs from the one it was started with '
            f'({"; ".join(differ)}); resume with the same keys (`fl-uav experiment --resume '
            f'{out_dir}` reads them from its {CONFIG_FILE}), or start a new run with --out')


def recorded_run_files(out_dir: Path) -> list[str]:
    """The files of an earlier run in ``out_dir`` (config, rows, summary) that a new run there
    would replace; empty for a new or empty directory."""
    return [name for name in (CONFIG_FILE, ROUNDS_FILE, SUMMARY_FILE)
            if (Path(out_dir) / name).is_file()]


def run_experiment(config: ExperimentConfig, out_dir: Path, resume: bool = False,
                   echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) an experiment; Ctrl-C and errors leave consistent partial results."""
    out_dir = Path(out_dir)
    if resume:
        check_resumable(config, out_dir)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(config.engine.torch_threads)
    wall_start = time.perf_counter()
    try:
        engine = ExperimentEngine(config, out_dir)
    except ValueError as exc:   # data, split or model the config cannot give (DatasetError too)
        if created and not any(out_dir.iterdir()):
            out_dir.rmdir()     # nothing ran: leave no empty directory behind
        raise ExperimentError(f'cannot set up the run: {exc}') from exc
    rows_path = out_dir / ROUNDS_FILE
    if resume and not (out_dir / CHECKPOINT_FILE).is_file() and not _read_rows(rows_path):
        echo(f'{out_dir}: no round was completed before the interruption; starting it over')
        resume = False
    if resume:
        engine.load_checkpoint()
        if engine.round_index > config.num_rounds:
            raise ExperimentError(f'cannot resume {out_dir}: it already has '
                                  f'{engine.round_index} rounds, num_rounds is '
                                  f'{config.num_rounds}')
        rows = [r for r in _read_rows(rows_path) if r['round'] <= engine.round_index]
    else:
        rows = []
    with open(rows_path, 'w', newline='') as f:
        writer = csv.DictWriter(f, ROUND_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (out_dir / CONFIG_FILE).write_text(json.dumps(to_flat(config), indent=2))
    write_knobs(engine.resources, out_dir)   # FedDPQ's plan, before round 1
    if config.resources.planner != 'none':
        echo(f'resources: {config.resources.planner} planner ready; decisions in '
             f'{out_dir / KNOBS_FILE}')
    status, error = 'finished', ''
    # a finite loss runs on: say when the model diverged or stays at chance
    divergence = DivergenceMonitor(engine.data.num_classes, config.num_rounds)
    for row in rows:   # a resumed run's earlier rounds
        divergence.observe(row['round'], row['accuracy'], row['loss'])
    try:
        while engine.round_index < config.num_rounds:
            row = engine.run_round()
            rows.append(row)
            with open(rows_path, 'a', newline='') as f:
                csv.DictWriter(f, ROUND_COLUMNS).writerow(row)
            if (engine.round_index % config.engine.checkpoint_every == 0
                    or engine.round_index == config.num_rounds):
                engine.save_checkpoint()
            echo(_progress_line(row, config.num_rounds))
            for warning in divergence.observe(row['round'], row['accuracy'], row['loss']):
                echo(f'warning: {warning}')
    except KeyboardInterrupt as exc:   # Ctrl-C, or SIGTERM in `fl-uav experiment` (its name)
        status = 'interrupted'
        echo(f'interrupted{f" ({exc})" if str(exc) else ""} after round {engine.round_index}; '
             f'resume with --resume {out_dir}')
    except ExperimentError as exc:
        status, error = 'failed', str(exc)
        echo(f'error: {exc}')
    engine.write_express()   # the log up to the last completed update
    write_knobs(engine.resources, out_dir)
    summary = write_summary(config, out_dir, rows, status, error,
                            time.perf_counter() - wall_start,
                            {**engine.resources.run_summary(),
                             'warnings': divergence.warnings})
    return summary


def _progress_line(row: dict[str, Any], num_rounds: int, width: int = 20) -> str:
    done = int(width * row['round'] / num_rounds)
    return (f'[{"#" * done}{"." * (width - done)}] round {row["round"]}/{num_rounds}  '
            f'acc {row["accuracy"]:.3f}  sim {row["sim_time_s"]:.1f} s  '
            f'up {row["uplink_bytes"] / 1e6:.2f} MB  wall {row["wall_s"]:.2f} s')


def energy_to_target(rows: list[dict[str, Any]], target_accuracy: float) -> dict[str, Any]:
    """The fleet's cumulative modelled energy (every drone that trained: compute, generation,
    radio and, with an LGC planner, hover; the rounds.csv ``energy_total_j`` column) up to and
    including the first round whose accuracy is >= ``target_accuracy``, and that round.

    Both are None when the target was never reached (or ``target_accuracy`` is 0: not asked).
    """
    out: dict[str, Any] = {'target_accuracy': target_accuracy or None,
                           'energy_to_target_j': None, 'rounds_to_target': None}
    if not target_accuracy:
        return out
    spent = 0.0
    for row in rows:
        spent += float(row['energy_total_j'])
        if row['accuracy'] >= target_accuracy:
            out.update(energy_to_target_j=spent, rounds_to_target=int(row['round']))
            break
    return out


@functools.lru_cache(maxsize=1)
def source_version() -> dict[str, str]:
    """Which code made a run: the installed fl_uav version and, in a git checkout, its commit
    (with ``-dirty`` if tracked files differ from it; '' outside a checkout or without git)."""
    try:
        version = importlib.metadata.version('fl_uav')
    except importlib.metadata.PackageNotFoundError:
        version = ''
    here = str(Path(__file__).resolve().parent)
    commit = ''
    try:
        head = subprocess.run(['git', '-C', here, 'rev-parse', 'HEAD'], capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, check=True).stdout.strip()
        dirty = subprocess.run(['git', '-C', here, 'status', '--porcelain',
                                '--untracked-files=no'], capture_output=True, text=True,
                               timeout=GIT_TIMEOUT_S, check=True).stdout.strip()
        commit = head + ('-dirty' if dirty else '')
    except (OSError, subprocess.SubprocessError):
        pass
    return {'fl_uav_version': version, 'git_commit': commit}


def write_summary(config: ExperimentConfig, out_dir: Path, rows: list[dict[str, Any]],
                  status: str, error: str, wall_s: float,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """DIR/summary.json (``extra``: the planner's entries, e.g. LGC's h0) and the plots."""
    summary = {
        'name': config.name, 'seed': config.seed, **source_version(),
        'status': status, 'error': error,
        'rounds_completed': len(rows), 'num_rounds': config.num_rounds,
        'num_drones': config.num_drones, 'dataset': config.data.dataset,
        'partition': config.data.partition, 'strategy': config.aggregation.strategy,
        'server_lr': config.aggregation.server_lr,   # the rate used (``auto`` resolved)
        'final_accuracy': rows[-1]['accuracy'] if rows else None,
        'best_accuracy': max((r['accuracy'] for r in rows), default=None),
        'sim_time_s': rows[-1]['sim_time_s'] if rows else 0.0,
        'uplink_bytes_total': sum(r['uplink_bytes'] for r in rows),
        'energy_total_j': float(sum(r['energy_total_j'] for r in rows)),
        'resources_planner': config.resources.planner,
        'plugins': plugin_sources(to_flat(config)),   # spec, module file, SHA-256
        **(extra or {}),
        **energy_to_target(rows, config.target_accuracy),
        'engine_wall_s': sum(r['wall_s'] for r in rows),
        'wall_s': wall_s,
    }
    (out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    if rows:
        plot_runs([(config.name, rows)], out_dir)
    return summary


PLOT_AXES = (('round', 'round', 'accuracy_vs_round.png'),
             ('sim_time_s', 'simulated time (s)', 'accuracy_vs_sim_time.png'),
             ('uplink_cum', 'cumulative uplink (MB)', 'accuracy_vs_uplink.png'))
"""(x key, x label, file) of the accuracy plots every run writes."""


def accuracy_figure(runs: list[tuple[str, list[dict[str, Any]]]], key: str, label: str):
    """Test accuracy against ``key`` (a rounds.csv column, or ``uplink_cum``: cumulative MB),
    one line per run; rounds get integer ticks only (no round 1.5)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # not pyplot: no GUI machinery, a faster import
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for run_name, rows in runs:
        if key == 'uplink_cum':
            xs = np.cumsum([r['uplink_bytes'] for r in rows]) / 1e6
        else:
            xs = [r[key] for r in rows]
        ax.plot(xs, [r['accuracy'] for r in rows], marker='.', label=run_name)
    if key == 'round':
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(label)
    ax.set_ylabel('test accuracy')
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_runs(runs: list[tuple[str, list[dict[str, Any]]]], out_dir: Path) -> None:
    """Accuracy vs round, vs simulated time and vs cumulative uplink bytes, one line per run."""
    for key, label, name in PLOT_AXES:
        accuracy_figure(runs, key, label).savefig(out_dir / name)


def _target_cells(summary: dict[str, Any]) -> str:
    """Target accuracy, energy to it (kJ) and its round, or '-' (not asked or not reached)."""
    target = summary.get('target_accuracy')
    energy, rounds = summary.get('energy_to_target_j'), summary.get('rounds_to_target')
    return (f'{(f"{target:.3f}" if target else "-"):>6} '
            f'{(f"{energy / 1e3:.1f}" if energy is not None else "-"):>12} '
            f'{(str(rounds) if rounds is not None else "-"):>6}')


def _targets_table(runs: list[tuple[str, list[dict[str, Any]]]], targets: Sequence[float],
                   width: int) -> str:
    """Per run, the energy (kJ) and round to each target accuracy (:func:`energy_to_target`)."""
    lines = [f'{"energy to target, kJ (round)":<{width}} '
             + ' '.join(f'{f"{t:.1%}":>16}' for t in targets)]
    for label, rows in runs:
        cells = []
        for t in targets:
            hit = energy_to_target(rows, t)
            cells.append('never' if hit['rounds_to_target'] is None else
                         f'{hit["energy_to_target_j"] / 1e3:.1f} ({hit["rounds_to_target"]})')
        lines.append(f'{label:<{width}} ' + ' '.join(f'{c:>16}' for c in cells))
    return '\n'.join(lines)


def _experiment_summary(run_dir: Path) -> dict[str, Any]:
    """The summary.json of an ``fl-uav experiment`` run, or ExperimentError saying what
    ``run_dir`` is instead (missing, unreadable, or a run of another command)."""
    summary = _json_mapping(run_dir / SUMMARY_FILE)
    if 'name' not in summary:
        raise ExperimentError(f'{run_dir} is not an `fl-uav experiment` run (its {SUMMARY_FILE} '
                              f'has no name; `fl-uav sim` runs keep their rounds in it)')
    return summary


#: Config keys that differ between repetitions of one experiment (not a different setting).
REPETITION_KEYS = ('seed', 'name')
#: Keys whose difference between compared runs makes their figures incomparable: said so.
CONTEXT_KEYS = ('data.dataset', 'num_rounds', 'num_drones', 'learning.model')


def _seed_groups(run_dirs: Sequence[Path], labels: Sequence[str]
                 ) -> list[tuple[str, list[int]]]:
    """Runs whose config.json differ only in REPETITION_KEYS, as (label, indices) in first
    appearance order; runs without a readable config.json stand alone."""
    groups: dict[str, list[int]] = {}
    for index, run_dir in enumerate(run_dirs):
        try:
            config = _json_mapping(Path(run_dir) / CONFIG_FILE)
        except ExperimentError:
            key = f'#{index}'
        else:
            key = json.dumps({k: v for k, v in config.items() if k not in REPETITION_KEYS},
                             sort_keys=True, default=str)
        groups.setdefault(key, []).append(index)
    return [(_group_label([labels[i].split(' (')[0] for i in members]), members)
            for members in groups.values()]


def _group_label(names: Sequence[str]) -> str:
    """What the runs' names share ('fedavg' for 'fedavg s0', 'fedavg s1'), without a trailing
    seed marker; the first name when they share too little to say."""
    if len(set(names)) == 1:
        return names[0]
    shared = re.sub(r'([\s_.-]+(s|seed)\d*)?[\s_.-]*$', '',
                    os.path.commonprefix(list(names)))
    return shared if len(shared) >= 3 else names[0]


def _mean_std(values: Sequence[float]) -> str:
    return f'{float(np.mean(values)):.4f} ± {float(np.std(values, ddof=1)):.4f}'


def _seed_table(runs: Sequence[tuple[str, list[dict]]],
                groups: Sequence[tuple[str, list[int]]], width: int) -> str:
    """Mean ± sample std over each group's seeds of the final and best accuracy and uplink."""
    lines = [f'{"over seeds":<{width}} {"runs":>4} {"final acc":>17} {"best acc":>17} '
             f'{"uplink MB":>17}']
    for label, members in groups:
        rows = [runs[i][1] for i in members if runs[i][1]]
        if len(rows) < 2:
            continue
        final = [r[-1]['accuracy'] for r in rows]
        best = [max(x['accuracy'] for x in r) for r in rows]
        uplink = [sum(x['uplink_bytes'] for x in r) / 1e6 for r in rows]
        lines.append(f'{label:<{width}} {len(rows):>4} {_mean_std(final):>17} '
                     f'{_mean_std(best):>17} {_mean_std(uplink):>17}')
    return '\n'.join(lines) if len(lines) > 1 else ''


def _unfinished_notes(run_dirs: Sequence[Path],
                      runs: Sequence[tuple[str, list[dict]]]) -> list[str]:
    """A note for each run with fewer rounds in rounds.csv than its config's num_rounds
    (stopped or still running): its final figures are not the configured run's."""
    notes = []
    for run_dir, (label, rows) in zip(run_dirs, runs):
        try:
            planned = _json_mapping(Path(run_dir) / CONFIG_FILE).get('num_rounds')
        except ExperimentError:
            continue
        if isinstance(planned, int) and len(rows) < planned:
            notes.append(f'note: {label} has {len(rows)} of its {planned} rounds (stopped or '
                         f'still running; `fl-uav experiment --resume {run_dir}` goes on)')
    return notes


def _context_notes(run_dirs: Sequence[Path]) -> list[str]:
    """A note for each CONTEXT_KEYS key whose value differs between the runs."""
    values: dict[str, set[str]] = {key: set() for key in CONTEXT_KEYS}
    for run_dir in run_dirs:
        try:
            config = _json_mapping(Path(run_dir) / CONFIG_FILE)
        except ExperimentError:
            continue
        for key in CONTEXT_KEYS:
            if key in config:
                values[key].add(str(config[key]))
    return [f'note: the runs differ in {key} ({", ".join(sorted(found))}): their figures are '
            f'not like for like' for key, found in values.items() if len(found) > 1]


def compare_runs(run_dirs: list[Path], out_dir: Path, target_accuracy: float | None = None,
                 targets: Sequence[float] = ()) -> str:
    """Overlay runs in one set of plots and return a table of their figures.

    The energy-to-target columns use each run's own ``target_accuracy`` or, if given,
    ``target_accuracy`` for every run (recomputed from its rounds.csv). ``targets`` adds a
    second table: each run's energy (kJ) to the first round at or above each target, and that
    round ('never' if not reached), the paper-style "energy to a target accuracy" curve. Runs
    whose configs differ only in the seed get a table of mean ± sample std over their seeds;
    runs on different datasets, models, fleet sizes or run lengths get a note saying so."""
    for name, value in [('--target', target_accuracy), *(('--targets', t) for t in targets)]:
        if value is not None and not 0.0 < value <= 1.0:
            raise ExperimentError(f'{name} must be in (0, 1], got {value}')
    runs, summaries = [], []
    for run_dir in run_dirs:
        summary = _experiment_summary(Path(run_dir))
        rows = _read_rows(Path(run_dir) / ROUNDS_FILE)
        if target_accuracy is not None:
            summary.update(energy_to_target(rows, target_accuracy))
        runs.append((f'{summary["name"]} ({Path(run_dir).name})', rows))
        summaries.append(summary)
    width = max([28, *(len(label) for label, _ in runs)])   # whole labels: seeds differ late
    lines = [f'{"run":<{width}} {"rounds":>6} {"final acc":>9} {"best acc":>9} '
             f'{"uplink MB":>10} {"sim s":>9} {"wall s":>8} {"target":>6} '
             f'{"kJ to target":>12} {"rounds":>6}']
    for (label, rows), summary in zip(runs, summaries):
        lines.append(f'{label:<{width}} {len(rows):>6} '
                     f'{(rows[-1]["accuracy"] if rows else math.nan):>9.4f} '
                     f'{max((r["accuracy"] for r in rows), default=math.nan):>9.4f} '
                     f'{sum(r["uplink_bytes"] for r in rows) / 1e6:>10.2f} '
                     f'{(rows[-1]["sim_time_s"] if rows else 0.0):>9.1f} '
                     f'{sum(r["wall_s"] for r in rows):>8.1f} ' + _target_cells(summary))
    if targets:
        lines += ['', _targets_table(runs, targets, width)]
    seeds = _seed_table(runs, _seed_groups(run_dirs, [label for label, _ in runs]), width)
    if seeds:
        lines += ['', seeds]
    lines += _context_notes(run_dirs) + _unfinished_notes(run_dirs, runs)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    plot_runs(runs, Path(out_dir))
    table = '\n'.join(lines)
    (Path(out_dir) / 'comparison.txt').write_text(table + '\n')
    return table
