"""The drone node's camera over real rclpy/DDS: a frame in each encoding and compression it
reads reaches DroneAgent.on_camera_frame as the RGB it shows; unreadable frames are counted by
reason on /diagnostics, logged, and the node goes on. One drone node per transport serves all
of that transport's cases."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import count

import cv2
import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import Log
from rclpy.executors import SingleThreadedExecutor
from rclpy.publisher import Publisher
from sensor_msgs.msg import CompressedImage, Image

from fl_uav.fleet.camera_frames import RAW_ENCODINGS
from fl_uav.fleet.config import DroneNodeParams
from fl_uav.ros import names
from fl_uav.ros.conversions import s_to_stamp
from fl_uav.ros.drone_node import DroneNode
from test.camera_samples import RGB, YUV422_ENCODINGS, encode, raw_frame, smooth_rgb
from test.conftest import free_udp_port_block
from test.ros.rosutil import ROSOUT_QOS, drone_under_test, spin_until

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]
HOME = (585.0, 600.0)
DELIVERY_TIMEOUT_S = 15.0
_stamps = count(1)


@dataclass
class Camera:
    """A drone node, a publisher on its camera topic, and what reached its agent."""

    node: DroneNode
    executor: SingleThreadedExecutor
    publisher: Publisher
    taken: dict[float, np.ndarray] = field(default_factory=dict)   # stamp -> RGB handed over
    statuses: list = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def deliver(self, msg: Image | CompressedImage, arrived) -> bool:
        """Publish ``msg`` again every few spins (the subscription is best effort) until
        ``arrived()``."""
        spins = count()

        def published_and_arrived() -> bool:
            if next(spins) % 4 == 0:
                self.publisher.publish(msg)
            return arrived()

        return spin_until(self.executor, published_and_arrived, DELIVERY_TIMEOUT_S)

    def take(self, msg: Image | CompressedImage) -> np.ndarray:
        """The RGB the agent was handed for ``msg`` (stamped anew here)."""
        stamp_s = float(next(_stamps))
        msg.header.stamp = s_to_stamp(stamp_s)
        assert self.deliver(msg, lambda: stamp_s in self.taken), 'the frame never arrived'
        return self.taken[stamp_s]

    def status_value(self, key: str) -> str | None:
        """``key`` of the drone's latest status on /diagnostics."""
        mine = [st for st in self.statuses if st.name == 'fl_uav: uav0']
        return dict((kv.key, kv.value) for kv in mine[-1].values).get(key) if mine else None


@pytest.fixture(scope='module')
def camera(request, tmp_path_factory):
    """The drone node with ``camera_transport`` request.param, its camera publisher, and a
    spy on what it hands its agent."""
    transport = request.param
    with drone_under_test(tmp_path_factory.mktemp(transport), free_udp_port_block(4), HOME,
                          {}, {'camera_transport': transport}) as (_, node, probe, executor):
        message = Image if transport == 'raw' else CompressedImage
        topic = names.drone_topic(0, names.camera_transport_topic(names.IMAGE_TOPIC,
                                                                  transport))
        cam = Camera(node, executor,
                     probe.create_publisher(message, topic, names.IMAGE_PUB_QOS))
        on_camera_frame = node.agent.on_camera_frame

        def spy(image_rgb: np.ndarray, stamp_s: float) -> bool:
            cam.taken[stamp_s] = image_rgb.copy()
            return on_camera_frame(image_rgb, stamp_s)

        node.agent.on_camera_frame = spy
        probe.create_subscription(DiagnosticArray, names.DIAGNOSTICS_TOPIC,
                                  lambda m: cam.statuses.extend(m.status),
                                  names.DIAGNOSTICS_QOS)
        probe.create_subscription(Log, '/rosout', lambda m: cam.log.append(m.msg)
                                  if m.name == node.get_logger().name else None, ROSOUT_QOS)
        yield cam


def _image(encoding: str) -> tuple[Image, np.ndarray]:
    """An Image in ``encoding``, its rows padded by 2 bytes, and the RGB it shows."""
    fields, expected = raw_frame(encoding, padding=2)
    msg = Image(encoding=encoding, width=fields['width'], height=fields['height'],
                step=fields['step'])
    msg.header.frame_id = 'uav0/camera_optical'
    msg.data = fields['data']
    return msg, expected


def _compressed(image_format: str, rgb: np.ndarray) -> CompressedImage:
    extension = '.jpg' if 'jpeg' in image_format else '.png'
    msg = CompressedImage(format=image_format,
                          data=encode(extension, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)))
    msg.header.frame_id = 'uav0/camera_optical'
    return msg


