"""MAVLink 2 message signing on raw frames, as the MAVLink C library does it, and key files.

What a signed frame is (MAVLink spec, "Message Signing"; mavlink_helpers.h
``mavlink_sign_packet`` / ``mavlink_signature_check``): a MAVLink 2 frame with incompat flag
0x01 carries 13 more bytes after its CRC: link id (1 byte), a 48-bit timestamp in 10 µs units
since 2015-01-01 00:00 UTC, and the first 6 bytes of SHA-256(secret key + header + payload + CRC
+ link id + timestamp). A receiver accepts a signed frame when the signature matches and the
timestamp is newer than the last one it accepted on the frame's stream (system id, component
id, link id); a stream it has not seen yet is accepted unless its timestamp is more than one
minute (6,000,000 ticks) behind the receiver's own, and at most MAX_SIGNING_STREAMS streams are
tracked. The signature is checked before the timestamp, so a forged frame cannot move a
stream's timestamp (pymavlink's ``check_signature`` records the timestamp first; the C library
PX4 runs does not). A receiver's own timestamp follows every frame it accepts (never goes
back), and it adds one per frame it signs.

Key files: the companion computer's key is 64 hex digits on one line (``fl-uav mavlink-key
new``), mode 0600; :func:`passphrase_key` is MAVProxy's ``signing setup PASSPHRASE`` key
(SHA-256 of the passphrase). The autopilot keeps its own copy in PX4's format
(:mod:`fl_uav.autopilot_sim.signing`).

These helpers work on frame bytes only, so a relay can sign what MAVSDK sends (which cannot
sign) without decoding it, and check what it receives without decoding it either.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from pymavlink.dialects.v20 import common as mavlink

KEY_BYTES = 32
STX_V2 = 0xFD
STX_V1 = 0xFE
HEADER_V2 = 10                     # STX, len, incompat, compat, seq, sysid, compid, msgid x3
HEADER_V1 = 6
CRC_BYTES = 2
SIGNATURE_BLOCK = 13               # link id, timestamp (6), signature (6)
IFLAG_SIGNED = 0x01
#: 2015-01-01 00:00:00 UTC in Unix seconds: the epoch of signing timestamps
MAVLINK_EPOCH_UNIX_S = 1_420_070_400
TICKS_PER_SECOND = 100_000         # 10 µs units
#: a stream not seen before is refused when its timestamp is this far behind our own (1 min)
NEW_STREAM_MAX_LAG_TICKS = 6_000 * 1000
#: MAVLINK_MAX_SIGNING_STREAMS of the C library: a further new stream is refused
MAX_SIGNING_STREAMS = 16
TIMESTAMP_MAX = (1 << 48) - 1
KEY_FILE_MODE = 0o600


def now_ticks(unix_s: float | None = None) -> int:
    """A signing timestamp for ``unix_s`` (default: now): 10 µs units since 2015-01-01."""
    seconds = time.time() if unix_s is None else unix_s
    return max(0, int((seconds - MAVLINK_EPOCH_UNIX_S) * TICKS_PER_SECOND))


def frame_length(buf: bytes | bytearray | memoryview, start: int = 0) -> int | None:
    """Length of the MAVLink frame starting at ``buf[start]`` (v1 or v2, its signature
    included), or None if no frame starts there or it does not fit in ``buf``."""
    if len(buf) - start < 2:
        return None
    stx, payload = buf[start], buf[start + 1]
    if stx == STX_V2:
        if len(buf) - start < HEADER_V2:
            return None
        size = HEADER_V2 + payload + CRC_BYTES
        if buf[start + 2] & IFLAG_SIGNED:
            size += SIGNATURE_BLOCK
    elif stx == STX_V1:
        size = HEADER_V1 + payload + CRC_BYTES
    else:
        return None
    return size if start + size <= len(buf) else None


def split_frames(data: bytes) -> tuple[list[bytes], int]:
    """The MAVLink frames in a datagram or read, and how many bytes were skipped as garbage
    (bytes before a frame start, a truncated frame at the end)."""
    frames, skipped, i = [], 0, 0
    while i < len(data):
        size = frame_length(data, i)
        if size is None:
            skipped += 1
            i += 1
            continue
        frames.append(bytes(data[i:i + size]))
        i += size
    return frames, skipped


def is_signed(frame: bytes) -> bool:
    """A MAVLink 2 frame with the signed flag (and room for its signature block)."""
    return (len(frame) >= HEADER_V2 + CRC_BYTES + SIGNATURE_BLOCK and frame[0] == STX_V2
            and bool(frame[2] & IFLAG_SIGNED))


def msg_id(frame: bytes) -> int:
    """The message id of a v1 or v2 frame."""
    if frame[0] == STX_V2:
        return frame[7] | (frame[8] << 8) | (frame[9] << 16)
    return frame[5]


def source(frame: bytes) -> tuple[int, int]:
    """(system id, component id) of a v1 or v2 frame."""
    return (frame[5], frame[6]) if frame[0] == STX_V2 else (frame[3], frame[4])


def signature_timestamp(frame: bytes) -> int:
    """The timestamp of a signed frame's signature block."""
    low, high = struct.unpack('<IH', frame[-12:-6])
    return low | (high << 32)


