"""DronePilot's geofence guard: a plan that leaves the fence never reaches the vehicle."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from fl_uav.compression.signing import now_ms
from fl_uav.fleet.config import FlightConfig
from fl_uav.fleet.drone_pilot import UNBIDDEN_DISARM, DronePilot
from fl_uav.fleet.messages import RoundTask, short_flight_error
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.geofence import Geofence
from fl_uav.vehicle.fake_vehicle import FakeVehicle
from fl_uav.vehicle.interface import VehicleError

FENCE = Geofence(10.0, 10.0, 390.0, 390.0, min_up_m=5.0, max_up_m=120.0)
INSIDE = (PlanWaypoint(100.0, 100.0, 30.0), PlanWaypoint(150.0, 100.0, 30.0))


class _Agent:
    """What the pilot needs of a DroneAgent: a counter and a train_round."""

    def __init__(self) -> None:
        self.waypoints_reached = 0
        self.trained: list[int] = []
        self.tasks: list[RoundTask] = []
        self.flights: list[int] = []

    def begin_flight(self, run_epoch: int) -> None:
        self.flights.append(run_epoch)

    def train_round(self, task: RoundTask, superseded=None) -> str:
        self.trained.append(task.round_index)
        self.tasks.append(task)
        return f'report {task.round_index}'


def _fly(plan: tuple[PlanWaypoint, ...], home_up_m: float = 0.0,
         home_en_m: tuple[float, float] = (200.0, 200.0)
         ) -> tuple[DronePilot, FakeVehicle, _Agent, str]:
    vehicle = FakeVehicle(home_enu_m=(*home_en_m, home_up_m))
    agent = _Agent()
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(agent, vehicle, FlightConfig(speed_m_s=20.0), pool, geofence=FENCE)
        task = RoundTask(round_index=3, weights={}, plan=plan, deadline_s=600.0)
        report = asyncio.run(pilot.run_round(task))
    return pilot, vehicle, agent, report


def _airborne(home_en_m: tuple[float, float], at_en_m: tuple[float, float]) -> FakeVehicle:
    """A vehicle the autopilot reports armed and in the air at 30 m (this node restarted in
    flight)."""
    vehicle = FakeVehicle(home_enu_m=(*home_en_m, 0.0))
    vehicle.armed = vehicle.in_air = True
    vehicle.position_enu_m = [*at_en_m, 30.0]
    return vehicle


def _operations(vehicle: FakeVehicle) -> list[str]:
    return [call[0] for call in vehicle.calls]


def test_a_plan_inside_the_fence_is_flown():
    # Arrange / Act
    pilot, vehicle, agent, report = _fly(INSIDE)
    # Assert
    assert 'fly_waypoints' in _operations(vehicle)
    assert agent.waypoints_reached == 2 and report == 'report 3'
    assert not pilot.plans_rejected and pilot.state.last_error == ''


@pytest.mark.parametrize('bad, reason', [
    (PlanWaypoint(395.0, 100.0, 30.0), 'outside_fence'),
    (PlanWaypoint(100.0, -50.0, 30.0), 'outside_fence'),
    (PlanWaypoint(100.0, 100.0, 2.0), 'below_band'),
    (PlanWaypoint(100.0, 100.0, 150.0), 'above_band'),
    (PlanWaypoint(float('nan'), 100.0, 30.0), 'not_finite'),
])
def test_a_plan_with_one_waypoint_outside_never_reaches_the_vehicle(bad, reason, caplog):
    # Arrange
    plan = (INSIDE[0], bad, INSIDE[1])
    # Act
    with caplog.at_level(logging.ERROR, logger='fl_uav.fleet.drone_pilot'):
        pilot, vehicle, agent, report = _fly(plan)
    # Assert: nothing was armed, taken off or uploaded, yet the drone trained and reported.
    assert not {'arm', 'takeoff', 'fly_waypoints', 'goto_enu'} & set(_operations(vehicle))
    assert not vehicle.in_air and vehicle.position_enu_m == [200.0, 200.0, 0.0]
    assert pilot.plans_rejected == {reason: 1}
    assert 'round 3: plan rejected' in pilot.state.last_error
    assert 'waypoint 1' in pilot.state.last_error
    assert any('plan rejected' in r.getMessage() and 'waypoint 1' in r.getMessage()
               for r in caplog.records)
    assert agent.trained == [3] and report == 'report 3' and agent.waypoints_reached == 0


@pytest.mark.parametrize('plan, fail_on, error', [
    (INSIDE, {}, ''),
    ((INSIDE[0], PlanWaypoint(395.0, 100.0, 30.0)), {}, 'plan rejected: outside_fence'),
    (INSIDE, {'arm': VehicleError('udpin://x: arm refused by the autopilot: COMMAND_DENIED '
                                  '(autopilot: "Arming denied: low battery")')},
     'udpin://x: arm refused by the autopilot: COMMAND_DENIED (autopilot: "Arming denied: '
     'low battery")'),
    (INSIDE, {'fly_waypoints': VehicleError('x' * 500)}, 'x' * 197 + '...'),
])
def test_the_rounds_flight_error_goes_to_training_short(plan, fail_on, error):
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0), fail_on=fail_on)
    agent = _Agent()
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(agent, vehicle, FlightConfig(speed_m_s=20.0), pool, geofence=FENCE)
        # Act
        asyncio.run(pilot.run_round(RoundTask(3, {}, plan, deadline_s=600.0, run_epoch=2)))
    # Assert: the task trained on says why its flight failed (the update carries it), and the
    # agent was told which run the flight belongs to first
    assert [t.flight_error for t in agent.tasks] == [error]
    assert agent.flights == [2]


def test_an_airborne_drone_holds_where_it_is_when_the_next_plan_is_rejected():
    # Arrange: a first round flown inside the fence.
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    agent = _Agent()
    outside = (PlanWaypoint(100.0, 100.0, 30.0), PlanWaypoint(1000.0, 100.0, 30.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(agent, vehicle, FlightConfig(speed_m_s=20.0), pool, geofence=FENCE)

        async def two_rounds() -> None:
            await pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0))
            before = list(vehicle.calls)
            await pilot.run_round(RoundTask(2, {}, outside, deadline_s=600.0))
            assert vehicle.calls == before          # round 2 sent nothing to the vehicle

        # Act
        asyncio.run(two_rounds())
    # Assert
    assert vehicle.in_air and vehicle.position_enu_m == [150.0, 100.0, 30.0]
    assert pilot.state.airborne and pilot.plans_rejected == {'outside_fence': 1}
    assert agent.trained == [1, 2]


class _PoseAgent(_Agent):
    """An agent that also takes telemetry poses (what stream_telemetry feeds)."""

    def __init__(self) -> None:
        super().__init__()
        self.poses: list = []

    def on_pose(self, pose) -> None:
        self.poses.append(pose)

    def latest_pose(self):
        return self.poses[-1] if self.poses else None


async def _until(condition, timeout_s: float = 5.0) -> None:
    """Yield to the loop until condition() holds; TimeoutError after timeout_s."""
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0)
    await asyncio.wait_for(poll(), timeout_s)


def test_telemetry_starts_when_a_later_round_connects_after_a_failed_first_connect():
    # Arrange: the autopilot is not reachable when the telemetry starts
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0),
                          fail_on={'connect': VehicleError('no autopilot heartbeat')})
    agent = _PoseAgent()
    published, batteries = [], []
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(agent, vehicle, FlightConfig(speed_m_s=20.0), pool, geofence=FENCE)

        async def scenario() -> None:
            telemetry = asyncio.ensure_future(
                pilot.stream_telemetry(published.append, batteries.append))
            await _until(lambda: ('connect', 60.0) in vehicle.calls)
            # Act: the autopilot comes up; the next round connects through ensure_airborne
            vehicle.fail_on.clear()
            await pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0))
            await _until(lambda: published and batteries)
            await pilot.shutdown(rtl_timeout_s=60.0)
            await asyncio.wait_for(telemetry, 5.0)     # ends with the shutdown

        asyncio.run(scenario())
    # Assert: poses reached the agent (camera frames get labelled) and the publisher
    assert agent.poses and published and batteries
    assert [call[0] for call in vehicle.calls].count('connect') == 2


def _pilot(vehicle: FakeVehicle, pool: ThreadPoolExecutor) -> DronePilot:
    pilot = DronePilot(_Agent(), vehicle, FlightConfig(speed_m_s=20.0), pool, geofence=FENCE)
    return pilot


def test_shutdown_in_flight_returns_to_launch_then_closes():
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _pilot(vehicle, pool)

        async def scenario() -> None:
            await pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0))
            assert vehicle.in_air and pilot.in_flight
            # Act
            await pilot.shutdown(rtl_timeout_s=60.0)

        asyncio.run(scenario())
    # Assert
    assert _operations(vehicle)[-2:] == ['return_to_launch', 'close']
    assert not vehicle.in_air and vehicle.position_enu_m == [200.0, 200.0, 0.0]
    assert not pilot.in_flight


def test_shutdown_waits_for_the_return_at_most_the_timeout(caplog):
    # Arrange: a return that takes far longer than the timeout (wall time)
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _pilot(vehicle, pool)

        async def scenario() -> float:
            await pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0))
            vehicle.time_factor = 0.01          # each 0.1 s step now takes 10 s
            loop = asyncio.get_running_loop()
            start = loop.time()
            # Act
            await pilot.shutdown(rtl_timeout_s=0.2)
            return loop.time() - start

        with caplog.at_level(logging.WARNING, logger='fl_uav.fleet.drone_pilot'):
            took_s = asyncio.run(scenario())
    # Assert: RTL commanded, the link closed after the timeout, not after the landing
    assert _operations(vehicle)[-2:] == ['return_to_launch', 'close']
    assert took_s < 5.0 and vehicle.in_air
    assert any('not landed within' in r.getMessage() for r in caplog.records)


def test_shutdown_on_the_ground_only_closes():
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _pilot(vehicle, pool)
        # Act
        asyncio.run(pilot.shutdown(rtl_timeout_s=60.0))
    # Assert
    assert _operations(vehicle) == ['close']


def test_a_failed_return_at_shutdown_is_logged_and_the_link_still_closed(caplog):
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0),
                          fail_on={'return_to_launch': VehicleError('RTL denied')})
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _pilot(vehicle, pool)

        async def scenario() -> None:
            await pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0))
            await pilot.shutdown(rtl_timeout_s=60.0)

        # Act
        with caplog.at_level(logging.ERROR, logger='fl_uav.fleet.drone_pilot'):
            asyncio.run(scenario())
    # Assert
    assert _operations(vehicle)[-2:] == ['return_to_launch', 'close']
    assert any('RTL denied' in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize('home_up_m', [-32.0, 10.5, float('nan')])
def test_a_home_far_from_the_origin_altitude_is_not_armed(home_up_m):
    # Arrange / Act: the config's origin altitude is 32 m above the site (or 10.5 m below)
    pilot, vehicle, agent, _ = _fly(INSIDE, home_up_m=home_up_m)
    # Assert: no arm, no take-off, no mission; the reason names the key to fix
    assert not {'arm', 'takeoff', 'fly_waypoints'} & set(_operations(vehicle))
    assert 'flight.max_home_offset_up_m' in pilot.state.last_error
    assert f'{home_up_m:+.1f} m from the origin altitude' in pilot.state.last_error


def test_a_home_within_the_offset_is_armed_and_flown():
    pilot, vehicle, _, _ = _fly(INSIDE, home_up_m=-9.5)
    assert 'fly_waypoints' in _operations(vehicle) and pilot.state.last_error == ''


def test_a_vehicle_already_armed_in_the_air_is_flown_on_without_arm_or_takeoff(caplog):
    # Arrange: the drone's process restarted in flight; the autopilot reports armed, in air
    vehicle = _airborne((200.0, 200.0), at_en_m=(200.0, 200.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(_Agent(), vehicle, FlightConfig(speed_m_s=20.0), pool,
                           geofence=FENCE)
        task = RoundTask(round_index=1, weights={}, plan=INSIDE, deadline_s=600.0)
        # Act
        with caplog.at_level(logging.WARNING):
            asyncio.run(pilot.run_round(task))
    # Assert: no arm or take-off command in the air; the mission is flown; the pilot knows
    # it is in flight (so shutdown returns to launch)
    assert {'arm', 'takeoff'}.isdisjoint(_operations(vehicle))
    assert 'fly_waypoints' in _operations(vehicle)
    assert pilot.in_flight and pilot.state.airborne
    assert any('armed and in the air already' in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize('home_en_m', [(5.0, 200.0), (200.0, 395.0)])
def test_a_home_outside_the_geofence_is_not_armed(home_en_m):
    # Arrange / Act: the drone stands outside its fence (the plan itself is inside)
    pilot, vehicle, _, _ = _fly(INSIDE, home_en_m=home_en_m)
    # Assert: the take-off and the return to launch would leave the fence: nothing is sent
    assert not {'arm', 'takeoff', 'fly_waypoints'} & set(_operations(vehicle))
    assert 'is outside the geofence' in pilot.state.last_error
    assert 'return to launch' in pilot.state.last_error


def test_the_finish_brings_home_a_vehicle_whose_last_flight_step_failed_in_the_air():
    # Arrange: round 5's mission upload fails after the take-off (the vehicle stays up)
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0),
                          fail_on={'fly_waypoints': VehicleError('fake: mission refused')})
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(_Agent(), vehicle, FlightConfig(speed_m_s=20.0), pool,
                           geofence=FENCE)
        task = RoundTask(round_index=5, weights={}, plan=INSIDE, deadline_s=600.0)

        async def last_round_then_finish():
            await pilot.run_round(task)
            assert vehicle.in_air and pilot.in_flight
            await pilot.finish()

        # Act
        asyncio.run(last_round_then_finish())
    # Assert: returned to launch and landed
    assert 'return_to_launch' in _operations(vehicle)
    assert not vehicle.in_air and not pilot.in_flight


def test_a_vehicle_in_the_air_is_in_flight_even_when_its_home_check_fails():
    # Arrange: restarted in flight over a home outside the fence
    vehicle = _airborne((5.0, 200.0), at_en_m=(50.0, 200.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(_Agent(), vehicle, FlightConfig(speed_m_s=20.0), pool,
                           geofence=FENCE)

        async def scenario():
            await pilot.ensure_connected()
            before_any_round = pilot.in_flight
            await pilot.run_round(RoundTask(round_index=1, weights={}, plan=INSIDE,
                                            deadline_s=600.0))
            after_refusal = pilot.in_flight
            await pilot.shutdown(rtl_timeout_s=30.0)
            return before_any_round, after_refusal

        # Act
        before_any_round, after_refusal = asyncio.run(scenario())
    # Assert: no mission flown (the home check refused), but shutdown brought it home
    assert before_any_round and after_refusal
    assert 'outside the geofence' in pilot.state.round_error
    assert 'fly_waypoints' not in _operations(vehicle)
    assert 'return_to_launch' in _operations(vehicle) and not vehicle.in_air


@pytest.mark.parametrize('age_s, budget_s', [(None, 40.0), (0.0, 40.0), (30.0, 10.0),
                                             (59.0, 5.0)])
def test_a_round_got_late_flies_only_for_what_is_left_of_it(age_s, budget_s):
    # Arrange: deadline 60 s, train reserve 20 s, minimum flight 5 s; the round opened age_s
    # ago on the station's clock (None: an older station that does not say)
    opened_ms = None if age_s is None else now_ms() - int(age_s * 1000)
    pilot = DronePilot(_Agent(), FakeVehicle(), FlightConfig(train_reserve_s=20.0,
                                                             min_flight_budget_s=5.0),
                       ThreadPoolExecutor(max_workers=1), geofence=FENCE)
    task = RoundTask(round_index=4, weights={}, plan=INSIDE, deadline_s=60.0,
                     opened_ms=opened_ms)
    # Act / Assert
    assert pilot.flight_budget_s(task) == pytest.approx(budget_s, abs=0.5)


class _LateAgent(_Agent):
    """Round 1 trains until a newer round supersedes it (as a slow drone's training that the
    next round overtakes); later rounds train at once. Notes whether each was superseded."""

    def __init__(self) -> None:
        super().__init__()
        self.round_1_training = threading.Event()
        self.superseded_seen: dict[int, bool] = {}

    def train_round(self, task: RoundTask, superseded=None) -> str:
        if task.round_index == 1:
            self.round_1_training.set()
            deadline = time.monotonic() + 10.0
            while not superseded() and time.monotonic() < deadline:
                time.sleep(0.001)
        self.superseded_seen[task.round_index] = superseded()
        return 'dropped' if superseded() else f'report {task.round_index}'


def test_a_newer_round_supersedes_the_training_of_the_round_before():
    # Arrange: round 1 is still training when round 2 arrives (one training thread)
    agent = _LateAgent()
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(agent, FakeVehicle(home_enu_m=(200.0, 200.0, 0.0)),
                           FlightConfig(speed_m_s=20.0), pool, geofence=FENCE)

        async def two_rounds():
            first = asyncio.ensure_future(pilot.run_round(
                RoundTask(1, {}, (), deadline_s=60.0)))
            assert await asyncio.to_thread(agent.round_1_training.wait, 10.0)
            # Act
            second = await pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=60.0))
            return await asyncio.wait_for(first, 10.0), second

        first, second = asyncio.run(two_rounds())
    # Assert: round 1's training was told to stop, round 2 trained and reported
    assert agent.superseded_seen == {1: True, 2: False}
    assert (first, second) == ('dropped', 'report 2')


@pytest.mark.parametrize('newest, task, superseded', [
    ((0, 3), (0, 3), False),      # the round itself
    ((0, 4), (0, 3), True),       # the next round
    ((1, 1), (0, 9), True),       # a new run's first round
    ((0, 3), (0, 4), False),      # a round not begun yet
])
def test_a_round_is_superseded_once_a_newer_one_began(newest, task, superseded):
    # Arrange
    pilot = DronePilot(_Agent(), FakeVehicle(), FlightConfig(),
                       ThreadPoolExecutor(max_workers=1), geofence=FENCE)
    epoch, index = newest
    asyncio.run(pilot.run_round(RoundTask(index, {}, (), deadline_s=60.0, run_epoch=epoch)))
    # Act / Assert
    assert pilot.superseded(RoundTask(task[1], {}, (), run_epoch=task[0])) is superseded


def _flown_round_one(vehicle: FakeVehicle, pool: ThreadPoolExecutor) -> DronePilot:
    """A pilot whose round 1 flew its mission (the vehicle holds in the air, in MISSION)."""
    pilot = _pilot(vehicle, pool)
    asyncio.run(pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0)))
    assert vehicle.in_air and vehicle.flight_mode == 'MISSION'
    return pilot


@pytest.mark.parametrize('mode', ['RETURN_TO_LAUNCH', 'LAND', 'POSCTL'])
def test_a_round_does_not_take_back_a_vehicle_a_failsafe_or_an_operator_flies(mode, caplog):
    # Arrange: after round 1, PX4's battery failsafe returns (or lands) the vehicle, or the
    # operator takes it over on the RC
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        vehicle.flight_mode = mode
        calls_before = len(vehicle.calls)
        # Act: round 2 arrives
        with caplog.at_level(logging.WARNING, logger='fl_uav.fleet.drone_pilot'):
            asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
    # Assert: no mission upload, no mode change: the autopilot keeps the vehicle; the round's
    # flight error says why
    assert 'fly_waypoints' not in _operations(vehicle)[calls_before:]
    assert vehicle.flight_mode == mode
    assert f'in {mode}' in pilot.state.round_error
    assert 'does not take it back' in pilot.state.round_error
    assert any(f'in {mode}' in r.getMessage() for r in caplog.records)


def test_a_vehicle_handed_back_in_hold_flies_the_next_round():
    # Arrange: the operator flew it in POSCTL during round 2, then switched it to Hold
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        vehicle.flight_mode = 'POSCTL'
        asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
        vehicle.flight_mode = 'HOLD'
        # Act
        asyncio.run(pilot.run_round(RoundTask(3, {}, INSIDE, deadline_s=600.0)))
    # Assert: round 3 flies its mission from where the vehicle is, without arm or take-off
    assert _operations(vehicle).count('fly_waypoints') == 2
    assert _operations(vehicle).count('takeoff') == 1
    assert pilot.state.round_error == ''


@pytest.mark.parametrize('mode', ['LAND', 'RETURN_TO_LAUNCH', 'POSCTL'])
@pytest.mark.parametrize('ending', ['shutdown', 'finish', 'return_home'])
def test_no_return_to_launch_is_commanded_over_a_failsafe_or_an_operator(ending, mode, caplog):
    # Arrange: PX4 lands the vehicle on an emergency battery (or returns it, or the operator
    # flies it) when the node is stopped, the run ends or the station goes silent
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        vehicle.flight_mode = mode
        # Act
        with caplog.at_level(logging.WARNING, logger='fl_uav.fleet.drone_pilot'):
            asyncio.run(_end_flight(pilot, ending))
    # Assert: an emergency landing is not turned into a return to launch, the RC pilot keeps
    # the vehicle; the log says why
    assert 'return_to_launch' not in _operations(vehicle)
    assert vehicle.flight_mode == mode and vehicle.in_air
    assert any(f'in {mode}' in r.getMessage() and 'not commanding a return to launch'
               in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize('home_up_m, return_alt_m, armed', [(0.0, 121.0, False),
                                                            (5.0, 116.0, False),
                                                            (5.0, 115.0, True),
                                                            (0.0, None, True)])
def test_a_return_altitude_above_the_fence_is_not_armed(home_up_m, return_alt_m, armed):
    # Arrange: PX4's RTL_RETURN_ALT (above home) against the fence top (120 m above the
    # origin); None: the parameter could not be read
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, home_up_m), rtl_return_alt_m=return_alt_m)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _pilot(vehicle, pool)
        # Act
        asyncio.run(pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0)))
    # Assert: refused before arming, naming the parameter and the most it may be
    assert ('arm' in _operations(vehicle)) is armed
    if not armed:
        assert 'RTL_RETURN_ALT' in pilot.state.round_error
        assert f'at most {120.0 - home_up_m:.1f} m' in pilot.state.round_error


@pytest.mark.parametrize('land_delay_s, disarm_s, refused', [
    (-1.0, 2.0, 'RTL_LAND_DELAY is -1 s'), (0.0, 0.0, 'COM_DISARM_LAND is 0 s'),
    (0.0, -1.0, 'COM_DISARM_LAND is -1 s'), (30.0, 0.5, ''), (None, None, '')])
def test_px4_landing_parameters_that_never_land_or_disarm_are_not_armed(land_delay_s, disarm_s,
                                                                       refused):
    # Arrange: PX4's RTL_LAND_DELAY (negative: a return never lands) and COM_DISARM_LAND
    # (<= 0: a landed vehicle never disarms); None: not read
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0), rtl_land_delay_s=land_delay_s,
                          disarm_land_s=disarm_s)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _pilot(vehicle, pool)
        # Act
        asyncio.run(pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0)))
    # Assert: refused before arming, naming the parameter, its value and the value to set,
    # within the flight error an update carries
    assert ('arm' in _operations(vehicle)) is not refused
    if refused:
        name = refused.split()[0]
        assert f'not arming: PX4 {refused}' in pilot.state.round_error
        assert f'set {name} to ' in short_flight_error(pilot.state.round_error)


def test_a_vehicle_taken_over_and_landed_is_not_armed_again_by_the_node(caplog):
    # Arrange: in round 2 the operator lands the vehicle from the RC (an abort), or PX4's
    # battery failsafe lands it; the drone node sees it in LAND before the touchdown
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        vehicle.flight_mode = 'LAND'
        asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
        vehicle.in_air = vehicle.armed = False          # landed and disarmed
        # Act: round 3 arrives
        asyncio.run(pilot.run_round(RoundTask(3, {}, INSIDE, deadline_s=600.0)))
    # Assert: the propellers do not start by themselves; the flight error says what to do
    assert _operations(vehicle).count('arm') == 1
    assert 'took the vehicle over (LAND)' in pilot.state.round_error
    assert 'restart the drone node' in pilot.state.round_error


def test_an_autopilot_found_on_the_ground_without_a_takeover_is_armed_again():
    # Arrange: the autopilot rebooted (or its link dropped) while the vehicle flew in round 1's
    # mission mode; nothing took it over
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        vehicle.in_air = vehicle.armed = False
        vehicle.link_losses += 1          # a reboot: its heartbeats stopped for a while
        vehicle.position_enu_m = [200.0, 200.0, 0.0]
        # Act
        asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
    # Assert
    assert _operations(vehicle).count('arm') == 2 and pilot.state.round_error == ''


@pytest.mark.parametrize('where', ['in_the_air', 'on_the_ground'])
def test_a_disarm_the_pilot_did_not_command_is_a_takeover_and_no_round_arms_again(where,
                                                                                  caplog):
    # Arrange: round 1 flown; another client disarms the vehicle (a forced disarm in the air:
    # it falls), the link up all along; the node's status tick looks at it in the air or only
    # once it is down
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        vehicle.armed = False
        seen_falling = pilot.taken_over_by() if where == 'in_the_air' else None
        vehicle.in_air = False
        vehicle.position_enu_m = [200.0, 200.0, 0.0]
        # Act
        with caplog.at_level(logging.ERROR, logger='fl_uav.fleet.drone_pilot'):
            asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
    # Assert: said once; round 2 arms nothing and says why
    assert seen_falling in (None, UNBIDDEN_DISARM)
    assert pilot.state.taken_over == UNBIDDEN_DISARM
    assert _operations(vehicle).count('arm') == 1
    assert 'not arming: a failsafe or an operator took the vehicle over' in (
        pilot.state.round_error)
    assert sum('disarmed' in r.getMessage() for r in caplog.records) == 1


def test_the_pilots_own_return_is_no_takeover_and_the_next_round_flies():
    # Arrange: the station went silent: the pilot returns the vehicle to launch itself
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    seen_during_return = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        fake_return = vehicle.return_to_launch

        async def return_and_look():
            vehicle.flight_mode = 'RETURN_TO_LAUNCH'     # in the air, on its way home
            seen_during_return.append(pilot.taken_over_by())
            await fake_return()

        vehicle.return_to_launch = return_and_look
        # Act
        landed = asyncio.run(pilot.return_home('station silent'))
        asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
    # Assert: its own RETURN_TO_LAUNCH is not a takeover; the next round arms and flies
    assert landed and seen_during_return == ['']
    assert pilot.state.taken_over == '' and pilot.state.round_error == ''
    assert _operations(vehicle).count('arm') == 2


def test_a_failsafe_return_after_a_failed_own_return_is_a_takeover(caplog):
    # Arrange: the station went silent and the pilot's own return to launch was refused (the
    # vehicle stayed in the air); round 2 then flew its mission, and now PX4's battery failsafe
    # returns the vehicle
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        vehicle.fail_on['return_to_launch'] = VehicleError('fake: return to launch refused')
        assert not asyncio.run(pilot.return_home('station silent'))
        del vehicle.fail_on['return_to_launch']
        asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
        assert pilot.state.round_error == '' and vehicle.flight_mode == 'MISSION'
        vehicle.flight_mode = 'RETURN_TO_LAUNCH'      # the failsafe's, not the pilot's
        calls_before = len(vehicle.calls)
        # Act: round 3 arrives
        asyncio.run(pilot.run_round(RoundTask(3, {}, INSIDE, deadline_s=600.0)))
    # Assert: the failsafe's return is a takeover: no mission upload over it
    assert 'fly_waypoints' not in _operations(vehicle)[calls_before:]
    assert vehicle.flight_mode == 'RETURN_TO_LAUNCH'
    assert pilot.state.taken_over == 'RETURN_TO_LAUNCH'
    assert 'does not take it back' in pilot.state.round_error


FAILSAFE_HOLD = 'PX4 failsafe active (system_status CRITICAL), mode HOLD'


def _failsafe_hold(vehicle: FakeVehicle) -> None:
    """PX4's failsafe puts the vehicle in Hold (offboard or data-link loss, GF_ACTION Hold)."""
    vehicle.flight_mode = 'HOLD'
    vehicle.failsafe = True


