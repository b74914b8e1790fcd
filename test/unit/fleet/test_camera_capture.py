"""The camera capture without ROS (fl_uav/fleet/camera_capture.py): sources, errors at start,
replay and loop, a live source lost and back; on a fake clock (real OpenCV for files)."""

from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.camera_capture import (
    DEVICE,
    ENDED,
    ERROR,
    FILE,
    GSTREAMER,
    OK,
    OPENING,
    RATE_WINDOW_S,
    RECONNECTING,
    STOPPED,
    STREAMING,
    URL,
    WARN,
    CameraCapture,
    CameraSource,
    CameraSourceError,
    CaptureSettings,
    camera_status,
    gstreamer_available,
    parse_source,
)
from fl_uav.fleet.config import CameraNodeParams

RED, GREEN, BLUE = (0, 0, 255), (0, 255, 0), (255, 0, 0)   # BGR, as OpenCV gives them
JPEG_TOLERANCE = 12


def write_test_video(path: Path, colours: list[tuple[int, int, int]], width: int = 64,
                     height: int = 48, fps: float = 10.0) -> Path:
    """An MJPG .avi of one solid BGR colour per frame (written with cv2.VideoWriter)."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), fps, (width, height))
    assert writer.isOpened(), 'this OpenCV cannot write MJPG .avi'
    for colour in colours:
        writer.write(np.full((height, width, 3), colour, np.uint8))
    writer.release()
    return path


def colour_of(image: np.ndarray) -> tuple[int, ...]:
    """The mean colour of a frame, rounded."""
    return tuple(int(round(v)) for v in image.reshape(-1, image.shape[2]).mean(axis=0))


def close_to(image: np.ndarray, colour: tuple[int, int, int]) -> bool:
    return bool(np.all(np.abs(np.array(colour_of(image)) - colour) <= JPEG_TOLERANCE))


class FakeClock:
    """Monotonic seconds that only move when someone sleeps or a fake camera grabs."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        self.now_s += seconds
        return False


class FakeVideo:
    """A cv2.VideoCapture stand-in: ``frames`` one grab each (``frame_period_s`` of the clock
    per grab, a camera's pace), then no more; ``opened`` False is a failed open."""

    def __init__(self, frames=(), clock: FakeClock | None = None, frame_period_s: float = 0.0,
                 opened: bool = True, raise_on_grab: Exception | None = None) -> None:
        self.frames = list(frames)
        self.clock = clock
        self.frame_period_s = frame_period_s
        self.opened = opened
        self.raise_on_grab = raise_on_grab
        self.current = None
        self.retrieved = 0
        self.released = False

    def isOpened(self) -> bool:  # noqa: N802 - OpenCV's name
        return self.opened

    def grab(self) -> bool:
        if self.raise_on_grab is not None:
            raise self.raise_on_grab
        if not self.frames:
            return False
        if self.clock is not None:
            self.clock.now_s += self.frame_period_s
        self.current = self.frames.pop(0)
        return True

    def retrieve(self):
        self.retrieved += 1
        return True, self.current

    def release(self) -> None:
        self.released = True


def solid(colour, width: int = 8, height: int = 6) -> np.ndarray:
    return np.full((height, width, 3), colour, np.uint8)


def scripted_opener(videos: list[FakeVideo]):
    """An opener that hands out ``videos`` in order (a closed one: a failed open)."""
    opened: list[FakeVideo] = []

    def opener(source: CameraSource) -> FakeVideo:
        video = videos.pop(0)
        opened.append(video)
        return video

    opener.opened = opened
    return opener


def capture(source: CameraSource, videos: list[FakeVideo], clock: FakeClock,
            **settings) -> CameraCapture:
    return CameraCapture(source, CaptureSettings(**settings), scripted_opener(videos), clock,
                         clock.sleep)


LIVE = CameraSource(DEVICE, 0)
A_FILE = CameraSource(FILE, 'flight.avi')

# --- sources ------------------------------------------------------------------------------


@pytest.mark.parametrize(('text', 'kind', 'location'), [
    ('0', DEVICE, 0),
    (' 2 ', DEVICE, 2),
    ('/dev/video1', DEVICE, '/dev/video1'),
    ('/dev/v4l/by-id/usb-cam-video-index0', DEVICE, '/dev/v4l/by-id/usb-cam-video-index0'),
    ('rtsp://10.0.0.5:8554/cam', URL, 'rtsp://10.0.0.5:8554/cam'),
    ('http://127.0.0.1:8080/stream.mjpg', URL, 'http://127.0.0.1:8080/stream.mjpg'),
    ('udp://@:5600', URL, 'udp://@:5600'),
])
def test_a_source_string_names_a_device_or_a_stream(text, kind, location):
    # Act
    source = parse_source(text)
    # Assert
    assert (source.kind, source.location) == (kind, location) and source.live


