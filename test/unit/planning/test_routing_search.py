import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest

from fl_uav.planning.routing import (
    GibbsConfig,
    _excess_j,
    _key,
    exact_tour,
    gibbs_plan,
    nearest_neighbour_tour,
    plan_fits_budget,
    plan_from_tours,
    two_opt,
)
from fl_uav.planning.routing_instances import UNSEEN_SEEDS, fedex_layout_instance
from fl_uav.planning.routing_search import (
    RouteSearch,
    held_karp_tour,
    sector_tours,
    tour_length,
)

REFERENCE = Path(__file__).resolve().parents[3] / 'bench' / 'data' / \
    'routing_unseen_reference.json'


def _dist(seed, n):
    pts = np.random.default_rng(seed).uniform(0, 1000, (n + 1, 2))
    return np.linalg.norm(pts[:, None] - pts[None], axis=2).tolist()


def _brute_force_tour(dist, nodes):
    """Every order; the shortest as numpy sums it, ties the first (exact_tour's old code,
    which returned 1-2 nodes sorted)."""
    if len(nodes) <= 2:
        return sorted(nodes)
    d = np.asarray(dist)
    perms = np.array(list(itertools.permutations(sorted(nodes))))
    lengths = (d[0, perms[:, 0]] + d[perms[:, :-1], perms[:, 1:]].sum(axis=1)
               + d[perms[:, -1], 0])
    return [int(x) for x in perms[int(np.argmin(lengths))]]


@pytest.mark.parametrize('seed', range(4))
def test_held_karp_matches_brute_force(seed):
    dist = _dist(seed, 8)
    nodes = list(range(1, 9))
    assert tour_length(dist, held_karp_tour(dist, nodes)) == pytest.approx(
        tour_length(dist, _brute_force_tour(dist, nodes)), rel=1e-12)


@pytest.mark.parametrize('seed', range(6))
def test_exact_tour_is_the_brute_force_tour_in_its_direction(seed):
    # exact_tour is Held-Karp now; on points in general position it returns the very order
    # the brute force it replaced did (the direction included), so plans do not change.
    rng = np.random.default_rng(seed)
    dist = _dist(seed + 100, 12)
    for n in range(1, 9):
        nodes = sorted(rng.choice(np.arange(1, 13), n, replace=False).tolist())
        assert exact_tour(dist, nodes) == _brute_force_tour(dist, nodes)


def test_held_karp_beats_or_ties_two_opt_on_larger_tours():
    for seed in range(3):
        dist = _dist(seed, 13)
        nodes = list(range(1, 14))
        tour = held_karp_tour(dist, nodes)
        assert sorted(tour) == nodes
        assert tour_length(dist, tour) <= tour_length(
            dist, two_opt(dist, nearest_neighbour_tour(dist, nodes))) + 1e-9


@pytest.mark.parametrize('objective', ['sync', 'async', 'total'])
def test_annealing_keeps_every_client_once_and_its_lengths_exact(objective):
    problem = fedex_layout_instance(3)
    search = RouteSearch(problem, objective, sector_tours(problem, 0.5))
    start = search.key()
    search.anneal(random.Random(1), 20_000, 0.02, 2e-5, 0.05, 1.0, 0.05)
    assert sorted(n for r in search.routes for n in r) == list(range(1, 41))
    for route, length in zip(search.routes, search.length):
        assert length == pytest.approx(tour_length(problem._dist, route), rel=1e-12)
    search.descend()
    assert search.key() <= start
    plan = plan_from_tours(problem, objective, [[n - 1 for n in r] for r in search.routes])
    assert plan.cost == pytest.approx(search.key()[1], rel=1e-12)
    assert plan_fits_budget(problem, plan)


