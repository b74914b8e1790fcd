"""MavsdkVehicle driving the embedded PX4 simulator through the unmodified MAVSDK 4.x client."""

import asyncio
import logging
import math
import time
import types
from types import SimpleNamespace

import mavsdk
import pytest

from fl_uav.autopilot_sim.autopilot import AutopilotSim, AutopilotSimThread
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.autopilot_sim.flight import FlightMode
from fl_uav.vehicle.interface import (
    AutopilotFence,
    FenceCircle,
    FencePolygon,
    MissionProgress,
    PoseEnu,
    Vehicle,
    VehicleError,
    WaypointEnu,
)
from fl_uav.vehicle.mavsdk_vehicle import (
    STATUS_TEXT_RECENT_S,
    MavsdkVehicle,
    RepeatCollapser,
    StatusText,
    _Telemetry,
    log_mavsdk_line,
    recent_status_texts,
)
from fl_uav.world.geo import GeoOrigin

TIME_FACTOR = 10.0


@pytest.fixture
def sim_factory(port_base):
    """Start a simulator in a thread on free ports; stopped after the test."""
    handles = []

    def _start(**overrides) -> tuple[AutopilotSim, AutopilotSimThread]:
        settings = {'num_vehicles': 1, 'remote_base_port': port_base,
                    'bind_base_port': port_base + 1000, 'time_factor': TIME_FACTOR,
                    'rtl_return_alt_m': 15.0, 'heartbeat_rate_hz': 2.0, **overrides}
        sim = AutopilotSim(AutopilotSimConfig(**settings))
        handles.append(sim.run_in_thread())
        return sim, handles[-1]

    yield _start
    for handle in handles:
        handle.stop()


def _url(sim: AutopilotSim, index: int) -> str:
    return f'udpin://127.0.0.1:{sim.config.remote_base_port + index}'


async def _first(stream, predicate=lambda _: True, timeout_s: float = 5.0):
    async def _take():
        async for item in stream:
            if predicate(item):
                return item
    try:
        return await asyncio.wait_for(_take(), timeout_s)
    finally:
        await stream.aclose()


async def _until(predicate, poll_s: float = 0.02) -> None:
    while not predicate():
        await asyncio.sleep(poll_s)


@pytest.mark.timeout(60)
def test_full_flight_connect_to_landing(sim_factory):
    # Prepare
    sim, _ = sim_factory()
    truth = sim.vehicles[0]
    waypoints = [WaypointEnu(40.0, 30.0, 10.0), WaypointEnu(40.0, -10.0, 15.0),
                 WaypointEnu(-10.0, -20.0, 12.0)]
    progress: list[MissionProgress] = []
    return_alt_m = takeoff_alt_m = None

    async def scenario():
        vehicle = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        assert isinstance(vehicle, Vehicle)
        try:
            await vehicle.connect(timeout_s=15.0)
            home = vehicle.home_enu_m
            nonlocal return_alt_m
            return_alt_m = vehicle.rtl_return_alt_m
            await vehicle.arm()
            await vehicle.takeoff(10.0)
            at_altitude = truth.position_enu_m
            await vehicle.goto_enu(WaypointEnu(20.0, 30.0, 12.0), speed_m_s=8.0)
            after_goto = truth.position_enu_m
            pose = await _first(vehicle.poses())
            battery = await _first(vehicle.batteries())
            reached = await vehicle.fly_waypoints(waypoints, speed_m_s=10.0,
                                                  on_progress=progress.append)
            after_mission = truth.position_enu_m
            await vehicle.return_to_launch()
            return home, at_altitude, after_goto, pose, battery, reached, after_mission
        finally:
            nonlocal takeoff_alt_m
            takeoff_alt_m = truth.params['MIS_TAKEOFF_ALT']
            await vehicle.close()

    # Execute
    home, at_altitude, after_goto, pose, battery, reached, after_mission = asyncio.run(scenario())
    # Assert
    assert home == pytest.approx((0.0, 0.0, 0.0), abs=0.01)
    assert return_alt_m == pytest.approx(15.0)       # the simulator's RTL_RETURN_ALT
    # MIS_TAKEOFF_ALT set for the take-off, and put back to the simulator's 2.5 m by close()
    assert takeoff_alt_m == pytest.approx(10.0, abs=1e-3)
    assert truth.params['MIS_TAKEOFF_ALT'] == pytest.approx(2.5)
    assert at_altitude[2] == pytest.approx(10.0, abs=0.5)
    assert math.dist(after_goto, (20.0, 30.0, 12.0)) < 1.0
    assert math.dist((pose.east_m, pose.north_m, pose.up_m), (20.0, 30.0, 12.0)) < 1.0
    assert -math.pi <= pose.yaw_rad <= math.pi
    assert 0.9 < battery.remaining_fraction <= 1.0 and battery.voltage_v > 14.0
    assert reached == 3
    assert progress[-1] == MissionProgress(3, 3)
    assert [p.current for p in progress] == sorted(p.current for p in progress)
    assert math.dist(after_mission, (-10.0, -20.0, 12.0)) < 1.0
    # 3 waypoints are 6 MAVLink items (NAV_WAYPOINT + DO_CHANGE_SPEED each).
    assert len(truth.mission_items_reached) == 6
    assert not truth.armed and truth.position_enu_m == pytest.approx((0.0, 0.0, 0.0), abs=0.01)
    events = [e['event'] for e in sim.events_of(0)]
    for earlier, later in [('armed', 'takeoff'), ('takeoff', 'mission_uploaded'),
                           ('mission_uploaded', 'mission_complete'), ('mission_complete', 'rtl'),
                           ('rtl', 'landed'), ('landed', 'disarmed')]:
        assert events.index(earlier) < events.index(later), (earlier, later)


