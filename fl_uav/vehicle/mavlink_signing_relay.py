"""A MAVLink 2 signing relay between MAVSDK and the autopilot link.

MAVSDK 4.x cannot sign (no signing API; it accepts signed frames and ignores the signature,
and sends unsigned ones), and a PX4 with a signing key drops every unsigned command. So when
the drone has a key, MAVSDK does not open the autopilot link itself: it gets a ``raw://``
connection, and this relay owns the link (``udpin://``, ``udpout://`` or ``serial://``, as
MAVSDK would have opened it). Every frame MAVSDK hands out is signed with the key (its own
sequence, system and component ids kept; the signed flag set, the CRC recomputed, the
signature block appended: :func:`~fl_uav.vehicle.mavlink_signing.sign_frame`) and written to
the link; every frame from the link reaches MAVSDK only if it is signed with the key and
newer than its stream's last (the C library's check,
:class:`~fl_uav.vehicle.mavlink_signing.StreamCheck`). Anything else is dropped and counted by
reason in :attr:`SigningRelay.dropped`: a second client on the drone's UDP port can neither
command the autopilot through the drone nor feed MAVSDK a fake HEARTBEAT (a disarm that never
happened) or position.

On ``udpin://`` the relay answers the address the last frame signed with the key (and newer
than its stream's last) came from, never one that sent anything else. The streams it signs
on are recorded in its check as it signs, so a frame of its own played back to it is a stale
replay: it neither reaches MAVSDK nor moves the peer. Its signing timestamp starts at the
clock and follows the autopilot's accepted frames, as the C library's does, so a companion
that boots with its clock behind still gets ahead of the timestamps it used before.

Threads: MAVSDK calls :meth:`SigningRelay.send_from_mavsdk` on its own threads (a lock guards
the signer and the send, so frames leave in timestamp order); one reader thread per relay
reads the link and hands accepted frames to MAVSDK.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import termios
import threading
import tty
from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit

from fl_uav.vehicle.mavlink_signing import (
    STX_V1,
    STX_V2,
    StreamCheck,
    frame_length,
    is_signed,
    now_ticks,
    split_frames,
)

_log = logging.getLogger(__name__)

#: the link id the companion signs with (its one MAVLink link)
COMPANION_LINK_ID = 0
READ_TIMEOUT_S = 0.2          # how often the reader looks whether it was closed
MAX_DATAGRAM = 65535
SERIAL_READ = 4096
MAX_PENDING = 280             # the longest MAVLink frame (a signed MAVLink 2 one)
MAVSDK_RAW_URL = 'raw://'


class LinkTransport:
    """The autopilot side of a relay: send a chunk of frames, read what arrives."""

    url: str

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def receive(self, timeout_s: float) -> tuple[bytes, object] | None:
        """(data, where it came from), or None after ``timeout_s`` with nothing."""
        raise NotImplementedError

    def accept_peer(self, peer: object) -> None:
        """A frame signed with the key came from ``peer``: answer there (udpin)."""

    def close(self) -> None:
        raise NotImplementedError


class UdpTransport(LinkTransport):
    """``udpin://host:port`` (bind there; answer whoever last sent a good frame) or
    ``udpout://host:port`` (send there from a port of our own)."""

    def __init__(self, url: str, listen: bool, host: str, port: int) -> None:
        self.url = url
        self.listen = listen
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if listen:
            self.sock.bind((host, port))
            self.peer: tuple[str, int] | None = None
        else:
            self.sock.bind(('0.0.0.0', 0))
            self.peer = (host, port)

    def send(self, data: bytes) -> None:
        if self.peer is None:
            raise ConnectionError('no autopilot heard yet')
        self.sock.sendto(data, self.peer)

    def receive(self, timeout_s: float) -> tuple[bytes, object] | None:
        ready, _, _ = select.select([self.sock], [], [], timeout_s)
        if not ready:
            return None
        data, addr = self.sock.recvfrom(MAX_DATAGRAM)
        return data, addr

    def accept_peer(self, peer: object) -> None:
        if self.listen:
            self.peer = peer       # type: ignore[assignment]

    def close(self) -> None:
        self.sock.close()


