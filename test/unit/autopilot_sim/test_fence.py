"""The simulated autopilot's geofence: FENCE items to shapes, PX4's containment, and refusals."""

import math

import pytest
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.autopilot_sim.fence import (
    NO_FENCE,
    Fence,
    FenceCircle,
    FenceError,
    FencePolygon,
    build_fence,
)
from fl_uav.autopilot_sim.flight import CommandResult, FlightMode, ParamStore
from fl_uav.autopilot_sim.mission import MissionItem
from fl_uav.world.geo import enu_to_geodetic

from .test_flight import DT_S, ORIGIN, _Sim, _Texts

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


# ----------------------------------------------------------------- the controller (GF_ACTION)

# _Sim's home is (10, -5); this fence keeps 50 m around it.
HOME_FENCE = Fence((FencePolygon(((-40.0, -55.0), (60.0, -55.0), (60.0, 45.0),
                                  (-40.0, 45.0))),))
FENCE_NORTH_M = 45.0
OUTSIDE_M = (10.0, 100.0)           # north of the fence
INSIDE_M = (10.0, 0.0)
# Hold brakes within MPC_ACC_HOR: a few metres past the fence line.
BRAKING_M = 6.0


def _fly_to(sim: _Sim, east_m: float, north_m: float, altitude_m: float = 10.0) -> None:
    assert sim.ctl.reposition(*enu_to_geodetic(ORIGIN, east_m, north_m, altitude_m)) == (
        CommandResult.ACCEPTED)


def _arrived(sim: _Sim, east_m: float, north_m: float) -> bool:
    return math.dist(sim.ctl.position_enu_m[:2], (east_m, north_m)) < 0.05


def _airborne_in_fence(gf_action: float, **params: float) -> tuple[_Sim, _Texts]:
    sim = _Sim(GF_ACTION=gf_action, **params)
    texts = _Texts()
    sim.ctl.listener = texts
    sim.ctl.set_fence(HOME_FENCE)
    sim.fly_up()
    return sim, texts


def _breaches(sim: _Sim) -> list[dict]:
    return [details for name, details in sim.events if name == 'geofence_breach']


def test_gf_action_defaults_to_hold_and_takes_whole_values_0_to_5_only():
    params = ParamStore()
    assert params['GF_ACTION'] == 2.0
    assert not params.set('GF_ACTION', 2.5) and not params.set('GF_ACTION', 6.0)
    assert not params.set('GF_ACTION', -1.0)
    assert params.set('GF_ACTION', 5.0) and params['GF_ACTION'] == 5.0


@pytest.mark.parametrize(('gf_action', 'mode', 'label'), [
    (2.0, FlightMode.HOLD, 'hold'),
    (3.0, FlightMode.RTL, 'return'),
    (5.0, FlightMode.LAND, 'land'),
])
def test_flying_out_of_the_fence_acts_as_gf_action_says(gf_action, mode, label):
    # Arrange
    sim, texts = _airborne_in_fence(gf_action)
    # Act: fly north through the fence line
    _fly_to(sim, *OUTSIDE_M)
    acted = sim.run(60.0, lambda: sim.ctl.mode != FlightMode.HOLD or sim.ctl.failsafe)
    # Assert: the failsafe's mode, PX4's failsafe flag, the texts and the event
    assert acted
    assert (sim.ctl.mode, sim.ctl.failsafe) == (mode, True)
    assert texts.texts == [(mavlink.MAV_SEVERITY_CRITICAL, 'Geofence violation'),
                           (mavlink.MAV_SEVERITY_CRITICAL, 'Failsafe activated')]
    (breach,) = _breaches(sim)
    assert breach['action'] == label
    assert FENCE_NORTH_M < breach['north_m'] < FENCE_NORTH_M + 1.0
    assert breach['east_m'] == pytest.approx(10.0, abs=1e-3)
    assert ('failsafe', {'active': True, 'cause': 'geofence'}) in sim.events


