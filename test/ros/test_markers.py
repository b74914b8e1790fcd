"""rviz MarkerArray builders for plans (fl_uav.ros.markers): messages only, no node."""

from __future__ import annotations

import math

import pytest
from visualization_msgs.msg import Marker

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.express_routes import plan_express_routes
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.display import CLASS_COLOURS_RGB, UAV_COLOURS_RGB
from fl_uav.planning.routing import RoutingProblem, plan_from_tours
from fl_uav.planning.trajectory_regions import GaussianRegion
from fl_uav.ros import markers, names
from fl_uav.world.landcover import ClassRegion
from test.unit.fleet.test_express_fleet import EXPRESS

FRAME = names.MAP_FRAME
STAMP_S = 12.5


def _rgb(marker: Marker) -> tuple[float, float, float]:
    return (marker.color.r, marker.color.g, marker.color.b)


def _xyz(points) -> list[tuple[float, float, float]]:
    return [(p.x, p.y, p.z) for p in points]


def _by_ns(array, ns: str) -> list[Marker]:
    return [m for m in array.markers if m.ns == ns]


def test_planned_paths_are_enu_line_strips_and_spheres_coloured_per_drone():
    # Arrange
    plans = {2: [PlanWaypoint(10.0, 20.0, 30.0), PlanWaypoint(110.0, 20.0, 35.0)],
             0: [PlanWaypoint(-5.0, 7.0, 30.0)]}
    # Act
    array = markers.planned_path_markers(plans, FRAME, STAMP_S)
    # Assert
    assert len(array.markers) == 4
    lines = _by_ns(array, markers.PATH_NS)
    assert [m.id for m in lines] == [0, 2]
    assert all(m.type == Marker.LINE_STRIP and m.header.frame_id == 'map' for m in lines)
    assert lines[1].header.stamp.sec == 12 and lines[1].header.stamp.nanosec == 500_000_000
    assert _xyz(lines[1].points) == [(10.0, 20.0, 30.0), (110.0, 20.0, 35.0)]   # x east, y north
    assert _rgb(lines[0]) == pytest.approx(UAV_COLOURS_RGB[0])
    assert _rgb(lines[1]) == pytest.approx(UAV_COLOURS_RGB[2])
    spheres = _by_ns(array, markers.WAYPOINT_NS)
    assert [m.type for m in spheres] == [Marker.SPHERE_LIST] * 2
    assert _xyz(spheres[0].points) == [(-5.0, 7.0, 30.0)]


def test_class_regions_are_flat_ellipses_along_their_covariance_in_class_colours():
    # Arrange: std 40 m along 30° north of east, 10 m across it; and a round one.
    angle = math.radians(30.0)
    c, s = math.cos(angle), math.sin(angle)
    cov = ((1600 * c * c + 100 * s * s, (1600 - 100) * c * s),
           ((1600 - 100) * c * s, 1600 * s * s + 100 * c * c))
    regions = [GaussianRegion(3, (100.0, 250.0), cov, 0.5),
               GaussianRegion(0, (400.0, 50.0), ((25.0, 0.0), (0.0, 25.0)), 0.5)]
    # Act
    array = markers.class_region_markers(regions, FRAME, STAMP_S)
    # Assert
    assert [m.id for m in array.markers] == [0, 1]
    first, second = array.markers
    assert first.type == Marker.CYLINDER and first.ns == markers.REGION_NS
    assert first.header.frame_id == 'map'
    assert (first.pose.position.x, first.pose.position.y) == (100.0, 250.0)
    assert (first.scale.x, first.scale.y) == pytest.approx((80.0, 20.0))
    yaw = 2.0 * math.atan2(first.pose.orientation.z, first.pose.orientation.w)
    assert math.tan(yaw) == pytest.approx(math.tan(angle))     # the axis, either direction
    assert _rgb(first) == pytest.approx(CLASS_COLOURS_RGB[3])
    assert _rgb(second) == pytest.approx(CLASS_COLOURS_RGB[0])
    assert 0.0 < first.color.a < 1.0


