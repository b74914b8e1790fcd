"""A drone's status for the operator (/diagnostics): levels, message and values."""

from __future__ import annotations

import asyncio
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from fl_uav.fleet.config import FlightConfig, StatusConfig
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.drone_status import ERROR, OK, WARN, drone_status
from fl_uav.fleet.messages import RoundTask
from fl_uav.fleet.round_gate import RoundGate
from fl_uav.fleet.station_heartbeat import Heartbeat
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.geofence import Geofence
from fl_uav.vehicle.fake_vehicle import FakeVehicle
from fl_uav.vehicle.interface import BatteryStatus

FENCE = Geofence(0.0, 0.0, 400.0, 400.0, min_up_m=5.0, max_up_m=120.0)
CONFIG = StatusConfig(battery_warn_fraction=0.3, battery_error_fraction=0.15)


class _Agent:
    """What the status reads of a DroneAgent."""

    buffered_samples = 42
    rounds_trained = 2
    waypoints_reached = 7
    uploads_rolled_back = 0
    rounds_dropped = 1
    rounds_capped = 3
    rounds_stopped_at_deadline = 4
    frames_unlabelled = 5

    def __init__(self) -> None:
        self.rejected_reasons: Counter[str] = Counter()
        self.knobs_rejected: Counter[str] = Counter()
        self.camera_frames_rejected: Counter[str] = Counter()

    def begin_flight(self, run_epoch: int) -> None:
        pass


TRAIN_POOL = ThreadPoolExecutor(1)     # one for the module's pilots (never shut down: cheap)


def _pilot(connected: bool = True) -> DronePilot:
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    pilot = DronePilot(_Agent(), vehicle, FlightConfig(), TRAIN_POOL, geofence=FENCE)
    if connected:
        asyncio.run(pilot.ensure_connected())
    return pilot


def _gate(round_index: int) -> RoundGate:
    gate = RoundGate(10)
    if round_index:
        gate.admit_round(round_index, 10, 'a1b2', 1)
    return gate


def _values(report) -> dict[str, str]:
    return dict(report.values)


def test_a_connected_drone_between_rounds_is_ok_with_its_numbers():
    # Arrange
    pilot = _pilot()
    # Act
    report = drone_status(3, pilot, pilot.agent, _gate(2), BatteryStatus(0.8, 15.9), CONFIG)
    # Assert
    values = _values(report)
    assert (report.name, report.hardware_id, report.level) == ('fl_uav: uav3', 'uav3', OK)
    assert report.message == 'round 2 waiting'
    assert values['autopilot_link'] == 'up' and values['battery_percent'] == '80'
    assert values['run_id'] == 'a1b2' and values['buffered_samples'] == '42'
    assert values['armed'] == 'false' and values['last_error'] == 'none'
    assert (values['rounds_dropped'], values['rounds_capped'],
            values['rounds_stopped_at_deadline']) == ('1', '3', '4')
    assert values['frames_unlabelled'] == '5'


def test_rejected_frames_camera_messages_and_telemetry_are_counted_by_reason():
    # Arrange: what the drone counts for bad station frames, camera messages and telemetry
    pilot = _pilot()
    pilot.agent.rejected_reasons.update({'crc': 2, 'nonfinite': 1})
    pilot.agent.camera_frames_rejected.update({'size': 3, 'encoding': 1, 'decode': 2})
    pilot.vehicle.telemetry_rejected.update({'position': 2})
    # Act
    values = _values(drone_status(0, pilot, pilot.agent, _gate(1), None, CONFIG))
    # Assert
    assert values['global_frames_rejected'] == 'crc=2, nonfinite=1'
    assert values['camera_frames_rejected'] == 'decode=2, encoding=1, size=3'
    assert values['telemetry_rejected'] == 'position=2'


def test_mavlink_signing_says_off_on_and_what_the_relay_dropped():
    # Arrange: an unsigned link, a signed one not connected yet, and one whose relay dropped
    # frames from someone else on the link
    pilot = _pilot()
    unsigned = _values(drone_status(0, pilot, pilot.agent, _gate(1), None, CONFIG))
    pilot.vehicle.signs_link = True
    before_connect = _values(drone_status(0, pilot, pilot.agent, _gate(1), None, CONFIG))
    pilot.vehicle.signing_relay = SimpleNamespace(dropped=Counter(unsigned=3,
                                                                  bad_signature=1))
    # Act
    dropped = _values(drone_status(0, pilot, pilot.agent, _gate(1), None, CONFIG))
    # Assert
    assert unsigned['mavlink_signing'] == 'off' and before_connect['mavlink_signing'] == 'on'
    assert dropped['mavlink_signing'] == 'on; dropped: bad_signature=1, unsigned=3'


