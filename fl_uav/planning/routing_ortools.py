"""OR-Tools vehicle-routing baseline for FedEx CARP (``fl_uav.planning.routing``).

Formulation (ours; FedEx compares against no external solver):

* Nodes: depot 0 and the N clients; K vehicles start and end at the depot; vehicles may stay
  unused. Arc i -> j costs D_ij / V plus T_trans if i is a client (FedEx eq. (9) split over
  arcs), in centiseconds; a 'time' dimension accumulates it from 0 at the depot.
* Energy (FedEx eqs. (26)/(28)): an 'energy' dimension with transit D_ij P(V) / V plus
  T_trans (p_hover + p_tx) if i is a client, rounded UP to 0.1 J, capacity = the budget. The
  rounding is conservative, so every OR-Tools route fits the exact budget.
* 'sync' (FedEx eq. (25), min max_k Delta_k): the time dimension's global span cost
  (SetGlobalSpanCostCoefficient, = max_k end time since all start at 0) with a coefficient
  100 x the arc cost, so the search minimises the longest round trip first and total time
  second.
* 'async' (FedEx eq. (27), min sum_k R_k Delta_k^2): OR-Tools' routing costs cannot express a
  route cost that is the product of the route's visit count and its squared duration. As the
  closest expressible surrogate we minimise sum_k Delta_k^2 (a quadratic soft span bound of 0
  on every vehicle's time span, SetQuadraticCostSoftSpanUpperBoundForVehicle). The returned
  plan is always scored with the exact eq. (27); R_k Delta_k^2 and Delta_k^2 agree up to the
  weights R_k, which are near N / K when tours are balanced.
* 'async' is warm-started: the 'sync' model runs for a quarter of ``time_limit_s`` to find a
  budget-feasible plan (a cold start with the quadratic cost got stuck dropping clients under
  the near-binding 15 kJ budget), then the surrogate model improves it for the rest.
* Clients may be dropped at a prohibitive cost (so a first solution exists under a tight
  budget); a plan that drops one raises ``PlanInfeasibleError``.
* Search: PATH_CHEAPEST_ARC first solution, GUIDED_LOCAL_SEARCH until ``time_limit_s`` by
  default; ``first_solution`` and ``metaheuristic`` name other OR-Tools strategies (members
  of a portfolio, ``bench/routing_unseen.py``).
"""

from __future__ import annotations

import math

from fl_uav.planning.coverage import PlanInfeasibleError
from fl_uav.planning.routing import RoutePlan, RoutingProblem, _check_objective, plan_from_tours

TIME_SCALE_PER_S = 100  # centiseconds
ENERGY_SCALE_PER_J = 10  # 0.1 J
SYNC_SPAN_WEIGHT = 100


def _build(problem: RoutingProblem, objective: str):
    """The OR-Tools model for ``objective`` ('sync' or 'async'), see the module docstring."""
    from ortools.constraint_solver import pywrapcp

    n_nodes = problem.n_clients + 1
    k = problem.n_uavs
    dist = problem.dist_m
    hover_s = problem.hover_time_per_client_s
    time_cs = [[int(round(TIME_SCALE_PER_S * (dist[i, j] / problem.speed_m_s
                                                + (hover_s if i else 0.0))))
                for j in range(n_nodes)] for i in range(n_nodes)]
    energy_dj = [[int(math.ceil(ENERGY_SCALE_PER_J * (dist[i, j] * problem.energy_per_m_j
                                                      + (problem.energy_per_client_j
                                                         if i else 0.0))))
                  for j in range(n_nodes)] for i in range(n_nodes)]
    manager = pywrapcp.RoutingIndexManager(n_nodes, k, 0)
    routing = pywrapcp.RoutingModel(manager)

    def time_cb(a: int, b: int) -> int:
        return time_cs[manager.IndexToNode(a)][manager.IndexToNode(b)]

    def energy_cb(a: int, b: int) -> int:
        return energy_dj[manager.IndexToNode(a)][manager.IndexToNode(b)]

    time_idx = routing.RegisterTransitCallback(time_cb)
    energy_idx = routing.RegisterTransitCallback(energy_cb)
    routing.SetArcCostEvaluatorOfAllVehicles(time_idx)
    horizon = sum(max(row) for row in time_cs) + 1
    routing.AddDimension(time_idx, 0, horizon, True, 'time')
    budget_dj = int(math.floor(ENERGY_SCALE_PER_J * problem.energy_budget_j))
    routing.AddDimension(energy_idx, 0, budget_dj, True, 'energy')
    time_dim = routing.GetDimensionOrDie('time')
    if objective == 'sync':
        time_dim.SetGlobalSpanCostCoefficient(SYNC_SPAN_WEIGHT)
    else:
        for v in range(k):
            time_dim.SetQuadraticCostSoftSpanUpperBoundForVehicle(pywrapcp.BoundCost(0, 1), v)
    # Dropping a client is allowed at a prohibitive price, so a first solution always exists
    # under a tight budget; a final plan that still drops one is rejected.
    drop_cost = 4 * horizon * horizon * k
    for node in range(1, n_nodes):
        routing.AddDisjunction([manager.NodeToIndex(node)], drop_cost)
    # The callbacks must outlive the solve: keep them referenced from the model tuple.
    return manager, routing, (time_cb, energy_cb)