def test_a_failsafe_hold_is_a_takeover_though_hold_is_a_pilot_mode(caplog):
    # Arrange: after round 1, PX4's failsafe holds the vehicle
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        _failsafe_hold(vehicle)
        calls_before = len(vehicle.calls)
        # Act: round 2 arrives
        with caplog.at_level(logging.WARNING, logger='fl_uav.fleet.drone_pilot'):
            asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
    # Assert: nothing sent over the failsafe (no mission, no mode); the reason is kept
    assert _operations(vehicle)[calls_before:] == []
    assert vehicle.flight_mode == 'HOLD'
    assert pilot.state.taken_over == FAILSAFE_HOLD
    assert f'round 2: not flying: {FAILSAFE_HOLD}' in pilot.state.round_error
    assert any(FAILSAFE_HOLD in r.getMessage() for r in caplog.records)


def test_a_failsafe_hold_is_handed_back_only_in_hold_with_no_failsafe_reported():
    # Arrange: a failsafe Hold takes the vehicle in round 2
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        _failsafe_hold(vehicle)
        asyncio.run(pilot.run_round(RoundTask(2, {}, INSIDE, deadline_s=600.0)))
        # Act: the failsafe ends with the vehicle in Mission (not handed back), then the
        # operator switches it to Hold
        vehicle.failsafe, vehicle.flight_mode = False, 'MISSION'
        asyncio.run(pilot.run_round(RoundTask(3, {}, INSIDE, deadline_s=600.0)))
        error_in_mission = pilot.state.round_error
        vehicle.flight_mode = 'HOLD'
        asyncio.run(pilot.run_round(RoundTask(4, {}, INSIDE, deadline_s=600.0)))
    # Assert: rounds 2 and 3 fly nothing; round 4 flies on from where it is
    assert _operations(vehicle).count('fly_waypoints') == 2
    assert _operations(vehicle).count('takeoff') == 1
    assert 'only once it is in Hold in the air with no PX4 failsafe' in error_in_mission
    assert pilot.state.round_error == '' and pilot.state.taken_over == ''


