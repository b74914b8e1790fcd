import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_uav.netmodel.flight import fedex_tour_cost
from fl_uav.planning.coverage import PlanError
from fl_uav.planning.routing import (
    GibbsConfig,
    RoutingProblem,
    brute_force_plan,
    exact_tour,
    gibbs_plan,
    nearest_neighbour_tour,
    objective_value,
    plan_fits_budget,
    plan_from_tours,
    two_opt,
)

# The route stage smaller than its default too (the small instances need less).
FAST = GibbsConfig(n_sweeps=20, n_chains=4, anneal_starts=4, anneal_moves=5_000,
                   anneal_refine_moves=10_000)


def _problem(seed, n_clients, n_uavs, budget_j=15e3, side_m=1200.0):
    rng = np.random.default_rng(seed)
    clients = rng.uniform(0.0, side_m, (n_clients, 2))
    return RoutingProblem((side_m / 2, side_m / 2), clients, n_uavs, energy_budget_j=budget_j)


def _dist(points):
    pts = np.asarray(points)
    return np.linalg.norm(pts[:, None] - pts[None], axis=2).tolist()


def _length(dist, tour):
    nodes = [0, *tour, 0]
    return sum(dist[a][b] for a, b in zip(nodes, nodes[1:]))


@pytest.mark.parametrize('objective', ['sync', 'async'])
@pytest.mark.parametrize('seed', range(4))
@pytest.mark.parametrize('n_clients,n_uavs,budget_j', [(6, 2, 15e3), (7, 3, 15e3),
                                                        (8, 2, 8.5e3), (8, 3, 5.8e3),
                                                        (8, 3, 5.5e3)])
def test_gibbs_matches_brute_force_on_small_instances(objective, seed, n_clients, n_uavs,
                                                      budget_j):
    problem = _problem(seed, n_clients, n_uavs, budget_j)
    try:
        exact = brute_force_plan(problem, objective)
    except PlanError:
        with pytest.raises(PlanError):
            gibbs_plan(problem, objective, seed=0, config=FAST)
        return
    plan = gibbs_plan(problem, objective, seed=0, config=FAST)
    assert plan.cost == pytest.approx(exact.cost, rel=1e-9)
    assert plan_fits_budget(problem, plan)


def test_brute_force_plan_is_optimal_over_all_tours():
    # 5 clients, 2 UAVs: enumerate every assignment and every visiting order directly.
    problem = _problem(11, 5, 2)
    best = {'sync': np.inf, 'async': np.inf}
    for assign in itertools.product(range(2), repeat=5):
        groups = [[i for i in range(5) if assign[i] == k] for k in range(2)]
        for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
            plan = plan_from_tours(problem, 'sync', orders)
            if not plan_fits_budget(problem, plan):
                continue
            sizes = [len(t) for t in orders]
            for objective in best:
                best[objective] = min(best[objective],
                                      objective_value(objective, plan.round_trip_s, sizes))
    for objective, value in best.items():
        assert brute_force_plan(problem, objective).cost == pytest.approx(value, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(3, 30))
def test_two_opt_never_worse_than_nearest_neighbour(seed, n):
    pts = np.random.default_rng(seed).uniform(0, 1000, (n + 1, 2))
    dist = _dist(pts)
    nn = nearest_neighbour_tour(dist, range(1, n + 1))
    improved = two_opt(dist, nn)
    assert sorted(improved) == list(range(1, n + 1))
    assert _length(dist, improved) <= _length(dist, nn) + 1e-9


@pytest.mark.parametrize('seed', range(5))
def test_exact_tour_is_no_longer_than_two_opt(seed):
    pts = np.random.default_rng(seed).uniform(0, 1000, (8, 2))
    dist = _dist(pts)
    heuristic = two_opt(dist, nearest_neighbour_tour(dist, range(1, 8)))
    assert _length(dist, exact_tour(dist, range(1, 8))) <= _length(dist, heuristic) + 1e-9


def test_energy_budget_respected_and_matches_the_flight_model():
    # 16 clients, 3 UAVs, 10 kJ: the budget binds (the unconstrained sync optimum needs
    # 10.0 kJ on one UAV, and the plan found here costs 363 s instead of 360 s).
    problem = _problem(3, 16, 3, budget_j=10e3, side_m=1600.0)
    for objective in ('sync', 'async'):
        plan = gibbs_plan(problem, objective, seed=1, config=FAST)
        assert plan_fits_budget(problem, plan)
        assert len(plan.assignment) == 16
        assert sorted(c for t in plan.tours for c in t) == list(range(16))
        for tour, energy_j, rtt_s in zip(plan.tours, plan.energy_j, plan.round_trip_s):
            cost = fedex_tour_cost(np.vstack([problem.depot_m, problem.clients_m[list(tour)]]))
            assert energy_j == pytest.approx(cost.total_energy_j)
            assert rtt_s == pytest.approx(cost.total_time_s)
            assert energy_j <= 10e3


