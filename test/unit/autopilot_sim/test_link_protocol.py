"""The simulator at the MAVLink level, driven by a pymavlink client over loopback UDP."""

import json
import logging
import math
import random
import struct
import time

import pytest
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.autopilot_sim.flight import FlightMode, LandedState
from fl_uav.world.geo import enu_to_geodetic

from .mav_client import CLIENT_COMPID, CLIENT_SYSID, MavClient

HOLD_CUSTOM_MODE = 0x03040000
MISSION_CUSTOM_MODE = 0x04040000


def _waypoint(client: MavClient, seq: int, east_m: float, north_m: float, rel_alt_m: float,
              origin, command: int = mavlink.MAV_CMD_NAV_WAYPOINT,
              frame: int = mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT, **params) -> None:
    lat_deg, lon_deg, _ = enu_to_geodetic(origin, east_m, north_m, 0.0)
    client.mav.mission_item_int_send(
        1, 1, seq, frame, command, 0, 1, params.get('param1', 0.0), params.get('param2', 0.0),
        0.0, math.nan, int(round(lat_deg * 1e7)), int(round(lon_deg * 1e7)), rel_alt_m)


def _upload(client: MavClient, items: list[tuple[float, float, float]], origin) -> object:
    """Run the whole upload handshake; returns the final MISSION_ACK."""
    client.mav.mission_count_send(1, 1, len(items))
    for _ in items:
        request = client.recv('MISSION_REQUEST_INT')
        assert request is not None, 'vehicle stopped requesting items'
        _waypoint(client, request.seq, *items[request.seq], origin)
    return client.recv('MISSION_ACK')


def _take_off(sim, client: MavClient, wait_until, altitude_m: float = 10.0) -> None:
    assert client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1).result == 0
    ack = client.command_long(mavlink.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, math.nan, math.nan,
                              math.nan, sim.config.origin_alt_amsl_m + altitude_m)
    assert ack.result == mavlink.MAV_RESULT_ACCEPTED
    assert wait_until(lambda: sim.vehicles[0].landed_state == LandedState.IN_AIR, 10.0)


def test_heartbeat_identifies_a_disarmed_px4_quadrotor_in_hold(start_sim, client_factory):
    # Prepare
    start_sim()
    client = client_factory()
    # Execute
    heartbeat = client.recv('HEARTBEAT')
    # Assert
    assert heartbeat is not None
    assert (heartbeat.get_srcSystem(), heartbeat.get_srcComponent()) == (1, 1)
    assert heartbeat.type == mavlink.MAV_TYPE_QUADROTOR
    assert heartbeat.autopilot == mavlink.MAV_AUTOPILOT_PX4
    assert heartbeat.base_mode & mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED
    assert not heartbeat.base_mode & mavlink.MAV_MODE_FLAG_SAFETY_ARMED
    assert heartbeat.custom_mode == HOLD_CUSTOM_MODE
    assert heartbeat.system_status == mavlink.MAV_STATE_STANDBY
    assert heartbeat.get_header().mlen > 0 and heartbeat.get_msgbuf()[0] == 0xFD  # MAVLink 2


def test_each_vehicle_has_its_own_port_and_system_id(start_sim, client_factory):
    start_sim(num_vehicles=3, heartbeat_rate_hz=5.0)
    for index in range(3):
        heartbeat = client_factory(index).recv('HEARTBEAT')
        assert heartbeat.get_srcSystem() == index + 1


def test_health_bits_home_and_capabilities(start_sim, client_factory):
    # Prepare
    start_sim()
    client = client_factory()
    # Execute
    status = client.recv('SYS_STATUS')
    home_ack = client.command_long(mavlink.MAV_CMD_REQUEST_MESSAGE,
                                   mavlink.MAVLINK_MSG_ID_HOME_POSITION)
    home = client.recv('HOME_POSITION')
    client.command_long(mavlink.MAV_CMD_REQUEST_MESSAGE, mavlink.MAVLINK_MSG_ID_AUTOPILOT_VERSION)
    version = client.recv('AUTOPILOT_VERSION')
    # Assert
    needed = (mavlink.MAV_SYS_STATUS_SENSOR_3D_GYRO | mavlink.MAV_SYS_STATUS_SENSOR_3D_ACCEL
              | mavlink.MAV_SYS_STATUS_SENSOR_3D_MAG | mavlink.MAV_SYS_STATUS_SENSOR_GPS
              | mavlink.MAV_SYS_STATUS_PREARM_CHECK)
    assert status.onboard_control_sensors_health & needed == needed
    assert home_ack.result == mavlink.MAV_RESULT_ACCEPTED
    assert (home.latitude, home.longitude, home.altitude) == (473977420, 85455940, 488000)
    assert version.capabilities & mavlink.MAV_PROTOCOL_CAPABILITY_MISSION_INT


def test_unknown_command_is_acked_unsupported_to_the_sender(start_sim, client_factory):
    start_sim()
    client = client_factory()
    ack = client.command_long(31999, 1.0)
    assert ack.result == mavlink.MAV_RESULT_UNSUPPORTED
    assert (ack.target_system, ack.target_component) == (CLIENT_SYSID, CLIENT_COMPID)


