"""Wire codec v2: bit-exact compressed update frames (numpy, ROS-free).

Layout (byte tables in ``docs/wire_format.md``, "Version 2")::

    fixed header (26 B) | kind sub-header | [bucket table] | bit-packed body | CRC32 (4 B)

The fixed header keeps v1's conventions (magic ``FLUV``, version byte at offset 4, kind, reserved
flags, round, sender, 8-byte model fingerprint, little-endian, CRC32 last) and declares the
length of everything between header and CRC, so truncation is detected before anything else.
Bodies are LSB-first bit streams (:mod:`fl_uav.compression.bitpack`) whose length is exactly
the bit formula of the scheme, rounded up to whole bytes:

* QSGD (2CEOAFL Definition 1 / eq. (12), formula under eq. (12), digest 000 §2.5):
  32·B norm bits + [mask] + k·(1 + ⌈log2(s+1)⌉) bits (:func:`qsgd_frame_bytes`).
* FedDPQ range quantizer (FedDPQ eqs. (11)-(13)): 64·B endpoint bits + [mask] + k·(1 + δ)
  (:func:`range_frame_bytes`).
* raw masked update (2CEOAFL eq. (11), raw branch): [mask] + 32·k (:func:`raw_frame_bytes`).
* LGC layer (LGC eqs. (1)-(2), digest 002 §2.4): one frame per layer, 64·k_c bits
  (:func:`lgc_frame_bytes`); every layer is a self-contained frame with its own header and
  CRC, so a receiver uses the layers that arrived intact (:func:`decode_lgc_parts`).

[mask] is 1 flag bit + min(p, RLE bits) (:func:`fl_uav.compression.bitpack.mask_bits`).

Any v2 frame may carry a metadata section (flag bit ``FLAG_METADATA``): a u32 length and
the same strict compact JSON object v1 frames carry, at the start of the body, so a drone's
counts (samples, steps, loss) travel in the very frame whose CRC covers the update; it adds
exactly :func:`metadata_section_bytes` to the formula sizes.

Decoding (:func:`decode_v2`) validates every declared count against :class:`DecodeLimits` and
against the bytes present before allocating, and raises the v1 typed errors
(:mod:`fl_uav.compression.errors`) plus the v2 ones defined here (reasons ``body``, ``mask``,
``levels``, ``index``).
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_uav.compression import bitpack
from fl_uav.compression.codec import (
    CRC_SIZE,
    FINGERPRINT_SIZE,
    MAGIC,
    DecodeLimits,
    _immutable_view,
    check_length_and_crc,
    check_magic_and_version,
    encode_metadata,
    parse_metadata,
)
from fl_uav.compression.errors import (
    ALL_REASONS,
    FingerprintMismatch,
    FrameError,
    MalformedHeader,
    MalformedMetadata,
    NonFiniteValues,
    OversizedFrame,
    ShapeMismatch,
    TruncatedFrame,
    UnknownKind,
)
from fl_uav.compression.lgc import Layer
from fl_uav.compression.quantization import (
    QsgdPayload,
    RangePayload,
    qsgd_dequantize,
    qsgd_level_bits,
    range_dequantize,
)

__all__ = [
    'ALL_REASONS_V2',
    'FLAG_METADATA',
    'HEADER_V2_SIZE',
    'SUBHEADER_SIZE',
    'VERSION_V2',
    'DecodedFrameV2',
    'FrameKindV2',
    'IndexOutOfRange',
    'LevelOutOfRange',
    'LgcPart',
    'MalformedBody',
    'MalformedMask',
    'QsgdUpdate',
    'RangeUpdate',
    'RawUpdate',
    'decode_lgc_parts',
    'decode_v2',
    'encode_lgc',
    'encode_qsgd',
    'encode_range',
    'encode_raw',
    'lgc_frame_bytes',
    'metadata_section_bytes',
    'qsgd_frame_bytes',
    'range_frame_bytes',
    'raw_frame_bytes',
    'split_frames',
]

VERSION_V2 = 2

# magic, version, kind, flags, round, sender, fingerprint, body_len
_HEADER = struct.Struct('<4sBBHIH8sI')
HEADER_V2_SIZE = _HEADER.size  # 26
_CRC = struct.Struct('<I')
_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFF_FFFF
_MAX_DIM = 2**31 - 1
_META_LEN = struct.Struct('<I')

FLAG_METADATA = 0x0001
"""Header flag: the body starts with a metadata section (u32 length + JSON object)."""


class FrameKindV2(enum.IntEnum):
    """What a v2 frame carries (codes distinct from the v1 kinds)."""

    QSGD = 0x11
    RANGE = 0x12
    RAW = 0x13
    LGC_LAYER = 0x14


# dim, kept, s, num_buckets, has_mask
_SUB_QSGD = struct.Struct('<IIIIB')
# dim, kept, bits, num_buckets, has_mask
_SUB_RANGE = struct.Struct('<IIBIB')
# dim, kept, has_mask
_SUB_RAW = struct.Struct('<IIB')
# layer_id, num_layers, rank_lo, k, dim
_SUB_LGC = struct.Struct('<BBIII')

SUBHEADER_SIZE: dict[FrameKindV2, int] = {
    FrameKindV2.QSGD: _SUB_QSGD.size,  # 17
    FrameKindV2.RANGE: _SUB_RANGE.size,  # 14
    FrameKindV2.RAW: _SUB_RAW.size,  # 9
    FrameKindV2.LGC_LAYER: _SUB_LGC.size,  # 14
}
"""Bytes of each kind's fixed sub-header (after the 26-byte fixed header)."""


