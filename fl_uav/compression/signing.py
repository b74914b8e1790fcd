"""Signed frames: an Ed25519 envelope (wire version 3) around one v1 or v2 frame (ROS-free).

Layout (byte table in ``docs/wire_format.md``, "Signed envelope (version 3)")::

    magic 'FLUV' | version 3 | scheme | signer | inner_len | inner frame | signature | CRC32
    4 B          | 1 B       | 1 B    | 2 B    | 4 B       | inner_len   | 64 B      | 4 B

The signature is Ed25519 (RFC 8032) by the signer's private key over every byte before it
(envelope header and the whole inner frame, its own CRC included); the CRC32 covers every byte
before it, signature included. The inner frame is unchanged, so v1 and v2 keep their rules
(v1 ``flags`` stays 0) and their decoders; a v1 or v2 decoder rejects the envelope itself as
``version``. :func:`open_frame` checks the envelope, verifies the signature and that the
inner frame's ``sender`` is the signer before the inner frame is decoded, and raises the
typed errors of :mod:`fl_uav.compression.errors` plus the three defined here.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
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
    'UnknownSigner',
    'UnsignedFrame',
    'load_private_key',
    'load_public_key',
    'open_frame',
    'private_key_pem',
    'public_key_pem',
    'sign_frame',
]

VERSION_SIGNED = 3
SCHEME_ED25519 = 1
SIGNATURE_SIZE = 64
# magic, version, scheme, signer, inner_len
_HEADER = struct.Struct('<4sBBHI')
ENVELOPE_HEADER_SIZE = _HEADER.size  # 12
ENVELOPE_OVERHEAD = ENVELOPE_HEADER_SIZE + SIGNATURE_SIZE + CRC_SIZE  # 80
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


ALL_REASONS_SIGNED: tuple[str, ...] = (UnsignedFrame.reason, UnknownSigner.reason,
                                       BadSignature.reason)
"""The reasons the envelope adds to the v1/v2 ones (for pre-registering counters)."""


def sign_frame(frame: bytes, signer: int, key: Ed25519PrivateKey) -> bytes:
    """Wrap one encoded v1/v2 frame in a signed envelope (``len(frame) + 80`` bytes)."""
    if not 0 <= signer <= 0xFFFF:
        raise ValueError(f'signer must be a u16, got {signer}')
    if len(frame) > 0xFFFF_FFFF:
        raise ValueError(f'inner frame of {len(frame)} bytes does not fit a u32 length')
    head = _HEADER.pack(MAGIC, VERSION_SIGNED, SCHEME_ED25519, signer, len(frame)) + frame
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
               public_keys: Mapping[int, Ed25519PublicKey], require: bool) -> memoryview:
    """The inner frame of a signed envelope, verified; a plain v1/v2 frame as it is unless
    ``require``. Nothing of the inner frame is decoded here: decode the result with
    ``decode_frame`` / ``decode_v2`` (a zero-copy view into ``data``).

    Checks, in order: buffer size (oversized), magic (bad_magic), version 3 (a plain v1/v2
    frame: returned, or ``unsigned`` when required; any other: version), minimum length
    (truncated), declared size (oversized / truncated / length), CRC32 (crc), scheme
    (header), a public key for the signer (signer), the signature (signature), the inner
    frame's sender equals the signer (signer).
    """
    view = _view(data, limits)
    check_magic(view)
    if len(view) > len(MAGIC) and view[len(MAGIC)] != VERSION_SIGNED:
        version = view[len(MAGIC)]
        if version not in _INNER_VERSIONS:
            raise UnsupportedVersion(f'version is {version}, this decoder reads versions '
                                     f'{VERSION}, {VERSION_V2} and {VERSION_SIGNED} (signed)',
                                     field='version')
        if require:
            raise UnsignedFrame(f'a plain version {version} frame, but this receiver requires '
                                f'signed frames (version {VERSION_SIGNED})', field='version')
        return view
    check_magic_and_version(view, VERSION_SIGNED, ENVELOPE_HEADER_SIZE + SIGNATURE_SIZE)
    _, _, scheme, signer, inner_len = _HEADER.unpack_from(view, 0)
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
        key.verify(bytes(view[signed_end: signed_end + SIGNATURE_SIZE]),
                   bytes(view[:signed_end]))
    except InvalidSignature:
        raise BadSignature(f'the signature of signer {signer:#06x} does not verify',
                           field='signature') from None
    inner = view[ENVELOPE_HEADER_SIZE: signed_end]
    if len(inner) >= _INNER_SENDER_OFFSET + _INNER_SENDER.size:
        sender = _INNER_SENDER.unpack_from(inner, _INNER_SENDER_OFFSET)[0]
        if sender != signer:
            raise UnknownSigner(f'inner frame sender {sender:#06x} is not the signer '
                                f'{signer:#06x}', field='sender')
    return inner


@dataclass(frozen=True)
class FrameAuth:
    """One node's signing identity: its id and private key (None: it sends plain frames),
    the public keys of the peers it accepts frames from, and whether it requires them signed.
    ``FrameAuth()`` is the unsigned fleet of before (plain frames out, plain frames in)."""

    own_id: int | None = None
    private_key: Ed25519PrivateKey | None = None
    public_keys: Mapping[int, Ed25519PublicKey] = field(default_factory=dict)
    require: bool = False

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
        """:func:`open_frame` with this node's peers' keys and requirement."""
        return open_frame(data, limits, self.public_keys, self.require)


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