def test_command_int_is_acked_too(start_sim, client_factory):
    start_sim()
    client = client_factory()
    client.mav.command_int_send(1, 1, mavlink.MAV_FRAME_GLOBAL_INT, 31999, 0, 0, 0, 0, 0, 0,
                                0, 0, 0.0)
    ack = client.recv('COMMAND_ACK', lambda m: m.command == 31999)
    assert ack.result == mavlink.MAV_RESULT_UNSUPPORTED


def test_malformed_datagrams_do_not_stop_the_vehicle(start_sim, client_factory):
    # Prepare
    sim, _ = start_sim()
    client = client_factory()
    good = client.mav.command_long_encode(1, 1, mavlink.MAV_CMD_REQUEST_MESSAGE, 0,
                                          mavlink.MAVLINK_MSG_ID_HOME_POSITION, 0, 0, 0, 0, 0,
                                          0).pack(client.mav)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    # Execute: garbage, a bad CRC, a truncated frame, an empty datagram, a wrong length byte.
    for junk in (b'\x00\x01garbage\xfd', bytes(bad_crc), good[:7], b'', b'\xfd\xff' + good[2:]):
        client.send_raw(junk)
    ack = client.command_long(mavlink.MAV_CMD_REQUEST_MESSAGE,
                              mavlink.MAVLINK_MSG_ID_HOME_POSITION)
    # Assert
    assert ack is not None and ack.result == mavlink.MAV_RESULT_ACCEPTED
    assert sim.links[0].rx_errors >= 2


def test_low_battery_denies_arming_with_a_status_text(start_sim, client_factory):
    # Prepare
    start_sim(initial_battery_fraction=0.1)
    client = client_factory()
    # Execute
    ack = client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    texts = [(m.text, m.id, m.chunk_seq) for m in client.received
             if m.get_type() == 'STATUSTEXT']
    # Assert: as PX4's commander: the failed check, then the generic denial (tab-marked, as a
    # text doubling an event; 52 characters: two chunks of one id), before a
    # TEMPORARILY_REJECTED ACK
    assert ack.result == mavlink.MAV_RESULT_TEMPORARILY_REJECTED
    (check, _, _), (first, chunk_id, seq0), (rest, rest_id, seq1) = texts[-3:]
    assert check == 'Preflight Fail: low battery\t'
    assert (first + rest, seq0, seq1) == (
        'Arming denied: Resolve system health failures first\t', 0, 1)
    assert chunk_id == rest_id != 0


def test_arm_is_reported_in_the_next_heartbeat(start_sim, client_factory):
    # Prepare
    start_sim()
    client = client_factory()
    client.recv('HEARTBEAT')
    seen_before = len(client.received)
    # Execute
    ack = client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    heartbeats = [m for m in client.received[seen_before:] if m.get_type() == 'HEARTBEAT']
    # Assert: the new state went out with the ACK, not at the next 1 Hz heartbeat.
    assert ack.result == mavlink.MAV_RESULT_ACCEPTED
    assert heartbeats, 'no HEARTBEAT pushed with the state change'
    assert heartbeats[-1].base_mode & mavlink.MAV_MODE_FLAG_SAFETY_ARMED
    assert heartbeats[-1].system_status == mavlink.MAV_STATE_ACTIVE


def test_parameters_read_set_and_list(start_sim, client_factory):
    # Prepare
    sim, _ = start_sim()
    client = client_factory()
    # Execute
    client.mav.param_request_read_send(1, 1, b'MIS_TAKEOFF_ALT', -1)
    before = client.recv('PARAM_VALUE', lambda m: m.param_id == 'MIS_TAKEOFF_ALT')
    client.mav.param_set_send(1, 1, b'MIS_TAKEOFF_ALT', 12.5, mavlink.MAV_PARAM_TYPE_REAL32)
    after = client.recv('PARAM_VALUE', lambda m: m.param_id == 'MIS_TAKEOFF_ALT')
    client.mav.param_set_send(1, 1, b'MPC_XY_CRUISE', -3.0, mavlink.MAV_PARAM_TYPE_REAL32)
    refused = client.recv('PARAM_VALUE', lambda m: m.param_id == 'MPC_XY_CRUISE')
    client.mav.param_request_list_send(1, 1)
    names = set()
    while (msg := client.recv('PARAM_VALUE', timeout_s=1.0)) is not None:
        names.add(msg.param_id)
        if len(names) == msg.param_count:
            break
    # Assert
    assert before.param_value == pytest.approx(2.5)
    assert after.param_value == pytest.approx(12.5)
    assert sim.vehicles[0].params['MIS_TAKEOFF_ALT'] == pytest.approx(12.5)
    assert refused.param_value == pytest.approx(5.0)
    assert {'MIS_TAKEOFF_ALT', 'RTL_RETURN_ALT', 'MPC_XY_CRUISE'} <= names


