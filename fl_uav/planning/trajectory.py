"""Data-aware per-round waypoints: the 2CEOAFL trajectory MICP by SCA (2CEOAFL eqs. (3)-(5)).

Each drone plans, offline and on its own, one waypoint per FL round t = 0..T-1 maximising the
proportionally fair objective of 2CEOAFL eq. (4)::

    Σ_c log( Σ_t I_{c,t} ψ_{c,t} + ε_tol )

where ψ (T x C) is the class priority of eq. (2) and I_{c,t} = 1 iff waypoint t lies within
ζ λ_r of the centre μ_r of a region r of class c (eq. (3)), at most one class per round
(C4, eq. (4d)). Regions are :class:`~fl_uav.planning.trajectory_regions.GaussianRegion` (eq. (1)).

Formulation (choices documented here; see also the 2CEOAFL digest §7):

* Positions are continuous (east_m, north_m); altitude is fixed per plan (the paper's fixed
  h_acv) and must lie in the altitude band. Binaries are per (round, region) I_{t,r}; the class
  indicator is Σ_{r of class c} I_{t,r}.
* C2 (eq. (4b), in its convex "≤" form): I_{t,r} = 1 forces q_t into the circle of radius
  ζ λ_r, encoded with big M on an inscribed regular polygon with ``polygon_sides`` faces (an
  inner approximation, so every association the MILP claims holds in the exact circle). M is
  per (round, region, face): the smallest value that leaves the row slack at I = 0 anywhere in
  the box q_t can reach (fence ∩ reach from the neighbouring fixed waypoints); rows that can
  never bind are dropped, and I_{t,r} is fixed to 0 where the circle is out of reach.
* C3 (eq. (4c), I = 0 forces q outside; reverse-convex, linearised by the paper) is not
  imposed: the objective is non-decreasing in every I, so the optimiser sets I = 1 wherever C2
  and C4 allow. The objective reported for any plan (ours or a baseline) is recomputed from the
  waypoints by :func:`association` (eq. (3) exactly, with C4 resolved by the densest
  component of eq. (1) among the circles holding the point), never taken from the MILP.
* C6 (eq. (4f), minimum step d_min, reverse-convex) is not imposed: hovering is allowed (the
  digest notes C6 contradicts the paper's own text). C5 (eq. (4e)) is optional
  (``max_visits_per_window``) on non-overlapping windows of C rounds.
* Added for a real multirotor (missing from the paper): ||q_t - q_{t-1}|| ≤ max_speed × round
  time (q_{-1} = the start position), the geofence box, the altitude band, and the path length
  from the start through all waypoints ≤ ``budget_m``. Norms are bounded by a circumscribed
  polygon (max_j d_j·v ≤ L cos(π/m) implies ||v|| ≤ L), so they hold exactly, slightly
  conservatively (cos(π/8) = 0.924 at the default 8 sides).
* Initial points (Algorithm 1 leaves them open): a region tour found by dynamic programming
  (:mod:`~fl_uav.planning.trajectory_tour`): dwell at region centres, straight transits,
  the linearised eq. (4) maximised exactly over tours, budget by a Lagrange multiplier, best
  tour by the true eq. (4), then one forced visit per class it missed. It is feasible for every
  MILP below (conservative step, budget and circles). It replaces the random walk used before,
  from which the T = 100, C = 10 MILP found no good incumbent in its time limit (3 of 10
  classes reached).
* SCA (Algorithm 1) on windows (a large-neighbourhood search): for a window of W rounds, the
  other rounds fixed (their class mass A_c enters the objective as Σ_c log(A_c + window mass
  + ε_tol), the window's path must join the fixed waypoints before and after and fit the
  remaining budget), the concave log is replaced by epigraph variables s_c ≤ the tangents of
  log at the incumbent, on a geometric grid and at every iterate so far; each iteration solves
  the MILP with HiGHS (:func:`scipy.optimize.milp`, at most ``node_limit`` nodes),
  linearises at the new iterate, and stops when the MILP's (upper-bound) objective is within
  ``tolerance`` of its linearisation point or after ``max_iterations``. A window's solution
  replaces the incumbent only if the true eq. (4) of the whole plan improves and the exact
  step, fence and budget checks pass, so the plan is never worse than its warm start. A pass
  runs sweeps of half-overlapping windows (``window_rounds``) until one gains no more than
  ``convergence_tolerance`` (at most ``max_sweeps``); then, for each class never visited, the
  best detour to one of its regions (leave the path as late and rejoin it as early as the
  step allows; scored by the true eq. (4)), followed by sweeps; then, if eq. (4) is still more
  than ``horizon_min_gap`` per class below the relaxation bound, the whole horizon as one
  window (``horizon_iterations`` SCA iterations from tangents at that incumbent, for global
  moves; HiGHS limited to ``horizon_node_limit`` nodes: its root node with its sub-MIP
  heuristics finds the long moves), followed by sweeps. Up to ``window_passes`` passes, until
  one gains no more than ``convergence_tolerance``.
* Determinism: every stage is limited by counts (passes, sweeps, SCA iterations, HiGHS
  nodes), HiGHS's branch and bound is deterministic for given options, and nothing is
  random, so the waypoints are a deterministic function of the inputs and the constraints.
  Wall-clock caps remain only as safety nets (``time_limit_s`` per window MILP,
  ``time_budget_s`` per plan); if one binds, the plan depends on the machine's speed and
  load and :attr:`TrajectoryPlan.time_capped` is True.
* ``upper_bound`` is :func:`relaxation_upper_bound` (teleporting drone, C4 and reachability
  per round kept), a true bound on eq. (4) for any plan, not a MILP bound.
* Held mass (optional, ``held_mass`` of :func:`plan_trajectory_detailed`): class mass h_c the
  drone already holds is added to ε_tol inside the log of eq. (4), i.e. Σ_c log(Σ_t I ψ + ε_tol
  + h_c), everywhere the objective is evaluated or linearised: the warm start's weights and
  score, every window MILP (h_c joins the fixed rounds' mass A_c), the detours, the
  whole-horizon solve, the reported objective and the relaxation bound. h = 0 (the default) is
  the paper's eq. (4) exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from fl_uav.planning.coverage import Box, PlanError, PlanInfeasibleError, PlanWaypoint, lawnmower
from fl_uav.planning.trajectory_regions import (
    GaussianRegion,
    class_priorities,
    fit_class_regions,
    regions_from_landcover,
)
from fl_uav.planning.trajectory_tour import region_tour_warm_start

# Default wall-clock safety cap of one plan. The plan's work is bounded by counts (passes,
# sweeps, SCA iterations, HiGHS nodes), so the cap should never bind; if it does the plan
# depends on the machine's speed and load, and TrajectoryPlan.time_capped says so. It is
# well above the deterministic work of the bench cases (docs/benchmarks.md, Issue 5).
TIME_BUDGET_S = 120.0
# Default wall-clock safety cap of one window MILP (HiGHS time_limit): the window MILPs of the
# bench cases take 0.01-2.5 s under load; as TIME_BUDGET_S, it should never bind.
WINDOW_TIME_LIMIT_S = 20.0
# Run the whole-horizon MILP only while eq. (4) of the plan is more than this per class below
# the relaxation bound, i.e. while the geometric mean of the plan's class masses
# (Σ_t I ψ + ε_tol + h_c) is below half the relaxation's: the stage costs a HiGHS root node
# on T x R binaries (9-21 s under load on the bench cases) and pays off when the windows stall
# far from the bound (T = 50 map case: gap 0.95 per class, -1.10 -> 3.35), not near it
# (fitted 0.55; T = 100 synth 0.17, where a forced call found nothing).
HORIZON_MIN_GAP = math.log(2.0)
# Slack on the exact step/fence/budget checks: HiGHS's primal feasibility tolerance (1e-7)
# times the polygon's 1/cos(π/m) stays far below it.
FEASIBILITY_TOLERANCE_M = 1e-6
# A window's solution replaces the incumbent only if eq. (4) rises by more than this (guards
# against accepting floating-point noise and cycling between equal plans).
IMPROVEMENT_TOLERANCE = 1e-9
# Tangents of log per class put in each window MILP before its first solve: a geometric grid
# from the fixed mass A_c + ε to its maximum, so the first piecewise-linear log is already
# within a few % of the true one (5 points span ratios of up to 10^4 with ratio-10 steps).
INITIAL_TANGENTS = 5
# Longest dwell tried by a detour to a missed class: a class's ψ is smooth in t (eq. (2)'s
# sinusoidal basis), so a few rounds at its peak take most of what one visit can add; longer
# stays are the windows' job.
MAX_DETOUR_DWELL = 4
# Frank-Wolfe iterations of the relaxation bound: the duality gap falls as O(1/k); 500 gives
# bounds within ~0.01 of the relaxation's optimum on T = 100, C = 10 in about 0.1 s.
RELAXATION_ITERATIONS = 500
_TINY = 1e-300          # floor of a covariance determinant before its log

__all__ = [
    'GaussianRegion', 'TrajectoryConstraints', 'TrajectoryPlan', 'associated_regions',
    'association',
    'class_balance', 'class_priorities', 'expected_class_samples', 'fit_class_regions',
    'lawnmower_baseline', 'plan_trajectory', 'plan_trajectory_detailed', 'random_baseline',
    'regions_from_landcover', 'relaxation_upper_bound', 'total_path_m', 'two_ceoafl_objective',
]


@dataclass(frozen=True)
class TrajectoryConstraints:
    """Limits and solver settings of one drone's plan.

    fence: horizontal geofence (east_min, north_min, east_max, north_max) in m;
    altitude_m: flight altitude, inside [min_altitude_m, max_altitude_m];
    max_speed_m_s x round_time_s: the longest step between consecutive waypoints;
    budget_m: battery budget on the path length from the start through all waypoints;
    zeta: ζ of eq. (3) (association radius = ζ λ); eps_tol: ε_tol of eq. (4);
    max_visits_per_window: I_max of C5 (None: not imposed);
    polygon_sides, tolerance (SCA stop, Algorithm 1), mip_rel_gap: solver;
    warm_start_iterations: weight updates of the DP region tour (the SCA's initial points);
    work limits of the windowed SCA (they make the plan a deterministic function of the
    inputs): window_rounds (W), max_iterations (SCA iterations = MILPs per window) and
    node_limit (HiGHS branch-and-bound nodes per window MILP); horizon_iterations and
    horizon_node_limit, the same for the whole-horizon stage (1 node: HiGHS's root with its
    sub-MIP heuristics), run only while the plan is more than horizon_min_gap per class below
    the relaxation bound; max_sweeps of windows per call, window_passes; convergence_tolerance:
    a sweep or a pass raising eq. (4) by no more than this ends the sweeps or the passes.
    Wall-clock safety nets (never meant to bind; if one does, the plan depends on the machine's
    load and TrajectoryPlan.time_capped is True): time_limit_s per window MILP, time_budget_s
    per plan (the whole-horizon MILP gets the time left of it).
    """

    fence: Box
    altitude_m: float = 30.0
    min_altitude_m: float = 5.0
    max_altitude_m: float = 120.0
    max_speed_m_s: float = 5.0
    round_time_s: float = 20.0
    budget_m: float = math.inf
    zeta: float = 1.0
    eps_tol: float = 1e-3
    max_visits_per_window: int | None = None
    polygon_sides: int = 8
    max_iterations: int = 3
    tolerance: float = 1e-4
    node_limit: int = 1000
    mip_rel_gap: float = 1e-3
    warm_start_iterations: int = 30
    window_rounds: int = 10
    max_sweeps: int = 8
    window_passes: int = 2
    horizon_iterations: int = 1
    horizon_node_limit: int = 1
    horizon_min_gap: float = HORIZON_MIN_GAP
    convergence_tolerance: float = 1e-3
    time_limit_s: float = WINDOW_TIME_LIMIT_S
    time_budget_s: float = TIME_BUDGET_S

    @property
    def step_m(self) -> float:
        """Longest horizontal step between consecutive waypoints (speed x round time)."""
        return self.max_speed_m_s * self.round_time_s


@dataclass(frozen=True)
class TrajectoryPlan:
    """A plan with its diagnostics.

    waypoints: one per round; classes: associated class per round (-1: none), by
    :func:`association`; objective: eq. (4) of the waypoints; upper_bound:
    :func:`relaxation_upper_bound` (no plan can beat it); iterations: window MILPs solved (SCA
    iterations over all windows); solve_time_s: wall time; warm_start_objective: eq. (4) of
    the DP region tour the SCA started from (objective >= it); time_capped: a wall-clock
    safety cap (time_limit_s or time_budget_s) cut the work short, so the plan may differ from
    run to run (False: the plan is a deterministic function of the inputs).
    """

    waypoints: list[PlanWaypoint]
    classes: list[int]
    objective: float
    upper_bound: float
    iterations: int
    solve_time_s: float
    warm_start_objective: float = math.nan
    time_capped: bool = False


# --------------------------------------------------------------------------------------------
# Objective and evaluation


def _xy(waypoints: Sequence[PlanWaypoint] | np.ndarray) -> np.ndarray:
    if isinstance(waypoints, np.ndarray):
        return np.asarray(waypoints, np.float64).reshape(-1, 2)
    return np.array([[w.east_m, w.north_m] for w in waypoints], np.float64).reshape(-1, 2)


def associated_regions(waypoints: Sequence[PlanWaypoint] | np.ndarray,
                       regions: Sequence[GaussianRegion], zeta: float = 1.0) -> np.ndarray:
    """Index of the region each waypoint is associated with (-1: none), eq. (3) with C4: among
    the regions whose circle ||q - μ|| ≤ ζ λ contains it, the component of eq. (1) with the
    largest density N(q | μ_r, Λ_r) at q, so a tight region inside a broad one (a background
    class) keeps its points. Π_r is left out: it is a class's share of the area, not where q
    is, and would hand every overlap to the broad background."""
    points = _xy(waypoints)
    out = np.full(len(points), -1, np.int64)
    if not regions or len(points) == 0:
        return out
    centres = np.array([r.center_enu_m for r in regions], np.float64)
    radii = np.array([zeta * r.radius_m for r in regions], np.float64)
    inside = np.linalg.norm(points[:, None, :] - centres[None], axis=2) <= radii[None] + 1e-9
    log_density = np.empty((len(points), len(regions)))
    for index, region in enumerate(regions):
        cov = np.array(region.covariance_m2, np.float64)
        diff = points - centres[index]
        try:
            mahalanobis = np.einsum('ij,jk,ik->i', diff, np.linalg.inv(cov), diff)
            log_det = float(np.log(max(np.linalg.det(cov), _TINY)))
        except np.linalg.LinAlgError:
            mahalanobis, log_det = np.full(len(points), np.inf), 0.0
        log_density[:, index] = -0.5 * log_det - 0.5 * mahalanobis
    scores = np.where(inside, log_density, -np.inf)
    best = np.argmax(scores, axis=1)
    hit = inside[np.arange(len(points)), best]
    out[hit] = best[hit]
    return out


def association(waypoints: Sequence[PlanWaypoint] | np.ndarray,
                regions: Sequence[GaussianRegion], num_classes: int,
                zeta: float = 1.0) -> np.ndarray:
    """I (T x C, 0/1) of 2CEOAFL eq. (3) with C4: waypoint t is associated with the class of
    its region by :func:`associated_regions` (the densest component of eq. (1) at q among
    those whose circle ||q - μ|| ≤ ζ λ contains it)."""
    points = _xy(waypoints)
    indicator = np.zeros((len(points), num_classes), np.int64)
    best = associated_regions(points, regions, zeta)
    classes = np.array([r.class_id for r in regions] or [0])
    hit = np.nonzero(best >= 0)[0]
    indicator[hit, classes[best[hit]]] = 1
    return indicator


def expected_class_samples(waypoints: Sequence[PlanWaypoint] | np.ndarray,
                           regions: Sequence[GaussianRegion], priorities: np.ndarray,
                           zeta: float = 1.0) -> np.ndarray:
    """Σ_t I_{c,t} ψ_{c,t} per class: the priority-weighted visits of eq. (4), proportional to
    the expected new samples of eq. (6) without its distance decay."""
    psi = np.asarray(priorities, np.float64)
    indicator = association(waypoints, regions, psi.shape[1], zeta)
    if indicator.shape[0] != psi.shape[0]:
        raise ValueError(f'{indicator.shape[0]} waypoints but priorities for {psi.shape[0]} '
                         f'rounds')
    return (indicator * psi).sum(0)


def two_ceoafl_objective(waypoints: Sequence[PlanWaypoint] | np.ndarray,
                         regions: Sequence[GaussianRegion], priorities: np.ndarray,
                         zeta: float = 1.0, eps_tol: float = 1e-3,
                         held_mass: np.ndarray | None = None) -> float:
    """2CEOAFL eq. (4): Σ_c log(Σ_t I_{c,t} ψ_{c,t} + ε_tol + h_c), I from
    :func:`association`; h_c (``held_mass``, default 0) is class mass the drone already holds,
    in the units of Σ_t I ψ (see :func:`plan_trajectory_detailed`)."""
    samples = expected_class_samples(waypoints, regions, priorities, zeta)
    return float(np.log(samples + eps_tol + _held(held_mass, samples.shape[0])).sum())


def _held(held_mass: np.ndarray | None, num_classes: int) -> np.ndarray:
    """The per-class held mass h_c (zeros if None); PlanError if malformed."""
    if held_mass is None:
        return np.zeros(num_classes)
    held = np.asarray(held_mass, np.float64).reshape(-1)
    if held.shape[0] != num_classes or not np.all(np.isfinite(held)) or held.min() < 0:
        raise PlanError(f'held_mass must be {num_classes} finite non-negative values, got '
                        f'{held_mass!r}')
    return held


def class_balance(samples: np.ndarray) -> dict[str, float]:
    """Balance of per-class expected samples: normalised entropy (1 = even, 0 = one class),
    min/max ratio, and the number of classes with any samples."""
    samples = np.asarray(samples, np.float64)
    total = float(samples.sum())
    visited = int((samples > 0).sum())
    if total <= 0:
        return {'entropy_norm': 0.0, 'min_over_max': 0.0, 'classes_visited': 0}
    share = samples / total
    nonzero = share[share > 0]
    entropy = max(0.0, float(-(nonzero * np.log(nonzero)).sum()))
    norm = entropy / math.log(len(samples)) if len(samples) > 1 else 1.0
    return {'entropy_norm': norm, 'min_over_max': float(samples.min() / samples.max()),
            'classes_visited': visited}


def total_path_m(start_enu_m: Sequence[float], waypoints: Sequence[PlanWaypoint]) -> float:
    """Horizontal path length from the start through all waypoints (what the budget limits)."""
    points = np.vstack([np.asarray(start_enu_m, np.float64).reshape(1, 2), _xy(waypoints)])
    return float(np.linalg.norm(np.diff(points, axis=0), axis=1).sum())


# --------------------------------------------------------------------------------------------
# Baselines


def lawnmower_baseline(fence: Box, start_enu_m: Sequence[float], num_rounds: int,
                       length_m: float, altitude_m: float, step_m: float) -> list[PlanWaypoint]:
    """A lawnmower sweep of the whole fence with legs spaced so the sweep is about length_m
    long, walked from the start: waypoint t is at arc length (t + 1) x min(length_m / T, step_m)
    (or the sweep's end)."""
    east_min, north_min, east_max, north_max = fence
    width, height = east_max - east_min, north_max - north_min
    legs = max(2.0, (length_m - width) / max(height, 1e-9))
    spacing = max(width / (legs - 1.0), 1e-3) if width > 0 else 1.0
    corners = [(w.east_m, w.north_m) for w in lawnmower(fence, spacing, altitude_m)]
    polyline = np.array([tuple(start_enu_m), *corners], np.float64)
    seg = np.linalg.norm(np.diff(polyline, axis=0), axis=1)
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    increment = min(length_m / num_rounds, step_m) * (1.0 - 1e-9)
    out = []
    for t in range(num_rounds):
        s = min((t + 1) * increment, cum[-1])
        i = int(min(np.searchsorted(cum, s, side='right') - 1, len(seg) - 1))
        frac = 0.0 if seg[i] == 0 else (s - cum[i]) / seg[i]
        point = polyline[i] + frac * (polyline[i + 1] - polyline[i])
        out.append(PlanWaypoint(float(point[0]), float(point[1]), float(altitude_m)))
    return out


def random_baseline(constraints: TrajectoryConstraints, start_enu_m: Sequence[float],
                    num_rounds: int, seed: int) -> list[PlanWaypoint]:
    """A seeded random walk within the constraints: uniform heading, step length uniform in
    [0, min(step, budget / T)], projected onto the fence (projection never lengthens a step)."""
    rng = np.random.default_rng(seed)
    east_min, north_min, east_max, north_max = constraints.fence
    longest = min(constraints.step_m, constraints.budget_m / num_rounds) * (1.0 - 1e-9)
    point = np.asarray(start_enu_m, np.float64).copy()
    out = []
    for _ in range(num_rounds):
        heading = rng.uniform(0.0, 2.0 * math.pi)
        length = rng.uniform(0.0, longest)
        point = point + length * np.array([math.cos(heading), math.sin(heading)])
        point = np.clip(point, [east_min, north_min], [east_max, north_max])
        out.append(PlanWaypoint(float(point[0]), float(point[1]), constraints.altitude_m))
    return out


# --------------------------------------------------------------------------------------------
# The planner


def _validate(regions: Sequence[GaussianRegion], psi: np.ndarray, start: np.ndarray,
              c: TrajectoryConstraints) -> None:
    if not regions:
        raise PlanInfeasibleError('no_class_regions', 'no class regions: eq. (4) has nothing '
                                  'to maximise')
    if psi.ndim != 2 or psi.shape[0] < 1 or psi.shape[1] < 1:
        raise PlanError(f'priorities must be a T x C array, got shape {psi.shape}')
    if not np.all(np.isfinite(psi)) or psi.min() < 0:
        raise PlanError('priorities must be finite and non-negative')
    bad = [r.class_id for r in regions if not 0 <= r.class_id < psi.shape[1]]
    if bad:
        raise PlanError(f'region classes {sorted(set(bad))} outside the {psi.shape[1]} '
                        f'priority columns')
    if not c.step_m > 0:
        raise PlanError(f'step length max_speed_m_s x round_time_s = {c.step_m} m must be > 0')
    east_min, north_min, east_max, north_max = c.fence
    width, height = east_max - east_min, north_max - north_min
    if min(width, height) < c.step_m:
        raise PlanInfeasibleError(
            'fence_smaller_than_step', f'geofence {width:.1f} x {height:.1f} m is smaller than '
            f'one step ({c.step_m:.1f} m = {c.max_speed_m_s} m/s x {c.round_time_s} s)')
    if c.budget_m < c.step_m:
        raise PlanInfeasibleError('budget_below_step', f'battery budget {c.budget_m:.1f} m is '
                                  f'below one step ({c.step_m:.1f} m)')
    if not (c.min_altitude_m <= c.altitude_m <= c.max_altitude_m) or c.altitude_m <= 0:
        raise PlanInfeasibleError('altitude_outside_band', f'altitude {c.altitude_m} m outside '
                                  f'the band [{c.min_altitude_m}, {c.max_altitude_m}] m')
    if not (east_min <= start[0] <= east_max and north_min <= start[1] <= north_max):
        raise PlanInfeasibleError('start_outside_fence', f'start ({start[0]:.1f}, '
                                  f'{start[1]:.1f}) is outside the geofence {c.fence}')
    if not (0 < c.zeta <= 1):   # malformed, not infeasible: checked before ζ is used below
        raise PlanError(f'zeta must be in (0, 1], got {c.zeta}')
    if not c.eps_tol > 0:
        raise PlanError(f'eps_tol must be > 0, got {c.eps_tol}')
    if not any(_circle_meets_box(r.center_enu_m, c.zeta * r.radius_m, c.fence)
               for r in regions):
        raise PlanInfeasibleError('no_class_regions', f'none of the {len(regions)} class '
                                  f'regions reaches into the geofence {c.fence}')
    if c.polygon_sides < 4:
        raise PlanError(f'polygon_sides must be >= 4, got {c.polygon_sides}')
    for name in ('node_limit', 'horizon_node_limit', 'max_iterations', 'max_sweeps'):
        if getattr(c, name) < 1:
            raise PlanError(f'{name} must be >= 1, got {getattr(c, name)}')
    for name in ('window_passes', 'horizon_iterations', 'convergence_tolerance',
                 'horizon_min_gap'):
        if not getattr(c, name) >= 0:
            raise PlanError(f'{name} must be >= 0, got {getattr(c, name)}')
    for name in ('time_limit_s', 'time_budget_s'):
        if not getattr(c, name) > 0:
            raise PlanError(f'{name} must be > 0, got {getattr(c, name)}')


def _circle_meets_box(centre: Sequence[float], radius_m: float, fence: Box) -> bool:
    """Whether the association circle ||q - μ|| <= ζλ of eq. (3) overlaps the fence box."""
    east_min, north_min, east_max, north_max = fence
    near_e = min(max(centre[0], east_min), east_max)
    near_n = min(max(centre[1], north_min), north_max)
    return math.hypot(centre[0] - near_e, centre[1] - near_n) <= radius_m


class _WindowModel:
    """The MILP of eq. (5) on the rounds [first, first + W) of the plan, the rest fixed.

    Variables per window round j: q_j = (east, north), l_j (a bound on the step into q_j), and
    I_{j,r} (binary); one more step bound l_W for the step out of the window into the fixed
    next waypoint (if any); and the log epigraph s_c per class. ``offset_mass`` is A_c, the mass
    Σ_t I ψ of the fixed rounds plus the held mass h_c, so the window maximises
    Σ_c log(A_c + Σ_{j,r∈c} ψ_{j,c} I_{j,r} + ε_tol), eq. (4) restricted to the window.
    """

    def __init__(self, geometry: _Geometry, psi_window: np.ndarray, prev_xy: np.ndarray,
                 next_xy: np.ndarray | None, budget_m: float, offset_mass: np.ndarray,
                 c5_caps: list[tuple[list[int], int, float]]) -> None:
        g, c = geometry, geometry.c
        self.g, self.c = g, c
        self.W, self.C = psi_window.shape
        self.R = len(g.centres)
        self.psi = psi_window
        self.offset = offset_mass
        W, R, C = self.W, self.R, self.C
        self.n_steps = W + (1 if next_xy is not None else 0)
        self.n_var = 2 * W + self.n_steps + W * R + C
        shrink = g.shrink
        east_min, north_min, east_max, north_max = c.fence
        rows, cols, vals, lower, upper = [], [], [], [], []
        row = 0

        def add(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
            nonlocal row
            for col, val in entries:
                rows.append(row)
                cols.append(col)
                vals.append(val)
            lower.append(lo)
            upper.append(hi)
            row += 1

        # Motion: d_i·(q_j - q_{j-1}) - l_j <= 0 (q_{-1} = prev_xy; q_W = next_xy if given).
        for j in range(self.n_steps):
            for dx, dy in g.dirs:
                entries = [(self.step(j), -1.0)]
                rhs = 0.0
                if j < W:
                    entries += [(self.e(j), dx), (self.n(j), dy)]
                else:
                    rhs -= dx * next_xy[0] + dy * next_xy[1]
                if j == 0:
                    rhs += dx * prev_xy[0] + dy * prev_xy[1]
                else:
                    entries += [(self.e(j - 1), -dx), (self.n(j - 1), -dy)]
                add(entries, -np.inf, float(rhs))
        if math.isfinite(budget_m):
            add([(self.step(j), 1.0) for j in range(self.n_steps)], -np.inf,
                max(budget_m, 0.0) * shrink)
        # Boxes each q_j can reach (fence ∩ from prev ∩ to next): variable bounds and big-M.
        lo_box = np.empty((W, 2))
        hi_box = np.empty((W, 2))
        reachable = np.ones((W, R), bool)
        for j in range(W):
            ahead = (j + 1) * c.step_m
            lo = np.maximum([east_min, north_min], prev_xy - ahead)
            hi = np.minimum([east_max, north_max], prev_xy + ahead)
            circle_gap = np.linalg.norm(g.centres - prev_xy[None], axis=1) - g.radii * shrink
            reachable[j] &= circle_gap <= min(ahead, budget_m)
            if next_xy is not None:
                behind = (W - j) * c.step_m
                lo = np.maximum(lo, next_xy - behind)
                hi = np.minimum(hi, next_xy + behind)
                gap_next = np.linalg.norm(g.centres - next_xy[None], axis=1) - g.radii * shrink
                reachable[j] &= gap_next <= min(behind, budget_m)
            hi = np.maximum(hi, lo)   # rounding only: the fixed incumbent lies in the box
            lo_box[j], hi_box[j] = lo, hi
        reachable &= g.usable[None, :]
        # C2: d_i·q_j + M I_{j,r} <= d_i·μ_r + ζλ_r cos(π/m) + M, with the smallest M that
        # leaves the row slack at I = 0 anywhere in q_j's box (never-binding rows dropped).
        for j in range(W):
            corners = np.array([[lo_box[j, 0], lo_box[j, 1]], [lo_box[j, 0], hi_box[j, 1]],
                                [hi_box[j, 0], lo_box[j, 1]], [hi_box[j, 0], hi_box[j, 1]]])
            for r in np.nonzero(reachable[j])[0]:
                rhs = g.dirs @ g.centres[r] + g.radii[r] * shrink
                reach_max = (corners @ g.dirs.T).max(axis=0)
                for i in np.nonzero(reach_max > rhs)[0]:
                    big_m = float(reach_max[i] - rhs[i])
                    add([(self.e(j), g.dirs[i, 0]), (self.n(j), g.dirs[i, 1]),
                         (self.ind(j, int(r)), big_m)], -np.inf, float(rhs[i] + big_m))
        # C4: at most one association per round.
        for j in range(W):
            members = np.nonzero(reachable[j])[0]
            if len(members) > 1:
                add([(self.ind(j, int(r)), 1.0) for r in members], -np.inf, 1.0)
        # C5 (optional): the caps left by the fixed rounds of each C-round window.
        for window_rounds, cls, cap in c5_caps:
            entries = [(self.ind(j, int(r)), 1.0) for j in window_rounds
                       for r in np.nonzero((g.region_class == cls) & reachable[j])[0]]
            if entries:
                add(entries, -np.inf, max(cap, 0.0))
        self.base = (rows, cols, vals, lower, upper, row)
        self.cuts: list[tuple[int, float]] = []
        lb = np.full(self.n_var, -np.inf)
        ub = np.full(self.n_var, np.inf)
        for j in range(W):
            lb[self.e(j)], ub[self.e(j)] = lo_box[j, 0], hi_box[j, 0]
            lb[self.n(j)], ub[self.n(j)] = lo_box[j, 1], hi_box[j, 1]
        for j in range(self.n_steps):
            lb[self.step(j)], ub[self.step(j)] = 0.0, c.step_m * shrink
        first_ind = self.ind(0, 0)
        lb[first_ind:first_ind + W * R] = 0.0
        ub[first_ind:first_ind + W * R] = reachable.reshape(-1).astype(np.float64)
        self.reachable = reachable
        class_reach = np.zeros((W, C), bool)
        for r in range(R):
            class_reach[:, g.region_class[r]] |= reachable[:, r]
        self.max_mass = (psi_window * class_reach).sum(0)
        for cls in range(C):
            lb[self.s(cls)] = math.log(offset_mass[cls] + c.eps_tol)
            ub[self.s(cls)] = math.log(offset_mass[cls] + self.max_mass[cls] + c.eps_tol)
        self.bounds = Bounds(lb, ub)
        self.integrality = np.zeros(self.n_var)
        self.integrality[first_ind:first_ind + W * R] = 1
        self.cost = np.zeros(self.n_var)
        self.cost[self.s(0):self.s(0) + C] = -1.0

    def e(self, j: int) -> int:
        return 2 * j

    def n(self, j: int) -> int:
        return 2 * j + 1

    def step(self, j: int) -> int:
        return 2 * self.W + j

    def ind(self, j: int, r: int) -> int:
        return 2 * self.W + self.n_steps + j * self.R + r

    def s(self, cls: int) -> int:
        return 2 * self.W + self.n_steps + self.W * self.R + cls

    def add_tangent(self, cls: int, point: float) -> None:
        """Linearise log at x_c = point: s_c <= log(a) - 1 + x_c / a, x_c = A_c + Σ ψ I + ε."""
        point = max(float(point), self.c.eps_tol)
        if any(cl == cls and abs(a - point) <= 1e-9 * max(1.0, point) for cl, a in self.cuts):
            return
        self.cuts.append((cls, point))

    def solve(self, node_limit: int, time_limit_s: float) -> tuple[np.ndarray | None, bool]:
        """Solve the MILP with HiGHS (single call of :func:`scipy.optimize.milp`), limited by
        ``node_limit`` branch-and-bound nodes (work: deterministic) and ``time_limit_s`` (the
        wall-clock safety net). Returns the best solution found (None if none) and whether
        HiGHS stopped on its time limit."""
        rows, cols, vals, lower, upper, n_rows = self.base
        rows, cols, vals = list(rows), list(cols), list(vals)
        lower, upper = list(lower), list(upper)
        members = [np.nonzero(self.g.region_class == cls)[0] for cls in range(self.C)]
        for k, (cls, a) in enumerate(self.cuts):
            r_index = n_rows + k
            rows.append(r_index)
            cols.append(self.s(cls))
            vals.append(1.0)
            for j in range(self.W):
                weight = self.psi[j, cls] / a
                if weight == 0:
                    continue
                for r in members[cls]:
                    if self.reachable[j, r]:
                        rows.append(r_index)
                        cols.append(self.ind(j, int(r)))
                        vals.append(-weight)
            lower.append(-np.inf)
            upper.append(math.log(a) - 1.0 + (self.offset[cls] + self.c.eps_tol) / a)
        matrix = coo_matrix((vals, (rows, cols)), shape=(n_rows + len(self.cuts), self.n_var))
        result = milp(self.cost, integrality=self.integrality, bounds=self.bounds,
                      constraints=LinearConstraint(matrix.tocsr(), lower, upper),
                      options={'node_limit': node_limit, 'time_limit': max(time_limit_s, 0.0),
                               'mip_rel_gap': self.c.mip_rel_gap})
        timed_out = result.status == 1 and result.message.startswith('Time limit')
        return (None if result.x is None else np.asarray(result.x)), timed_out

    def positions(self, x: np.ndarray) -> np.ndarray:
        east_min, north_min, east_max, north_max = self.c.fence
        xy = np.stack([x[0:2 * self.W:2], x[1:2 * self.W:2]], axis=1)
        return np.clip(xy, [east_min, north_min], [east_max, north_max])

    def window_mass(self, x: np.ndarray) -> np.ndarray:
        """A_c + Σ_j ψ_{j,c} I_{j,c} + ε of the MILP's own indicators (where it linearises)."""
        first = self.ind(0, 0)
        ind = np.rint(x[first:first + self.W * self.R]).reshape(self.W, self.R)
        per_class = np.zeros((self.W, self.C))
        for r in range(self.R):
            per_class[:, self.g.region_class[r]] += ind[:, r]
        return (per_class * self.psi).sum(0) + self.offset + self.c.eps_tol


@dataclass(frozen=True)
class _Geometry:
    """Per-plan constants shared by the warm start and every window MILP."""

    c: TrajectoryConstraints
    centres: np.ndarray          # R x 2, μ_r
    radii: np.ndarray            # R, ζ λ_r
    region_class: np.ndarray     # R, class of each region
    usable: np.ndarray           # R, the region's circle reaches into the fence with radius > 0
    dirs: np.ndarray             # m x 2, unit normals of the polygon faces
    shrink: float                # cos(π/m): inscribed-polygon and step conservatism


def _geometry(regions: Sequence[GaussianRegion], c: TrajectoryConstraints) -> _Geometry:
    m = c.polygon_sides
    angles = 2.0 * math.pi * np.arange(m) / m
    dirs = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    shrink = math.cos(math.pi / m)
    centres = np.array([r.center_enu_m for r in regions], np.float64).reshape(-1, 2)
    radii = np.array([c.zeta * r.radius_m for r in regions], np.float64)
    east_min, north_min, east_max, north_max = c.fence
    usable = ((centres[:, 0] + radii * shrink >= east_min)
              & (centres[:, 0] - radii * shrink <= east_max)
              & (centres[:, 1] + radii * shrink >= north_min)
              & (centres[:, 1] - radii * shrink <= north_max) & (radii > 0))
    return _Geometry(c, centres, radii, np.array([r.class_id for r in regions]), usable, dirs,
                     shrink)


def _respects(xy: np.ndarray, start: np.ndarray, c: TrajectoryConstraints) -> bool:
    """Exact check of the real-multirotor constraints: step, geofence, battery budget."""
    east_min, north_min, east_max, north_max = c.fence
    inside = bool(np.all((xy[:, 0] >= east_min - FEASIBILITY_TOLERANCE_M)
                         & (xy[:, 0] <= east_max + FEASIBILITY_TOLERANCE_M)
                         & (xy[:, 1] >= north_min - FEASIBILITY_TOLERANCE_M)
                         & (xy[:, 1] <= north_max + FEASIBILITY_TOLERANCE_M)))
    steps = np.linalg.norm(np.diff(np.vstack([start[None], xy]), axis=0), axis=1)
    return (inside and float(steps.max(initial=0.0)) <= c.step_m + FEASIBILITY_TOLERANCE_M
            and float(steps.sum()) <= c.budget_m + FEASIBILITY_TOLERANCE_M)


def relaxation_upper_bound(regions: Sequence[GaussianRegion], priorities: np.ndarray,
                           start_enu_m: Sequence[float], constraints: TrajectoryConstraints,
                           held_mass: np.ndarray | None = None) -> float:
    """An upper bound on eq. (4) for any plan meeting the constraints: the drone may teleport
    but is associated with at most one class per round (C4) and only with classes having a
    region it can reach by round t (reach (t + 1) x step and the budget, inside the fence).

    The relaxation max Σ_c log(Σ_t x_{t,c} ψ_{t,c} + ε + h_c), Σ_c x_{t,c} <= 1, 0 <= x <= 1
    (h_c: ``held_mass``, default 0, as in :func:`two_ceoafl_objective`) is concave; Frank-Wolfe
    gives a point x_k and, by concavity, f* <= f(x_k) + duality gap_k. The smallest such bound
    over the iterations is returned."""
    psi = np.asarray(priorities, np.float64)
    c = constraints
    start = np.asarray(start_enu_m, np.float64).reshape(-1)[:2]
    g = _geometry(regions, c)
    num_rounds, num_classes = psi.shape
    floor = c.eps_tol + _held(held_mass, num_classes)
    gap_m = np.linalg.norm(g.centres - start[None], axis=1) - g.radii
    available = np.zeros((num_rounds, num_classes), bool)
    for t in range(num_rounds):
        near = g.usable & (gap_m <= min((t + 1) * c.step_m, c.budget_m))
        available[t, g.region_class[near]] = True
    weights = psi * available
    x = np.zeros_like(weights)
    rows = np.arange(num_rounds)
    best = math.inf
    for k in range(RELAXATION_ITERATIONS):
        mass = (x * weights).sum(0) + floor
        grad = weights / mass[None, :]
        vertex = np.zeros_like(x)
        top = np.argmax(grad, axis=1)
        vertex[rows, top] = grad[rows, top] > 0
        gap = float(((vertex - x) * grad).sum())
        best = min(best, float(np.log(mass).sum()) + gap)
        x += (2.0 / (k + 2.0)) * (vertex - x)
    return best


def _windows(num_rounds: int, size: int) -> list[tuple[int, int]]:
    """Half-overlapping windows [first, last) covering 0..T-1 (stride size // 2)."""
    stride = max(1, size // 2)
    out, first = [], 0
    while True:
        last = min(first + size, num_rounds)
        out.append((first, last))
        if last >= num_rounds:
            return out
        first += stride


def _c5_caps(indicator: np.ndarray, first: int, last: int, c: TrajectoryConstraints
             ) -> list[tuple[list[int], int, float]]:
    """C5 (eq. (4e)) for a window: for each non-overlapping C-round window meeting [first,
    last), the window rounds it covers, the class, and I_max less the fixed rounds' visits."""
    if c.max_visits_per_window is None:
        return []
    num_rounds, num_classes = indicator.shape
    caps = []
    for block in range(0, num_rounds, num_classes):
        span = range(block, min(block + num_classes, num_rounds))
        inside = [t - first for t in span if first <= t < last]
        if not inside:
            continue
        outside = [t for t in span if not first <= t < last]
        for cls in range(num_classes):
            used = float(indicator[outside, cls].sum()) if outside else 0.0
            caps.append((inside, cls, c.max_visits_per_window - used))
    return caps


@dataclass
class _SearchState:
    """The incumbent plan of the windowed SCA and its bookkeeping."""

    xy: np.ndarray
    objective: float
    deadline: float                                   # perf_counter of the safety cap
    iterations: int = 0
    time_capped: bool = False                         # a wall-clock safety cap stopped work
    version: int = 0                                  # incremented on every accepted window
    solved_at: dict[tuple[int, int], int] = field(default_factory=dict)  # window -> version


def _sweep(state: _SearchState, g: _Geometry, regions: Sequence[GaussianRegion],
           psi: np.ndarray, start: np.ndarray, c: TrajectoryConstraints,
           score: Callable[[np.ndarray], float], held: np.ndarray,
           horizon: bool = False) -> bool:
    """One sweep of SCA over half-overlapping windows of ``window_rounds`` rounds, or with
    ``horizon`` over the whole horizon as one window (with the horizon's work limits); True if
    it improved the incumbent. A window solved at the current incumbent is skipped (its MILP
    would be the same). ``held`` (h_c) joins the fixed rounds' mass A_c."""
    num_rounds, num_classes = psi.shape
    size = num_rounds if horizon else c.window_rounds
    improved = False
    for first, last in _windows(num_rounds, size):
        if time.perf_counter() >= state.deadline:
            state.time_capped = True
            return improved
        if state.solved_at.get((first, last)) == state.version:
            continue   # same incumbent as when this window was last solved: same result
        xy = state.xy
        indicator = association(xy, regions, num_classes, c.zeta)
        mass = (indicator * psi).sum(0)
        inside = (indicator[first:last] * psi[first:last]).sum(0)
        prev_xy = start if first == 0 else xy[first - 1]
        next_xy = xy[last] if last < num_rounds else None
        path = np.linalg.norm(np.diff(np.vstack([start[None], xy]), axis=0), axis=1)
        window_edges = slice(first, last + 1 if next_xy is not None else last)
        budget_left = c.budget_m - (float(path.sum()) - float(path[window_edges].sum()))
        model = _WindowModel(g, psi[first:last], prev_xy, next_xy, budget_left,
                             mass - inside + held, _c5_caps(indicator, first, last, c))
        for cls in range(num_classes):
            offset = model.offset[cls] + c.eps_tol
            model.add_tangent(cls, offset + inside[cls])
            for point in np.geomspace(offset, offset + model.max_mass[cls], INITIAL_TANGENTS):
                model.add_tangent(cls, point)
        iterations, node_limit = ((c.horizon_iterations, c.horizon_node_limit) if horizon
                                  else (c.max_iterations, c.node_limit))
        capped = False
        for _ in range(iterations):
            remaining = state.deadline - time.perf_counter()
            if remaining <= 0:
                capped = True
                break
            state.iterations += 1
            # Work limits: node_limit per window MILP, horizon_node_limit for the whole horizon
            # (its root node alone, with HiGHS's sub-MIP heuristics, is what finds the long
            # moves). Safety net: time_limit_s per window MILP, the time left of the plan.
            x, timed_out = model.solve(node_limit,
                                       remaining if horizon else min(c.time_limit_s, remaining))
            capped |= timed_out
            if x is None:
                break
            candidate = state.xy.copy()
            candidate[first:last] = model.positions(x)
            candidate_objective = score(candidate)
            if (candidate_objective > state.objective + IMPROVEMENT_TOLERANCE
                    and _respects(candidate, start, c)):
                state.xy, state.objective, improved = candidate, candidate_objective, True
                state.version += 1
            window_mass = model.window_mass(x)
            predicted = float(-np.dot(model.cost, x))
            if predicted - float(np.log(window_mass).sum()) <= c.tolerance:
                break
            for cls in range(num_classes):
                model.add_tangent(cls, window_mass[cls])
        state.time_capped |= capped
        if not capped:   # a window cut short by a cap may do better when solved again
            state.solved_at[(first, last)] = state.version
    return improved


def _detour(xy: np.ndarray, start: np.ndarray, anchor: np.ndarray, arrive: int, dwell: int,
            step_m: float) -> np.ndarray | None:
    """xy with a detour to ``anchor``: leave the plan as late as possible, arrive at round
    ``arrive``, stay ``dwell`` rounds, rejoin the plan as early as possible (or stay to the
    end); straight legs in equal steps of at most step_m. None if the anchor is out of reach."""
    num_rounds = len(xy)
    last = arrive + dwell - 1
    if last >= num_rounds:
        return None
    leave = None                           # first replaced round; the drone is at xy[leave - 1]
    for first in range(arrive, -1, -1):
        origin = start if first == 0 else xy[first - 1]
        if math.ceil(np.linalg.norm(anchor - origin) / step_m - 1e-12) <= arrive - first + 1:
            leave = first
            break
    if leave is None:
        return None
    out = xy.copy()
    origin = start if leave == 0 else xy[leave - 1]
    legs = arrive - leave + 1
    for j in range(1, legs + 1):
        out[leave + j - 1] = origin + (j / legs) * (anchor - origin)
    out[arrive:last + 1] = anchor
    for rejoin in range(last + 1, num_rounds):
        if math.ceil(np.linalg.norm(xy[rejoin] - anchor) / step_m - 1e-12) <= rejoin - last:
            legs = rejoin - last
            for j in range(1, legs):
                out[last + j] = anchor + (j / legs) * (xy[rejoin] - anchor)
            return out
    out[last + 1:] = anchor
    return out


def _insert_missed_classes(state: _SearchState, g: _Geometry, regions: Sequence[GaussianRegion],
                           psi: np.ndarray, start: np.ndarray, c: TrajectoryConstraints,
                           score: Callable[[np.ndarray], float]) -> bool:
    """Detour insertion (the orienteering insertion move) for classes the plan never visits:
    eq. (4) loses about log(ε_tol) for each, and a narrow window cannot reach a region more
    than W / 2 steps off the path. For each such class, each of its regions (centre clipped to
    the fence), each arrival round and dwell of 1..MAX_DETOUR_DWELL rounds, the detour is
    scored by the true eq. (4); the best that improves and respects step, fence and budget is
    accepted. True if the plan changed."""
    indicator = association(state.xy, regions, psi.shape[1], c.zeta)
    mass = (indicator * psi).sum(0)
    east_min, north_min, east_max, north_max = c.fence
    best_xy, best_objective = None, state.objective
    for r in range(len(g.centres)):
        cls = g.region_class[r]
        if mass[cls] > 0 or not g.usable[r]:
            continue
        anchor = np.clip(g.centres[r], [east_min, north_min], [east_max, north_max])
        if np.linalg.norm(anchor - g.centres[r]) > g.radii[r] * g.shrink:
            continue
        for arrive in range(psi.shape[0]):
            if time.perf_counter() >= state.deadline:
                state.time_capped = True
                break
            for dwell in range(1, MAX_DETOUR_DWELL + 1):
                candidate = _detour(state.xy, start, anchor, arrive, dwell, c.step_m * g.shrink)
                if candidate is None:
                    break
                objective = score(candidate)
                if objective > best_objective + IMPROVEMENT_TOLERANCE and _respects(
                        candidate, start, c):
                    best_xy, best_objective = candidate, objective
    if best_xy is None:
        return False
    state.xy, state.objective = best_xy, best_objective
    state.version += 1
    return True


def plan_trajectory_detailed(regions: Sequence[GaussianRegion], priorities: np.ndarray,
                             start_enu_m: Sequence[float], constraints: TrajectoryConstraints,
                             seed: int = 0,
                             held_mass: np.ndarray | None = None) -> TrajectoryPlan:
    """Plan T waypoints (T = rows of priorities) maximising 2CEOAFL eq. (4) under eq. (5) and
    the multirotor constraints; see the module docstring. Raises PlanInfeasibleError (its
    ``cause`` says which constraint) for requests no plan can meet, PlanError for malformed
    ones. ``seed`` is kept for API stability: the plan is a deterministic function of the
    inputs and the constraints' work limits unless a wall-clock safety cap binds
    (``time_capped``).

    held_mass (C,), optional: class mass h_c the drone already holds, in the units of
    Σ_t I_{c,t} ψ_{c,t} (rounds' worth of samples when ψ = 1). It is added to ε_tol inside the
    log of eq. (4), so the proportional fairness covers the drone's whole dataset (eq. (7)
    appends to it) rather than only the planned visits: a class the drone lacks gains most from
    a visit. Every stage (warm start, windows, detours, whole horizon) optimises, and
    ``objective``, ``warm_start_objective`` and ``upper_bound`` report, eq. (4) with h_c. None
    (default): h = 0, the paper's eq. (4) exactly."""
    del seed
    started = time.perf_counter()
    psi = np.asarray(priorities, np.float64)
    start = np.asarray(start_enu_m, np.float64).reshape(-1)[:2]
    c = constraints
    _validate(regions, psi, start, c)
    held = _held(held_mass, psi.shape[1])
    g = _geometry(regions, c)

    def score(xy: np.ndarray) -> float:
        return two_ceoafl_objective(xy, regions, psi, c.zeta, c.eps_tol, held)

    # 1. Warm start: the DP region tour, with the MILP's conservative step, budget and circles
    #    so that it is a feasible point of every window MILP.
    xy, objective = region_tour_warm_start(
        regions, psi, start, c.fence, np.where(g.usable, g.radii * g.shrink, 0.0),
        c.step_m * g.shrink, c.budget_m * g.shrink, c.eps_tol + held, c.warm_start_iterations,
        score)
    warm_objective = objective
    # 2. Windowed SCA (Algorithm 1 on eq. (5) restricted to a window of rounds, the rest
    #    fixed), in passes; each pass: sweeps of half-overlapping windows of W rounds until one
    #    gains no more than convergence_tolerance (cheap MILPs, local moves); a detour to each
    #    class the plan misses (a move too long for a window), each followed by sweeps; then,
    #    if the plan is still far below the relaxation bound, SCA on the whole horizon
    #    (global moves, from tangents at a good incumbent) and sweeps again. The passes stop
    #    when one gains no more than convergence_tolerance. A solution is accepted only if the
    #    true eq. (4) of the whole plan improves and the plan still respects step, fence and
    #    budget, so the objective never falls below the warm start's. Work is bounded by
    #    counts (passes, sweeps, SCA iterations, HiGHS nodes), so the plan is a function of
    #    the inputs; time_budget_s and time_limit_s are safety nets only.
    upper_bound = relaxation_upper_bound(regions, psi, start, c, held)
    state = _SearchState(xy, objective, started + c.time_budget_s)
    num_classes = psi.shape[1]

    def sweeps() -> None:
        for _ in range(c.max_sweeps):
            before = state.objective
            _sweep(state, g, regions, psi, start, c, score, held)
            if state.time_capped or state.objective - before <= c.convergence_tolerance:
                return

    for _ in range(c.window_passes):
        pass_start = state.objective
        sweeps()
        for _ in range(num_classes):
            if state.time_capped or not _insert_missed_classes(state, g, regions, psi, start,
                                                               c, score):
                break
            sweeps()
        gap_per_class = (upper_bound - state.objective) / num_classes
        if (not state.time_capped and c.horizon_iterations > 0
                and gap_per_class > c.horizon_min_gap
                and _sweep(state, g, regions, psi, start, c, score, held, horizon=True)):
            sweeps()
        if state.time_capped or state.objective - pass_start <= c.convergence_tolerance:
            break
    xy, objective, iterations = state.xy, state.objective, state.iterations
    waypoints = [PlanWaypoint(float(e), float(n), float(c.altitude_m)) for e, n in xy]
    indicator = association(xy, regions, psi.shape[1], c.zeta)
    classes = [int(np.argmax(row)) if row.any() else -1 for row in indicator]
    return TrajectoryPlan(waypoints, classes, objective, upper_bound, iterations,
                          time.perf_counter() - started, warm_objective, state.time_capped)


def plan_trajectory(regions: Sequence[GaussianRegion], priorities: np.ndarray,
                    start_enu_m: Sequence[float], constraints: TrajectoryConstraints,
                    seed: int = 0, held_mass: np.ndarray | None = None) -> list[PlanWaypoint]:
    """One waypoint per round maximising 2CEOAFL eq. (4) under the constraints (SCA, Alg. 1)."""
    return plan_trajectory_detailed(regions, priorities, start_enu_m, constraints,
                                    seed, held_mass).waypoints