class SerialTransport(LinkTransport):
    """``serial:///dev/ttyACM0:57600``: a serial port in raw mode (termios; Linux)."""

    def __init__(self, url: str, device: str, baud: int) -> None:
        self.url = url
        speed = getattr(termios, f'B{baud}', None)
        if speed is None:
            raise ValueError(f'{url}: {baud} is not a baud rate this system knows')
        self.fd = os.open(device, os.O_RDWR | os.O_NOCTTY)
        try:
            tty.setraw(self.fd)
            attrs = termios.tcgetattr(self.fd)
            attrs[4] = attrs[5] = speed                  # ispeed, ospeed
            attrs[2] = (attrs[2] | termios.CLOCAL | termios.CREAD) & ~termios.CRTSCTS
            termios.tcsetattr(self.fd, termios.TCSANOW, attrs)
        except (OSError, termios.error):
            os.close(self.fd)
            raise
        self._write_lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self._write_lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]

    def receive(self, timeout_s: float) -> tuple[bytes, object] | None:
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if not ready:
            return None
        data = os.read(self.fd, SERIAL_READ)
        if not data:
            raise ConnectionError(f'{self.url}: the serial port closed')
        return data, None

    def close(self) -> None:
        os.close(self.fd)


def parse_link_url(url: str) -> tuple[str, str, int]:
    """(kind, host or device, port or baud) of a MAVSDK connection URL the relay can open:
    ``udpin://HOST:PORT`` (also MAVSDK's legacy ``udp://``), ``udpout://HOST:PORT`` or
    ``serial://DEVICE:BAUD``; ValueError naming the URL otherwise."""
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme in ('udpin', 'udp', 'udpout'):
        try:
            port = parts.port
        except ValueError:
            port = None
        if port is None:
            raise ValueError(f'{url}: a UDP link needs a port, e.g. udpin://0.0.0.0:14540')
        return ('udpout' if scheme == 'udpout' else 'udpin'), parts.hostname or '0.0.0.0', port
    if scheme == 'serial':
        device, _, baud = (parts.netloc + parts.path).rpartition(':')
        if not device or not baud.isdigit():
            raise ValueError(f'{url}: expected serial://DEVICE:BAUD, e.g. '
                             f'serial:///dev/ttyACM0:57600')
        return 'serial', device, int(baud)
    raise ValueError(f'{url}: MAVLink signing supports udpin://, udpout:// and serial:// '
                     f'links, not {scheme or "this"}')


def open_transport(url: str) -> LinkTransport:
    """The link ``url`` names (:func:`parse_link_url`); OSError when it cannot be opened (a
    port in use, no such device)."""
    kind, where, number = parse_link_url(url)
    if kind == 'serial':
        return SerialTransport(url, where, number)
    return UdpTransport(url, kind == 'udpin', where, number)