@pytest.mark.timeout(60)
def test_three_vehicles_fly_missions_at_once(sim_factory):
    # Prepare
    sim, _ = sim_factory(num_vehicles=3)

    async def fly(index: int) -> tuple[int, tuple[float, float, float]]:
        vehicle = MavsdkVehicle(_url(sim, index), sim.config.origin)
        try:
            await vehicle.connect(timeout_s=15.0)
            home_e, home_n, _ = vehicle.home_enu_m
            await vehicle.arm()
            await vehicle.takeoff(8.0)
            reached = await vehicle.fly_waypoints(
                [WaypointEnu(home_e, home_n + 30.0, 8.0), WaypointEnu(home_e + 5.0, home_n, 8.0)],
                speed_m_s=10.0)
            await vehicle.land()
            return reached, sim.vehicles[index].position_enu_m
        finally:
            await vehicle.close()

    async def fly_all():
        return await asyncio.gather(*(fly(i) for i in range(3)))

    # Execute
    results = asyncio.run(fly_all())
    # Assert
    for index, (reached, position) in enumerate(results):
        home_e, home_n = sim.config.home_enu_m(index)
        assert reached == 2
        assert position == pytest.approx((home_e + 5.0, home_n, 0.0), abs=0.5)
        assert not sim.vehicles[index].armed


@pytest.mark.timeout(30)
def test_connect_times_out_with_a_clear_error(port_base):
    async def connect():
        vehicle = MavsdkVehicle(f'udpin://127.0.0.1:{port_base}', GeoOrigin())
        try:
            await vehicle.connect(timeout_s=1.0)
        finally:
            await vehicle.close()

    with pytest.raises(VehicleError, match='no autopilot heartbeat within 1.0 s'):
        asyncio.run(connect())


