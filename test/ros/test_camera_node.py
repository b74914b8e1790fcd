"""The camera node over real rclpy/DDS and real OpenCV: a video file the test writes, replayed
and looped; an MJPEG stream over HTTP on loopback that goes away and comes back; sources
refused at start."""

from __future__ import annotations

import http.server
import itertools
import socketserver
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import CameraInfo, Image

from fl_uav.configschema import ConfigError
from fl_uav.fleet.camera_capture import RECONNECTING, STREAMING, gstreamer_available
from fl_uav.fleet_run.launch_plan import write_params_file
from fl_uav.ros import names
from fl_uav.ros.camera_node import CameraNode, frame_to_image
from fl_uav.ros.conversions import image_to_rgb, stamp_to_s
from test.ros.rosutil import VIEWER_QOS, node_with_probe, spin_until
from test.unit.fleet.test_camera_capture import BLUE, GREEN, RED, write_test_video

pytestmark = [pytest.mark.ros, pytest.mark.timeout(60)]
STATUS_NAME = 'fl_uav: uav0 camera'
JPEG_TOLERANCE = 12
COLOUR_RUN = 4           # frames of each colour in the test video


def _args(tmp_path: Path, **params) -> list[str]:
    """The node in /uav0 with a quick status and a 90 degree camera, plus ``params``."""
    fleet = write_params_file({'status.period_s': 0.2, 'camera.fov_deg': 90.0},
                              tmp_path / 'params.yaml')
    # strings quoted: ROS reads '-p source:=0' as an integer
    own = [arg for key, value in params.items()
           for arg in ('-p', f'{key}:="{value}"' if isinstance(value, str) else f'{key}:={value}')]
    return ['--ros-args', '-r', '__ns:=/uav0', '--params-file', str(fleet), *own]


class _Listener:
    """The probe's subscriptions: images, camera infos and the camera's statuses."""

    def __init__(self, probe) -> None:
        self.images: list[Image] = []
        self.infos: list[CameraInfo] = []
        self.statuses: list[dict] = []
        probe.create_subscription(Image, '/uav0/camera/image_raw', self.images.append,
                                  VIEWER_QOS)
        probe.create_subscription(CameraInfo, '/uav0/camera/camera_info', self.infos.append,
                                  VIEWER_QOS)
        probe.create_subscription(DiagnosticArray, names.DIAGNOSTICS_TOPIC, self._on_status,
                                  names.DIAGNOSTICS_QOS)

    def _on_status(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == STATUS_NAME:
                self.statuses.append({'level': status.level[0], 'message': status.message,
                                      **{kv.key: kv.value for kv in status.values}})

    def status(self) -> dict:
        return self.statuses[-1] if self.statuses else {}


def _colour(msg: Image) -> str:
    """'red', 'green' or 'blue' (JPEG-close), else 'other'."""
    pixels = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.step)
    mean = pixels[:, :msg.width * 3].reshape(-1, 3).mean(axis=0)
    bgr_mean = mean[::-1] if msg.encoding == 'rgb8' else mean
    for name, bgr in (('red', RED), ('green', GREEN), ('blue', BLUE)):
        if np.all(np.abs(bgr_mean - bgr) <= JPEG_TOLERANCE):
            return name
    return 'other'