def test_a_gstreamer_pipeline_needs_an_opencv_built_with_it():
    # Arrange
    pipeline = 'v4l2src device=/dev/video0 ! videoconvert ! appsink'
    # Act
    with_it = parse_source(pipeline, gstreamer=True)
    # Assert: refused naming the source and why, where OpenCV has no GStreamer
    assert with_it.kind == GSTREAMER
    with pytest.raises(CameraSourceError, match=r"source 'v4l2src.*GStreamer: NO.*apt"):
        parse_source(pipeline, gstreamer=False)


def test_gstreamer_support_is_read_from_the_build_information():
    # Act / Assert
    assert gstreamer_available('  Video I/O:\n    GStreamer:    YES (1.22.0)\n')
    assert not gstreamer_available('  Video I/O:\n    GStreamer:    NO\n')
    assert not gstreamer_available('no such line')
    assert gstreamer_available() == ('YES' in next(
        (line for line in cv2.getBuildInformation().splitlines() if 'GStreamer:' in line),
        'NO'))


@pytest.mark.parametrize(('text', 'match'), [
    ('', 'source is empty'),
    ('   ', 'source is empty'),
    ('ftp://host/video', "unknown stream scheme 'ftp'"),
    ('/no/such/flight.avi', "source '/no/such/flight.avi': no such video file"),
])
def test_a_source_that_cannot_be_is_refused_naming_it(text, match):
    with pytest.raises(CameraSourceError, match=match):
        parse_source(text)


def test_a_file_source_is_its_path_with_the_home_expanded(tmp_path, monkeypatch):
    # Arrange
    monkeypatch.setenv('HOME', str(tmp_path))
    write_test_video(tmp_path / 'flight.avi', [RED])
    # Act
    source = parse_source('~/flight.avi')
    # Assert
    assert source == CameraSource(FILE, str(tmp_path / 'flight.avi')) and not source.live


def test_a_streams_password_stays_out_of_logs_and_status():
    # Act
    text = parse_source('rtsp://pilot:s3cret@10.0.0.5/cam').describe()
    # Assert
    assert text == 'rtsp://pilot:***@10.0.0.5/cam'


# --- a file: errors at start, replay, loop --------------------------------------------------


def test_a_file_opencv_cannot_open_is_refused_at_start_naming_it(tmp_path):
    # Arrange: a text file named like a video
    path = tmp_path / 'notes.avi'
    path.write_text('not a video')
    cam = CameraCapture(parse_source(str(path)), CaptureSettings())
    # Act / Assert
    with pytest.raises(CameraSourceError, match=f"source '{path}': OpenCV cannot open"):
        cam.start()


def test_a_file_that_opens_but_gives_no_frame_is_refused_at_start(tmp_path):
    # Arrange: OpenCV opens it, but no frame decodes
    clock = FakeClock()
    cam = capture(A_FILE, [FakeVideo([])], clock)
    # Act / Assert
    with pytest.raises(CameraSourceError, match="source 'flight.avi'.*cannot decode a frame"):
        cam.start()


def test_a_file_is_replayed_at_rate_hz_resized_and_ends_without_loop(tmp_path):
    # Arrange: three colours of 64x48 at 10 Hz, published as 32x16
    path = write_test_video(tmp_path / 'flight.avi', [RED, GREEN, BLUE])
    clock = FakeClock()
    cam = CameraCapture(parse_source(str(path)), CaptureSettings(rate_hz=10.0, width=32,
                                                                 height=16), clock=clock,
                        sleep=clock.sleep)
    cam.start()
    # Act
    frames, times = [], []
    while (image := cam.next_frame()) is not None:
        frames.append(image)
        times.append(clock.now_s)
    # Assert: each colour once, a tenth of a second apart, then the end
    assert [close_to(f, c) for f, c in zip(frames, [RED, GREEN, BLUE])] == [True] * 3
    assert len(frames) == 3 and all(f.shape == (16, 32, 3) for f in frames)
    assert times == pytest.approx([0.0, 0.1, 0.2])
    assert cam.state == ENDED and cam.stats().frames == 3 and cam.next_frame() is None


def test_a_looped_file_starts_again_at_its_end():
    # Arrange: a two-frame file, looped
    clock = FakeClock()
    videos = [FakeVideo([solid(RED), solid(GREEN)]) for _ in range(3)]
    cam = capture(A_FILE, videos, clock, rate_hz=20.0, loop=True)
    cam.start()
    # Act
    frames = [cam.next_frame() for _ in range(5)]
    # Assert: red, green, red, green, red; the file opened again at each end, on schedule
    assert [colour_of(f) for f in frames] == [RED, GREEN, RED, GREEN, RED]
    assert cam.replays == 2 and cam.state == STREAMING
    assert clock.now_s == pytest.approx(0.2)