def test_mission_upload_download_and_clear(start_sim, client_factory):
    # Prepare
    sim, _ = start_sim()
    client = client_factory()
    origin = sim.config.origin
    items = [(10.0, 0.0, 10.0), (10.0, 20.0, 15.0), (0.0, 20.0, 10.0)]
    # Execute
    ack = _upload(client, items, origin)
    client.mav.mission_request_list_send(1, 1)
    count = client.recv('MISSION_COUNT')
    downloaded = []
    for seq in range(count.count):
        client.mav.mission_request_int_send(1, 1, seq)
        downloaded.append(client.recv('MISSION_ITEM_INT', lambda m, s=seq: m.seq == s))
    current = client.recv('MISSION_CURRENT')
    client.mav.mission_clear_all_send(1, 1)
    clear_ack = client.recv('MISSION_ACK')
    # Assert
    assert ack.type == mavlink.MAV_MISSION_ACCEPTED
    assert count.count == 3
    assert [round(m.z, 3) for m in downloaded] == [10.0, 15.0, 10.0]
    assert (current.total, current.mission_state) == (3, mavlink.MISSION_STATE_NOT_STARTED)
    assert clear_ack.type == mavlink.MAV_MISSION_ACCEPTED
    assert sim.vehicles[0].mission == []
    assert [e['event'] for e in sim.events_of(0)][:2] == ['mission_uploaded', 'mission_cleared']


def test_mission_upload_re_requests_a_missing_item(start_sim, client_factory):
    # Prepare
    sim, _ = start_sim()
    client = client_factory()
    # Execute: ignore the first request, as if the item were lost.
    client.mav.mission_count_send(1, 1, 1)
    first = client.recv('MISSION_REQUEST_INT')
    t_first = time.monotonic()
    again = client.recv('MISSION_REQUEST_INT', timeout_s=2.0)
    waited_s = time.monotonic() - t_first
    _waypoint(client, 0, 5.0, 5.0, 10.0, sim.config.origin)
    ack = client.recv('MISSION_ACK')
    # Assert
    assert (first.seq, again.seq) == (0, 0)
    assert 0.3 <= waited_s <= 1.5
    assert ack.type == mavlink.MAV_MISSION_ACCEPTED


@pytest.mark.parametrize(('field', 'expected'), [
    ('latitude', mavlink.MAV_MISSION_INVALID_PARAM5_X),
    ('command', mavlink.MAV_MISSION_UNSUPPORTED),
    ('frame', mavlink.MAV_MISSION_UNSUPPORTED_FRAME),
    ('altitude', mavlink.MAV_MISSION_INVALID_PARAM7),
])
def test_bad_mission_items_are_rejected_and_keep_the_old_mission(start_sim, client_factory,
                                                                  field, expected):
    # Prepare
    sim, _ = start_sim()
    client = client_factory()
    assert _upload(client, [(1.0, 1.0, 5.0)], sim.config.origin).type == 0
    # Execute
    client.mav.mission_count_send(1, 1, 2)
    client.recv('MISSION_REQUEST_INT', lambda m: m.seq == 0)
    _waypoint(client, 0, 3.0, 3.0, 10.0, sim.config.origin)
    client.recv('MISSION_REQUEST_INT', lambda m: m.seq == 1)
    bad = {'latitude': dict(x=95 * 10**7), 'command': dict(command=31999),
           'frame': dict(frame=mavlink.MAV_FRAME_LOCAL_NED), 'altitude': dict(z=math.inf)}[field]
    fields = dict(frame=mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT,
                  command=mavlink.MAV_CMD_NAV_WAYPOINT, x=473977420, y=85455940, z=10.0)
    fields.update(bad)
    client.mav.mission_item_int_send(1, 1, 1, fields['frame'], fields['command'], 0, 1, 0, 0, 0,
                                     0, fields['x'], fields['y'], fields['z'])
    ack = client.recv('MISSION_ACK')
    # Assert
    assert ack.type == expected
    assert len(sim.vehicles[0].mission) == 1


def test_mission_runs_with_progress_and_completes(start_sim, client_factory, wait_until):
    # Prepare
    sim, _ = start_sim(time_factor=20.0)
    client = client_factory()
    items = [(0.0, 20.0, 10.0), (20.0, 20.0, 10.0), (20.0, 0.0, 12.0)]
    assert _upload(client, items, sim.config.origin).type == 0
    _take_off(sim, client, wait_until)
    # Execute
    ack = client.command_long(mavlink.MAV_CMD_DO_SET_MODE,
                              mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, 4, 4)
    reached = [client.recv('MISSION_ITEM_REACHED', timeout_s=5.0) for _ in items]
    complete = client.recv('MISSION_CURRENT', lambda m: m.mission_state == 5, timeout_s=3.0)
    heartbeat = client.recv('HEARTBEAT')
    # Assert
    assert ack.result == mavlink.MAV_RESULT_ACCEPTED
    assert [m.seq for m in reached] == [0, 1, 2]
    assert complete.total == 3
    assert heartbeat.custom_mode == MISSION_CUSTOM_MODE
    assert wait_until(lambda: math.dist(sim.vehicles[0].position_enu_m, items[-1]) < 0.1, 5.0)
    assert sim.vehicles[0].mission_items_reached == [0, 1, 2]