# --------------------------------------------------------------------------------- errors


class MalformedBody(FrameError):
    """A v2 sub-header or body is inconsistent (counts, bucket sizes, padding, body length)."""

    reason = 'body'


class MalformedMask(FrameError):
    """The pruning mask is malformed or its popcount differs from the kept-entry count."""

    reason = 'mask'


class LevelOutOfRange(FrameError):
    """A QSGD level exceeds s (a ⌈log2(s+1)⌉-bit field can hold up to 2^w − 1)."""

    reason = 'levels'


class IndexOutOfRange(FrameError):
    """An LGC index is outside [0, dim), repeated, or the rank band exceeds dim."""

    reason = 'index'


ALL_REASONS_V2: tuple[str, ...] = ALL_REASONS + tuple(
    cls.reason for cls in (MalformedBody, MalformedMask, LevelOutOfRange, IndexOutOfRange)
)
"""Every ``reason`` :func:`decode_v2` can report (v1 reasons plus the v2 ones)."""


# --------------------------------------------------------------------------------- results


@dataclass(frozen=True, eq=False)
class QsgdUpdate:
    """A decoded QSGD update: ``payload`` over the kept entries, ``mask`` (None = all kept)."""

    dim: int
    payload: QsgdPayload
    mask: np.ndarray | None

    def dense(self) -> np.ndarray:
        """The float32 update of length ``dim`` (qsgd_dequantize, zero where masked)."""
        return _scatter(self.dim, self.mask, qsgd_dequantize(self.payload))


@dataclass(frozen=True, eq=False)
class RangeUpdate:
    """A decoded FedDPQ range-quantized update."""

    dim: int
    payload: RangePayload
    mask: np.ndarray | None

    def dense(self) -> np.ndarray:
        """The float32 update of length ``dim`` (range_dequantize, zero where masked)."""
        return _scatter(self.dim, self.mask, range_dequantize(self.payload))


@dataclass(frozen=True, eq=False)
class RawUpdate:
    """A decoded raw update: float32 ``values`` of the kept entries."""

    dim: int
    values: np.ndarray
    mask: np.ndarray | None

    def dense(self) -> np.ndarray:
        """The float32 update of length ``dim`` (zero where masked)."""
        return _scatter(self.dim, self.mask, self.values)


@dataclass(frozen=True, eq=False)
class LgcPart:
    """One decoded LGC layer frame."""

    dim: int
    num_layers: int
    layer: Layer


@dataclass(frozen=True, eq=False)
class DecodedFrameV2:
    """A validated v2 frame."""

    kind: FrameKindV2
    round_index: int
    sender: int
    fingerprint: bytes
    update: QsgdUpdate | RangeUpdate | RawUpdate | LgcPart
    metadata: dict[str, Any] = field(default_factory=dict)


def _scatter(dim: int, mask: np.ndarray | None, kept: np.ndarray) -> np.ndarray:
    if mask is None:
        return np.array(kept, np.float32)
    dense = np.zeros(dim, np.float32)
    dense[mask] = kept
    return dense


# --------------------------------------------------------------------------------- sizes


def _body_bytes(bits: int) -> int:
    return (bits + 7) // 8


def _mask_section_bits(mask: np.ndarray | None) -> int:
    return 0 if mask is None else bitpack.mask_bits(mask)


