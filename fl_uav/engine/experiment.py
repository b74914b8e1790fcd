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

Results go to DIR/rounds.csv (one row per round, appended as it happens), DIR/update_norms.csv
(each drone's update norm per round, with the outliers and the sample counts capped),
DIR/summary.json and plots; DIR/checkpoint.npz after every ``checkpoint_every`` rounds makes
``--resume`` possible.
All randomness is derived from (seed, round, purpose, drone) (:class:`Stream`,
:func:`stream_seed`), so a resumed run equals an uninterrupted one and no two purposes or drones
share a random stream, whatever the fleet size.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_uav.aggregation import ClientUpdate
from fl_uav.aggregation._common import LOCAL_LR_KEY
from fl_uav.aggregation.feddpq import DRAWS_KNOB
from fl_uav.aggregation.fedprox import PROXIMAL_MU_KNOB
from fl_uav.aggregation.robust import cap_samples, norm_report
from fl_uav.aggregation.strategy import (
    AggregationError,
    checked_aggregate,
    checked_configure_round,
)
from fl_uav.compression.codec import encoded_size
from fl_uav.compression.compressor import Compressor
from fl_uav.compression.config import PlannedCompressors
from fl_uav.configschema import to_flat
from fl_uav.engine.checkpoint import CheckpointMixin, plugin_snapshots
from fl_uav.engine.chunk_worker import UploadedResult, all_finite
from fl_uav.engine.clients import ClientsMixin
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.data import (
    TrainTestData,
    drone_folders,
    load_experiment_data,
    partition_data,
)
from fl_uav.engine.express import EngineExpress, plan_express
from fl_uav.engine.results import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    NORM_COLUMNS,
    ROUND_COLUMNS,
    ROUNDS_FILE,
    UPDATE_NORMS_FILE,
    ExperimentError,
    check_resumable,
    norms_summary,
    plugin_fault,
    read_norm_rows,
    read_rows,
    write_knobs,
    write_summary,
)
from fl_uav.learning.buffer import retained_positions
from fl_uav.learning.client_algorithms import ClientAlgorithm
from fl_uav.learning.divergence import DivergenceMonitor
from fl_uav.learning.models import build_model
from fl_uav.learning.topup import TOPUP_SEED_TAG, build_generator, top_up
from fl_uav.learning.training import NonFiniteLossError, evaluate
from fl_uav.learning.weights import Weights, architecture_fingerprint, get_weights, set_weights
from fl_uav.netmodel.compute import CpuDevice
from fl_uav.netmodel.radio import RadioLink
from fl_uav.planning.config import KNOBS_FILE
from fl_uav.planning.feddpq_opt import TOPUP_KNOB, TX_POWER_KNOB
from fl_uav.planning.resources import merge_knobs
from fl_uav.planning.round_resources import (
    NoRoundResources,
    PlannerInputs,
    RoundResources,
    build_planner,
)
from fl_uav.plugins import seeded_global_random
from fl_uav.streams import Stream, stream_rng, stream_seed