@pytest.mark.timeout(30)
def test_refusals_and_interruptions_raise_vehicle_errors(sim_factory):
    # Prepare: vehicle 0 has a low battery; vehicle 1 is fine.
    sim, handle = sim_factory(num_vehicles=2)
    handle.call(lambda: setattr(sim.vehicles[0].battery, 'energy_wh',
                                0.1 * sim.config.battery_capacity_wh))

    async def scenario():
        low = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        good = MavsdkVehicle(_url(sim, 1), sim.config.origin)
        try:
            await asyncio.gather(low.connect(15.0), good.connect(15.0))
            with pytest.raises(VehicleError, match='arm refused.*COMMAND_DENIED'):
                await low.arm()
            await good.arm()
            await good.takeoff(5.0)
            mission = asyncio.ensure_future(good.fly_waypoints(
                [WaypointEnu(10.0, 300.0, 5.0)], speed_m_s=5.0))
            await asyncio.wait_for(_until(lambda: sim.vehicles[1].mode.value == 'mission'),
                                   10.0)
            handle.call(sim.vehicles[1].return_to_launch)
            with pytest.raises(VehicleError, match='mission interrupted'):
                await mission
        finally:
            await asyncio.gather(low.close(), good.close())

    # Execute / Assert
    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_connect_reads_the_landing_parameters_and_arm_leaves_land_for_hold(sim_factory):
    # Arrange: PX4's RTL_LAND_DELAY and COM_DISARM_LAND set on the autopilot, and Land
    # selected on the ground (PX4 refuses to arm in it; MAVSDK's arm leaves only Mission and
    # Return for Hold by itself)
    sim, handle = sim_factory()
    truth = sim.vehicles[0]
    handle.call(lambda: (truth.params.set('RTL_LAND_DELAY', 3.5),
                         truth.params.set('COM_DISARM_LAND', 1.5),
                         truth.params.set('GF_ACTION', 3.0),
                         truth.set_mode(FlightMode.LAND)))

    async def scenario():
        vehicle = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        try:
            # Act
            await vehicle.connect(timeout_s=15.0)
            read = (vehicle.rtl_return_alt_m, vehicle.rtl_land_delay_s, vehicle.disarm_land_s,
                    vehicle.geofence_action)
            await vehicle.arm()
            return read
        finally:
            await vehicle.close()

    read = asyncio.run(scenario())
    # Assert: the four parameters read over MAVLink (GF_ACTION an INT32, as PX4 sends it);
    # armed, in Hold
    assert read == pytest.approx((15.0, 3.5, 1.5, 3))
    assert type(read[3]) is int
    assert truth.armed and truth.mode == FlightMode.HOLD


@pytest.mark.parametrize('return_alt_m, land_delay_s, disarm_s, expected_s', [
    (None, None, None, 30.0 + 2.0 * 100.0 / 5.0 + 2.0 * 50.0 + 2.0 * 60.0 / 0.5 + 4.0),
    (20.0, 0.0, 2.0, 30.0 + 2.0 * 100.0 / 5.0 + 2.0 * 10.0 + 2.0 * 20.0 / 0.5 + 4.0),
    (20.0, 30.0, 5.0, 30.0 + 2.0 * 100.0 / 5.0 + 2.0 * 10.0 + 2.0 * 20.0 / 0.5 + 60.0 + 10.0),
    (5.0, -1.0, 0.0, 30.0 + 2.0 * 100.0 / 5.0 + 2.0 * 10.0 / 0.5)])
def test_the_return_timeout_covers_the_return_altitude_the_land_delay_and_the_disarm(
        return_alt_m, land_delay_s, disarm_s, expected_s):
    # Arrange: 100 m from home, 10 m above it; PX4's parameters as read (None: unknown, PX4's
    # defaults: 60 m, 0 s, 2 s)
    vehicle = MavsdkVehicle('udpin://127.0.0.1:1', GeoOrigin())
    vehicle.rtl_return_alt_m, vehicle.rtl_land_delay_s = return_alt_m, land_delay_s
    vehicle.disarm_land_s = disarm_s
    # Act
    timeout_s = vehicle.return_timeout_s(100.0, 10.0)
    # Assert: twice each part (the climb at 1 m/s, the descent at 0.5 m/s), plus a margin
    assert timeout_s == pytest.approx(expected_s)


def _messages(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == 'fl_uav.vehicle.mavsdk_vehicle' and r.levelno == level]