def qsgd_frame_bytes(kept: int, s: int, *, num_buckets: int = 1,
                     mask: np.ndarray | None = None) -> int:
    """Bytes of a QSGD frame: 26 + 17 + 4·B + ⌈(32·B + [mask] + k(1 + ⌈log2(s+1)⌉))/8⌉ + 4.

    The bit term is :func:`~fl_uav.compression.quantization.qsgd_payload_bits` plus the mask
    field (2CEOAFL formula under eq. (12) with the exact level width, digest 000 §2.4-2.5).
    """
    bits = 32 * num_buckets + _mask_section_bits(mask) + kept * (1 + qsgd_level_bits(s))
    return HEADER_V2_SIZE + _SUB_QSGD.size + 4 * num_buckets + _body_bytes(bits) + CRC_SIZE


def range_frame_bytes(kept: int, bits: int, *, num_buckets: int = 1,
                      mask: np.ndarray | None = None) -> int:
    """Bytes of a range frame: 26 + 14 + 4·B + ⌈(64·B + [mask] + k(1 + δ))/8⌉ + 4.

    The bit term is FedDPQ eq. (13) with o = signs + endpoints
    (:func:`~fl_uav.compression.quantization.range_payload_bits`) plus the mask field.
    """
    body = 64 * num_buckets + _mask_section_bits(mask) + kept * (1 + bits)
    return HEADER_V2_SIZE + _SUB_RANGE.size + 4 * num_buckets + _body_bytes(body) + CRC_SIZE


def raw_frame_bytes(kept: int, *, mask: np.ndarray | None = None) -> int:
    """Bytes of a raw frame: 26 + 9 + ⌈([mask] + 32·k)/8⌉ + 4.

    2CEOAFL's raw branch counts 33 bits per kept entry; the separate sign bit is redundant with
    the float32 sign and is not sent.
    """
    body = _mask_section_bits(mask) + 32 * kept
    return HEADER_V2_SIZE + _SUB_RAW.size + _body_bytes(body) + CRC_SIZE


def lgc_frame_bytes(k: int) -> int:
    """Bytes of one LGC layer frame: 26 + 14 + 8·k + 4 (digest 002 §2.4: 8·k_c + header)."""
    return HEADER_V2_SIZE + _SUB_LGC.size + 8 * k + CRC_SIZE


def metadata_section_bytes(metadata: Mapping[str, Any] | None) -> int:
    """Bytes a metadata object adds to any v2 frame: 0 if empty, else 4 + its compact JSON."""
    blob = encode_metadata(metadata)
    return _META_LEN.size + len(blob) if blob else 0


# --------------------------------------------------------------------------------- encoding


def _check_uint(value: Any, maximum: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f'{what} must be an int, got {type(value).__name__}')
    if not 0 <= int(value) <= maximum:
        raise ValueError(f'{what} must be in [0, {maximum}], got {value}')
    return int(value)


def _frame(kind: FrameKindV2, round_index: int, sender: int, fingerprint: bytes,
           sub: bytes, tail: bytes, metadata: Mapping[str, Any] | None = None) -> bytes:
    round_index = _check_uint(round_index, _U32_MAX, 'round_index')
    sender = _check_uint(sender, _U16_MAX, 'sender')
    if not isinstance(fingerprint, bytes | bytearray) or len(fingerprint) != FINGERPRINT_SIZE:
        raise ValueError(f'fingerprint must be {FINGERPRINT_SIZE} bytes')
    meta = encode_metadata(metadata)
    section = _META_LEN.pack(len(meta)) + meta if meta else b''
    body_len = len(section) + len(sub) + len(tail)
    if body_len > _U32_MAX:
        raise ValueError('body does not fit the u32 body_len field')
    head = _HEADER.pack(MAGIC, VERSION_V2, int(kind), FLAG_METADATA if meta else 0,
                        round_index, sender, bytes(fingerprint), body_len)
    blob = head + section + sub + tail
    return blob + _CRC.pack(zlib.crc32(blob))


def _prepare_mask(mask: np.ndarray | None, kept: int) -> tuple[int, np.ndarray | None]:
    if mask is None:
        return kept, None
    arr = np.asarray(mask)
    if arr.dtype != np.bool_ or arr.ndim != 1:
        raise ValueError('mask must be a 1-D bool array')
    if int(arr.sum()) != kept:
        raise ValueError(f'mask keeps {int(arr.sum())} entries, payload has {kept}')
    return arr.size, arr


def _check_dim(dim: int) -> None:
    if dim > _MAX_DIM:
        raise ValueError(f'dimension {dim} exceeds {_MAX_DIM}')


