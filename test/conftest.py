"""Shared fixtures: a private ROS domain per test session, free ports, tiny fleet configs."""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import warnings
from pathlib import Path

import pytest

# One DDS domain per pytest process, localhost only, so parallel runs never see each other;
# under pytest-xdist (`make test`: -n 2) each worker has its own, one apart from the other's.
_WORKER = os.environ.get('PYTEST_XDIST_WORKER')          # gw0, gw1, ... (xdist workers)
if _WORKER:
    _first = random.Random(os.getppid()).randint(0, 90)   # the controller's pid: one draw
    os.environ['ROS_DOMAIN_ID'] = str(110 + (_first + int(_WORKER[2:])) % 91)
os.environ.setdefault('ROS_DOMAIN_ID', str(random.Random(os.getpid()).randint(110, 200)))
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ.pop('ROS_STATIC_PEERS', None)


def _test_ports() -> tuple[int, int, int]:
    """(lowest base, highest base, bind offset) of the tests' MAVLink port blocks.
    FL_UAV_TEST_PORTS=LOW-HIGH keeps every port (the drones' and the simulator's bind ports)
    inside LOW..HIGH, e.g. on a shared machine; by default bases are 20000..40000, offset 1000."""
    text = os.environ.get('FL_UAV_TEST_PORTS')
    if not text:
        return 20000, 40000, 1000
    low, high = (int(v) for v in text.split('-'))
    offset = (high - low + 1) // 2
    return low, low + offset - 8, offset


_LOWEST_BASE, _HIGHEST_BASE, BIND_PORT_OFFSET = _test_ports()


def free_udp_port_block(count: int) -> int:
    """A base port such that base..base+count-1 and base+BIND_PORT_OFFSET.. are free UDP
    ports now."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randint(_LOWEST_BASE, _HIGHEST_BASE)
        sockets = []
        try:
            for port in [*range(base, base + count),
                         *range(base + BIND_PORT_OFFSET, base + BIND_PORT_OFFSET + count)]:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sockets.append(s)
                s.bind(('127.0.0.1', port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError('no free UDP port block found')


@pytest.fixture
def port_base() -> int:
    """Free MAVLink ports for drones 0..3 (and the simulator's bind ports at +offset)."""
    return free_udp_port_block(4)


def tiny_fleet_overrides(num_drones: int, port_base: int) -> dict:
    """A fleet that runs in seconds: tiny model, small world, short rounds."""
    return {
        'num_drones': num_drones,
        'learning.model': 'tiny_cnn',
        'learning.local_epochs': 1,
        'rounds.eval_samples': 200,
        'flight.port_base': port_base,
        'autopilot.remote_base_port': port_base,
        'autopilot.bind_base_port': port_base + BIND_PORT_OFFSET,
        'security.insecure': True,        # node tests without keys (test/ros: signed ones add)
    }


#: test folders whose tests run one at a time on one xdist worker: whole fleets of node
#: processes (e2e, launch, PX4 SITL, the fl-uav sim harness) beside each other would starve
#: each other's deadlines; the rclpy node tests likewise on their own worker
_XDIST_GROUPS = {'e2e': 'fleet', 'launch': 'fleet', 'sitl': 'fleet', 'unit/fleet_run': 'fleet',
                 'ros': 'ros'}


def pytest_collection_modifyitems(config, items):
    """Mark the tests of _XDIST_GROUPS' folders with their xdist group (--dist loadgroup)."""
    root = Path(__file__).resolve().parent
    for item in items:
        try:
            rel = Path(item.fspath).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        for folder, group in _XDIST_GROUPS.items():
            if rel.startswith(folder + '/'):
                item.add_marker(pytest.mark.xdist_group(group))
                break


@pytest.fixture(autouse=True)
def _sigint_handler_kept():
    """Every test leaves the process's SIGINT handler as it found it: the tests share an
    xdist worker process, and a test that Ctrl-Cs itself (fleet_run's) needs Python's
    KeyboardInterrupt there, not whatever an earlier test left (SIG_IGN: its Ctrl-C was
    lost and the run went on). A test that changed it fails here, named, and it is put back;
    one after which the kernel ignores or blocks SIGINT below Python (a library's sigaction
    or signal mask, which child processes inherit) gets a warning naming it, and it is put
    back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    lost_before = _sigint_lost_below_python()
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f'the test left the SIGINT handler changed: {before!r} -> {after!r}',
                    pytrace=False)
    lost = _sigint_lost_below_python()
    if lost and not lost_before and after is not signal.SIG_IGN:
        # a library's sigaction or sigprocmask under Python: children inherit it (named)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, after)
        warnings.warn(f'SIGINT {lost} in this process after this test (below Python, which '
                      f'still names {after!r}); put back', stacklevel=1)


def _sigint_lost_below_python() -> str:
    """'ignored' or 'blocked' when the kernel would not hand this thread a SIGINT (Linux:
    /proc/thread-self/status), '' otherwise."""
    try:
        with open('/proc/thread-self/status') as f:
            masks = {k: int(v, 16) for k, _, v in (line.partition(':\t') for line in f)
                     if k in ('SigIgn', 'SigBlk')}
    except OSError:
        return ''
    bit = 1 << (signal.SIGINT - 1)
    if masks.get('SigIgn', 0) & bit:
        return 'ignored'
    return 'blocked' if masks.get('SigBlk', 0) & bit else ''
