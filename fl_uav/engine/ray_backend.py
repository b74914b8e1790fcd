"""``engine.backend: ray``: the drones train in Ray actors, on this machine or a cluster.

The only module of fl_uav that imports Ray (an optional dependency: requirements-ray.txt,
installed by ``make install``; without it a run with backend ray stops at start with one line).

At start the driver joins Ray (``engine.ray_address``: '' starts a local Ray for the run with
``engine.workers`` x ``engine.torch_threads`` CPUs, at most the CPUs this process may use;
``auto`` or host:port joins a running cluster), checks that the cluster has the CPUs
``engine.workers`` asks for, puts the training set into the object store once and starts
``engine.workers`` actors (:class:`~fl_uav.engine.chunk_worker.ChunkWorker`,
``engine.torch_threads`` CPUs each), each of which must run the driver's fl_uav code (same
source digest). Each round the driver puts the
global model into the object store once, plans the round's chunks exactly as the local trainer
would (fl_uav.engine.chunk_worker.plan_chunks) and hands them to the actors, at most
:data:`IN_FLIGHT_PER_WORKER` at a time each, so a faster actor takes more; the actors send each
chunk's uploads back as codec frames, which the driver decodes as they arrive. The run's
rounds.csv equals the local backend's in every column but wall_s, for any number of workers.

A worker that dies mid-round (its process killed, its node lost, killed by Ray's memory
monitor): its chunks are trained again by the remaining workers and the round goes on with the
same results (a warning says so); when none remains the run stops with one line and the
checkpoint of the last completed round (``--resume`` starts new workers). An exception inside
a worker is a bug and stops the run with it; any other Ray error stops it with one line.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fl_uav.engine.chunk_worker import (
    PACKAGE_ROOT,
    ChunkWorker,
    RoundContext,
    UploadedResult,
    code_fingerprint,
    decode_chunk,
    plan_chunks,
    step_counts,
)
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.data import TrainTestData
from fl_uav.engine.results import ExperimentError
from fl_uav.learning.training import TrainConfig
from fl_uav.learning.weights import Weights

try:
    import ray
    from ray.exceptions import (
        ActorUnschedulableError,
        GetTimeoutError,
        LocalRayletDiedError,
        NodeDiedError,
        ObjectLostError,
        OutOfMemoryError,
        RayActorError,
        RayError,
        RayTaskError,
        WorkerCrashedError,
    )
except ImportError:   # the optional dependency is absent: backend ray says so at start
    ray = None

RAY_REQUIREMENT = 'ray==2.60.0'
"""The Ray release the backend is tested with (requirements-ray.txt)."""
IN_FLIGHT_PER_WORKER = 2
"""Chunks handed to an actor before it returns one: one training, one waiting (no idle gap)."""
PROBE_TIMEOUT_S = 5.0
"""How long a host:port address may take to accept a TCP connection before it counts as
not answering."""
CPU_RELEASE_WAIT_S = 10.0
"""How long a start waits for CPUs that killed actors still hold, and a stop for its actors
to be gone."""
WORKER_START_TIMEOUT_S = 180.0
"""How long the actors may take to start (import torch, build the model) before the run stops."""


def require_ray() -> None:
    """ExperimentError (one line) when the ray package is not installed."""
    if ray is None:
        raise ExperimentError(f'engine.backend ray needs the ray package, which is not '
                              f'installed: pip install {RAY_REQUIREMENT} (make install installs '
                              f'it), or set engine.backend local')


def _lost_worker_errors() -> tuple[type[BaseException], ...]:
    """What ray.get raises when the worker (or its node, its raylet, or its result) is gone,
    Ray's memory monitor killed it, or it cannot be placed again."""
    return (RayActorError, WorkerCrashedError, NodeDiedError, ObjectLostError,
            OutOfMemoryError, ActorUnschedulableError, LocalRayletDiedError)


