"""End to end: a drone on a signed autopilot link flies and learns, and a rogue MAVLink client
on the link changes nothing (issue 26: a second client's forced DISARM in the air was
accepted).

The drone node (real rclpy/DDS, the real MAVSDK through the signing relay) flies the embedded
autopilot simulator, which signs and checks as PX4 does. Its key is made with ``fl-uav
mavlink-key new`` and put on the autopilot with ``fl-uav mavlink-key provision`` from the
drone's own port before the node starts (PX4's docs: provision over a trusted link). A probe
node stands in for the station: one round, with a two-waypoint plan. In the air, a rogue
pymavlink client sends the autopilot, unsigned, a forced DISARM, a SET_MODE to Land, a
PARAM_SET and a mission upload, and the drone's port a HEARTBEAT in the autopilot's name that
says disarmed. Each must change nothing: the vehicle stays armed in its mode, the parameter
and the mission stay, the drone sees no takeover; the autopilot counted each message it
dropped, the relay the forged heartbeat. The drone then trains and uploads its update.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from pymavlink.dialects.v20 import common as mavlink
from sensor_msgs.msg import Image
from std_msgs.msg import UInt8MultiArray

from fl_uav.autopilot_sim.flight import FlightMode
from fl_uav.cli import main
from fl_uav.compression.codec import GROUND_STATION_ID, FrameKind, decode_frame, encode_frame
from fl_uav.learning.models import build_model
from fl_uav.learning.weights import architecture_fingerprint, get_weights
from fl_uav.ros import names
from fl_uav.ros.conversions import rgb_to_image
from fl_uav.vehicle.mavlink_provision import provision_key
from fl_uav.vehicle.mavlink_signing import read_key_file
from fl_uav.world.landcover import CLASS_NAMES
from test.conftest import BIND_PORT_OFFSET
from test.ros.rosutil import drone_under_test, frame_msg, spin_until
from test.unit.autopilot_sim.mav_client import MavClient

pytestmark = [pytest.mark.e2e, pytest.mark.ros, pytest.mark.timeout(120)]
HOME = (585.0, 600.0)
FORCE_DISARM = 21196.0                  # MAV_CMD_COMPONENT_ARM_DISARM param2: in the air too
PX4_AUTO, PX4_AUTO_LAND = 4, 6
ROGUE_VALUE_M = 99.0
DROPPED = {'COMMAND_LONG', 'SET_MODE', 'PARAM_SET', 'MISSION_COUNT', 'MISSION_ITEM_INT'}


def _attack_autopilot(rogue: MavClient, origin_lat_deg: float, origin_lon_deg: float) -> None:
    """What a second client on the vehicle's port sends, unsigned."""
    mav = rogue.mav
    mav.command_long_send(1, 1, mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 0, 0.0, FORCE_DISARM,
                          0, 0, 0, 0, 0)
    mav.set_mode_send(1, mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED,
                      (PX4_AUTO << 16) | (PX4_AUTO_LAND << 24))
    mav.param_set_send(1, 1, b'RTL_RETURN_ALT', ROGUE_VALUE_M, mavlink.MAV_PARAM_TYPE_REAL32)
    mav.mission_count_send(1, 1, 1, mavlink.MAV_MISSION_TYPE_MISSION)
    mav.mission_item_int_send(1, 1, 0, mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT,
                              mavlink.MAV_CMD_NAV_WAYPOINT, 0, 1, 0, 0, 0, 0,
                              int(origin_lat_deg * 1e7), int(origin_lon_deg * 1e7), 10.0,
                              mavlink.MAV_MISSION_TYPE_MISSION)


def _forge_autopilot_heartbeat(rogue: MavClient, drone_port: int) -> None:
    """A HEARTBEAT in the autopilot's name (system 1, component 1) to the drone's port:
    disarmed, PX4 Land mode."""
    forger = mavlink.MAVLink(None, srcSystem=1, srcComponent=1)
    frame = forger.heartbeat_encode(mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_PX4,
                                    mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED,
                                    (PX4_AUTO << 16) | (PX4_AUTO_LAND << 24),
                                    mavlink.MAV_STATE_STANDBY).pack(forger)
    rogue.sock.sendto(frame, ('127.0.0.1', drone_port))


