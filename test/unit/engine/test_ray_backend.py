"""engine.backend ray on a local Ray of 2 CPUs (started once for the module): the same
rounds.csv as the local backend in every column but wall_s (quick_digits, Fashion-MNIST with
100 drones), a worker killed mid-round or by Ray's memory monitor (its chunks retried on the
other), every worker killed (the run stops with one line; --resume goes on with new workers
and ends equal to local), another Ray error (the run stops with one line), more CPUs than the
cluster has (refused at start)."""

from __future__ import annotations

import csv
import os
import signal
import time
from pathlib import Path

import pytest

ray = pytest.importorskip('ray')

from fl_uav.configschema import build_config, read_params_file  # noqa: E402
from fl_uav.engine.config import ExperimentConfig  # noqa: E402
from fl_uav.engine.experiment import run_experiment  # noqa: E402
from fl_uav.engine.ray_backend import RayBackend  # noqa: E402
from fl_uav.engine.results import ExperimentError  # noqa: E402
from fl_uav.learning.datasets import FASHION_MNIST_ROOT  # noqa: E402

# one xdist worker runs the module (`make test`: -n 2 --dist loadgroup): one local Ray, once
pytestmark = pytest.mark.xdist_group('ray')

REPO = Path(__file__).resolve().parents[3]
QUICK = REPO / 'config' / 'experiments' / 'quick_digits.yaml'
SCALE = REPO / 'config' / 'experiments' / 'scale_fmnist_1000.yaml'
CPUS = 2
# quick_digits, 3 rounds in chunks of 4 drones: 3 chunks a round, so both workers train
QUICK_SET = {'engine.max_clients_per_chunk': 4, 'num_rounds': 3}
RAY_SET = {'engine.backend': 'ray', 'engine.workers': 2}


@pytest.fixture(scope='module', autouse=True)
def local_ray():
    """One local Ray for the module (its start costs seconds); the engine joins it."""
    ray.init(address='local', num_cpus=CPUS, include_dashboard=False, log_to_driver=False,
             logging_level='warning')
    yield
    ray.shutdown()


def _config(path: Path, **overrides) -> ExperimentConfig:
    flat = read_params_file(path)
    flat.update(overrides)
    return build_config(ExperimentConfig, flat)


def _rows(out: Path) -> list[dict[str, str]]:
    """rounds.csv as written, every column but wall_s."""
    with open(out / 'rounds.csv', newline='') as f:
        return [{k: v for k, v in row.items() if k != 'wall_s'} for row in csv.DictReader(f)]


def _quiet(_line: str) -> None:
    pass


def _cpus_free(wait_s: float = 5.0) -> float:
    """The cluster's free CPUs once they stop rising (Ray frees a killed actor's CPU
    asynchronously), waiting at most wait_s."""
    deadline = time.monotonic() + wait_s
    free = ray.available_resources().get('CPU', 0.0)
    while free < CPUS and time.monotonic() < deadline:
        time.sleep(0.1)
        free = ray.available_resources().get('CPU', 0.0)
    return free


@pytest.fixture(scope='module')
def quick_local(tmp_path_factory) -> list[dict[str, str]]:
    """quick_digits (3 rounds) on the local backend: the reference."""
    out = tmp_path_factory.mktemp('quick') / 'local'
    run_experiment(_config(QUICK, **QUICK_SET), out, echo=_quiet)
    return _rows(out)


def _kill_workers(which: list[int], at_round: int):
    """An on_submitted hook that SIGKILLs the given workers' processes in round at_round."""
    def hook(backend: RayBackend, r: int) -> None:
        if r == at_round:
            for a in which:
                os.kill(backend.info[a]['pid'], signal.SIGKILL)
    return staticmethod(hook)


OOM_MESSAGE = ('Task was killed due to the node running low on memory.\nMemory on the node '
               '(IP: 127.0.0.1, ID: 5f2c) was 7.52GB used / 7.77GB limit (0.968), which '
               'exceeds the memory usage threshold of 0.95.')
"""What ray.get raises for a task of an actor Ray's memory monitor killed (its first line
is what the warning shows)."""


