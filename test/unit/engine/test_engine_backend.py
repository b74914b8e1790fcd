"""engine.backend without a Ray cluster: the config keys and what backend ray refuses, the
chunk workers' arithmetic in process (equal to the local backend's rounds), the frames they
send, and the start-up errors (Ray not installed, an address nobody answers at, a local Ray
of more CPUs than this process may use) and a Ctrl-C while Ray starts. The Ray runs are in
test_ray_backend.py."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_uav.compression.compressor import NoCompression, decode_update_frame
from fl_uav.compression.config import build_compressor
from fl_uav.configschema import ConfigError, build_config, read_params_file
from fl_uav.engine import ray_backend
from fl_uav.engine.chunk_worker import (
    ChunkSpec,
    ChunkWorker,
    RoundContext,
    decode_chunk,
    plan_chunks,
    step_counts,
)
from fl_uav.engine.config import RAY_CLIENTS, ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine, run_experiment
from fl_uav.engine.results import ExperimentError, check_resumable
from fl_uav.learning.choices import CLIENT_ALGORITHMS
from fl_uav.learning.client_algorithms import build_client_algorithm
from fl_uav.learning.training import TrainConfig
from fl_uav.learning.vectorized import client_batches, client_step_count
from fl_uav.learning.weights import architecture_fingerprint

REPO = Path(__file__).resolve().parents[3]
QUICK = REPO / 'config' / 'experiments' / 'quick_digits.yaml'


def _config(**overrides) -> ExperimentConfig:
    flat = read_params_file(QUICK)
    flat.update(overrides)
    return build_config(ExperimentConfig, flat)


# --- the config keys --------------------------------------------------------------------

@pytest.mark.parametrize('overrides, message', [
    ({'engine.backend': 'spark'}, "backend 'spark' unknown; choices: local, ray"),
    ({'engine.ray_address': 'auto'},
     "engine.ray_address = 'auto' has no effect with engine.backend = 'local'"),
    ({'engine.backend': 'ray', 'engine.ray_address': 'head-node'},
     'engine.ray_address must be empty (a local Ray), auto or host:port'),
    ({'engine.backend': 'ray', 'engine.vectorized': False},
     'engine.vectorized must be true'),
    ({'engine.backend': 'ray', 'learning.client_algorithm': 'scaffold',
      'aggregation.strategy': 'scaffold'}, 'learning.client_algorithm sgd or osafl'),
    ({'engine.backend': 'ray', 'compression.method': 'lgc'}, "compression.method 'lgc'"),
    ({'engine.backend': 'ray', 'data.topup': True}, 'does not run data.topup'),
])
def test_backend_keys_refuse_what_cannot_run(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        _config(**overrides)


def test_backend_ray_refuses_a_resource_planner():
    # Arrange: LGC's fixed policy, a run the local backend accepts
    flat = read_params_file(REPO / 'config' / 'experiments' / 'lgc_fixed_fmnist.yaml')
    build_config(ExperimentConfig, flat)
    # Act / Assert
    with pytest.raises(ConfigError, match='engine.backend ray does not run resources.planner '
                                          'lgc_fixed'):
        build_config(ExperimentConfig, {**flat, 'engine.backend': 'ray'})


def test_backend_ray_accepts_a_cluster_address_and_the_vectorized_clients():
    for address in ('', 'auto', '10.0.0.5:6379', 'head.example.org:6380'):
        assert _config(**{'engine.backend': 'ray',
                          'engine.ray_address': address}).engine.ray_address == address
    vectorizable = {name for name in CLIENT_ALGORITHMS
                    if build_client_algorithm(name).vectorizable}
    assert set(RAY_CLIENTS) == vectorizable


def test_requirements_pin_the_ray_the_backend_names():
    pins = (REPO / 'requirements-ray.txt').read_text().split()
    assert ray_backend.RAY_REQUIREMENT in pins
    assert '-r requirements-ray.txt' in (REPO / 'Makefile').read_text()


# --- the chunks -------------------------------------------------------------------------

@pytest.mark.parametrize('config', [
    TrainConfig(batch_size=16, local_epochs=1), TrainConfig(batch_size=8, local_epochs=3),
    TrainConfig(batch_size=32, local_epochs=2, max_steps=5)])
def test_step_counts_are_the_batches_the_trainer_draws(config):
    for n in (0, 1, 7, 8, 9, 31, 64, 100):
        assert client_step_count(config, n) == len(client_batches(n, config, seed=n))
        if n:
            for steps in (1, 4, 13):
                exact = client_step_count(config, n, steps)
                assert exact == steps


class _InProcessChunks:
    """RayBackend's round without Ray: the same plan, ChunkWorker and decode, one process."""

    def __init__(self, engine: ExperimentEngine) -> None:
        data = engine.data
        self.config = engine.config
        self.worker = ChunkWorker(engine.config, data.train_x, data.train_y, data.num_classes)
        self.frames = 0

    def train_round(self, r, weights, fingerprint, train_config, drones, samples, seeds,
                    steps):
        context = RoundContext(r, weights, train_config, fingerprint)
        results = {}
        counts = step_counts(train_config, samples, steps)
        for spec in reversed(plan_chunks(self.config, drones, samples, seeds, steps,
                                         counts)):   # any order: the chunks are independent
            chunk = self.worker.train_chunk(context, spec)
            self.frames += chunk.nbytes
            results.update(zip(chunk.drones, decode_chunk(chunk, r, weights, fingerprint)))
        return [results[k] for k in drones]

    def close(self) -> None:
        pass

    def take_warnings(self) -> list[str]:
        return []