@pytest.mark.timeout(60)
def test_autopilot_status_texts_and_mode_changes_are_logged_and_explain_a_refusal(
        sim_factory, caplog):
    # Arrange: a vehicle whose battery is too low to arm
    sim, handle = sim_factory()
    truth = sim.vehicles[0]
    capacity_wh = sim.config.battery_capacity_wh
    handle.call(lambda: setattr(truth.battery, 'energy_wh', 0.1 * capacity_wh))
    url = _url(sim, 0)

    async def scenario():
        vehicle = MavsdkVehicle(url, sim.config.origin)
        try:
            await vehicle.connect(timeout_s=15.0)
            # Act (a): arming is refused
            with pytest.raises(VehicleError) as refused:
                await vehicle.arm()
            # Act (b): charged, it flies; then its battery falls below BAT_CRIT_THR in the air
            handle.call(lambda: setattr(truth.battery, 'energy_wh', capacity_wh))
            await vehicle.arm()
            await vehicle.takeoff(5.0)
            # takeoff() returns within its altitude tolerance, before PX4 (and the simulator)
            # ends the take-off in Hold: the failsafe below must start from Hold
            await vehicle._wait_for(lambda t: t.flight_mode == 'HOLD', 10.0, 'Hold')
            handle.call(lambda: setattr(truth.battery, 'energy_wh', 0.06 * capacity_wh))
            await vehicle._wait_for(lambda t: t.flight_mode == 'RETURN_TO_LAUNCH', 10.0,
                                    'the battery failsafe')
            await vehicle._wait_for(lambda t: any('Failsafe' in s.text
                                                  for s in t.status_texts), 5.0, 'its text')
            return str(refused.value)
        finally:
            await vehicle.close()

    # Act
    with caplog.at_level(logging.INFO, logger='fl_uav.vehicle.mavsdk_vehicle'):
        refusal = asyncio.run(scenario())
    # Assert: the refusal names the failed check PX4 reports before its generic denial, not
    # only COMMAND_DENIED or "Resolve system health failures first"
    assert refusal == (f'{url}: arm refused by the autopilot: COMMAND_DENIED (autopilot: '
                       '"Preflight Fail: low battery"; '
                       '"Arming denied: Resolve system health failures first")'), refusal
    # ... and every status text is in the log with the URL, PX4's CRITICAL as ERROR
    errors = _messages(caplog, logging.ERROR)
    for text in ('Arming denied: Resolve system health failures first', 'Critical battery',
                 'Failsafe activated'):
        assert f'{url}: autopilot says: {text} (CRITICAL)' in errors, errors
    assert f'{url}: autopilot says: Preflight Fail: low battery (EMERGENCY)' in _messages(
        caplog, logging.CRITICAL)
    infos = _messages(caplog, logging.INFO)
    assert f'{url}: flight mode HOLD -> TAKEOFF' in infos, infos
    assert f'{url}: flight mode HOLD -> RETURN_TO_LAUNCH' in infos, infos


def test_a_refusal_quotes_only_recent_warnings_or_worse_oldest_first():
    # Arrange: status texts of one vehicle (received_s on the monotonic clock): PX4 refuses an
    # arm with the failed check's text, then its generic denial
    old = StatusText(10.0, 'CRITICAL', 'Preflight Fail: GPS fix too low')
    check = StatusText(19.9, 'EMERGENCY', 'Preflight Fail: low battery')
    denial = StatusText(20.0, 'CRITICAL', 'Arming denied: Resolve system health failures first')
    chatter = StatusText(20.5, 'INFO', 'Takeoff detected')
    again = StatusText(20.6, 'CRITICAL', 'Arming denied: Resolve system health failures first')
    # Act / Assert: every warning within STATUS_TEXT_RECENT_S, oldest first, past INFO chatter
    assert recent_status_texts([old, check, denial, chatter], 21.0) == [check, denial]
    assert recent_status_texts([old, check, denial, again], 21.0) == [check, again]
    assert recent_status_texts([old, denial], 20.0 + STATUS_TEXT_RECENT_S + 0.1) == []
    assert recent_status_texts([chatter], 21.0) == []
    assert recent_status_texts([], 21.0) == []