def test_a_geofence_hold_stops_the_vehicle_just_past_the_fence():
    sim, _ = _airborne_in_fence(2.0)
    _fly_to(sim, *OUTSIDE_M)
    sim.run(60.0)
    assert sim.ctl.mode == FlightMode.HOLD and sim.ctl.airborne
    assert FENCE_NORTH_M < sim.ctl.position_enu_m[1] < FENCE_NORTH_M + BRAKING_M
    assert math.hypot(*sim.ctl.velocity_enu_m_s) < 1e-3


def test_gf_action_warning_only_warns_and_keeps_flying():
    sim, texts = _airborne_in_fence(1.0)
    _fly_to(sim, *OUTSIDE_M)
    assert sim.run(60.0, lambda: _arrived(sim, *OUTSIDE_M))
    assert (sim.ctl.mode, sim.ctl.failsafe) == (FlightMode.HOLD, False)
    assert texts.texts == [(mavlink.MAV_SEVERITY_CRITICAL, 'Geofence violation')]
    assert [b['action'] for b in _breaches(sim)] == ['warning']
    assert 'failsafe' not in sim.names()


def test_gf_action_none_does_nothing_but_log_the_breach():
    sim, texts = _airborne_in_fence(0.0)
    _fly_to(sim, *OUTSIDE_M)
    assert sim.run(60.0, lambda: _arrived(sim, *OUTSIDE_M))
    assert (sim.ctl.mode, sim.ctl.failsafe) == (FlightMode.HOLD, False)
    assert texts.texts == []
    assert [b['action'] for b in _breaches(sim)] == ['none']


def test_gf_action_terminate_stops_the_motors_in_the_air():
    # Arrange
    sim, texts = _airborne_in_fence(4.0)
    # Act
    _fly_to(sim, *OUTSIDE_M)
    terminated = sim.run(60.0, lambda: not sim.ctl.armed)
    # Assert: disarmed in the air, down on the ground just past the fence line
    assert terminated
    assert not sim.ctl.airborne and sim.ctl.position_enu_m[2] == 0.0
    assert FENCE_NORTH_M < sim.ctl.position_enu_m[1] < FENCE_NORTH_M + 1.0
    assert texts.texts[:2] == [(mavlink.MAV_SEVERITY_CRITICAL, 'Geofence violation'),
                               (mavlink.MAV_SEVERITY_CRITICAL, 'Failsafe activated')]
    names = sim.names()
    assert names.index('geofence_breach') < names.index('flight_termination') < (
        names.index('disarmed'))
    assert ('landed', {'forced': True}) in sim.events
    assert ('disarmed', {'reason': 'flight_termination'}) in sim.events


def test_a_breach_acts_once_until_the_vehicle_is_back_inside_then_again():
    # Arrange: out once (Hold failsafe), the operator takes over (a mode command)
    sim, texts = _airborne_in_fence(2.0)
    _fly_to(sim, *OUTSIDE_M)
    assert sim.run(60.0, lambda: sim.ctl.failsafe)
    assert sim.ctl.set_mode(FlightMode.HOLD, sim.t_s) == CommandResult.ACCEPTED
    taken_over = sim.ctl.failsafe
    # Act 1: fly on outside the fence: no new breach
    _fly_to(sim, 100.0, 100.0)
    assert sim.run(60.0, lambda: _arrived(sim, 100.0, 100.0))
    still_outside = (len(_breaches(sim)), sim.ctl.failsafe)
    # Act 2: back inside, then out again
    _fly_to(sim, *INSIDE_M)
    assert sim.run(60.0, lambda: _arrived(sim, *INSIDE_M))
    back_inside = (len(_breaches(sim)), sim.ctl.failsafe)
    _fly_to(sim, *OUTSIDE_M)
    assert sim.run(60.0, lambda: sim.ctl.failsafe)
    # Assert
    assert taken_over is False
    assert still_outside == (1, False)
    assert back_inside == (1, False)
    assert len(_breaches(sim)) == 2 and sim.ctl.mode == FlightMode.HOLD
    assert texts.texts.count((mavlink.MAV_SEVERITY_CRITICAL, 'Geofence violation')) == 2
    assert [d for n, d in sim.events if n == 'failsafe'] == [
        {'active': True, 'cause': 'geofence'}, {'active': False, 'reason': 'user_takeover'},
        {'active': True, 'cause': 'geofence'}]


