"""A round's training cut into chunks that any process can train, and what comes back.

The engine's vectorized trainer stacks drones into chunks (fl_uav.learning.vectorized,
:func:`~fl_uav.learning.vectorized.chunk_plan`: sorted by step count, equal-sized, at most
``engine.max_clients_per_chunk``). A chunk's arithmetic depends on which drones it holds and in
which order, nothing else, so the driver plans the chunks exactly as the local trainer would
(:func:`plan_chunks`) and a :class:`ChunkWorker` anywhere trains one chunk at a time with the
same trainer: every drone's result is bit-identical to the local backend's, whatever the
number of workers and whichever worker trains which chunk (a chunk retried on another worker
included). ``engine.backend ray`` (fl_uav.engine.ray_backend) runs ChunkWorkers as Ray actors;
nothing here imports Ray.

A worker holds the training set (its inputs once, given at start: through Ray's object store,
one copy per machine shared by its workers) and the partition; a chunk names its drones, their
samples (the partition's, or an online buffer's) and seeds. For each drone the worker computes
what the local engine does between training and the upload: Δ (structured pruning expanded),
the poisoned forgery (``faults.*``) and the compressed upload as the fleet's codec frame; the
driver decodes the frames as the ground station does (:func:`decode_chunk`), so the bytes
charged are those of the frames and the delta aggregated is what the frames carry.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fl_uav.compression.compressor import decode_update_frame
from fl_uav.compression.errors import FrameError
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.faults import poison_result
from fl_uav.learning.client_algorithms import local_steps_result
from fl_uav.learning.training import NonFiniteLossError, TrainConfig
from fl_uav.learning.vectorized import chunk_plan, client_step_count, first_diverging_client
from fl_uav.learning.weights import Weights
from fl_uav.streams import Stream, stream_rng

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def code_fingerprint(root: Path = PACKAGE_ROOT) -> str:
    """A digest of every fl_uav source file (path and contents): the driver and each worker
    must run the same code, or the same seed would not give the same run."""
    digest = hashlib.blake2b(digest_size=12)
    for path in sorted(root.rglob('*.py')):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class RoundContext:
    """What every chunk of a round shares (sent once per round): round r, the global model,
    the round's training settings (lr decayed, FedProx μ) and the model's fingerprint."""

    round_index: int
    weights: Weights
    train_config: TrainConfig
    fingerprint: bytes


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk: its position in the round's plan, its drones in training order, each
    drone's sample indices into the training set, batch seed and exact step count (None: the
    config's)."""

    index: int
    drones: tuple[int, ...]
    samples: tuple[np.ndarray, ...]
    seeds: tuple[int, ...]
    steps: tuple[int, ...] | None


@dataclass(frozen=True)
class DroneReport:
    """What a worker reports for one drone besides its frame."""

    steps: int
    compute_dense_steps: float
    mean_loss: float
    num_samples: int
    metrics: dict[str, Any]
    finite: bool            # the trained Δ (before any poisoning) has no NaN or inf


@dataclass(frozen=True)
class ChunkResult:
    """A trained chunk: the drones' frames back to back in one byte array (``offsets``:
    len(drones) + 1 boundaries) and their reports; or ``diverged`` = (drone, message) when a
    drone's training loss became non-finite (then nothing else)."""

    index: int
    drones: tuple[int, ...]
    frames: np.ndarray
    offsets: tuple[int, ...]
    reports: tuple[DroneReport, ...]
    diverged: tuple[int, str] | None = None
    seconds: float = 0.0       # the worker's wall time on the chunk (training and encoding)
    cpu_seconds: float = 0.0   # and its CPU time (the same on a core of its own)

    @property
    def nbytes(self) -> int:
        return int(self.frames.nbytes)


@dataclass(frozen=True)
class UploadedResult:
    """One drone's round as the driver has it from a worker: the delta decoded from its frame
    (what the station aggregates), the frame's length and the worker's report."""

    delta: Weights
    frame_bytes: int
    steps: int
    mean_loss: float
    num_samples: int
    compute_dense_steps: float
    metrics: dict[str, Any] = field(default_factory=dict)
    finite: bool = True


def step_counts(train_config: TrainConfig, samples: list[np.ndarray],
                steps: list[int] | None) -> list[int]:
    """Each drone's local steps this round (its exact count, else the config's epochs)."""
    return [client_step_count(train_config, len(s), None if steps is None else steps[i])
            for i, s in enumerate(samples)]


def plan_chunks(config: ExperimentConfig, drones: list[int], samples: list[np.ndarray],
                seeds: list[int], steps: list[int] | None, counts: list[int]
                ) -> list[ChunkSpec]:
    """The chunks the local trainer would stack this round (same drones, same order);
    ``counts``: :func:`step_counts`."""
    specs = []
    for j, chunk in enumerate(chunk_plan(counts, config.engine.max_clients_per_chunk)):
        specs.append(ChunkSpec(
            index=j, drones=tuple(drones[i] for i in chunk),
            samples=tuple(np.ascontiguousarray(samples[i], np.int64) for i in chunk),
            seeds=tuple(int(seeds[i]) for i in chunk),
            steps=None if steps is None else tuple(int(steps[i]) for i in chunk)))
    return specs