def _params(time_limit_s: float, first_solution: str = 'PATH_CHEAPEST_ARC',
            metaheuristic: str = 'GUIDED_LOCAL_SEARCH'):
    from ortools.constraint_solver import pywrapcp, routing_enums_pb2

    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = (
        routing_enums_pb2.FirstSolutionStrategy.Value.Value(first_solution))
    params.local_search_metaheuristic = (
        routing_enums_pb2.LocalSearchMetaheuristic.Value.Value(metaheuristic))
    params.time_limit.FromMilliseconds(max(1, int(round(time_limit_s * 1000))))
    return params


def _routes(manager, routing, solution, k: int) -> list[list[int]]:
    tours = []
    for v in range(k):
        idx = routing.Start(v)
        tour = []
        while not routing.IsEnd(idx):
            node = manager.IndexToNode(idx)
            if node:
                tour.append(node)
            idx = solution.Value(routing.NextVar(idx))
        tours.append(tour)
    return tours


def ortools_solve(problem: RoutingProblem, objective: str = 'sync',
                  time_limit_s: float = 60.0, first_solution: str = 'PATH_CHEAPEST_ARC',
                  metaheuristic: str = 'GUIDED_LOCAL_SEARCH') -> RoutePlan:
    """Solve CARP with the OR-Tools routing solver (see the module docstring for the model).

    ``first_solution`` / ``metaheuristic``: names of OR-Tools' ``FirstSolutionStrategy`` and
    ``LocalSearchMetaheuristic`` values (both phases of 'async' use them).

    Raises ``PlanInfeasibleError`` if OR-Tools finds no budget-feasible plan serving every
    client within ``time_limit_s``.
    """
    _check_objective(objective)
    if objective == 'total':
        raise ValueError("ortools_solve supports 'sync' and 'async'")
    if not (math.isfinite(time_limit_s) and time_limit_s > 0):
        raise ValueError(f'time_limit_s must be finite and > 0, got {time_limit_s!r}')
    k = problem.n_uavs
    strategy = (first_solution, metaheuristic)
    if objective == 'sync':
        manager, routing, _keep = _build(problem, 'sync')
        solution = routing.SolveWithParameters(_params(time_limit_s, *strategy))
    else:
        manager, routing, _keep = _build(problem, 'sync')
        warm = routing.SolveWithParameters(_params(0.25 * time_limit_s, *strategy))
        warm_routes = None if warm is None else _routes(manager, routing, warm, k)
        manager, routing, _keep = _build(problem, 'async')
        params = _params(0.75 * time_limit_s, *strategy)
        solution = None
        if warm_routes is not None:
            routing.CloseModelWithParameters(params)
            start = routing.ReadAssignmentFromRoutes(
                [[manager.NodeToIndex(n) for n in t] for t in warm_routes], True)
            if start is not None:
                solution = routing.SolveFromAssignmentWithParameters(start, params)
        if solution is None:
            solution = routing.SolveWithParameters(params)
    if solution is None:
        raise PlanInfeasibleError('no_feasible_plan', f'OR-Tools found no route plan within '
                                  f'{problem.energy_budget_j:.0f} J per tour in '
                                  f'{time_limit_s:g} s')
    tours = [[n - 1 for n in t] for t in _routes(manager, routing, solution, k)]
    if sum(len(t) for t in tours) < problem.n_clients:
        raise PlanInfeasibleError('no_feasible_plan', f'OR-Tools found no route plan serving '
                                  f'every client within {problem.energy_budget_j:.0f} J per '
                                  f'tour in {time_limit_s:g} s')
    return plan_from_tours(problem, objective, tours)