def test_no_link_yet_warns_and_a_lost_link_is_an_error():
    # Arrange
    never = _pilot(connected=False)
    lost = _pilot()
    lost.vehicle.connected = False
    lost.vehicle.link_losses = 1
    # Act
    before = drone_status(0, never, never.agent, _gate(0), None, CONFIG)
    after = drone_status(0, lost, lost.agent, _gate(1), None, CONFIG)
    # Assert
    assert before.level == WARN and before.message.startswith('no autopilot link yet')
    assert _values(before)['battery_percent'] == 'unknown'
    assert after.level == ERROR
    assert after.message.startswith('autopilot link lost (1 losses so far)')
    assert _values(after)['autopilot_link'] == 'lost'


@pytest.mark.parametrize('fraction, level', [(0.31, OK), (0.3, WARN), (0.2, WARN),
                                             (0.15, ERROR), (0.05, ERROR)])
def test_battery_levels_follow_the_configured_fractions(fraction, level):
    pilot = _pilot()
    report = drone_status(0, pilot, pilot.agent, _gate(1), BatteryStatus(fraction, 14.0),
                          CONFIG)
    assert report.level == level
    assert ('battery' in report.message) == (level != OK)


def test_the_last_rounds_flight_error_warns_until_the_next_round_flies():
    # Arrange: round 3's go-to timed out
    pilot = _pilot()
    pilot._failed(RoundTask(round_index=3, weights={}, plan=(), deadline_s=60.0),
                  'go-to timed out')
    battery = BatteryStatus(0.9, 16.0)
    # Act
    now = drone_status(0, pilot, pilot.agent, _gate(3), battery, CONFIG)
    pilot.agent.train_round = lambda task, superseded=None: None
    asyncio.run(pilot.run_round(RoundTask(round_index=3, weights={}, plan=(),
                                          deadline_s=60.0)))   # a later run's round 3
    later = drone_status(0, pilot, pilot.agent, _gate(3), battery, CONFIG)
    # Assert: the worst first, then where the drone is; a round flown since clears it (even
    # one with the same number in a later run), the history keeps it
    assert now.level == WARN and now.message == 'round 3: go-to timed out; round 3 waiting'
    assert later.level == OK and _values(later)['last_error'] == 'round 3: go-to timed out'


def test_the_phase_follows_the_round_and_the_finish():
    # Arrange: an agent that notes the phase while it trains; a watcher on the pilot's loop
    pilot = _pilot()
    seen: list[str] = []
    pilot.agent.train_round = (lambda task, superseded=None:
                               seen.append(f'train:{pilot.state.phase}'))
    task = RoundTask(round_index=1, weights={}, plan=(PlanWaypoint(100.0, 100.0, 30.0),),
                     deadline_s=600.0)

    async def round_then_finish():
        async def watch():
            while True:
                if not seen or seen[-1] != pilot.state.phase:
                    seen.append(pilot.state.phase)
                await asyncio.sleep(0)
        watcher = asyncio.ensure_future(watch())
        await pilot.run_round(task)
        await asyncio.sleep(0)
        await pilot.finish()
        await asyncio.sleep(0)
        watcher.cancel()

    # Act
    asyncio.run(round_then_finish())
    # Assert
    assert seen[0] == 'flying' and 'train:training' in seen, seen
    assert seen[-3:] == ['waiting', 'returning', 'finished'], seen


@pytest.mark.parametrize('phase, age_s, level, text', [
    ('planning', 300.0, WARN, 'ground station planning for 300 s (stuck?); round 2 waiting'),
    ('aggregating', 400.0, WARN, 'ground station aggregating for 400 s (stuck?); round 2 '
                                 'waiting'),
    ('planning', 299.0, OK, 'round 2 waiting'),
    ('round_open', 900.0, OK, 'round 2 waiting'),     # a round open for long is no worker
])
def test_a_station_worker_in_one_phase_for_the_timeout_warns(phase, age_s, level, text):
    # Arrange: heartbeats keep coming (silent 1 s), the station timeout is 300 s
    pilot = _pilot()
    beat = Heartbeat('a1b2', 2, 10, phase, age_s - 1.0, 1.0)
    # Act
    report = drone_status(3, pilot, pilot.agent, _gate(2), BatteryStatus(0.8, 15.9), CONFIG,
                          station_silent_s=1.0, station_beat=beat, station_phase_age_s=age_s)
    # Assert
    assert (report.level, report.message) == (level, text)
    assert _values(report)['station_phase'] == phase
    assert _values(report)['station_phase_age_s'] == f'{age_s:.0f}'


def test_no_heartbeat_yet_is_shown_as_such():
    pilot = _pilot()
    report = drone_status(3, pilot, pilot.agent, _gate(2), BatteryStatus(0.8, 15.9), CONFIG,
                          station_silent_s=1.0)
    assert _values(report)['station_phase'] == 'no heartbeat'
    assert _values(report)['station_phase_age_s'] == 'unknown'
    assert _values(report)['heartbeats_refused'] == 'none'


