"""End to end: the autopilot_sim node, stopped while its vehicle flies with a client connected
(a Ctrl-C under ros2 launch reaches it and the drone nodes at once), goes on simulating and
serving MAVLink until the vehicle is down and its client gone, then exits 0 with its event log.

The node runs as its own process (python -m fl_uav.ros.autopilot_sim_node, as fl-uav sim and
ros2 launch start it); a pymavlink client stands in for the drone node's MAVSDK: it sends a
HEARTBEAT a second (MAVSDK's rate), takes off, and commands the return to launch after the
node's SIGINT, as a drone node's shutdown does.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.fleet_run.launch_plan import (
    NodeSpec,
    autopilot_stop_grace_s,
    merged_parameters,
    write_params_file,
)
from fl_uav.fleet_run.launcher import ProcessGroup, ros_environment
from test.conftest import BIND_PORT_OFFSET, free_udp_port_block, tiny_fleet_overrides
from test.unit.autopilot_sim.mav_client import MavClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
FLEET_YAML = Path(__file__).resolve().parents[2] / 'config' / 'fleet.yaml'
RTL_TIMEOUT_S = 20.0          # flight.shutdown_rtl_timeout_s: the hold lasts at most this + 5 s
CLIENT_HEARTBEAT_PERIOD_S = 1.0
NODE_START_TIMEOUT_S = 30.0   # python, rclpy and torch-free imports on a busy machine


def _listen(client: MavClient, until: Callable[[object], bool], timeout_s: float,
            heartbeats: bool = True) -> object | None:
    """Receive until a message satisfies ``until`` (returned), sending the client's HEARTBEAT
    once a second meanwhile (unless ``heartbeats`` is false); None after ``timeout_s``."""
    deadline_s = time.monotonic() + timeout_s
    next_beat_s = 0.0
    while time.monotonic() < deadline_s:
        if heartbeats and time.monotonic() >= next_beat_s:
            client.mav.heartbeat_send(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0,
                                      0)
            next_beat_s = time.monotonic() + CLIENT_HEARTBEAT_PERIOD_S
        msg = client.recv(('HEARTBEAT', 'EXTENDED_SYS_STATE', 'COMMAND_ACK'), timeout_s=0.2)
        if msg is not None and until(msg):
            return msg
    return None


def _armed(msg) -> bool:
    return bool(msg.base_mode & mavlink.MAV_MODE_FLAG_SAFETY_ARMED)


@pytest.fixture
def flying(tmp_path):
    """The node on free ports, its vehicle in the air with a client connected: (node's
    RunningNode, client); the node and the client are ended after the test."""
    base = free_udp_port_block(1)
    overrides = {**tiny_fleet_overrides(1, base), 'autopilot.time_factor': 10.0,
                 'flight.shutdown_rtl_timeout_s': RTL_TIMEOUT_S}
    params_file = write_params_file(merged_parameters([FLEET_YAML], overrides),
                                    tmp_path / 'params.yaml')
    group = ProcessGroup(ros_environment(int(os.environ['ROS_DOMAIN_ID']),
                                         tmp_path / 'ros_logs'), tmp_path / 'logs')
    group.start([NodeSpec('autopilot_sim_node', 'autopilot_sim',
                          parameters={'log_dir': str(tmp_path)})], params_file)
    node = group.nodes[0]
    client = MavClient(base, base + BIND_PORT_OFFSET)
    try:
        assert _listen(client, lambda m: m.get_type() == 'HEARTBEAT',
                       NODE_START_TIMEOUT_S) is not None, group.tail(node)
        assert client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1).result == 0
        client.mav.command_long_send(1, 1, mavlink.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, 0, math.nan,
                                     math.nan, math.nan, 488.0 + 10.0)
        assert _listen(client, lambda m: m.get_type() == 'EXTENDED_SYS_STATE'
                       and m.landed_state == mavlink.MAV_LANDED_STATE_IN_AIR, 10.0)
        yield node, client
    finally:
        client.close()
        group.stop(grace_s=autopilot_stop_grace_s(RTL_TIMEOUT_S))


def test_a_stopped_simulator_flies_its_vehicle_home_while_the_client_is_connected(
        flying, tmp_path):
    # Arrange: the vehicle in the air, its client connected
    node, client = flying
    # Act: the Ctrl-C, then the client's return to launch (a drone node's shutdown)
    signalled_s = time.monotonic()
    os.kill(node.process.pid, signal.SIGINT)
    client.mav.command_long_send(1, 1, mavlink.MAV_CMD_NAV_RETURN_TO_LAUNCH, 0, 0, 0, 0, 0,
                                 0, 0, 0)
    ack = _listen(client, lambda m: m.get_type() == 'COMMAND_ACK'
                  and m.command == mavlink.MAV_CMD_NAV_RETURN_TO_LAUNCH, 5.0)
    landed = _listen(client, lambda m: m.get_type() == 'HEARTBEAT' and not _armed(m),
                     RTL_TIMEOUT_S)
    alive_after_landing = node.process.poll() is None
    # the client closes: its heartbeats stop, and the node ends
    code = node.process.wait(timeout=RTL_TIMEOUT_S)
    ended_s = time.monotonic() - signalled_s
    # Assert: commands served after the signal; the vehicle landed; a clean exit and log
    log = node.log_path.read_text()
    assert ack is not None and ack.result == mavlink.MAV_RESULT_ACCEPTED, log[-2000:]
    assert landed is not None and alive_after_landing, log[-2000:]
    assert code == 0, log[-2000:]
    assert ended_s < RTL_TIMEOUT_S + 5.0
    assert 'keeps flying vehicle 0 (armed, in the air; its client heard' in log
    assert 'with its client gone' in log and 'Traceback' not in log
    events = [e['event'] for e in json.loads((tmp_path / 'autopilot_log.json').read_text())
              ['events']]
    assert events.index('rtl') < events.index('landed') < events.index('disarmed')


def test_a_repeated_sigint_keeps_the_hold_and_a_sigterm_ends_it_at_once(flying, tmp_path):
    # Arrange: the vehicle in the air, its client connected, the node holding after SIGINT
    node, client = flying
    os.kill(node.process.pid, signal.SIGINT)
    held = _listen(client, lambda m: 'keeps flying' in node.log_path.read_text(), 10.0)
    # Act 1: the same Ctrl-C again (ros2 launch forwards the one the terminal sent)
    os.kill(node.process.pid, signal.SIGINT)
    still_served = _listen(client, lambda m: m.get_type() == 'HEARTBEAT', 3.0)
    still_running = node.process.poll() is None
    # Act 2: ros2 launch's escalation (or a service manager's), the client still there
    signalled_s = time.monotonic()
    os.kill(node.process.pid, signal.SIGTERM)
    code = node.process.wait(timeout=10.0)
    ended_s = time.monotonic() - signalled_s
    # Assert: the second SIGINT changed nothing; SIGTERM did not wait for the vehicle
    log = node.log_path.read_text()
    assert held is not None, log[-2000:]
    assert still_served is not None and still_running, log[-2000:]
    assert code == 0 and ended_s < 5.0, log[-2000:]
    assert 'stopping after' in log and 'a SIGTERM' in log and 'Traceback' not in log
    assert (tmp_path / 'autopilot_log.json').exists()
