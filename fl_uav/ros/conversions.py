"""Message conversions between ROS types and the fleet's plain types (ENU, metres)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path
from sensor_msgs.msg import BatteryState, CompressedImage, Image
from std_msgs.msg import UInt8MultiArray

from fl_uav.fleet import camera_frames
from fl_uav.fleet.camera_frames import ImageFormatError as ImageFormatError  # the nodes' catch
from fl_uav.fleet.drone_status import StatusReport
from fl_uav.fleet.messages import PoseSample
from fl_uav.fleet.station_heartbeat import HEARTBEAT_NAME, Heartbeat
from fl_uav.planning.coverage import PlanWaypoint


def stamp_to_s(stamp: Time) -> float:
    """builtin_interfaces/Time to seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


def s_to_stamp(seconds: float) -> Time:
    """Seconds to builtin_interfaces/Time."""
    sec = math.floor(seconds)
    return Time(sec=int(sec), nanosec=int((seconds - sec) * 1e9))


def bytes_to_msg(data: bytes) -> UInt8MultiArray:
    """Wrap a frame (assigning bytes is ~100× faster than a numpy array)."""
    msg = UInt8MultiArray()
    msg.data = data
    return msg


def msg_to_bytes(msg: UInt8MultiArray) -> bytes:
    """The frame carried by a message."""
    return bytes(msg.data)


def yaw_to_quaternion(yaw_rad: float) -> tuple[float, float, float, float]:
    """(x, y, z, w) of a rotation about the up axis."""
    return 0.0, 0.0, math.sin(yaw_rad / 2.0), math.cos(yaw_rad / 2.0)


def quaternion_to_yaw(x: float, y: float, z: float, w: float) -> float:
    """Yaw (about up) of a quaternion; NaN if a component is not finite (atan2 would turn
    an infinite component into a plausible angle)."""
    if not all(math.isfinite(c) for c in (x, y, z, w)):
        return math.nan
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def pose_to_msg(pose: PoseSample, frame_id: str) -> PoseStamped:
    """PoseSample (ENU) to geometry_msgs/PoseStamped."""
    msg = PoseStamped()
    msg.header.frame_id = frame_id
    msg.header.stamp = s_to_stamp(pose.stamp_s)
    msg.pose.position.x = float(pose.east_m)
    msg.pose.position.y = float(pose.north_m)
    msg.pose.position.z = float(pose.up_m)
    qx, qy, qz, qw = yaw_to_quaternion(pose.yaw_rad)
    msg.pose.orientation.x, msg.pose.orientation.y = qx, qy
    msg.pose.orientation.z, msg.pose.orientation.w = qz, qw
    return msg


def msg_to_pose(msg: PoseStamped) -> PoseSample:
    """geometry_msgs/PoseStamped (ENU) to PoseSample."""
    q = msg.pose.orientation
    return PoseSample(msg.pose.position.x, msg.pose.position.y, msg.pose.position.z,
                      quaternion_to_yaw(q.x, q.y, q.z, q.w), stamp_to_s(msg.header.stamp))


def plan_to_path(plan: Sequence[PlanWaypoint], frame_id: str, stamp_s: float) -> Path:
    """Waypoints to nav_msgs/Path."""
    path = Path()
    path.header.frame_id = frame_id
    path.header.stamp = s_to_stamp(stamp_s)
    for wp in plan:
        pose = PoseStamped()
        pose.header = path.header
        pose.pose.position.x = float(wp.east_m)
        pose.pose.position.y = float(wp.north_m)
        pose.pose.position.z = float(wp.up_m)
        pose.pose.orientation.w = 1.0
        path.poses.append(pose)
    return path


def path_to_plan(path: Path) -> list[PlanWaypoint]:
    """nav_msgs/Path to waypoints."""
    return [PlanWaypoint(p.pose.position.x, p.pose.position.y, p.pose.position.z)
            for p in path.poses]


def rgb_to_image(image: np.ndarray, frame_id: str, stamp_s: float) -> Image:
    """uint8 H×W×3 RGB array to sensor_msgs/Image (rgb8)."""
    msg = Image()
    msg.header.frame_id = frame_id
    msg.header.stamp = s_to_stamp(stamp_s)
    msg.height, msg.width = int(image.shape[0]), int(image.shape[1])
    msg.encoding = 'rgb8'
    msg.step = msg.width * 3
    msg.data = np.ascontiguousarray(image, np.uint8).tobytes()
    return msg


