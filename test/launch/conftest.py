"""The real `ros2 launch` on an ament install prefix: fixtures and a handle on one launch.

The launch system and the ros2 command line come from ../shared/ros2_tools (`make install`
puts them into .venv). Without them these tests skip, naming the reason; with CI=true they
fail instead, so CI cannot pass without running them.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from test.conftest import BIND_PORT_OFFSET, free_udp_port_block

REPO = Path(__file__).resolve().parents[2]
ROS2 = Path(sys.executable).with_name('ros2')
PR_SET_CHILD_SUBREAPER = 36   # linux/prctl.h
# Learns in two rounds (test/e2e/test_fleet_sim.py's settings), flies fast.
FLEET_SETTINGS = {
    ('learning', 'model'): 'tiny_cnn', ('learning', 'lr'): 0.005,
    ('learning', 'local_epochs'): 3, ('rounds', 'num_rounds'): 2,
    ('rounds', 'eval_samples'): 300, ('rounds', 'deadline_s'): 90.0,
    ('coverage', 'box_m'): 80.0, ('autopilot', 'time_factor'): 10.0,
}


def require_ros2_tools() -> None:
    """Skip (fail on CI) without the real ros2 launch in this interpreter's venv."""
    if ROS2.is_file():
        return
    reason = (f'{ROS2} missing: the real ros2 launch comes from ../shared/ros2_tools '
              f'(make install puts it into .venv)')
    if os.environ.get('CI') == 'true':
        pytest.fail(f'CI=true, launch tests cannot run: {reason}')
    pytest.skip(reason)


@pytest.fixture(scope='session')
def ament_prefix(tmp_path_factory) -> Path:
    """An ament install prefix of this checkout (`make ament`), built once per session."""
    require_ros2_tools()
    prefix = tmp_path_factory.mktemp('ament') / 'install'
    venv = Path(sys.executable).parents[1]
    # -o: the venv is installed already (this test runs in it); make must not reinstall it
    # from this checkout (another worktree's editable install would be replaced)
    done = subprocess.run(['make', '-s', 'ament', f'AMENT_PREFIX={prefix}', f'VENV={venv}',
                           '-o', str(venv / '.fl_uav-installed')],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (prefix / 'lib' / 'fl_uav' / 'drone_node').is_file()
    return prefix


@pytest.fixture(scope='session')
def subreaper() -> None:
    """Make this test process the reaper of its orphaned descendants (prctl
    PR_SET_CHILD_SUBREAPER), so a node that outlives its ros2 launch is ours to wait for."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def fleet_config(path: Path, num_drones: int, port_base: int, **sections) -> Path:
    """config/fleet.yaml with FLEET_SETTINGS, this test's ports and ``sections`` (dotted
    keys as 'section__key'), written to ``path``."""
    doc = yaml.safe_load((REPO / 'config' / 'fleet.yaml').read_text())
    params = doc['/**']['ros__parameters']
    params['num_drones'] = num_drones
    settings = {**FLEET_SETTINGS, ('flight', 'port_base'): port_base,
                ('autopilot', 'remote_base_port'): port_base,
                ('autopilot', 'bind_base_port'): port_base + BIND_PORT_OFFSET,
                **{tuple(k.split('__')): v for k, v in sections.items()}}
    for (section, key), value in settings.items():
        params[section][key] = value
    path.write_text(yaml.safe_dump(doc))
    return path


def fleet_ports(num_drones: int) -> int:
    return free_udp_port_block(num_drones)


class Launched:
    """One process started under the launch environment, in a session (process group) of
    its own, its output to a file."""

    def __init__(self, cmd: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open('w')
        self.started_s = time.monotonic()
        self.process = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=self._log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def text(self) -> str:
        return self.log_path.read_text(errors='replace')

    def wait_for(self, needle: str, timeout_s: float) -> float:
        """Seconds since start when ``needle`` appeared in the output (fails at the time-out
        or if the process ended first)."""
        deadline_s = time.monotonic() + timeout_s
        while needle not in self.text:
            if self.process.poll() is not None:
                pytest.fail(f'ended ({self.process.returncode}) before {needle!r}:\n'
                            + self.text[-3000:])
            if time.monotonic() > deadline_s:
                pytest.fail(f'no {needle!r} within {timeout_s} s:\n' + self.text[-3000:])
            time.sleep(0.2)
        return time.monotonic() - self.started_s

    def signal_group(self, sig: int) -> None:
        """As a terminal does: ``sig`` to every process of the group."""
        os.killpg(self.process.pid, sig)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        finally:
            self._log.close()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self._log.close()


@pytest.fixture
def launch_env(ament_prefix) -> dict[str, str]:
    """The environment of one launch test: the prefix, this session's DDS domain, localhost;
    ros2 launch, its launch files and the nodes import this checkout's fl_uav (PYTHONPATH),
    whichever checkout the venv's editable install points at."""
    path = os.pathsep.join(filter(None, (str(REPO), os.environ.get('PYTHONPATH'))))
    return {**os.environ, 'AMENT_PREFIX_PATH': str(ament_prefix), 'PYTHONPATH': path,
            'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST', 'PYTHONUNBUFFERED': '1'}


@pytest.fixture
def start(launch_env, tmp_path) -> Iterator:
    """``start(name, *args)``: a `ros2 ...` command (launch, run) under the launch
    environment; whatever is still running at the end is killed (process groups)."""
    started: list[Launched] = []

    def _start(name: str, *args: str) -> Launched:
        handle = Launched([str(ROS2), *args], launch_env, tmp_path / f'{name}.log')
        started.append(handle)
        return handle

    yield _start
    for handle in started:
        handle.kill()


_EXIT_LINE = re.compile(r'^\[(?:INFO|ERROR)\] \[([\w.-]+)\]: process has (finished cleanly|died)')


def node_exits(text: str) -> dict[str, str]:
    """What ros2 launch said of each process's end: {'drone_node-4': 'finished cleanly' or
    'died'} (a death's line also gives the exit code; see the log)."""
    return {m.group(1): m.group(2) for m in map(_EXIT_LINE.match, text.splitlines()) if m}


def unclean_exits(text: str, last_lines: int = 80) -> str:
    """For an assertion message: the last lines of each process that did not finish cleanly
    (its own output, e.g. the stacks a hung stop prints, and launch's lines about it), then
    the log's tail."""
    parts = []
    for process, how in node_exits(text).items():
        if how != 'finished cleanly':
            own = [line for line in text.splitlines() if f'[{process}]' in line]
            parts.append(f'--- {process} ({how}), its last {last_lines} lines:\n'
                         + '\n'.join(own[-last_lines:]))
    return '\n'.join([*parts, "--- the log's tail:", text[-3000:]])


def autopilot_events(run_dir: Path) -> list[tuple[int | None, str]]:
    """(vehicle, event) from the simulator's event log, in order."""
    log = json.loads((run_dir / 'autopilot_log.json').read_text())
    return [(e.get('vehicle'), e['event']) for e in log['events']]


def reap_descendants(timeout_s: float) -> dict[int, int]:
    """Wait for this process's remaining children (orphans reparented to it by the
    subreaper): {pid: exit status (negative: killed by that signal)}."""
    statuses = {}
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return statuses
        if pid == 0:
            time.sleep(0.2)
            continue
        statuses[pid] = os.waitstatus_to_exitcode(status)
    raise AssertionError(f'descendants still running after {timeout_s} s; reaped {statuses}')