def test_a_signed_drone_flies_and_learns_while_a_rogue_clients_commands_change_nothing(
        tmp_path, port_base):
    # Arrange: the drone's key, made and provisioned as the field guide says
    key_path = tmp_path / 'mavlink' / 'drone0.key'
    assert main(['mavlink-key', 'new', str(key_path)]) == 0
    provisioned = []

    def provision(sim) -> None:
        provisioned.append(provision_key(f'udpin://127.0.0.1:{port_base}',
                                         read_key_file(key_path), timeout_s=15.0))

    # slow enough (4 m/s: 12 wall seconds over the plan) for the attack to land mid-mission
    overrides = {'flight.takeoff_altitude_m': 20.0, 'learning.min_samples_to_train': 4,
                 'flight.speed_m_s': 4.0,
                 'flight.mavlink_signing': True, 'flight.mavlink_key_file': str(key_path)}
    with drone_under_test(tmp_path, port_base, HOME, overrides, {},
                          sim_settings={'state_dir': str(tmp_path / 'autopilot')},
                          before_node=provision) as (sim, node, probe, executor):
        truth, signing = sim.vehicles[0], sim.links[0].signing
        weights = get_weights(build_model('tiny_cnn', len(CLASS_NAMES)))
        plan = [[HOME[0] + 60.0, HOME[1], 20.0], [HOME[0] + 60.0, HOME[1] + 60.0, 20.0]]
        uploads = []
        probe.create_subscription(UInt8MultiArray, names.UPDATES_TOPIC,
                                  lambda m: uploads.append(bytes(m.data)), names.UPDATES_QOS)
        model_pub = probe.create_publisher(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC,
                                           names.GLOBAL_MODEL_QOS)
        camera = probe.create_publisher(Image, names.drone_topic(0, names.IMAGE_TOPIC),
                                        names.IMAGE_QOS)
        rng = np.random.default_rng(0)

        def filming(condition):
            def step() -> bool:
                camera.publish(rgb_to_image(rng.integers(0, 255, (64, 64, 3), np.uint8),
                                            'uav0/camera_optical', time.time()))
                return condition()
            return step

        model_pub.publish(frame_msg(encode_frame(
            FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, architecture_fingerprint(weights),
            weights, {'deadline_s': 60.0, 'knobs': {'0': {'plan': plan}}})))
        assert spin_until(executor, filming(
            lambda: truth.armed and truth.position_enu_m[2] > 5.0
            and truth.mode == FlightMode.MISSION), 60.0), \
            f'not in the air on its mission; pilot state {node.pilot.state}'
        before = (truth.mode, truth.params['RTL_RETURN_ALT'],
                  [(i.x, i.y, i.z) for i in truth.mission])
        rogue = MavClient(0, port_base + BIND_PORT_OFFSET)
        try:
            # Act: the rogue, on the autopilot's port and on the drone's
            _attack_autopilot(rogue, sim.config.origin_lat_deg, sim.config.origin_lon_deg)
            _forge_autopilot_heartbeat(rogue, port_base)
            relay = node.pilot.vehicle.signing_relay
            counted = spin_until(executor, filming(
                lambda: DROPPED <= set(signing.rejected_messages)
                and relay.dropped['unsigned'] >= 1), 10.0)
            after = (truth.armed, truth.mode, truth.params['RTL_RETURN_ALT'],
                     [(i.x, i.y, i.z) for i in truth.mission])
            events = {e['event'] for e in sim.events_of(0)}
        finally:
            rogue.close()
        uploaded = spin_until(executor, filming(lambda: bool(uploads)), 90.0)
        taken_over = node.pilot.state.taken_over
    # Assert: provisioned over the drone's link (the vehicle had no key)
    assert provisioned[0].before == 'unsigned'
    # Assert: the rogue's messages were dropped, counted, and changed nothing
    assert counted, (dict(signing.rejected_messages), relay.status())
    assert signing.rejected == {'unsigned': sum(signing.rejected_messages.values())}
    assert after == (True, FlightMode.MISSION, before[1], before[2])
    assert before[1] != ROGUE_VALUE_M
    assert taken_over == ''
    assert not {'disarmed', 'land'} & events
    # Assert: every message the autopilot took from the drone was signed; the drone learned
    assert signing.accepted_signed > 20      # heartbeats, fence, mission, arm, take-off, ...
    assert uploaded, f'no update; pilot state {node.pilot.state}'
    update = decode_frame(uploads[0])
    assert update.round_index == 1 and update.metadata['num_samples'] > 0
    assert update.metadata['waypoints_reached'] == len(plan)
    assert any(np.any(t != 0) for t in update.tensors.values())