def test_a_video_file_is_published_at_its_rate_and_size_with_camera_info_and_loops(tmp_path):
    # Arrange: 4 red, 4 green, 4 blue frames of 64x48, published as 32x24 at 20 Hz, looped
    video = write_test_video(tmp_path / 'flight.avi',
                             [RED] * COLOUR_RUN + [GREEN] * COLOUR_RUN + [BLUE] * COLOUR_RUN)
    args = _args(tmp_path, source=str(video), rate_hz=20.0, width=32, height=24, loop=True)
    with node_with_probe(CameraNode, args) as (node, probe, executor):
        heard = _Listener(probe)
        # Act: past the file's end twice
        got = spin_until(executor, lambda: len(heard.images) >= 3 * 12 and len(heard.infos)
                         >= 3 * 12 and int(heard.status().get('replays', 0)) >= 2, 20.0)
    # Assert: the size, encoding and frame asked for; the file's colours in its order, again
    # after its end; one CameraInfo per frame with its stamp; the rate
    assert got, (len(heard.images), len(heard.infos), heard.status())
    images = heard.images
    assert {(m.width, m.height, m.encoding, m.header.frame_id) for m in images} == {
        (32, 24, 'bgr8', 'uav0/camera_optical')}
    colours = [_colour(m) for m in images]
    runs = [(c, sum(1 for _ in group)) for c, group in itertools.groupby(colours)]
    assert 'other' not in colours
    assert all(n <= COLOUR_RUN for _, n in runs[1:-1])
    cycle = ['red', 'green', 'blue']
    assert all(cycle[(cycle.index(a) + 1) % 3] == b
               for (a, _), (b, _) in zip(runs, runs[1:])), runs
    assert sum(1 for c, _ in runs if c == 'red') >= 3        # the loop came back to the start
    stamps = [stamp_to_s(m.header.stamp) for m in images]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))
    assert (stamps[-1] - stamps[0]) / (len(stamps) - 1) == pytest.approx(0.05, rel=0.15)
    infos = {stamp_to_s(i.header.stamp): i for i in heard.infos}
    matched = [infos[s] for s in stamps if s in infos]
    assert len(matched) >= len(stamps) - 2
    info = matched[0]
    assert (info.width, info.height, info.header.frame_id, info.distortion_model) == (
        32, 24, 'uav0/camera_optical', 'plumb_bob')
    assert list(info.k) == pytest.approx([16.0, 0, 16.0, 0, 16.0, 12.0, 0, 0, 1])
    status = heard.status()
    assert status['state'] == STREAMING and status['source_kind'] == 'file'
    assert status['level'] == 0 and int(status['frames_published']) > 2 * 3 * COLOUR_RUN


def test_a_file_without_loop_ends_and_says_so(tmp_path):
    # Arrange: a 6-frame file at 30 Hz
    video = write_test_video(tmp_path / 'short.avi', [GREEN] * 6)
    with node_with_probe(CameraNode, _args(tmp_path, source=str(video), rate_hz=30.0,
                                           encoding='rgb8', frame_id='down_cam')) as (
            node, probe, executor):
        heard = _Listener(probe)
        # Act
        ended = spin_until(executor, lambda: heard.status().get('state') == 'ended', 15.0)
    # Assert: each frame once (the first may go before the probe's subscription is matched),
    # rgb8 as asked, then a warning
    assert ended, heard.status()
    assert heard.status()['frames_published'] == '6' and 3 <= len(heard.images) <= 6
    assert {_colour(m) for m in heard.images} == {'green'}
    assert {(m.encoding, m.header.frame_id) for m in heard.images} == {('rgb8', 'down_cam')}
    assert heard.status()['level'] == 1 and heard.status()['message'] == 'video file ended'


@pytest.mark.parametrize('encoding', ['bgr8', 'rgb8'])
def test_the_drone_reads_the_camera_nodes_frames_in_either_encoding(encoding):
    # Arrange: a BGR frame with a distinct colour per corner
    bgr = np.zeros((4, 6, 3), np.uint8)
    bgr[0, 0], bgr[-1, -1] = RED, BLUE
    # Act: the camera node's message, read by the drone's decoder
    rgb = image_to_rgb(frame_to_image(bgr, encoding, 'uav0/camera_optical', 12.5))
    # Assert
    assert rgb.shape == (4, 6, 3)
    assert tuple(rgb[0, 0]) == (255, 0, 0) and tuple(rgb[-1, -1]) == (0, 0, 255)


