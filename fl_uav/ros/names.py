"""Topic names and QoS profiles: the one place the fleet's ROS interface is defined."""

from __future__ import annotations

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

GLOBAL_MODEL_TOPIC = '/fl/global_model'
UPDATES_TOPIC = '/fl/updates'
METRICS_TOPIC = '/fl/metrics'
MARKERS_TOPIC = '/fl/markers'
STATION_HEARTBEAT_TOPIC = '/fl/station_heartbeat'   # the station's proof of life (watchdog)
DIAGNOSTICS_TOPIC = '/diagnostics'       # each drone's status (rqt_runtime_monitor, Foxglove)
# Relative names: resolved in the drone's namespace (/uav<i>/...).
PLAN_TOPIC = 'plan'                       # the station's plan for the round (nav_msgs/Path)
TRAJECTORY_TOPIC = 'trajectory'           # the drone's own 2CEOAFL plan, q_t per round (Path)
TRAJECTORY_MARKERS_TOPIC = 'trajectory/markers'   # its fitted class regions and path (rviz)
POSE_TOPIC = 'pose'
BATTERY_TOPIC = 'battery'
IMAGE_TOPIC = 'camera/image_raw'        # the default of the drone's camera_topic
GROUND_TRUTH_POSE_TOPIC = 'ground_truth/pose'
# FedEx express mode: UAV k -> client j on /gc<j>/express/model, j -> k on /uav<k>/express/clu.
EXPRESS_MODEL_TOPIC = 'express/model'
EXPRESS_CLU_TOPIC = 'express/clu'
MAP_FRAME = 'map'
# Node names of the fleet's roles: with the namespace they tell the station which subscriber of
# /fl/global_model is drone i (node 'drone' in /uav<i>) and which of /gc<j>/express/model is
# ground client j (node 'ground_client' in /gc<j>), not a viewer (ros2 topic echo, rviz).
DRONE_NODE_NAME = 'drone'
GROUND_STATION_NODE_NAME = 'ground_station'
GROUND_CLIENT_NODE_NAME = 'ground_client'


def camera_transport_topic(topic: str, transport: str) -> str:
    """Where image_transport publishes an image topic's ``transport``: the topic itself for
    raw, ``<topic>/<transport>`` for the others (``camera/image_raw/compressed``)."""
    return topic if transport == 'raw' else f'{topic}/{transport}'


def drone_namespace(drone_id: int) -> str:
    """Namespace of drone i."""
    return f'/uav{drone_id}'


def ground_client_namespace(client_id: int) -> str:
    """Namespace of FedEx ground client j."""
    return f'/gc{client_id}'


def ground_client_topic(client_id: int, relative: str) -> str:
    """Absolute name of a ground client's topic, for nodes outside its namespace."""
    return f'{ground_client_namespace(client_id)}/{relative}'


def metric_topic(key: str) -> str:
    """The std_msgs/Float64 topic of one round metric (fl_uav/fleet/round_metrics.py)."""
    return f'{METRICS_TOPIC}/{key}'


def drone_topic(drone_id: int, relative: str) -> str:
    """Absolute name of a drone's topic, for nodes outside its namespace."""
    return f'{drone_namespace(drone_id)}/{relative}'


# Models: reliable (best effort drops every message above ~0.5 MB), latched for late joiners.
GLOBAL_MODEL_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                              durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Updates, the station's subscription: keep all, so concurrent uploads from many drones are
# not overwritten; transient local, so a drone's writer hands a (re)matched station the update
# it kept (updates_publisher_qos).
UPDATES_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_ALL,
                         reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)


def updates_publisher_qos(frames_per_update: int) -> QoSProfile:
    """A drone's update publisher: reliable, and it keeps its last update's frames (transient
    local, one per frame) for a station that matches it again. A link down for longer than
    the DDS participant lease (Fast DDS: 20 s) unmatches the drone and the station; with a
    volatile writer an update published meanwhile was never delivered (measured: a 30 s
    outage mid-round lost the round's every update, docs/benchmarks/links.md); now it is
    delivered once the link is back and discovery matches them again. The frames of older
    updates are not kept: the station would reject them (wrong_round)."""
    return QoSProfile(depth=max(1, frames_per_update), history=HistoryPolicy.KEEP_LAST,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)
# The FedEx visit exchange: model frames both ways, so reliable; keep all (a UAV's CLU and a
# retransmitted delivery must not overwrite each other).
EXPRESS_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_ALL,
                         reliability=ReliabilityPolicy.RELIABLE)
# Per-round metrics (the text on /fl/metrics and each number on /fl/metrics/<key>): latched,
# so a viewer started late gets the last 50 rounds (a volatile subscriber, e.g. a plain
# `ros2 topic echo` or rqt_plot, still matches; it gets only new rounds).
METRICS_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
# /diagnostics as diagnostic_updater publishes it: reliable, volatile (it repeats each period).
DIAGNOSTICS_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
# The station's heartbeat: best effort (a lost beat is replaced by the next one, a retransmitted
# old one says nothing on lossy Wi-Fi), volatile (a late joiner must not take a hung station's
# last beat for life: the next beat comes within status.heartbeat_period_s), depth 1.
STATION_HEARTBEAT_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT,
                                   durability=DurabilityPolicy.VOLATILE)
MARKERS_QOS = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
PLAN_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Telemetry and camera frames as REP 2003 says for sensor data: the fleet's subscriptions are
# best effort (TELEMETRY_QOS, IMAGE_QOS: a late pose is worth nothing), the publishers reliable
# (TELEMETRY_PUB_QOS, IMAGE_PUB_QOS). A reliable publisher serves a best-effort subscription
# best effort, and it also matches a viewer's reliable one (rviz's display default, rqt_plot,
# `ros2 topic echo`), which a best-effort publisher never does (no message, an incompatible-QoS
# warning). Keep last, volatile: a publish never waits for a slow reader.
TELEMETRY_QOS = qos_profile_sensor_data
TELEMETRY_PUB_QOS = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE,
                               durability=DurabilityPolicy.VOLATILE)
IMAGE_QOS = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
IMAGE_PUB_QOS = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.VOLATILE)
# The camera node's calibration beside its frames (relative: /uav<i>/camera/camera_info), with
# IMAGE_PUB_QOS as the frames.
CAMERA_INFO_TOPIC = 'camera/camera_info'