def _killed_for_memory(which: int, at_round: int, monkeypatch) -> None:
    """Worker ``which`` killed in round at_round as Ray's memory monitor kills it: its
    process SIGKILLed, and ray.get of its chunks raising OutOfMemoryError."""
    killed = []
    real_get = ray.get

    def hook(backend: RayBackend, r: int) -> None:
        if r == at_round:
            os.kill(backend.info[which]['pid'], signal.SIGKILL)
            killed.append(which)

    def get(refs, *args, **kwargs):
        try:
            return real_get(refs, *args, **kwargs)
        except ray.exceptions.RayActorError:
            if not killed:
                raise
            raise ray.exceptions.OutOfMemoryError(OOM_MESSAGE) from None

    monkeypatch.setattr(RayBackend, 'on_submitted', staticmethod(hook))
    monkeypatch.setattr(ray, 'get', get)


def test_quick_digits_on_ray_equals_local(tmp_path, quick_local):
    # Act
    summary = run_experiment(_config(QUICK, **QUICK_SET, **RAY_SET), tmp_path, echo=_quiet)
    # Assert: the same rows; the workers' traffic reported; the actors are gone
    assert summary['status'] == 'finished'
    assert _rows(tmp_path) == quick_local
    backend = summary['engine_backend']
    assert backend['backend'] == 'ray' and backend['workers_at_end'] == 2
    assert backend['bytes_per_round']['frames_back'] == int(quick_local[0]['uplink_bytes'])
    assert summary['warnings'] == []
    assert _cpus_free() == CPUS   # every actor released its CPU


def test_a_worker_killed_mid_round_is_replaced_by_the_other(tmp_path, quick_local,
                                                            monkeypatch):
    # Arrange: worker 0's process is killed once round 2's chunks are out
    monkeypatch.setattr(RayBackend, 'on_submitted', _kill_workers([0], at_round=2))
    lines: list[str] = []
    # Act
    summary = run_experiment(_config(QUICK, **QUICK_SET, **RAY_SET), tmp_path,
                             echo=lines.append)
    # Assert: the round is retried on worker 1, the results are unchanged, a warning says so
    assert summary['status'] == 'finished'
    assert _rows(tmp_path) == quick_local
    assert summary['engine_backend']['workers_at_end'] == 1
    assert summary['engine_backend']['retried_chunks'] >= 1
    [warning] = summary['warnings']
    assert warning.startswith('round 2: Ray worker 0') and 'remaining worker' in warning
    assert f'warning: {warning}' in lines


def test_a_worker_killed_for_memory_is_replaced_by_the_other(tmp_path, quick_local,
                                                             monkeypatch):
    # Arrange: Ray's memory monitor kills worker 0 once round 2's chunks are out
    _killed_for_memory(0, at_round=2, monkeypatch=monkeypatch)
    # Act
    summary = run_experiment(_config(QUICK, **QUICK_SET, **RAY_SET), tmp_path, echo=_quiet)
    # Assert: as for a killed process: retried on worker 1, the same rows, one warning
    assert summary['status'] == 'finished'
    assert _rows(tmp_path) == quick_local
    assert summary['engine_backend']['workers_at_end'] == 1
    [warning] = summary['warnings']
    assert warning.startswith('round 2: Ray worker 0') and 'remaining worker' in warning
    assert 'running low on memory' in warning and '\n' not in warning


def test_another_ray_error_stops_the_run_with_one_line(tmp_path, monkeypatch):
    # Arrange: in round 2, ray.get of a chunk raises a Ray system error
    failing: list[int] = []
    real_get = ray.get

    def hook(_backend: RayBackend, r: int) -> None:
        if r == 2:
            failing.append(r)

    def get(refs, *args, **kwargs):
        if failing:
            failing.clear()
            raise ray.exceptions.RaySystemError('the raylet is not reachable')
        return real_get(refs, *args, **kwargs)

    monkeypatch.setattr(RayBackend, 'on_submitted', staticmethod(hook))
    monkeypatch.setattr(ray, 'get', get)
    # Act
    summary = run_experiment(_config(QUICK, **{**QUICK_SET, 'num_rounds': 2}, **RAY_SET),
                             tmp_path, echo=_quiet)
    # Assert: failed with one line naming the round, the output and --resume; round 1 kept
    assert summary['status'] == 'failed' and summary['rounds_completed'] == 1
    assert summary['error'] == (f'round 2: Ray failed (RaySystemError: System error: the '
                                f'raylet is not reachable); the rounds before are in '
                                f'{tmp_path} (--resume goes on from its last checkpoint)')
    assert (tmp_path / 'summary.json').is_file()