def test_no_arming_while_px4_reports_a_failsafe():
    # Arrange: on the ground, connected, PX4 reports a failsafe
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    vehicle.failsafe = True
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _pilot(vehicle, pool)
        # Act
        asyncio.run(pilot.run_round(RoundTask(1, {}, INSIDE, deadline_s=600.0)))
    # Assert
    assert 'arm' not in _operations(vehicle)
    assert 'not arming: PX4 reports a failsafe (system_status CRITICAL)' in (
        pilot.state.round_error)


def _end_flight(pilot: DronePilot, ending: str):
    """The coroutine that ends a flight: node shutdown, end of run, or a silent station."""
    return {'shutdown': lambda: pilot.shutdown(rtl_timeout_s=60.0),
            'finish': pilot.finish,
            'return_home': lambda: pilot.return_home('station silent')}[ending]()


@pytest.mark.parametrize('ending', ['shutdown', 'finish', 'return_home'])
def test_no_return_to_launch_is_commanded_over_a_failsafe_hold(ending, caplog):
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = _flown_round_one(vehicle, pool)
        _failsafe_hold(vehicle)
        # Act
        with caplog.at_level(logging.WARNING, logger='fl_uav.fleet.drone_pilot'):
            asyncio.run(_end_flight(pilot, ending))
    # Assert
    assert 'return_to_launch' not in _operations(vehicle)
    assert vehicle.flight_mode == 'HOLD' and vehicle.in_air
    assert any(FAILSAFE_HOLD in r.getMessage() and 'not commanding a return to launch'
               in r.getMessage() for r in caplog.records)