def test_a_file_that_cannot_be_opened_again_for_its_loop_ends():
    # Arrange
    clock = FakeClock()
    cam = capture(A_FILE, [FakeVideo([solid(RED)]), FakeVideo(opened=False)], clock,
                  loop=True)
    cam.start()
    # Act
    first, after = cam.next_frame(), cam.next_frame()
    # Assert
    assert first is not None and after is None
    assert cam.state == ENDED and cam.open_failures == 1


def test_grey_and_four_channel_frames_come_out_bgr():
    # Arrange
    clock = FakeClock()
    grey = np.full((6, 8), 77, np.uint8)
    bgra = np.full((6, 8, 4), (1, 2, 3, 255), np.uint8)
    cam = capture(A_FILE, [FakeVideo([grey, bgra])], clock)
    cam.start()
    # Act
    frames = [cam.next_frame(), cam.next_frame()]
    # Assert
    assert [colour_of(f) for f in frames] == [(77, 77, 77), (1, 2, 3)]


# --- a live source: pacing, lost and back -----------------------------------------------------


def test_a_fast_camera_is_published_at_rate_hz_and_skipped_frames_are_not_decoded():
    # Arrange: a 30 fps camera, 3 s of frames, published at 10 Hz
    clock = FakeClock()
    video = FakeVideo([solid(RED)] * 90, clock, frame_period_s=1 / 30)
    cam = capture(LIVE, [video], clock, rate_hz=10.0, width=0, height=0)
    cam.start()
    # Act
    times = []
    while len(times) < 29 and cam.next_frame() is not None:
        times.append(clock.now_s)
    # Assert: one frame each tenth of a second (at the camera's next frame), the rest
    # grabbed only
    gaps = np.diff(times)
    assert np.all(np.abs(gaps - 0.1) <= 1 / 30 + 1e-9) and np.mean(gaps) == pytest.approx(
        0.1, abs=0.002)
    assert video.retrieved == len(times)
    assert cam.stats().rate_hz == pytest.approx(10.0, rel=0.05)


def test_a_camera_that_goes_away_is_reopened_every_period_and_counted_when_back():
    # Arrange: 3 frames, then the camera is gone for two tries, then back with 3 frames
    clock = FakeClock()
    states = []
    videos = [FakeVideo([solid(RED)] * 3, clock, 0.25), FakeVideo(opened=False),
              FakeVideo(opened=False), FakeVideo([solid(GREEN)] * 3, clock, 0.25)]
    cam = capture(LIVE, videos, clock, rate_hz=10.0, reconnect_period_s=2.0)

    def sleep(seconds: float) -> bool:
        states.append((cam.state, cam.read_failures, cam.open_failures))
        return clock.sleep(seconds)

    cam._sleep = sleep
    cam.start()
    # Act
    frames = [cam.next_frame() for _ in range(4)]
    # Assert: while away it said reconnecting, tried every 2 s; back, it streams again
    assert [colour_of(f) for f in frames] == [RED, RED, RED, GREEN]
    assert states == [(RECONNECTING, 1, 0), (RECONNECTING, 1, 1), (RECONNECTING, 1, 2)]
    assert clock.sleeps == pytest.approx([2.0, 2.0, 2.0])
    stats = cam.stats()
    assert (stats.state, stats.reconnects, stats.read_failures, stats.open_failures) == (
        STREAMING, 1, 1, 2)
    assert videos == [] and all(v.released for v in cam._opener.opened[:3])


def test_a_camera_not_there_at_start_is_waited_for_not_refused():
    # Arrange
    clock = FakeClock()
    cam = capture(LIVE, [FakeVideo(opened=False), FakeVideo([solid(BLUE)], clock, 0.25)],
                  clock, reconnect_period_s=1.5)
    states = []
    cam._sleep = lambda s: states.append((cam.state, cam.open_failures)) or clock.sleep(s)
    # Act
    cam.start()
    before = cam.stats()
    frame = cam.next_frame()
    # Assert: opened by the reading thread, not at start; retried after the period
    assert before.state == OPENING and before.open_failures == 0
    assert states == [(RECONNECTING, 1)]
    assert colour_of(frame) == BLUE and clock.now_s == pytest.approx(1.75)
    assert cam.state == STREAMING and cam.reconnects == 0 and cam.open_failures == 1