def test_budget_below_nearest_round_trip_raises_with_reason():
    # Nearest client ~ 100 m away: 321.6 J hovering + 600 J flying > 800 J.
    with pytest.raises(PlanError, match='below one round trip to the nearest client'):
        RoutingProblem((0.0, 0.0), [(100.0, 0.0), (500.0, 0.0)], 2, energy_budget_j=800.0)


def test_unreachable_client_raises_with_reason():
    with pytest.raises(PlanError, match='client 1 is 3000 m from the depot'):
        RoutingProblem((0.0, 0.0), [(100.0, 0.0), (3000.0, 0.0)], 2, energy_budget_j=15e3)


def test_too_few_uavs_for_the_budget_raises():
    # Each client alone fits; all of them on one UAV do not.
    problem = _problem(0, 6, 1, budget_j=6e3)
    with pytest.raises(PlanError, match='within 6000 J'):
        brute_force_plan(problem, 'sync')
    with pytest.raises(PlanError, match='within 6000 J'):
        gibbs_plan(problem, 'sync', config=FAST)


@pytest.mark.parametrize('objective', ['sync', 'async'])
def test_same_seed_same_plan(objective):
    problem = _problem(5, 12, 3)
    first = gibbs_plan(problem, objective, seed=7, config=FAST)
    assert gibbs_plan(problem, objective, seed=7, config=FAST) == first


@pytest.mark.parametrize('kwargs,match', [
    ({'depot_m': (0.0,)}, 'depot_m'),
    ({'clients_m': np.zeros((0, 2))}, 'clients_m'),
    ({'clients_m': [[1.0, np.nan]]}, 'finite'),
    ({'n_uavs': 0}, 'n_uavs'),
    ({'speed_m_s': 0.0}, 'speed_m_s'),
    ({'energy_budget_j': -1.0}, 'energy_budget_j'),
    ({'hover_time_per_client_s': -1.0}, 'hover_time_per_client_s'),
])
def test_problem_validation(kwargs, match):
    args = {'depot_m': (0.0, 0.0), 'clients_m': [[100.0, 0.0]], 'n_uavs': 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        RoutingProblem(**args)


def test_unknown_objective_and_size_limits():
    problem = _problem(0, 9, 2)
    with pytest.raises(ValueError, match='objective'):
        gibbs_plan(problem, 'fastest')
    with pytest.raises(ValueError, match='limited to 8'):
        brute_force_plan(problem)


def test_objectives_follow_fedex_eqs_25_and_27():
    assert objective_value('sync', [3.0, 5.0], [1, 2]) == 5.0
    assert objective_value('async', [3.0, 5.0], [1, 2]) == 1 * 9.0 + 2 * 25.0
    assert objective_value('total', [3.0, 5.0], [1, 2]) == 8.0
    assert objective_value('sync', [3.0, 7.0], [1, 0]) == 3.0  # an idle UAV costs nothing


def test_ortools_baseline_matches_brute_force_for_sync():
    pytest.importorskip('ortools')
    from fl_uav.planning.routing_ortools import ortools_solve

    problem = _problem(2, 6, 2, budget_j=8e3)
    exact = brute_force_plan(problem, 'sync')
    plan = ortools_solve(problem, 'sync', time_limit_s=0.5)
    assert plan_fits_budget(problem, plan)
    assert plan.cost == pytest.approx(exact.cost, rel=1e-3)  # time rounded to 0.01 s per arc
    plan = ortools_solve(problem, 'async', time_limit_s=0.5)
    assert plan_fits_budget(problem, plan)
    assert sorted(c for t in plan.tours for c in t) == list(range(6))


def test_sws_plan_beats_the_min_max_plan_under_eq_27_on_the_fedex_layout():
    # The engine's FedEx FMNIST layout (40 clients in 5 x 2 blocks of 2 km x 2 km, station in
    # the centre, K = 4, 15 kJ; config/experiments/fedex_*_fmnist.yaml, seed 0), searched with
    # the default sampler. Eq. (27)'s own optimiser must not lose to the eq. (25) plan on
    # eq. (27). It did while each chain scaled its temperature by its own penalised start
    # cost: random starts break the budget, so half the chains never cooled (9.39e6 vs 9.29e6).
    from fl_uav.planning.placement import place_clients_enu_m

    clients, _ = place_clients_enu_m(40, 2000.0, 2000.0, 0, 5, 2)
    problem = RoutingProblem((1000.0, 1000.0), clients, 4)
    sws = gibbs_plan(problem, 'async', seed=0)
    min_max = gibbs_plan(problem, 'sync', seed=0)
    assert plan_fits_budget(problem, sws)
    assert sws.cost <= plan_from_tours(problem, 'async', min_max.tours).cost
