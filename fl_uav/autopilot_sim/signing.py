"""MAVLink 2 message signing on a simulated vehicle, as PX4 implements it.

Read from PX4-Autopilot's sources and docs (2026; PX4 v1.17 ships signing):
``src/modules/mavlink/mavlink_sign_control.cpp`` / ``.h`` (MavlinkSignControl: key file, the
unsigned allowlist, SETUP_SIGNING), ``src/modules/mavlink/mavlink_signing_storage.cpp`` / ``.h``
(the key file's format and the timestamp kept across restarts),
``docs/en/mavlink/message_signing.md`` and ``docs/en/mavlink/security_hardening.md`` (the
receiver's rules: any link, armed guard, targets), and the MAVLink C library's
``mavlink_helpers.h`` (``mavlink_signature_check``, ``mavlink_frame_char_buffer``: the
signature is checked before the timestamp; a frame that fails is still accepted if the
accept-unsigned callback says so). The rules:

- The key lives in ``<storage root>/mavlink/mavlink-signing-key.bin`` (PX4: on the SD card),
  40 bytes: the 32-byte key, then the 64-bit timestamp, little-endian; the directory mode
  0700, the file 0600, written whole (a temporary file renamed over it). A file whose key and
  timestamp are all zero, or that is missing or short, means no key.
- No key: signing is off. Nothing is signed, every incoming message is accepted, signed or
  not (the signature is not checked).
- A key: signing is on, on every link (USB too, since PX4 PR #26894; before it MAV_SIGN_CFG
  chose and USB could stay unsigned). Every outgoing MAVLink 2 message is signed (link id:
  the MAVLink instance, 0 here), its timestamp one more than the last and never behind an
  accepted incoming one. An incoming message is accepted if its signature matches the key
  and its timestamp is newer than its stream's last (a new stream: at most a minute behind
  ours), or, signed or not, if it is one of :data:`UNSIGNED_ALLOWED` (HEARTBEAT,
  RADIO_STATUS, ADSB_VEHICLE, COLLISION). Anything else is dropped before any handler sees
  it: a DISARM, a mode change, a PARAM_SET, a mission upload.
- SETUP_SIGNING (#256) is taken on any link, when addressed to this vehicle or broadcast
  (target system 0 or ours, component 0 or ours), and never while armed. Without a key it is
  accepted unsigned (the first key: provision it over a trusted link, USB, as PX4's docs
  say); with a key it passes the rule above, so only one signed with the current key
  changes it. An all-zero key and timestamp turns signing off (only signed, only if on). A
  new key's timestamp is the larger of the one sent and the clock (with the same key, also of
  ours), and the key file is written at once. The streams' last timestamps are kept apart
  from the key (the C library's ``mavlink_signing_streams``) and survive a SETUP_SIGNING, so
  a frame taken before it is still a replay after it.
- At start the timestamp is the larger of the file's and the clock (MAVLink spec, "Timestamp
  handling"; PX4's storage reconcile); a clean stop writes the current one back.

There is no MAVLink acknowledgement of SETUP_SIGNING; the way to know a key took is that the
vehicle's next messages are signed with it (``fl-uav mavlink-key provision`` waits for that).
"""

from __future__ import annotations

import logging
import struct
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pymavlink.dialects.v20 import common as mavlink

from fl_uav.vehicle.mavlink_signing import (
    KEY_BYTES,
    StreamCheck,
    is_signed,
    now_ticks,
    write_private_file,
)

_log = logging.getLogger(__name__)

#: messages PX4 accepts unsigned even with signing on (mavlink_sign_control.cpp
#: ``unsigned_messages``; docs "Unsigned Message Allowlist")
UNSIGNED_ALLOWED = frozenset({mavlink.MAVLINK_MSG_ID_HEARTBEAT,
                              mavlink.MAVLINK_MSG_ID_RADIO_STATUS,
                              mavlink.MAVLINK_MSG_ID_ADSB_VEHICLE,
                              mavlink.MAVLINK_MSG_ID_COLLISION})