def _bucket_table(sizes: Sequence[int], kept: int) -> bytes:
    if not sizes or sum(sizes) != kept:
        raise ValueError('bucket sizes must be non-empty and sum to the kept count')
    return np.asarray(sizes, '<u4').tobytes()


def encode_qsgd(payload: QsgdPayload, *, round_index: int, sender: int, fingerprint: bytes,
                mask: np.ndarray | None = None,
                metadata: Mapping[str, Any] | None = None) -> bytes:
    """Serialise a QSGD payload (2CEOAFL eq. (12)) over the kept entries of ``mask``.

    Body bit stream: B float32 norms, [mask], k sign bits (1 = negative), k levels of
    ⌈log2(s+1)⌉ bits.  Size: :func:`qsgd_frame_bytes` + :func:`metadata_section_bytes`.
    """
    kept = payload.dim
    dim, mask = _prepare_mask(mask, kept)
    _check_dim(dim)
    s = _check_uint(payload.s, _U32_MAX, 's')
    if s < 1:
        raise ValueError('s must be >= 1')
    norms = np.asarray(payload.norms, np.float32)
    if norms.shape != (len(payload.bucket_sizes),):
        raise ValueError('one norm per bucket is required')
    levels = np.asarray(payload.levels)
    if levels.size and (levels.min() < 0 or int(levels.max()) > s):
        raise ValueError(f'QSGD levels must lie in [0, {s}]')
    width = qsgd_level_bits(s)
    writer = bitpack.BitWriter()
    writer.write_f32(norms)
    if mask is not None:
        writer.write_mask(mask)
    writer.write_bool(payload.negative)
    writer.write_uint(levels, width)
    sub = _SUB_QSGD.pack(dim, kept, s, len(norms), mask is not None)
    tail = _bucket_table(payload.bucket_sizes, kept) + writer.getvalue()
    return _frame(FrameKindV2.QSGD, round_index, sender, fingerprint, sub, tail, metadata)


def encode_range(payload: RangePayload, *, round_index: int, sender: int, fingerprint: bytes,
                 mask: np.ndarray | None = None,
                 metadata: Mapping[str, Any] | None = None) -> bytes:
    """Serialise a FedDPQ range payload (FedDPQ eqs. (11)-(13)).

    Body bit stream: B × (low, high) float32, [mask], k sign bits, k indices of δ bits.
    Size: :func:`range_frame_bytes` + :func:`metadata_section_bytes`.
    """
    kept = payload.dim
    dim, mask = _prepare_mask(mask, kept)
    _check_dim(dim)
    bits = _check_uint(payload.bits, bitpack.MAX_WIDTH, 'bits')
    if bits < 1:
        raise ValueError('bits must be >= 1')
    nb = len(payload.bucket_sizes)
    low = np.asarray(payload.low, np.float32)
    high = np.asarray(payload.high, np.float32)
    if low.shape != (nb,) or high.shape != (nb,):
        raise ValueError('one (low, high) pair per bucket is required')
    writer = bitpack.BitWriter()
    writer.write_f32(np.stack([low, high], axis=1).reshape(-1))
    if mask is not None:
        writer.write_mask(mask)
    writer.write_bool(payload.negative)
    writer.write_uint(np.asarray(payload.index), bits)
    sub = _SUB_RANGE.pack(dim, kept, bits, nb, mask is not None)
    tail = _bucket_table(payload.bucket_sizes, kept) + writer.getvalue()
    return _frame(FrameKindV2.RANGE, round_index, sender, fingerprint, sub, tail, metadata)


def encode_raw(values: np.ndarray, *, round_index: int, sender: int, fingerprint: bytes,
               mask: np.ndarray | None = None,
               metadata: Mapping[str, Any] | None = None) -> bytes:
    """Serialise raw float32 kept entries (2CEOAFL eq. (11), raw branch).

    Body bit stream: k float32 values, then [mask].  Size: :func:`raw_frame_bytes` +
    :func:`metadata_section_bytes`.
    """
    vals = np.asarray(values, np.float32).reshape(-1)
    dim, mask = _prepare_mask(mask, vals.size)
    _check_dim(dim)
    writer = bitpack.BitWriter()
    writer.write_f32(vals)
    if mask is not None:
        writer.write_mask(mask)
    sub = _SUB_RAW.pack(dim, vals.size, mask is not None)
    return _frame(FrameKindV2.RAW, round_index, sender, fingerprint, sub, writer.getvalue(),
                  metadata)


