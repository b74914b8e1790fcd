"""The field's launch files through the real `ros2 launch`: the station and each drone as
launches of their own (three machines), and px4_sitl_fleet.launch.py; the PX4 and Gazebo
stand-ins (autopilot_sim, sim_camera) started apart with `ros2 run`, as PX4 SITL and Gazebo
would be."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test.launch.conftest import (
    autopilot_events,
    fleet_config,
    fleet_ports,
    node_exits,
    unclean_exits,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
RUN_TIMEOUT_S = 300.0


def _simulators(start, config: Path, run_dir: Path):
    """The embedded stand-ins for PX4 SITL and Gazebo, each a `ros2 run` of its own."""
    return [start('autopilot', 'run', 'fl_uav', 'autopilot_sim_node', '--ros-args', '-r',
                  '__node:=autopilot_sim', '--params-file', str(config), '-p',
                  f'log_dir:={run_dir}'),
            start('camera', 'run', 'fl_uav', 'sim_camera_node', '--ros-args', '-r',
                  '__node:=sim_camera', '--params-file', str(config))]


def _keys(tmp_path: Path, num_drones: int) -> Path:
    keys = tmp_path / 'keys'
    done = subprocess.run([sys.executable, '-m', 'fl_uav.cli', 'keygen', '--out', str(keys),
                           '--drones', str(num_drones)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return keys


def _wait_for_report(run_dir: Path, timeout_s: float, *watched) -> dict:
    path = run_dir / 'ground_station.json'
    deadline_s = time.monotonic() + timeout_s
    while not path.is_file():
        for handle in watched:
            assert handle.process.poll() is None, handle.text[-3000:]
        assert time.monotonic() < deadline_s, '\n'.join(h.text[-1500:] for h in watched)
        time.sleep(0.5)
    return json.loads(path.read_text())


def _stop(handles) -> list[int]:
    """A Ctrl-C in each machine's terminal; their exit codes."""
    for handle in handles:
        handle.signal_group(signal.SIGINT)
    return [handle.wait(120) for handle in handles]


def test_station_and_drones_as_three_launches_learn_two_rounds(start, tmp_path):
    # Arrange: signed as a field fleet is (keys made with fl-uav keygen, signatures required);
    # the autopilot links unsigned here: no MAVLink key is provisioned on the stand-in
    # autopilot (test/e2e/test_signed_autopilot_link.py flies a signed one)
    run_dir = tmp_path / 'run'
    config = fleet_config(tmp_path / 'fleet.yaml', 2, fleet_ports(2),
                          security__keys_dir=str(_keys(tmp_path, 2)),
                          security__require_signatures=True, flight__mavlink_signing=False)
    simulators = _simulators(start, config, run_dir)
    # Act: the ground station's machine and each drone's
    station = start('station', 'launch', 'fl_uav', 'ground_station.launch.py',
                    f'config:={config}', f'output_dir:={run_dir}')
    drones = [start(f'drone{i}', 'launch', 'fl_uav', 'drone.launch.py', f'drone_id:={i}',
                    f'config:={config}', f'output_dir:={run_dir}') for i in (0, 1)]
    report = _wait_for_report(run_dir, RUN_TIMEOUT_S, station, *drones, *simulators)
    for drone in drones:
        drone.wait_for('landed', 60)
    codes = _stop([station, *drones, *simulators])
    # Assert
    assert report['status'] == 'finished'
    assert [r['participants'] for r in report['rounds']] == [[0, 1], [0, 1]]
    assert all(r['rejected'] == {} for r in report['rounds'])
    assert report['rounds'][-1]['accuracy'] > report['initial_accuracy']
    assert codes == [0] * 5, [h.text[-1500:] for h in (station, *drones)]
    assert node_exits(station.text) == {'ground_station_node-1': 'finished cleanly'}
    assert all(node_exits(d.text) == {'drone_node-1': 'finished cleanly'} for d in drones)
    events = autopilot_events(run_dir)
    assert all((v, 'landed') in events for v in (0, 1))


def test_px4_sitl_fleet_launch_flies_the_vehicles_it_is_given(start, tmp_path):
    # Arrange: the vehicles and cameras come from outside the launch (here the embedded
    # stand-ins; on a SITL machine PX4 instances and Gazebo's bridged cameras)
    run_dir = tmp_path / 'run'
    config = fleet_config(tmp_path / 'fleet.yaml', 2, fleet_ports(2))
    simulators = _simulators(start, config, run_dir)
    # Act
    launch = start('launch', 'launch', 'fl_uav', 'px4_sitl_fleet.launch.py', 'num_drones:=2',
                   f'config:={config}', f'output_dir:={run_dir}', 'exit_on_finish:=true',
                   'bridges:=false')     # sim_camera publishes /uav<i>/camera/image_raw
    code = launch.wait(RUN_TIMEOUT_S)
    sim_codes = _stop(simulators)
    # Assert: it started the station and the drones only, and the run finished
    text = launch.text
    assert code == 0, text[-3000:]
    assert node_exits(text) == {'ground_station_node-1': 'finished cleanly',
                                'drone_node-2': 'finished cleanly',
                                'drone_node-3': 'finished cleanly'}, unclean_exits(text)
    report = json.loads((run_dir / 'ground_station.json').read_text())
    assert report['status'] == 'finished'
    assert [r['participants'] for r in report['rounds']] == [[0, 1], [0, 1]]
    assert sim_codes == [0, 0]
