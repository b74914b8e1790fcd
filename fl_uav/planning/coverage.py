"""Coverage plans: each drone sweeps a lawnmower over a new box of its own sector every round.

This is the baseline planner of the fleet (a sweep, not data-aware); 2CEOAFL's data-aware
trajectories replace it by config. Sectors make each drone's data location-dependent, as in a
real survey where every drone owns an area.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_uav.configschema import require_choice


class PlanError(ValueError):
    """A plan request cannot be met; the message says why."""


INFEASIBLE_CAUSES = (
    'no_class_regions',          # 2CEOAFL eq. (4) has nothing to maximise
    'fence_smaller_than_step',   # the geofence (or a sector) is narrower than one step / leg
    'budget_below_step',         # the battery budget (path length) is below one step
    'budget_below_tour',         # FedEx eqs. (26)/(28): the energy budget is below a tour
    'client_out_of_reach',       # one client's solo round trip exceeds the budget
    'altitude_outside_band',     # the flight altitude is outside the altitude band
    'start_outside_fence',       # the drone starts outside its geofence
    'no_feasible_plan',          # the solver found no plan meeting every constraint
)


class PlanInfeasibleError(PlanError):
    """A well-formed plan request that no plan can meet; ``cause`` (one of
    :data:`INFEASIBLE_CAUSES`) says which constraint, the message gives the numbers.

    Raised instead of returning a fallback plan, so a caller can never fly a plan that
    silently ignores its request.
    """

    def __init__(self, cause: str, message: str) -> None:
        if cause not in INFEASIBLE_CAUSES:
            raise ValueError(f'unknown infeasibility cause {cause!r}')
        self.cause = cause
        super().__init__(f'{cause}: {message}')


@dataclass(frozen=True)
class PlanWaypoint:
    """A waypoint in local ENU metres (up relative to the world origin)."""

    east_m: float
    north_m: float
    up_m: float


@dataclass(frozen=True)
class CoverageConfig:
    """Lawnmower sweep parameters.

    box_m: side of the square box swept per round.
    leg_spacing_m: distance between lawnmower legs (about one camera footprint).
    altitude_m: flight altitude above the origin.
    margin_m: keep-out distance from the world edge (the geofence is the world less this margin).
    assignment: 'fixed' (drone i always sweeps sector i) or 'rotating' (sector (i + round) mod N,
        so over rounds every drone surveys every sector).
    """

    box_m: float = 160.0
    leg_spacing_m: float = 40.0
    altitude_m: float = 30.0
    margin_m: float = 10.0
    assignment: str = 'rotating'

    def __post_init__(self) -> None:
        require_choice('assignment', self.assignment, SECTOR_ASSIGNMENTS)
        if self.box_m <= 0:
            raise ValueError(f'box_m must be > 0, got {self.box_m}')
        if not (0 < self.leg_spacing_m <= self.box_m):
            raise ValueError(f'leg_spacing_m must be in (0, box_m], got {self.leg_spacing_m}')
        if not (5.0 <= self.altitude_m <= 120.0):
            raise ValueError(f'altitude_m must be in [5, 120], got {self.altitude_m}')
        if self.margin_m < 0:
            raise ValueError(f'margin_m must be >= 0, got {self.margin_m}')


SECTOR_ASSIGNMENTS = ('fixed', 'rotating')
Box = tuple[float, float, float, float]  # east_min, north_min, east_max, north_max


def sector_of(drone_id: int, num_drones: int, world_size_m: float, margin_m: float) -> Box:
    """Split the world into a grid of num_drones cells; drone i owns cell i."""
    if not 0 <= drone_id < num_drones:
        raise PlanError(f'drone id {drone_id} outside 0..{num_drones - 1}')
    cols = math.ceil(math.sqrt(num_drones))
    rows = math.ceil(num_drones / cols)
    row, col = divmod(drone_id, cols)
    width = (world_size_m - 2 * margin_m) / cols
    height = (world_size_m - 2 * margin_m) / rows
    east0 = margin_m + col * width
    north0 = margin_m + row * height
    return east0, north0, east0 + width, north0 + height


def lawnmower(box: Box, leg_spacing_m: float, altitude_m: float) -> list[PlanWaypoint]:
    """Boustrophedon sweep of a box with legs along north."""
    east_min, north_min, east_max, north_max = box
    legs = max(1, int(math.floor((east_max - east_min) / leg_spacing_m)) + 1)
    points: list[PlanWaypoint] = []
    for leg in range(legs):
        east = min(east_min + leg * leg_spacing_m, east_max)
        ends = (north_min, north_max) if leg % 2 == 0 else (north_max, north_min)
        points += [PlanWaypoint(east, ends[0], altitude_m),
                   PlanWaypoint(east, ends[1], altitude_m)]
    return points


def coverage_plan(drone_id: int, num_drones: int, round_index: int, world_size_m: float,
                  config: CoverageConfig, seed: int) -> list[PlanWaypoint]:
    """The round's sweep for one drone: a box drawn at random inside its sector."""
    sector_id = drone_id
    if config.assignment == 'rotating':
        sector_id = (drone_id + round_index - 1) % num_drones
    sector = sector_of(sector_id, num_drones, world_size_m, config.margin_m)
    east_min, north_min, east_max, north_max = sector
    side_e = min(config.box_m, east_max - east_min)
    side_n = min(config.box_m, north_max - north_min)
    if side_e < config.leg_spacing_m:
        raise PlanInfeasibleError(
            'fence_smaller_than_step', f'sector of drone {drone_id} is '
            f'{east_max - east_min:.1f} m wide, narrower than one leg spacing '
            f'({config.leg_spacing_m} m)')
    rng = np.random.default_rng([seed, drone_id, round_index])
    east0 = rng.uniform(east_min, east_max - side_e)
    north0 = rng.uniform(north_min, north_max - side_n)
    plan = lawnmower((east0, north0, east0 + side_e, north0 + side_n), config.leg_spacing_m,
                     config.altitude_m)
    check_geofence(plan, geofence_box(world_size_m, config.margin_m))
    return plan


def geofence_box(world_size_m: float, margin_m: float) -> Box:
    """The horizontal geofence: the world less a margin."""
    return margin_m, margin_m, world_size_m - margin_m, world_size_m - margin_m


def check_geofence(plan: list[PlanWaypoint], fence: Box, max_up_m: float = 120.0) -> None:
    """Raise PlanError if any waypoint leaves the fence or the altitude band."""
    east_min, north_min, east_max, north_max = fence
    tol = 1e-6
    for index, wp in enumerate(plan):
        if not (east_min - tol <= wp.east_m <= east_max + tol
                and north_min - tol <= wp.north_m <= north_max + tol):
            raise PlanError(f'waypoint {index} ({wp.east_m:.1f}, {wp.north_m:.1f}) is outside '
                            f'the geofence {fence}')
        if not (0.0 < wp.up_m <= max_up_m):
            raise PlanError(f'waypoint {index} altitude {wp.up_m:.1f} m outside (0, {max_up_m}]')


def path_length_m(plan: list[PlanWaypoint]) -> float:
    """Horizontal length of a plan."""
    return float(sum(math.hypot(b.east_m - a.east_m, b.north_m - a.north_m)
                     for a, b in zip(plan, plan[1:])))