def encode_lgc(layers: Iterable[Layer], dim: int, *, round_index: int, sender: int,
               fingerprint: bytes, metadata: Mapping[str, Any] | None = None) -> list[bytes]:
    """One self-contained frame per LGC layer (LGC eq. (1) bands; digest 002 §2.4).

    Each frame carries layer id c, the layer count C, rank_lo = K_{c−1}, k_c and D, then
    k_c int32 indices (rank order) and k_c float32 values.  Size: :func:`lgc_frame_bytes`
    (+ :func:`metadata_section_bytes` per frame: every layer carries ``metadata``, so whichever
    layers arrive bring the sender's counts).
    """
    layers = list(layers)
    dim = _check_uint(dim, _MAX_DIM, 'dim')
    if not 1 <= len(layers) <= 255:
        raise ValueError('an LGC update has 1..255 layers')
    frames = []
    for layer in layers:
        layer_id = _check_uint(layer.layer_id, len(layers) - 1, 'layer_id')
        indices = np.asarray(layer.indices)
        values = np.asarray(layer.values, np.float32)
        if indices.ndim != 1 or indices.shape != values.shape:
            raise ValueError('layer indices and values must be 1-D of equal length')
        if indices.size and (indices.min() < 0 or indices.max() >= dim):
            raise ValueError(f'layer {layer_id}: index outside [0, {dim})')
        rank_lo = _check_uint(layer.rank_lo, _U32_MAX, 'rank_lo')
        sub = _SUB_LGC.pack(layer_id, len(layers), rank_lo, indices.size, dim)
        tail = indices.astype('<i4').tobytes() + values.astype('<f4').tobytes()
        frames.append(_frame(FrameKindV2.LGC_LAYER, round_index, sender, fingerprint, sub,
                             tail, metadata))
    return frames


def split_frames(data: bytes | bytearray | memoryview) -> list[bytes]:
    """Split back-to-back v2 frames (e.g. an LGC update's layers) by their declared lengths.

    Only the framing is read (magic, version, ``body_len``); decode each part with
    :func:`decode_v2`.  Raises the typed errors of steps 2–6 when the buffer does not split
    exactly into whole frames.
    """
    buf = bytes(data)
    parts, pos = [], 0
    while pos < len(buf):
        check_magic_and_version(buf[pos:], VERSION_V2, HEADER_V2_SIZE)
        end = pos + HEADER_V2_SIZE + _HEADER.unpack_from(buf, pos)[7] + CRC_SIZE
        if end > len(buf):
            raise TruncatedFrame(f'part at byte {pos} declares {end - pos} bytes, '
                                 f'{len(buf) - pos} remain', field='body_len')
        parts.append(buf[pos:end])
        pos = end
    return parts


# --------------------------------------------------------------------------------- decoding


_DEFAULT_LIMITS = DecodeLimits()


def _check_prologue(buf: memoryview, limits: DecodeLimits) -> tuple:
    check_magic_and_version(buf, VERSION_V2, HEADER_V2_SIZE)
    fields = _HEADER.unpack_from(buf, 0)
    check_length_and_crc(buf, HEADER_V2_SIZE + fields[7] + CRC_SIZE, limits)
    return fields


def _check_expected_dim(dim: int, expected_dim: int | None) -> None:
    if expected_dim is not None and dim != expected_dim:
        raise ShapeMismatch(f'dim is {dim}, the receiver expects {expected_dim}', field='dim')


def _check_dims(dim: int, kept: int, has_mask: int, limits: DecodeLimits,
                expected_dim: int | None) -> None:
    if dim > limits.max_elements:
        raise OversizedFrame(f'dim {dim} exceeds limit {limits.max_elements}', field='dim')
    _check_expected_dim(dim, expected_dim)
    if has_mask not in (0, 1):
        raise MalformedBody(f'has_mask is {has_mask}, must be 0 or 1', field='has_mask')
    if kept > dim:
        raise MalformedBody(f'kept {kept} exceeds dim {dim}', field='kept')
    if not has_mask and kept != dim:
        raise MalformedBody(f'no mask but kept {kept} != dim {dim}', field='kept')


