"""The drone's geofence on its autopilot (fl_uav/fleet/autopilot_fence.py and the pilot's use
of it): what is uploaded, what is kept, and that the drone does not fly until it is settled."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from fl_uav.fleet.autopilot_fence import (
    fence_for_autopilot,
    gf_action_problem,
    plan_fence,
    same_fence,
)
from fl_uav.fleet.config import FlightConfig, StatusConfig
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.drone_status import WARN, drone_status
from fl_uav.fleet.messages import RoundTask
from fl_uav.fleet.round_gate import RoundGate
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.geofence import Geofence, GeofenceConfig
from fl_uav.vehicle.fake_vehicle import FakeVehicle
from fl_uav.vehicle.interface import AutopilotFence, FenceCircle, FencePolygon, VehicleError

FENCE = Geofence(10.0, 20.0, 390.0, 380.0, min_up_m=5.0, max_up_m=120.0)
PLAN = (PlanWaypoint(100.0, 100.0, 30.0), PlanWaypoint(150.0, 100.0, 30.0))
# An operator's fence drawn in QGroundControl: a tighter polygon and a no-fly circle.
OPERATORS = AutopilotFence(
    polygons=(FencePolygon(((50.0, 50.0), (300.0, 50.0), (300.0, 300.0)), inclusion=True),),
    circles=(FenceCircle((120.0, 200.0), 30.0, inclusion=False),))


class _Agent:
    """What the pilot and the status read of a DroneAgent."""

    buffered_samples = rounds_trained = uploads_rolled_back = rounds_dropped = 0
    rounds_capped = rounds_stopped_at_deadline = frames_unlabelled = 0

    def __init__(self) -> None:
        self.waypoints_reached = 0
        self.trained: list[int] = []
        self.rejected_reasons: Counter[str] = Counter()
        self.knobs_rejected: Counter[str] = Counter()
        self.camera_frames_rejected: Counter[str] = Counter()

    def begin_flight(self, run_epoch: int) -> None:
        pass

    def train_round(self, task: RoundTask, superseded=None) -> str:
        self.trained.append(task.round_index)
        return f'report {task.round_index}'


def _rounds(vehicle: FakeVehicle, *round_indices: int,
            config: GeofenceConfig | None = None) -> DronePilot:
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(_Agent(), vehicle, FlightConfig(speed_m_s=20.0), pool,
                           geofence=FENCE, geofence_config=config)
        for index in round_indices:
            asyncio.run(pilot.run_round(RoundTask(index, {}, PLAN, deadline_s=600.0)))
    return pilot


def _operations(vehicle: FakeVehicle) -> list[str]:
    return [call[0] for call in vehicle.calls]


def test_the_autopilot_fence_is_the_box_widened_by_the_margin():
    # Act
    fence = fence_for_autopilot(FENCE, margin_m=10.0)
    # Assert: one inclusion polygon, counter-clockwise from the south-west corner
    assert fence.circles == ()
    (polygon,) = fence.polygons
    assert polygon.inclusion
    assert polygon.corners_en_m == ((0.0, 10.0), (400.0, 10.0), (400.0, 390.0), (0.0, 390.0))


def test_same_fence_allows_centimetres_not_metres():
    # Arrange
    ours = fence_for_autopilot(FENCE, margin_m=10.0)
    corners = ours.polygons[0].corners_en_m
    read_back = AutopilotFence((FencePolygon(tuple((e + 0.01, n - 0.01) for e, n in corners)),))
    moved = AutopilotFence((FencePolygon(((corners[0][0] + 2.0, corners[0][1]), *corners[1:])),))
    # Act / Assert
    assert same_fence(read_back, ours)
    assert not same_fence(moved, ours)
    assert not same_fence(AutopilotFence(), ours)
    assert not same_fence(OPERATORS, ours)
    assert not same_fence(AutopilotFence(ours.polygons, OPERATORS.circles), ours)


@pytest.mark.parametrize('mode, found, action', [
    ('upload', AutopilotFence(), 'upload'),
    ('upload', OPERATORS, 'keep'),
    ('replace', OPERATORS, 'upload'),
    ('replace', None, 'upload'),
    ('off', None, 'off'),
])
def test_plan_fence_uploads_only_where_no_fence_is_or_when_told_to_replace(mode, found, action):
    # Arrange
    ours = fence_for_autopilot(FENCE, margin_m=10.0)
    # Act
    plan = plan_fence(mode, ours, found)
    # Assert
    assert plan.action == action
    assert plan.fence == {'upload': ours, 'keep': OPERATORS, 'off': AutopilotFence()}[action]


def test_plan_fence_finds_its_own_fence_from_an_earlier_run():
    # Arrange
    ours = fence_for_autopilot(FENCE, margin_m=10.0)
    # Act
    plan = plan_fence('upload', ours, ours)
    # Assert
    assert plan.action == 'in_place'
    assert 'already' in plan.summary


def test_plan_fence_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match='geofence.autopilot_fence'):
        plan_fence('merge', AutopilotFence(), None)


@pytest.mark.parametrize('key, value, match', [
    ('autopilot_fence', 'merge', 'autopilot_fence'),
    ('autopilot_margin_m', -1.0, 'autopilot_margin_m'),
    ('autopilot_margin_m', float('nan'), 'autopilot_margin_m'),
])
def test_geofence_config_refuses_bad_autopilot_keys(key, value, match):
    with pytest.raises(ValueError, match=match):
        GeofenceConfig(**{key: value})


@pytest.mark.parametrize('action, fence_there, warned', [
    (0, True, True), (1, True, True), (2, True, False), (3, True, False), (5, True, False),
    (None, True, False), (1, False, False),
])
def test_gf_action_that_only_reports_is_a_warning(action, fence_there, warned):
    # Act
    problem = gf_action_problem(action, fence_there)
    # Assert
    assert bool(problem) == warned
    if warned:
        assert f'GF_ACTION is {action}' in problem and 'set GF_ACTION to 2' in problem


def test_the_first_flight_puts_the_fence_on_the_autopilot_before_arming():
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    # Act
    pilot = _rounds(vehicle, 1)
    # Assert: read, uploaded, then armed; the plan was flown
    operations = _operations(vehicle)
    assert operations.index('download_fence') < operations.index('upload_fence') < (
        operations.index('arm'))
    assert vehicle.fence == fence_for_autopilot(FENCE, GeofenceConfig().autopilot_margin_m)
    assert 'uploaded' in pilot.state.autopilot_fence
    assert 'fly_waypoints' in operations and not pilot.state.round_error


def test_the_fence_is_settled_once_per_node_not_every_round():
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    # Act
    _rounds(vehicle, 1, 2, 3)
    # Assert
    assert _operations(vehicle).count('download_fence') == 1
    assert _operations(vehicle).count('upload_fence') == 1
    assert _operations(vehicle).count('fly_waypoints') == 3


def test_an_operators_fence_is_kept_and_said(caplog):
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0), fence=OPERATORS)
    # Act
    with caplog.at_level(logging.WARNING, logger='fl_uav.fleet.drone_pilot'):
        pilot = _rounds(vehicle, 1)
    # Assert: not replaced (nor loosened); the drone flies; the log and the state say so
    assert 'upload_fence' not in _operations(vehicle)
    assert vehicle.fence == OPERATORS
    assert 'kept' in pilot.state.autopilot_fence
    assert 'fly_waypoints' in _operations(vehicle)
    assert any('holds a fence of its own' in r.getMessage() for r in caplog.records)


def test_replace_puts_ours_over_an_operators_fence():
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0), fence=OPERATORS)
    # Act
    _rounds(vehicle, 1, config=GeofenceConfig(autopilot_fence='replace', autopilot_margin_m=5.0))
    # Assert
    assert 'download_fence' not in _operations(vehicle)
    assert vehicle.fence == fence_for_autopilot(FENCE, 5.0)


def test_off_leaves_the_autopilots_fence_alone():
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0), fence=OPERATORS)
    # Act
    pilot = _rounds(vehicle, 1, config=GeofenceConfig(autopilot_fence='off'))
    # Assert
    assert not {'download_fence', 'upload_fence'} & set(_operations(vehicle))
    assert 'not managed' in pilot.state.autopilot_fence
    assert 'fly_waypoints' in _operations(vehicle)


@pytest.mark.parametrize('failing', ['download_fence', 'upload_fence'])
def test_no_flight_without_the_fence_and_the_next_round_tries_again(failing):
    # Arrange: the autopilot does not take the fence in round 1
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0),
                          fail_on={failing: VehicleError('geofence upload refused: TIMEOUT')})
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(_Agent(), vehicle, FlightConfig(speed_m_s=20.0), pool,
                           geofence=FENCE)
        # Act: round 1 fails, then the autopilot answers and round 2 arrives
        asyncio.run(pilot.run_round(RoundTask(1, {}, PLAN, deadline_s=600.0)))
        error_round_1 = pilot.state.round_error
        armed_in_round_1 = 'arm' in _operations(vehicle)
        vehicle.fail_on.clear()
        asyncio.run(pilot.run_round(RoundTask(2, {}, PLAN, deadline_s=600.0)))
    # Assert: nothing armed or flown in round 1, its error says why and how to fly without
    assert not armed_in_round_1
    assert 'geofence could not be put on the autopilot' in error_round_1
    assert 'TIMEOUT' in error_round_1
    assert vehicle.fence == fence_for_autopilot(FENCE, GeofenceConfig().autopilot_margin_m)
    assert 'fly_waypoints' in _operations(vehicle) and not pilot.state.round_error


@pytest.mark.parametrize('action, level_warn', [(1, True), (2, False)])
def test_a_gf_action_that_only_warns_shows_on_the_drones_status(action, level_warn):
    # Arrange
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0), geofence_action=action)
    pilot = _rounds(vehicle, 1)
    # Act
    report = drone_status(3, pilot, pilot.agent, RoundGate(10), None,
                          StatusConfig(battery_warn_fraction=0.0, battery_error_fraction=0.0))
    # Assert
    values = dict(report.values)
    assert 'uploaded' in values['autopilot_fence']
    assert ('GF_ACTION is 1 (Warning)' in report.message) == level_warn
    if level_warn:
        assert report.level == WARN


def test_after_a_lost_link_the_fence_is_looked_at_again():
    # Arrange: round 1 put the fence up; then the link drops and the autopilot comes back
    # without it (rebooted with a fresh parameter store, or replaced)
    vehicle = FakeVehicle(home_enu_m=(200.0, 200.0, 0.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(_Agent(), vehicle, FlightConfig(speed_m_s=20.0), pool,
                           geofence=FENCE)
        asyncio.run(pilot.run_round(RoundTask(1, {}, PLAN, deadline_s=600.0)))
        vehicle.link_losses += 1
        vehicle.fence = AutopilotFence()
        # Act
        asyncio.run(pilot.run_round(RoundTask(2, {}, PLAN, deadline_s=600.0)))
    # Assert: read and uploaded again before round 2 flew
    assert _operations(vehicle).count('download_fence') == 2
    assert vehicle.fence == fence_for_autopilot(FENCE, GeofenceConfig().autopilot_margin_m)
    assert _operations(vehicle).count('fly_waypoints') == 2 and not pilot.state.round_error
