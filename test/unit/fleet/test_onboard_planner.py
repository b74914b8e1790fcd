"""OnboardPlanner: a drone's own 2CEOAFL trajectory from its geo-tagged samples (ROS-free)."""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

from fl_uav.compression.codec import FrameKind, encode_frame
from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import (
    FleetConfig,
    GeofenceConfig,
    RoundConfig,
    TrajectoryConfig,
    sampling_pattern_length_m,
)
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import PoseSample, RoundTask
from fl_uav.fleet.onboard_planner import (
    NO_POSITION,
    OnboardPlanner,
    OnboardTrajectory,
    map_geotags,
    pure_regions,
    raster_geotags,
    region_sweep,
    sampling_diamond,
    sweep_box,
)
from fl_uav.planning.coverage import PlanInfeasibleError, PlanWaypoint, path_length_m
from fl_uav.planning.geofence import plan_violations
from fl_uav.planning.trajectory import GaussianRegion
from fl_uav.vehicle.fake_vehicle import FakeVehicle
from fl_uav.world.camera import footprint_m
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import UNKNOWN, LandCoverMap
from test.unit.fleet.test_roles import _eval_set, _update

CLUSTERS = {0: (300.0, 300.0), 1: (700.0, 500.0), 2: (500.0, 850.0)}
STATION_PLAN = (PlanWaypoint(100.0, 100.0, 30.0), PlanWaypoint(100.0, 200.0, 30.0))
START = (600.0, 600.0)


# The paper's mode: regions from the drone's own samples, eq. (2) ψ planned once, a diamond.
PAPER_MODE = {'planner': '2ceoafl', 'sampling': 'diamond', 'priorities': 'paper',
              'regions': 'survey', 'components_per_class': 1}


def _config(**trajectory) -> FleetConfig:
    return FleetConfig(num_drones=1, rounds=RoundConfig(num_rounds=6, deadline_s=60.0),
                       trajectory=TrajectoryConfig(**{**PAPER_MODE, **trajectory}))


def _samples(per_class: int = 60, sparse_class_samples: int = 3):
    rng = np.random.default_rng(0)
    positions, labels = [], []
    for label, centre in CLUSTERS.items():
        positions.append(rng.normal(centre, 25.0, (per_class, 2)))
        labels += [label] * per_class
    positions.append(rng.normal((900.0, 900.0), 5.0, (sparse_class_samples, 2)))
    labels += [3] * sparse_class_samples
    return lambda: (np.vstack(positions), np.array(labels, np.int64))


def _no_samples():
    return np.zeros((0, 2)), np.zeros(0, np.int64)


def _task(round_index: int) -> RoundTask:
    return RoundTask(round_index=round_index, weights={}, plan=STATION_PLAN, deadline_s=60.0)


def test_regions_are_fitted_per_class_from_the_geotagged_samples():
    # Arrange
    planner = OnboardPlanner(_config(min_samples_per_class=10), 0, _samples())
    # Act
    regions = planner.fit_regions()
    # Assert: one Gaussian per class with enough samples, centred on its cluster
    assert sorted(r.class_id for r in regions) == [0, 1, 2]     # class 3: 3 samples < 10
    for region in regions:
        assert np.allclose(region.center_enu_m, CLUSTERS[region.class_id], atol=10.0)
        assert 15.0 < region.radius_m < 35.0
    assert math.isclose(sum(r.weight for r in regions), 1.0)


