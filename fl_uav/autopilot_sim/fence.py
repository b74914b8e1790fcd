"""The geofence of one simulated PX4 vehicle: FENCE mission items turned into shapes in ENU metres.

A fence is uploaded over MAVLink's mission protocol with ``mission_type``
MAV_MISSION_TYPE_FENCE (as MAVSDK's geofence plugin and QGroundControl do). The items, kept as
uploaded by :mod:`fl_uav.autopilot_sim.link`, are:

* MAV_CMD_NAV_FENCE_POLYGON_VERTEX_INCLUSION (5001) / _EXCLUSION (5002): one vertex each;
  consecutive items form one polygon, and every vertex item of a polygon carries the polygon's
  vertex count in param1 (so two polygons in a row are told apart by that count);
* MAV_CMD_NAV_FENCE_CIRCLE_INCLUSION (5003) / _EXCLUSION (5004): a circle around the item's
  position, param1 the radius in metres;
* MAV_CMD_NAV_FENCE_RETURN_POINT (5000): accepted and ignored (the sim returns to home).

Containment is PX4's (navigator ``Geofence::isInsidePolygonOrCircle``): a horizontal position is
allowed when it is inside at least one inclusion shape (if there is any inclusion shape) and
outside every exclusion shape; no fence items means no fence. Only the horizontal position counts
(PX4's polygons and circles are 2-D; its GF_MAX_HOR_DIST / GF_MAX_VER_DIST limits are not
modelled). The boundary belongs to a shape: a point on an inclusion polygon's edge is inside it,
a point on an exclusion circle's rim is excluded.

Malformed fences are refused with a MAV_MISSION_* result and a readable reason
(:class:`FenceError`): what one item shows (an unknown command, a shape in a non-global frame,
a vertex count that is not a whole number >= 3, a radius that is not finite and > 0) by
:func:`fence_item_problem` as the item arrives, what only the whole upload shows (a polygon
whose vertices do not match its count) by :func:`build_fence` before the upload is accepted.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from pymavlink.dialects.v20 import common as mavlink

from fl_uav.autopilot_sim.mission import GLOBAL_FRAMES, MissionItem
from fl_uav.world.geo import GeoOrigin, geodetic_to_enu

#: PX4 needs at least a triangle for a polygon fence.
MIN_POLYGON_VERTICES = 3
#: A point this close to a polygon edge (m) is on the edge, so inside the polygon.
EDGE_TOLERANCE_M = 1e-6

#: polygon vertex commands -> True for inclusion
POLYGON_COMMANDS: dict[int, bool] = {
    mavlink.MAV_CMD_NAV_FENCE_POLYGON_VERTEX_INCLUSION: True,
    mavlink.MAV_CMD_NAV_FENCE_POLYGON_VERTEX_EXCLUSION: False,
}
#: circle commands -> True for inclusion
CIRCLE_COMMANDS: dict[int, bool] = {
    mavlink.MAV_CMD_NAV_FENCE_CIRCLE_INCLUSION: True,
    mavlink.MAV_CMD_NAV_FENCE_CIRCLE_EXCLUSION: False,
}
#: accepted in a fence upload, no effect in the sim
IGNORED_FENCE_COMMANDS = frozenset({mavlink.MAV_CMD_NAV_FENCE_RETURN_POINT})


class GeofenceAction(enum.IntEnum):
    """PX4's GF_ACTION: what the vehicle does when it breaches the geofence."""

    NONE = 0
    WARNING = 1
    HOLD = 2
    RETURN = 3
    TERMINATE = 4
    LAND = 5

    @property
    def label(self) -> str:
        """Lower-case name for the event log ('none', 'warning', 'hold', ...)."""
        return self.name.lower()