def probe_address(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """ExperimentError (one line) unless something accepts TCP connections at host:port."""
    host, _, port = address.rpartition(':')
    host = host.strip('[]')
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except OSError as exc:
        reason = 'no answer' if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
    raise ExperimentError(
        f'engine.ray_address {address}: no Ray cluster answers there ({reason} within '
        f'{timeout_s:g} s); start one with `ray start --head --port {port}` on that machine '
        f'(docs/cli.md, "Many machines: the Ray backend"), or leave engine.ray_address empty '
        f'for a local Ray')


class RayBackend:
    """The Ray side of an :class:`~fl_uav.engine.experiment.ExperimentEngine`: Ray joined,
    actors started, rounds trained (:meth:`train_round`), everything stopped by
    :meth:`close`."""

    #: Tests' seam (a staticmethod set on the class): called with (backend, round) once a
    #: round's first chunks are handed out, e.g. to kill a worker mid-round.
    on_submitted: Callable[[RayBackend, int], None] | None = None

    def __init__(self, config: ExperimentConfig, data: TrainTestData, out_dir: Path) -> None:
        require_ray()
        self.config, self.out_dir = config, Path(out_dir)
        self.workers = config.engine.workers
        self.cpus_per_worker = config.engine.torch_threads
        self.actors: list[Any] = []
        self.alive: list[int] = []
        self.info: list[dict[str, Any]] = []
        self._warnings: list[str] = []
        self._owns_ray = False
        self.retried_chunks = 0
        self.traffic: list[dict[str, float]] = []   # per round: bytes, chunks, seconds
        self._cpu_mark: float | None = None
        self._data_refs: tuple[Any, ...] = ()
        self.start_s = 0.0
        started = time.perf_counter()
        try:
            self._join()
            self._check_cpus()
            self._start_actors(data)
        except BaseException:
            self.close()
            raise
        self.start_s = time.perf_counter() - started

    # --- start and stop ------------------------------------------------------------------
    def _join(self) -> None:
        """Join Ray: the process's connection if it has one, else per engine.ray_address.
        Ray's core installs its own SIGTERM handler (it logs and kills the process): the
        Python handlers in place before (``fl-uav experiment``'s SIGTERM as Ctrl-C, so the
        run ends as interrupted with its summary) are put back."""
        handlers = _python_handlers()
        try:
            self._join_ray()
        finally:
            _restore_handlers(handlers)

    def _join_ray(self) -> None:
        if ray.is_initialized():   # the caller joined (ray.init before run_experiment)
            self.where = 'the Ray this process joined'
            return
        address = self.config.engine.ray_address
        os.environ.setdefault('RAY_USAGE_STATS_ENABLED', '0')   # no telemetry unless asked
        if not address:
            self._check_local_cpus()   # before ray.init, which would size its Ray to the ask
            # The actors are the run's compute: at the driver's priority, not Ray's default
            # +15 for its workers (which leaves them only what every other process leaves).
            os.environ.setdefault('RAY_worker_niceness', '0')
            # A Ray of our own: its workers import the driver's fl_uav (same tree).
            path = os.pathsep.join(p for p in (str(PACKAGE_ROOT.parent),
                                               os.environ.get('PYTHONPATH', '')) if p)
            try:
                ray.init(address='local', num_cpus=self.workers * self.cpus_per_worker,
                         include_dashboard=False, log_to_driver=False, logging_level='warning',
                         runtime_env={'env_vars': {'PYTHONPATH': path}})
            except Exception as exc:   # Ray's processes could not start here
                raise ExperimentError(f'engine.backend ray: cannot start a local Ray '
                                      f'({_first_line(exc)})') from exc
            self._owns_ray = True
            self.where = 'the local Ray started for this run'
            return
        if address != 'auto':
            probe_address(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level='warning')
        except (ConnectionError, RuntimeError, ValueError) as exc:
            token = ('' if os.environ.get('RAY_AUTH_MODE') == 'token' else
                     '; a cluster of `ray start --head` wants its token (Ray 2.60): export '
                     'RAY_AUTH_MODE=token, with RAY_AUTH_TOKEN on a machine other than the '
                     'head')
            raise ExperimentError(
                f'engine.ray_address {address}: cannot join a Ray cluster '
                f'({_first_line(exc)}){token if address != "auto" else ""}; start one with '
                f'`ray start --head` (docs/cli.md, "Many machines: the Ray backend") or leave '
                f'engine.ray_address empty for a local Ray') from None
        self._owns_ray = True   # our connection: ray.shutdown() leaves the cluster running
        self.where = f'the Ray cluster at {address}'

    def _asked_cpus(self) -> str:
        """The CPUs the run asks for, named by its keys."""
        return (f'engine.workers {self.workers} x engine.torch_threads {self.cpus_per_worker} '
                f'= {self.workers * self.cpus_per_worker} CPUs')

    def _fewer_cpus(self, cpus: float) -> str:
        """What to set so that the run asks for at most ``cpus`` CPUs ('' when none fits)."""
        if cpus < 1:
            return ''
        if self.cpus_per_worker > cpus:   # one worker alone is too big
            return f'engine.torch_threads to at most {int(cpus)}'
        return f'engine.workers to at most {int(cpus // self.cpus_per_worker)}'

    def _check_local_cpus(self) -> None:
        """ExperimentError when a local Ray would have more CPUs than this process may use."""
        usable = usable_cpus()
        if self.workers * self.cpus_per_worker > usable:
            raise ExperimentError(
                f'{self._asked_cpus()}, but this process may use {usable} CPUs of this '
                f'machine: set {self._fewer_cpus(usable)}, or join a cluster with more '
                f'(engine.ray_address)')

    def _check_cpus(self) -> None:
        """ExperimentError when the cluster cannot place every actor now (it would wait)."""
        total = float(ray.cluster_resources().get('CPU', 0.0))
        free = float(ray.available_resources().get('CPU', 0.0))
        need = self.workers * self.cpus_per_worker
        waited = time.monotonic() + CPU_RELEASE_WAIT_S
        while free < need <= total and time.monotonic() < waited:   # an earlier run's
            time.sleep(0.2)                                          # actors still stopping
            free = float(ray.available_resources().get('CPU', 0.0))
        if need > total:
            fewer = self._fewer_cpus(total)
            raise ExperimentError(
                f'{self._asked_cpus()}, but {self.where} has {total:g}: '
                f'{f"set {fewer}, or " if fewer else ""}add machines (ray start --address)')
        if need > free:
            fewer = self._fewer_cpus(free)
            raise ExperimentError(
                f'{self._asked_cpus()}, but only {free:g} of the {total:g} CPUs of '
                f'{self.where} are free (other work holds the rest; waited '
                f'{CPU_RELEASE_WAIT_S:g} s): {f"set {fewer}, or " if fewer else ""}wait')

    def _start_actors(self, data: TrainTestData) -> None:
        """The training set into the object store once; the actors; their code checked."""
        actor = ray.remote(num_cpus=self.cpus_per_worker, max_restarts=0,
                           max_task_retries=0)(ChunkWorker)
        x_ref, y_ref = ray.put(data.train_x), ray.put(data.train_y)
        self._data_refs = (x_ref, y_ref)   # held for the run (the actors read them zero-copy)
        self.data_bytes = int(data.train_x.nbytes + data.train_y.nbytes)
        self.actors = [actor.remote(self.config, x_ref, y_ref, data.num_classes, True)
                       for _ in range(self.workers)]
        try:
            self.info = ray.get([a.describe.remote() for a in self.actors],
                                timeout=WORKER_START_TIMEOUT_S)
        except GetTimeoutError:
            raise ExperimentError(f'the {self.workers} Ray workers did not start within '
                                  f'{WORKER_START_TIMEOUT_S:g} s on {self.where}') from None
        except RayError as exc:   # a worker lost, or an exception in its start
            raise ExperimentError(f'a Ray worker failed to start on {self.where}: '
                                  f'{_first_line(exc)}') from None
        code = code_fingerprint()
        for info in self.info:
            if info['code'] != code:
                raise ExperimentError(
                    f'the Ray worker on {info["host"]} runs other fl_uav code '
                    f'({info["package"]}) than this driver ({PACKAGE_ROOT}): install the same '
                    f'fl_uav on every machine of the cluster')
        self.alive = list(range(self.workers))

    def close(self) -> None:
        """Stop the actors; leave Ray if this backend joined it (a local Ray stops)."""
        if ray is None:
            return
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:   # already gone, or Ray already down
                pass
        try:   # gone before the next run asks Ray for CPUs: a call to each fails at once
            calls = [a.describe.remote() for a in self.actors]
            if calls:
                ray.wait(calls, num_returns=len(calls), timeout=CPU_RELEASE_WAIT_S)
        except Exception:   # Ray already down
            pass
        self.actors, self.alive, self._data_refs = [], [], ()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    # --- a round -------------------------------------------------------------------------
    def train_round(self, r: int, weights: Weights, fingerprint: bytes,
                    train_config: TrainConfig, drones: list[int], samples: list[np.ndarray],
                    seeds: list[int], steps: list[int] | None) -> list[UploadedResult]:
        """Train the round's drones (the local trainer's chunks, on the actors); each drone's
        upload, decoded, in ``drones`` order."""
        started = time.perf_counter()
        self._driver_cpu_after()   # the previous round's driver work after its training
        counts = step_counts(train_config, samples, steps)
        specs = plan_chunks(self.config, drones, samples, seeds, steps, counts)
        context = ray.put(RoundContext(r, weights, train_config, fingerprint))
        traffic: dict[str, float] = {
            'model_out': int(sum(w.nbytes for w in weights.values())),
            'chunks_out': int(sum(s.nbytes for spec in specs for s in spec.samples)),
            'frames_back': 0, 'chunks': len(specs),
            'drone_steps': sum(counts),
            'worker_busy_s': 0.0, 'worker_cpu_s': 0.0, 'decode_s': 0.0,
            'train_wall_s': 0.0, 'driver_cpu_after_s': 0.0}
        pending = deque(specs)
        in_flight: dict[Any, tuple[int, Any]] = {}
        load = dict.fromkeys(self.alive, 0)

        def hand_out() -> None:
            for a in list(self.alive):
                while pending and load[a] < IN_FLIGHT_PER_WORKER:
                    spec = pending.popleft()
                    in_flight[self.actors[a].train_chunk.remote(context, spec)] = (a, spec)
                    load[a] += 1

        hand_out()
        if self.on_submitted is not None:
            self.on_submitted(self, r)
        results: dict[int, UploadedResult] = {}
        while in_flight:
            [ref], _ = ray.wait(list(in_flight), num_returns=1)
            a, spec = in_flight.pop(ref)
            load[a] -= 1
            try:
                chunk = ray.get(ref)
            except _lost_worker_errors() as exc:
                self._lose(a, r, exc)   # ExperimentError when no worker is left
                pending.appendleft(spec)
                self.retried_chunks += 1
                hand_out()
                continue
            except RayTaskError as exc:
                raise ExperimentError(f'round {r}: a Ray worker failed on chunk {spec.index} '
                                      f'(drones {spec.drones[0]}..): {_first_line(exc)}; '
                                      f'partial results are in {self.out_dir}') from None
            except RayError as exc:   # Ray itself (its object store, its raylet, ...)
                raise ExperimentError(f'round {r}: Ray failed ({type(exc).__name__}: '
                                      f'{_first_line(exc)}); the rounds before are in '
                                      f'{self.out_dir} (--resume goes on from its last '
                                      f'checkpoint)') from None
            del ref
            if chunk.diverged is not None:
                drone, message = chunk.diverged
                raise ExperimentError(f'round {r}, drone {drone}: non-finite training loss '
                                      f'({message}); partial results are in {self.out_dir}')
            traffic['frames_back'] += chunk.nbytes
            traffic['worker_busy_s'] += chunk.seconds
            traffic['worker_cpu_s'] += chunk.cpu_seconds
            hand_out()   # before decoding: the worker is not kept waiting
            decode_start = time.perf_counter()
            try:
                uploads = decode_chunk(chunk, r, weights, fingerprint)
            except ValueError as exc:
                raise ExperimentError(f'round {r}: {exc}; partial results are in '
                                      f'{self.out_dir}') from None
            traffic['decode_s'] += time.perf_counter() - decode_start
            results.update(zip(chunk.drones, uploads))
            del chunk   # its frames leave the object store
        traffic['train_wall_s'] = time.perf_counter() - started
        self.traffic.append(traffic)
        self._cpu_mark = time.process_time()
        return [results[k] for k in drones]

    def _lose(self, a: int, r: int, exc: BaseException) -> None:
        """Worker ``a`` is gone: no more chunks for it; ExperimentError when none is left."""
        if a not in self.alive:
            return
        self.alive.remove(a)
        who = f'Ray worker {a} (pid {self.info[a]["pid"]} on {self.info[a]["host"]})'
        if not self.alive:
            raise ExperimentError(
                f'round {r}: all {self.workers} Ray workers are gone (the last, {who}: '
                f'{_first_line(exc)}); the rounds before are in {self.out_dir} (--resume '
                f'goes on from its last checkpoint with new workers)')
        self._warnings.append(
            f'round {r}: {who} died ({_first_line(exc)}); its chunks are trained by the '
            f'{len(self.alive)} remaining worker(s), results unchanged')

    def _driver_cpu_after(self) -> None:
        """The driver's CPU seconds since the last round's training ended (its per-drone
        loop, aggregation, evaluation, checkpoint), booked to that round."""
        if self.traffic and self._cpu_mark is not None:
            self.traffic[-1]['driver_cpu_after_s'] = time.process_time() - self._cpu_mark
            self._cpu_mark = None

    # --- reporting -----------------------------------------------------------------------
    def take_warnings(self) -> list[str]:
        """The warnings since the last call (a worker lost)."""
        taken, self._warnings = self._warnings, []
        return taken

    def summary(self) -> dict[str, Any]:
        """summary.json's ``engine_backend``: workers, where they ran, what went through Ray."""
        self._driver_cpu_after()   # the last round's (summary: after its checkpoint)
        rounds = len(self.traffic)
        mean = {key: (sum(t[key] for t in self.traffic) / rounds if rounds else 0.0)
                for key in ('model_out', 'chunks_out', 'frames_back')}
        per_round = {key: [round(t[key], 3) for t in self.traffic]
                     for key in ('chunks', 'drone_steps', 'worker_busy_s', 'worker_cpu_s',
                                 'decode_s', 'train_wall_s', 'driver_cpu_after_s')}
        return {'backend': 'ray', 'where': self.where, 'workers': self.workers,
                'workers_at_end': len(self.alive),
                'hosts': sorted({i['host'] for i in self.info}),
                'start_s': round(self.start_s, 3), 'training_set_bytes': self.data_bytes,
                'bytes_per_round': mean, 'rounds': per_round,
                'retried_chunks': self.retried_chunks}


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or taskset's
    limit), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # no affinity masks here (macOS)
        return os.cpu_count() or 1


def _python_handlers() -> dict[int, Any]:
    """The Python-level SIGTERM and SIGINT handlers (main thread only; else none)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


def _restore_handlers(handlers: dict[int, Any]) -> None:
    """Install ``handlers`` again (over whatever Ray's C++ core put in their place)."""
    for sig, handler in handlers.items():
        if handler is not None:
            signal.signal(sig, handler)


def _first_line(exc: BaseException) -> str:
    """An exception's first non-empty line (Ray's carry tracebacks and hints below it)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(exc).__name__
