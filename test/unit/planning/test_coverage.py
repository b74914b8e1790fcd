import pytest

from fl_uav.planning.coverage import (
    CoverageConfig,
    PlanError,
    PlanWaypoint,
    check_geofence,
    coverage_plan,
    geofence_box,
    lawnmower,
    path_length_m,
    sector_of,
)


def test_sectors_tile_the_world_without_overlap():
    boxes = [sector_of(d, 4, 1000.0, 0.0) for d in range(4)]
    assert sorted(boxes) == sorted([(0, 0, 500, 500), (500, 0, 1000, 500),
                                    (0, 500, 500, 1000), (500, 500, 1000, 1000)])


def test_lawnmower_sweeps_the_box():
    plan = lawnmower((0.0, 0.0, 80.0, 100.0), leg_spacing_m=40.0, altitude_m=30.0)
    assert [(w.east_m, w.north_m) for w in plan] == [
        (0, 0), (0, 100), (40, 100), (40, 0), (80, 0), (80, 100)]
    assert path_length_m(plan) == pytest.approx(3 * 100 + 2 * 40)


def test_coverage_plan_stays_in_sector_and_changes_per_round():
    config = CoverageConfig(box_m=100.0, leg_spacing_m=25.0, assignment='fixed')
    sector = sector_of(3, 4, 1200.0, config.margin_m)
    plans = [coverage_plan(3, 4, r, 1200.0, config, seed=1) for r in (1, 2)]
    for plan in plans:
        for w in plan:
            assert sector[0] <= w.east_m <= sector[2] and sector[1] <= w.north_m <= sector[3]
            assert w.up_m == config.altitude_m
    assert plans[0] != plans[1]
    assert plans[0] == coverage_plan(3, 4, 1, 1200.0, config, seed=1)


def test_geofence_violation_is_reported():
    fence = geofence_box(100.0, 10.0)
    with pytest.raises(PlanError, match='waypoint 1'):
        check_geofence([PlanWaypoint(50, 50, 20), PlanWaypoint(95, 50, 20)], fence)


def test_sector_narrower_than_a_leg_is_infeasible():
    with pytest.raises(PlanError, match='narrower'):
        coverage_plan(0, 100, 1, 200.0, CoverageConfig(box_m=100, leg_spacing_m=50), seed=0)


def test_rotating_assignment_visits_every_sector():
    config = CoverageConfig(box_m=100.0, leg_spacing_m=25.0, assignment='rotating')
    visited = set()
    for round_index in range(1, 5):
        plan = coverage_plan(0, 4, round_index, 1200.0, config, seed=1)
        for sector_id in range(4):
            e0, n0, e1, n1 = sector_of(sector_id, 4, 1200.0, config.margin_m)
            if all(e0 <= w.east_m <= e1 and n0 <= w.north_m <= n1 for w in plan):
                visited.add(sector_id)
    assert visited == {0, 1, 2, 3}


def test_unknown_assignment_lists_choices():
    with pytest.raises(ValueError, match='rotating'):
        CoverageConfig(assignment='random')
