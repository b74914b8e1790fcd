"""The simulated autopilot's geofence: FENCE items to shapes, PX4's containment, and refusals."""

import math

import pytest
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.sim.autopilot_fence import (
    NO_FENCE,
    Fence,
    FenceCircle,
    FenceError,
    FencePolygon,
    build_fence,
)
from fl_uav.sim.autopilot_mission import MissionItem
from fl_uav.world.geo import GeoOrigin, enu_to_geodetic

ORIGIN = GeoOrigin()
POLY_IN = mavlink.MAV_CMD_NAV_FENCE_POLYGON_VERTEX_INCLUSION
POLY_OUT = mavlink.MAV_CMD_NAV_FENCE_POLYGON_VERTEX_EXCLUSION
CIRCLE_IN = mavlink.MAV_CMD_NAV_FENCE_CIRCLE_INCLUSION
CIRCLE_OUT = mavlink.MAV_CMD_NAV_FENCE_CIRCLE_EXCLUSION
RETURN_POINT = mavlink.MAV_CMD_NAV_FENCE_RETURN_POINT
# Item positions are degrees * 1e7: about 1 cm of rounding here.
ROUND_TRIP_M = 0.02

SQUARE_M = ((0.0, 0.0), (100.0, 0.0), (100.0, 100.0), (0.0, 100.0))
# A U open to the north: arms east [0, 30] and [70, 100], joined south of north 30.
U_SHAPE_M = ((0.0, 0.0), (100.0, 0.0), (100.0, 100.0), (70.0, 100.0), (70.0, 30.0),
             (30.0, 30.0), (30.0, 100.0), (0.0, 100.0))


def fence_item(seq: int, command: int, param1: float, east_m: float, north_m: float,
               frame: int = mavlink.MAV_FRAME_GLOBAL_INT) -> MissionItem:
    """A FENCE item at an ENU position, as an upload stores it."""
    lat_deg, lon_deg, _ = enu_to_geodetic(ORIGIN, east_m, north_m, 0.0)
    return MissionItem(seq, frame, command, 0, 1, param1, 0.0, 0.0, 0.0, round(lat_deg * 1e7),
                       round(lon_deg * 1e7), 0.0, mavlink.MAV_MISSION_TYPE_FENCE)


def polygon_items(vertices_m, command: int = POLY_IN, first_seq: int = 0) -> list[MissionItem]:
    """One polygon's vertex items, each carrying the vertex count."""
    return [fence_item(first_seq + i, command, float(len(vertices_m)), east_m, north_m)
            for i, (east_m, north_m) in enumerate(vertices_m)]


def _flat(vertices_m) -> list[float]:
    return [value for vertex in vertices_m for value in vertex]


# ----------------------------------------------------------------- containment


@pytest.mark.parametrize(('east_m', 'north_m', 'inside'), [
    (50.0, 50.0, True), (0.5, 99.5, True),
    (100.0, 50.0, True), (0.0, 0.0, True),         # on an edge, on a vertex: inside
    (100.5, 50.0, False), (50.0, -0.5, False), (-1e-3, 50.0, False), (500.0, 500.0, False),
])
def test_a_convex_polygon_contains_its_inside_and_boundary(east_m, north_m, inside):
    assert FencePolygon(SQUARE_M).contains(east_m, north_m) is inside


@pytest.mark.parametrize(('east_m', 'north_m', 'inside'), [
    (15.0, 80.0, True), (85.0, 80.0, True), (50.0, 15.0, True),   # both arms, the base
    (50.0, 80.0, False), (50.0, 30.5, False),                     # the notch between the arms
    (15.0, 30.0, True),      # a ray east from here runs along the notch's floor edge
    (50.0, 100.0, False),    # the notch's open top: level with four vertices, outside
    (30.0, 60.0, True), (50.0, 30.0, True),                       # on the notch's wall, floor
])
def test_a_non_convex_polygon_excludes_its_notch(east_m, north_m, inside):
    assert FencePolygon(U_SHAPE_M).contains(east_m, north_m) is inside


def test_circles_contain_their_inside_and_rim():
    circle = FenceCircle(10.0, -20.0, 5.0)
    assert circle.contains(10.0, -20.0) and circle.contains(13.0, -16.0)   # 5 m: the rim
    assert not circle.contains(13.0, -15.9)
    assert not circle.contains(10.0, -25.01)


def test_no_fence_allows_everywhere():
    assert NO_FENCE.is_empty and build_fence([], ORIGIN) == NO_FENCE
    assert NO_FENCE.allows(0.0, 0.0) and NO_FENCE.allows(-1e5, 1e5)


def test_inclusion_with_an_exclusion_inside_allows_the_rest_of_the_inclusion_only():
    # Arrange: a 100 m square with a 10 m no-fly circle in the middle
    fence = Fence((FencePolygon(SQUARE_M), FenceCircle(50.0, 50.0, 10.0, inclusion=False)))
    # Act / Assert
    assert fence.allows(20.0, 20.0)
    assert not fence.allows(50.0, 50.0) and not fence.allows(50.0, 60.0)   # the hole, its rim
    assert not fence.allows(150.0, 50.0)
    assert (fence.inclusion_count, fence.exclusion_count) == (1, 1)


def test_several_inclusions_allow_their_union_and_exclusions_alone_allow_the_rest():
    union = Fence((FencePolygon(SQUARE_M), FenceCircle(200.0, 50.0, 20.0)))
    zones = Fence((FencePolygon(SQUARE_M, inclusion=False),
                   FenceCircle(200.0, 50.0, 20.0, inclusion=False)))
    points = [(50.0, 50.0), (210.0, 50.0), (150.0, 50.0)]
    assert [union.allows(*p) for p in points] == [True, True, False]
    assert [zones.allows(*p) for p in points] == [False, False, True]