def test_mission_mode_is_denied_without_a_mission(start_sim, client_factory):
    start_sim()
    client = client_factory()
    ack = client.command_long(mavlink.MAV_CMD_DO_SET_MODE,
                              mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, 4, 4)
    assert ack.result == mavlink.MAV_RESULT_DENIED


def test_offboard_needs_fresh_setpoints_and_falls_back_to_hold(start_sim, client_factory,
                                                               wait_until):
    # Prepare
    sim, _ = start_sim(time_factor=10.0)
    client = client_factory()
    _take_off(sim, client, wait_until)
    offboard = (mavlink.MAV_CMD_DO_SET_MODE, mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, 6, 0)
    # Execute
    denied = client.command_long(*offboard)
    client.mav.set_position_target_local_ned_send(
        0, 1, 1, mavlink.MAV_FRAME_LOCAL_NED, 0b0000_1111_1111_1000, 5.0, 0.0, -10.0,
        0, 0, 0, 0, 0, 0, 0, 0)
    accepted = client.command_long(*offboard)
    in_offboard = sim.vehicles[0].mode
    # Assert: no more set-points -> Hold after COM_OF_LOSS_T (1 s wall).
    assert denied.result == mavlink.MAV_RESULT_DENIED
    assert accepted.result == mavlink.MAV_RESULT_ACCEPTED
    assert in_offboard == FlightMode.OFFBOARD
    assert wait_until(lambda: sim.vehicles[0].mode == FlightMode.HOLD, 3.0)


def test_heartbeat_says_critical_while_a_failsafe_hold_acts_until_the_user_switches_mode(
        start_sim, client_factory, wait_until):
    # Arrange: airborne in Offboard, then no more set-points (PX4's offboard-loss Hold)
    sim, _ = start_sim(time_factor=10.0)
    client = client_factory()
    _take_off(sim, client, wait_until)
    active = client.recv('HEARTBEAT').system_status
    client.mav.set_position_target_local_ned_send(
        0, 1, 1, mavlink.MAV_FRAME_LOCAL_NED, 0b0000_1111_1111_1000, 5.0, 0.0, -10.0,
        0, 0, 0, 0, 0, 0, 0, 0)
    assert client.command_long(mavlink.MAV_CMD_DO_SET_MODE,
                               mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, 6, 0).result == 0
    # Act
    critical = client.recv('HEARTBEAT', lambda m: m.system_status == mavlink.MAV_STATE_CRITICAL,
                           timeout_s=5.0)
    in_hold = sim.vehicles[0].mode
    ack = client.command_long(mavlink.MAV_CMD_DO_SET_MODE,
                              mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, 4, 3)  # Hold
    back = client.recv('HEARTBEAT', lambda m: m.system_status == mavlink.MAV_STATE_ACTIVE,
                       timeout_s=3.0)
    # Assert: as PX4's HEARTBEAT stream: armed and vehicle_status.failsafe -> CRITICAL
    assert active == mavlink.MAV_STATE_ACTIVE
    assert critical is not None and critical.custom_mode == HOLD_CUSTOM_MODE
    assert in_hold == FlightMode.HOLD
    assert ack.result == mavlink.MAV_RESULT_ACCEPTED
    assert back is not None and back.custom_mode == HOLD_CUSTOM_MODE


def test_reposition_as_command_int_uses_amsl_altitude_and_caps_speed(start_sim, client_factory,
                                                                      wait_until):
    # Prepare
    sim, _ = start_sim(time_factor=20.0, max_speed_m_s=12.0)
    client = client_factory()
    _take_off(sim, client, wait_until)
    lat_deg, lon_deg, _ = enu_to_geodetic(sim.config.origin, 0.0, 300.0, 0.0)
    speeds = []
    # Execute: ask for 30 m/s; the vehicle must not exceed MPC_XY_VEL_MAX.
    client.command_long(mavlink.MAV_CMD_DO_CHANGE_SPEED, 1, 30.0, -1)
    client.mav.command_int_send(1, 1, mavlink.MAV_FRAME_GLOBAL_INT, mavlink.MAV_CMD_DO_REPOSITION,
                                0, 0, -1, mavlink.MAV_DO_REPOSITION_FLAGS_CHANGE_MODE, 0,
                                math.nan, int(round(lat_deg * 1e7)), int(round(lon_deg * 1e7)),
                                sim.config.origin_alt_amsl_m + 20.0)
    ack = client.recv('COMMAND_ACK', lambda m: m.command == mavlink.MAV_CMD_DO_REPOSITION)

    def arrived() -> bool:
        speeds.append(math.hypot(*sim.vehicles[0].velocity_enu_m_s[:2]))
        return math.dist(sim.vehicles[0].position_enu_m, (0.0, 300.0, 20.0)) < 0.05

    assert wait_until(arrived, 10.0, poll_s=0.005)
    # Assert
    assert ack.result == mavlink.MAV_RESULT_ACCEPTED
    assert max(speeds) == pytest.approx(12.0, abs=0.01)
    assert abs(sim.vehicles[0].yaw_rad - math.pi / 2) < 0.01  # faced north, the way it flew