def test_a_repeated_mavsdk_line_is_logged_once_per_interval_with_the_count(caplog):
    # Arrange: a fake clock; MAVSDK repeats a line 50 times within a second
    now = [100.0]
    repeats = RepeatCollapser(interval_s=10.0, clock=lambda: now[0])
    # Act
    with caplog.at_level(logging.DEBUG, logger='mavsdk'):
        for _ in range(50):
            log_mavsdk_line(mavsdk.LogLevel.ERROR, 'Sending message failed', repeats)
            now[0] += 0.02
        log_mavsdk_line(mavsdk.LogLevel.WARN, 'heartbeats timed out', repeats)
        now[0] += 10.0
        log_mavsdk_line(mavsdk.LogLevel.ERROR, 'Sending message failed', repeats)
    # Assert: the first, another line, then one more with how many were left out
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == 'mavsdk']
    assert lines == [
        (logging.ERROR, 'Sending message failed'),
        (logging.WARNING, 'heartbeats timed out'),
        (logging.ERROR, 'Sending message failed (repeated 49 more times in between)')]


def test_operations_before_connect_raise():
    vehicle = MavsdkVehicle('udpin://127.0.0.1:14999', GeoOrigin())
    with pytest.raises(VehicleError, match='not connected'):
        asyncio.run(vehicle.arm())
    with pytest.raises(ValueError, match='url'):
        MavsdkVehicle('127.0.0.1:14540', GeoOrigin())


def _cut_link(link) -> None:
    """Radio silence both ways (run on the simulator's loop): the autopilot flies on."""
    link.send_datagram = lambda data: None
    link.datagram_received = lambda data, addr: None


def _restore_link(link) -> None:
    del link.send_datagram
    del link.datagram_received


