"""Warm start for the 2CEOAFL trajectory MICP: a region tour by dynamic programming.

The SCA of 2CEOAFL Algorithm 1 needs initial points (the paper leaves them open). A poor start
(a random walk) leaves most classes with zero mass, and on long horizons the MILP of eq. (5)
then cannot find a better incumbent within its time limit. This module builds a feasible
start that already visits the reachable classes when their priority ψ is high.

Abstraction: the drone is either *dwelling* at an anchor of a region (the region centre, clipped
to the fence, associated with that region's class by eq. (3)), or *in transit* on the straight
line between anchors, taking ``ceil(distance / step)`` rounds (transit rounds count as
unassociated). For class weights w_c, the best tour maximising the linear surrogate
Σ_t w_{c(t)} ψ_{c(t),t} − λ × path length is found exactly by a dynamic program over
(round, anchor) states. The weights are the slopes of eq. (4)'s log, w_c = 1 / (m_c + ε_tol
+ h_c) (h_c: class mass the drone already holds, 0 by default; ``eps_tol`` may be per class), the
same first-order Taylor step as Algorithm 1, taken at the running average m of the class
masses of the tours found so far (fictitious play: a single tangent makes the linear surrogate
jump between extreme tours; the average damps it). λ ≥ 0 is the Lagrange multiplier of the
battery budget, found by bisection when the λ = 0 tour is too long. Every tour is scored with the
true objective of eq. (4) (:func:`~fl_uav.planning.trajectory.two_ceoafl_objective`) and the best
is returned.

Feasibility holds by construction: transit steps are at most ``step_m``, anchors are inside the
fence (so every waypoint, a convex combination of anchors and the start, is too), and the path is
at most ``budget_m``. C5 (eq. (4e)) is not imposed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from fl_uav.planning.coverage import Box
from fl_uav.planning.trajectory_regions import GaussianRegion

# Bisection steps on the budget multiplier λ: the tour length is monotone non-increasing in λ,
# and 10 halvings locate the budget-binding λ to 0.1 % of its bracket, finer than the length
# change of one dwell/transit swap on the instances we plan.
LAMBDA_BISECTION_STEPS = 10
# Smallest positive λ tried, relative to the bracket's top, before bisecting geometrically.
LAMBDA_FLOOR_FRACTION = 1e-3
# Forced visits tried per class and anchor when covering a missed class: the rounds of the
# class's highest priority ψ (a visit then earns the most eq. (4) mass per dwell round).
FORCED_VISIT_ROUNDS = 3


def region_anchors(regions: Sequence[GaussianRegion], fence: Box, inner_radius_m: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Anchor (centre projected onto the fence) of each region whose projection stays within
    ``inner_radius_m`` of the centre. Returns (anchors (A x 2), region index of each)."""
    east_min, north_min, east_max, north_max = fence
    points, owners = [], []
    for index, region in enumerate(regions):
        centre = np.asarray(region.center_enu_m, np.float64)
        anchor = np.clip(centre, [east_min, north_min], [east_max, north_max])
        if inner_radius_m[index] > 0 and np.linalg.norm(anchor - centre) <= inner_radius_m[index]:
            points.append(anchor)
            owners.append(index)
    return np.asarray(points, np.float64).reshape(-1, 2), np.asarray(owners, np.int64)


def _best_tour(gain: np.ndarray, rounds: np.ndarray, dist: np.ndarray, first_rounds: np.ndarray,
               first_dist: np.ndarray, lam: float) -> list[tuple[int, int]]:
    """Exact DP: maximise Σ gain[t, a] over dwell rounds − lam × path. Returns the associated
    (round, anchor) pairs in time order ([] if no tour beats staying at the start)."""
    num_rounds, num_anchors = gain.shape
    value = np.full((num_rounds, num_anchors), -np.inf)
    back_t = np.full((num_rounds, num_anchors), -1, np.int64)
    back_a = np.full((num_rounds, num_anchors), -1, np.int64)
    anchor_ids = np.arange(num_anchors)
    origin = np.broadcast_to(anchor_ids[:, None], (num_anchors, num_anchors))
    for t in range(num_rounds):
        best = np.where(t + 1 >= first_rounds, -lam * first_dist, -np.inf) + gain[t]
        from_t = np.full(num_anchors, -1, np.int64)
        from_a = np.full(num_anchors, -1, np.int64)
        if t > 0:
            dwell = value[t - 1] + gain[t]
            better = dwell > best
            best = np.where(better, dwell, best)
            from_t = np.where(better, t - 1, from_t)
            from_a = np.where(better, anchor_ids, from_a)
            left = t - rounds                       # departure round of each (from, to) move
            moves = np.where(left >= 0, value[np.clip(left, 0, None), origin] - lam * dist,
                             -np.inf)
            source = np.argmax(moves, axis=0)
            move = moves[source, anchor_ids] + gain[t]
            better = move > best
            best = np.where(better, move, best)
            from_t = np.where(better, left[source, anchor_ids], from_t)
            from_a = np.where(better, source, from_a)
        value[t], back_t[t], back_a[t] = best, from_t, from_a
    anchor = int(np.argmax(value[-1]))
    if not value[-1, anchor] > 0:
        return []
    tour, t = [], num_rounds - 1
    while t >= 0:
        tour.append((t, anchor))
        t, anchor = int(back_t[t, anchor]), int(back_a[t, anchor])
    return tour[::-1]