def test_time_factor_scales_simulated_time(start_sim):
    # Prepare
    sim, _ = start_sim(time_factor=8.0)
    t_sim_0, t_wall_0 = sim.t_sim_s, time.monotonic()
    # Execute: wait on the sim clock, not a fixed sleep.
    deadline = time.monotonic() + 5.0
    while sim.t_sim_s - t_sim_0 < 8.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    ratio = (sim.t_sim_s - t_sim_0) / (time.monotonic() - t_wall_0)
    # Assert
    assert ratio == pytest.approx(8.0, rel=0.15)


def test_battery_drains_with_the_flight_state(start_sim, client_factory, wait_until):
    # Prepare
    sim, _ = start_sim(time_factor=20.0, battery_capacity_wh=50.0, hover_power_w=300.0)
    client = client_factory()
    vehicle = sim.vehicles[0]
    idle_status = client.recv('BATTERY_STATUS')
    # Execute
    _take_off(sim, client, wait_until)
    energy_0, t_0 = vehicle.battery.energy_wh, sim.t_sim_s
    assert wait_until(lambda: sim.t_sim_s - t_0 >= 20.0, 5.0)
    hover_w = (energy_0 - vehicle.battery.energy_wh) * 3600.0 / (sim.t_sim_s - t_0)
    status = client.recv('BATTERY_STATUS', lambda m: m.battery_remaining < 100, timeout_s=3.0)
    # Assert: hover draws hover_power_w (+ idle avionics), BATTERY_STATUS reports it.
    assert hover_w == pytest.approx(305.0, rel=0.03)
    assert idle_status.battery_remaining == 100
    assert status.current_battery > idle_status.current_battery
    cells_v = [v for v in status.voltages if v != 65535]
    assert len(cells_v) == 4 and sum(cells_v) < sum(v for v in idle_status.voltages
                                                    if v != 65535)


def test_rtl_climbs_returns_lands_and_disarms(start_sim, client_factory, wait_until):
    # Prepare
    sim, _ = start_sim(time_factor=25.0, rtl_return_alt_m=15.0)
    client = client_factory()
    _take_off(sim, client, wait_until, altitude_m=5.0)
    lat_deg, lon_deg, _ = enu_to_geodetic(sim.config.origin, 30.0, 0.0, 0.0)
    # COMMAND_LONG carries lat/lon as float32: ~0.2 m resolution here.
    client.command_long(mavlink.MAV_CMD_DO_REPOSITION, -1, 1, 0, math.nan, lat_deg, lon_deg,
                        sim.config.origin_alt_amsl_m + 5.0)
    assert wait_until(lambda: math.dist(sim.vehicles[0].position_enu_m, (30, 0, 5)) < 0.3, 5.0)
    # Execute
    ack = client.command_long(mavlink.MAV_CMD_DO_SET_MODE,
                              mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, 4, 5)
    peak = []
    assert wait_until(lambda: peak.append(sim.vehicles[0].position_enu_m[2]) or (
        not sim.vehicles[0].armed), 10.0)
    # Assert
    assert ack.result == mavlink.MAV_RESULT_ACCEPTED
    assert max(peak) == pytest.approx(15.0, abs=0.01)
    assert sim.vehicles[0].position_enu_m == pytest.approx((0.0, 0.0, 0.0), abs=1e-6)
    events = [e['event'] for e in sim.events_of(0)]
    assert events.index('rtl') < events.index('landed') < events.index('disarmed')


def test_event_log_is_written_as_json(start_sim, client_factory, tmp_path):
    sim, _ = start_sim()
    client = client_factory()
    client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    path = tmp_path / 'log.json'
    sim.write_log(path)
    payload = json.loads(path.read_text())
    assert payload['config']['num_vehicles'] == 1
    armed = [e for e in payload['events'] if e['event'] == 'armed']
    assert armed and armed[0]['vehicle'] == 0 and 't_sim_s' in armed[0]
    assert payload['vehicles'][0]['armed'] is True


def test_gps_loss_clears_health_bits_and_denies_arming(start_sim, client_factory):
    # Prepare: inject the failure on the simulator's own thread.
    sim, handle = start_sim()
    client = client_factory()
    handle.call(lambda: setattr(sim.vehicles[0], 'gps_ok', False))
    client.drain()  # drop telemetry sent before the failure
    # Execute
    client.command_long(mavlink.MAV_CMD_REQUEST_MESSAGE, mavlink.MAVLINK_MSG_ID_SYS_STATUS)
    status = client.recv('SYS_STATUS')
    ack = client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    # Assert
    assert not status.onboard_control_sensors_health & mavlink.MAV_SYS_STATUS_SENSOR_GPS
    assert not status.onboard_control_sensors_health & mavlink.MAV_SYS_STATUS_PREARM_CHECK
    assert ack.result == mavlink.MAV_RESULT_TEMPORARILY_REJECTED


