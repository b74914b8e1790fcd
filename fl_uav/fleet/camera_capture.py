"""A real camera as plain Python: OpenCV reads it, frames come out paced and sized (no ROS).

The camera node (fl_uav/ros/camera_node.py) publishes what :class:`CameraCapture` delivers.
A source is parsed from one string (:func:`parse_source`):

- a V4L2 device: an index (``0``) or a device path (``/dev/video0``, ``/dev/v4l/by-id/...``);
- a GStreamer pipeline (the text contains ``!``), only where OpenCV was built with GStreamer
  (Debian/Ubuntu's python3-opencv is, the opencv-python wheel is not);
- a network stream URL (``rtsp://``, ``http(s)://``, ``udp://``, ``tcp://``, ``rtmp://``,
  ``srt://``), read through OpenCV's FFmpeg backend;
- anything else is a video file, replayed at the configured rate (``loop``: from the start
  again at its end; else the capture ends).

A file that cannot be opened or decoded is refused at start (:class:`CameraSourceError` naming
it). A live source (device, pipeline, URL) is never fatal: one that cannot be opened, or stops
delivering frames, is closed and opened again every ``reconnect_period_s`` until it is back,
counted (read failures, failed opens, reconnects) and said in the state: ``opening``,
``streaming``, ``reconnecting``, ``ended`` (a file without loop), ``stopped``.

Live frames are grabbed as fast as the camera gives them and only the one due is decoded, so
the published frame is the newest and a fast camera costs no decoding of dropped frames. The
clock and the sleep are injectable: the unit tests run on a fake clock.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import cv2
import numpy as np

from fl_uav.fleet.drone_status import ERROR, OK, WARN, StatusReport

log = logging.getLogger(__name__)

DEVICE, GSTREAMER, URL, FILE = 'device', 'gstreamer', 'url', 'file'
OPENING, STREAMING, RECONNECTING, ENDED, STOPPED = (
    'opening', 'streaming', 'reconnecting', 'ended', 'stopped')
URL_SCHEMES = ('rtsp', 'rtsps', 'http', 'https', 'udp', 'tcp', 'rtmp', 'srt', 'rtp')
RATE_WINDOW_S = 5.0
"""The measured rate is over the frames delivered in this many last seconds."""
RATE_WARN_FRACTION = 0.5
"""Streaming below this fraction of rate_hz (over a full window) is a WARN."""
_DEVICE_PATH = re.compile(r'/dev/\S+')
_URL = re.compile(r'(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://')
_PASSWORD = re.compile(r'(?<=://)([^/@:]*):[^/@]*@')


class CameraSourceError(ValueError):
    """A camera source that cannot work: the message names the key and the source."""


class Video(Protocol):
    """What the capture uses of cv2.VideoCapture (the unit tests' stand-in has the same)."""

    def isOpened(self) -> bool: ...

    def grab(self) -> bool: ...

    def retrieve(self) -> tuple[bool, np.ndarray | None]: ...

    def release(self) -> None: ...


@dataclass(frozen=True)
class CameraSource:
    """A parsed source: ``kind`` (device, gstreamer, url, file) and what OpenCV opens (a device
    index or path, the pipeline, the URL, the file's path)."""

    kind: str
    location: int | str

    @property
    def live(self) -> bool:
        """A camera or stream (reconnected when lost), not a file (replayed)."""
        return self.kind != FILE

    def describe(self) -> str:
        """The source for logs and status, a URL's password left out."""
        text = f'device {self.location}' if self.kind == DEVICE else str(self.location)
        return _PASSWORD.sub(r'\1:***@', text)


def gstreamer_available(build_information: str | None = None) -> bool:
    """Whether this OpenCV was built with GStreamer (its build information says ``YES``)."""
    text = cv2.getBuildInformation() if build_information is None else build_information
    found = re.search(r'^\s*GStreamer:\s*(\S+)', text, re.M)
    return bool(found) and found.group(1).upper().startswith('YES')


def parse_source(text: str, gstreamer: bool | None = None) -> CameraSource:
    """The source ``text`` names (module docstring); CameraSourceError naming ``source`` for
    an empty one, a pipeline without GStreamer, an unknown URL scheme or a missing file.
    ``gstreamer``: whether OpenCV has it (None: ask OpenCV)."""
    text = text.strip()
    if not text:
        raise CameraSourceError("source is empty: give a V4L2 device ('/dev/video0' or '0'), "
                                'a GStreamer pipeline, a stream URL or a video file')
    if text.isdigit():
        return CameraSource(DEVICE, int(text))
    if _DEVICE_PATH.fullmatch(text):
        return CameraSource(DEVICE, text)
    if '!' in text:
        if not (gstreamer_available() if gstreamer is None else gstreamer):
            raise CameraSourceError(
                f'source {text!r} is a GStreamer pipeline, but this OpenCV ({cv2.__version__}) '
                f'was built without GStreamer (cv2.getBuildInformation(): GStreamer: NO; the '
                f'opencv-python wheel has none, python3-opencv from apt has it): use a device, '
                f'a stream URL or a file, or an OpenCV with GStreamer')
        return CameraSource(GSTREAMER, text)
    url = _URL.match(text)
    if url:
        if url['scheme'].lower() not in URL_SCHEMES:
            raise CameraSourceError(f'source {text!r}: unknown stream scheme '
                                    f'{url["scheme"]!r}; schemes: {", ".join(URL_SCHEMES)}')
        return CameraSource(URL, text)
    path = Path(text).expanduser()
    if not path.is_file():
        raise CameraSourceError(f'source {str(path)!r}: no such video file (nor a device '
                                f"'/dev/videoN' or index, a URL or a GStreamer pipeline)")
    return CameraSource(FILE, str(path))


def open_video(source: CameraSource, timeout_s: float, width: int = 0, height: int = 0
               ) -> cv2.VideoCapture:
    """cv2.VideoCapture of ``source`` with its backend: V4L2 for a device (asked for
    ``width`` x ``height`` when set, and a one-frame buffer: the newest frame), GStreamer,
    FFmpeg with open and read timeouts of ``timeout_s`` for a URL, any for a file."""
    if source.kind == DEVICE:
        video = cv2.VideoCapture(source.location, cv2.CAP_V4L2)
        if video.isOpened():
            video.set(cv2.CAP_PROP_BUFFERSIZE, 1)
            if width and height:
                video.set(cv2.CAP_PROP_FRAME_WIDTH, width)
                video.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        return video
    if source.kind == GSTREAMER:
        return cv2.VideoCapture(source.location, cv2.CAP_GSTREAMER)
    if source.kind == URL:
        timeout_ms = int(timeout_s * 1000)
        return cv2.VideoCapture(source.location, cv2.CAP_FFMPEG,
                                [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, timeout_ms,
                                 cv2.CAP_PROP_READ_TIMEOUT_MSEC, timeout_ms])
    return cv2.VideoCapture(source.location)


@dataclass(frozen=True)
class CaptureSettings:
    """rate_hz: frames delivered per second at most; width, height: size of the delivered
    frames (0, 0: the source's own); loop: a file starts again at its end; reconnect_period_s:
    a lost live source is opened again this often; timeout_s: a stream's open and read
    timeout."""

    rate_hz: float = 10.0
    width: int = 0
    height: int = 0
    loop: bool = False
    reconnect_period_s: float = 2.0
    timeout_s: float = 5.0


@dataclass(frozen=True)
class CaptureStats:
    """A snapshot of the capture for the status: state, counts, measured delivery rate."""

    state: str
    frames: int
    reconnects: int
    read_failures: int
    open_failures: int
    replays: int
    rate_hz: float
    rate_window_full: bool
    last_error: str


class CameraCapture:
    """Opens a source, delivers its frames paced to rate_hz at the configured size (BGR uint8),
    reopens a lost live source, replays or ends a file.

    ``opener(source)`` makes the video (default :func:`open_video`); ``clock()`` is monotonic
    seconds; ``sleep(seconds)`` waits and returns True when the capture was stopped meanwhile
    (default: waits on the stop event). One thread calls :meth:`next_frame` (or runs
    :meth:`run`); :meth:`stats` and :meth:`stop` may be called from any other.
    """

    def __init__(self, source: CameraSource, settings: CaptureSettings,
                 opener: Callable[[CameraSource], Video] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], bool] | None = None) -> None:
        self.source = source
        self.settings = settings
        self._opener = opener or (lambda s: open_video(s, settings.timeout_s, settings.width,
                                                        settings.height))
        self._clock = clock
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._lock = threading.Lock()
        self._video: Video | None = None
        self._pending: np.ndarray | None = None   # a file's first frame, read at start
        self._due_s: float | None = None
        self._retry_at_s = 0.0
        self._frames_since_open = 0
        self._was_streaming = False
        self._delivered_at: deque[float] = deque()
        self._streaming_since_s: float | None = None
        self.state = OPENING
        self.frames = 0
        self.reconnects = 0
        self.read_failures = 0
        self.open_failures = 0
        self.replays = 0
        self.last_error = ''

    # --- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        """Check a file: one that cannot be opened or whose first frame cannot be decoded
        raises CameraSourceError naming it. A live source is opened by the reading thread
        (:meth:`next_frame`: an unreachable stream would block for timeout_s), and one that
        cannot be opened yet is retried every reconnect_period_s (state reconnecting)."""
        if self.source.live:
            return
        video = self._open()
        where = f'source {self.source.location!r}'
        if video is None:
            raise CameraSourceError(f'{where}: OpenCV cannot open this file as a video (not a '
                                    f'video, or a container or codec this OpenCV lacks)'
                                    f'{self._error_suffix()}')
        self._video = video
        image = self._retrieve() if self._grab() else None
        if image is None:
            self._release()
            raise CameraSourceError(f'{where}: OpenCV opened the file but cannot decode a '
                                    f'frame of it{self._error_suffix()}')
        self._pending = image
        self._set_state(STREAMING, f'replaying {self.source.describe()}')

    def stop(self) -> None:
        """Ask the capture to end: :meth:`next_frame` returns None once its current read
        returns (a blocked stream read returns within timeout_s)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()

    def run(self, on_frame: Callable[[np.ndarray], None]) -> None:
        """Deliver every frame to ``on_frame`` until the capture ends or is stopped; the
        video is released at the end. An error while reading (OpenCV's, a driver's) counts as
        a lost stream, logged, never raised."""
        try:
            while True:
                try:
                    image = self.next_frame()
                except Exception as exc:  # noqa: BLE001 - the camera's failure, not the node's
                    lines = str(exc).strip().splitlines() or ['']
                    self.last_error = f'{type(exc).__name__}: {lines[-1]}'
                    self._lost(f'reading failed: {self.last_error}')
                    continue
                if image is None:
                    return
                on_frame(image)
        finally:
            self._release()
            if self.state != ENDED:
                self.state = STOPPED

    def run_in_thread(self, on_frame: Callable[[np.ndarray], None],
                      name: str = 'camera_capture') -> threading.Thread:
        """:meth:`run` on a daemon thread of its own, started."""
        thread = threading.Thread(target=self.run, args=(on_frame,), name=name, daemon=True)
        thread.start()
        return thread

    # --- frames -----------------------------------------------------------------------------

    def next_frame(self) -> np.ndarray | None:
        """The next frame (BGR uint8 at the configured size) when it is due; None once a
        file without loop has ended or the capture was stopped."""
        while not self._stop.is_set():
            if self.state == ENDED:
                return None
            if self._video is None:
                self._reopen()
                continue
            if self._pending is not None:
                image, self._pending = self._pending, None
            else:
                if not self._grab():
                    self._lost()
                    continue
                if self.source.live and not self._due(self._clock()):
                    continue           # the camera is faster than rate_hz: skip, undecoded
                image = self._retrieve()
                if image is None:
                    self._lost()
                    continue
            if not self.source.live and not self._wait_until_due():
                return None
            return self._deliver(image)
        return None

    def _due(self, now_s: float) -> bool:
        return self._due_s is None or now_s >= self._due_s

    def _wait_until_due(self) -> bool:
        """Sleep until the next frame is due (a file's replay rate); False if stopped."""
        if self._due_s is None:
            return True
        delay_s = self._due_s - self._clock()
        return delay_s <= 0 or not self._sleep(delay_s)

    def _deliver(self, image: np.ndarray) -> np.ndarray:
        now_s = self._clock()
        period_s = 1.0 / self.settings.rate_hz
        # On schedule: the next one period after this one's due time (the long-run rate is
        # rate_hz, whatever the jitter); more than a period late: a period from now.
        if self._due_s is None or now_s - self._due_s >= period_s:
            self._due_s = now_s + period_s
        else:
            self._due_s += period_s
        with self._lock:
            self.frames += 1
            self._delivered_at.append(now_s)
            while self._delivered_at and self._delivered_at[0] < now_s - RATE_WINDOW_S:
                self._delivered_at.popleft()
        return self._sized(image)

    def _sized(self, image: np.ndarray) -> np.ndarray:
        width, height = self.settings.width, self.settings.height
        if width and height and (image.shape[1], image.shape[0]) != (width, height):
            image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
        return image

    # --- the video --------------------------------------------------------------------------

    def _open(self) -> Video | None:
        try:
            video = self._opener(self.source)
        except Exception as exc:  # noqa: BLE001 - an opener's failure is a failed open
            self.last_error = f'{type(exc).__name__}: {exc}'
            return None
        if not video.isOpened():
            video.release()
            return None
        self._frames_since_open = 0
        return video

    def _grab(self) -> bool:
        if not self._video.grab():
            return False
        self._frames_since_open += 1
        if self.source.live and self.state != STREAMING:
            if self._was_streaming:
                self.reconnects += 1
            self._was_streaming = True
            self._set_state(STREAMING, f'streaming from {self.source.describe()}'
                            + (f' again (reconnect {self.reconnects})' if self.reconnects
                               else ''))
        return True

    def _retrieve(self) -> np.ndarray | None:
        ok, image = self._video.retrieve()
        if not ok or image is None or image.size == 0:
            return None
        if image.dtype != np.uint8:
            self.last_error = f'frames of dtype {image.dtype}, not uint8'
            return None
        if image.ndim == 2:
            return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        if image.shape[2] == 4:
            return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
        return image

    def _release(self) -> None:
        video, self._video = self._video, None
        if video is not None:
            try:
                video.release()
            except Exception as exc:  # noqa: BLE001 - a release that fails changes nothing
                log.debug('release failed: %r', exc)

    def _lost(self, reason: str = 'no frame') -> None:
        """The video gave no frame: a file's end (replay or end), a live source lost."""
        self._release()
        if not self.source.live:
            if not self.settings.loop:
                self._set_state(ENDED, f'{self.source.describe()} ended after '
                                f'{self.frames} frames (loop false)')
            elif self._frames_since_open == 0:
                self._set_state(ENDED, f'{self.source.describe()} gave no frame on replay')
            else:
                self.replays += 1
            return
        self.read_failures += 1
        self._retry_at_s = self._clock() + self.settings.reconnect_period_s
        self._set_state(RECONNECTING, f'{self.source.describe()} lost ({reason}): reopening '
                        f'every {self.settings.reconnect_period_s:g} s')

    def _reopen(self) -> None:
        """Open the video again: a live source once its retry time has come."""
        if self.source.live:
            delay_s = self._retry_at_s - self._clock()
            if delay_s > 0 and self._sleep(delay_s):
                return
        video = self._open()
        if video is not None:
            self._video = video
            return
        self.open_failures += 1
        if self.source.live:
            self._retry_at_s = self._clock() + self.settings.reconnect_period_s
            self._set_state(RECONNECTING, f'cannot open {self.source.describe()}'
                            f'{self._error_suffix()}: retrying every '
                            f'{self.settings.reconnect_period_s:g} s')
        else:
            self._set_state(ENDED, f'{self.source.describe()} cannot be opened again for its '
                            f'replay{self._error_suffix()}')

    def _error_suffix(self) -> str:
        return f': {self.last_error}' if self.last_error else ''

    def _set_state(self, state: str, line: str) -> None:
        if state == self.state:
            return
        self.state = state
        self._streaming_since_s = self._clock() if state == STREAMING else None
        (log.warning if state in (RECONNECTING, ENDED) else log.info)(line)

    # --- status -----------------------------------------------------------------------------

    def stats(self) -> CaptureStats:
        """The capture now (any thread)."""
        now_s = self._clock()
        with self._lock:
            times = [t for t in self._delivered_at if t >= now_s - RATE_WINDOW_S]
        span_s = times[-1] - times[0] if len(times) >= 2 else 0.0
        rate_hz = (len(times) - 1) / span_s if span_s > 0 else 0.0
        since = self._streaming_since_s
        full = self.state == STREAMING and since is not None and now_s - since >= RATE_WINDOW_S
        return CaptureStats(self.state, self.frames, self.reconnects, self.read_failures,
                            self.open_failures, self.replays, rate_hz, full, self.last_error)