def signature_link_id(frame: bytes) -> int:
    """The link id of a signed frame's signature block."""
    return frame[-13]


def signature_matches(frame: bytes, key: bytes) -> bool:
    """The signed frame's 48-bit signature is SHA-256(key + frame up to the signature)[:6]."""
    return hmac.compare_digest(hashlib.sha256(key + frame[:-6]).digest()[:6], frame[-6:])


_crc_extras: dict[int, int] = {}


def crc_extra(frame: bytes) -> int:
    """The CRC_EXTRA of an (intact) v2 frame's message: from pymavlink's common dialect, or,
    for a message it does not know, the one value that makes the frame's CRC come out (a CRC
    step over one byte is a bijection, so exactly one of the 256 does)."""
    ident = msg_id(frame)
    known = _crc_extras.get(ident)
    if known is not None:
        return known
    message = mavlink.mavlink_map.get(ident)
    if message is not None:
        _crc_extras[ident] = message.crc_extra
        return message.crc_extra
    body_end = HEADER_V2 + frame[1]
    wanted = struct.unpack('<H', frame[body_end:body_end + CRC_BYTES])[0]
    for extra in range(256):
        if mavlink.x25crc(frame[1:body_end] + bytes([extra])).crc == wanted:
            _crc_extras[ident] = extra
            return extra
    raise ValueError(f'message {ident}: no CRC_EXTRA gives the frame its CRC')  # not reached


def sign_frame(frame: bytes, key: bytes, link_id: int, timestamp: int) -> bytes:
    """An unsigned MAVLink 2 frame, signed: the signed flag set, the CRC recomputed (it
    covers the flags), the signature block appended (mavlink_sign_packet)."""
    if frame[0] != STX_V2 or frame[2] & IFLAG_SIGNED:
        raise ValueError('only an unsigned MAVLink 2 frame can be signed')
    body_end = HEADER_V2 + frame[1]
    header = bytes([STX_V2, frame[1], frame[2] | IFLAG_SIGNED]) + frame[3:HEADER_V2]
    body = header + frame[HEADER_V2:body_end]
    crc = mavlink.x25crc(body[1:] + bytes([crc_extra(frame)])).crc
    unsigned = body + struct.pack('<H', crc) + struct.pack('<BQ', link_id, timestamp)[:7]
    return unsigned + hashlib.sha256(key + unsigned).digest()[:6]


class SigningError(ValueError):
    """A key file that cannot be used, with the reason."""