def test_random_commands_and_items_never_raise_inside_the_sim(start_sim, client_factory, caplog,
                                                              wait_until):
    # Prepare
    sim, _ = start_sim(time_factor=20.0)
    client = client_factory()
    rng = random.Random(7)
    odd = [0.0, 1.0, -1.0, math.nan, math.inf, -math.inf, 1e30, 21196.0, 4.0, 6.0, 242.0, 2**31]
    commands = [*sim.links[0]._commands, 31999]
    caplog.set_level(logging.ERROR)
    # Execute
    for index in range(600):
        kind = rng.random()
        if kind < 0.5:
            client.mav.command_long_send(1, 1, rng.choice(commands), 0,
                                         *[rng.choice(odd) for _ in range(7)])
        elif kind < 0.7:
            client.mav.command_int_send(1, 1, rng.choice([0, 1, 3, 5, 6, 99]),
                                        rng.choice(commands), 0, 0,
                                        *[rng.choice(odd) for _ in range(4)],
                                        rng.randint(-2**31, 2**31 - 1),
                                        rng.randint(-2**31, 2**31 - 1), rng.choice(odd))
        elif kind < 0.8:
            client.mav.mission_count_send(1, 1, rng.choice([0, 1, 3, 2000]),
                                          rng.choice([0, 1, 2, 5, 255]))
        elif kind < 0.9:
            client.mav.mission_item_int_send(
                1, 1, rng.randint(0, 3), rng.choice([0, 1, 3, 5, 6]),
                rng.choice([16, 17, 19, 20, 21, 22, 178, 177, 31999]), 0, 1,
                *[rng.choice(odd) for _ in range(4)], rng.randint(-2**31, 2**31 - 1),
                rng.randint(-2**31, 2**31 - 1), rng.choice(odd), rng.choice([0, 1, 2]))
        else:
            client.mav.set_position_target_local_ned_send(
                0, 1, 1, rng.choice([1, 7, 8]), rng.randint(0, 4095),
                *[rng.choice(odd) for _ in range(11)])
        if index % 50 == 49:
            # Pace the burst: a full socket buffer would drop datagrams, not test the sim.
            assert wait_until(lambda n=index + 1: sim.links[0].rx_messages >= n, 5.0)
            client.drain()
    client.mav.param_request_read_send(1, 1, b'NAV_ACC_RAD', -1)  # the fuzz never sends this
    answer = client.recv('PARAM_VALUE', lambda m: m.param_id == 'NAV_ACC_RAD')
    # Assert
    assert answer is not None
    assert sim.links[0].rx_messages >= 600
    assert not [r for r in caplog.records if r.name.startswith('fl_uav.autopilot_sim')]
    assert all(math.isfinite(v) for v in sim.vehicles[0].position_enu_m)


def test_link_states_tell_whether_the_client_is_heard_and_the_vehicle_flies(
        start_sim, client_factory, wait_until):
    # Prepare: no client heartbeat yet
    sim, _ = start_sim()
    client = client_factory()
    assert client.recv('HEARTBEAT') is not None
    silent_before = sim.link_states()[0].client_silent_s
    # Execute: the client's heartbeat (MAVSDK sends one a second), then a take-off
    client.mav.heartbeat_send(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0)
    assert wait_until(lambda: sim.link_states()[0].client_silent_s is not None, 3.0)
    _take_off(sim, client, wait_until, altitude_m=5.0)
    state = sim.link_states()[0]
    later = sim.link_states(time.monotonic() + 10.0)[0]
    # Assert: heard just now, and silent 10 s later; armed and in the air
    assert silent_before is None
    assert 0.0 <= state.client_silent_s < 3.0 and later.client_silent_s >= 10.0
    assert state.armed and state.in_air and state.flying


FENCE = mavlink.MAV_MISSION_TYPE_FENCE
POLY_IN = mavlink.MAV_CMD_NAV_FENCE_POLYGON_VERTEX_INCLUSION
CIRCLE_IN = mavlink.MAV_CMD_NAV_FENCE_CIRCLE_INCLUSION
# (command, param1, east_m, north_m): 30 m around vehicle 0's home (0, 0), and a return point
HOME_SQUARE_FENCE = [(POLY_IN, 4.0, -30.0, -30.0), (POLY_IN, 4.0, 30.0, -30.0),
                     (POLY_IN, 4.0, 30.0, 30.0), (POLY_IN, 4.0, -30.0, 30.0),
                     (mavlink.MAV_CMD_NAV_FENCE_RETURN_POINT, 0.0, 0.0, 0.0)]


def _fence_item(client: MavClient, seq: int, command: int, param1: float, east_m: float,
                north_m: float, origin) -> None:
    lat_deg, lon_deg, _ = enu_to_geodetic(origin, east_m, north_m, 0.0)
    client.mav.mission_item_int_send(
        1, 1, seq, mavlink.MAV_FRAME_GLOBAL_INT, command, 0, 1, param1, 0.0, 0.0, 0.0,
        int(round(lat_deg * 1e7)), int(round(lon_deg * 1e7)), 0.0, FENCE)


def _upload_fence(client: MavClient, items: list[tuple], origin) -> object:
    """The mission protocol with mission_type FENCE; returns its MISSION_ACK (None: none)."""
    client.mav.mission_count_send(1, 1, len(items), FENCE)
    while True:
        msg = client.recv(('MISSION_REQUEST_INT', 'MISSION_ACK'),
                          lambda m: m.mission_type == FENCE)
        if msg is None or msg.get_type() == 'MISSION_ACK':
            return msg
        _fence_item(client, msg.seq, *items[msg.seq], origin)