def _read_buckets(body: memoryview, pos: int, num_buckets: int, kept: int,
                  limits: DecodeLimits) -> tuple[tuple[int, ...], int]:
    if num_buckets == 0:
        raise MalformedBody('num_buckets is 0', field='num_buckets')
    if num_buckets > limits.max_tensors:
        raise OversizedFrame(
            f'num_buckets {num_buckets} exceeds limit {limits.max_tensors}', field='num_buckets'
        )
    end = pos + 4 * num_buckets
    if end > len(body):
        raise MalformedBody('body ends inside the bucket table', field='buckets')
    sizes = tuple(int(x) for x in np.frombuffer(body, '<u4', num_buckets, pos))
    if sum(sizes) != kept:
        raise MalformedBody(f'bucket sizes sum to {sum(sizes)}, kept is {kept}', field='buckets')
    return sizes, end


def _stream_length(body: memoryview, pos: int, fixed_bits: int, has_mask: int, dim: int) -> None:
    """Check the body holds the fixed-size part of the bit stream (mask checked when read)."""
    available = (len(body) - pos) * 8
    minimum = fixed_bits + (1 if has_mask else 0)
    if minimum > available:
        raise MalformedBody(f'body holds {available} bits, needs at least {minimum}',
                            field='body_len')
    if not has_mask and _body_bytes(fixed_bits) != len(body) - pos:
        raise MalformedBody(
            f'body holds {len(body) - pos} stream bytes, expected {_body_bytes(fixed_bits)}',
            field='body_len',
        )


def _read_mask(reader: bitpack.BitReader, has_mask: int, dim: int, kept: int,
               tail_bits: int) -> np.ndarray | None:
    if not has_mask:
        return None
    try:
        mask = reader.read_mask(dim)
    except bitpack.BitstreamError as exc:
        raise MalformedMask(f'mask: {exc}', field='mask') from None
    count = int(np.count_nonzero(mask))
    if count != kept:
        raise MalformedMask(f'mask keeps {count} entries, header says {kept}', field='mask')
    if reader.remaining < tail_bits or reader.remaining - tail_bits >= 8:
        raise MalformedBody(
            f'{reader.remaining} bits after the mask, expected {tail_bits} plus padding',
            field='body_len',
        )
    return mask


def _finish(reader: bitpack.BitReader) -> None:
    if reader.remaining >= 8 or np.any(reader.read_bool(reader.remaining)):
        raise MalformedBody('non-zero padding bits or trailing bytes', field='padding')


def _finite(values: np.ndarray, what: str) -> None:
    if values.size and not np.isfinite(values).all():
        raise NonFiniteValues(f'{what} contains NaN or Inf', field=what)


def _decode_qsgd(body: memoryview, limits: DecodeLimits, expected_dim: int | None) -> QsgdUpdate:
    dim, kept, s, nb, has_mask = _SUB_QSGD.unpack_from(body, 0)
    _check_dims(dim, kept, has_mask, limits, expected_dim)
    if s < 1:
        raise MalformedBody('s is 0', field='s')
    sizes, pos = _read_buckets(body, _SUB_QSGD.size, nb, kept, limits)
    width = qsgd_level_bits(s)
    tail = kept * (1 + width)
    _stream_length(body, pos, 32 * nb + tail, has_mask, dim)
    reader = bitpack.BitReader(body, 8 * pos)
    norms = reader.read_f32(nb).copy()
    _finite(norms, 'norms')
    if np.any(norms < 0):
        raise MalformedBody('negative norm', field='norms')
    mask = _read_mask(reader, has_mask, dim, kept, tail)
    negative = reader.read_bool(kept)
    levels = reader.read_uint(kept, width)
    _finish(reader)
    if kept and int(levels.max()) > s:
        raise LevelOutOfRange(f'level {int(levels.max())} exceeds s = {s}', field='levels')
    payload = QsgdPayload(s=s, bucket_sizes=sizes, norms=norms, negative=negative,
                          levels=levels.astype(np.min_scalar_type(s)))
    update = QsgdUpdate(dim=dim, payload=payload, mask=mask)
    if kept:
        _finite(qsgd_dequantize(payload), 'values')
    return update