class ExperimentEngine(ClientsMixin, CheckpointMixin):
    """Runs an :class:`ExperimentConfig` and writes its results into ``out_dir``.

    Here its state and the round; the drones' training and uploads are in
    :class:`~fl_uav.engine.clients.ClientsMixin`, checkpoint and resume in
    :class:`~fl_uav.engine.checkpoint.CheckpointMixin`.
    """

    def __init__(self, config: ExperimentConfig, out_dir: Path,
                 data: TrainTestData | None = None, start_backend: bool = True) -> None:
        """``start_backend`` False: the Ray backend is started by :meth:`start_backend`."""
        self.config = config
        self.out_dir = Path(out_dir)
        # FedEx: CARP is solved from the config alone, before the dataset loads, so an
        # infeasible plan (e.g. a budget below one tour) is reported at once.
        express_layout = plan_express(config) if config.express.enabled else None
        if config.engine.backend == 'ray':   # no Ray installed: say so before loading data
            from fl_uav.engine.ray_backend import require_ray

            require_ray()
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
        self._plugin_snapshots = plugin_snapshots(config, self.strategy, self.compressor)
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
        self.last_round_norms: list[dict[str, Any]] = []   # update_norms.csv's rows
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
        # faults.*: the drones that send poisoned updates (the same every round)
        self.poisoned = frozenset(config.faults.drones(config.num_drones, config.seed))
        # engine.backend ray: the drones train in Ray actors (started last: it takes seconds)
        self._ray = None
        if start_backend:
            self.start_backend()

    def start_backend(self) -> None:
        """engine.backend ray: join Ray and start the workers (seconds, up to minutes)."""
        if self.config.engine.backend == 'ray' and self._ray is None:
            from fl_uav.engine.ray_backend import RayBackend

            self._ray = RayBackend(self.config, self.data, self.out_dir)

    def close(self) -> None:
        """Stop what the engine started (the Ray backend's workers, and a local Ray)."""
        if self._ray is not None:
            self._ray.close()

    def take_warnings(self) -> list[str]:
        """What the backend had to say since the last call (a Ray worker lost, ...)."""
        return self._ray.take_warnings() if self._ray is not None else []

    def backend_summary(self) -> dict[str, Any]:
        """summary.json's ``engine_backend`` (the Ray backend's workers and traffic; only
        the backend's name when none started)."""
        if self._ray is not None:
            return self._ray.summary()
        return {'backend': self.config.engine.backend}

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

    def _sample_cap(self, k: int, real: int, mixed: int) -> int:
        """What drone k can hold this round, the most its sample count may weigh: its online
        buffer's capacity (buffer.capacity_samples), or offline its whole partition, plus the
        samples its top-up generated (``mixed`` − ``real``). The station's rule
        (fl_uav.fleet.ground_station), so a forged count (faults.claimed_samples) weighs here
        what it would weigh there."""
        held = (self.config.buffer.capacity_samples if self.config.data.online
                else len(self.parts[k]))
        return held + max(0, mixed - real)

    # --- one round -----------------------------------------------------------------------
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
            raise plugin_fault(self.config, self.out_dir, f'round {r}',
                               'aggregation.strategy', str(exc)) from exc
        mu = max((float(k.get(PROXIMAL_MU_KNOB, 0.0)) for k in knobs.values()), default=0.0)
        # Strategies that select drones (FedDPQ's draws) leave the others idle this round.
        active = [k for k in active if knobs.get(k, {}).get(DRAWS_KNOB, 1) > 0]
        # the planner's per-drone knobs (config.resources; none: no knobs)
        knobs = merge_knobs(knobs, self.resources.knobs(r, active))
        self.resources.record(r, knobs)
        seeds = [stream_seed(self.config.seed, r, Stream.BATCHES, k) for k in active]
        config = dataclasses.replace(self.train_config, lr=lr, proximal_mu=mu)
        if self._ray is not None:   # the workers gather the inputs; no top-up (refused)
            mixed = {k: (None, self.data.train_y[indices[k]], 0) for k in active}
            sizes = [len(indices[k]) for k in active]
            results = self._ray.train_round(
                r, self.weights, self.fingerprint, config, active, [indices[k] for k in active],
                seeds, self._vectorized_steps(active, seeds, knobs, config, sizes))
        else:
            mixed = {k: self._training_data(k, indices[k], knobs.get(k, {}).get(TOPUP_KNOB))
                     for k in active}   # (x, y, generated)
            client_data = [mixed[k][:2] for k in active]
            results = self._train_clients(r, active, client_data, seeds, config, knobs)
            if self.resources.wants_trace(r):   # lgc_steps_scale auto / online: measurement
                self.resources.observe_trace(
                    r, self._compressed_trace_losses(active, client_data, knobs,
                                                     self.resources.probe_drones(r))
                    if self.resources.online else self._trace_losses(client_data))
        updates, times, energies, losses, uplink, lost = [], [], [], [], 0, 0
        claimed: dict[int, int] = {}   # the sample count each drone reported
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
            uploaded = isinstance(result, UploadedResult)   # a Ray worker's, decoded
            finite = (result.finite if uploaded
                      else all(all_finite(v) for v in result.delta.values()))
            if not math.isfinite(loss) or not finite:
                raise ExperimentError(f'round {r}, drone {k}: non-finite training loss '
                                      f'({loss}); partial results are in {self.out_dir}')
            knob = knobs.get(k, {})
            if uploaded:   # poisoned (faults.*) and compressed by the worker, as below
                up_bytes, delta, channel_bytes = result.frame_bytes, result.delta, None
            else:
                if k in self.poisoned:   # faults.*: a forged update in place of the honest one
                    result = self._poisoned(k, r, result)
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
            claimed[k] = len(mixed[k][1])
            if k in self.poisoned and self.config.faults.claimed_samples:
                claimed[k] = self.config.faults.claimed_samples    # faults.*: a forged count
            # η̃ for every client (the 2ceoafl strategy also pairs with sgd, osafl, ...);
            # the 2ceoafl client reports the same value in its metrics (2CEOAFL eq. (13)).
            updates.append(cap_samples(ClientUpdate(
                sender=k, round_index=r, delta=delta, num_samples=claimed[k],
                metrics={'steps': steps, LOCAL_LR_KEY: lr, 'class_counts': counts.tolist(),
                         **result.metrics}),
                self._sample_cap(k, len(indices[k]), len(mixed[k][1]))))
        self.last_round_norms = _norm_rows(r, updates, claimed)
        try:
            aggregated = checked_aggregate(self.strategy, r, self.weights, updates)
        except AggregationError as exc:
            raise plugin_fault(self.config, self.out_dir, f'round {r}',
                               'aggregation.strategy', str(exc)) from exc
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
            trainer = self.express.trainer(self.config.engine, self.model, self.train_config)
            fields = self.express.run_update(
                trainer, dataclasses.replace(self.train_config, lr=lr), self.weights,
                self.strategy, self.data.train_x, self.data.train_y)
        except (NonFiniteLossError, FloatingPointError) as exc:
            raise ExperimentError(f'update {r}: non-finite training loss ({exc}); partial '
                                  f'results are in {self.out_dir}') from exc
        except AggregationError as exc:   # as _round's: the rule broke the contract
            raise plugin_fault(self.config, self.out_dir, f'update {r}',
                               'aggregation.strategy', str(exc)) from exc
        self.weights = fields.pop('weights')
        set_weights(self.model, self.weights)
        accuracy, test_loss = evaluate(self.model, self.data.test_x, self.data.test_y)
        self.sim_time_s = fields['sim_time_s']
        self.round_index = r
        return {'round': r, 'accuracy': accuracy, 'loss': test_loss, **fields,
                'wall_s': time.perf_counter() - wall_start}