def tour_waypoints(tour: Sequence[tuple[int, int]], anchors: np.ndarray,
                   start_enu_m: np.ndarray, num_rounds: int) -> np.ndarray:
    """Waypoints (T x 2) of a tour: dwell at its anchors, straight transits in equal steps."""
    start = np.asarray(start_enu_m, np.float64)
    xy = np.repeat(start[None], num_rounds, axis=0)
    last_t, last_p = -1, start
    for t, anchor in tour:
        gap = t - last_t
        for j in range(1, gap + 1):
            xy[last_t + j] = last_p + (j / gap) * (anchors[anchor] - last_p)
        last_t, last_p = t, anchors[anchor]
    xy[last_t + 1:] = last_p
    return xy


def region_tour_warm_start(regions: Sequence[GaussianRegion], psi: np.ndarray,
                           start_enu_m: np.ndarray, fence: Box, inner_radius_m: np.ndarray,
                           step_m: float, budget_m: float, eps_tol: float | np.ndarray,
                           iterations: int,
                           score: Callable[[np.ndarray], float]) -> tuple[np.ndarray, float]:
    """Best tour found (waypoints T x 2, its eq. (4) objective by ``score``); see the module
    docstring. ``step_m`` and ``budget_m`` are the (already conservative) step and budget;
    ``eps_tol`` is ε_tol, or ε_tol + h_c per class (C,) with held mass."""
    num_rounds, num_classes = psi.shape
    start = np.asarray(start_enu_m, np.float64)
    stay = np.repeat(start[None], num_rounds, axis=0)
    best_xy, best_obj = stay, score(stay)
    anchors, owners = region_anchors(regions, fence, inner_radius_m)
    if len(anchors) == 0:
        return best_xy, best_obj
    anchor_class = np.array([regions[i].class_id for i in owners])
    dist = np.linalg.norm(anchors[:, None] - anchors[None], axis=2)
    rounds = np.maximum(1, np.ceil(dist / step_m)).astype(np.int64)
    first_dist = np.linalg.norm(anchors - start[None], axis=1)
    first_rounds = np.maximum(1, np.ceil(first_dist / step_m)).astype(np.int64)

    def length(tour: list[tuple[int, int]]) -> float:
        if not tour:
            return 0.0
        hops = [dist[a, b] for (_, a), (_, b) in zip(tour, tour[1:])]
        return float(first_dist[tour[0][1]] + sum(hops))

    def within_budget(gain: np.ndarray, top_gain: float) -> list[list[tuple[int, int]]]:
        """Tours for λ = 0 or, if that is too long, along the bisection on λ (all feasible);
        top_gain / step_m (the gain of a dwell round per metre of one step) starts the bracket."""
        tour = _best_tour(gain, rounds, dist, first_rounds, first_dist, 0.0)
        if length(tour) <= budget_m:
            return [tour]
        low, high = 0.0, top_gain / step_m
        feasible = []
        while True:   # terminates: a large enough λ makes every move unprofitable
            tour = _best_tour(gain, rounds, dist, first_rounds, first_dist, high)
            if length(tour) <= budget_m:
                feasible.append(tour)
                break
            low, high = high, 4.0 * high
        for _ in range(LAMBDA_BISECTION_STEPS):
            mid = (math.sqrt(max(low, high * LAMBDA_FLOOR_FRACTION) * high) if low == 0
                   else 0.5 * (low + high))
            tour = _best_tour(gain, rounds, dist, first_rounds, first_dist, mid)
            if length(tour) <= budget_m:
                high = mid
                feasible.append(tour)
            else:
                low = mid
        return feasible

    def class_mass(tour: list[tuple[int, int]]) -> np.ndarray:
        mass = np.zeros(num_classes)
        for t, anchor in tour:
            mass[anchor_class[anchor]] += psi[t, anchor_class[anchor]]
        return mass

    def consider(tours: list[list[tuple[int, int]]]) -> None:
        nonlocal best_xy, best_obj, best_tour
        for tour in tours:
            xy = tour_waypoints(tour, anchors, start, num_rounds)
            objective = score(xy)
            if objective > best_obj:
                best_xy, best_obj, best_tour = xy, objective, tour

    best_tour: list[tuple[int, int]] = []
    average_mass = np.zeros(num_classes)
    for k in range(iterations):
        weight = 1.0 / (average_mass + eps_tol)
        gain = weight[anchor_class][None, :] * psi[:, anchor_class]
        tours = within_budget(gain, float(gain.max()))
        consider(tours)
        average_mass += (class_mass(tours[-1]) - average_mass) / (k + 1)
    # Cover missed classes: eq. (4) loses about log(ε_tol) per class never visited, which the
    # linear surrogate cannot see. For each missed class, force one dwell at one of its anchors
    # at one of its top-ψ rounds (a bonus above any tour's gain; the missed classes earn nothing
    # otherwise, so the tour returns to the classes it served) and keep the tour if eq. (4)
    # improves; repeat while it does.
    for _ in range(num_classes):
        mass = class_mass(best_tour)
        missed = [int(cls) for cls in np.unique(anchor_class) if mass[cls] <= 0]
        if not missed or not (mass > 0).any():
            break
        weight = np.where(mass > 0, 1.0 / (average_mass + eps_tol), 0.0)
        gain = weight[anchor_class][None, :] * psi[:, anchor_class]
        bonus = float(gain.sum()) + 1.0
        before = best_obj
        for cls in missed:
            peaks = np.argsort(-psi[:, cls], kind='stable')[:FORCED_VISIT_ROUNDS]
            for anchor in np.nonzero(anchor_class == cls)[0]:
                for t in peaks:
                    forced = gain.copy()
                    forced[t, anchor] += bonus
                    consider(within_budget(forced, float(gain.max())))
        if best_obj <= before:
            break
    return best_xy, best_obj