def _decode_range(body: memoryview, limits: DecodeLimits, expected_dim: int | None) -> RangeUpdate:
    dim, kept, bits, nb, has_mask = _SUB_RANGE.unpack_from(body, 0)
    _check_dims(dim, kept, has_mask, limits, expected_dim)
    if not 1 <= bits <= bitpack.MAX_WIDTH:
        raise MalformedBody(f'bits is {bits}, must be in [1, 32]', field='bits')
    sizes, pos = _read_buckets(body, _SUB_RANGE.size, nb, kept, limits)
    tail = kept * (1 + bits)
    _stream_length(body, pos, 64 * nb + tail, has_mask, dim)
    reader = bitpack.BitReader(body, 8 * pos)
    ends = reader.read_f32(2 * nb).reshape(nb, 2)
    _finite(ends, 'range')
    low, high = ends[:, 0].copy(), ends[:, 1].copy()
    if np.any(low < 0) or np.any(high < low):
        raise MalformedBody('range endpoints must satisfy 0 <= low <= high', field='range')
    mask = _read_mask(reader, has_mask, dim, kept, tail)
    negative = reader.read_bool(kept)
    index = reader.read_uint(kept, bits)
    _finish(reader)
    payload = RangePayload(bits=bits, bucket_sizes=sizes, low=low, high=high,
                           negative=negative, index=index.astype(np.min_scalar_type(2**bits - 1)))
    if kept:
        _finite(range_dequantize(payload), 'values')
    return RangeUpdate(dim=dim, payload=payload, mask=mask)


def _decode_raw(body: memoryview, limits: DecodeLimits, expected_dim: int | None) -> RawUpdate:
    dim, kept, has_mask = _SUB_RAW.unpack_from(body, 0)
    _check_dims(dim, kept, has_mask, limits, expected_dim)
    pos = _SUB_RAW.size
    _stream_length(body, pos, 32 * kept, has_mask, dim)
    reader = bitpack.BitReader(body, 8 * pos)
    values = reader.read_f32(kept).copy()
    _finite(values, 'values')
    mask = _read_mask(reader, has_mask, dim, kept, 0)
    _finish(reader)
    return RawUpdate(dim=dim, values=values, mask=mask)


def _decode_lgc(body: memoryview, limits: DecodeLimits, expected_dim: int | None) -> LgcPart:
    layer_id, num_layers, rank_lo, k, dim = _SUB_LGC.unpack_from(body, 0)
    if dim > limits.max_elements:
        raise OversizedFrame(f'dim {dim} exceeds limit {limits.max_elements}', field='dim')
    _check_expected_dim(dim, expected_dim)
    if dim > _MAX_DIM:
        raise MalformedBody(f'dim {dim} exceeds int32 indexing', field='dim')
    if not layer_id < num_layers:
        raise MalformedBody(f'layer_id {layer_id} not below num_layers {num_layers}',
                            field='layer_id')
    if k > dim or rank_lo + k > dim:
        raise IndexOutOfRange(f'rank band [{rank_lo}, {rank_lo + k}) exceeds dim {dim}',
                              field='k')
    pos = _SUB_LGC.size
    if len(body) - pos != 8 * k:
        raise MalformedBody(f'body holds {len(body) - pos} bytes, k = {k} needs {8 * k}',
                            field='body_len')
    indices = np.frombuffer(body, '<i4', k, pos)
    values = np.frombuffer(body, '<f4', k, pos + 4 * k)
    if k and (indices.min() < 0 or indices.max() >= dim):
        raise IndexOutOfRange(f'index outside [0, {dim})', field='indices')
    if np.unique(indices).size != k:
        raise IndexOutOfRange('repeated index', field='indices')
    _finite(values, 'values')
    layer = Layer(layer_id=layer_id, rank_lo=rank_lo, indices=indices.astype(np.int32),
                  values=values.astype(np.float32))
    return LgcPart(dim=dim, num_layers=num_layers, layer=layer)


_DECODERS = {
    FrameKindV2.QSGD: _decode_qsgd,
    FrameKindV2.RANGE: _decode_range,
    FrameKindV2.RAW: _decode_raw,
    FrameKindV2.LGC_LAYER: _decode_lgc,
}