def test_plan_keeps_to_fence_altitude_band_reach_and_battery():
    # Arrange: a fence box that cuts class 2's cluster (north 850 m) out
    config = replace(_config(), geofence=GeofenceConfig(
        source='box', east_min_m=100.0, north_min_m=100.0, east_max_m=800.0,
        north_max_m=780.0, min_up_m=10.0, max_up_m=60.0))
    planner = OnboardPlanner(config, 0, _samples())
    # Act
    plan = planner.plan(2, START)
    # Assert: q_t for rounds 2..6, all inside the fence and band
    assert plan.first_round == 2 and len(plan.waypoints) == 5
    fence = config.geofence_enu()
    assert plan_violations(plan.waypoints, fence) == []
    assert all(w.up_m == config.coverage.altitude_m for w in plan.waypoints)
    # reach per round: speed x flight time x reach_fraction, less the sampling diamond
    step_m = config.round_reach_m() - sampling_pattern_length_m(15.0)
    assert math.isclose(plan.step_m, step_m)
    points = np.array([START, *[(w.east_m, w.north_m) for w in plan.waypoints]])
    assert np.all(np.linalg.norm(np.diff(points, axis=0), axis=1) <= step_m + 1e-6)
    assert np.linalg.norm(np.diff(points, axis=0), axis=1).sum() <= plan.budget_m + 1e-6
    # and the plan is data-aware: it visits the reachable classes' regions
    assert {0, 1} <= set(plan.classes)


def test_rounds_after_the_survey_fly_q_t_and_its_sampling_diamond():
    # Arrange
    planned: list[OnboardTrajectory] = []
    planner = OnboardPlanner(_config(), 0, _samples(), on_plan=planned.append)
    # Act
    survey = planner.mission_for(_task(1), START)
    second = planner.mission_for(_task(2), START)
    third = planner.mission_for(_task(3), (0.0, 0.0))     # no replanning once planned
    # Assert
    assert survey.source == 'survey' and survey.waypoints == STATION_PLAN
    assert len(planned) == 1 and planner.trajectory is planned[0]
    for mission, round_index in ((second, 2), (third, 3)):
        q_t = planned[0].target_for(round_index)
        assert mission.source == '2ceoafl' and mission.target == q_t
        assert mission.waypoints[0] == q_t and mission.waypoints[-1] == q_t
        assert len(mission.waypoints) == 6
    assert planner.sources == {'survey': 1, '2ceoafl': 2} and not planner.fallbacks
    record = planner.record()
    assert record['plan']['first_round'] == 2 and len(record['plan']['waypoints_enu_m']) == 5
    assert [r['source'] for r in record['rounds']] == ['survey', '2ceoafl', '2ceoafl']
    assert record['sample_class_counts'][:4] == [60, 60, 60, 3]


def test_no_labelled_samples_is_a_typed_infeasibility_and_a_counted_fallback():
    # Arrange
    planner = OnboardPlanner(_config(), 0, _no_samples)
    # Act + Assert: the planner raises the typed error ...
    with pytest.raises(PlanInfeasibleError) as error:
        planner.plan(2, START)
    assert error.value.cause == 'no_class_regions'
    # ... and a round falls back to the station's plan, counted and recorded
    mission = planner.mission_for(_task(2), START)
    assert mission.source == 'fallback' and mission.cause == 'no_class_regions'
    assert mission.waypoints == STATION_PLAN
    assert planner.fallbacks == {'no_class_regions': 1}
    assert planner.describe_round(2) == 'fallback mission: no_class_regions'
    assert planner.record()['rounds'][0]['cause'] == 'no_class_regions'


def test_a_flat_battery_and_a_missing_position_fall_back_with_their_cause():
    # Arrange
    planner = OnboardPlanner(_config(), 0, _samples())
    planner.on_battery(0.25)        # 5 % above the 20 % reserve: not even the hover fits
    # Act
    flat = planner.mission_for(_task(2), START)
    lost = planner.mission_for(_task(3), None)
    # Assert
    assert planner.energy_budget_m(5) == 0.0
    assert flat.cause == 'budget_below_step' and lost.cause == NO_POSITION
    assert planner.fallbacks == {'budget_below_step': 1, NO_POSITION: 1}
    assert planner.trajectory is None


