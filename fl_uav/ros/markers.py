"""rviz markers (visualization_msgs/MarkerArray) for plans: 2CEOAFL trajectories, class regions,
FedEx tours and client assignments, and the ground station's picture of the round
(:func:`station_markers`, on /fl/markers).

Message construction only: the geometry (ellipse axes of a region's Λ, closed tours) and the
colours come from :mod:`fl_uav.planning.display`, ROS-free. Positions are ENU metres in
``frame_id`` (REP 103: x east, y north, z up), as the rest of the fleet's topics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from geometry_msgs.msg import Point
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from fl_uav.fleet.express_routes import ExpressRoutes
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.display import class_colour, region_axes_m, tour_polyline_enu, uav_colour
from fl_uav.planning.routing import RoutePlan
from fl_uav.planning.trajectory_regions import GaussianRegion
from fl_uav.ros.conversions import s_to_stamp, yaw_to_quaternion
from fl_uav.world.landcover import ClassRegion

PATH_NS = 'planned_paths'
WAYPOINT_NS = 'planned_waypoints'
REGION_NS = 'class_regions'
WORLD_REGION_NS = 'world_regions'
TOUR_NS = 'tours'
CLIENT_NS = 'client_assignment'
STATION_NS = 'station'
PATH_WIDTH_M = 2.0
WAYPOINT_DIAMETER_M = 6.0
REGION_THICKNESS_M = 0.5
REGION_ALPHA = 0.4
CLIENT_DIAMETER_M = 25.0
STATION_SIDE_M = 40.0
MIN_SCALE_M = 1e-3    # rviz refuses a marker with a zero scale ("Scale contains 0")


def _marker(ns: str, marker_id: int, marker_type: int, frame_id: str, stamp_s: float,
            rgb: Sequence[float], alpha: float = 1.0) -> Marker:
    marker = Marker(ns=ns, id=int(marker_id), type=marker_type, action=Marker.ADD)
    marker.header.frame_id = frame_id
    marker.header.stamp = s_to_stamp(stamp_s)
    marker.pose.orientation.w = 1.0
    marker.color = ColorRGBA(r=float(rgb[0]), g=float(rgb[1]), b=float(rgb[2]), a=float(alpha))
    return marker


def _point(east_m: float, north_m: float, up_m: float) -> Point:
    return Point(x=float(east_m), y=float(north_m), z=float(up_m))


def clear_markers(frame_id: str, stamp_s: float) -> Marker:
    """A DELETEALL marker: put it first in an array to drop markers of an earlier round."""
    marker = _marker('', 0, Marker.CUBE, frame_id, stamp_s, (0.0, 0.0, 0.0), 0.0)
    marker.action = Marker.DELETEALL
    return marker


def planned_path_markers(plans: Mapping[int, Sequence[PlanWaypoint]], frame_id: str,
                         stamp_s: float) -> MarkerArray:
    """Each drone's planned path (e.g. its 2CEOAFL trajectory, one waypoint per round): a
    LINE_STRIP through its waypoints and a SPHERE_LIST on them, both in the drone's colour;
    marker id = drone id."""
    array = MarkerArray()
    for drone, plan in sorted(plans.items()):
        points = [_point(w.east_m, w.north_m, w.up_m) for w in plan]
        line = _marker(PATH_NS, drone, Marker.LINE_STRIP, frame_id, stamp_s, uav_colour(drone))
        line.scale.x = PATH_WIDTH_M
        line.points = points
        dots = _marker(WAYPOINT_NS, drone, Marker.SPHERE_LIST, frame_id, stamp_s,
                       uav_colour(drone))
        dots.scale.x = dots.scale.y = dots.scale.z = WAYPOINT_DIAMETER_M
        dots.points = list(points)
        array.markers += [line, dots]
    return array


def class_region_markers(regions: Sequence[GaussianRegion], frame_id: str, stamp_s: float,
                         n_std: float = 1.0) -> MarkerArray:
    """The class regions of 2CEOAFL eq. (1): one flat CYLINDER per Gaussian component, its
    n_std ellipse (axes and heading from Λ) on the ground, in its class's colour; marker id =
    index in ``regions``."""
    array = MarkerArray()
    for index, region in enumerate(regions):
        semi_major_m, semi_minor_m, angle_rad = region_axes_m(region, n_std)
        array.markers.append(_region_disc(
            REGION_NS, index, region.class_id, region.center_enu_m,
            (semi_major_m, semi_minor_m), angle_rad, frame_id, stamp_s))
    return array


def tour_markers(plan: RoutePlan, depot_enu_m: Sequence[float],
                 clients_enu_m: Sequence[Sequence[float]], frame_id: str, stamp_s: float,
                 altitude_m: float) -> MarkerArray:
    """FedEx tours and client assignment (FedEx Sec. VI): per UAV k a closed LINE_STRIP
    station -> its clients in order -> station at ``altitude_m`` and a SPHERE_LIST of the
    clients it serves on the ground, both in UAV k's colour (marker id = k); plus a CUBE at
    the station (id 0). UAVs with no clients get an empty sphere list and a zero-length tour."""
    array = MarkerArray()
    for uav, tour in enumerate(plan.tours):
        polyline = tour_polyline_enu(depot_enu_m, clients_enu_m, tour)
        line = _marker(TOUR_NS, uav, Marker.LINE_STRIP, frame_id, stamp_s, uav_colour(uav))
        line.scale.x = PATH_WIDTH_M
        line.points = [_point(e, n, altitude_m) for e, n in polyline]
        served = _marker(CLIENT_NS, uav, Marker.SPHERE_LIST, frame_id, stamp_s,
                         uav_colour(uav))
        served.scale.x = served.scale.y = served.scale.z = CLIENT_DIAMETER_M
        served.points = [_point(e, n, 0.0) for e, n in polyline[1:-1]]
        array.markers += [line, served]
    station = _marker(STATION_NS, 0, Marker.CUBE, frame_id, stamp_s, (0.0, 0.0, 0.0))
    station.pose.position = _point(depot_enu_m[0], depot_enu_m[1], 0.0)
    station.scale.x = station.scale.y = station.scale.z = STATION_SIDE_M
    array.markers.append(station)
    return array


def world_region_markers(regions: Sequence[ClassRegion], frame_id: str,
                         stamp_s: float) -> MarkerArray:
    """The simulated world's land-cover regions (fl_uav.world.landcover): one flat CYLINDER per
    region, its semi-axes ``extent_m`` turned by ``angle_rad``, in its class's colour (the
    colours of the drones' fitted regions); marker id = index in ``regions``."""
    array = MarkerArray()
    for index, region in enumerate(regions):
        array.markers.append(_region_disc(
            WORLD_REGION_NS, index, region.class_id, region.center_enu_m,
            (float(region.extent_m[0]), float(region.extent_m[1])), float(region.angle_rad),
            frame_id, stamp_s))
    return array


