"""ProcessGroup.stop ends only its own processes, and the executables named ``last`` only
once the others have ended (fl-uav sim: the autopilot simulator outlives the drone nodes, which
command a return to launch when stopped in flight)."""

from __future__ import annotations

import sys
import time

from fl_uav.fleet_run.launch_plan import NodeSpec
from fl_uav.fleet_run.launcher import ProcessGroup, ros_environment

# A node stand-in: on SIGINT it writes when it heard it, takes `delay` seconds to wind down,
# then writes when it ended and exits 0.
STAND_IN = """
import signal, sys, threading, time
log, delay = sys.argv[1], float(sys.argv[2])
heard = threading.Event()
signal.signal(signal.SIGINT, lambda *_: heard.set())
print('ready', flush=True)
heard.wait()
with open(log, 'a') as f:
    f.write(f'sigint {time.monotonic()}\\n')
time.sleep(delay)
with open(log, 'a') as f:
    f.write(f'ended {time.monotonic()}\\n')
"""
READY_TIMEOUT_S = 20.0


def _start(group: ProcessGroup, executable: str, log, delay_s: float,
           stop_grace_s: float = 10.0) -> None:
    node = group.start_command(NodeSpec(executable, executable, stop_grace_s=stop_grace_s),
                               [sys.executable, '-c', STAND_IN, str(log), str(delay_s)])
    deadline = time.monotonic() + READY_TIMEOUT_S
    while 'ready' not in node.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)     # polling the stand-in's log, bounded by the deadline


def _times(log) -> dict[str, float]:
    return {kind: float(t) for kind, t in (line.split() for line in log.read_text().split('\n')
                                           if line)}


def test_the_last_executables_are_signalled_only_after_the_others_ended(tmp_path):
    # Arrange: a drone node that takes 1 s to return and land, an autopilot simulator
    group = ProcessGroup(ros_environment(79, tmp_path / 'ros_logs'), tmp_path / 'logs')
    drone, autopilot = tmp_path / 'drone.txt', tmp_path / 'autopilot.txt'
    _start(group, 'drone_node', drone, 1.0)
    _start(group, 'autopilot_sim_node', autopilot, 0.0)
    # Act
    codes = group.stop(grace_s=10.0, last=('autopilot_sim_node',))
    # Assert: both exited of their own accord; the autopilot heard SIGINT after the drone ended
    assert set(codes.values()) == {0}, codes
    assert _times(autopilot)['sigint'] >= _times(drone)['ended']


def test_without_last_every_node_is_signalled_at_once(tmp_path):
    # Arrange
    group = ProcessGroup(ros_environment(79, tmp_path / 'ros_logs'), tmp_path / 'logs')
    drone, autopilot = tmp_path / 'drone.txt', tmp_path / 'autopilot.txt'
    _start(group, 'drone_node', drone, 1.0)
    _start(group, 'autopilot_sim_node', autopilot, 0.0)
    # Act
    codes = group.stop(grace_s=10.0)
    # Assert: the autopilot heard SIGINT before the drone had wound down
    assert set(codes.values()) == {0}, codes
    assert _times(autopilot)['sigint'] < _times(drone)['ended']


def test_a_node_that_ignores_sigint_past_its_grace_is_ended(tmp_path):
    # Arrange: a drone node that would take 60 s, given 0.5 s
    group = ProcessGroup(ros_environment(79, tmp_path / 'ros_logs'), tmp_path / 'logs')
    _start(group, 'drone_node', tmp_path / 'drone.txt', 60.0, stop_grace_s=0.5)
    _start(group, 'autopilot_sim_node', tmp_path / 'autopilot.txt', 0.0)
    # Act
    start = time.monotonic()
    codes = group.stop(grace_s=0.5, last=('autopilot_sim_node',))
    # Assert: the drone was ended by SIGTERM; the autopilot still stopped cleanly
    assert codes == {'drone_node': -15, 'autopilot_sim_node': 0}, codes
    assert time.monotonic() - start < 10.0


def test_a_node_gets_its_own_longer_grace(tmp_path):
    # Arrange: a drone node that takes 1.5 s to land, with a 10 s grace of its own
    group = ProcessGroup(ros_environment(79, tmp_path / 'ros_logs'), tmp_path / 'logs')
    _start(group, 'drone_node', tmp_path / 'drone.txt', 1.5, stop_grace_s=10.0)
    # Act: the group's grace alone would SIGTERM it at 0.2 s
    codes = group.stop(grace_s=0.2)
    # Assert
    assert codes == {'drone_node': 0}, codes