def test_energy_budget_follows_the_documented_model():
    # Arrange: 300 Wh, 20 % reserve, hover 250 W, level flight 300 W at 12 m/s
    planner = OnboardPlanner(_config(), 0, _samples())
    fence = planner.fence
    diagonal_m = math.hypot(fence.east_max_m - fence.east_min_m,
                            fence.north_max_m - fence.north_min_m)
    usable_j = 300.0 * 3600.0 * 0.8
    fixed_j = 250.0 * 5 * 60.0 + 300.0 * diagonal_m / 12.0
    expected = (usable_j - fixed_j) / (50.0 / 12.0) - 5 * sampling_pattern_length_m(15.0)
    # Act + Assert
    assert math.isclose(planner.energy_budget_m(5), expected)
    cheap = OnboardPlanner(_config(cruise_power_w=200.0), 0, _samples())
    assert cheap.energy_budget_m(5) == math.inf     # level flight cheaper than hover
    # a sweep may fly all of each round's flight time (60 s deadline - 20 s reserve)
    sweep = OnboardPlanner(_config(sampling='sweep'), 0, _samples())
    assert math.isclose(sweep.energy_budget_m(5),
                        (usable_j - fixed_j) / (50.0 / 12.0) - 5 * 12.0 * 40.0)


def test_planner_work_limits_and_safety_cap_come_from_the_trajectory_keys():
    # Arrange
    config = _config(plan_time_budget_s=12.5, window_passes=1, horizon_iterations=0,
                     solver_time_limit_s=3.0)
    planner = OnboardPlanner(config, 0, _samples())
    # Act
    constraints = planner.constraints(rounds_left=4)
    # Assert
    assert (constraints.time_budget_s, constraints.time_limit_s) == (12.5, 3.0)
    assert (constraints.window_passes, constraints.horizon_iterations) == (1, 0)


def test_coverage_planner_flies_the_station_plan_every_round():
    # Arrange
    planner = OnboardPlanner(_config(planner='coverage'), 0, _samples())
    # Act
    missions = [planner.mission_for(_task(r), START) for r in (1, 2, 3)]
    # Assert
    assert all(m.source == 'coverage' and m.waypoints == STATION_PLAN for m in missions)
    assert planner.trajectory is None and planner.round_task(_task(2), START) == _task(2)


def test_sampling_diamond_shrinks_to_stay_inside_the_fence():
    # Arrange
    fence = _config().geofence_enu()
    near_edge = PlanWaypoint(fence.east_max_m - 4.0, 500.0, 30.0)
    on_edge = PlanWaypoint(fence.east_max_m, 500.0, 30.0)
    # Act
    diamond = sampling_diamond(near_edge, 15.0, fence)
    # Assert
    assert len(diamond) == 6 and plan_violations(diamond, fence) == []
    assert max(w.east_m for w in diamond) == pytest.approx(fence.east_max_m)
    assert sampling_diamond(on_edge, 15.0, fence) == (on_edge,)


@pytest.mark.parametrize('flat, needle', [
    ({'trajectory.planner': 'lawnmower'}, "planner 'lawnmower' unknown; choices: coverage, "
                                          '2ceoafl'),
    ({'trajectory.planner': '2ceoafl', 'rounds.num_rounds': 2, 'trajectory.survey_rounds': 2},
     'trajectory.survey_rounds (2) leaves no round to plan'),
    ({'trajectory.planner': '2ceoafl', 'trajectory.sample_radius_m': 100.0},
     'sampling diamond'),
    ({'trajectory.sampling': 'spiral'}, "trajectory.sampling 'spiral' unknown; choices: sweep, "
                                        'diamond'),
    ({'trajectory.priorities': 'random'}, "trajectory.priorities 'random' unknown"),
    ({'trajectory.regions': 'gps'}, "trajectory.regions 'gps' unknown"),
    ({'trajectory.plan_time_budget_s': 0.0}, 'trajectory.plan_time_budget_s must be finite '
                                             'and > 0'),
    ({'trajectory.window_passes': -1}, 'trajectory.window_passes must be >= 0, got -1'),
    ({'trajectory.horizon_iterations': -2}, 'trajectory.horizon_iterations must be >= 0'),
])
def test_bad_trajectory_config_fails_at_start_naming_the_key(flat, needle):
    # Act + Assert
    with pytest.raises(ConfigError) as error:
        build_config(FleetConfig, flat)
    assert needle in str(error.value)
    if 'unknown' in needle:
        assert "'trajectory'" in str(error.value)