@dataclass
class StreamCheck:
    """The C library's signature and replay check (``mavlink_signature_check``) on raw frames,
    with its state: the last timestamp accepted per (sysid, compid, link id) stream, and our
    own timestamp (``timestamp``: the next one we sign with is at least it)."""

    key: bytes
    timestamp: int = 0
    streams: dict[tuple[int, int, int], int] = field(default_factory=dict)

    def check(self, frame: bytes) -> str | None:
        """None if the signed ``frame`` is accepted (its stream and our timestamp move on),
        else why not: ``bad_signature``, ``stale_timestamp`` (not newer than its stream's
        last, or a new stream more than a minute behind us) or ``too_many_streams``."""
        if not signature_matches(frame, self.key):
            return 'bad_signature'
        stamp = signature_timestamp(frame)
        stream = (*source(frame), signature_link_id(frame))
        last = self.streams.get(stream)
        if last is None:
            if len(self.streams) >= MAX_SIGNING_STREAMS:
                return 'too_many_streams'
            if stamp + NEW_STREAM_MAX_LAG_TICKS < self.timestamp:
                return 'stale_timestamp'
        elif stamp <= last:
            return 'stale_timestamp'
        self.streams[stream] = stamp
        self.timestamp = max(self.timestamp, stamp)
        return None

    def sign(self, frame: bytes, link_id: int, now: int) -> bytes:
        """The unsigned ``frame`` signed with the key at our next timestamp (one more than
        the last, at least ``now``). Its stream's timestamp is recorded as if we had
        accepted it, so the frame played back to us is a stale replay, not a new stream (the
        C library does not do this: a PX4 takes its own frames sent back to it)."""
        stamp = max(self.timestamp + 1, now)
        self.timestamp = stamp
        self.streams[(*source(frame), link_id)] = stamp
        return sign_frame(frame, self.key, link_id, stamp)


def generate_key() -> bytes:
    """A new random 32-byte signing key."""
    return secrets.token_bytes(KEY_BYTES)


def passphrase_key(passphrase: str) -> bytes:
    """The key MAVProxy's ``signing setup PASSPHRASE`` derives: SHA-256 of the passphrase."""
    return hashlib.sha256(passphrase.encode('ascii')).digest()


def write_private_file(path: Path, data: bytes, *, overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` whole, mode 0600, never readable by others: a temporary file
    next to it created 0600 (a stale one from a crash removed first), synced and renamed over
    ``path``, so a crash leaves the old file or the new one, never a partial one. Without
    ``overwrite`` an existing ``path`` is refused (FileExistsError) and the file is created
    in place (O_EXCL: nothing to keep if it fails)."""
    if not overwrite:
        _write_new(path, data)
        return
    temporary = path.with_name(path.name + '.tmp')
    temporary.unlink(missing_ok=True)
    try:
        _write_new(temporary, data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)                 # the rename itself on disk
    finally:
        os.close(directory)


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (O_EXCL) with mode 0600 and ``data``, synced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_FILE_MODE)
    try:
        os.fchmod(fd, KEY_FILE_MODE)        # the umask may have cleared bits
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_key_file(path: str | Path, key: bytes, *, overwrite: bool = False) -> Path:
    """Write ``key`` as 64 hex digits and a newline, mode 0600 (:func:`write_private_file`:
    never readable by others, even for an instant; an overwrite is all or nothing); an
    existing file is refused (FileExistsError) unless ``overwrite``."""
    if len(key) != KEY_BYTES:
        raise SigningError(f'a MAVLink signing key has {KEY_BYTES} bytes, got {len(key)}')
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private_file(path, (key.hex() + '\n').encode('ascii'), overwrite=overwrite)
    return path


def read_key_file(path: str | Path) -> bytes:
    """The 32-byte key of a key file (64 hex digits); SigningError naming the file when it is
    missing, unreadable, readable by others or not a key."""
    path = Path(path).expanduser()
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise SigningError(f'{path}: cannot read the MAVLink signing key ({exc.strerror})'
                           ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningError(f'{path}: a MAVLink signing key readable by others (mode '
                           f'{stat.S_IMODE(mode):o}); chmod 600 it')
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b''
    if len(key) != KEY_BYTES:
        raise SigningError(f'{path}: not a MAVLink signing key (expected {2 * KEY_BYTES} hex '
                           f'digits, as fl-uav mavlink-key new writes)')
    return key