def test_an_error_inside_opencv_is_a_lost_stream_not_a_dead_thread():
    # Arrange: the first video raises on grab, the second streams two frames
    clock = FakeClock()
    cam = capture(LIVE, [FakeVideo(raise_on_grab=cv2.error('driver says no')),
                         FakeVideo([solid(RED), solid(GREEN)], clock, 0.25)], clock,
                  reconnect_period_s=1.0)
    cam.start()
    got = []
    # Act: run until the second video is used up, then stop from the frame callback
    cam._sleep = lambda s: clock.sleep(s) or (len(got) >= 2 and cam.stop() is None)
    cam.run(lambda image: got.append(colour_of(image)))
    # Assert
    assert got == [RED, GREEN] and cam.read_failures == 2 and cam.reconnects == 0
    assert 'driver says no' in cam.last_error
    assert cam.state == STOPPED


def test_stop_ends_a_reconnect_wait_at_once():
    # Arrange: a lost camera that would be retried in 10 minutes, on the real clock
    cam = CameraCapture(LIVE, CaptureSettings(reconnect_period_s=600.0),
                        scripted_opener([FakeVideo([solid(RED)]), FakeVideo(opened=False)]))
    cam.start()
    results = []
    thread = threading.Thread(target=lambda: results.extend(
        [cam.next_frame(), cam.next_frame()]))
    thread.start()
    # Act
    while cam.state != RECONNECTING and thread.is_alive():
        thread.join(0.01)
    cam.stop()
    thread.join(5.0)
    # Assert
    assert not thread.is_alive()
    assert results[0] is not None and results[1] is None


# --- status ---------------------------------------------------------------------------------


def _stats(cam: CameraCapture):
    return camera_status('fl_uav: uav0 camera', cam.source, cam.settings, cam.stats())


def test_the_status_is_ok_streaming_error_reconnecting_and_warns_at_a_low_rate():
    # Arrange: a camera at 4 fps for longer than the rate window, asked for 10 Hz
    clock = FakeClock()
    frames = int(RATE_WINDOW_S * 4) + 8
    videos = [FakeVideo([solid(RED)] * frames, clock, 0.25), FakeVideo(opened=False)]
    cam = capture(LIVE, videos, clock, rate_hz=10.0, reconnect_period_s=2.0)
    cam.start()
    # Act
    cam.next_frame()
    cam.next_frame()
    early = _stats(cam)
    for _ in range(frames - 2):
        cam.next_frame()
    slow = _stats(cam)
    cam._sleep = lambda s: cam.stop() is None   # the next reopen wait ends the capture
    cam.next_frame()
    lost = _stats(cam)
    # Assert
    assert early.level == OK and early.message.startswith('streaming')
    assert slow.level == WARN and 'below rate_hz 10' in slow.message
    values = dict(lost.values)
    assert lost.level == ERROR and 'reconnecting every 2 s' in lost.message
    assert (values['state'], values['read_failures'], values['frames_published'],
            values['source']) == (RECONNECTING, '1', str(frames), 'device 0')
    assert lost.name == 'fl_uav: uav0 camera' and lost.hardware_id == 'device 0'


def test_a_file_that_ended_warns():
    clock = FakeClock()
    cam = capture(A_FILE, [FakeVideo([solid(RED)])], clock)
    cam.start()
    cam.next_frame()
    cam.next_frame()
    report = _stats(cam)
    assert report.level == WARN and report.message == 'video file ended'


# --- the node's parameters ------------------------------------------------------------------


@pytest.mark.parametrize(('key', 'value', 'expected'), [
    ('rate_hz', 0.0, r'\(0, 120\]'),
    ('rate_hz', 500.0, r'\(0, 120\]'),
    ('width', 320, 'width and height must both be in'),
    ('encoding', 'mono8', "encoding 'mono8' unknown; choices: bgr8, rgb8"),
    ('reconnect_period_s', 0.0, r'\[0.1, 600\]'),
    ('timeout_s', 0.1, r'\[0.5, 600\]'),
    ('loop', 'yes', 'expected true or false'),
])
def test_a_bad_camera_parameter_names_its_key(key, value, expected):
    overrides = {key: value, **({'height': 0} if key == 'width' else {})}
    with pytest.raises(ConfigError, match=f'{key}.*{expected}|{expected}'):
        build_config(CameraNodeParams, overrides)


def test_camera_parameter_defaults_are_valid_and_zero_size_means_the_sources():
    # Act
    params = build_config(CameraNodeParams, {'width': 0, 'height': 0, 'rate_hz': 30})
    # Assert
    assert (params.width, params.height, params.rate_hz) == (0, 0, 30.0)
    assert CameraNodeParams().encoding == 'bgr8'