class _Agent:
    """What the pilot needs of a DroneAgent, with a telemetry position."""

    def __init__(self, east_m: float, north_m: float) -> None:
        self.waypoints_reached = 0
        self.tasks: list[RoundTask] = []
        self._pose = PoseSample(east_m, north_m, 30.0, 0.0, 0.0)

    def latest_pose(self) -> PoseSample:
        return self._pose

    def begin_flight(self, run_epoch: int) -> None:
        pass

    def train_round(self, task: RoundTask, superseded=None) -> int:
        self.tasks.append(task)
        return task.round_index


def _run_rounds(planner: OnboardPlanner, rounds: list[int]) -> tuple[FakeVehicle, _Agent]:
    vehicle = FakeVehicle(home_enu_m=(*START, 0.0))
    agent = _Agent(*START)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(agent, vehicle, planner.config.flight, pool,
                           geofence=planner.fence, planner=planner)

        async def fly() -> None:
            for r in rounds:
                await pilot.run_round(_task(r))
        asyncio.run(fly())
        pilot_rejected = dict(pilot.plans_rejected)
    vehicle.rejected = pilot_rejected
    return vehicle, agent


def test_the_pilot_flies_the_onboard_mission_through_its_geofence_check():
    # Arrange
    planner = OnboardPlanner(_config(), 0, _samples())
    # Act: survey round 1, then rounds 2 and 3 of the drone's own plan
    vehicle, agent = _run_rounds(planner, [1, 2, 3])
    # Assert: the vehicle flew the station's sweep, then q_2 + diamond, then q_3 + diamond
    flown = [call[1] for call in vehicle.calls if call[0] == 'fly_waypoints']
    assert len(flown) == 3 and not vehicle.rejected
    assert [(w.east_m, w.north_m) for w in flown[0]] == [(w.east_m, w.north_m)
                                                         for w in STATION_PLAN]
    for waypoints, round_index in ((flown[1], 2), (flown[2], 3)):
        q_t = planner.trajectory.target_for(round_index)
        assert (waypoints[0].east_m, waypoints[0].north_m) == (q_t.east_m, q_t.north_m)
    assert [len(t.plan) for t in agent.tasks] == [2, 6, 6]      # what the drone reports
    assert agent.waypoints_reached == 2 + 6 + 6


def test_an_onboard_plan_outside_the_fence_is_rejected_by_the_pilot_not_flown():
    # Arrange: a corrupted plan whose q_2 is outside the fence
    planner = OnboardPlanner(_config(), 0, _samples())
    outside = PlanWaypoint(planner.fence.east_max_m + 50.0, 500.0, 30.0)
    planner.trajectory = OnboardTrajectory(2, (outside,), (-1,), 0.0, (), START, 100.0,
                                           math.inf, 0.0)
    # Act
    vehicle, agent = _run_rounds(planner, [2])
    # Assert: nothing uploaded, the rejection counted, the drone still trained
    assert not [c for c in vehicle.calls if c[0] == 'fly_waypoints']
    assert vehicle.rejected == {'outside_fence': 1} and len(agent.tasks) == 1


