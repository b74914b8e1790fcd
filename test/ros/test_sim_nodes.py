"""sim_camera and autopilot_sim nodes over real rclpy/DDS (and real MAVLink for the sim)."""

from __future__ import annotations

import math
import socket
import time

import pytest
import rclpy
from geometry_msgs.msg import PoseStamped
from pymavlink.dialects.v20 import common as mavlink
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import Image

from fl_uav.fleet.messages import PoseSample
from fl_uav.fleet_run.launch_plan import write_params_file
from fl_uav.ros import names
from fl_uav.ros.autopilot_sim_node import AutopilotSimNode
from fl_uav.ros.conversions import image_to_rgb, msg_to_pose, pose_to_msg
from fl_uav.ros.sim_camera_node import SimCameraNode
from fl_uav.world.landcover import FOREST, UNKNOWN, WATER
from test.conftest import free_udp_port_block, tiny_fleet_overrides
from test.ros.rosutil import spin_until
from test.unit.world.test_raster import UTM_32N, enu_of, write_raster

pytestmark = pytest.mark.ros


@pytest.fixture
def ros_node(tmp_path, request):
    created = []

    def make(node_cls, overrides, extra_args=()):
        params = write_params_file(overrides, tmp_path / 'params.yaml')
        rclpy.init(args=['--ros-args', '--params-file', str(params), *extra_args])
        node = node_cls()
        probe = rclpy.create_node('probe')
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.add_node(probe)
        created.append((node, probe, executor))
        return node, probe, executor

    yield make
    for node, probe, executor in created:
        executor.shutdown()
        if hasattr(node, 'shutdown'):
            node.shutdown()
        probe.destroy_node()
        node.destroy_node()
        rclpy.try_shutdown()


def _camera(ros_node):
    """A one-drone sim_camera at 20 Hz, the probe's list of its images and a publisher of
    drone 0's ground-truth pose."""
    node, probe, executor = ros_node(SimCameraNode, {**tiny_fleet_overrides(1, 14540),
                                                     'sim_camera.rate_hz': 20.0})
    images = []
    probe.create_subscription(Image, names.drone_topic(0, names.IMAGE_TOPIC), images.append,
                              names.IMAGE_QOS)
    truth = probe.create_publisher(PoseStamped, names.drone_topic(
        0, names.GROUND_TRUTH_POSE_TOPIC), names.TELEMETRY_QOS)
    return node, executor, images, truth


def test_sim_camera_renders_at_the_ground_truth_pose(ros_node):
    # Prepare
    node, executor, images, truth = _camera(ros_node)
    pose = PoseSample(300.0, 400.0, 30.0, 0.3, time.time())
    # Execute
    def publish_and_check() -> bool:
        truth.publish(pose_to_msg(pose, 'map'))
        return len(images) >= 3

    got = spin_until(executor, publish_and_check, 20.0)
    # Assert
    assert got, 'no camera frames rendered'
    rgb = image_to_rgb(images[-1])
    side = node.config.camera.image_px
    assert rgb.shape == (side, side, 3) and images[-1].encoding == 'rgb8'
    assert rgb.std() > 1.0, 'frame is blank'
    assert images[-1].header.frame_id == 'uav0/camera_optical'


def test_sim_camera_renders_a_geotiff_world_given_as_ros_parameters(ros_node, tmp_path):
    # Arrange: world.map_file (a string) and world.class_map (a string array) as parameters
    path = write_raster(tmp_path / 'area.tif', UTM_32N, span_m=(-100.0, 1300.0))
    # Act
    node, _, _ = ros_node(SimCameraNode, {**tiny_fleet_overrides(1, 14540),
                                          'world.map_file': str(path),
                                          'world.class_map': ['10:forest', '80:water']})
    # Assert: the raster placed at autopilot.origin_*; crop (40) is not in this class map
    world = node.renderer.world
    assert world.class_at(*enu_of(300.0, 100.0)) == WATER
    assert world.class_at(*enu_of(30.0, 30.0)) == FOREST
    assert world.class_at(*enu_of(100.0, 250.0)) == UNKNOWN


def test_sim_camera_survives_non_finite_ground_truth_and_counts_it(ros_node):
    # Prepare: a NaN altitude and an infinite orientation (what a fuzzer or a broken
    # simulator sends), then a good pose
    node, executor, images, truth = _camera(ros_node)
    nan_altitude = pose_to_msg(PoseSample(300.0, 400.0, math.nan, 0.0, time.time()), 'map')
    infinite_yaw = pose_to_msg(PoseSample(300.0, 400.0, 30.0, 0.0, time.time()), 'map')
    infinite_yaw.pose.orientation.z = math.inf
    good = pose_to_msg(PoseSample(300.0, 400.0, 30.0, 0.3, time.time()), 'map')

    def publish_bad() -> bool:
        truth.publish(nan_altitude)
        truth.publish(infinite_yaw)
        return node.poses_rejected['non_finite'] >= 4

    def publish_good() -> bool:
        truth.publish(good)
        return len(images) >= 3

    # Execute: a bad pose used to raise out of the render timer and end the node
    refused = spin_until(executor, publish_bad, 20.0)
    rendered = spin_until(executor, publish_good, 20.0)
    # Assert: both kinds refused and counted, and the node still renders
    assert refused, f'bad poses not refused: {dict(node.poses_rejected)}'
    assert rendered, 'no camera frames after the bad poses'
    assert set(node.poses_rejected) == {'non_finite'}


def test_autopilot_sim_speaks_mavlink_and_publishes_ground_truth(ros_node, tmp_path):
    # Prepare: listen where vehicle 0 sends, as a MAVLink ground station would
    base = free_udp_port_block(1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(('127.0.0.1', base))
    sock.settimeout(0.2)
    overrides = {**tiny_fleet_overrides(1, base), 'autopilot.home_east_m': 585.0,
                 'autopilot.home_north_m': 600.0}
    node, probe, executor = ros_node(AutopilotSimNode, overrides, ['-p', f'log_dir:={tmp_path}'])
    poses = []
    probe.create_subscription(PoseStamped, names.drone_topic(0, names.GROUND_TRUTH_POSE_TOPIC),
                              lambda m: poses.append(msg_to_pose(m)), names.TELEMETRY_QOS)
    parser = mavlink.MAVLink(None)
    heartbeats = []

    def heard() -> bool:
        try:
            data, _ = sock.recvfrom(4096)
        except TimeoutError:
            return bool(heartbeats)
        for msg in parser.parse_buffer(data) or []:
            if msg.get_type() == 'HEARTBEAT':
                heartbeats.append(msg)
        return bool(heartbeats)

    # Execute
    got_truth = spin_until(executor, lambda: bool(poses), 15.0)
    deadline = time.monotonic() + 10.0
    while not heard() and time.monotonic() < deadline:
        pass
    sock.close()
    # Assert
    assert got_truth
    assert poses[-1].east_m == pytest.approx(585.0) and poses[-1].north_m == pytest.approx(600.0)
    assert heartbeats, 'no HEARTBEAT from the simulated vehicle'
    hb = heartbeats[0]
    assert hb.autopilot == mavlink.MAV_AUTOPILOT_PX4 and hb.type == mavlink.MAV_TYPE_QUADROTOR
    node.shutdown()
    assert (tmp_path / 'autopilot_log.json').exists()