def _region_disc(ns: str, marker_id: int, class_id: int, center_enu_m,
                 semi_axes_m: tuple[float, float], angle_rad: float, frame_id: str,
                 stamp_s: float) -> Marker:
    """A flat CYLINDER on the ground: an ellipse of semi-axes ``semi_axes_m`` turned by
    ``angle_rad`` about ``center_enu_m``, in class ``class_id``'s colour (scales kept above
    MIN_SCALE_M)."""
    marker = _marker(ns, marker_id, Marker.CYLINDER, frame_id, stamp_s,
                     class_colour(class_id), REGION_ALPHA)
    marker.pose.position = _point(*center_enu_m, 0.0)
    qx, qy, qz, qw = yaw_to_quaternion(angle_rad)
    marker.pose.orientation.x, marker.pose.orientation.y = qx, qy
    marker.pose.orientation.z, marker.pose.orientation.w = qz, qw
    marker.scale.x = max(2.0 * semi_axes_m[0], MIN_SCALE_M)
    marker.scale.y = max(2.0 * semi_axes_m[1], MIN_SCALE_M)
    marker.scale.z = REGION_THICKNESS_M
    return marker


def station_markers(plans: Mapping[int, Sequence[PlanWaypoint]],
                    world_regions: Sequence[ClassRegion], frame_id: str, stamp_s: float,
                    routes: ExpressRoutes | None = None,
                    altitude_m: float = 0.0) -> MarkerArray:
    """The ground station's picture of a round (/fl/markers), complete in itself: a DELETEALL
    first (markers of an earlier round or an earlier run, e.g. a drone no longer planned, do
    not stay behind), the world's regions, then each drone's plan this round in its colour
    (:func:`planned_path_markers`, the colours of /uav<i>/trajectory/markers); in express
    mode (``routes``) every UAV's FedEx tour at ``altitude_m``, the clients it serves and the
    station (:func:`tour_markers`) instead, so a UAV still out on its tour (FedEx-Async) stays
    drawn while only the departing ones get a plan."""
    array = MarkerArray()
    array.markers.append(clear_markers(frame_id, stamp_s))
    array.markers += world_region_markers(world_regions, frame_id, stamp_s).markers
    if routes is None:
        array.markers += planned_path_markers(plans, frame_id, stamp_s).markers
    else:
        array.markers += tour_markers(routes.plan, routes.layout.station_enu_m,
                                      routes.layout.clients_enu_m, frame_id, stamp_s,
                                      altitude_m).markers
    return array
