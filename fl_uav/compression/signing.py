"""Signed frames: an Ed25519 envelope (wire version 4) around one v1 or v2 frame (ROS-free).

Layout (byte table in ``docs/wire_format.md``, "Signed envelope (version 4)")::

    magic | version 4 | scheme | signer | issued_ms | inner_len | inner | signature | CRC32
    4 B   | 1 B       | 1 B    | 2 B    | 8 B       | 4 B       | L     | 64 B      | 4 B

The signature is Ed25519 (RFC 8032) by the signer's private key over every byte before it
(envelope header and the whole inner frame, its own CRC included); the CRC32 covers every byte
before it, signature included. The inner frame is unchanged, so v1 and v2 keep their rules
(v1 ``flags`` stays 0) and their decoders; a v1 or v2 decoder rejects the envelope itself as
``version``. :func:`open_frame` checks the envelope, verifies the signature and that the
inner frame's ``sender`` is the signer before the inner frame is decoded, and raises the
typed errors of :mod:`fl_uav.compression.errors` plus the four defined here.

``issued_ms`` is the sender's wall clock (UNIX milliseconds) when it signed. A receiver with a
:class:`Freshness` window rejects a genuine signed frame that is older than the window (a
recording replayed later) or from further in the future than the clock skew allows
(``stale``). Version 3, the first envelope (no issue time), is no longer read.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from fl_uav.compression.codec import (
    CRC_SIZE,
    MAGIC,
    VERSION,
    DecodeLimits,
    check_length_and_crc,
    check_magic,
    check_magic_and_version,
)
from fl_uav.compression.codec_v2 import VERSION_V2
from fl_uav.compression.errors import (
    FrameError,
    MalformedHeader,
    OversizedFrame,
    UnsupportedVersion,
)

__all__ = [
    'ALL_REASONS_SIGNED',
    'ENVELOPE_OVERHEAD',
    'SCHEME_ED25519',
    'SIGNATURE_SIZE',
    'VERSION_SIGNED',
    'BadSignature',
    'FrameAuth',
    'Freshness',
    'StaleFrame',
    'UnknownSigner',
    'UnsignedFrame',
    'load_private_key',
    'load_public_key',
    'now_ms',
    'open_frame',
    'private_key_pem',
    'public_key_pem',
    'sign_frame',
]

VERSION_SIGNED = 4
_VERSION_SIGNED_V3 = 3      # the first envelope (session 9): no issue time; not read
SCHEME_ED25519 = 1
SIGNATURE_SIZE = 64
# magic, version, scheme, signer, issued_ms, inner_len
_HEADER = struct.Struct('<4sBBHQI')
ENVELOPE_HEADER_SIZE = _HEADER.size  # 20
ENVELOPE_OVERHEAD = ENVELOPE_HEADER_SIZE + SIGNATURE_SIZE + CRC_SIZE  # 88
_CRC = struct.Struct('<I')
_INNER_VERSIONS = (VERSION, VERSION_V2)
# v1 and v2 headers both hold the u16 sender at offset 12 (after magic, version, kind,
# flags, round).
_INNER_SENDER = struct.Struct('<H')
_INNER_SENDER_OFFSET = 12


class UnsignedFrame(FrameError):
    """A plain v1/v2 frame where the receiver requires a signed envelope."""

    reason = 'unsigned'


class UnknownSigner(FrameError):
    """No public key for the envelope's signer, or the inner frame's sender is another."""

    reason = 'signer'


class BadSignature(FrameError):
    """The Ed25519 signature does not verify with the signer's public key."""

    reason = 'signature'


class StaleFrame(FrameError):
    """A genuinely signed frame issued too long ago (a replayed recording) or too far in the
    future (the sender's clock is ahead by more than the allowed skew)."""

    reason = 'stale'


ALL_REASONS_SIGNED: tuple[str, ...] = (UnsignedFrame.reason, UnknownSigner.reason,
                                       BadSignature.reason, StaleFrame.reason)
"""The reasons the envelope adds to the v1/v2 ones (for pre-registering counters)."""


