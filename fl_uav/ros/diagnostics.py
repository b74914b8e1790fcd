"""The nodes' status on ``/diagnostics``: one publisher, one publish that never ends a node."""

from __future__ import annotations

from collections.abc import Callable

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.publisher import Publisher

from fl_uav.fleet.drone_status import StatusReport
from fl_uav.ros import names
from fl_uav.ros.conversions import status_to_msg

STATUS_ERROR_LOG_THROTTLE_S = 60.0   # a status that could not be built: said once a minute


def status_publisher(node: Node) -> Publisher:
    """The node's publisher of /diagnostics (DIAGNOSTICS_QOS)."""
    return node.create_publisher(DiagnosticArray, names.DIAGNOSTICS_TOPIC,
                                 names.DIAGNOSTICS_QOS)


def publish_status(node: Node, publisher: Publisher, build: Callable[[], StatusReport],
                   stamp_s: float) -> None:
    """Build the status (it reads state other threads write) and publish it; a status that
    cannot be built is skipped and logged at most once a STATUS_ERROR_LOG_THROTTLE_S, never
    raised out of the node's timer."""
    try:
        report = build()
    except Exception as exc:  # noqa: BLE001 - a status skipped, the node goes on
        node.get_logger().warning(f'status not published: {exc!r}',
                                  throttle_duration_sec=STATUS_ERROR_LOG_THROTTLE_S)
        return
    publisher.publish(status_to_msg(report, stamp_s))