class FenceError(ValueError):
    """A fence upload PX4 would refuse: ``result`` is the MAV_MISSION_* code for the
    MISSION_ACK, ``seq`` the offending item (None: the fence as a whole), the message the reason.
    """

    def __init__(self, reason: str, result: int, seq: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.result = result
        self.seq = seq


@dataclass(frozen=True)
class FencePolygon:
    """A polygon (any simple polygon, convex or not) in ENU metres; ``inclusion`` False: a
    no-fly zone. ``vertices_m`` is ((east_m, north_m), ...), not closed (last != first)."""

    vertices_m: tuple[tuple[float, float], ...]
    inclusion: bool = True
    _bbox_m: tuple[float, float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        vertices = tuple((float(e), float(n)) for e, n in self.vertices_m)
        if len(vertices) < MIN_POLYGON_VERTICES:
            raise ValueError(f'a polygon needs {MIN_POLYGON_VERTICES} vertices, '
                             f'got {len(vertices)}')
        if not all(math.isfinite(v) for vertex in vertices for v in vertex):
            raise ValueError('polygon vertices must be finite')
        object.__setattr__(self, 'vertices_m', vertices)
        easts = [e for e, _ in vertices]
        norths = [n for _, n in vertices]
        object.__setattr__(self, '_bbox_m', (min(easts) - EDGE_TOLERANCE_M,
                                             min(norths) - EDGE_TOLERANCE_M,
                                             max(easts) + EDGE_TOLERANCE_M,
                                             max(norths) + EDGE_TOLERANCE_M))

    def contains(self, east_m: float, north_m: float) -> bool:
        """True inside or on the boundary (even-odd crossing rule, so non-convex polygons
        work; a self-intersecting one counts its doubly covered parts as outside)."""
        east_min, north_min, east_max, north_max = self._bbox_m
        if not (east_min <= east_m <= east_max and north_min <= north_m <= north_max):
            return False
        inside = False
        vertices = self.vertices_m
        east_a, north_a = vertices[-1]
        for east_b, north_b in vertices:
            if _on_segment(east_m, north_m, east_a, north_a, east_b, north_b):
                return True
            # Does the ray from the point towards +east cross edge a-b? (half-open in north,
            # so a vertex on the ray is counted once)
            if (north_a > north_m) != (north_b > north_m):
                east_cross = east_a + (north_m - north_a) * (east_b - east_a) / (
                    north_b - north_a)
                if east_m < east_cross:
                    inside = not inside
            east_a, north_a = east_b, north_b
        return inside


@dataclass(frozen=True)
class FenceCircle:
    """A circle in ENU metres; ``inclusion`` False: a no-fly zone."""

    center_east_m: float
    center_north_m: float
    radius_m: float
    inclusion: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.radius_m) and self.radius_m > 0.0):
            raise ValueError(f'a circle radius must be finite and > 0, got {self.radius_m}')
        if not (math.isfinite(self.center_east_m) and math.isfinite(self.center_north_m)):
            raise ValueError('a circle centre must be finite')

    def contains(self, east_m: float, north_m: float) -> bool:
        """True inside or on the rim."""
        return math.hypot(east_m - self.center_east_m,
                          north_m - self.center_north_m) <= self.radius_m


FenceShape = FencePolygon | FenceCircle


@dataclass(frozen=True)
class Fence:
    """The shapes of one vehicle's geofence; no shapes: no fence (everywhere allowed)."""

    shapes: tuple[FenceShape, ...] = ()

    @property
    def is_empty(self) -> bool:
        """True when there is no fence."""
        return not self.shapes

    @property
    def inclusion_count(self) -> int:
        """Number of inclusion shapes."""
        return sum(1 for shape in self.shapes if shape.inclusion)

    @property
    def exclusion_count(self) -> int:
        """Number of exclusion shapes (no-fly zones)."""
        return sum(1 for shape in self.shapes if not shape.inclusion)

    def allows(self, east_m: float, north_m: float) -> bool:
        """PX4's rule: inside at least one inclusion shape (when there is one) and outside every
        exclusion shape."""
        inside_inclusion = False
        has_inclusion = False
        for shape in self.shapes:
            if shape.inclusion:
                has_inclusion = True
                if not inside_inclusion and shape.contains(east_m, north_m):
                    inside_inclusion = True
            elif shape.contains(east_m, north_m):
                return False
        return inside_inclusion or not has_inclusion


#: No fence: everywhere allowed.
NO_FENCE = Fence()