@dataclass(frozen=True)
class Freshness:
    """How old a signed frame may be when it arrives: at most ``max_age_s`` since its
    ``issued_ms`` on the receiver's clock, and at most ``max_skew_s`` ahead of that clock.
    ``clock`` returns UNIX seconds (``time.time``; tests pass their own)."""

    max_age_s: float
    max_skew_s: float
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        for name in ('max_age_s', 'max_skew_s'):
            value = getattr(self, name)
            if not value > 0.0 or value == float('inf'):
                raise ValueError(f'{name} must be a positive number of seconds, got {value}')

    def check(self, issued_ms: int, signer: int) -> None:
        """Raise :class:`StaleFrame` unless ``issued_ms`` is within the window."""
        age_s = self.clock() - issued_ms / 1000.0
        if age_s > self.max_age_s:
            raise StaleFrame(f'frame of signer {signer:#06x} was issued {age_s:.1f} s ago, '
                             f'more than {self.max_age_s:g} s (a replayed recording, or '
                             f'clocks out of step)', field='issued_ms')
        if -age_s > self.max_skew_s:
            raise StaleFrame(f'frame of signer {signer:#06x} was issued {-age_s:.1f} s in '
                             f'the future, more than the {self.max_skew_s:g} s clock skew '
                             f'allowed (sync the clocks: GPS time or chrony)',
                             field='issued_ms')


def now_ms() -> int:
    """This machine's wall clock in UNIX milliseconds (what ``issued_ms`` carries)."""
    return time.time_ns() // 1_000_000


def sign_frame(frame: bytes, signer: int, key: Ed25519PrivateKey,
               issued_ms: int | None = None) -> bytes:
    """Wrap one encoded v1/v2 frame in a signed envelope (``len(frame) + 88`` bytes) issued
    at ``issued_ms`` (UNIX ms; None: now)."""
    if not 0 <= signer <= 0xFFFF:
        raise ValueError(f'signer must be a u16, got {signer}')
    if len(frame) > 0xFFFF_FFFF:
        raise ValueError(f'inner frame of {len(frame)} bytes does not fit a u32 length')
    issued = now_ms() if issued_ms is None else issued_ms
    if not 0 <= issued <= 0xFFFF_FFFF_FFFF_FFFF:
        raise ValueError(f'issued_ms must be a u64, got {issued}')
    head = _HEADER.pack(MAGIC, VERSION_SIGNED, SCHEME_ED25519, signer, issued,
                        len(frame)) + frame
    signed = head + key.sign(head)
    return signed + _CRC.pack(zlib.crc32(signed))


def _view(data: bytes | bytearray | memoryview, limits: DecodeLimits) -> memoryview:
    view = memoryview(data)
    if view.nbytes > limits.max_frame_bytes:
        raise OversizedFrame(f'frame is {view.nbytes} bytes, limit is '
                             f'{limits.max_frame_bytes}', field='frame')
    if isinstance(view.obj, bytes) and view.c_contiguous:
        return view.cast('B')
    return memoryview(view.tobytes())


def open_frame(data: bytes | bytearray | memoryview, limits: DecodeLimits,
               public_keys: Mapping[int, Ed25519PublicKey], require: bool,
               freshness: Freshness | None = None) -> memoryview:
    """The inner frame of a signed envelope, verified; a plain v1/v2 frame as it is unless
    ``require``. Nothing of the inner frame is decoded here: decode the result with
    ``decode_frame`` / ``decode_v2`` (a zero-copy view into ``data``).

    Checks, in order: buffer size (oversized), magic (bad_magic), version 4 (a plain v1/v2
    frame: returned, or ``unsigned`` when required; any other: version), minimum length
    (truncated), declared size (oversized / truncated / length), CRC32 (crc), scheme
    (header), a public key for the signer (signer), the signature (signature), the inner
    frame's sender equals the signer (signer), and with ``freshness`` the issue time (stale).
    """
    view = _view(data, limits)
    check_magic(view)
    if len(view) > len(MAGIC) and view[len(MAGIC)] != VERSION_SIGNED:
        version = view[len(MAGIC)]
        if version == _VERSION_SIGNED_V3:
            raise UnsupportedVersion(f'version {version} is the first signed envelope, '
                                     f'without an issue time, no longer read: the sender '
                                     f'runs an older fl_uav (this one signs version '
                                     f'{VERSION_SIGNED})', field='version')
        if version not in _INNER_VERSIONS:
            raise UnsupportedVersion(f'version is {version}, this decoder reads versions '
                                     f'{VERSION}, {VERSION_V2} and {VERSION_SIGNED} (signed)',
                                     field='version')
        if require:
            raise UnsignedFrame(f'a plain version {version} frame, but this receiver requires '
                                f'signed frames (version {VERSION_SIGNED})', field='version')
        return view
    check_magic_and_version(view, VERSION_SIGNED, ENVELOPE_HEADER_SIZE + SIGNATURE_SIZE)
    _, _, scheme, signer, issued_ms, inner_len = _HEADER.unpack_from(view, 0)
    signed_end = ENVELOPE_HEADER_SIZE + inner_len
    check_length_and_crc(view, signed_end + SIGNATURE_SIZE + CRC_SIZE, limits,
                         f' (inner_len={inner_len})')
    if scheme != SCHEME_ED25519:
        raise MalformedHeader(f'signature scheme {scheme} is unknown (1 = Ed25519)',
                              field='scheme')
    key = public_keys.get(signer)
    if key is None:
        raise UnknownSigner(f'no public key for signer {signer:#06x}', field='signer')
    try:
        key.verify(view[signed_end: signed_end + SIGNATURE_SIZE], view[:signed_end])  # no copy
    except InvalidSignature:
        raise BadSignature(f'the signature of signer {signer:#06x} does not verify',
                           field='signature') from None
    inner = view[ENVELOPE_HEADER_SIZE: signed_end]
    if len(inner) >= _INNER_SENDER_OFFSET + _INNER_SENDER.size:
        sender = _INNER_SENDER.unpack_from(inner, _INNER_SENDER_OFFSET)[0]
        if sender != signer:
            raise UnknownSigner(f'inner frame sender {sender:#06x} is not the signer '
                                f'{signer:#06x}', field='sender')
    if freshness is not None:
        freshness.check(issued_ms, signer)
    return inner


