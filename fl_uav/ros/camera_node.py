"""camera node: a real camera through OpenCV, published as sensor_msgs/Image and CameraInfo.

Reads a V4L2 device, a GStreamer pipeline, a network stream or a video file
(fl_uav/fleet/camera_capture.py, parameters in CameraNodeParams) on a thread of its own, so a
blocking read or reconnect never stalls the executor, and publishes each frame on
``camera/image_raw`` and its CameraInfo on ``camera/camera_info`` (relative: /uav<i>/camera/...
in the drone's namespace, where the drone node reads it), both stamped from the node clock
with one stamp and frame_id. Its status (source, state, frames, reconnects, failures, measured
rate) goes to /diagnostics every ``status.period_s``. A source that cannot work at all (a
missing or undecodable file, a pipeline without GStreamer) stops it at start with one line.
"""

from __future__ import annotations

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image

from fl_uav.configschema import ConfigError
from fl_uav.fleet.camera_calibration import CameraCalibration, load_calibration
from fl_uav.fleet.camera_capture import (
    CameraCapture,
    CameraSourceError,
    CaptureSettings,
    camera_status,
    parse_source,
)
from fl_uav.fleet.config import CameraNodeParams, FleetConfig
from fl_uav.ros import names
from fl_uav.ros.conversions import s_to_stamp
from fl_uav.ros.diagnostics import publish_status, status_publisher
from fl_uav.ros.params import declare_config
from fl_uav.ros.spin import run_node

CAMERA_NODE_NAME = 'camera'
OPTICAL_FRAME = 'camera_optical'
PUBLISH_ERROR_LOG_THROTTLE_S = 10.0
"""A frame that could not be published is said at most once per this many seconds."""
STOP_MARGIN_S = 1.0
"""At shutdown the capture thread gets timeout_s plus this to end its read."""


def default_frame_id(namespace: str) -> str:
    """'<namespace>/camera_optical' ('uav0/camera_optical' in /uav0), 'camera_optical' at the
    root namespace."""
    prefix = namespace.strip('/')
    return f'{prefix}/{OPTICAL_FRAME}' if prefix else OPTICAL_FRAME


def camera_status_name(namespace: str) -> str:
    """The node's DiagnosticStatus name: 'fl_uav: uav0 camera' in /uav0."""
    prefix = namespace.strip('/')
    return f'fl_uav: {prefix} camera' if prefix else 'fl_uav: camera'


def frame_to_image(image: np.ndarray, encoding: str, frame_id: str, stamp_s: float) -> Image:
    """A uint8 H×W×3 BGR frame as sensor_msgs/Image in ``encoding`` (bgr8 or rgb8)."""
    msg = Image()
    msg.header.frame_id = frame_id
    msg.header.stamp = s_to_stamp(stamp_s)
    msg.height, msg.width = int(image.shape[0]), int(image.shape[1])
    msg.encoding = encoding
    msg.step = msg.width * 3
    pixels = image[:, :, ::-1] if encoding == 'rgb8' else image
    msg.data = np.ascontiguousarray(pixels, np.uint8).tobytes()
    return msg


def calibration_to_info(calibration: CameraCalibration, header) -> CameraInfo:
    """A CameraCalibration as sensor_msgs/CameraInfo with ``header`` (the image's)."""
    msg = CameraInfo()
    msg.header = header
    msg.width, msg.height = calibration.width, calibration.height
    msg.distortion_model = calibration.distortion_model
    msg.d = list(calibration.d)
    msg.k = list(calibration.k)
    msg.r = list(calibration.r)
    msg.p = list(calibration.p)
    return msg


class CameraNode(Node):
    """The capture thread publishes each frame it delivers; a timer publishes the status."""

    def __init__(self) -> None:
        super().__init__(CAMERA_NODE_NAME,
                         automatically_declare_parameters_from_overrides=True)
        self.config, params = declare_config(self, FleetConfig, CameraNodeParams)
        self.params: CameraNodeParams = params
        try:
            source = parse_source(params.source)
            self.calibration = (load_calibration(params.camera_info_url)
                                if params.camera_info_url else None)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.settings = CaptureSettings(params.rate_hz, params.width, params.height,
                                        params.loop, params.reconnect_period_s,
                                        params.timeout_s)
        self.capture = CameraCapture(source, self.settings)
        try:
            self.capture.start()
        except CameraSourceError as exc:
            raise ConfigError(str(exc)) from None
        namespace = self.get_namespace()
        self.frame_id = params.frame_id or default_frame_id(namespace)
        self._status_name = camera_status_name(namespace)
        self._infos: dict[tuple[int, int], CameraCalibration] = {}
        self._image_pub = self.create_publisher(Image, names.IMAGE_TOPIC, names.IMAGE_PUB_QOS)
        self._info_pub = self.create_publisher(CameraInfo, names.CAMERA_INFO_TOPIC,
                                               names.IMAGE_PUB_QOS)
        self._status_pub = status_publisher(self)
        self.create_timer(self.config.status.period_s, self._publish_status)
        self.get_logger().info(
            f'camera {source.describe()} ({source.kind}): publishing {names.IMAGE_TOPIC} at '
            f'{params.rate_hz:g} Hz, frame_id {self.frame_id}')
        self._thread = self.capture.run_in_thread(self._publish_frame)

    def _calibration(self, width: int, height: int) -> CameraCalibration:
        key = (width, height)
        if key not in self._infos:
            self._infos[key] = (self.calibration.scaled(width, height) if self.calibration
                                else CameraCalibration.from_fov(width, height,
                                                                self.config.camera.fov_deg))
        return self._infos[key]

    def _publish_frame(self, image: np.ndarray) -> None:
        """On the capture thread: the frame and its CameraInfo, one stamp."""
        if self.capture.stopped:
            return
        try:
            stamp_s = self.get_clock().now().nanoseconds * 1e-9
            msg = frame_to_image(image, self.params.encoding, self.frame_id, stamp_s)
            info = calibration_to_info(self._calibration(msg.width, msg.height), msg.header)
            self._image_pub.publish(msg)
            self._info_pub.publish(info)
        except Exception as exc:  # noqa: BLE001 - a frame lost (shutting down), not the node
            if not self.capture.stopped:
                self.get_logger().warning(f'frame not published: {exc!r}',
                                          throttle_duration_sec=PUBLISH_ERROR_LOG_THROTTLE_S)

    def _publish_status(self) -> None:
        publish_status(self, self._status_pub, lambda: camera_status(
            self._status_name, self.capture.source, self.settings, self.capture.stats()),
            self.get_clock().now().nanoseconds * 1e-9)

    def shutdown(self) -> None:
        """Stop the capture and wait for its thread (a blocked stream read returns within
        timeout_s; the daemon thread is left behind after that)."""
        self.capture.stop()
        self._thread.join(timeout=self.settings.timeout_s + STOP_MARGIN_S)


def main(args: list[str] | None = None) -> None:
    """Spin until shutdown."""
    run_node(CameraNode, args)


if __name__ == '__main__':
    main()