def test_tours_and_client_assignment_are_coloured_per_uav_and_closed_at_the_station():
    # Arrange
    depot = (0.0, 0.0)
    clients = [(100.0, 0.0), (100.0, 100.0), (-100.0, 0.0), (0.0, -150.0)]
    problem = RoutingProblem(depot, clients, 3, energy_budget_j=15e3)
    plan = plan_from_tours(problem, 'sync', [[0, 1], [2, 3], []])
    # Act
    array = markers.tour_markers(plan, depot, clients, FRAME, STAMP_S, altitude_m=40.0)
    # Assert
    tours = _by_ns(array, markers.TOUR_NS)
    served = _by_ns(array, markers.CLIENT_NS)
    station = _by_ns(array, markers.STATION_NS)
    assert len(array.markers) == 3 + 3 + 1
    assert [m.type for m in tours] == [Marker.LINE_STRIP] * 3 and len(station) == 1
    assert all(m.header.frame_id == 'map' for m in array.markers)
    assert _xyz(tours[0].points) == [(0.0, 0.0, 40.0), (100.0, 0.0, 40.0),
                                     (100.0, 100.0, 40.0), (0.0, 0.0, 40.0)]
    assert _xyz(served[1].points) == [(-100.0, 0.0, 0.0), (0.0, -150.0, 0.0)]
    assert served[2].points == [] and len(tours[2].points) == 2
    for uav in range(3):
        assert _rgb(tours[uav]) == pytest.approx(UAV_COLOURS_RGB[uav])
        assert _rgb(served[uav]) == _rgb(tours[uav])
    assert len({_rgb(m) for m in tours}) == 3
    assert station[0].type == Marker.CUBE
    assert (station[0].pose.position.x, station[0].pose.position.y) == depot


def test_a_clear_marker_deletes_everything_before_a_new_round():
    # Arrange / Act
    marker = markers.clear_markers(FRAME, STAMP_S)
    # Assert
    assert marker.action == Marker.DELETEALL and marker.header.frame_id == 'map'


def _world_region(class_id: int, east_m: float, extent_m: tuple[float, float]):
    return ClassRegion(class_id, (east_m, 50.0), extent_m, math.radians(90.0))


def test_the_station_picture_starts_with_a_delete_all_and_colours_each_drone_as_its_own():
    # Arrange: two rounds; drone 1 is no longer planned in the second
    regions = [_world_region(2, 100.0, (40.0, 10.0)), _world_region(0, 300.0, (0.0, 5.0))]
    first = {0: [PlanWaypoint(0.0, 0.0, 30.0)], 1: [PlanWaypoint(50.0, 0.0, 30.0)]}
    second = {0: [PlanWaypoint(10.0, 0.0, 30.0)]}
    # Act
    arrays = [markers.station_markers(plans, regions, FRAME, STAMP_S)
              for plans in (first, second)]
    # Assert: each array drops what the one before drew, then draws the round anew
    for array in arrays:
        assert array.markers[0].action == Marker.DELETEALL
        assert all(m.action == Marker.ADD for m in array.markers[1:])
        assert all(m.header.frame_id == 'map' for m in array.markers)
        keys = [(m.ns, m.id) for m in array.markers[1:]]
        assert len(keys) == len(set(keys))               # ns/id unique within the picture
    assert [m.id for m in _by_ns(arrays[1], markers.PATH_NS)] == [0]
    lines = _by_ns(arrays[0], markers.PATH_NS)
    assert [_rgb(m) for m in lines] == [pytest.approx(UAV_COLOURS_RGB[d]) for d in (0, 1)]
    world = _by_ns(arrays[0], markers.WORLD_REGION_NS)
    assert _rgb(world[0]) == pytest.approx(CLASS_COLOURS_RGB[2]) and world[0].color.a > 0
    assert (world[0].scale.x, world[0].scale.y) == (80.0, 20.0)
    assert world[1].scale.x > 0.0                         # a zero extent is no zero scale


def test_the_station_picture_in_express_mode_shows_every_tour_not_only_the_departing():
    # Arrange: FedEx-Async, only UAV 1 departs this round
    routes = plan_express_routes(build_config(FleetConfig, EXPRESS))
    departing = {1: routes.tour_plan(1, 40.0)}
    # Act
    array = markers.station_markers(departing, [], FRAME, STAMP_S, routes, altitude_m=40.0)
    # Assert
    assert array.markers[0].action == Marker.DELETEALL
    assert [m.id for m in _by_ns(array, markers.TOUR_NS)] == [0, 1]
    assert len(_by_ns(array, markers.STATION_NS)) == 1
    assert _by_ns(array, markers.PATH_NS) == []