def test_a_return_that_crosses_a_no_fly_zone_keeps_returning_and_warns():
    # Arrange: out north with no fence; then a no-fly circle between the vehicle and home
    sim = _Sim(GF_ACTION=2.0, RTL_RETURN_ALT=12.0)
    texts = _Texts()
    sim.ctl.listener = texts
    sim.fly_up()
    _fly_to(sim, 10.0, 100.0)
    assert sim.run(60.0, lambda: _arrived(sim, 10.0, 100.0))
    sim.ctl.set_fence(Fence((FenceCircle(10.0, 50.0, 10.0, inclusion=False),)))
    # Act: the return flies straight home, through the circle
    sim.ctl.return_to_launch()
    breached = sim.run(60.0, lambda: bool(_breaches(sim)))
    in_zone = (sim.ctl.mode, sim.ctl.failsafe)
    landed = sim.run(200.0, lambda: not sim.ctl.armed)
    # Assert: PX4 does not turn a return into a Hold; it warns, and the vehicle gets home
    assert breached and in_zone == (FlightMode.RTL, True)
    assert (mavlink.MAV_SEVERITY_CRITICAL, 'Geofence violation') in texts.texts
    assert landed and sim.ctl.position_enu_m[:2] == pytest.approx((10.0, -5.0), abs=1e-6)


def test_a_new_fence_that_excludes_a_landing_vehicle_warns_and_the_landing_goes_on():
    sim, texts = _airborne_in_fence(2.0)
    sim.ctl.land()
    sim.run(1.0)
    # Act
    sim.ctl.set_fence(Fence((FenceCircle(10.0, -5.0, 5.0, inclusion=False),)))
    sim.run(DT_S)
    # Assert
    assert (sim.ctl.mode, sim.ctl.failsafe) == (FlightMode.LAND, True)
    assert [b['action'] for b in _breaches(sim)] == ['hold']
    assert sim.run(60.0, lambda: not sim.ctl.armed)


@pytest.mark.parametrize(('gf_action', 'force', 'armed'), [
    (2.0, False, False), (1.0, False, False), (0.0, False, True), (2.0, True, True)])
def test_arming_outside_the_fence_is_denied_unless_gf_action_is_none_or_forced(
        gf_action, force, armed):
    # Arrange: home (10, -5) outside a fence far east
    sim = _Sim(GF_ACTION=gf_action)
    texts = _Texts()
    sim.ctl.listener = texts
    sim.ctl.set_fence(Fence((FenceCircle(500.0, 0.0, 50.0),)))
    # Act
    result = sim.ctl.arm(force=force)
    # Assert
    assert sim.ctl.armed is armed
    if armed:
        assert result == CommandResult.ACCEPTED
        assert texts.texts == []
    else:
        assert result == CommandResult.TEMPORARILY_REJECTED
        assert texts.texts == [
            (mavlink.MAV_SEVERITY_CRITICAL, 'Preflight Fail: Vehicle outside geofence'),
            (mavlink.MAV_SEVERITY_CRITICAL,
             'Arming denied: Resolve system health failures first\t')]
        assert ('arm_denied', {'reason': 'outside_geofence'}) in sim.events


def test_arming_inside_the_fence_is_allowed_and_a_cleared_fence_allows_everywhere():
    sim = _Sim()
    sim.ctl.set_fence(Fence((FenceCircle(500.0, 0.0, 50.0),)))
    assert sim.ctl.arm() == CommandResult.TEMPORARILY_REJECTED
    sim.ctl.set_fence(HOME_FENCE)
    assert sim.ctl.arm() == CommandResult.ACCEPTED
    sim.ctl.disarm()
    sim.ctl.set_fence(NO_FENCE)
    assert sim.ctl.arm() == CommandResult.ACCEPTED
    assert [n for n in sim.names() if n.startswith('fence_')] == [
        'fence_uploaded', 'fence_uploaded', 'fence_cleared']