def _round_rows(engine: ExperimentEngine, rounds: int) -> list[dict]:
    rows = [engine.run_round() for _ in range(rounds)]
    return [{k: v for k, v in row.items() if k != 'wall_s'} for row in rows]


@pytest.mark.parametrize('overrides', [
    # online buffers, pruned training, a poisoned drone, QSGD frames, late drones
    {'data.online': True, 'data.initial_samples': 30, 'learning.structured_keep': 0.75,
     'faults.poisoned_count': 2, 'faults.poison': 'random', 'faults.poison_scale': 1.0,
     'compression.method': 'qsgd',
     'system.deadline_s': 60.0},
    # OSAFL's random step counts, range-quantized frames
    {'learning.client_algorithm': 'osafl', 'aggregation.strategy': 'osafl',
     'compression.method': 'range', 'learning.max_local_steps': 6},
], ids=['online-pruned-poisoned-qsgd', 'osafl-range'])
def test_chunk_workers_give_the_local_rounds(tmp_path, overrides):
    # Arrange: two engines of one config; one trains through chunk workers
    config = _config(**{'num_rounds': 3, 'engine.max_clients_per_chunk': 3, **overrides})
    local = ExperimentEngine(config, tmp_path / 'local')
    chunked = ExperimentEngine(config, tmp_path / 'chunked')
    chunked._ray = _InProcessChunks(chunked)
    # Act
    expected, got = _round_rows(local, 3), _round_rows(chunked, 3)
    # Assert: every column but wall_s, bit for bit; the frames are the uplink charged
    assert got == expected
    assert chunked._ray.frames >= sum(row['uplink_bytes'] for row in got)


def test_a_diverging_chunk_names_the_drone_that_diverges_alone(tmp_path):
    # Arrange: drone 5's first sample is NaN; a chunk of drones 3..6
    engine = ExperimentEngine(_config(), tmp_path)
    x = engine.data.train_x.copy()
    x[engine.parts[5][0]] = np.nan
    worker = ChunkWorker(engine.config, x, engine.data.train_y, engine.data.num_classes)
    drones = (3, 4, 5, 6)
    spec = ChunkSpec(0, drones, tuple(np.asarray(engine.parts[k]) for k in drones),
                     (1, 2, 3, 4), None)
    context = RoundContext(1, engine.weights, engine.train_config, engine.fingerprint)
    # Act
    chunk = worker.train_chunk(context, spec)
    # Assert: no frames; the drone named (as the local engine names it)
    assert chunk.diverged is not None and chunk.diverged[0] == 5
    assert chunk.reports == ()