@dataclass(frozen=True)
class FrameAuth:
    """One node's signing identity: its id and private key (None: it sends plain frames),
    the public keys of the peers it accepts frames from, whether it requires them signed,
    and how fresh a signed frame must be (None: any age).
    ``FrameAuth()`` is the unsigned fleet of before (plain frames out, plain frames in)."""

    own_id: int | None = None
    private_key: Ed25519PrivateKey | None = None
    public_keys: Mapping[int, Ed25519PublicKey] = field(default_factory=dict)
    require: bool = False
    freshness: Freshness | None = None
    # Senders whose signed frames this node has verified: from then on a plain frame in their
    # name is refused even when signatures are not required (rollout: a recorded envelope's
    # inner frame sent plain would skip the age check). Grows only; a restart forgets it.
    # init=False: dataclasses.replace gives the copy (another link's identity) its own set.
    signed_senders: set[int] = field(default_factory=set, init=False, compare=False,
                                     repr=False)

    def __post_init__(self) -> None:
        if self.private_key is not None and self.own_id is None:
            raise ValueError('a private key needs the id it signs as')

    def seal(self, frame: bytes) -> bytes:
        """The frame as this node sends it: signed if it has a key, else unchanged."""
        if self.private_key is None:
            return frame
        return sign_frame(frame, self.own_id, self.private_key)

    def open(self, data: bytes | bytearray | memoryview,
             limits: DecodeLimits) -> memoryview:
        """:func:`open_frame` with this node's peers' keys and requirement; a plain frame from
        a sender that has signed before is refused (``unsigned``), required or not."""
        signed = len(data) > len(MAGIC) and data[len(MAGIC)] == VERSION_SIGNED
        inner = open_frame(data, limits, self.public_keys, self.require, self.freshness)
        if len(inner) < _INNER_SENDER_OFFSET + _INNER_SENDER.size:
            return inner          # too short to name a sender: the inner decoder rejects it
        sender = _INNER_SENDER.unpack_from(inner, _INNER_SENDER_OFFSET)[0]
        if signed:
            self.signed_senders.add(sender)
        elif sender in self.signed_senders:
            raise UnsignedFrame(f'a plain frame in the name of sender {sender:#06x}, which '
                                f'has signed its frames before (a replayed inner frame?)',
                                field='version')
        return inner


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted (what ``openssl genpkey -algorithm ed25519`` writes)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_key_pem(key: Ed25519PublicKey) -> bytes:
    """SubjectPublicKeyInfo PEM (what ``openssl pkey -pubout`` writes)."""
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def load_private_key(pem: bytes, what: str) -> Ed25519PrivateKey:
    """An Ed25519 private key from PEM; ValueError naming ``what`` otherwise."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f'{what}: not an unencrypted PEM private key ({exc})') from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f'{what}: not an Ed25519 key ({type(key).__name__})')
    return key


def load_public_key(pem: bytes, what: str) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM; ValueError naming ``what`` otherwise."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise ValueError(f'{what}: not a PEM public key ({exc})') from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f'{what}: not an Ed25519 key ({type(key).__name__})')
    return key