def decode_v2(data: bytes | bytearray | memoryview, limits: DecodeLimits = _DEFAULT_LIMITS,
              expected_fingerprint: bytes | None = None,
              expected_dim: int | None = None) -> DecodedFrameV2:
    """Validate and decode one v2 frame.

    Order: buffer size (oversized), magic (bad_magic), version (version), minimum length
    (truncated), declared length vs limit / buffer (oversized / truncated / length), CRC32
    (crc), kind (kind), flags (header), sub-header length (body), fingerprint (fingerprint),
    then the kind's fields: dim vs ``max_elements`` (oversized), dim vs ``expected_dim`` if
    given (shape: a receiver that knows its model's parameter count refuses another before
    any of the stream is read), buckets vs ``max_tensors`` (oversized), counts and lengths
    (body), mask (mask), norms/endpoints/values finite (nonfinite), levels ≤ s (levels), LGC
    indices (index).  Counts are checked against the bytes present before any array of that
    size is made.
    """
    if expected_fingerprint is not None and len(expected_fingerprint) != FINGERPRINT_SIZE:
        raise ValueError(f'expected_fingerprint must be {FINGERPRINT_SIZE} bytes')
    # Zero-copy over bytes (the frame, or an envelope's inner frame): the CRC, the body and
    # the metadata are views; only what a decoder reads becomes arrays.
    buf = _immutable_view(data, limits)
    _, _, kind_code, flags, round_index, sender, fingerprint, body_len = _check_prologue(
        buf, limits
    )
    try:
        kind = FrameKindV2(kind_code)
    except ValueError:
        raise UnknownKind(f'kind code {kind_code} is unknown in v2', field='kind') from None
    if flags & ~FLAG_METADATA:
        raise MalformedHeader(f'reserved flags are {flags:#06x}, only {FLAG_METADATA:#06x} '
                              'is assigned', field='flags')
    body = buf[HEADER_V2_SIZE: HEADER_V2_SIZE + body_len]
    metadata: dict[str, Any] = {}
    if flags & FLAG_METADATA:
        metadata, body = _read_metadata(body, limits)
    if len(body) < SUBHEADER_SIZE[kind]:
        raise MalformedBody(
            f'body holds {len(body)} bytes after the metadata, shorter than the '
            f'{SUBHEADER_SIZE[kind]}-byte sub-header', field='body_len',
        )
    if expected_fingerprint is not None and fingerprint != bytes(expected_fingerprint):
        raise FingerprintMismatch(
            f'fingerprint is {fingerprint.hex()}, expected {bytes(expected_fingerprint).hex()}',
            field='fingerprint',
        )
    try:
        update = _DECODERS[kind](body, limits, expected_dim)
    except bitpack.BitstreamError as exc:  # defensive: lengths are pre-checked
        raise MalformedBody(str(exc), field='body') from None
    return DecodedFrameV2(kind, round_index, sender, fingerprint, update, metadata)


def _read_metadata(body: memoryview,
                   limits: DecodeLimits) -> tuple[dict[str, Any], memoryview]:
    """Split the metadata section (u32 length + JSON object) off the front of the body."""
    if len(body) < _META_LEN.size:
        raise MalformedBody('body ends inside the metadata length', field='metadata_len')
    (meta_len,) = _META_LEN.unpack_from(body, 0)
    if meta_len > limits.max_metadata_bytes:
        raise OversizedFrame(
            f'metadata_len {meta_len} exceeds limit {limits.max_metadata_bytes}',
            field='metadata_len',
        )
    end = _META_LEN.size + meta_len
    if end > len(body):
        raise MalformedBody(f'metadata_len {meta_len} runs past the body', field='metadata_len')
    if meta_len == 0:
        raise MalformedMetadata('metadata flag set but the section is empty', field='metadata')
    return parse_metadata(body[_META_LEN.size:end]), body[end:]


def decode_lgc_parts(parts: Iterable[bytes | bytearray | memoryview],
                     limits: DecodeLimits = _DEFAULT_LIMITS,
                     expected_fingerprint: bytes | None = None,
                     ) -> tuple[list[LgcPart], list[tuple[int, FrameError]]]:
    """Decode the LGC layer frames that arrived; a bad part does not affect the others.

    Returns the good parts and ``(position, error)`` for each rejected one (any FrameError, or
    a non-LGC kind / a repeated layer id / a part disagreeing with the first good part's round,
    sender, dim or layer count, reported as ``body``).  Sum the layers with
    :func:`fl_uav.compression.lgc.decode` (LGC eq. (2)).
    """
    good: list[LgcPart] = []
    bad: list[tuple[int, FrameError]] = []
    key = None
    seen: set[int] = set()
    for position, data in enumerate(parts):
        try:
            frame = decode_v2(data, limits, expected_fingerprint)
            if frame.kind != FrameKindV2.LGC_LAYER:
                raise MalformedBody(f'part is a {frame.kind.name} frame', field='kind')
            part = frame.update
            this = (frame.round_index, frame.sender, frame.fingerprint, part.dim,
                    part.num_layers)
            if key is not None and this != key:
                raise MalformedBody('part belongs to a different update', field='header')
            if part.layer.layer_id in seen:
                raise MalformedBody(f'layer {part.layer.layer_id} repeated', field='layer_id')
        except FrameError as exc:
            bad.append((position, exc))
            continue
        key = this
        seen.add(part.layer.layer_id)
        good.append(part)
    return good, bad