def fence_item_problem(item: MissionItem) -> FenceError | None:
    """What is wrong with one FENCE item on its own (None: nothing). Its position range is
    :func:`~fl_uav.autopilot_sim.mission.validate_item`'s job."""
    command = item.command
    if command in IGNORED_FENCE_COMMANDS:
        return None
    if command not in POLYGON_COMMANDS and command not in CIRCLE_COMMANDS:
        return FenceError(f'item {item.seq}: command {command} is not a fence command',
                          mavlink.MAV_MISSION_UNSUPPORTED, item.seq)
    if item.frame not in GLOBAL_FRAMES:
        return FenceError(f'item {item.seq}: frame {item.frame} is not a global frame',
                          mavlink.MAV_MISSION_UNSUPPORTED_FRAME, item.seq)
    if command in POLYGON_COMMANDS:
        count = item.param1
        if not (math.isfinite(count) and count == int(count)
                and count >= MIN_POLYGON_VERTICES):
            return FenceError(f'item {item.seq}: polygon vertex count (param1) {count:g} is '
                              f'not a whole number >= {MIN_POLYGON_VERTICES}',
                              mavlink.MAV_MISSION_INVALID_PARAM1, item.seq)
        return None
    radius_m = item.param1
    if not (math.isfinite(radius_m) and radius_m > 0.0):
        return FenceError(f'item {item.seq}: circle radius (param1) {radius_m:g} m is not '
                          'finite and > 0', mavlink.MAV_MISSION_INVALID_PARAM1, item.seq)
    return None


def build_fence(items: Sequence[MissionItem], origin: GeoOrigin) -> Fence:
    """The fence the FENCE items describe, in ENU metres around ``origin``; raises
    :class:`FenceError` (with the MAV_MISSION_* result) for a malformed fence."""
    shapes: list[FenceShape] = []
    index = 0
    while index < len(items):
        item = items[index]
        problem = fence_item_problem(item)
        if problem is not None:
            raise problem
        if item.command in IGNORED_FENCE_COMMANDS:
            index += 1
        elif item.command in CIRCLE_COMMANDS:
            east_m, north_m = _horizontal_enu(item, origin)
            shapes.append(FenceCircle(east_m, north_m, item.param1,
                                      CIRCLE_COMMANDS[item.command]))
            index += 1
        else:
            count = int(item.param1)
            vertices = items[index:index + count]
            for vertex in vertices:
                problem = fence_item_problem(vertex)
                if problem is not None:
                    raise problem
                if vertex.command != item.command or vertex.param1 != item.param1:
                    raise FenceError(
                        f'item {vertex.seq}: polygon from item {item.seq} declares {count} '
                        f'vertices but item {vertex.seq} is not one of them (command '
                        f'{vertex.command}, count {vertex.param1:g})',
                        mavlink.MAV_MISSION_INVALID_PARAM1, vertex.seq)
            if len(vertices) < count:
                raise FenceError(
                    f'item {item.seq}: polygon declares {count} vertices but the fence ends '
                    f'after {len(vertices)}', mavlink.MAV_MISSION_INVALID_PARAM1, item.seq)
            shapes.append(FencePolygon(tuple(_horizontal_enu(v, origin) for v in vertices),
                                       POLYGON_COMMANDS[item.command]))
            index += count
    return Fence(tuple(shapes))


def _horizontal_enu(item: MissionItem, origin: GeoOrigin) -> tuple[float, float]:
    east_m, north_m, _ = geodetic_to_enu(origin, item.lat_deg, item.lon_deg, origin.alt_amsl_m)
    return float(east_m), float(north_m)


def _on_segment(east_m: float, north_m: float, east_a: float, north_a: float,
                east_b: float, north_b: float) -> bool:
    """True when the point is within EDGE_TOLERANCE_M of the segment a-b."""
    if not (min(east_a, east_b) - EDGE_TOLERANCE_M <= east_m
            <= max(east_a, east_b) + EDGE_TOLERANCE_M
            and min(north_a, north_b) - EDGE_TOLERANCE_M <= north_m
            <= max(north_a, north_b) + EDGE_TOLERANCE_M):
        return False
    edge_east, edge_north = east_b - east_a, north_b - north_a
    length_m = math.hypot(edge_east, edge_north)
    if length_m == 0.0:
        return math.hypot(east_m - east_a, north_m - north_a) <= EDGE_TOLERANCE_M
    cross = edge_east * (north_m - north_a) - edge_north * (east_m - east_a)
    return abs(cross) / length_m <= EDGE_TOLERANCE_M
