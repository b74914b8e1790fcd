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
  ζ λ_r, encoded with big M (M = fence diagonal + largest radius, so it is inactive at I = 0)
  on an inscribed regular polygon with ``polygon_sides`` faces (an inner approximation, so every
  association the MILP claims holds in the exact circle).
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
* SCA (Algorithm 1): the concave log is replaced by epigraph variables s_c ≤ tangent of log at
  every iterate so far (plus a seeded random feasible walk and a geometric grid of points as the
  initial linearisation). Each iteration solves the resulting MILP with HiGHS
  (:func:`scipy.optimize.milp`), linearises log at the new iterate, and stops when the MILP's
  (upper-bound) objective is within ``tolerance`` of the true objective of its solution or after
  ``max_iterations``; the best true-objective iterate is returned. Each HiGHS call is limited
  by ``time_limit_s`` (default 6 s; at T = 50 on the default world the root node alone takes
  seconds, so node limits do not bound time). When the limit binds, the incumbent is used: the
  plan is feasible but not proven optimal, and it may differ between runs (wall-clock
  dependent). Small instances solve to ``mip_rel_gap`` and are deterministic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

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

_TINY = 1e-300          # floor of a covariance determinant before its log

__all__ = [
    'GaussianRegion', 'TrajectoryConstraints', 'TrajectoryPlan', 'associated_regions',
    'association',
    'class_balance', 'class_priorities', 'expected_class_samples', 'fit_class_regions',
    'lawnmower_baseline', 'plan_trajectory', 'plan_trajectory_detailed', 'random_baseline',
    'regions_from_landcover', 'total_path_m', 'two_ceoafl_objective',
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
    polygon_sides, max_iterations, tolerance, node_limit, time_limit_s, mip_rel_gap: solver.
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
    max_iterations: int = 4
    tolerance: float = 1e-4
    node_limit: int = 100000
    time_limit_s: float = 6.0
    mip_rel_gap: float = 1e-3

    @property
    def step_m(self) -> float:
        """Longest horizontal step between consecutive waypoints (speed x round time)."""
        return self.max_speed_m_s * self.round_time_s


@dataclass(frozen=True)
class TrajectoryPlan:
    """A plan with its diagnostics.

    waypoints: one per round; classes: associated class per round (-1: none), by
    :func:`association`; objective: eq. (4) of the waypoints; upper_bound: best MILP bound seen
    on the last iteration; iterations: SCA iterations run; solve_time_s: wall time.
    """

    waypoints: list[PlanWaypoint]
    classes: list[int]
    objective: float
    upper_bound: float
    iterations: int
    solve_time_s: float


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


def _circle_meets_box(centre: Sequence[float], radius_m: float, fence: Box) -> bool:
    """Whether the association circle ||q - μ|| <= ζλ of eq. (3) overlaps the fence box."""
    east_min, north_min, east_max, north_max = fence
    near_e = min(max(centre[0], east_min), east_max)
    near_n = min(max(centre[1], north_min), north_max)
    return math.hypot(centre[0] - near_e, centre[1] - near_n) <= radius_m


class _Model:
    """The MILP of one SCA iteration, built once; only the tangent cuts grow."""

    def __init__(self, regions: Sequence[GaussianRegion], psi: np.ndarray, start: np.ndarray,
                 c: TrajectoryConstraints, held: np.ndarray) -> None:
        self.T, self.C = psi.shape
        self.R = len(regions)
        self.psi = psi
        self.c = c
        self.offset = c.eps_tol + held      # ε_tol + h_c inside the log of eq. (4)
        T, R, C = self.T, self.R, self.C
        self.n_var = 3 * T + T * R + C
        m = c.polygon_sides
        angles = 2.0 * math.pi * np.arange(m) / m
        dirs = np.stack([np.cos(angles), np.sin(angles)], axis=1)
        shrink = math.cos(math.pi / m)
        east_min, north_min, east_max, north_max = c.fence
        centres = np.array([r.center_enu_m for r in regions], np.float64)
        radii = np.array([c.zeta * r.radius_m for r in regions], np.float64)
        big_m = math.hypot(east_max - east_min, north_max - north_min) + float(radii.max()) + 1.0
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

        # Motion: d_j·(q_t - q_{t-1}) - l_t <= 0 (q_{-1} = start).
        for t in range(T):
            for dx, dy in dirs:
                entries = [(self.e(t), dx), (self.n(t), dy), (self.step(t), -1.0)]
                if t == 0:
                    add(entries, -np.inf, float(dx * start[0] + dy * start[1]))
                else:
                    add(entries + [(self.e(t - 1), -dx), (self.n(t - 1), -dy)], -np.inf, 0.0)
        if math.isfinite(c.budget_m):
            add([(self.step(t), 1.0) for t in range(T)], -np.inf, c.budget_m * shrink)
        # C2: d_j·q_t + M I_{t,r} <= d_j·μ_r + ζλ_r cos(π/m) + M.
        reach = np.linalg.norm(centres - start[None], axis=1) - radii * shrink
        fixed_zero = np.zeros((T, R), bool)
        inside_fence = ((centres[:, 0] + radii * shrink >= east_min)
                        & (centres[:, 0] - radii * shrink <= east_max)
                        & (centres[:, 1] + radii * shrink >= north_min)
                        & (centres[:, 1] - radii * shrink <= north_max))
        for t in range(T):
            limit = min((t + 1) * c.step_m, c.budget_m)
            fixed_zero[t] = (reach > limit) | ~inside_fence | (radii <= 0)
        for t in range(T):
            for r in range(R):
                if fixed_zero[t, r]:
                    continue
                for dx, dy in dirs:
                    add([(self.e(t), dx), (self.n(t), dy), (self.ind(t, r), big_m)], -np.inf,
                        float(dx * centres[r, 0] + dy * centres[r, 1]
                              + radii[r] * shrink + big_m))
        # C4: at most one association per round.
        for t in range(T):
            add([(self.ind(t, r), 1.0) for r in range(R)], -np.inf, 1.0)
        # C5 (optional): visits of a class per non-overlapping window of C rounds <= I_max.
        self.region_class = np.array([r.class_id for r in regions])
        if c.max_visits_per_window is not None:
            for start_t in range(0, T, C):
                for cls in range(C):
                    members = np.nonzero(self.region_class == cls)[0]
                    entries = [(self.ind(t, int(r)), 1.0)
                               for t in range(start_t, min(start_t + C, T)) for r in members]
                    if entries:
                        add(entries, -np.inf, float(c.max_visits_per_window))
        self.base = (rows, cols, vals, lower, upper, row)
        self.cuts: list[tuple[int, float]] = []
        lb = np.full(self.n_var, -np.inf)
        ub = np.full(self.n_var, np.inf)
        for t in range(T):
            lb[self.e(t)], ub[self.e(t)] = east_min, east_max
            lb[self.n(t)], ub[self.n(t)] = north_min, north_max
            lb[self.step(t)], ub[self.step(t)] = 0.0, c.step_m * shrink
            for r in range(R):
                lb[self.ind(t, r)] = 0.0
                ub[self.ind(t, r)] = 0.0 if fixed_zero[t, r] else 1.0
        self.max_mass = psi.sum(0)
        for cls in range(C):
            lb[self.s(cls)] = math.log(self.offset[cls])
            ub[self.s(cls)] = math.log(self.max_mass[cls] + self.offset[cls])
        self.bounds = Bounds(lb, ub)
        self.integrality = np.zeros(self.n_var)
        self.integrality[3 * T:3 * T + T * R] = 1
        self.cost = np.zeros(self.n_var)
        self.cost[3 * T + T * R:] = -1.0

    def e(self, t: int) -> int:
        return 3 * t

    def n(self, t: int) -> int:
        return 3 * t + 1

    def step(self, t: int) -> int:
        return 3 * t + 2

    def ind(self, t: int, r: int) -> int:
        return 3 * self.T + t * self.R + r

    def s(self, cls: int) -> int:
        return 3 * self.T + self.T * self.R + cls

    def add_tangent(self, cls: int, point: float) -> None:
        """Linearise log at x_c = point: s_c <= log(a) - 1 + x_c / a, x_c = Σ ψ I + ε + h_c."""
        point = max(float(point), float(self.offset[cls]))
        if any(cl == cls and abs(a - point) <= 1e-9 * max(1.0, point) for cl, a in self.cuts):
            return
        self.cuts.append((cls, point))

    def solve(self) -> tuple[np.ndarray, float] | None:
        rows, cols, vals, lower, upper, n_rows = self.base
        rows, cols, vals = list(rows), list(cols), list(vals)
        lower, upper = list(lower), list(upper)
        members = [np.nonzero(self.region_class == cls)[0] for cls in range(self.C)]
        for k, (cls, a) in enumerate(self.cuts):
            r_index = n_rows + k
            rows.append(r_index)
            cols.append(self.s(cls))
            vals.append(1.0)
            for t in range(self.T):
                weight = self.psi[t, cls] / a
                if weight == 0:
                    continue
                for r in members[cls]:
                    rows.append(r_index)
                    cols.append(self.ind(t, int(r)))
                    vals.append(-weight)
            lower.append(-np.inf)
            upper.append(math.log(a) - 1.0 + float(self.offset[cls]) / a)
        matrix = coo_matrix((vals, (rows, cols)), shape=(n_rows + len(self.cuts), self.n_var))
        result = milp(self.cost, integrality=self.integrality, bounds=self.bounds,
                      constraints=LinearConstraint(matrix.tocsr(), lower, upper),
                      options={'node_limit': self.c.node_limit,
                               'time_limit': self.c.time_limit_s,
                               'mip_rel_gap': self.c.mip_rel_gap})
        if result.x is None:
            return None
        bound = -float(result.mip_dual_bound) if result.mip_dual_bound is not None else np.inf
        return np.asarray(result.x), bound

    def positions(self, x: np.ndarray) -> np.ndarray:
        east_min, north_min, east_max, north_max = self.c.fence
        xy = np.stack([x[[self.e(t) for t in range(self.T)]],
                       x[[self.n(t) for t in range(self.T)]]], axis=1)
        return np.clip(xy, [east_min, north_min], [east_max, north_max])

    def class_mass(self, x: np.ndarray) -> np.ndarray:
        ind = np.rint(x[3 * self.T:3 * self.T + self.T * self.R]).reshape(self.T, self.R)
        per_class = np.zeros((self.T, self.C))
        for r in range(self.R):
            per_class[:, self.region_class[r]] += ind[:, r]
        return (per_class * self.psi).sum(0) + self.offset


def plan_trajectory_detailed(regions: Sequence[GaussianRegion], priorities: np.ndarray,
                             start_enu_m: Sequence[float], constraints: TrajectoryConstraints,
                             seed: int = 0,
                             held_mass: np.ndarray | None = None) -> TrajectoryPlan:
    """Plan T waypoints (T = rows of priorities) by SCA on the 2CEOAFL MICP, eqs. (4)-(5) and
    Algorithm 1; see the module docstring. Raises PlanInfeasibleError (its ``cause`` says
    which constraint) for requests no plan can meet, PlanError for malformed ones.

    held_mass (C,), optional: class mass h_c the drone already holds, in the units of
    Σ_t I_{c,t} ψ_{c,t} (rounds' worth of samples when ψ = 1). It is added to ε_tol inside the
    log of eq. (4), so the proportional fairness covers the drone's whole dataset (eq. (7)
    appends to it) rather than only the planned visits: a class the drone lacks gains most from
    a visit. None (default): h = 0, the paper's eq. (4) exactly."""
    started = time.perf_counter()
    psi = np.asarray(priorities, np.float64)
    start = np.asarray(start_enu_m, np.float64).reshape(-1)[:2]
    c = constraints
    _validate(regions, psi, start, c)
    held = _held(held_mass, psi.shape[1])
    model = _Model(regions, psi, start, c, held)
    # Initial linearisation: a seeded random feasible walk, plus a geometric grid of points.
    initial = random_baseline(c, start, psi.shape[0], seed)
    initial_mass = expected_class_samples(initial, regions, psi, c.zeta) + model.offset
    for cls in range(model.C):
        model.add_tangent(cls, initial_mass[cls])
        top = model.max_mass[cls] + model.offset[cls]
        for point in np.geomspace(max(model.offset[cls], top * 1e-3), top, 5):
            model.add_tangent(cls, point)
    best_xy = _xy(initial)
    best_obj = float(np.log(initial_mass).sum())
    bound = np.inf
    iterations = 0
    for iterations in range(1, c.max_iterations + 1):
        solved = model.solve()
        if solved is None:
            if iterations == 1:
                raise PlanInfeasibleError('no_feasible_plan', 'the planning MILP found no '
                                          'feasible trajectory (HiGHS)')
            break
        x, bound = solved
        xy = model.positions(x)
        true_obj = two_ceoafl_objective(xy, regions, psi, c.zeta, c.eps_tol, held)
        if true_obj > best_obj + 1e-12:
            best_obj, best_xy = true_obj, xy
        mass = model.class_mass(x)
        predicted = float(-np.dot(model.cost, x))
        if predicted - float(np.log(mass).sum()) <= c.tolerance:
            break
        for cls in range(model.C):
            model.add_tangent(cls, mass[cls])
    waypoints = [PlanWaypoint(float(e), float(n), float(c.altitude_m)) for e, n in best_xy]
    indicator = association(best_xy, regions, model.C, c.zeta)
    classes = [int(np.argmax(row)) if row.any() else -1 for row in indicator]
    return TrajectoryPlan(waypoints, classes, best_obj, bound, iterations,
                          time.perf_counter() - started)


def plan_trajectory(regions: Sequence[GaussianRegion], priorities: np.ndarray,
                    start_enu_m: Sequence[float], constraints: TrajectoryConstraints,
                    seed: int = 0) -> list[PlanWaypoint]:
    """One waypoint per round maximising 2CEOAFL eq. (4) under the constraints (SCA, Alg. 1)."""
    return plan_trajectory_detailed(regions, priorities, start_enu_m, constraints,
                                    seed).waypoints
