"""What ``fl-uav plan CONFIG`` plans: a config schema and the two kinds of plan request.

``kind: trajectory`` plans one drone's 2CEOAFL trajectory (eq. (4) by SCA, Algorithm 1) over a
generated world's class regions (eq. (1)) with time-varying priorities (eq. (2)), and the two
baselines it is judged against: a lawnmower sweep of the same path length and a seeded random
walk. ``kind: routes`` plans FedEx client assignment and tours (CARP, Sec. VI: eq. (25) 'sync'
or eq. (27) 'async' under the energy budget (26)/(28)) by Gibbs sampling with 2-OPT tours.

Config files are ROS 2 parameter files (``/**: ros__parameters:``), validated by
:func:`fl_uav.configschema.build_config` into :class:`PlanConfig`; a wrong key or value raises
ConfigError naming it. Results are plain dicts, ready for JSON. Positions: local ENU metres.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_uav.configschema import require_choice
from fl_uav.netmodel.flight import FEDEX_ENERGY_BUDGET_J, FEDEX_SPEED_M_S
from fl_uav.planning.coverage import Box, PlanWaypoint, geofence_box
from fl_uav.planning.placement import (
    CLIENT_PLACEMENTS,
    FEDEX_BLOCKS_EAST,
    FEDEX_BLOCKS_NORTH,
    place_clients_enu_m,
)
from fl_uav.planning.routing import (
    FEDEX_HOVER_TIME_S,
    GibbsConfig,
    RoutePlan,
    RoutingProblem,
    gibbs_plan,
)
from fl_uav.planning.trajectory import (
    WINDOW_TIME_LIMIT_S,
    GaussianRegion,
    TrajectoryConstraints,
    TrajectoryPlan,
    class_balance,
    class_priorities,
    expected_class_samples,
    fit_class_regions,
    lawnmower_baseline,
    plan_trajectory_detailed,
    random_baseline,
    regions_from_landcover,
    total_path_m,
    two_ceoafl_objective,
)
from fl_uav.streams import Stream, stream_rng, stream_seed
from fl_uav.world.landcover import LandCoverMap, WorldConfig, generate_world

PLAN_KINDS = ('trajectory', 'routes')
REGION_SOURCES = ('map', 'fitted')
ROUTE_OBJECTIVES = ('sync', 'async')


@dataclass(frozen=True)
class TrajectoryRequest:
    """One drone's 2CEOAFL trajectory over the world.

    regions: 'map' (the world's class regions, moment-matched Gaussians) or 'fitted' (2CEOAFL
    eq. (1): a Gaussian mixture per class, components_per_class components, fitted to
    fit_samples uniformly drawn positions labelled with the map's class). num_rounds: T (one
    waypoint per round). margin_m: the geofence is the world less this margin. start_east_m,
    start_north_m: where the drone starts (inside the fence). altitude_m in [min_altitude_m,
    max_altitude_m]. max_speed_m_s x round_time_s: the longest step. budget_m: battery budget on
    the path length. zeta, eps_tol: ζ of eq. (3) and ε_tol of eq. (4). max_iterations:
    SCA iterations per window (a work limit of the windowed SCA of
    :mod:`fl_uav.planning.trajectory`); time_limit_s: wall-clock safety cap of HiGHS per window
    MILP (if it binds, the plan depends on the machine's load; figures' sca.time_capped).

    fit_samples (regions fitted): positions drawn to fit the mixture. components_per_class
    (regions fitted): Gaussians per class. altitude_m: the drone's flight altitude.
    min_altitude_m, max_altitude_m: the altitude band altitude_m must lie in. max_speed_m_s:
    the drone's top speed. round_time_s: flight time per round (with max_speed_m_s, the
    longest step between two waypoints).
    """

    regions: str = 'map'
    fit_samples: int = 3000
    components_per_class: int = 2
    num_rounds: int = 50
    margin_m: float = 10.0
    start_east_m: float = 600.0
    start_north_m: float = 600.0
    altitude_m: float = 30.0
    min_altitude_m: float = 5.0
    max_altitude_m: float = 120.0
    max_speed_m_s: float = 5.0
    round_time_s: float = 20.0
    budget_m: float = 3000.0
    zeta: float = 1.0
    eps_tol: float = 1e-3
    max_iterations: int = 3
    time_limit_s: float = WINDOW_TIME_LIMIT_S

    def __post_init__(self) -> None:
        require_choice('regions', self.regions, REGION_SOURCES)
        if self.fit_samples < 10 or self.components_per_class < 1:
            raise ValueError(f'fit_samples must be >= 10 and components_per_class >= 1, got '
                             f'{self.fit_samples}, {self.components_per_class}')
        if not 1 <= self.num_rounds <= 500:
            raise ValueError(f'num_rounds must be in [1, 500], got {self.num_rounds}')
        for name in ('margin_m', 'start_east_m', 'start_north_m', 'altitude_m',
                     'min_altitude_m', 'max_altitude_m'):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f'{name} must be finite, got {getattr(self, name)}')
        if not self.margin_m >= 0:
            raise ValueError(f'margin_m must be >= 0, got {self.margin_m}')
        if not 0 < self.zeta <= 1:
            raise ValueError(f'zeta must be in (0, 1], got {self.zeta}')
        for name in ('max_speed_m_s', 'round_time_s', 'budget_m', 'eps_tol', 'time_limit_s'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'{name} must be finite and > 0, got {value}')
        if self.max_iterations < 1:
            raise ValueError(f'max_iterations must be >= 1, got {self.max_iterations}')


@dataclass(frozen=True)
class RoutesRequest:
    """A FedEx CARP instance (FedEx Sec. VII-A by default: 40 clients, 4 UAVs, 2 km x 2 km,
    15 kJ per tour, 10 m/s, 16 s hover per client).

    placement: 'fedex_blocks' (the area split into blocks_east x blocks_north blocks, 5 x 2 in
    the paper, client i uniform in block i mod B; ``fl_uav.planning.placement``, the express
    runtime's rule) or 'uniform'. depot_east_m, depot_north_m: the ground station. objective:
    'sync' (eq. (25)) or 'async' (eq. (27)). n_sweeps, n_chains: the Gibbs sampler (Sec. VI-B-2).

    num_clients: ground clients to serve. num_uavs: UAVs flying the tours. area_east_m,
    area_north_m: the area the clients are placed in. blocks_east, blocks_north: the blocks
    the area is split into (placement fedex_blocks). speed_m_s: the UAVs' flight speed.
    energy_budget_j: energy a UAV may spend on one tour. hover_time_per_client_s: hover time
    at each client (FedEx eq. (3)'s T_trans).
    """

    num_clients: int = 40
    num_uavs: int = 4
    area_east_m: float = 2000.0
    area_north_m: float = 2000.0
    placement: str = 'fedex_blocks'
    blocks_east: int = FEDEX_BLOCKS_EAST
    blocks_north: int = FEDEX_BLOCKS_NORTH
    depot_east_m: float = 1000.0
    depot_north_m: float = 1000.0
    speed_m_s: float = FEDEX_SPEED_M_S
    energy_budget_j: float = FEDEX_ENERGY_BUDGET_J
    hover_time_per_client_s: float = FEDEX_HOVER_TIME_S
    objective: str = 'sync'
    n_sweeps: int = 40
    n_chains: int = 6

    def __post_init__(self) -> None:
        require_choice('placement', self.placement, CLIENT_PLACEMENTS)
        require_choice('objective', self.objective, ROUTE_OBJECTIVES)
        if not (1 <= self.num_clients <= 1000 and 1 <= self.num_uavs <= 100):
            raise ValueError(f'num_clients must be in [1, 1000] and num_uavs in [1, 100], got '
                             f'{self.num_clients}, {self.num_uavs}')
        for name in ('area_east_m', 'area_north_m', 'depot_east_m', 'depot_north_m'):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f'{name} must be finite, got {getattr(self, name)}')
        if not (self.area_east_m > 0 and self.area_north_m > 0):
            raise ValueError('area_east_m and area_north_m must be > 0')
        for name in ('speed_m_s', 'energy_budget_j'):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f'{name} must be finite and > 0, got {getattr(self, name)}')
        if not (math.isfinite(self.hover_time_per_client_s)
                and self.hover_time_per_client_s >= 0):
            raise ValueError(f'hover_time_per_client_s must be finite and >= 0, got '
                             f'{self.hover_time_per_client_s}')
        if self.n_sweeps < 1 or self.n_chains < 1:
            raise ValueError('n_sweeps and n_chains must be >= 1')
        if self.blocks_east < 1 or self.blocks_north < 1:
            raise ValueError('blocks_east and blocks_north must be >= 1')


@dataclass(frozen=True)
class PlanConfig:
    """kind: 'trajectory' or 'routes'; seed: every random draw (priorities, fitting samples,
    baselines, client positions, the Gibbs chains); world: the generated world (trajectory)."""

    kind: str = 'trajectory'
    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    trajectory: TrajectoryRequest = field(default_factory=TrajectoryRequest)
    routes: RoutesRequest = field(default_factory=RoutesRequest)

    def __post_init__(self) -> None:
        require_choice('kind', self.kind, PLAN_KINDS)
        if self.seed < 0:
            raise ValueError(f'seed must be >= 0, got {self.seed}')


# --------------------------------------------------------------------------------------------
# Trajectories


@dataclass(frozen=True)
class TrajectoryOutcome:
    """A planned trajectory, its baselines and the inputs the plots need."""

    world: LandCoverMap
    regions: list[GaussianRegion]
    priorities: np.ndarray
    fence: Box
    start_enu_m: tuple[float, float]
    plan: TrajectoryPlan
    baselines: dict[str, list[PlanWaypoint]]
    figures: dict[str, Any]


def _regions(request: TrajectoryRequest, world: LandCoverMap,
             seed: int) -> list[GaussianRegion]:
    if request.regions == 'map':
        return regions_from_landcover(world.regions)
    rng = stream_rng(seed, 0, Stream.REGION_SAMPLES)
    positions = rng.uniform(0.0, world.size_m, (request.fit_samples, 2))
    labels = np.array([world.class_at(e, n) for e, n in positions])
    return fit_class_regions(positions, labels, world.num_classes,
                             request.components_per_class, stream_seed(seed, 0, Stream.REGION_FIT))


def _method_figures(waypoints: list[PlanWaypoint], regions: list[GaussianRegion],
                    psi: np.ndarray, start: tuple[float, float], zeta: float,
                    eps_tol: float) -> dict[str, Any]:
    samples = expected_class_samples(waypoints, regions, psi, zeta)
    return {'objective': two_ceoafl_objective(waypoints, regions, psi, zeta, eps_tol),
            **class_balance(samples),
            'expected_class_samples': [float(v) for v in samples],
            'path_m': total_path_m(start, waypoints),
            'waypoints_enu_m': [[w.east_m, w.north_m, w.up_m] for w in waypoints]}


def plan_trajectory_request(config: PlanConfig) -> TrajectoryOutcome:
    """Plan the configured trajectory and its two baselines; PlanInfeasibleError if no plan
    meets the request (its cause says why)."""
    request = config.trajectory
    world = generate_world(config.world)
    regions = _regions(request, world, config.seed)
    psi = class_priorities(request.num_rounds, world.num_classes,
                           stream_seed(config.seed, 0, Stream.CLASS_PRIORITIES))
    fence = geofence_box(world.size_m, request.margin_m)
    start = (request.start_east_m, request.start_north_m)
    constraints = TrajectoryConstraints(
        fence=fence, altitude_m=request.altitude_m, min_altitude_m=request.min_altitude_m,
        max_altitude_m=request.max_altitude_m, max_speed_m_s=request.max_speed_m_s,
        round_time_s=request.round_time_s, budget_m=request.budget_m, zeta=request.zeta,
        eps_tol=request.eps_tol, max_iterations=request.max_iterations,
        time_limit_s=request.time_limit_s)
    trajectory_seed = stream_seed(config.seed, 0, Stream.TRAJECTORY)
    plan = plan_trajectory_detailed(regions, psi, start, constraints, seed=trajectory_seed)
    length_m = total_path_m(start, plan.waypoints)
    baselines = {
        'lawnmower': lawnmower_baseline(fence, start, request.num_rounds, length_m,
                                        request.altitude_m, constraints.step_m),
        'random': random_baseline(constraints, start, request.num_rounds, trajectory_seed)}
    methods = {'2ceoafl': plan.waypoints, **baselines}
    figures = {
        'kind': 'trajectory', 'num_rounds': request.num_rounds,
        'num_classes': world.num_classes, 'num_regions': len(regions),
        'fence_enu_m': list(fence), 'start_enu_m': list(start),
        'step_m': constraints.step_m, 'budget_m': request.budget_m,
        'sca': {'iterations': plan.iterations,      # window MILPs solved
                'upper_bound': plan.upper_bound if math.isfinite(plan.upper_bound) else None,
                'warm_start_objective': plan.warm_start_objective,
                'solve_time_s': plan.solve_time_s, 'time_capped': plan.time_capped},
        'methods': {name: _method_figures(wps, regions, psi, start, request.zeta,
                                          request.eps_tol)
                    for name, wps in methods.items()}}
    return TrajectoryOutcome(world, regions, psi, fence, start, plan, baselines, figures)


# --------------------------------------------------------------------------------------------
# Routes


@dataclass(frozen=True)
class RoutesOutcome:
    """A CARP instance, its plan and the figures."""

    problem: RoutingProblem
    plan: RoutePlan
    figures: dict[str, Any]


def client_positions_enu_m(request: RoutesRequest, seed: int) -> np.ndarray:
    """(N, 2) client positions: FedEx Sec. VII-A blocks or uniform over the area, by the
    rule the FedEx express runtime uses (``fl_uav.planning.placement``; seed = its
    ``express.placement_seed``)."""
    positions, _ = place_clients_enu_m(
        request.num_clients, request.area_east_m, request.area_north_m, seed,
        request.blocks_east, request.blocks_north, request.placement)
    return positions


def plan_routes_request(config: PlanConfig) -> RoutesOutcome:
    """Plan the configured FedEx CARP instance; PlanInfeasibleError if the budget cannot
    cover the clients (its cause says why)."""
    request = config.routes
    problem = RoutingProblem(
        depot_m=(request.depot_east_m, request.depot_north_m),
        clients_m=client_positions_enu_m(request, config.seed), n_uavs=request.num_uavs,
        speed_m_s=request.speed_m_s, hover_time_per_client_s=request.hover_time_per_client_s,
        energy_budget_j=request.energy_budget_j)
    plan = gibbs_plan(problem, request.objective, seed=config.seed,
                      config=GibbsConfig(n_sweeps=request.n_sweeps, n_chains=request.n_chains))
    figures = {
        'kind': 'routes', 'objective': plan.objective,
        'objective_equation': 'FedEx eq. (25)' if plan.objective == 'sync'
        else 'FedEx eq. (27)',
        'cost': plan.cost, 'cost_unit': 's' if plan.objective == 'sync' else 's^2',
        'energy_budget_j': request.energy_budget_j,
        'depot_enu_m': [request.depot_east_m, request.depot_north_m],
        'clients_enu_m': problem.clients_m.tolist(),
        'assignment': list(plan.assignment),
        'uavs': [{'uav': k, 'clients': list(tour), 'length_m': plan.length_m[k],
                  'round_trip_s': plan.round_trip_s[k], 'energy_j': plan.energy_j[k],
                  'within_budget': plan.energy_j[k] <= request.energy_budget_j}
                 for k, tour in enumerate(plan.tours)]}
    return RoutesOutcome(problem, plan, figures)
