import math

import numpy as np
import pytest

from fl_uav.planning.coverage import PlanError, PlanWaypoint, check_geofence
from fl_uav.planning.trajectory import (
    GaussianRegion,
    TrajectoryConstraints,
    class_balance,
    class_priorities,
    expected_class_samples,
    fit_class_regions,
    lawnmower_baseline,
    plan_trajectory,
    plan_trajectory_detailed,
    random_baseline,
    relaxation_upper_bound,
    total_path_m,
    two_ceoafl_objective,
)
from fl_uav.planning.trajectory_tour import region_tour_warm_start

FENCE = (0.0, 0.0, 300.0, 300.0)
START = (150.0, 150.0)


def _region(cls: int, east: float, north: float, std: float) -> GaussianRegion:
    return GaussianRegion(cls, (east, north), ((std ** 2, 0.0), (0.0, std ** 2)), 1.0)


def _regions() -> list[GaussianRegion]:
    return [_region(0, 60.0, 60.0, 20.0), _region(1, 240.0, 80.0, 20.0),
            _region(2, 150.0, 250.0, 25.0)]


def _constraints(**kwargs) -> TrajectoryConstraints:
    base = dict(fence=FENCE, max_speed_m_s=5.0, round_time_s=20.0, budget_m=900.0,
                time_limit_s=20.0)
    base.update(kwargs)
    return TrajectoryConstraints(**base)


def test_objective_hand_checked():
    regions = [_region(0, 0.0, 0.0, 10.0), _region(1, 100.0, 0.0, 10.0)]
    psi = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    waypoints = [PlanWaypoint(5.0, 0.0, 30.0), PlanWaypoint(100.0, 9.0, 30.0),
                 PlanWaypoint(50.0, 0.0, 30.0)]
    # Round 0 in class 0 (5 m < 10 m), round 1 in class 1 (9 m), round 2 nowhere.
    samples = expected_class_samples(waypoints, regions, psi)
    assert samples == pytest.approx([0.7, 0.8])
    expected = math.log(0.7 + 1e-3) + math.log(0.8 + 1e-3)
    assert two_ceoafl_objective(waypoints, regions, psi) == pytest.approx(expected)
    balance = class_balance(samples)
    assert balance['classes_visited'] == 2
    assert balance['min_over_max'] == pytest.approx(0.7 / 0.8)


def _check_plan(plan: list[PlanWaypoint], c: TrajectoryConstraints) -> None:
    check_geofence(plan, c.fence, c.max_altitude_m)
    points = np.array([START] + [(w.east_m, w.north_m) for w in plan])
    steps = np.linalg.norm(np.diff(points, axis=0), axis=1)
    assert steps.max() <= c.step_m + 1e-6
    assert total_path_m(START, plan) <= c.budget_m + 1e-6
    assert all(c.min_altitude_m <= w.up_m <= c.max_altitude_m for w in plan)


@pytest.mark.parametrize('seed', [0, 1])
def test_sca_beats_baselines_and_respects_constraints(seed):
    T = 8
    psi = class_priorities(T, 3, seed)
    regions = _regions()
    c = _constraints()
    result = plan_trajectory_detailed(regions, psi, START, c, seed=seed)
    _check_plan(result.waypoints, c)
    length = total_path_m(START, result.waypoints)
    lawn = lawnmower_baseline(c.fence, START, T, max(length, c.step_m), c.altitude_m, c.step_m)
    rand = random_baseline(c, START, T, seed)
    _check_plan(rand, c)
    ours = two_ceoafl_objective(result.waypoints, regions, psi)
    assert ours == pytest.approx(result.objective)
    assert ours >= two_ceoafl_objective(lawn, regions, psi) - 1e-9
    assert ours >= two_ceoafl_objective(rand, regions, psi) - 1e-9
    assert sum(cl >= 0 for cl in result.classes) >= 3  # it visits every class at least once


def test_tight_budget_is_respected():
    c = _constraints(budget_m=250.0)
    plan = plan_trajectory(_regions(), class_priorities(6, 3, 2), START, c, seed=0)
    _check_plan(plan, c)


def test_deterministic_for_a_seed():
    psi = class_priorities(6, 3, 3)
    a = plan_trajectory(_regions(), psi, START, _constraints(), seed=4)
    b = plan_trajectory(_regions(), psi, START, _constraints(), seed=4)
    assert a == b


@pytest.mark.parametrize('kwargs, regions, reason', [
    (dict(fence=(0.0, 0.0, 50.0, 300.0)), None, 'smaller than one step'),
    (dict(budget_m=50.0), None, 'below one step'),
    (dict(altitude_m=150.0), None, 'outside the band'),
    ({}, [], 'no class regions'),
])
def test_infeasible_requests_raise_with_reason(kwargs, regions, reason):
    with pytest.raises(PlanError, match=reason):
        plan_trajectory(_regions() if regions is None else regions,
                        class_priorities(4, 3, 0), START, _constraints(**kwargs))


