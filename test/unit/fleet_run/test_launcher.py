"""ProcessGroup.stop ends only its own processes, and the executables named ``last`` only
once the others have ended (fl-uav sim: the autopilot simulator outlives the drone nodes, which
command a return to launch when stopped in flight)."""

from __future__ import annotations

import sys
import time

from fl_uav.fleet.run_log import STATION_CHECKPOINT_FILE
from fl_uav.fleet_run.launch_plan import NodeSpec, Respawn, station_resume_argv
from fl_uav.fleet_run.launcher import ProcessGroup, Respawner, ros_environment

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


# A drone node stand-in that counts its starts in a file and exits with the code given for
# that start (the last code for every later start; -N: killed by signal N)
COUNTED_EXIT = """
import os, pathlib, sys
starts = pathlib.Path(sys.argv[1])
n = len(starts.read_text()) if starts.exists() else 0
starts.write_text('x' * (n + 1))
codes = [int(c) for c in sys.argv[2].split(',')]
code = codes[min(n, len(codes) - 1)]
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def _wait_ended(group: ProcessGroup) -> None:
    for node in group.nodes:
        node.process.wait(timeout=READY_TIMEOUT_S)


def _drone(group, tmp_path, name: str, codes: str):
    return group.start_command(NodeSpec('drone_node', 'drone', namespace=f'/{name}'),
                               [sys.executable, '-c', COUNTED_EXIT,
                                str(tmp_path / f'{name}.starts'), codes])


def test_a_dead_drone_node_is_restarted_after_the_delay_and_a_clean_exit_is_not(tmp_path):
    # Arrange: uav0 dies (SIGKILL-like code -9), then ends cleanly; uav1 ends cleanly at once
    group = ProcessGroup(ros_environment(79, tmp_path / 'ros_logs'), tmp_path / 'logs')
    respawner = Respawner(group, Respawn(delay_s=5.0, max_restarts=3))
    _drone(group, tmp_path, 'uav0', '-9,0')
    _drone(group, tmp_path, 'uav1', '0')
    _wait_ended(group)
    # Act: the deaths are seen at 10 s (round 2); the restart is due at 15 s
    seen = respawner.poll(10.0, 2)
    early = respawner.poll(14.0, 2)
    pending = [respawner.pending(n) for n in group.nodes]
    restarted = respawner.poll(15.0, 2)
    _wait_ended(group)
    after = respawner.poll(30.0, 3)
    # Assert
    assert seen == ['uav0/drone exited with code -9 in round 2: restarting it in 5 s '
                    '(restart 1 of at most 3)'] and early == []
    assert pending == [True, False]
    assert restarted == ['uav0/drone restarted'] and after == []
    assert (tmp_path / 'uav0.starts').read_text() == 'xx'
    assert (tmp_path / 'uav1.starts').read_text() == 'x'
    assert respawner.deaths == [{'node': 'uav0/drone', 'exit_code': -9, 'died_s': 10.0,
                                 'round': 2, 'restarted_s': 15.0}]
    assert 'restarted ---' in group.nodes[0].log_path.read_text()


def test_a_drone_node_that_keeps_dying_is_restarted_at_most_max_restarts_times(tmp_path):
    # Arrange: a node that always exits with 1
    group = ProcessGroup(ros_environment(79, tmp_path / 'ros_logs'), tmp_path / 'logs')
    respawner = Respawner(group, Respawn(delay_s=0.0, max_restarts=2))
    _drone(group, tmp_path, 'uav0', '1')
    # Act
    lines = []
    for step in range(6):
        _wait_ended(group)
        lines += respawner.poll(float(step), 1)
    # Assert: two restarts, then its third death is only recorded
    assert (tmp_path / 'uav0.starts').read_text() == 'xxx'
    assert [d['restarted_s'] for d in respawner.deaths] == [0.0, 1.0, None]
    assert not respawner.pending(group.nodes[0])


def test_with_respawn_off_a_death_is_recorded_and_not_restarted(tmp_path):
    group = ProcessGroup(ros_environment(79, tmp_path / 'ros_logs'), tmp_path / 'logs')
    respawner = Respawner(group, Respawn(enabled=False))
    _drone(group, tmp_path, 'uav0', '3')
    _wait_ended(group)
    assert respawner.poll(1.0, 1) == [] and respawner.poll(9.0, 1) == []
    assert respawner.deaths[0]['restarted_s'] is None and respawner.deaths[0]['exit_code'] == 3


def test_a_dead_station_is_restarted_resuming_from_its_checkpoint_if_it_wrote_one(tmp_path):
    # Arrange: the station stand-in dies twice (-9), then ends cleanly; a checkpoint appears
    # in its output directory between the two deaths
    out = tmp_path / 'run'
    out.mkdir()
    group = ProcessGroup(ros_environment(79, tmp_path / 'ros_logs'), tmp_path / 'logs')
    respawner = Respawner(group, Respawn(delay_s=0.0, max_restarts=3),
                          ('drone_node', 'ground_station_node'),
                          restart_argv=lambda node: station_resume_argv(node.argv, out))
    argv = [sys.executable, '-c', COUNTED_EXIT, str(tmp_path / 'station.starts'), '-9,-9,0']
    group.start_command(NodeSpec('ground_station_node', 'ground_station'), argv)
    # Act
    _wait_ended(group)
    fresh = respawner.poll(10.0, 1)
    (out / STATION_CHECKPOINT_FILE).write_bytes(b'')
    _wait_ended(group)
    resumed = respawner.poll(20.0, 3)
    resumed_argv = group.nodes[0].process.args
    _wait_ended(group)
    # Assert: before a checkpoint, the same command (a new run); after, with resume:=DIR
    assert fresh[-1] == 'ground_station restarted'
    assert resumed[-1] == 'ground_station restarted, resuming from its checkpoint'
    assert resumed_argv == [*argv, '-p', f'resume:={out}']
    assert [d.get('resumed', False) for d in respawner.deaths] == [False, True]
    assert [d['round'] for d in respawner.deaths] == [1, 3]