@pytest.mark.parametrize(('params', 'match'), [
    ({'source': '/no/such/flight.avi'}, "source '/no/such/flight.avi': no such video file"),
    ({'source': 'NOT_A_VIDEO'}, "source '.*notes.avi': OpenCV cannot open this file"),
    ({'source': 'videotestsrc ! appsink'}, 'GStreamer pipeline, but this OpenCV'),
    ({'source': ''}, 'source is empty'),
    ({'source': 'rtsp://10.0.0.5/cam', 'encoding': 'mono8'}, "encoding 'mono8' unknown"),
    ({'source': 'rtsp://10.0.0.5/cam', 'camera_info_url': 'file:///no/cal.yaml'},
     "camera_info_url '/no/cal.yaml': cannot read it"),
])
def test_a_source_that_cannot_work_stops_the_node_at_start_naming_it(tmp_path, params, match):
    # Arrange
    if params['source'] == 'NOT_A_VIDEO':
        (tmp_path / 'notes.avi').write_text('not a video')
        params = {'source': str(tmp_path / 'notes.avi')}
    if params['source'].startswith('videotestsrc') and gstreamer_available():
        pytest.skip('this OpenCV has GStreamer')
    rclpy.init(args=_args(tmp_path, **params))
    try:
        # Act / Assert
        with pytest.raises(ConfigError, match=match):
            CameraNode()
    finally:
        rclpy.try_shutdown()


class _MjpegHandler(http.server.BaseHTTPRequestHandler):
    """An MJPEG stream (multipart/x-mixed-replace) of the server's colour at ~30 fps."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header('Content-Type', 'multipart/x-mixed-replace; boundary=frame')
        self.end_headers()
        ok, jpeg = cv2.imencode('.jpg', np.full((48, 64, 3), self.server.colour, np.uint8))
        data = jpeg.tobytes()
        try:
            while not self.server.stopping.wait(1 / 30):
                self.wfile.write(b'--frame\r\nContent-Type: image/jpeg\r\nContent-Length: '
                                 + str(len(data)).encode() + b'\r\n\r\n' + data + b'\r\n')
        except OSError:
            pass


class _MjpegServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """One colour's stream on 127.0.0.1:``port`` (0: a free one), in a thread; stop() closes
    it and every client's connection, as a camera that goes away."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, colour) -> None:
        super().__init__(('127.0.0.1', port), _MjpegHandler)
        self.colour = colour
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        self._thread.join(5.0)


def test_a_stream_that_goes_away_is_reported_and_picked_up_again_when_back(tmp_path):
    # Arrange: a red MJPEG stream over HTTP on loopback, read through OpenCV's FFmpeg
    server = _MjpegServer(0, RED)
    port = server.server_address[1]
    url = f'http://127.0.0.1:{port}/stream.mjpg'
    args = _args(tmp_path, source=url, rate_hz=10.0, width=32, height=24,
                 reconnect_period_s=0.3, timeout_s=2.0)
    try:
        with node_with_probe(CameraNode, args) as (node, probe, executor):
            heard = _Listener(probe)
            streaming = spin_until(executor, lambda: len(heard.images) >= 5, 15.0)
            # Act: the camera goes away ...
            server.stop()
            lost = spin_until(executor, lambda: heard.status().get('state') == RECONNECTING,
                              15.0)
            lost_status = heard.status()
            frames_when_lost = len(heard.images)
            # ... and comes back, green this time, on the same port
            server = _MjpegServer(port, GREEN)
            back = spin_until(executor, lambda: heard.images and _colour(heard.images[-1])
                              == 'green' and heard.status().get('state') == STREAMING
                              and heard.status().get('reconnects') == '1', 20.0)
            back_status = heard.status()
    finally:
        server.stop()
    # Assert: frames, then ERROR 'reconnecting' with the failure counted, then frames again
    # and the reconnect counted
    assert streaming and _colour(heard.images[0]) == 'red'
    assert lost, heard.status()
    assert lost_status['level'] == 2 and int(lost_status['read_failures']) >= 1
    assert lost_status['source'] == url and lost_status['source_kind'] == 'url'
    assert back, (heard.status(), len(heard.images))
    assert len(heard.images) > frames_when_lost
    assert back_status['level'] == 0 and back_status['reconnects'] == '1'
    assert {(m.width, m.height) for m in heard.images} == {(32, 24)}