def test_gmm_recovers_two_separated_clusters():
    rng = np.random.default_rng(0)
    a = rng.normal([100.0, 100.0], 10.0, (300, 2))
    b = rng.normal([500.0, 300.0], 20.0, (300, 2))
    positions = np.vstack([a, b, rng.normal([300.0, 700.0], 5.0, (50, 2))])
    labels = np.array([0] * 600 + [1] * 50)
    regions = fit_class_regions(positions, labels, num_classes=3, components_per_class=2,
                                seed=1)
    class0 = sorted((r for r in regions if r.class_id == 0), key=lambda r: r.center_enu_m)
    assert len(class0) == 2 and not any(r.class_id == 2 for r in regions)
    assert np.allclose(class0[0].center_enu_m, [100, 100], atol=3.0)
    assert np.allclose(class0[1].center_enu_m, [500, 300], atol=5.0)
    assert class0[0].radius_m == pytest.approx(10.0, rel=0.15)
    assert class0[1].radius_m == pytest.approx(20.0, rel=0.15)
    assert sum(r.weight for r in regions) == pytest.approx(1.0)
    again = fit_class_regions(positions, labels, 3, 2, seed=1)
    assert again == regions


# --------------------------------------------------------------------------------------------
# Warm start, windowed SCA and the relaxation bound (T = 100-style instances, scaled down)

WIDE_FENCE = (0.0, 0.0, 1000.0, 1000.0)
WIDE_START = (500.0, 500.0)


def _spread_regions() -> list[GaussianRegion]:
    """Six classes on a 300 m circle around the start, plus a seventh outside the fence."""
    angles = 2.0 * math.pi * np.arange(6) / 6.0 + 0.3
    regions = [_region(k, 500.0 + 300.0 * math.cos(a), 500.0 + 300.0 * math.sin(a), 25.0)
               for k, a in enumerate(angles)]
    return regions + [_region(6, 1500.0, 500.0, 25.0)]


def _wide_constraints(**kwargs) -> TrajectoryConstraints:
    # Work limits keep the tests fast and deterministic: no whole-horizon MILP (its HiGHS root
    # node costs seconds here); the wall-clock safety caps keep their defaults.
    base = dict(fence=WIDE_FENCE, max_speed_m_s=5.0, round_time_s=20.0, budget_m=2400.0,
                horizon_iterations=0)
    base.update(kwargs)
    return TrajectoryConstraints(**base)


def _check_wide(xy: np.ndarray, c: TrajectoryConstraints) -> None:
    east_min, north_min, east_max, north_max = c.fence
    assert np.all((xy[:, 0] >= east_min) & (xy[:, 0] <= east_max))
    assert np.all((xy[:, 1] >= north_min) & (xy[:, 1] <= north_max))
    steps = np.linalg.norm(np.diff(np.vstack([np.array(WIDE_START)[None], xy]), axis=0), axis=1)
    assert steps.max() <= c.step_m + 1e-6
    assert steps.sum() <= c.budget_m + 1e-6


def test_warm_start_is_feasible_and_scored_by_eq4():
    T = 30
    psi = class_priorities(T, 7, 5)
    regions = _spread_regions()
    c = _wide_constraints()
    shrink = math.cos(math.pi / c.polygon_sides)
    radii = np.array([r.radius_m * shrink for r in regions])
    xy, objective = region_tour_warm_start(
        regions, psi, np.array(WIDE_START), c.fence, radii, c.step_m * shrink,
        c.budget_m * shrink, c.eps_tol, 10,
        lambda p: two_ceoafl_objective(p, regions, psi, c.zeta, c.eps_tol))
    assert xy.shape == (T, 2)
    _check_wide(xy, c)
    assert objective == pytest.approx(two_ceoafl_objective(xy, regions, psi))
    # It beats staying put and the random walk the SCA used to start from, and it never goes
    # to the region outside the fence.
    stay = np.repeat(np.array(WIDE_START)[None], T, axis=0)
    assert objective > two_ceoafl_objective(stay, regions, psi)
    assert objective > two_ceoafl_objective(random_baseline(c, WIDE_START, T, 0), regions, psi)
    assert expected_class_samples(xy, regions, psi)[6] == 0
    again, _ = region_tour_warm_start(
        regions, psi, np.array(WIDE_START), c.fence, radii, c.step_m * shrink,
        c.budget_m * shrink, c.eps_tol, 10,
        lambda p: two_ceoafl_objective(p, regions, psi, c.zeta, c.eps_tol))
    assert np.array_equal(xy, again)   # deterministic