def test_the_station_records_the_mission_size_the_drone_reports():
    # Arrange: a drone flying its own 6-waypoint mission, another silent about its mission
    config = build_config(FleetConfig, {'num_drones': 2, 'learning.model': 'tiny_cnn'})
    station = GroundStation(config, *_eval_set())
    opening = station.open_round(now_s=0.0)
    delta = {n: np.zeros_like(w) for n, w in station.weights.items()}
    own = encode_frame(FrameKind.UPDATE, 1, 0, station._fingerprint, delta,
                       {'num_samples': 5, 'mission_waypoints': 6})
    # Act
    assert station.receive_update(own).accepted
    assert station.receive_update(_update(station, 1, 1, 0.0)).accepted
    record = station.close_round(now_s=1.0)
    # Assert
    assert record.waypoints_planned == {0: 6, 1: len(opening.plans[1])}


# --- the user's mode: regions from the raster, priorities from need, a sweep after q_t -------
USER_MODE = {'planner': '2ceoafl', 'sampling': 'sweep', 'priorities': 'deficit',
             'regions': 'map', 'components_per_class': 1}


def _raster_label(east_m: float, north_m: float) -> int:
    """A toy land-cover raster: class 0 in a west square, class 1 in an east one, else 2."""
    if 200.0 <= east_m <= 400.0 and 500.0 <= north_m <= 700.0:
        return 0
    if 800.0 <= east_m <= 1000.0 and 500.0 <= north_m <= 700.0:
        return 1
    return 2


def _user_planner(buffer_labels: list[int]) -> OnboardPlanner:
    config = _config(**USER_MODE)
    fence = config.geofence_enu()
    held = (np.tile(START, (len(buffer_labels), 1)), np.array(buffer_labels, np.int64))
    return OnboardPlanner(config, 0, lambda: held,
                          map_samples=lambda: raster_geotags(_raster_label, fence, 20.0))


def test_raster_geotags_label_one_point_per_cell_of_the_fence():
    # Arrange
    fence = _config().geofence_enu()
    # Act
    positions, labels = raster_geotags(_raster_label, fence, 20.0)
    # Assert: cell centres, inside the fence, labelled by the callable
    cells = round((fence.east_max_m - fence.east_min_m) / 20.0)
    assert len(labels) == cells * round((fence.north_max_m - fence.north_min_m) / 20.0)
    assert positions[:, 0].min() == pytest.approx(fence.east_min_m + 10.0)
    assert positions[:, 0].max() < fence.east_max_m
    assert [_raster_label(e, n) for e, n in positions[:50]] == list(labels[:50])
    assert set(labels) == {0, 1, 2}


def test_map_geotags_leave_out_footprints_over_unknown_land_cover():
    # Arrange: unknown land cover north of 600 m (a raster's nodata), water south of it
    grid = np.full((1200, 1200), 0, np.uint8)
    grid[600:, :] = UNKNOWN
    fence = _config().geofence_enu()
    # Act
    positions, labels = map_geotags(MapLabeler(LandCoverMap(grid, 1.0), 60.0), fence, 30.0)
    # Assert: only the south half's footprints, all water
    assert len(labels) > 0 and set(labels) == {0}
    assert positions[:, 1].max() < 600.0 + footprint_m(30.0, 60.0) / 2
    assert positions[:, 1].min() < 100.0


def test_regions_whose_class_is_not_the_majority_in_their_circle_are_dropped():
    # Arrange: class 0 samples around (0, 0) and class 1 samples around (100, 0)
    positions = np.array([(0.0, 0.0)] * 8 + [(100.0, 0.0)] * 8)
    labels = np.array([0] * 8 + [1] * 8)
    on_zero = GaussianRegion(0, (0.0, 0.0), ((100.0, 0.0), (0.0, 100.0)), 0.5)
    class_1_on_zero = GaussianRegion(1, (5.0, 0.0), ((100.0, 0.0), (0.0, 100.0)), 0.5)
    empty = GaussianRegion(1, (500.0, 0.0), ((100.0, 0.0), (0.0, 100.0)), 0.5)
    # Act
    kept = pure_regions([on_zero, class_1_on_zero, empty], positions, labels, zeta=1.0)
    # Assert
    assert kept == [on_zero, empty]