# ----------------------------------------------------------------- items to a fence


def test_fence_items_become_shapes_in_enu_metres():
    # Arrange: a U inclusion, right after it a square exclusion (both polygons back to back,
    # told apart by their vertex counts), a return point, circles
    exclusion_m = ((40.0, 5.0), (60.0, 5.0), (60.0, 25.0), (40.0, 25.0))
    items = polygon_items(U_SHAPE_M) + polygon_items(exclusion_m, POLY_OUT, 8)
    items += [fence_item(12, RETURN_POINT, 0.0, 5.0, 5.0),
              fence_item(13, CIRCLE_IN, 30.0, 300.0, 0.0),
              fence_item(14, CIRCLE_OUT, 5.0, 15.0, 15.0)]
    # Act
    fence = build_fence(items, ORIGIN)
    # Assert
    u_shape, square, circle_in, circle_out = fence.shapes
    assert (u_shape.inclusion, square.inclusion, circle_in.inclusion,
            circle_out.inclusion) == (True, False, True, False)
    assert _flat(u_shape.vertices_m) == pytest.approx(_flat(U_SHAPE_M), abs=ROUND_TRIP_M)
    assert _flat(square.vertices_m) == pytest.approx(_flat(exclusion_m), abs=ROUND_TRIP_M)
    assert (circle_in.center_east_m, circle_in.center_north_m) == pytest.approx(
        (300.0, 0.0), abs=ROUND_TRIP_M)
    assert (circle_in.radius_m, circle_out.radius_m) == (30.0, 5.0)
    # the U's arm, the exclusion in its base, the far inclusion circle, the exclusion circle,
    # the U's notch
    assert [fence.allows(*p) for p in [(85.0, 80.0), (50.0, 15.0), (310.0, 0.0), (15.0, 15.0),
                                       (50.0, 70.0)]] == [True, False, True, False, False]


@pytest.mark.parametrize(('items', 'result', 'seq', 'reason'), [
    (polygon_items(SQUARE_M[:2]), mavlink.MAV_MISSION_INVALID_PARAM1, 0,
     'vertex count (param1) 2 is not a whole number >= 3'),
    ([fence_item(i, POLY_IN, 3.5, *v) for i, v in enumerate(SQUARE_M[:3])],
     mavlink.MAV_MISSION_INVALID_PARAM1, 0, 'vertex count (param1) 3.5'),
    ([fence_item(i, POLY_IN, 4.0, *v) for i, v in enumerate(SQUARE_M[:3])],
     mavlink.MAV_MISSION_INVALID_PARAM1, 0, 'declares 4 vertices but the fence ends after 3'),
    (polygon_items(SQUARE_M)[:3] + [fence_item(3, POLY_IN, 5.0, 0.0, 100.0)],
     mavlink.MAV_MISSION_INVALID_PARAM1, 3, 'declares 4 vertices but item 3 is not one of them'),
    (polygon_items(SQUARE_M)[:3] + [fence_item(3, CIRCLE_IN, 4.0, 0.0, 100.0)],
     mavlink.MAV_MISSION_INVALID_PARAM1, 3, 'item 3 is not one of them'),
    (polygon_items(SQUARE_M)[:3] + [fence_item(3, POLY_OUT, 4.0, 0.0, 100.0)],
     mavlink.MAV_MISSION_INVALID_PARAM1, 3, 'item 3 is not one of them'),
    ([fence_item(0, CIRCLE_IN, 0.0, 0.0, 0.0)], mavlink.MAV_MISSION_INVALID_PARAM1, 0,
     'circle radius (param1) 0 m'),
    ([fence_item(0, CIRCLE_OUT, -5.0, 0.0, 0.0)], mavlink.MAV_MISSION_INVALID_PARAM1, 0,
     'circle radius (param1) -5 m'),
    ([fence_item(0, CIRCLE_IN, math.nan, 0.0, 0.0)], mavlink.MAV_MISSION_INVALID_PARAM1, 0,
     'circle radius (param1) nan m'),
    ([fence_item(0, CIRCLE_IN, math.inf, 0.0, 0.0)], mavlink.MAV_MISSION_INVALID_PARAM1, 0,
     'circle radius (param1) inf m'),
    ([fence_item(0, mavlink.MAV_CMD_NAV_WAYPOINT, 0.0, 0.0, 0.0)],
     mavlink.MAV_MISSION_UNSUPPORTED, 0, 'command 16 is not a fence command'),
    ([fence_item(0, CIRCLE_IN, 5.0, 0.0, 0.0, frame=mavlink.MAV_FRAME_LOCAL_NED)],
     mavlink.MAV_MISSION_UNSUPPORTED_FRAME, 0, 'frame 1 is not a global frame'),
], ids=['two_vertices', 'fractional_count', 'polygon_cut_short', 'count_changes',
        'circle_inside_polygon', 'exclusion_inside_inclusion', 'zero_radius',
        'negative_radius', 'nan_radius', 'infinite_radius', 'waypoint', 'local_frame'])
def test_a_malformed_fence_is_refused_with_its_result_and_reason(items, result, seq, reason):
    with pytest.raises(FenceError) as caught:
        build_fence(items, ORIGIN)
    assert (caught.value.result, caught.value.seq) == (result, seq)
    assert reason in str(caught.value)


def test_shapes_refuse_impossible_geometry():
    with pytest.raises(ValueError, match='3 vertices'):
        FencePolygon(SQUARE_M[:2])
    with pytest.raises(ValueError, match='finite'):
        FencePolygon(((0.0, 0.0), (1.0, math.nan), (1.0, 1.0)))
    with pytest.raises(ValueError, match='radius'):
        FenceCircle(0.0, 0.0, 0.0)