@pytest.mark.parametrize('method', ['none', 'qsgd', 'range', 'ceoafl'])
@pytest.mark.parametrize('masked', [False, True])
def test_a_frame_decodes_to_the_delta_its_compressor_returned(method, masked):
    # Arrange
    rng = np.random.default_rng(3)
    delta = {'a': rng.normal(size=(4, 5)).astype(np.float32),
             'b': rng.normal(size=7).astype(np.float32)}
    mask = ({n: rng.random(v.shape) < 0.6 for n, v in delta.items()} if masked else None)
    if masked:   # a masked delta is zero outside its mask
        delta = {n: np.where(mask[n], v, np.float32(0)) for n, v in delta.items()}
    compressor = build_compressor(method)
    fingerprint = architecture_fingerprint(delta)
    # Act
    frame, returned = compressor.compress(delta, np.random.default_rng(5), round_index=4,
                                          sender=9, fingerprint=fingerprint, mask=mask)
    decoded = decode_update_frame(memoryview(np.frombuffer(frame, np.uint8)), delta,
                                  fingerprint)
    # Assert: what the driver aggregates is what the local engine aggregates
    assert (decoded.sender, decoded.round_index) == (9, 4)
    for name in delta:
        assert np.array_equal(decoded.delta[name], returned[name])
    if method == 'none' and not masked:   # the local engine charges it unbuilt
        assert len(frame) == NoCompression.frame_size(delta)


# --- start-up errors --------------------------------------------------------------------

def test_without_ray_installed_backend_ray_stops_at_start_with_one_line(tmp_path,
                                                                        monkeypatch):
    # Arrange
    monkeypatch.setattr(ray_backend, 'ray', None)
    # Act
    with pytest.raises(ExperimentError) as info:
        run_experiment(_config(**{'engine.backend': 'ray'}), tmp_path / 'run')
    # Assert
    assert str(info.value) == ('engine.backend ray needs the ray package, which is not '
                               'installed: pip install ray==2.60.0 (make install installs it), '
                               'or set engine.backend local')
    assert not (tmp_path / 'run').exists()