class SigningRelay:
    """Signs what MAVSDK sends, checks what the autopilot sends (module docstring).

    ``sent``: frames signed and written; ``delivered``: frames handed to MAVSDK;
    ``not_sent``: frames MAVSDK sent on udpin before any autopilot was heard (nowhere to send
    them yet, as with MAVSDK's own udpin); ``dropped``: by reason (``unsigned``,
    ``bad_signature``, ``stale_timestamp``, ``too_many_streams``, ``garbage`` bytes between
    frames, ``mavlink1`` from MAVSDK, ``send_failed``): nothing in a healthy run."""

    def __init__(self, transport: LinkTransport, key: bytes,
                 link_id: int = COMPANION_LINK_ID) -> None:
        self.transport = transport
        self.link_id = link_id
        self._check = StreamCheck(key, now_ticks())
        self._lock = threading.Lock()
        self._pending = b''            # a serial read may end inside a frame
        self.sent = 0
        self.delivered = 0
        self.not_sent = 0
        self.dropped: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._deliver: Callable[[bytes], None] | None = None
        self._closed = threading.Event()
        self._reader: threading.Thread | None = None

    @classmethod
    def open(cls, url: str, key: bytes) -> SigningRelay:
        """A relay on the link ``url`` names (:func:`open_transport`)."""
        return cls(open_transport(url), key)

    # ----------------------------------------------------------------- MAVSDK -> autopilot

    def send_from_mavsdk(self, data: bytes) -> None:
        """Sign each frame in ``data`` (what MAVSDK wants sent) and write it to the link."""
        frames, garbage = split_frames(data)
        if garbage:
            self._drop('garbage', garbage)
        for frame in frames:
            if frame[0] != STX_V2:
                self._drop('mavlink1')          # cannot be signed; PX4 would drop it
                continue
            # sign and send under one lock: frames leave in timestamp order (two MAVSDK
            # threads racing would otherwise put a later timestamp on the wire first, and
            # the autopilot drop the earlier frame as stale)
            with self._lock:
                signed = (frame if is_signed(frame)
                          else self._check.sign(frame, self.link_id, now_ticks()))
                try:
                    self.transport.send(signed)
                except ConnectionError:
                    self.not_sent += 1
                    continue
                except OSError as exc:
                    failure = str(exc)
                else:
                    self.sent += 1
                    continue
            self._drop('send_failed', detail=failure)

    # ----------------------------------------------------------------- autopilot -> MAVSDK

    def accept_from_link(self, data: bytes, peer: object = None) -> bytes:
        """The frames of ``data`` (what the link delivered, from ``peer``) that may reach
        MAVSDK, concatenated; the rest is counted in :attr:`dropped`."""
        if isinstance(self.transport, SerialTransport):
            data, self._pending = self._pending + data, b''
            end = _last_complete(data)
            data, self._pending = data[:end], data[end:]
        frames, garbage = split_frames(data)
        if garbage:
            self._drop('garbage', garbage)
        accepted = []
        for frame in frames:
            if not is_signed(frame):
                self._drop('unsigned')
                continue
            with self._lock:
                reason = self._check.check(frame)
            if reason is not None:
                self._drop(reason)
                continue
            accepted.append(frame)
            # The peer follows the sender of the last frame that passed the check, as
            # MAVSDK's own udpin follows a remote whose address changed: the autopilot may
            # come back on another port after a reboot. Passing the check takes a signature
            # made with the key and a timestamp newer than its stream's last (our own
            # streams included, so our frames sent back are refused), i.e. a key holder, or
            # someone on the path who delivers a captured frame before the original, who
            # can withhold the link's traffic anyway. Keeping the first peer instead would
            # leave the drone deaf after such a reboot and give the first sender the link
            # for good.
            self.transport.accept_peer(peer)
        self.delivered += len(accepted)
        return b''.join(accepted)

    def start(self, deliver: Callable[[bytes], None]) -> None:
        """Start the reader thread: accepted frames go to ``deliver`` (MAVSDK's
        pass_received_raw_bytes)."""
        self._deliver = deliver
        self._reader = threading.Thread(target=self._read_loop, name='mavlink-signing-relay',
                                        daemon=True)
        self._reader.start()

    def attach(self, mavsdk_instance) -> None:
        """Take a MAVSDK instance's outgoing bytes; call it before adding its ``raw://``
        connection, so its first heartbeat is not lost (MAVSDK logs that no raw connection
        exists yet), and :meth:`start` with its ``pass_received_raw_bytes`` after."""
        mavsdk_instance.subscribe_raw_bytes_to_be_sent(self.send_from_mavsdk)

    def _read_loop(self) -> None:
        while not self._closed.is_set():
            try:
                got = self.transport.receive(READ_TIMEOUT_S)
            except (OSError, ValueError) as exc:
                if not self._closed.is_set():
                    _log.error('%s: MAVLink signing relay: the link failed: %s',
                               self.transport.url, exc)
                return
            if got is None:
                continue
            accepted = self.accept_from_link(*got)
            if accepted and self._deliver is not None and not self._closed.is_set():
                self._deliver(accepted)

    def _drop(self, reason: str, count: int = 1, detail: str = '') -> None:
        self.dropped[reason] += count
        if reason not in self._warned:
            self._warned.add(reason)
            _log.warning('%s: MAVLink signing relay dropped %s%s (further ones counted only)',
                         self.transport.url, reason.replace('_', ' '),
                         f': {detail}' if detail else '')

    def status(self) -> dict:
        """Frames signed and sent, delivered to MAVSDK, dropped by reason."""
        return {'sent': self.sent, 'delivered': self.delivered, 'not_sent': self.not_sent,
                'dropped': dict(self.dropped)}

    def close(self) -> None:
        """Stop the reader and close the link (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._reader is not None:
            self._reader.join(READ_TIMEOUT_S * 5)
        self.transport.close()


def _last_complete(data: bytes) -> int:
    """Where the complete frames of a serial read end: the rest, from a frame start whose end
    has not arrived yet, waits for the next read (at most MAX_PENDING bytes of it)."""
    i = 0
    while i < len(data):
        size = frame_length(data, i)
        if size is not None:
            i += size
        elif data[i] in (STX_V1, STX_V2) and len(data) - i <= MAX_PENDING:
            return i
        else:
            i += 1
    return i
