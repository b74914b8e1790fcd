"""sim_camera node: renders each drone's downward camera at its ground-truth pose.

Publishes sensor_msgs/Image on /uav<i>/camera/image_raw, the topic a Gazebo camera bridge or a
camera driver would use, so the drone node cannot tell the embedded world from the others.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import Image

from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.messages import PoseSample
from fl_uav.fleet.world_setup import fleet_world
from fl_uav.ros import names
from fl_uav.ros.conversions import msg_to_pose, rgb_to_image
from fl_uav.ros.params import declare_config
from fl_uav.ros.spin import run_node
from fl_uav.world.camera import AerialRenderer

REJECT_LOG_PERIOD_S = 5.0
"""At most one warning per this many seconds about refused ground-truth poses."""


class SimCameraNode(Node):
    """One timer renders every drone's frame from the latest ground-truth pose."""

    def __init__(self) -> None:
        super().__init__('sim_camera', automatically_declare_parameters_from_overrides=True)
        self.config, _ = declare_config(self, FleetConfig, {})
        cfg: FleetConfig = self.config
        self.renderer = AerialRenderer(fleet_world(cfg), cfg.camera, seed=cfg.sim_camera.seed)
        self._rng = np.random.default_rng(cfg.sim_camera.seed)
        self._poses: dict[int, PoseSample] = {}
        self._pubs = {}
        # Ground-truth poses refused, by reason ('non_finite'): the drone's last good pose
        # stays in use, the node goes on.
        self.poses_rejected: Counter = Counter()
        for d in range(cfg.num_drones):
            self._pubs[d] = self.create_publisher(
                Image, names.drone_topic(d, names.IMAGE_TOPIC), names.IMAGE_PUB_QOS)
            self.create_subscription(
                PoseStamped, names.drone_topic(d, names.GROUND_TRUTH_POSE_TOPIC),
                lambda msg, d=d: self._on_truth(d, msg), names.TELEMETRY_QOS)
        self.frames_published = 0
        self.create_timer(1.0 / cfg.sim_camera.rate_hz, self._render_all)

    def _on_truth(self, drone: int, msg: PoseStamped) -> None:
        pose = msg_to_pose(msg)
        bad = pose.non_finite_fields()
        if bad:
            self.poses_rejected['non_finite'] += 1
            self.get_logger().warning(
                f'uav{drone} ground-truth pose refused: non-finite {", ".join(bad)} '
                f'(refused so far {dict(self.poses_rejected)})',
                throttle_duration_sec=REJECT_LOG_PERIOD_S)
            return
        self._poses[drone] = pose

    def _render_all(self) -> None:
        now = self.get_clock().now().nanoseconds * 1e-9
        for d, pose in list(self._poses.items()):
            if pose.up_m < self.config.camera.min_altitude_m:
                continue
            image = self.renderer.render(pose.east_m, pose.north_m, pose.up_m, pose.yaw_rad,
                                         self._rng)
            self._pubs[d].publish(rgb_to_image(image, f'uav{d}/camera_optical', now))
            self.frames_published += 1


def main(args: list[str] | None = None) -> None:
    """Spin until shutdown."""
    run_node(SimCameraNode, args)


if __name__ == '__main__':
    main()