def test_refused_station_heartbeats_are_shown_by_reason():
    # Arrange: a rogue node beats in the station's name (fl_uav/fleet/heartbeat_auth.py)
    pilot = _pilot()
    refused = Counter({'unsigned': 12, 'forged': 3, 'replayed': 40})
    # Act
    report = drone_status(3, pilot, pilot.agent, _gate(2), BatteryStatus(0.8, 15.9), CONFIG,
                          station_silent_s=1.0, heartbeats_refused=refused)
    # Assert: counted, sorted by reason; the level is the watchdog's business
    assert _values(report)['heartbeats_refused'] == 'forged=3, replayed=40, unsigned=12'
    assert report.level == OK


@pytest.mark.parametrize('period_s, level', [(61.0, WARN), (60.0, OK)])
def test_a_station_heartbeat_period_too_long_for_this_drones_timeout_warns(period_s, level):
    # Arrange: the drone's timeout is 300 s (drone.yaml); the station beats every period_s
    # (its own ground_station.yaml), which each beat says
    pilot = _pilot()
    beat = Heartbeat('a1b2', 2, 10, 'waiting', 3.0, period_s)
    # Act
    report = drone_status(3, pilot, pilot.agent, _gate(2), BatteryStatus(0.8, 15.9), CONFIG,
                          station_silent_s=1.0, station_beat=beat, station_phase_age_s=4.0)
    # Assert: 5 x 61 s > 300 s warns, naming both keys; 5 x 60 s = 300 s is fine
    assert report.level == level
    if level == WARN:
        assert report.message.startswith(
            "station's status.heartbeat_period_s 61 s x 5 exceeds this drone's "
            'flight.station_timeout_s 300 s'), report.message
    else:
        assert report.message == 'round 2 waiting'


def test_a_vehicle_a_failsafe_or_an_operator_flies_is_a_warning_with_its_mode():
    # Arrange: after round 1 PX4's battery failsafe returns the vehicle (between rounds: no
    # round error yet)
    pilot = _pilot()
    asyncio.run(pilot.fly_plan(RoundTask(1, {}, (PlanWaypoint(100.0, 100.0, 30.0),),
                                         deadline_s=600.0)))
    flying = drone_status(0, pilot, pilot.agent, _gate(1), BatteryStatus(0.8, 15.9), CONFIG)
    pilot.vehicle.flight_mode = 'RETURN_TO_LAUNCH'
    # Act
    report = drone_status(0, pilot, pilot.agent, _gate(1), BatteryStatus(0.8, 15.9), CONFIG)
    # Assert: seen at once on /diagnostics, not only when the next round is refused
    assert (flying.level, _values(flying)['flight_mode']) == (OK, 'MISSION')
    assert report.level == WARN
    assert report.message.startswith('autopilot flies the vehicle in RETURN_TO_LAUNCH')
    assert _values(report)['flight_mode'] == 'RETURN_TO_LAUNCH'


def test_a_failsafe_hold_is_a_warning_naming_px4s_system_status():
    # Arrange: after round 1 PX4's failsafe holds the vehicle (Hold is a pilot mode)
    pilot = _pilot()
    asyncio.run(pilot.fly_plan(RoundTask(1, {}, (PlanWaypoint(100.0, 100.0, 30.0),),
                                         deadline_s=600.0)))
    pilot.vehicle.flight_mode, pilot.vehicle.failsafe = 'HOLD', True
    # Act
    report = drone_status(0, pilot, pilot.agent, _gate(1), BatteryStatus(0.8, 15.9), CONFIG)
    # Assert
    assert report.level == WARN
    assert report.message.startswith(
        'PX4 failsafe active (system_status CRITICAL), mode HOLD: the drone node commands '
        'nothing; switch the vehicle to Hold')
    assert _values(report)['system_status'] == 'CRITICAL'


def test_a_vehicle_taken_over_and_landed_says_to_restart_the_node():
    # Arrange: the operator landed it from the RC (seen in LAND in the air, then on the ground)
    pilot = _pilot()
    asyncio.run(pilot.fly_plan(RoundTask(1, {}, (PlanWaypoint(100.0, 100.0, 30.0),),
                                         deadline_s=600.0)))
    pilot.vehicle.flight_mode = 'LAND'
    drone_status(0, pilot, pilot.agent, _gate(1), BatteryStatus(0.8, 15.9), CONFIG)
    pilot.vehicle.in_air = pilot.vehicle.armed = False
    # Act
    report = drone_status(0, pilot, pilot.agent, _gate(1), BatteryStatus(0.8, 15.9), CONFIG)
    # Assert
    assert report.level == WARN
    assert report.message.startswith('taken over (LAND) and on the ground: restart the drone')