def test_the_deficit_plan_goes_for_the_class_the_buffer_lacks_and_replans_each_round():
    # Arrange: the buffer holds classes 0 and 2 (2 rounds' worth each after 4 rounds); the
    # raster also has class 1, east; rounds 5 and 6 are left
    planner = _user_planner([0] * 150 + [2] * 150)
    # Act
    fifth = planner.mission_for(_task(5), START)
    first_plan = planner.trajectory
    sixth = planner.mission_for(_task(6), START)
    # Assert: eq. (4) with the held mass sends both rounds to class 1 (log 2 + log 2 + log 2
    # beats log 3 + log 1 + log 2), and round 6 is a new plan
    assert fifth.source == '2ceoafl' and first_plan.classes == (1, 1) and fifth.class_id == 1
    assert sixth.class_id == 1 and planner.trajectory is not first_plan
    assert planner.plans_made == 2 and planner.record()['plans_made'] == 2
    # ... and class 0 when the buffer lacks class 0
    other = _user_planner([1] * 150 + [2] * 150)
    assert other.mission_for(_task(5), START).class_id == 0
    assert other.trajectory.classes == (0, 0)


def test_a_sweep_round_flies_as_far_as_the_station_sweep_inside_the_target_region():
    # Arrange: the station's sweep of this round is long (a 200 x 200 m lawnmower)
    planner = _user_planner([0] * 150 + [2] * 150)
    station = tuple(PlanWaypoint(e, n, 30.0) for e, n in
                    ((100.0, 100.0), (100.0, 300.0), (140.0, 300.0), (140.0, 100.0),
                     (180.0, 100.0), (180.0, 300.0)))
    task = RoundTask(round_index=2, weights={}, plan=station, deadline_s=60.0)
    # Act
    mission = planner.mission_for(task, START)
    # Assert: q_t first, then the region's box, for the station's length less the transit
    station_m = math.hypot(100.0 - START[0], 100.0 - START[1]) + path_length_m(list(station))
    assert planner.round_length_m(task, START) == pytest.approx(
        max(station_m, planner.config.round_reach_m()))
    q_t = mission.target
    transit_m = math.hypot(q_t.east_m - START[0], q_t.north_m - START[1])
    assert mission.waypoints[0] == q_t
    assert mission.sample_m == pytest.approx(planner.round_length_m(task, START) - transit_m)
    # The sweep stays in the square of the class q_t targets (plus the fit's spread). With
    # ψ = 1 eq. (4) does not depend on the order of the visits, so whether the plan flies to
    # class 1 (the class the drone lacks) or class 0 first is a tie (equal objectives); either
    # way class 1 is in the plan.
    squares = {0: (190.0, 410.0), 1: (790.0, 1010.0)}
    assert mission.class_id in squares and 1 in planner.trajectory.classes
    east_lo, east_hi = squares[mission.class_id]
    assert all(east_lo <= w.east_m <= east_hi and 490.0 <= w.north_m <= 710.0
               for w in mission.waypoints[1:])
    assert plan_violations(mission.waypoints, planner.fence) == []


def test_region_sweep_starts_at_the_nearest_corner_and_is_cut_at_the_length():
    # Arrange
    box = (100.0, 100.0, 180.0, 160.0)
    q_t = PlanWaypoint(170.0, 150.0, 30.0)          # nearest corner: (180, 160)
    # Act
    sweep = region_sweep(q_t, [box], 500.0, 40.0)
    # Assert
    assert sweep[0] == q_t and (sweep[1].east_m, sweep[1].north_m) == (180.0, 160.0)
    assert path_length_m(list(sweep)) == pytest.approx(500.0)
    assert all(100.0 <= w.east_m <= 180.0 and 100.0 <= w.north_m <= 160.0 for w in sweep[1:])
    assert region_sweep(q_t, [box], 0.5, 40.0) == (q_t,)
    with pytest.raises(ValueError, match='leg spacing'):
        region_sweep(q_t, [box], 100.0, 0.0)