def test_instances_are_fedex_layout_and_stable():
    problem = fedex_layout_instance(UNSEEN_SEEDS[0])
    clients = problem.clients_m
    assert clients.shape == (40, 2) and problem.n_uavs == 4
    assert problem.energy_budget_j == 15e3
    blocks = (clients[:, 0] // 400).astype(int) + 5 * (clients[:, 1] // 1000).astype(int)
    assert np.bincount(blocks, minlength=10).tolist() == [4] * 10
    # The cached OR-Tools reference was solved on exactly these positions.
    reference = json.loads(REFERENCE.read_text())['instances'][str(UNSEEN_SEEDS[0])]
    member = reference['sync'][0]
    assert plan_from_tours(problem, 'sync', member['tours']).cost == pytest.approx(
        member['cost'], rel=1e-12)


@pytest.mark.parametrize('seed,objective', [(1002, 'sync'), (1018, 'async')])
def test_planner_within_1_percent_of_the_cached_ortools_portfolio(seed, objective):
    # Held-out instances (never used to choose a setting) with their cached reference, the
    # best of bench/routing_unseen.py's OR-Tools portfolio under the exact eq. (25)/(27). The
    # planner before issue 27 (6 Gibbs chains alone) was 3.78 % (1002 sync) and 3.63 %
    # (1018 async) above it: the two worst of its 40 solves; the route stage ties or beats it.
    data = json.loads(REFERENCE.read_text())['instances'][str(seed)]
    problem = fedex_layout_instance(seed)
    sources = (objective, 'sync') if objective == 'async' else (objective,)
    best = min(plan_from_tours(problem, objective, m['tours']).cost
               for source in sources for m in data[source] if m['tours'] is not None)
    plan = gibbs_plan(problem, objective, seed=0, config=GibbsConfig())
    assert plan_fits_budget(problem, plan)
    assert plan.cost <= 1.01 * best


@pytest.mark.parametrize('objective', ['sync', 'async', 'total'])
def test_route_search_scores_plans_as_the_sampler_does(objective):
    # The route search's descent and its choice among runs are right only while
    # RouteSearch.key ranks plans as routing._key does (both call routing_search.plan_key; the
    # RTTs and energies are computed on each side). Random plans of a held-out instance: random
    # assignments (most break the budget; some leave a UAV idle) and short anneals from rotated
    # sectors (mostly within it, so eq. (25) / (27) decides).
    problem = fedex_layout_instance(UNSEEN_SEEDS[1])
    rng = np.random.default_rng(0)
    plans = []
    for trial in range(24):
        if trial % 2:
            start = RouteSearch(problem, objective, sector_tours(problem, rng.uniform(0, 7)))
            start.anneal(random.Random(trial), 5000, 0.02, 2e-5, 0.05, 1.0)
            tours = [[n - 1 for n in t] for t in start.routes]
        else:
            labels = rng.integers(trial % 4 == 0, problem.n_uavs, problem.n_clients)
            tours = [rng.permutation(np.flatnonzero(labels == k)).tolist()
                     for k in range(problem.n_uavs)]
        plan = plan_from_tours(problem, objective, tours)
        search = RouteSearch(problem, objective, [[c + 1 for c in t] for t in tours])
        sizes = [len(t) for t in tours]
        assert search.length == list(plan.length_m)
        for length, n, rtt in zip(search.length, sizes, plan.round_trip_s):
            assert search.rtt(length, n) == pytest.approx(rtt, rel=1e-15, abs=0.0)
        assert sum(search.excess(ln, n) for ln, n in zip(search.length, sizes)) == \
            _excess_j(problem, plan.energy_j)
        expected = _key(problem, objective, plan.round_trip_s, sizes, plan.energy_j)
        key = search.key()
        assert len(key) == len(expected) and key[0] == expected[0]
        assert key[1:] == pytest.approx(expected[1:], rel=1e-14, abs=0.0)
        assert expected[1] == plan.cost   # eq. (25) / (27) / total, as routing scores it
        plans.append((expected, key, min(sizes)))
    assert {p[0][0] == 0 for p in plans} == {True, False}   # within and over the budget
    assert min(p[2] for p in plans) == 0                    # an idle UAV
    by_sampler = sorted(range(len(plans)), key=lambda i: plans[i][0])
    assert sorted(range(len(plans)), key=lambda i: plans[i][1]) == by_sampler