def camera_status(name: str, source: CameraSource, settings: CaptureSettings,
                  stats: CaptureStats) -> StatusReport:
    """The camera's DiagnosticStatus: ERROR while reconnecting, WARN while opening, once a
    file ended, and when streaming below RATE_WARN_FRACTION x rate_hz over a full window; OK
    otherwise."""
    level, message = OK, f'{stats.state} at {stats.rate_hz:.1f} Hz'
    if stats.state == RECONNECTING:
        level, message = ERROR, (f'camera lost, reconnecting every '
                                 f'{settings.reconnect_period_s:g} s')
    elif stats.state in (OPENING, ENDED, STOPPED):
        level, message = WARN, stats.state if stats.state != ENDED else 'video file ended'
    elif stats.rate_window_full and stats.rate_hz < RATE_WARN_FRACTION * settings.rate_hz:
        level, message = WARN, (f'streaming at {stats.rate_hz:.1f} Hz, below rate_hz '
                                f'{settings.rate_hz:g}')
    size = (f'{settings.width}x{settings.height}' if settings.width and settings.height
            else 'source size')
    values: tuple[tuple[str, Any], ...] = (
        ('source', source.describe()),
        ('source_kind', source.kind),
        ('state', stats.state),
        ('frames_published', stats.frames),
        ('rate_hz', f'{stats.rate_hz:.2f}'),
        ('configured_rate_hz', f'{settings.rate_hz:g}'),
        ('size', size),
        ('reconnects', stats.reconnects),
        ('read_failures', stats.read_failures),
        ('open_failures', stats.open_failures),
        ('replays', stats.replays),
        ('last_error', stats.last_error or 'none'),
    )
    return StatusReport(name, source.describe(), level, message,
                        tuple((key, str(value)) for key, value in values))