@pytest.fixture
def torch_threads():
    """torch's thread count put back after the test (run_experiment sets the config's)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize('extra, what', [
    (1, 'engine.workers to at most {n}'),
    (0, 'engine.torch_threads to at most {n}'),   # one worker alone is too big
], ids=['workers', 'torch_threads'])
def test_a_local_ray_of_more_cpus_than_this_process_may_use_is_refused_before_it_starts(
        tmp_path, monkeypatch, torch_threads, extra, what):
    # Arrange: no Ray joined (the engine starts a local one), and a ray.init that records
    pytest.importorskip('ray')
    monkeypatch.setattr(ray_backend.ray, 'is_initialized', lambda: False)
    started: list[dict] = []
    monkeypatch.setattr(ray_backend.ray, 'init', lambda **kwargs: started.append(kwargs))
    n = len(os.sched_getaffinity(0))
    workers, threads = (n + 1, 1) if extra else (1, n + 1)
    # Act
    with pytest.raises(ExperimentError) as info:
        run_experiment(_config(**{'engine.backend': 'ray', 'engine.workers': workers,
                                  'engine.torch_threads': threads}), tmp_path / 'run')
    # Assert: one line naming the keys, the CPUs and what to set; Ray never started
    assert str(info.value) == (f'engine.workers {workers} x engine.torch_threads {threads} = '
                               f'{n + 1} CPUs, but this process may use {n} CPUs of this '
                               f'machine: set {what.format(n=n)}, or join a cluster with more '
                               f'(engine.ray_address)')
    assert started == []
    assert not (tmp_path / 'run').exists()


def test_ctrl_c_while_the_ray_backend_starts_ends_the_run_as_interrupted(tmp_path,
                                                                        monkeypatch):
    # Arrange: Ctrl-C while the backend joins Ray (a local Ray's start takes seconds)
    pytest.importorskip('ray')

    def join(_backend) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ray_backend.RayBackend, '_join', join)
    config = _config(**{'engine.backend': 'ray'})
    out = tmp_path / 'run'
    lines: list[str] = []
    # Act
    try:
        summary = run_experiment(config, out, echo=lines.append)
    except KeyboardInterrupt:
        pytest.fail('the Ctrl-C escaped run_experiment (a traceback, no summary.json)')
    # Assert: the ending of a Ctrl-C in a round: its line, summary.json; --resume accepted
    assert summary['status'] == 'interrupted' and summary['rounds_completed'] == 0
    assert summary['engine_backend']['backend'] == 'ray'
    assert lines[-1] == f'interrupted after round 0; resume with --resume {out}'
    assert json.loads((out / 'summary.json').read_text())['status'] == 'interrupted'
    check_resumable(config, out)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]   # free once closed: nothing listens there


def test_an_address_nobody_answers_at_stops_the_run_at_start(tmp_path):
    pytest.importorskip('ray')
    if ray_backend.ray.is_initialized():
        pytest.skip('this process joined a Ray already (the backend would use it)')
    address = f'127.0.0.1:{_closed_port()}'
    start = time.monotonic()
    # Act
    with pytest.raises(ExperimentError) as info:
        run_experiment(_config(**{'engine.backend': 'ray', 'engine.ray_address': address}),
                       tmp_path / 'run')
    # Assert: at once, one line naming the key, the address and what to do
    message = str(info.value)
    assert message.startswith(f'engine.ray_address {address}: no Ray cluster answers there '
                              f'(')
    assert 'ray start --head' in message and '\n' not in message
    assert time.monotonic() - start < 30
    assert not (tmp_path / 'run').exists()
    assert not ray_backend.ray.is_initialized()


def _gcs_running() -> bool:
    """A Ray GCS server runs on this machine (Ray's ``auto`` finds it among the processes)."""
    for cmdline in Path('/proc').glob('[0-9]*/cmdline'):
        try:
            if b'gcs_server' in cmdline.read_bytes().split(b'\0')[0]:
                return True
        except OSError:
            continue
    return False


# with test_ray_backend.py's module on one xdist worker: its local Ray is not "this machine's"
@pytest.mark.xdist_group('ray')
def test_auto_without_a_cluster_on_this_machine_stops_the_run_at_start(tmp_path,
                                                                      monkeypatch):
    pytest.importorskip('ray')
    if ray_backend.ray.is_initialized():
        pytest.skip('this process joined a Ray already (the backend would use it)')
    if Path('/tmp/ray/ray_current_cluster').exists() or _gcs_running():
        pytest.skip('a Ray runs on this machine (auto would join it)')
    monkeypatch.delenv('RAY_ADDRESS', raising=False)
    # Act
    with pytest.raises(ExperimentError) as info:
        run_experiment(_config(**{'engine.backend': 'ray', 'engine.ray_address': 'auto'}),
                       tmp_path / 'run')
    # Assert
    message = str(info.value)
    assert message.startswith('engine.ray_address auto: cannot join a Ray cluster (Could not '
                              'find any running Ray instance')
    assert 'ray start --head' in message and '\n' not in message
    assert not (tmp_path / 'run').exists()
    assert not ray_backend.ray.is_initialized()


def test_the_probe_says_when_an_address_does_not_answer():
    with pytest.raises(ExperimentError, match='no Ray cluster answers there'):
        ray_backend.probe_address(f'127.0.0.1:{_closed_port()}', timeout_s=2.0)