class ChunkWorker:
    """Trains chunks of drones: a Ray actor's body (fl_uav.engine.ray_backend) or, in
    process, a test's. ``train_x``, ``train_y``: the experiment's training set;
    ``num_classes``: its classes (the model's outputs)."""

    def __init__(self, config: ExperimentConfig, train_x: np.ndarray, train_y: np.ndarray,
                 num_classes: int, in_actor: bool = False) -> None:
        import torch

        from fl_uav.learning.models import build_model

        if in_actor:   # a process of its own: the engine's thread and allocator settings
            from fl_uav.engine.allocator import keep_large_allocations

            torch.set_num_threads(config.engine.torch_threads)
            keep_large_allocations()
        self.config = config
        self.train_x, self.train_y = train_x, train_y
        sample_shape = train_x.shape[1:]
        self.model = build_model(config.learning.model, num_classes,
                                 input_px=sample_shape[-1], seed=config.learning.init_seed,
                                 in_channels=sample_shape[0])
        self.shapes = {n: tuple(p.shape) for n, p in self.model.named_parameters()}
        self.compressor = config.compression.build()
        self.poisoned = frozenset(config.faults.drones(config.num_drones, config.seed))
        self._trainer = config.engine.build_trainer(self.model, config.learning.train_config())
        self._pruned: tuple[int, Any] | None = None   # (round, (model, start, index_map))

    def describe(self) -> dict[str, Any]:
        """Where this worker runs and which code: for the driver's start-up check."""
        import fl_uav

        return {'pid': os.getpid(), 'host': socket.gethostname(),
                'package': str(Path(fl_uav.__file__).parent), 'code': code_fingerprint()}

    def train_chunk(self, context: RoundContext, spec: ChunkSpec) -> ChunkResult:
        """Train one chunk from the round's model; encode each drone's upload."""
        started, cpu_started = time.perf_counter(), time.process_time()
        config, r = self.config, context.round_index
        keep = config.learning.structured_keep
        trainer, start, index_map = self._trainer, context.weights, None
        if keep < 1.0:   # the round's smaller model, made once per round from its weights
            from fl_uav.learning.pruning import pruned_training_model

            if self._pruned is None or self._pruned[0] != r:
                model, start, index_map = pruned_training_model(self.model, context.weights,
                                                                keep)
                self._pruned = (r, (config.engine.build_trainer(model, context.train_config),
                                    start, index_map))
            trainer, start, index_map = self._pruned[1]
        trainer.config = context.train_config
        data = [(self.train_x[s], self.train_y[s]) for s in spec.samples]
        steps = None if spec.steps is None else list(spec.steps)
        try:
            updates = trainer.train(start, data, list(spec.seeds), steps=steps)
        except NonFiniteLossError as exc:
            return ChunkResult(spec.index, spec.drones, np.zeros(0, np.uint8), (0,), (),
                               diverged=(self._diverging(trainer, start, spec, data),
                                         str(exc)))
        frames, offsets, reports = [], [0], []
        for drone, (_, labels), update in zip(spec.drones, data, updates):
            result = local_steps_result(update, start, len(labels), keep, index_map,
                                        self.shapes)
            finite = (math.isfinite(float(result.mean_loss))
                      and all(all_finite(v) for v in result.delta.values()))
            frame = b''
            if finite:
                if drone in self.poisoned:   # faults.*: the forgery in place of the update
                    result = poison_result(config.faults, config.seed, drone, r, result)
                frame, _ = self.compressor.compress(
                    result.delta, stream_rng(config.seed, r, Stream.COMPRESSOR, drone),
                    round_index=r, sender=drone, fingerprint=context.fingerprint,
                    mask=result.mask, metrics=result.metrics)
            frames.append(np.frombuffer(frame, np.uint8))
            offsets.append(offsets[-1] + len(frame))
            reports.append(DroneReport(int(result.steps), float(result.compute_dense_steps),
                                       float(result.mean_loss), int(result.num_samples),
                                       dict(result.metrics), finite))
        return ChunkResult(spec.index, spec.drones,
                           np.concatenate(frames) if frames else np.zeros(0, np.uint8),
                           tuple(offsets), tuple(reports),
                           seconds=time.perf_counter() - started,
                           cpu_seconds=time.process_time() - cpu_started)

    @staticmethod
    def _diverging(trainer, start: Weights, spec: ChunkSpec, data) -> int:
        """The chunk's first drone whose loss diverges when it trains alone (as the local
        engine names it), else its first drone."""
        drone = first_diverging_client(trainer, start, spec.drones, data, spec.seeds,
                                       spec.steps)
        return spec.drones[0] if drone is None else drone


def decode_chunk(result: ChunkResult, round_index: int, like: Weights,
                 fingerprint: bytes) -> list[UploadedResult]:
    """The chunk's drones as the station receives them: each frame decoded (CRC, bounds,
    fingerprint, sender and round checked), the delta owned by the driver (copied out of the
    worker's buffer). A drone whose Δ was not finite comes back with ``finite`` False and an
    empty delta (the engine stops on it, as the local engine does)."""
    uploads = []
    frames = memoryview(result.frames)
    for i, (drone, report) in enumerate(zip(result.drones, result.reports)):
        lo, hi = result.offsets[i], result.offsets[i + 1]
        delta: Weights = {}
        if report.finite:
            try:
                decoded = decode_update_frame(frames[lo:hi], like, fingerprint)
            except FrameError as exc:
                raise ValueError(f'drone {drone}: its frame does not decode ({exc.reason}: '
                                 f'{exc})') from None
            if (decoded.sender, decoded.round_index) != (drone, round_index):
                raise ValueError(f'drone {drone}: its frame says sender {decoded.sender}, '
                                 f'round {decoded.round_index}')
            delta = decoded.delta
        uploads.append(UploadedResult(delta, hi - lo, report.steps, report.mean_loss,
                                      report.num_samples, report.compute_dense_steps,
                                      report.metrics, report.finite))
    return uploads


def all_finite(array: np.ndarray) -> bool:
    """No NaN or ±inf in ``array``: its float64 sum is finite exactly then (float32 values
    cannot overflow a float64 sum; NaN and inf propagate), one pass without a mask array."""
    return math.isfinite(float(np.sum(array, dtype=np.float64)))