def test_the_default_camera_topic_is_the_one_the_simulated_camera_publishes():
    assert DroneNodeParams().camera_topic == names.IMAGE_TOPIC
    assert DroneNodeParams().camera_transport == 'raw'


@pytest.mark.parametrize('camera', ['raw'], indirect=True)
@pytest.mark.parametrize('encoding', ['mono8', 'rgb8', 'bgr8', 'rgba8', 'bgra8', 'yuv422',
                                      'uyvy', 'yuyv', 'yuv422_yuy2'])
def test_a_raw_frame_reaches_the_agent_as_its_rgb(camera, encoding):
    # Arrange
    msg, expected = _image(encoding)
    # Act
    rgb = camera.take(msg)
    # Assert: exact; YUV within 1 of BT.601 (OpenCV's fixed point)
    assert encoding in RAW_ENCODINGS and rgb.dtype == np.uint8
    np.testing.assert_allclose(rgb, expected, atol=1 if encoding in YUV422_ENCODINGS else 0)


@pytest.mark.parametrize('camera', ['raw'], indirect=True)
def test_an_unknown_encoding_is_counted_logged_and_the_drone_goes_on(camera):
    # Arrange
    bad, _ = _image('rgb8')
    bad.encoding = 'bayer_rggb8'
    good, expected = _image('bgr8')
    # Act
    counted = camera.deliver(
        bad, lambda: camera.node.agent.camera_frames_rejected['encoding'] > 0)
    # Assert: counted by reason, on /diagnostics, named in the log; the next frame is taken
    assert counted
    assert spin_until(camera.executor, lambda: re.fullmatch(
        r'encoding=\d+', camera.status_value('camera_frames_rejected') or ''),
        DELIVERY_TIMEOUT_S), camera.status_value('camera_frames_rejected')
    assert spin_until(camera.executor, lambda: any(
        "camera frame dropped (encoding): unsupported image encoding 'bayer_rggb8' (mono8, "
        "rgb8, bgr8, rgba8, bgra8, uyvy, yuv422, yuyv, yuv422_yuy2)" in line
        for line in camera.log), DELIVERY_TIMEOUT_S), camera.log
    np.testing.assert_array_equal(camera.take(good), expected)


@pytest.mark.parametrize('camera', ['compressed'], indirect=True)
def test_the_compressed_transport_is_read_where_image_transport_publishes_it(camera):
    assert camera.node.camera_topic == '/uav0/camera/image_raw/compressed'


@pytest.mark.parametrize('camera', ['compressed'], indirect=True)
@pytest.mark.parametrize('image_format', ['rgb8; png compressed bgr8', 'png'])
def test_a_png_frame_reaches_the_agent_as_its_exact_rgb(camera, image_format):
    rgb = np.repeat(np.repeat(RGB, 4, axis=0), 4, axis=1)
    np.testing.assert_array_equal(camera.take(_compressed(image_format, rgb)), rgb)


@pytest.mark.parametrize('camera', ['compressed'], indirect=True)
@pytest.mark.parametrize('image_format', ['rgb8; jpeg compressed bgr8', 'jpeg'])
def test_a_jpeg_frame_reaches_the_agent_as_its_rgb(camera, image_format):
    # Arrange
    rgb = smooth_rgb()
    # Act
    got = camera.take(_compressed(image_format, rgb)).astype(int)
    # Assert: jpeg's loss is a few levels; swapped channels would be off by ~100
    assert got.shape == rgb.shape
    assert np.abs(got - rgb).mean() < 2.0 and np.abs(got - rgb).max() <= 12


@pytest.mark.parametrize('camera', ['compressed'], indirect=True)
def test_garbage_compressed_bytes_are_counted_and_the_drone_goes_on(camera):
    # Arrange
    garbage = CompressedImage(format='rgb8; jpeg compressed bgr8', data=b'\xff\xd8 no jpeg')
    rgb = np.repeat(np.repeat(RGB, 4, axis=0), 4, axis=1)
    # Act
    counted = camera.deliver(
        garbage, lambda: camera.node.agent.camera_frames_rejected['decode'] > 0)
    # Assert
    assert counted
    assert spin_until(camera.executor, lambda: re.fullmatch(
        r'decode=\d+', camera.status_value('camera_frames_rejected') or ''),
        DELIVERY_TIMEOUT_S), camera.status_value('camera_frames_rejected')
    assert spin_until(camera.executor, lambda: any(
        "camera frame dropped (decode): 10 bytes of 'rgb8; jpeg compressed bgr8'" in line
        for line in camera.log), DELIVERY_TIMEOUT_S), camera.log
    np.testing.assert_array_equal(camera.take(_compressed('png', rgb)), rgb)