def test_plan_reaches_every_reachable_class_and_respects_limits():
    T = 30
    psi = class_priorities(T, 7, 5)
    regions = _spread_regions()
    c = _wide_constraints()
    plan = plan_trajectory_detailed(regions, psi, WIDE_START, c)
    xy = np.array([(w.east_m, w.north_m) for w in plan.waypoints])
    _check_wide(xy, c)
    samples = expected_class_samples(plan.waypoints, regions, psi)
    assert (samples[:6] > 0).all() and samples[6] == 0   # class 6 is outside the fence
    # Windows never make the plan worse than the warm start they start from.
    assert plan.objective >= plan.warm_start_objective - 1e-12
    assert plan.iterations >= 1
    # No plan beats the relaxation bound; baselines of equal length are far below.
    assert plan.objective <= plan.upper_bound + 1e-9
    length = total_path_m(WIDE_START, plan.waypoints)
    lawn = lawnmower_baseline(c.fence, WIDE_START, T, length, c.altitude_m, c.step_m)
    rand = random_baseline(c, WIDE_START, T, 0)
    assert plan.objective > two_ceoafl_objective(lawn, regions, psi)
    assert plan.objective > two_ceoafl_objective(rand, regions, psi)


def test_no_windows_returns_the_warm_start():
    psi = class_priorities(20, 7, 6)
    c = _wide_constraints(window_passes=0)
    plan = plan_trajectory_detailed(_spread_regions(), psi, WIDE_START, c)
    assert plan.iterations == 0
    assert plan.objective == pytest.approx(plan.warm_start_objective)


def test_budget_binds_and_is_respected_on_a_long_horizon():
    psi = class_priorities(40, 7, 7)
    c = _wide_constraints(budget_m=900.0)
    plan = plan_trajectory_detailed(_spread_regions(), psi, WIDE_START, c)
    _check_wide(np.array([(w.east_m, w.north_m) for w in plan.waypoints]), c)


def test_relaxation_bound_hand_checked():
    # One class, its region at the start: every round can be associated, bound = log(T + ε).
    psi = np.ones((3, 1))
    regions = [_region(0, 150.0, 150.0, 20.0)]
    bound = relaxation_upper_bound(regions, psi, START, _constraints())
    assert bound == pytest.approx(math.log(3.0 + 1e-3), abs=1e-3)
    assert bound >= math.log(3.0 + 1e-3) - 1e-9
    # A class whose region is out of reach of the whole budget adds only log(ε).
    far = regions + [_region(1, 290.0, 290.0, 5.0)]
    psi2 = np.full((3, 2), 0.5)
    bound2 = relaxation_upper_bound(far, psi2, START, _constraints(budget_m=120.0))
    assert bound2 == pytest.approx(math.log(1.5 + 1e-3) + math.log(1e-3), abs=1e-3)


def test_detour_reaches_the_anchor_on_time_and_rejoins_within_the_step():
    from fl_uav.planning.trajectory import _detour
    T, step = 12, 100.0
    xy = np.array([[100.0 + 10.0 * t, 100.0] for t in range(T)])
    anchor = np.array([100.0, 450.0])
    out = _detour(xy, np.array([100.0, 100.0]), anchor, arrive=5, dwell=2, step_m=step)
    assert np.allclose(out[5], anchor) and np.allclose(out[6], anchor)
    steps = np.linalg.norm(np.diff(np.vstack([[100.0, 100.0], out]), axis=0), axis=1)
    assert steps.max() <= step + 1e-9
    assert np.allclose(out[-1], xy[-1])              # back on the plan before the end
    assert np.allclose(out[0], xy[0])                # left the plan as late as possible
    assert _detour(xy, np.array([100.0, 100.0]), anchor, arrive=2, dwell=1, step_m=step) is None


@pytest.mark.parametrize('held, expected_classes', [
    ([4.0, 0.0, 0.0], [1, 2]),      # class 0 held: the two rounds go to the lacking classes
    ([0.0, 4.0, 4.0], [0, 0]),      # classes 1 and 2 held: both rounds on class 0
])
def test_held_mass_steers_the_plan_to_the_classes_the_drone_lacks(held, expected_classes):
    # Arrange: ψ = 1 (no time preference), two rounds, three reachable classes
    psi = np.ones((2, 3))
    constraints = _constraints(round_time_s=60.0, budget_m=math.inf)
    # Act
    plan = plan_trajectory_detailed(_regions(), psi, START, constraints, seed=0,
                                    held_mass=np.array(held))
    # Assert: eq. (4) with h_c inside the log, maximised over which classes get the rounds
    assert sorted(plan.classes) == expected_classes
    expected = sum(math.log(h + plan.classes.count(c) + 1e-3) for c, h in enumerate(held))
    assert plan.objective == pytest.approx(expected)
    assert two_ceoafl_objective(plan.waypoints, _regions(), psi,
                                held_mass=np.array(held)) == pytest.approx(expected)


