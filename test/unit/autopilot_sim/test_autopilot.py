"""Simulator configuration, lifecycle, ground-truth hooks and the command-line entry point."""

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fl_uav.autopilot_sim.autopilot import AutopilotSim
from fl_uav.autopilot_sim.config import AutopilotSimConfig

from .mav_client import MavClient

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(('overrides', 'field'), [
    ({'num_vehicles': 0}, 'num_vehicles'),
    ({'time_factor': 0.0}, 'time_factor'),
    ({'bind_base_port': 14540}, 'bind_base_port'),
    ({'remote_base_port': 65535, 'num_vehicles': 2}, 'remote_base_port'),
    ({'cruise_speed_m_s': 20.0}, 'cruise_speed_m_s'),
    ({'home_positions_enu_m': (1.0, 2.0)}, 'home_positions_enu_m'),
    ({'position_rate_hz': 500.0}, 'position_rate_hz'),
])
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=f'AutopilotSimConfig.{field} '):
        AutopilotSimConfig(**overrides)


def test_home_positions_default_layout_and_explicit_pairs():
    default = AutopilotSimConfig(num_vehicles=3, home_east_m=5.0, home_north_m=-2.0)
    explicit = AutopilotSimConfig(num_vehicles=2, home_positions_enu_m=((1.0, 2.0), (3.0, 4.0)))
    assert [default.home_enu_m(i) for i in range(3)] == [(5.0, -2.0), (15.0, -2.0),
                                                         (25.0, -2.0)]
    assert explicit.home_positions_enu_m == (1.0, 2.0, 3.0, 4.0)
    assert explicit.home_enu_m(1) == (3.0, 4.0)


def test_vehicles_start_at_home_and_on_tick_gets_snapshots(port_base):
    # Prepare
    ticks = []
    got_two = threading.Event()

    def on_tick(snapshots):
        ticks.append(snapshots)
        if len(ticks) >= 2:
            got_two.set()

    sim = AutopilotSim(AutopilotSimConfig(num_vehicles=2, remote_base_port=port_base,
                                          bind_base_port=port_base + 1000), on_tick=on_tick)
    # Execute
    handle = sim.run_in_thread()
    try:
        assert got_two.wait(5.0)
        snapshots = sim.snapshots()
    finally:
        handle.stop()
    # Assert
    assert not handle.running
    assert [s.position_enu_m for s in snapshots] == [(0.0, 0.0, 0.0), (10.0, 0.0, 0.0)]
    assert [s.system_id for s in ticks[-1]] == [1, 2]
    assert snapshots[0].mode == 'hold' and snapshots[0].landed_state == 'on_ground'
    assert 0.999 < snapshots[0].battery_remaining < 1.0  # idle avionics drain a little


def test_start_fails_cleanly_when_a_port_is_taken(port_base):
    # Prepare
    blocker = MavClient(port_base + 1000, port_base)  # binds the vehicle's port
    sim = AutopilotSim(AutopilotSimConfig(num_vehicles=1, remote_base_port=port_base,
                                          bind_base_port=port_base + 1000))
    # Execute / Assert
    try:
        with pytest.raises(OSError):
            sim.run_in_thread()
    finally:
        blocker.close()


@pytest.mark.timeout(30)
def test_command_line_runs_until_sigterm_and_writes_its_log(port_base, tmp_path):
    # Prepare
    log_path = tmp_path / 'events.json'
    client = MavClient(port_base + 1, port_base + 1001)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    process = subprocess.Popen(
        [sys.executable, '-m', 'fl_uav.autopilot_sim.autopilot', '--vehicles', '2',
         '--time-factor', '5',
         '--remote-base-port', str(port_base), '--bind-base-port', str(port_base + 1000),
         '--heartbeat-rate-hz', '5', '--log', str(log_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO_ROOT)
    try:
        # Execute
        ready = ''
        while 'ready' not in ready and process.poll() is None:
            ready = process.stdout.readline()
        heartbeat = client.recv('HEARTBEAT', timeout_s=5.0)
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(timeout=10.0)
        output = process.stdout.read()
    finally:
        client.close()
        if process.poll() is None:
            process.kill()
            process.wait()
    # Assert
    assert 'autopilot sim ready: 2 vehicles' in ready
    assert heartbeat is not None and heartbeat.get_srcSystem() == 2
    assert exit_code == 0, output
    assert 'stopped' in output
    assert json.loads(log_path.read_text())['config']['num_vehicles'] == 2
