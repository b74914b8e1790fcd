"""The drone's geofence: a horizontal ENU box and an altitude band, checked before upload.

Whatever planner produced a plan (the station's lawnmower, 2CEOAFL's trajectory MICP of eqs.
(4)-(5) with its own fence constraint, or a corrupted frame), the drone checks every waypoint
against its own fence before anything is sent to the autopilot
(:meth:`fl_uav.fleet.drone_pilot.DronePilot.fly_plan`). A plan with any waypoint outside is
rejected whole, never clipped:

* a point outside the fence means the planner or the frame is wrong (a bug, another origin, a
  corrupted or forged plan), so the rest of the plan is not to be trusted either;
* clipping would fly a path nobody planned (legs along the fence line, class regions the
  planner never chose) while the station believes its plan was flown;
* rejection is fail-safe: the drone flies nothing (in the air it keeps holding where its last
  mission ended; on the ground it does not arm), trains on what it has and reports.

The fence is a convex box and the band an interval, so when the start and every waypoint are
inside, every straight leg between them is inside too: checking the waypoints is enough. The
first leg starts where the drone is; the drone is inside because it only ever flew accepted
plans from a home inside the fence. The autopilot's own fence is the second, independent
layer: the drone puts this box there, widened by ``autopilot_margin_m``, before its first flight
(:mod:`fl_uav.fleet.autopilot_fence`), and PX4 acts on a breach with GF_ACTION.

Positions are local ENU metres from the world origin; ``up_m`` is height above the origin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fl_uav.configschema import require_choice
from fl_uav.planning.coverage import Box, PlanError, PlanWaypoint, geofence_box

GEOFENCE_SOURCES = ('world', 'box')
#: What the drone does with its autopilot's own fence (fl_uav/fleet/autopilot_fence.py).
AUTOPILOT_FENCE_MODES = ('upload', 'replace', 'off')
VIOLATION_REASONS = ('not_finite', 'outside_fence', 'below_band', 'above_band')
_TOLERANCE_M = 1e-6


@dataclass(frozen=True)
class GeofenceConfig:
    """Where the drone may fly.

    source: 'world' (the world square less ``coverage.margin_m``, the area the planners use)
    or 'box' (the limits below; set these in the field). east_min_m, north_min_m, east_max_m,
    north_max_m: the horizontal box in local ENU metres (used with source 'box'). min_up_m,
    max_up_m: the altitude band above the origin in metres (120 m is the usual legal ceiling).
    autopilot_fence: the autopilot's own fence, which PX4 enforces with GF_ACTION without the
    companion computer: 'upload' (the box widened by autopilot_margin_m, as one inclusion
    polygon, when the autopilot holds no fence; a fence already there, e.g. drawn in
    QGroundControl, is kept), 'replace' (ours replaces any fence there) or 'off' (left alone).
    autopilot_margin_m: how far outside the box the autopilot's fence lies (a mission
    overshoots its waypoints by up to its acceptance radius).
    """

    source: str = 'world'
    east_min_m: float = 0.0
    north_min_m: float = 0.0
    east_max_m: float = 0.0
    north_max_m: float = 0.0
    min_up_m: float = 5.0
    max_up_m: float = 120.0
    autopilot_fence: str = 'upload'
    autopilot_margin_m: float = 10.0

    def __post_init__(self) -> None:
        require_choice('source', self.source, GEOFENCE_SOURCES)
        require_choice('autopilot_fence', self.autopilot_fence, AUTOPILOT_FENCE_MODES)
        if not (math.isfinite(self.autopilot_margin_m) and self.autopilot_margin_m >= 0.0):
            raise ValueError(f'autopilot_margin_m must be a finite number >= 0, got '
                             f'{self.autopilot_margin_m}')
        values = (self.east_min_m, self.north_min_m, self.east_max_m, self.north_max_m,
                  self.min_up_m, self.max_up_m)
        if not all(math.isfinite(v) for v in values):
            raise ValueError('geofence limits must be finite')
        if not 0.0 < self.min_up_m < self.max_up_m:
            raise ValueError(f'need 0 < min_up_m < max_up_m, got {self.min_up_m}, '
                             f'{self.max_up_m}')
        if self.source == 'box' and not (self.east_min_m < self.east_max_m
                                         and self.north_min_m < self.north_max_m):
            raise ValueError(f'source box needs east_min_m < east_max_m and north_min_m < '
                             f'north_max_m, got ({self.east_min_m}, {self.north_min_m}, '
                             f'{self.east_max_m}, {self.north_max_m})')


@dataclass(frozen=True)
class Geofence:
    """A resolved fence: horizontal box (ENU m) and altitude band (m above the origin)."""

    east_min_m: float
    north_min_m: float
    east_max_m: float
    north_max_m: float
    min_up_m: float
    max_up_m: float

    @property
    def box(self) -> Box:
        """(east_min, north_min, east_max, north_max), as the planners take it."""
        return self.east_min_m, self.north_min_m, self.east_max_m, self.north_max_m

    def contains_en(self, east_m: float, north_m: float, tolerance_m: float = 0.0) -> bool:
        """Whether the point (ENU m) is inside the horizontal box, widened by ``tolerance_m``
        (False for NaN)."""
        return (self.east_min_m - tolerance_m <= east_m <= self.east_max_m + tolerance_m
                and self.north_min_m - tolerance_m <= north_m <= self.north_max_m + tolerance_m)

    def describe(self) -> str:
        """The fence in words, for log lines."""
        return (f'east [{self.east_min_m:.1f}, {self.east_max_m:.1f}] m, north '
                f'[{self.north_min_m:.1f}, {self.north_max_m:.1f}] m, up '
                f'[{self.min_up_m:.1f}, {self.max_up_m:.1f}] m')


def resolve_geofence(config: GeofenceConfig, world_size_m: float,
                     margin_m: float) -> Geofence:
    """The fence a config describes; source 'world' is the world square less margin_m."""
    if config.source == 'world':
        east_min, north_min, east_max, north_max = geofence_box(world_size_m, margin_m)
    else:
        east_min, north_min = config.east_min_m, config.north_min_m
        east_max, north_max = config.east_max_m, config.north_max_m
    if not (east_min < east_max and north_min < north_max):
        raise ValueError(f'geofence is empty: world {world_size_m} m less margin {margin_m} m')
    return Geofence(east_min, north_min, east_max, north_max, config.min_up_m, config.max_up_m)


@dataclass(frozen=True)
class WaypointViolation:
    """Why waypoint ``index`` may not be flown; reason is one of VIOLATION_REASONS."""

    index: int
    reason: str
    detail: str

    def __str__(self) -> str:
        return f'waypoint {self.index} {self.detail}'


class GeofenceViolationError(PlanError):
    """A plan leaves the geofence or the altitude band; nothing of it may be flown.

    violations: every offending waypoint; reason: the first one's reason (VIOLATION_REASONS).
    """

    def __init__(self, violations: Sequence[WaypointViolation], fence: Geofence) -> None:
        self.violations = tuple(violations)
        self.reason = self.violations[0].reason
        shown = '; '.join(str(v) for v in self.violations[:3])
        more = f' (and {len(self.violations) - 3} more)' if len(self.violations) > 3 else ''
        super().__init__(f'{len(self.violations)} waypoint(s) outside the geofence '
                         f'({fence.describe()}): {shown}{more}')


def waypoint_violation(index: int, waypoint: PlanWaypoint,
                       fence: Geofence) -> WaypointViolation | None:
    """The first rule one waypoint breaks (not finite, outside the box, below or above the
    band), or None if it may be flown."""
    east_m, north_m, up_m = waypoint.east_m, waypoint.north_m, waypoint.up_m
    where = f'({east_m:.1f}, {north_m:.1f}, {up_m:.1f}) m'
    if not all(math.isfinite(v) for v in (east_m, north_m, up_m)):
        return WaypointViolation(index, 'not_finite', f'{where} is not finite')
    if not fence.contains_en(east_m, north_m, _TOLERANCE_M):
        return WaypointViolation(index, 'outside_fence', f'{where} is outside the box')
    if up_m < fence.min_up_m - _TOLERANCE_M:
        return WaypointViolation(index, 'below_band', f'{where} is below {fence.min_up_m} m')
    if up_m > fence.max_up_m + _TOLERANCE_M:
        return WaypointViolation(index, 'above_band', f'{where} is above {fence.max_up_m} m')
    return None


def plan_violations(plan: Sequence[PlanWaypoint], fence: Geofence) -> list[WaypointViolation]:
    """Every waypoint of a plan that may not be flown (empty: the whole plan is inside)."""
    found = (waypoint_violation(i, wp, fence) for i, wp in enumerate(plan))
    return [v for v in found if v is not None]


def require_inside(plan: Sequence[PlanWaypoint], fence: Geofence) -> None:
    """Raise GeofenceViolationError if any waypoint of the plan may not be flown."""
    violations = plan_violations(plan, fence)
    if violations:
        raise GeofenceViolationError(violations, fence)
