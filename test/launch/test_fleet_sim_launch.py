"""fleet_sim.launch.py through the real `ros2 launch`: a run to its end, Ctrl-C as a terminal
sends it (SIGINT to the whole process group) and as a service manager does (SIGINT, then
SIGTERM, to the launch process alone), and launch arguments that do not parse."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from test.launch.conftest import (
    autopilot_events,
    fleet_config,
    fleet_ports,
    node_exits,
    reap_descendants,
    unclean_exits,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
FLEET_NODES = {'autopilot_sim_node-1', 'sim_camera_node-2', 'ground_station_node-3',
               'drone_node-4', 'drone_node-5'}
ROUND_SLACK_S = 150.0   # start-up, connect, take-off and one round on 2 loaded cores
RESPAWN_DELAY_S = 30.0


def _fleet(start, tmp_path, *extra: str):
    run_dir = tmp_path / 'run'
    config = fleet_config(tmp_path / 'fleet.yaml', 2, fleet_ports(2))
    launch = start('launch', 'launch', 'fl_uav', 'fleet_sim.launch.py', 'num_drones:=2',
                   f'config:={config}', f'output_dir:={run_dir}', *extra)
    return launch, run_dir


def _landed(events, vehicle: int) -> bool:
    return (vehicle, 'landed') in events and (vehicle, 'disarmed') in events


def test_a_run_to_its_end_learns_lands_and_every_process_exits_cleanly(start, tmp_path):
    # Act: two drones, two rounds; the launch ends with the run (exit_on_finish)
    launch, run_dir = _fleet(start, tmp_path, 'exit_on_finish:=true')
    code = launch.wait(2 * ROUND_SLACK_S + 60)
    # Assert
    text = launch.text
    assert code == 0, text[-3000:]
    assert node_exits(text) == dict.fromkeys(FLEET_NODES, 'finished cleanly'), \
        unclean_exits(text)
    report = json.loads((run_dir / 'ground_station.json').read_text())
    assert report['status'] == 'finished'
    assert [r['participants'] for r in report['rounds']] == [[0, 1], [0, 1]]
    assert report['rounds'][-1]['accuracy'] > report['initial_accuracy']
    events = autopilot_events(run_dir)
    assert _landed(events, 0) and _landed(events, 1)


@pytest.mark.parametrize('moment', ['round 2: flying', 'round 1 closed'],
                         ids=['drones_in_the_air', 'between_rounds'])
def test_ctrl_c_from_a_terminal_lands_the_drones_and_every_node_exits_cleanly(
        start, tmp_path, moment):
    # Arrange
    launch, run_dir = _fleet(start, tmp_path)
    launch.wait_for(moment, 2 * ROUND_SLACK_S)
    # Act: the terminal's Ctrl-C reaches every process; ros2 launch forwards one more
    launch.signal_group(signal.SIGINT)
    code = launch.wait(120)
    # Assert: before, three nodes 'died [exit code -2]'
    text = launch.text
    assert code == 0, text[-3000:]
    assert node_exits(text) == dict.fromkeys(FLEET_NODES, 'finished cleanly'), \
        unclean_exits(text)
    events = autopilot_events(run_dir)
    for vehicle in (0, 1):
        if (vehicle, 'armed') in events:        # it flew: it came down before the end
            assert _landed(events, vehicle), events[-20:]
    assert 'Traceback' not in text


def test_a_service_manager_stop_leaves_nothing_behind_and_lands_the_drones(
        start, tmp_path, subreaper):
    # Arrange
    launch, run_dir = _fleet(start, tmp_path)
    launch.wait_for('round 2: flying', 2 * ROUND_SLACK_S)
    # Act: SIGINT, then SIGTERM, to ros2 launch alone (systemd's KillMode=mixed order);
    # ros2 launch ends at once on SIGTERM and leaves its processes behind
    launch.process.send_signal(signal.SIGINT)
    time.sleep(2.0)
    launch.process.send_signal(signal.SIGTERM)
    launch.wait(30)
    statuses = reap_descendants(120)    # the nodes, reparented to this test process
    # Assert: every node stopped by itself (its parent's death is a SIGINT), exit 0
    assert len(statuses) == len(FLEET_NODES) - len(node_exits(launch.text)), statuses
    assert all(code == 0 for code in statuses.values()), statuses
    assert all(v == 'finished cleanly' for v in node_exits(launch.text).values())
    events = autopilot_events(run_dir)
    assert _landed(events, 0) and _landed(events, 1), events[-20:]


@pytest.mark.parametrize('argument, says', [
    ('num_drones:=abc', "launch argument num_drones:='abc': expected an integer >= 1"),
    ('num_drones:=0', 'launch argument num_drones:=0: must be >= 1'),
    ('config:=/nonexistent/fleet.yaml',
     "launch argument config:='/nonexistent/fleet.yaml': no such config file"),
])
def test_a_launch_argument_that_does_not_parse_ends_the_launch_before_any_node(
        start, argument, says):
    # Act
    launch = start('bad', 'launch', 'fl_uav', 'fleet_sim.launch.py', argument)
    code = launch.wait(60)
    # Assert: one line naming the argument; no process started
    text = launch.text
    assert code != 0
    assert [line for line in text.splitlines() if '[ERROR]' in line] == [
        f'[ERROR] [launch]: Caught exception in launch (see debug for traceback): {says}']
    assert 'process started' not in text


def _pid_of(text: str, process: str) -> int:
    """The pid ros2 launch reported for ``process`` (e.g. 'drone_node-5')."""
    found = re.search(rf'^\[INFO\] \[{re.escape(process)}\]: process started with pid '
                      rf'\[(\d+)\]', text, re.M)
    assert found, f'no pid for {process}:\n{text[-3000:]}'
    return int(found.group(1))


def test_a_killed_drone_node_is_respawned_and_rejoins_the_run(start, tmp_path):
    # Arrange: two drones, four rounds of 30 s at most; respawn is on by default, here after
    # a round's deadline, so the round the drone dies in closes without it
    run_dir = tmp_path / 'run'
    config = fleet_config(tmp_path / 'fleet.yaml', 2, fleet_ports(2), rounds__num_rounds=4,
                          rounds__deadline_s=RESPAWN_DELAY_S)
    launch = start('launch', 'launch', 'fl_uav', 'fleet_sim.launch.py', 'num_drones:=2',
                   f'config:={config}', f'output_dir:={run_dir}', 'exit_on_finish:=true',
                   f'respawn_delay:={RESPAWN_DELAY_S:g}')
    launch.wait_for('round 2: flying', 2 * ROUND_SLACK_S)
    killed_s = time.monotonic() - launch.started_s
    # Act: SIGKILL drone 1's node in the air, mid-round
    os.kill(_pid_of(launch.text, 'drone_node-5'), signal.SIGKILL)
    restarted_s = launch.wait_for('[drone_node-6]: process started', RESPAWN_DELAY_S + 30)
    code = launch.wait(4 * ROUND_SLACK_S)
    # Assert: restarted once; round 2 closed at its deadline with drone 0's update; the run
    # finished with every round, drone 1 back in a later one
    text = launch.text
    assert code == 0, text[-3000:]
    assert f'uav1_drone died (exit code -9): restarting it in {RESPAWN_DELAY_S:g} s' in text
    exits = node_exits(text)
    assert exits.pop('drone_node-5') == 'died'
    assert exits == dict.fromkeys(FLEET_NODES - {'drone_node-5'} | {'drone_node-6'},
                                  'finished cleanly'), unclean_exits(text)
    report = json.loads((run_dir / 'ground_station.json').read_text())
    assert report['status'] == 'finished'
    participants = [r['participants'] for r in report['rounds']]
    assert len(participants) == 4 and participants[1] == [0], participants
    assert all(0 in p for p in participants), participants
    assert any(1 in p for p in participants[2:]), participants
    events = autopilot_events(run_dir)
    assert _landed(events, 0) and _landed(events, 1)
    print(f'killed at {killed_s:.0f} s, restarted at {restarted_s:.0f} s, participants '
          f'{participants}, rounds closed at '
          f'{[round(r["closed_s"] - report["rounds"][0]["opened_s"]) for r in report["rounds"]]}')