@pytest.mark.parametrize('held', [[1.0, 2.0], [1.0, -1.0, 0.0], [np.nan, 0.0, 0.0]])
def test_malformed_held_mass_is_a_plan_error(held):
    with pytest.raises(PlanError, match='held_mass'):
        plan_trajectory_detailed(_regions(), np.ones((2, 3)), START, _constraints(),
                                 held_mass=np.array(held))


def test_relaxation_bound_counts_the_held_mass():
    # One class, its region at the start: bound = log(T + h + ε).
    bound = relaxation_upper_bound([_region(0, 150.0, 150.0, 20.0)], np.ones((3, 1)), START,
                                   _constraints(), held_mass=np.array([2.0]))
    assert bound == pytest.approx(math.log(5.0 + 1e-3), abs=1e-3)
    assert bound >= math.log(5.0 + 1e-3) - 1e-9


def test_windowed_pipeline_honours_the_held_mass():
    # The warm start, windows, detours and bound all see h_c: the reported objectives are
    # eq. (4) with h_c, the plan never falls below its warm start and never beats the bound.
    T = 30
    psi = class_priorities(T, 7, 5)
    regions = _spread_regions()
    c = _wide_constraints()
    held = np.array([6.0, 6.0, 6.0, 0.0, 0.0, 0.0, 0.0])
    plan = plan_trajectory_detailed(regions, psi, WIDE_START, c, held_mass=held)
    _check_wide(np.array([(w.east_m, w.north_m) for w in plan.waypoints]), c)
    assert plan.objective == pytest.approx(
        two_ceoafl_objective(plan.waypoints, regions, psi, c.zeta, c.eps_tol, held))
    assert plan.warm_start_objective - 1e-12 <= plan.objective <= plan.upper_bound + 1e-9
    assert plan.upper_bound == pytest.approx(
        relaxation_upper_bound(regions, psi, WIDE_START, c, held))
    # The classes the drone lacks get more of the plan than those it holds.
    samples = expected_class_samples(plan.waypoints, regions, psi)
    assert samples[3:6].sum() > samples[:3].sum()


# --------------------------------------------------------------------------------------------
# Work limits: the plan is a function of the inputs; wall-clock caps are safety nets


def test_two_runs_on_the_same_inputs_give_byte_identical_waypoints():
    # Arrange: a case where every stage runs (windows, then the whole-horizon HiGHS MILP,
    # whose root node raises eq. (4) here); the wall-clock caps keep their (slack) defaults
    psi = class_priorities(12, 7, 5)
    c = _wide_constraints(window_passes=1, horizon_iterations=1)
    # Act
    first = plan_trajectory_detailed(_spread_regions(), psi, WIDE_START, c)
    second = plan_trajectory_detailed(_spread_regions(), psi, WIDE_START, c)
    # Assert
    as_bytes = [np.array([(w.east_m, w.north_m, w.up_m) for w in plan.waypoints]).tobytes()
                for plan in (first, second)]
    assert as_bytes[0] == as_bytes[1]
    assert (first.objective, first.iterations) == (second.objective, second.iterations)
    assert not first.time_capped and not second.time_capped
    assert first.objective > first.warm_start_objective


def test_a_binding_safety_cap_returns_the_warm_start_and_says_so():
    # Arrange: a plan budget every run exceeds before its first window (the warm start alone
    # takes far longer than 1 µs)
    psi = class_priorities(12, 7, 5)
    c = _wide_constraints(time_budget_s=1e-6)
    # Act
    plan = plan_trajectory_detailed(_spread_regions(), psi, WIDE_START, c)
    # Assert
    assert plan.time_capped
    assert plan.iterations == 0
    assert plan.objective == pytest.approx(plan.warm_start_objective)


@pytest.mark.parametrize('kwargs, needle', [
    (dict(node_limit=0), 'node_limit must be >= 1'),
    (dict(horizon_node_limit=0), 'horizon_node_limit must be >= 1'),
    (dict(max_sweeps=0), 'max_sweeps must be >= 1'),
    (dict(window_passes=-1), 'window_passes must be >= 0'),
    (dict(convergence_tolerance=-1e-3), 'convergence_tolerance must be >= 0'),
    (dict(time_budget_s=0.0), 'time_budget_s must be > 0'),
])
def test_malformed_work_limits_are_plan_errors_naming_the_limit(kwargs, needle):
    with pytest.raises(PlanError, match=needle):
        plan_trajectory_detailed(_regions(), class_priorities(4, 3, 0), START,
                                 _constraints(**kwargs))
