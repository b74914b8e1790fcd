"""fl-uav sim's start: the domain it names, the ports it refuses before starting a node."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet_run.launch_plan import fleet_udp_endpoints, refuse_busy_ports
from fl_uav.fleet_run.launcher import ProcessGroup, ros_environment
from fl_uav.fleet_run.run import FleetRunOptions, _start_recorder, domain_text, run_fleet
from test.conftest import BIND_PORT_OFFSET, tiny_fleet_overrides

REPO = Path(__file__).resolve().parents[3]
FLEET_YAML = REPO / 'config' / 'fleet.yaml'


def test_a_random_domain_says_the_shells_ros_domain_id_is_not_used_and_how_to_use_it():
    # Arrange: the shell exported 51, fl-uav sim drew 26 (no --domain-id)
    # Act
    text = domain_text(26, None, '51')
    # Assert
    assert text.startswith('ROS_DOMAIN_ID=26') and 'ROS_DOMAIN_ID=51' in text
    assert '--domain-id 51' in text


def test_a_chosen_or_matching_domain_or_no_shell_domain_is_stated_plainly():
    # Arrange / Act
    texts = [domain_text(51, 51, '7'), domain_text(51, None, '51'), domain_text(26, None, None)]
    # Assert
    assert texts == ['ROS_DOMAIN_ID=51', 'ROS_DOMAIN_ID=51', 'ROS_DOMAIN_ID=26']



def test_the_fleets_udp_ports_are_each_drones_link_and_each_simulated_autopilot():
    # Arrange
    config = build_config(FleetConfig, tiny_fleet_overrides(2, 47000))
    # Act
    endpoints = fleet_udp_endpoints(config)
    # Assert
    assert sorted(port for _, port in endpoints) == [
        47000, 47001, 47000 + BIND_PORT_OFFSET, 47001 + BIND_PORT_OFFSET]
    assert "drone 1's MAVLink link" in endpoints[('127.0.0.1', 47001)]


def test_a_port_another_process_holds_is_refused_naming_it_and_port_base(port_base):
    # Arrange: another process (here a socket) holds drone 1's MAVLink port
    config = build_config(FleetConfig, tiny_fleet_overrides(2, port_base))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(('127.0.0.1', port_base + 1))
        # Act
        with pytest.raises(ConfigError) as refused:
            refuse_busy_ports(config)
    # Assert
    assert f'UDP 127.0.0.1:{port_base + 1}' in str(refused.value)
    assert "drone 1's MAVLink link" in str(refused.value) and '--port-base' in str(refused.value)
    refuse_busy_ports(config)          # released: nothing to refuse


def test_fl_uav_sim_refuses_a_busy_port_before_it_starts_a_node_or_writes_out(
        tmp_path, port_base, monkeypatch):
    # Arrange: starting a node would fail the test (and start no fleet)
    def no_start(*_args):
        raise AssertionError('a node was started')
    monkeypatch.setattr(ProcessGroup, 'start', no_start)
    out = tmp_path / 'run'
    options = FleetRunOptions(config_files=[FLEET_YAML], out_dir=out,
                              overrides=tiny_fleet_overrides(1, port_base), timeout_s=5.0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(('127.0.0.1', port_base + BIND_PORT_OFFSET))
        # Act / Assert
        with pytest.raises(ConfigError, match='simulated autopilot 0'):
            run_fleet(options, echo=lambda _: None)
    assert not out.exists()


def test_a_recorder_that_cannot_start_is_reported_with_its_own_error(tmp_path):
    # Arrange: a bag whose parent directory does not exist
    recorder = ProcessGroup(ros_environment(78, tmp_path / 'ros_logs'), tmp_path / 'logs')
    # Act
    error = _start_recorder(recorder, tmp_path / 'missing' / 'bag')
    # Assert
    assert error is not None and error.startswith('--record: the recorder did not start')
    assert 'exit code 1' in error and 'no writable directory' in error
    assert recorder.stop() == {'recorder': 1}


# fl-uav sim with a Ctrl-C that lands just after the first node's process is created, before
# ProcessGroup has recorded it (a node stand-in that would sleep a minute); run in a fresh
# interpreter with Ctrl-C as a terminal gives it: in three full xdist runs the worker lost
# this self-sent SIGINT (the run went on for the stand-in's 60 s), never alone, also when the
# scenario ran in a child of the worker: the worker's SIGINT had been left ignored or blocked
# below Python (Python's own handler was unchanged; test/conftest.py looks for the test)
CTRL_C_AT_START = """
import json, os, signal, sys
from pathlib import Path
from fl_uav.fleet_run.launcher import ProcessGroup
from fl_uav.fleet_run.run import FleetRunOptions, run_fleet
from test.conftest import tiny_fleet_overrides

out, port_base, fleet_yaml = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
# Ctrl-C as a terminal's fl-uav sim has it, whatever the test process passed on (in full runs
# it passed SIGINT on ignored or blocked: the scenario's own Ctrl-C was then lost)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
signal.signal(signal.SIGINT, signal.default_int_handler)
started = []
real_popen = ProcessGroup._popen

def popen_then_ctrl_c(group, _argv, log_path, mode):
    process = real_popen(group, [sys.executable, '-c', 'import time; time.sleep(60)'],
                         log_path, mode)
    started.append(process)
    os.kill(os.getpid(), signal.SIGINT)
    return process

ProcessGroup._popen = popen_then_ctrl_c
summary = run_fleet(FleetRunOptions(config_files=[fleet_yaml], out_dir=out,
                                    overrides=tiny_fleet_overrides(2, port_base),
                                    timeout_s=60.0), echo=lambda _: None)
print(json.dumps({'status': summary['status'], 'started': len(started),
                  'ended': [p.poll() is not None for p in started]}))
"""


def test_a_ctrl_c_as_a_node_is_being_started_stops_it_and_starts_no_further_node(
        tmp_path, port_base):
    # Act
    done = subprocess.run([sys.executable, '-c', CTRL_C_AT_START, str(tmp_path / 'run'),
                           str(port_base), str(FLEET_YAML)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    # Assert: the run was interrupted, one process was started and it was stopped
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {'status': 'interrupted', 'started': 1, 'ended': [True]}, done.stderr[-3000:]