def _download_fence(client: MavClient) -> list:
    client.mav.mission_request_list_send(1, 1, FENCE)
    count = client.recv('MISSION_COUNT', lambda m: m.mission_type == FENCE)
    items = []
    for seq in range(count.count):
        client.mav.mission_request_int_send(1, 1, seq, FENCE)
        items.append(client.recv('MISSION_ITEM_INT', lambda m, s=seq: m.seq == s))
    return items


def _texts(client: MavClient) -> list[str]:
    return [m.text for m in client.received if m.get_type() == 'STATUSTEXT']


def test_a_fence_uploaded_over_mavlink_downloads_as_sent_and_holds_a_vehicle_flying_out(
        start_sim, client_factory, wait_until):
    # Arrange: PX4's default GF_ACTION 2 (Hold)
    sim, _ = start_sim(time_factor=20.0)
    client = client_factory()
    origin = sim.config.origin
    ack = _upload_fence(client, HOME_SQUARE_FENCE, origin)
    downloaded = _download_fence(client)
    _take_off(sim, client, wait_until)
    lat_deg, lon_deg, _ = enu_to_geodetic(origin, 0.0, 80.0, 0.0)
    # Act: a reposition 80 m north, through the fence line at 30 m
    moved = client.command_long(mavlink.MAV_CMD_DO_REPOSITION, -1, 1, 0, math.nan, lat_deg,
                                lon_deg, sim.config.origin_alt_amsl_m + 10.0)
    violation = client.recv('STATUSTEXT', lambda m: m.text == 'Geofence violation',
                            timeout_s=5.0)
    critical = client.recv('HEARTBEAT', lambda m: m.system_status == mavlink.MAV_STATE_CRITICAL,
                           timeout_s=3.0)
    # Assert: the fence as sent; PX4's failsafe Hold reported as HEARTBEAT CRITICAL
    assert ack is not None and ack.type == mavlink.MAV_MISSION_ACCEPTED
    assert [(m.command, m.param1) for m in downloaded] == [i[:2] for i in HOME_SQUARE_FENCE]
    assert all(m.mission_type == FENCE for m in downloaded)
    assert moved.result == mavlink.MAV_RESULT_ACCEPTED
    assert violation is not None and violation.severity == mavlink.MAV_SEVERITY_CRITICAL
    assert critical is not None and critical.custom_mode == HOLD_CUSTOM_MODE
    assert 'Failsafe activated' in _texts(client)
    (breach,) = sim.events_of(0, 'geofence_breach')
    assert breach['action'] == 'hold' and 30.0 < breach['north_m'] < 31.0
    assert wait_until(lambda: math.hypot(*sim.vehicles[0].velocity_enu_m_s) < 1e-3, 3.0)
    assert 30.0 < sim.vehicles[0].position_enu_m[1] < 40.0


@pytest.mark.parametrize(('bad_fence', 'items_requested', 'reason'), [
    # refused as the first item arrives
    ([(POLY_IN, 2.0, 0.0, 0.0), (POLY_IN, 2.0, 10.0, 0.0)], 1, 'vertex count (param1) 2 '),
    # 3 vertices of 4: refused at the end of the upload
    ([(POLY_IN, 4.0, 0.0, 0.0), (POLY_IN, 4.0, 10.0, 0.0), (POLY_IN, 4.0, 10.0, 10.0)], 3,
     'declares 4 vertices but the fence ends after 3'),
    ([(CIRCLE_IN, 0.0, 0.0, 0.0)], 1, 'circle radius (param1) 0 m'),
], ids=['two_vertices', 'polygon_cut_short', 'zero_radius'])
def test_a_malformed_fence_upload_is_refused_with_a_reason_and_the_old_fence_stays(
        start_sim, client_factory, wait_until, bad_fence, items_requested, reason):
    # Arrange
    sim, _ = start_sim()
    client = client_factory()
    origin = sim.config.origin
    assert _upload_fence(client, HOME_SQUARE_FENCE, origin).type == 0
    assert wait_until(lambda: not sim.vehicles[0].fence.is_empty, 3.0)   # stored after the ACK
    old_fence = sim.vehicles[0].fence
    seen_before = len(client.received)
    # Act
    ack = _upload_fence(client, bad_fence, origin)
    requests = [m for m in client.received[seen_before:] if m.get_type() == 'MISSION_REQUEST_INT']
    downloaded = _download_fence(client)
    # Assert: MAV_MISSION_INVALID_PARAM1 for param1 (vertex count, radius), the reason as a
    # STATUSTEXT and in the event log; the previous fence in force and downloaded
    assert ack is not None and ack.type == mavlink.MAV_MISSION_INVALID_PARAM1
    assert len(requests) == items_requested
    assert any(t.startswith('Geofence rejected: item 0: ') for t in _texts(client))
    (rejected,) = sim.events_of(0, 'mission_rejected')
    assert rejected['mission_type'] == FENCE and reason in rejected['reason']
    assert (rejected['seq'], rejected['command']) == (0, bad_fence[0][0])
    assert sim.vehicles[0].fence is old_fence
    assert [(m.command, m.param1) for m in downloaded] == [i[:2] for i in HOME_SQUARE_FENCE]