def image_to_rgb(msg: Image) -> np.ndarray:
    """sensor_msgs/Image to a new uint8 H×W×3 RGB array (the encodings of
    fl_uav.fleet.camera_frames); ImageFormatError naming the reason for any other."""
    return camera_frames.raw_to_rgb(msg.encoding, msg.width, msg.height, msg.step, msg.data,
                                    bool(msg.is_bigendian))


def compressed_to_rgb(msg: CompressedImage) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg or png, as image_transport's compressed plug-in
    writes it) to a new uint8 H×W×3 RGB array; ImageFormatError naming the reason otherwise."""
    return camera_frames.compressed_to_rgb(msg.format, msg.data)


def battery_to_msg(remaining_fraction: float, voltage_v: float, stamp_s: float) -> BatteryState:
    """Battery telemetry to sensor_msgs/BatteryState, filled as the message defines it (and as
    rqt and Foxglove read it): ``percentage`` in 0..1 (a fraction outside is clipped, an unknown
    one is NaN), ``voltage`` in volts, and NaN in every field the autopilot does not report
    (temperature, current, charge, capacity, design capacity): a default 0 would plot as a
    measured 0 °C and 0 A. Status, health and technology are UNKNOWN (MAVLink telemetry does
    not say whether the pack charges)."""
    msg = BatteryState()
    msg.header.stamp = s_to_stamp(stamp_s)
    fraction = float(remaining_fraction)
    msg.percentage = min(max(fraction, 0.0), 1.0) if math.isfinite(fraction) else math.nan
    msg.voltage = float(voltage_v) if math.isfinite(voltage_v) else math.nan
    msg.temperature = msg.current = msg.charge = math.nan
    msg.capacity = msg.design_capacity = math.nan
    msg.power_supply_status = BatteryState.POWER_SUPPLY_STATUS_UNKNOWN
    msg.power_supply_health = BatteryState.POWER_SUPPLY_HEALTH_UNKNOWN
    msg.power_supply_technology = BatteryState.POWER_SUPPLY_TECHNOLOGY_UNKNOWN
    msg.present = True
    return msg


def metrics_to_msg(name: str, values: Mapping[str, object], stamp_s: float) -> DiagnosticArray:
    """A flat mapping of metrics to one DiagnosticStatus in a DiagnosticArray."""
    msg = DiagnosticArray()
    msg.header.stamp = s_to_stamp(stamp_s)
    status = DiagnosticStatus(level=DiagnosticStatus.OK, name=name, hardware_id='fl_uav')
    status.message = ' '.join(f'{k}={v}' for k, v in list(values.items())[:4])
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]
    msg.status = [status]
    return msg


def heartbeat_to_msg(beat: Heartbeat, stamp_s: float,
                     values: Sequence[tuple[str, str]] | None = None) -> DiagnosticArray:
    """The station's heartbeat as a one-status DiagnosticArray (/fl/station_heartbeat);
    ``values``: the key/value pairs it carries (a signed beat's,
    fl_uav/fleet/heartbeat_auth.py; None: the beat's own)."""
    msg = DiagnosticArray()
    msg.header.stamp = s_to_stamp(stamp_s)
    status = DiagnosticStatus(level=DiagnosticStatus.OK, name=HEARTBEAT_NAME,
                              hardware_id='ground_station', message=beat.describe())
    status.values = [KeyValue(key=k, value=v)
                     for k, v in (beat.values() if values is None else values)]
    msg.status = [status]
    return msg


def msg_to_heartbeat_fields(msg: DiagnosticArray) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The status name and key/value pairs (in order, as carried) of a heartbeat message;
    ValueError naming the problem for a message of not one status."""
    if len(msg.status) != 1:
        raise ValueError(f'heartbeat message with {len(msg.status)} statuses, not 1')
    status = msg.status[0]
    return status.name, tuple((kv.key, kv.value) for kv in status.values)


def msg_to_heartbeat(msg: DiagnosticArray) -> Heartbeat:
    """The heartbeat a message carries, unverified (a signed beat's signature fields are
    ignored); ValueError naming the problem for any other message (not one status, another
    name, a malformed value)."""
    name, values = msg_to_heartbeat_fields(msg)
    return Heartbeat.from_values(name, dict(values))


def status_to_msg(report: StatusReport, stamp_s: float) -> DiagnosticArray:
    """A drone's StatusReport as a one-status DiagnosticArray (for /diagnostics)."""
    msg = DiagnosticArray()
    msg.header.stamp = s_to_stamp(stamp_s)
    status = DiagnosticStatus(level=bytes([report.level]), name=report.name,
                              hardware_id=report.hardware_id, message=report.message)
    status.values = [KeyValue(key=k, value=v) for k, v in report.values]
    msg.status = [status]
    return msg