def test_region_sweep_covers_every_box_nearest_first_before_repeating():
    # Arrange: q_t's box, a far box and a near box of the same class
    q_t = PlanWaypoint(10.0, 10.0, 30.0)
    own, far, near = (0.0, 0.0, 40.0, 40.0), (500.0, 0.0, 540.0, 40.0), (100.0, 0.0, 140.0, 40.0)
    # Act
    sweep = region_sweep(q_t, [own, far, near], 2000.0, 40.0)
    # Assert: own box, then the near one, then the far one, then back
    def box_of(w: PlanWaypoint) -> int:
        return next((i for i, b in enumerate((own, far, near))
                     if b[0] <= w.east_m <= b[2] and b[1] <= w.north_m <= b[3]), -1)
    visits = [box_of(w) for w in sweep[1:-1]]     # the last point is cut, maybe in transit
    assert -1 not in visits
    first_pass = [b for i, b in enumerate(visits) if i == 0 or b != visits[i - 1]]
    assert first_pass[:4] == [0, 2, 1, 2]
    assert path_length_m(list(sweep)) == pytest.approx(2000.0)


def test_sweep_box_is_the_association_square_clipped_to_the_fence():
    # Arrange
    fence = _config().geofence_enu()
    region = GaussianRegion(0, (fence.east_min_m + 10.0, 500.0), ((900.0, 0.0), (0.0, 900.0)),
                            1.0)                                   # λ = 30 m
    # Act + Assert
    assert sweep_box(region, fence, 40.0) == (fence.east_min_m, 470.0,
                                               fence.east_min_m + 40.0, 530.0)
    assert sweep_box(region, fence, 100.0, zeta=0.5) == (fence.east_min_m, 450.0,
                                                         fence.east_min_m + 60.0, 550.0)
    outside = GaussianRegion(0, (fence.east_min_m - 100.0, 500.0), region.covariance_m2, 1.0)
    assert sweep_box(outside, fence, 40.0) is None


def test_map_regions_without_a_raster_fail_at_construction():
    with pytest.raises(ValueError, match='trajectory.regions map'):
        OnboardPlanner(_config(**USER_MODE), 0, _samples())


def test_the_pilot_flies_the_sweep_mission_through_its_geofence_check():
    # Arrange
    planner = _user_planner([0] * 150 + [2] * 150)
    # Act
    vehicle, agent = _run_rounds(planner, [1, 2])
    # Assert: the survey, then q_2 and its sweep, both accepted by the fence check
    flown = [call[1] for call in vehicle.calls if call[0] == 'fly_waypoints']
    assert len(flown) == 2 and not vehicle.rejected
    assert len(flown[1]) == len(agent.tasks[1].plan) > 6


def test_a_drones_region_fit_and_its_priorities_have_their_own_seeds(monkeypatch):
    import fl_uav.fleet.onboard_planner as onboard

    # Arrange: the seeds eq. (1)'s fit and eq. (2)'s M_u are given
    planner = OnboardPlanner(_config(min_samples_per_class=10), 0, _samples())
    seeds = {}
    fit, priorities = onboard.fit_class_regions, onboard.class_priorities
    monkeypatch.setattr(onboard, 'fit_class_regions', lambda *args, seed, **kwargs: (
        seeds.setdefault('fit', seed), fit(*args, seed=seed, **kwargs))[1])
    monkeypatch.setattr(onboard, 'class_priorities', lambda *args, seed: (
        seeds.setdefault('priorities', seed), priorities(*args, seed=seed))[1])
    # Act
    planner.fit_regions()
    planner.priorities(1)
    # Assert
    assert seeds['fit'] != seeds['priorities']