def test_all_workers_killed_stop_the_run_and_resume_goes_on(tmp_path, quick_local,
                                                            monkeypatch):
    # Arrange: both workers killed in round 2; the workers the round lost counted
    config = _config(QUICK, **QUICK_SET, **RAY_SET)
    monkeypatch.setattr(RayBackend, 'on_submitted', _kill_workers([0, 1], at_round=2))
    losses: list[int] = []
    real_lose = RayBackend._lose

    def lose(backend: RayBackend, a: int, r: int, exc: BaseException) -> None:
        losses.append(a)
        real_lose(backend, a, r, exc)

    monkeypatch.setattr(RayBackend, '_lose', lose)
    # Act: the run stops; then it resumes with new workers
    failed = run_experiment(config, tmp_path, echo=_quiet)
    monkeypatch.setattr(RayBackend, 'on_submitted', None)
    resumed = run_experiment(config, tmp_path, resume=True, echo=_quiet)
    # Assert: one clear line, the checkpoint of round 2, and the resumed run equals local
    assert failed['status'] == 'failed' and failed['rounds_completed'] == 1
    assert failed['error'].startswith('round 2: all 2 Ray workers are gone')
    assert '--resume' in failed['error'] and '\n' not in failed['error']
    # every lost chunk was handed back but the last (it found no worker left)
    assert failed['engine_backend']['retried_chunks'] == len(losses) - 1
    assert resumed['status'] == 'finished'
    assert _rows(tmp_path) == quick_local


@pytest.mark.parametrize('workers, threads, what', [
    (CPUS + 1, 1, f'engine.workers to at most {CPUS}'),
    (1, CPUS + 1, f'engine.torch_threads to at most {CPUS}'),   # one worker is too big
], ids=['workers', 'torch_threads'])
def test_more_cpus_than_the_cluster_has_is_refused_at_start(tmp_path, workers, threads, what):
    # Act
    with pytest.raises(ExperimentError) as info:
        run_experiment(_config(QUICK, **{**RAY_SET, 'engine.workers': workers,
                                         'engine.torch_threads': threads}),
                       tmp_path / 'run', echo=_quiet)
    # Assert: one line naming the keys, the CPUs and what to set; nothing left behind
    message = str(info.value)
    need = workers * threads
    assert message == (f'engine.workers {workers} x engine.torch_threads {threads} = {need} '
                       f'CPUs, but the Ray this process joined has {CPUS}: set {what}, or '
                       f'add machines (ray start --address)')
    assert '\n' not in message
    assert not (tmp_path / 'run').exists()


@pytest.mark.skipif(not Path(FASHION_MNIST_ROOT).is_dir(),
                    reason=f'{FASHION_MNIST_ROOT} absent; '
                           'run apt-get install -y dataset-fashion-mnist')
def test_fashion_mnist_100_drones_on_ray_equals_local(tmp_path):
    # Arrange: the 1000-drone scale config with 100 drones, 2 rounds of 1 step each
    flat = {'num_drones': 100, 'num_rounds': 2, 'learning.max_steps': 1,
            'data.max_test_samples': 1000}
    # Act
    run_experiment(_config(SCALE, **flat), tmp_path / 'local', echo=_quiet)
    summary = run_experiment(_config(SCALE, **flat, **RAY_SET), tmp_path / 'ray',
                             echo=_quiet)
    # Assert
    assert summary['status'] == 'finished'
    assert _rows(tmp_path / 'ray') == _rows(tmp_path / 'local')