@pytest.mark.parametrize('clear_type', [FENCE, mavlink.MAV_MISSION_TYPE_ALL])
def test_clearing_the_fence_lifts_it(start_sim, client_factory, clear_type):
    # Arrange: a fence away from home (arming refused there)
    sim, _ = start_sim()
    client = client_factory()
    assert _upload_fence(client, [(CIRCLE_IN, 20.0, 500.0, 0.0)], sim.config.origin).type == 0
    refused = client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    # Act
    client.mav.mission_clear_all_send(1, 1, clear_type)
    cleared = client.recv('MISSION_ACK', lambda m: m.mission_type == clear_type)
    armed = client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    # Assert: (the arm command was handled after the clear, on the simulator's thread)
    assert refused.result == mavlink.MAV_RESULT_TEMPORARILY_REJECTED
    assert cleared.type == mavlink.MAV_MISSION_ACCEPTED
    assert sim.vehicles[0].fence.is_empty and _download_fence(client) == []
    assert armed.result == mavlink.MAV_RESULT_ACCEPTED
    assert [e['event'] for e in sim.events_of(0) if e['event'].startswith('fence_')] == [
        'fence_uploaded', 'fence_cleared']


def test_arming_outside_an_uploaded_fence_is_refused_until_gf_action_is_0(start_sim,
                                                                          client_factory):
    # Arrange: home (0, 0) outside a circle 500 m east
    sim, _ = start_sim()
    client = client_factory()
    assert _upload_fence(client, [(CIRCLE_IN, 20.0, 500.0, 0.0)], sim.config.origin).type == 0
    # Act
    refused = client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    client.mav.param_set_send(1, 1, b'GF_ACTION', 0.0, mavlink.MAV_PARAM_TYPE_REAL32)
    wrong_type = client.recv('PARAM_VALUE', lambda m: m.param_id == 'GF_ACTION')
    client.mav.param_set_send(1, 1, b'GF_ACTION', _int32_as_float(0),
                              mavlink.MAV_PARAM_TYPE_INT32)
    none = client.recv('PARAM_VALUE', lambda m: m.param_id == 'GF_ACTION')
    armed = client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    # Assert: PX4's preflight check text; GF_ACTION is an INT32 (PX4's bytewise encoding): a
    # REAL32 set leaves it at 2, an INT32 one sets it
    assert refused.result == mavlink.MAV_RESULT_TEMPORARILY_REJECTED
    assert 'Preflight Fail: Vehicle outside geofence' in _texts(client)
    assert wrong_type.param_type == none.param_type == mavlink.MAV_PARAM_TYPE_INT32
    assert (_float_as_int32(wrong_type.param_value), _float_as_int32(none.param_value)) == (2, 0)
    assert armed.result == mavlink.MAV_RESULT_ACCEPTED


def _int32_as_float(value: int) -> float:
    return struct.unpack('<f', struct.pack('<i', value))[0]


def _float_as_int32(value: float) -> int:
    return struct.unpack('<i', struct.pack('<f', value))[0]


def test_the_first_client_stays_the_partner_and_a_stray_one_gets_no_telemetry(start_sim,
                                                                               client_factory):
    # Arrange: the drone's client is heard first; a stray client on another port comes later
    sim, _ = start_sim(heartbeat_rate_hz=10.0)
    partner = client_factory()
    partner.mav.heartbeat_send(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0)
    assert partner.recv('HEARTBEAT') is not None
    stray = MavClient(0, partner.vehicle_addr[1])
    try:
        # Act: the stray beats and commands, as a second laptop on the port would
        for _ in range(3):
            stray.mav.heartbeat_send(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0,
                                     0)
        stray.mav.command_long_send(1, 1, 31999, 0, 0, 0, 0, 0, 0, 0, 0)
        # Assert: as PX4, it is heard (its command is answered) but the answer and the
        # telemetry go to the partner only
        assert partner.recv('COMMAND_ACK', lambda m: m.command == 31999) is not None
        assert stray.recv(('HEARTBEAT', 'COMMAND_ACK'), timeout_s=1.0) is None
        assert partner.recv('HEARTBEAT') is not None
        assert sim.links[0].peer == partner.sock.getsockname()
    finally:
        stray.close()


def test_a_vehicle_bound_beyond_localhost_takes_no_partner_in_its_first_3_s(start_sim,
                                                                          client_factory):
    # Arrange: bound to every interface (its configured partner is no localhost address)
    started_s = time.monotonic()
    sim, _ = start_sim(host='0.0.0.0')
    client = client_factory()
    # Act: a command every 0.2 s until one is answered
    ack = None
    while ack is None and time.monotonic() - started_s < 8.0:
        ack = client.command_long(31999, 1.0, timeout_s=0.2)
    answered_s = time.monotonic() - started_s
    # Assert: as PX4, nothing is handled until 3 s after its start; then the first sender
    # is the partner
    assert ack is not None and ack.result == mavlink.MAV_RESULT_UNSUPPORTED
    assert 3.0 <= answered_s < 5.0, answered_s
    assert sim.links[0].partner_latched