def _norm_rows(r: int, updates: list[ClientUpdate], claimed: dict[int, int]
               ) -> list[dict[str, Any]]:
    """update_norms.csv's rows of round r: each arrived update's ||Δ||₂ as the strategy gets
    it (before any clipping), its ratio to the round's median, whether it is an outlier
    (fl_uav.aggregation.robust.OUTLIER_FACTOR), and the sample count used and claimed."""
    report = norm_report(updates)
    return [{'round': r, 'drone': u.sender, 'norm': report.norms[u.sender],
             'median_ratio': report.ratio(u.sender) if report.median else math.nan,
             'samples': u.num_samples, 'samples_claimed': claimed.get(u.sender, u.num_samples),
             'outlier': int(u.sender in report.outliers)} for u in updates]


def engine_inputs(engine: ExperimentEngine, down_s: float = 0.0) -> PlannerInputs:
    """The planner's view of the engine's fleet (how each planner reads it:
    fl_uav.planning.round_resources); ``down_s``: one round's model download."""
    config = engine.config
    counts = np.array([np.bincount(engine.data.train_y[p], minlength=engine.data.num_classes)
                       for p in engine.parts], np.float64)
    return PlannerInputs(
        drone_ids=tuple(range(config.num_drones)), class_counts=counts,
        distance_m=np.asarray(engine.distance_m, np.float64),
        num_params=int(sum(int(w.size) for w in engine.weights.values())),
        batch_size=config.learning.batch_size, kappa_steps=config.learning.kappa_steps,
        num_selected=config.aggregation.num_selected, seed=config.seed,
        resources=config.resources, system=config.system, download_s=down_s,
        generator_makes_absent_classes=bool(
            getattr(engine.topup_generator, 'makes_absent_classes', True)))


def build_round_resources(engine: ExperimentEngine, down_s: float) -> RoundResources:
    """The engine's configured planner (:class:`NoRoundResources` for ``none``)."""
    if engine.config.resources.planner == 'none':
        return NoRoundResources()
    return build_planner(engine_inputs(engine, down_s))


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
    interrupted: KeyboardInterrupt | None = None
    try:
        engine = ExperimentEngine(config, out_dir, start_backend=False)
        try:
            engine.start_backend()
        except KeyboardInterrupt as exc:   # Ctrl-C while Ray starts: ends as in a round
            interrupted = exc
    except (ValueError, ExperimentError) as exc:   # data, split or model the config cannot
        # give (DatasetError too), a backend that cannot start (engine.backend ray)
        if created and not any(out_dir.iterdir()):
            out_dir.rmdir()     # nothing ran: leave no empty directory behind
        if isinstance(exc, ExperimentError):
            raise
        raise ExperimentError(f'cannot set up the run: {exc}') from exc
    try:
        return _run(engine, config, out_dir, resume, echo, wall_start, interrupted)
    finally:
        engine.close()