KEY_DIR = 'mavlink'
KEY_FILE = 'mavlink-signing-key.bin'
KEY_FILE_BYTES = KEY_BYTES + 8
#: PX4's link id: the MAVLink instance (MavlinkSignControl::start); one instance per vehicle
LINK_ID = 0
BLANK_KEY = bytes(KEY_BYTES)

# SETUP_SIGNING outcomes (the sim's event log and counters)
KEY_ACCEPTED = 'key_accepted'
SIGNING_DISABLED = 'signing_disabled'
REJECTED_ARMED = 'rejected_armed'


def key_file_path(state_dir: str | Path, vehicle_index: int) -> Path:
    """Vehicle ``vehicle_index``'s key file under the simulator's state directory (each
    vehicle its own storage root, as each PX4 SITL instance has its own rootfs)."""
    return Path(state_dir) / f'vehicle{vehicle_index}' / KEY_DIR / KEY_FILE


def read_px4_key_file(path: str | Path) -> tuple[bytes, int] | None:
    """(key, timestamp) of a PX4 signing key file, or None when there is no usable one
    (missing, short, or all zero: signing off)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < KEY_FILE_BYTES:
        return None
    key, stamp = data[:KEY_BYTES], struct.unpack('<Q', data[KEY_BYTES:KEY_FILE_BYTES])[0]
    if key == BLANK_KEY and stamp == 0:
        return None
    return key, stamp


def write_px4_key_file(path: str | Path, key: bytes, timestamp: int) -> Path:
    """Write a PX4 signing key file (``key`` + little-endian ``timestamp``) whole: directory
    0700, a temporary file 0600 synced and renamed over the old one."""
    if len(key) != KEY_BYTES:
        raise ValueError(f'a MAVLink signing key has {KEY_BYTES} bytes, got {len(key)}')
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private_file(path, key + struct.pack('<Q', timestamp))
    return path


class VehicleSigning:
    """One simulated vehicle's signing state: its key (None: signing off), the outgoing
    signer (the vehicle's pymavlink ``MAVLink`` object, ``sender``), the incoming check, the
    key file (``path``; None: no storage, a key lasts until the simulator stops) and what was
    refused: ``rejected`` by reason (``unsigned``, ``bad_signature``, ``stale_timestamp``,
    ``too_many_streams``), ``rejected_messages`` by message name, ``setup`` SETUP_SIGNING
    outcomes."""

    def __init__(self, sender: mavlink.MAVLink, sysid: int, path: Path | None,
                 clock: Callable[[], float] = time.time,
                 on_event: Callable[..., None] | None = None) -> None:
        self._sender = sender
        self.sysid = sysid
        self.path = path
        self._clock = clock
        self._on_event = on_event or (lambda event, **details: None)
        self.key: bytes | None = None
        self._check: StreamCheck | None = None
        # the last timestamp per stream, kept for the vehicle's life apart from the key, as
        # PX4 keeps mavlink_signing_streams apart from mavlink_signing_t: a SETUP_SIGNING
        # (the same key again, another key, signing off and on) does not forget them, so
        # nothing signed before it can be played back after it
        self._streams: dict[tuple[int, int, int], int] = {}
        self.rejected: Counter[str] = Counter()
        self.rejected_messages: Counter[str] = Counter()
        self.setup: Counter[str] = Counter()
        self.accepted_signed = 0
        self._warned: set[tuple[str, str]] = set()
        stored = read_px4_key_file(path) if path is not None else None
        if stored is not None:
            self._activate(stored[0], max(stored[1], self._now()))

    @property
    def active(self) -> bool:
        """True while the vehicle has a key: it signs and checks."""
        return self.key is not None

    @property
    def timestamp(self) -> int:
        """The vehicle's signing timestamp (the next message it signs has at least it)."""
        return self._sender.signing.timestamp

    def _now(self) -> int:
        return now_ticks(self._clock())

    def _activate(self, key: bytes, timestamp: int) -> None:
        self.key = key
        self._check = StreamCheck(key, timestamp, self._streams)
        signing = self._sender.signing
        signing.secret_key = key
        signing.link_id = LINK_ID
        signing.timestamp = timestamp
        signing.sign_outgoing = True

    def _deactivate(self) -> None:
        self.key = None
        self._check = None
        signing = self._sender.signing
        signing.sign_outgoing = False
        signing.secret_key = None
        signing.timestamp = 0

    def accept(self, msg) -> bool:
        """PX4's verdict on a parsed incoming message (``msg.get_msgbuf()`` is its frame):
        True to hand it on; False, counted and logged once per reason and message, to drop it."""
        if self._check is None:
            return True
        frame = bytes(msg.get_msgbuf())
        if is_signed(frame):
            # the C library keeps one timestamp per link: ours follows both ways
            self._check.timestamp = max(self._check.timestamp, self._sender.signing.timestamp)
            reason = self._check.check(frame)
            if reason is None:
                self._sender.signing.timestamp = max(self._sender.signing.timestamp,
                                                     self._check.timestamp)
                self.accepted_signed += 1
                return True
        else:
            reason = 'unsigned'
        if msg.get_msgId() in UNSIGNED_ALLOWED:
            return True
        name = msg.get_type()
        self.rejected[reason] += 1
        self.rejected_messages[name] += 1
        if (reason, name) not in self._warned:
            self._warned.add((reason, name))
            _log.warning('vehicle %d: MAVLink signing: %s %s from %d/%d rejected (further ones '
                         'counted only)', self.sysid, reason, name, msg.get_srcSystem(),
                         msg.get_srcComponent())
            self._on_event('mavlink_rejected', reason=reason, message=name,
                           source=f'{msg.get_srcSystem()}/{msg.get_srcComponent()}')
        return False

    def on_setup_signing(self, msg, armed: bool) -> str:
        """Handle a SETUP_SIGNING that passed :meth:`accept` and is addressed to this vehicle
        (the link routes only those here), as PX4 does; returns the outcome (also counted in
        ``setup`` and put in the event log)."""
        outcome = self._setup_outcome(msg, armed)
        self.setup[outcome] += 1
        self._on_event('setup_signing', outcome=outcome)
        _log.info('vehicle %d: SETUP_SIGNING from %d/%d: %s', self.sysid, msg.get_srcSystem(),
                  msg.get_srcComponent(), outcome)
        return outcome

    def _setup_outcome(self, msg, armed: bool) -> str:
        if armed:
            return REJECTED_ARMED
        key, requested = bytes(msg.secret_key), int(msg.initial_timestamp)
        if key == BLANK_KEY and requested == 0:
            if not self.active:
                return SIGNING_DISABLED            # already off: nothing to do
            self._deactivate()                     # signed with the key: accept() saw to it
            if self.path is not None:
                write_px4_key_file(self.path, BLANK_KEY, 0)
            return SIGNING_DISABLED
        timestamp = max(requested, self._now())
        if self.key == key:
            timestamp = max(timestamp, self.timestamp)
        self._activate(key, timestamp)
        if self.path is not None:
            write_px4_key_file(self.path, key, timestamp)
        return KEY_ACCEPTED

    def persist(self) -> None:
        """A clean stop: write the current timestamp back to the key file (same key only)."""
        if self.path is None or self.key is None:
            return
        stored = read_px4_key_file(self.path)
        if stored is not None and stored[0] == self.key and stored[1] < self.timestamp:
            write_px4_key_file(self.path, self.key, self.timestamp)

    def status(self) -> dict:
        """What the vehicle's signing did, for the event log and status."""
        return {'active': self.active, 'accepted_signed': self.accepted_signed,
                'rejected': dict(self.rejected), 'rejected_messages': dict(self.rejected_messages),
                'setup_signing': dict(self.setup)}