@pytest.mark.timeout(60)
def test_a_lost_link_fails_the_step_in_progress_and_telemetry_resumes_when_it_returns(
        sim_factory, caplog):
    # Prepare: airborne, a pose stream open, then a go-to far away (minutes of time-out).
    sim, handle = sim_factory()
    link = sim.links[0]

    async def scenario():
        vehicle = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        try:
            await vehicle.connect(timeout_s=15.0)
            await vehicle.arm()
            await vehicle.takeoff(5.0)
            poses = vehicle.poses()
            await asyncio.wait_for(anext(poses), 5.0)
            goto = asyncio.ensure_future(vehicle.goto_enu(WaypointEnu(0.0, 2000.0, 5.0), 5.0))
            await asyncio.wait_for(_until(lambda: sim.vehicles[0].position_enu_m[1] > 20.0),
                                   10.0)
            handle.call(lambda: _cut_link(link))
            # Execute (a): the step fails once MAVSDK declares the heartbeats lost (3 s).
            with pytest.raises(VehicleError, match='go-to .*autopilot link lost'):
                await asyncio.wait_for(goto, 10.0)
            with pytest.raises(VehicleError, match='arm: autopilot link lost'):
                await vehicle.arm()
            losses = vehicle.link_losses
            handle.call(lambda: _restore_link(link))
            restored_s = time.time()
            # Execute (b): the stream opened before the loss delivers again, and the
            # readiness check passes once heartbeats, health and home are back.
            resumed = await _first(poses, lambda pose: pose.stamp_s > restored_s, 10.0)
            await vehicle.connect(timeout_s=10.0)
            await vehicle.goto_enu(WaypointEnu(5.0, 5.0, 6.0), speed_m_s=5.0)
            return losses, resumed, vehicle.link_losses, vehicle.in_air
        finally:
            await vehicle.close()

    # Execute
    with caplog.at_level(logging.INFO, logger='fl_uav.vehicle.mavsdk_vehicle'):
        losses, resumed, losses_after, in_air = asyncio.run(scenario())
    # Assert
    assert losses == 1 and losses_after == 1 and in_air is True
    assert resumed.up_m > 4.0
    assert math.dist(sim.vehicles[0].position_enu_m, (5.0, 5.0, 6.0)) < 1.5
    lost = [r.getMessage() for r in caplog.records if 'link lost' in r.getMessage()
            and r.levelno == logging.WARNING]
    assert lost == [f'{_url(sim, 0)}: autopilot link lost'], lost
    assert any('link re-established' in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(30)
def test_a_timeout_with_a_live_link_does_not_blame_the_link(sim_factory):
    # Prepare: connected, the link never lost; a climb to 20 m cannot take 0.2 s.
    sim, _ = sim_factory()

    async def scenario():
        vehicle = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        try:
            await vehicle.connect(timeout_s=15.0)
            await vehicle.arm()
            with pytest.raises(VehicleError) as error:
                await vehicle.takeoff(20.0, timeout_s=0.2)
            return str(error.value), vehicle.link_losses
        finally:
            await vehicle.close()

    # Execute
    message, losses = asyncio.run(scenario())
    # Assert
    assert 'timed out' in message and 'link lost' not in message and losses == 0


@pytest.mark.timeout(60)
def test_a_vehicle_connecting_to_an_autopilot_in_flight_knows_it_is_armed_in_the_air(
        sim_factory):
    # Arrange: one client took off and went away (the drone's process restarted in flight)
    sim, _ = sim_factory()

    async def scenario():
        first = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        try:
            await first.connect(timeout_s=15.0)
            await first.arm()
            await first.takeoff(8.0)
        finally:
            await first.close()
        # Act: a new client connects
        second = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        try:
            await second.connect(timeout_s=15.0)
            return second.armed, second.in_air
        finally:
            await second.close()

    # Assert: once connect returns, the armed and in-air states are known (the pilot then
    # flies on instead of arming and taking off in the air)
    assert asyncio.run(scenario()) == (True, True)


@pytest.mark.parametrize('armed, in_air, ready', [
    (None, None, False), (True, None, False), (None, False, False), (True, True, True),
    (False, False, True)])
def test_connect_waits_for_the_armed_and_in_air_states(armed, in_air, ready):
    # Arrange: everything else a connect waits for has arrived
    t = _Telemetry()
    t.connected, t.health_ok = True, True
    t.home_geodetic = (47.0, 8.0, 400.0)
    t.pose = object()
    t.armed, t.in_air = armed, in_air
    # Act / Assert
    assert MavsdkVehicle._ready(t) is ready


def test_odd_position_and_home_telemetry_is_refused_and_counted():
    # Arrange: a vehicle's telemetry handlers, fed what a broken autopilot could send
    # (MAVLink's int32 degE7 reaches ±214.7°: finite, so nothing downstream would notice)
    vehicle = MavsdkVehicle('udpin://127.0.0.1:1', GeoOrigin(47.0, 8.0, 400.0))
    vehicle._t = _Telemetry()
    good = SimpleNamespace(latitude_deg=47.0001, longitude_deg=8.0001, absolute_altitude_m=430.0,
                           relative_altitude_m=30.0)
    odd_place = [dict(latitude_deg=math.nan), dict(longitude_deg=math.inf),
                 dict(latitude_deg=95.0), dict(latitude_deg=-214.7), dict(longitude_deg=200.0)]
    odd_home = [*odd_place, dict(absolute_altitude_m=math.nan)]
    # Act
    vehicle._on_position(good)
    vehicle._on_home(good)
    kept_pose, kept_home = vehicle._t.pose, vehicle._t.home_geodetic
    for change in odd_place:
        vehicle._on_position(SimpleNamespace(**{**vars(good), **change}))
    for change in odd_home:
        vehicle._on_home(SimpleNamespace(**{**vars(good), **change}))
    # Assert: the last good pose and home stay; every refusal is counted
    assert vehicle._t.pose is kept_pose and vehicle._t.home_geodetic == kept_home
    assert vehicle.telemetry_rejected == {'position': len(odd_place), 'home': len(odd_home)}


def test_a_nan_altitude_still_reaches_the_pose_the_agent_refuses_to_label():
    # Arrange: an autopilot's NaN altitude is passed on (the frames of that moment are not
    # labelled, DroneAgent.on_camera_frame), not replaced by an older good pose
    vehicle = MavsdkVehicle('udpin://127.0.0.1:1', GeoOrigin(47.0, 8.0, 400.0))
    vehicle._t = _Telemetry()
    # Act
    vehicle._on_position(SimpleNamespace(latitude_deg=47.0, longitude_deg=8.0,
                                         absolute_altitude_m=math.nan,
                                         relative_altitude_m=math.nan))
    # Assert
    assert math.isnan(vehicle._t.pose.up_m) and not vehicle.telemetry_rejected


def test_no_home_yet_at_connect_is_waited_for_not_refused(caplog):
    # Arrange: MAVSDK's home getter answers all-NaN until PX4 has a home (its first GPS fix),
    # here for the first 12 polls, as at every connect before the HOME_POSITION arrives
    vehicle = MavsdkVehicle('udpin://127.0.0.1:1', GeoOrigin(47.0, 8.0, 400.0))
    vehicle._t = _Telemetry()
    unset = SimpleNamespace(latitude_deg=math.nan, longitude_deg=math.nan,
                            absolute_altitude_m=math.nan, relative_altitude_m=math.nan)
    home = SimpleNamespace(latitude_deg=47.0, longitude_deg=8.0, absolute_altitude_m=400.0,
                           relative_altitude_m=0.0)
    answers = [unset] * 12 + [home]

    async def _home():
        return answers.pop(0) if len(answers) > 1 else answers[0]

    async def _health_all_ok():
        return True

    vehicle._telemetry = SimpleNamespace(home=_home, health_all_ok=_health_all_ok)
    # Act
    with caplog.at_level(logging.WARNING, logger='fl_uav.vehicle.mavsdk_vehicle'):
        asyncio.run(asyncio.wait_for(vehicle._seed_from_getters(period_s=0.0), 5.0))
    # Assert: the home is taken once known; nothing was refused, counted or logged
    assert vehicle._t.home_geodetic == (47.0, 8.0, 400.0)
    assert not vehicle.telemetry_rejected
    assert not _messages(caplog, logging.WARNING)


def test_mis_takeoff_alt_is_read_once_so_a_failed_read_never_records_our_own_value():
    # Arrange: a vehicle whose MAVSDK calls are stubbed; the first MIS_TAKEOFF_ALT read fails
    # (None), a later one would read the 10 m the first take-off set
    vehicle = MavsdkVehicle('udpin://127.0.0.1:1', GeoOrigin())
    answers = [None, 10.0]
    reads: list[str] = []

    async def read_param(name, _make_call, _unchecked):
        reads.append(name)
        return answers.pop(0)

    async def nothing(*_args, **_kwargs):
        return None

    vehicle._read_param = read_param
    vehicle._call = vehicle._wait_for = nothing
    vehicle._action = types.SimpleNamespace(get_takeoff_altitude=None)
    vehicle._home_up_m = lambda: 0.0
    vehicle._pose = lambda: PoseEnu(0.0, 0.0, 10.0, 0.0, 0.0)

    async def two_takeoffs():
        await vehicle.takeoff(10.0)
        await vehicle.takeoff(10.0)

    # Act
    asyncio.run(two_takeoffs())
    # Assert: read once; close() has nothing to put back rather than our own 10 m as PX4's
    assert reads == ['MIS_TAKEOFF_ALT']
    assert vehicle._takeoff_alt_found_m is None


def _lose_offboard(truth) -> None:
    """On the sim's loop: Offboard with one set-point, then none (PX4's offboard-loss Hold)."""
    truth.offboard_setpoint(time.monotonic(), velocity_enu_m_s=None)
    assert truth.set_mode(FlightMode.OFFBOARD, time.monotonic()).name == 'ACCEPTED'


@pytest.mark.timeout(60)
def test_a_failsafe_hold_is_read_from_the_heartbeat_system_status(sim_factory):
    # Arrange: in the air, no failsafe
    sim, handle = sim_factory()
    truth = sim.vehicles[0]
    seen = {}

    async def scenario():
        vehicle = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        seen['before connect'] = vehicle.failsafe
        try:
            await vehicle.connect(timeout_s=15.0)
            await vehicle.arm()
            await vehicle.takeoff(8.0)
            await asyncio.wait_for(_until(lambda: vehicle.system_status == 'ACTIVE'), 5.0)
            seen['flying'] = (vehicle.failsafe, vehicle.system_status)
            # Act: the offboard set-points stop: PX4's failsafe puts the vehicle in Hold
            handle.call(lambda: _lose_offboard(truth))
            await asyncio.wait_for(_until(lambda: vehicle.failsafe is True), 10.0)
            seen['failsafe'] = (vehicle.system_status, vehicle.flight_mode)
            # the operator switches it to Hold: PX4 clears its failsafe (a user takeover)
            handle.call(lambda: truth.set_mode(FlightMode.HOLD, time.monotonic()))
            await asyncio.wait_for(_until(lambda: vehicle.failsafe is False), 5.0)
            seen['handed back'] = (vehicle.system_status, vehicle.flight_mode)
        finally:
            await vehicle.close()

    asyncio.run(scenario())
    # Assert
    assert seen == {'before connect': None, 'flying': (False, 'ACTIVE'),
                    'failsafe': ('CRITICAL', 'HOLD'), 'handed back': ('ACTIVE', 'HOLD')}


def test_heartbeats_of_other_components_or_unreadable_ones_leave_the_status_as_it_was(caplog):
    # Arrange
    vehicle = MavsdkVehicle('udpin://127.0.0.1:14540', GeoOrigin(), forward_log=False)
    vehicle._t = _Telemetry()

    def heartbeat(component_id: int, fields_json: str):
        return SimpleNamespace(component_id=component_id, fields_json=fields_json)

    # Act
    vehicle._on_heartbeat(heartbeat(1, '{"system_status": 5}'))
    critical = (vehicle.system_status, vehicle.failsafe)
    vehicle._on_heartbeat(heartbeat(100, '{"system_status": 4}'))     # a camera
    vehicle._on_heartbeat(heartbeat(1, '{"system_status": '))         # cut short
    vehicle._on_heartbeat(heartbeat(1, '{"type": 2}'))                # no system_status
    # Assert
    assert critical == ('CRITICAL', True)
    assert (vehicle.system_status, vehicle.failsafe) == ('CRITICAL', True)
    assert caplog.text.count('HEARTBEAT without a readable system_status') == 2


@pytest.mark.timeout(60)
def test_a_fence_uploaded_is_read_back_in_enu_and_an_empty_one_clears_it(sim_factory):
    # Arrange: a polygon and a no-fly circle, ENU metres around the simulated home
    sim, _ = sim_factory()
    fence = AutopilotFence(
        polygons=(FencePolygon(((-50.0, -40.0), (60.0, -40.0), (60.0, 70.0), (-50.0, 70.0)),
                               inclusion=True),),
        circles=(FenceCircle((20.0, 10.0), 15.0, inclusion=False),))

    async def scenario():
        vehicle = MavsdkVehicle(_url(sim, 0), sim.config.origin)
        try:
            await vehicle.connect(timeout_s=15.0)
            before = await vehicle.download_fence()
            # Act
            await vehicle.upload_fence(fence)
            read = await vehicle.download_fence()
            await vehicle.upload_fence(AutopilotFence())
            cleared = await vehicle.download_fence()
            return before, read, cleared
        finally:
            await vehicle.close()

    before, read, cleared = asyncio.run(scenario())
    # Assert: MAVLink's 1e-7 degrees bring the corners back within centimetres
    assert before.empty and cleared.empty
    (polygon,) = read.polygons
    (circle,) = read.circles
    assert polygon.inclusion and not circle.inclusion
    for corner, sent in zip(polygon.corners_en_m, fence.polygons[0].corners_en_m, strict=True):
        assert corner == pytest.approx(sent, abs=0.05)
    assert circle.center_en_m == pytest.approx((20.0, 10.0), abs=0.05)
    assert circle.radius_m == pytest.approx(15.0)