def _run(engine: ExperimentEngine, config: ExperimentConfig, out_dir: Path, resume: bool,
         echo: Callable[[str], None], wall_start: float,
         interrupted: KeyboardInterrupt | None = None) -> dict[str, Any]:
    """run_experiment's rounds, with the engine set up (and closed by the caller);
    ``interrupted``: a Ctrl-C while the backend started (no round runs)."""
    if engine.data.note:
        echo(f'data: {engine.data.note}')
    rows_path = out_dir / ROUNDS_FILE
    if resume and not (out_dir / CHECKPOINT_FILE).is_file() and not read_rows(rows_path):
        echo(f'{out_dir}: no round was completed before the interruption; starting it over')
        resume = False
    if resume:
        engine.load_checkpoint()
        if engine.round_index > config.num_rounds:
            raise ExperimentError(f'cannot resume {out_dir}: it already has '
                                  f'{engine.round_index} rounds, num_rounds is '
                                  f'{config.num_rounds}')
        rows = [r for r in read_rows(rows_path) if r['round'] <= engine.round_index]
    else:
        rows = []
    with open(rows_path, 'w', newline='') as f:
        writer = csv.DictWriter(f, ROUND_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    norms_path = out_dir / UPDATE_NORMS_FILE
    kept = ([n for n in read_norm_rows(norms_path) if n['round'] <= engine.round_index]
            if resume else [])
    with open(norms_path, 'w', newline='') as f:
        writer = csv.DictWriter(f, NORM_COLUMNS)
        writer.writeheader()
        writer.writerows(kept)
    (out_dir / CONFIG_FILE).write_text(json.dumps(to_flat(config), indent=2))
    write_knobs(engine.resources, out_dir)   # FedDPQ's plan, before round 1
    if config.resources.planner != 'none':
        echo(f'resources: {config.resources.planner} planner ready; decisions in '
             f'{out_dir / KNOBS_FILE}')
    status, error = 'finished', ''
    backend_warnings: list[str] = []   # e.g. a Ray worker lost (its chunks retried)
    # a finite loss runs on: say when the model diverged or stays at chance
    divergence = DivergenceMonitor(engine.data.num_classes, config.num_rounds)
    for row in rows:   # a resumed run's earlier rounds
        divergence.observe(row['round'], row['accuracy'], row['loss'])
    try:
        if interrupted is not None:
            raise interrupted
        while engine.round_index < config.num_rounds:
            row = engine.run_round()
            rows.append(row)
            with open(rows_path, 'a', newline='') as f:
                csv.DictWriter(f, ROUND_COLUMNS).writerow(row)
            with open(norms_path, 'a', newline='') as f:
                csv.DictWriter(f, NORM_COLUMNS).writerows(engine.last_round_norms)
            engine.last_round_norms = []
            if (engine.round_index % config.engine.checkpoint_every == 0
                    or engine.round_index == config.num_rounds):
                engine.save_checkpoint()
            echo(_progress_line(row, config.num_rounds))
            for warning in divergence.observe(row['round'], row['accuracy'], row['loss']):
                echo(f'warning: {warning}')
            for warning in engine.take_warnings():
                backend_warnings.append(warning)
                echo(f'warning: {warning}')
    except KeyboardInterrupt as exc:   # Ctrl-C, or SIGTERM in `fl-uav experiment` (its name)
        status = 'interrupted'
        echo(f'interrupted{f" ({exc})" if str(exc) else ""} after round {engine.round_index}; '
             f'resume with --resume {out_dir}')
    except ExperimentError as exc:
        status, error = 'failed', str(exc)
        backend_warnings += engine.take_warnings()
        echo(f'error: {exc}')
    engine.write_express()   # the log up to the last completed update
    write_knobs(engine.resources, out_dir)
    norms, norm_warnings = norms_summary(read_norm_rows(norms_path), len(rows))
    for warning in norm_warnings:
        echo(f'warning: {warning}')
    summary = write_summary(config, out_dir, rows, status, error,
                            time.perf_counter() - wall_start,
                            {**engine.resources.run_summary(),
                             **drone_folders(config, engine.data, engine.parts),
                             'faults': config.faults.summary(config.num_drones, config.seed),
                             'update_norms': norms,
                             'engine_backend': engine.backend_summary(),
                             'warnings': [*divergence.warnings, *norm_warnings,
                                          *backend_warnings]})
    return summary


def _progress_line(row: dict[str, Any], num_rounds: int, width: int = 20) -> str:
    done = int(width * row['round'] / num_rounds)
    return (f'[{"#" * done}{"." * (width - done)}] round {row["round"]}/{num_rounds}  '
            f'acc {row["accuracy"]:.3f}  sim {row["sim_time_s"]:.1f} s  '
            f'up {row["uplink_bytes"] / 1e6:.2f} MB  wall {row["wall_s"]:.2f} s')
