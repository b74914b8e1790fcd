"""Wire codec v1: versioned binary frames carrying named tensors plus JSON metadata.

A frame is the payload of one ``std_msgs/UInt8MultiArray`` message.  Layout (all integers
little-endian; byte-exact tables in ``docs/wire_format.md``)::

    fixed header (40 B) | tensor table | metadata (UTF-8 JSON object) | body | CRC32 (4 B)

so that ``len(frame) == HEADER_SIZE + sum(table_entry_size(...)) + len(metadata) + body + 4``.

Decoding never trusts the input: the buffer length and the declared lengths are checked against
:class:`DecodeLimits` and against each other before the CRC is computed, and every table field
is checked before any tensor view is made.  A rejected frame raises a subclass of
:class:`~fl_uav.compression.errors.FrameError` (re-exported here, like all error classes) whose
``reason`` names the cause.

Decoded tensors are read-only ``numpy`` views into the frame (zero copy) when the frame is an
immutable ``bytes`` object (or a memoryview of one); any other buffer is copied once first so
that later writes to it cannot change tensors that already passed validation.  Views may be
unaligned; call ``.copy()`` for a writable, aligned array (e.g. before ``torch.from_numpy``).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_uav.compression.errors import (
    ALL_REASONS,
    BadMagic,
    CorruptFrame,
    FingerprintMismatch,
    FrameError,
    LengthMismatch,
    MalformedHeader,
    MalformedMetadata,
    MalformedTable,
    NonFiniteValues,
    OversizedFrame,
    ShapeMismatch,
    TruncatedFrame,
    UnknownKind,
    UnsupportedVersion,
)

__all__ = [
    'ALL_REASONS',
    'CRC_SIZE',
    'FINGERPRINT_SIZE',
    'GROUND_STATION_ID',
    'HEADER_SIZE',
    'MAGIC',
    'TABLE_ENTRY_FIXED_SIZE',
    'VERSION',
    'BadMagic',
    'CorruptFrame',
    'DecodeLimits',
    'FingerprintMismatch',
    'Frame',
    'FrameError',
    'FrameKind',
    'LengthMismatch',
    'MalformedHeader',
    'MalformedMetadata',
    'MalformedTable',
    'NonFiniteValues',
    'OversizedFrame',
    'ShapeMismatch',
    'TruncatedFrame',
    'UnknownKind',
    'UnsupportedVersion',
    'decode_frame',
    'dtype_code',
    'encode_frame',
    'encode_metadata',
    'encoded_size',
    'fingerprint_of',
    'float32_tensors',
    'model_fingerprint',
    'parse_metadata',
    'table_entry_size',
]

MAGIC = b'FLUV'
VERSION = 1
GROUND_STATION_ID = 0xFFFF
FINGERPRINT_SIZE = 8
CRC_SIZE = 4

# magic, version, kind, flags, round, sender, tensor_count, fingerprint,
# table_len, metadata_len, body_len
_HEADER = struct.Struct('<4sBBHIHH8sIIQ')
HEADER_SIZE = _HEADER.size  # 40
_CRC = struct.Struct('<I')
_ENTRY_TAIL = struct.Struct('<QQ')  # byte offset into the body, byte length
# name_len (1) + dtype (1) + ndim (1) + offset (8) + length (8); add len(name) + 4 * ndim.
TABLE_ENTRY_FIXED_SIZE = 1 + 1 + 1 + _ENTRY_TAIL.size

_U8_MAX = 0xFF
_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


class FrameKind(enum.IntEnum):
    """What a frame carries."""

    GLOBAL_MODEL = 1
    UPDATE = 2
    CONTROL = 3


# Wire dtype code -> little-endian numpy dtype.  Codes are part of the v1 contract.
_CODE_TO_DTYPE: dict[int, np.dtype] = {
    1: np.dtype('<f4'),
    2: np.dtype('<f2'),
    3: np.dtype('<f8'),
    4: np.dtype('i1'),
    5: np.dtype('u1'),
    6: np.dtype('<i2'),
    7: np.dtype('<i4'),
    8: np.dtype('<i8'),
}
_KEY_TO_CODE: dict[tuple[str, int], int] = {
    (dt.kind, dt.itemsize): code for code, dt in _CODE_TO_DTYPE.items()
}


def dtype_code(dtype: Any) -> int:
    """Return the v1 wire code of a numpy dtype (any byte order); TypeError if unsupported."""
    dt = np.dtype(dtype)
    code = _KEY_TO_CODE.get((dt.kind, dt.itemsize))
    if code is None:
        supported = ', '.join(d.name for d in _CODE_TO_DTYPE.values())
        raise TypeError(f'dtype {dt} is not supported by wire format v1 (supported: {supported})')
    return code


@dataclass(frozen=True)
class DecodeLimits:
    """Upper bounds a decoder enforces before it allocates anything.

    Exceeding any of them raises :class:`~fl_uav.compression.errors.OversizedFrame`.
    """

    max_frame_bytes: int = 64 * 1024 * 1024
    max_tensors: int = 256
    max_ndim: int = 6
    max_name_len: int = 128
    max_metadata_bytes: int = 64 * 1024
    max_elements: int = 50_000_000
    """Bound on the total number of elements over all tensors of one frame."""


_DEFAULT_LIMITS = DecodeLimits()


@dataclass(frozen=True, eq=False)
class Frame:
    """A decoded, validated frame.  ``tensors`` keeps the table order."""

    kind: FrameKind
    round_index: int
    sender: int
    fingerprint: bytes
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def table_entry_size(name: str, ndim: int) -> int:
    """Bytes one tensor-table entry occupies: ``19 + len(utf8(name)) + 4 * ndim``."""
    return TABLE_ENTRY_FIXED_SIZE + len(name.encode('utf-8')) + 4 * ndim


# --------------------------------------------------------------------------------------------
# Fingerprint
# --------------------------------------------------------------------------------------------


def _canonical_dtype(dtype: Any) -> str:
    text = dtype if isinstance(dtype, str) else None
    if text is None and not isinstance(dtype, np.dtype | type):
        text = str(dtype)  # e.g. torch.float32
    if text is not None:
        text = text.removeprefix('torch.')
    try:
        return np.dtype(text if text is not None else dtype).name
    except TypeError:
        return text if text is not None else str(dtype)


def model_fingerprint(names_and_shapes: Iterable[tuple[str, tuple[int, ...], Any]]) -> bytes:
    """Return the 8-byte fingerprint of a model architecture.

    Each item is ``(name, shape, dtype)``; dtype may be a numpy dtype, a string such as
    ``'float32'`` or a ``torch.dtype``.  The fingerprint is the first 8 bytes of SHA-256 over a
    canonical JSON text of the items sorted by name, so it does not depend on iteration order.
    """
    items = []
    for name, shape, dtype in names_and_shapes:
        if not isinstance(name, str):
            raise TypeError(f'parameter name must be str, got {type(name).__name__}')
        items.append([name, [int(d) for d in shape], _canonical_dtype(dtype)])
    items.sort(key=lambda item: item[0])
    for prev, cur in zip(items, items[1:], strict=False):
        if prev[0] == cur[0]:
            raise ValueError(f'duplicate parameter name {cur[0]!r} in fingerprint input')
    text = json.dumps(['fl_uav.model.v1', items], ensure_ascii=False, separators=(',', ':'))
    return hashlib.sha256(text.encode('utf-8')).digest()[:FINGERPRINT_SIZE]


def fingerprint_of(tensors: Mapping[str, Any]) -> bytes:
    """Fingerprint of a state dict: :func:`model_fingerprint` over its names, shapes, dtypes."""
    return model_fingerprint(
        (name, tuple(value.shape), value.dtype) for name, value in tensors.items()
    )


# --------------------------------------------------------------------------------------------
# Metadata
# --------------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f'metadata value of type {type(value).__name__} is not JSON serialisable')


def _reject_constant(token: str) -> Any:
    raise ValueError(f'non-finite number {token} is not allowed')


def _finite_float(token: str) -> float:
    # JSON has no NaN or Infinity, but a number such as 1e999 parses to inf in Python.
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f'number {token} is beyond the float64 range')
    return value


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dup = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f'duplicate key {dup!r}')
    return obj


def parse_metadata(blob: bytes | memoryview) -> dict[str, Any]:
    """Parse a metadata block strictly; raise MalformedMetadata on any defect."""
    if len(blob) == 0:
        return {}
    try:
        text = bytes(blob).decode('utf-8')
        obj = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                         object_pairs_hook=_unique_object)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedMetadata(f'metadata is not valid JSON: {exc}', field='metadata') from None
    if not isinstance(obj, dict):
        raise MalformedMetadata(
            f'metadata must be a JSON object, got {type(obj).__name__}', field='metadata'
        )
    return obj


def encode_metadata(metadata: Mapping[str, Any] | None) -> bytes:
    """Compact UTF-8 JSON of a metadata object (empty bytes for none); the bytes are checked
    to pass :func:`parse_metadata`, the strict parser every decoder uses."""
    if metadata is None or len(metadata) == 0:
        return b''
    if not isinstance(metadata, Mapping):
        raise TypeError(f'metadata must be a mapping, got {type(metadata).__name__}')
    text = json.dumps(
        dict(metadata),
        ensure_ascii=False,
        allow_nan=False,
        separators=(',', ':'),
        default=_json_default,
    )
    blob = text.encode('utf-8')
    if len(blob) > _U32_MAX:
        raise ValueError(f'metadata is {len(blob)} bytes, more than the u32 length field allows')
    try:  # guarantee the receiver's strict parser accepts it (e.g. no non-str keys clashing)
        parse_metadata(blob)
    except MalformedMetadata as exc:
        raise ValueError(f'metadata would be rejected by the decoder: {exc}') from None
    return blob


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


def _check_uint(value: Any, bits_max: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f'{what} must be an int, got {type(value).__name__}')
    value = int(value)
    if not 0 <= value <= bits_max:
        raise ValueError(f'{what} must be in [0, {bits_max}], got {value}')
    return value


def _prepare_tensors(
    tensors: Mapping[str, Any],
) -> list[tuple[bytes, int, tuple[int, ...], np.ndarray]]:
    """Validate tensors; return (utf8 name, dtype code, shape, flat little-endian array)."""
    if len(tensors) > _U16_MAX:
        raise ValueError(f'{len(tensors)} tensors do not fit the u16 tensor count')
    prepared = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f'tensor name must be str, got {type(name).__name__}')
        name_bytes = name.encode('utf-8')  # UnicodeEncodeError (a ValueError) on lone surrogates
        if not 1 <= len(name_bytes) <= _U8_MAX:
            raise ValueError(f'tensor name {name!r} must be 1..255 UTF-8 bytes')
        arr = np.asarray(value)
        code = dtype_code(arr.dtype)
        shape = tuple(int(d) for d in arr.shape)
        if len(shape) > _U8_MAX or any(d > _U32_MAX for d in shape):
            raise ValueError(f'tensor {name!r} shape {shape} does not fit the v1 table')
        flat = np.ascontiguousarray(arr, dtype=_CODE_TO_DTYPE[code]).reshape(-1)
        prepared.append((name_bytes, code, shape, flat))
    return prepared


def encoded_size(tensors: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> int:
    """Exact length of the frame :func:`encode_frame` would produce, without building it."""
    meta = encode_metadata(metadata)
    total = HEADER_SIZE + len(meta) + CRC_SIZE
    for name, value in tensors.items():
        arr = np.asarray(value)
        dtype_code(arr.dtype)
        total += table_entry_size(name, arr.ndim) + arr.size * np.dtype(arr.dtype).itemsize
    return total


def encode_frame(
    kind: FrameKind,
    round_index: int,
    sender: int,
    fingerprint: bytes,
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
) -> bytes:
    """Serialise one frame.

    ``tensors`` maps names to arrays of a supported dtype (float32, float16, float64, int8,
    uint8, int16, int32, int64; any byte order, any memory layout; torch CPU tensors work via
    ``np.asarray``).  Body order is the mapping's iteration order.  ``metadata`` must be a
    JSON-serialisable mapping with str keys and finite numbers (numpy scalars are accepted).

    The encoder does not check finiteness of tensor values (the decoder does) and does not apply
    :class:`DecodeLimits`; it only enforces the bounds of the v1 field widths.  Raises TypeError
    or ValueError on bad arguments.
    """
    kind = FrameKind(kind)
    round_index = _check_uint(round_index, _U32_MAX, 'round_index')
    sender = _check_uint(sender, _U16_MAX, 'sender')
    if not isinstance(fingerprint, bytes | bytearray) or len(fingerprint) != FINGERPRINT_SIZE:
        raise ValueError(f'fingerprint must be {FINGERPRINT_SIZE} bytes')
    prepared = _prepare_tensors(tensors)
    meta = encode_metadata(metadata)

    table_parts: list[bytes] = []
    offset = 0
    for name_bytes, code, shape, flat in prepared:
        ndim = len(shape)
        table_parts.append(
            struct.pack(
                f'<B{len(name_bytes)}sBB{ndim}IQQ',
                len(name_bytes),
                name_bytes,
                code,
                ndim,
                *shape,
                offset,
                flat.nbytes,
            )
        )
        offset += flat.nbytes
    table = b''.join(table_parts)
    if len(table) > _U32_MAX:
        raise ValueError('tensor table does not fit the u32 table length field')

    header = _HEADER.pack(
        MAGIC,
        VERSION,
        int(kind),
        0,
        round_index,
        sender,
        len(prepared),
        bytes(fingerprint),
        len(table),
        len(meta),
        offset,
    )
    parts: list[Any] = [header, table, meta]
    parts.extend(flat.view(np.uint8) for _, _, _, flat in prepared)
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    parts.append(_CRC.pack(crc))
    return b''.join(parts)


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


def _immutable_view(data: Any, limits: DecodeLimits) -> memoryview:
    """Return a flat read-only byte view that nobody else can mutate (copying if needed)."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(
            f'frame must be bytes, bytearray or memoryview, got {type(data).__name__}'
        ) from None
    if view.nbytes > limits.max_frame_bytes:
        raise OversizedFrame(
            f'frame is {view.nbytes} bytes, limit is {limits.max_frame_bytes}', field='frame'
        )
    if isinstance(view.obj, bytes) and view.c_contiguous:
        return view.cast('B')
    return memoryview(view.tobytes())


def check_magic(buf: bytes | memoryview) -> None:
    """BadMagic unless ``buf`` starts with (as much as it holds of) the frame magic."""
    prefix = bytes(buf[: len(MAGIC)])
    if prefix != MAGIC[: len(prefix)]:
        raise BadMagic(f'magic is {prefix!r}, expected {MAGIC!r}', field='magic')


def check_magic_and_version(buf: bytes | memoryview, version: int, header_size: int) -> None:
    """Magic, version byte and minimum size of a frame of any codec version."""
    size = len(buf)
    check_magic(buf)
    if size > len(MAGIC) and buf[len(MAGIC)] != version:
        raise UnsupportedVersion(
            f'version is {buf[len(MAGIC)]}, this decoder reads version {version}',
            field='version',
        )
    if size < header_size + CRC_SIZE:
        raise TruncatedFrame(
            f'frame is {size} bytes, shorter than the {header_size + CRC_SIZE}-byte minimum',
            field='header',
        )


def check_length_and_crc(buf: bytes | memoryview, declared: int, limits: DecodeLimits,
                         detail: str = '') -> None:
    """The declared frame size against the limit and the buffer, then the trailing CRC32."""
    size = len(buf)
    if declared > limits.max_frame_bytes:
        raise OversizedFrame(
            f'declared frame size {declared}{detail} exceeds limit {limits.max_frame_bytes}',
            field='body_len',
        )
    if declared > size:
        raise TruncatedFrame(
            f'frame is {size} bytes but its header declares {declared}', field='body_len'
        )
    if declared < size:
        raise LengthMismatch(
            f'frame is {size} bytes but its header declares {declared} (trailing bytes)',
            field='body_len',
        )
    stored = _CRC.unpack_from(buf, size - CRC_SIZE)[0]
    computed = zlib.crc32(buf[: size - CRC_SIZE])
    if stored != computed:
        raise CorruptFrame(
            f'crc32 is {stored:#010x}, contents give {computed:#010x}', field='crc32'
        )


def _check_prologue(view: memoryview, limits: DecodeLimits) -> tuple:
    """Check magic, version and declared sizes against the buffer; return the header fields."""
    check_magic_and_version(view, VERSION, HEADER_SIZE)
    fields = _HEADER.unpack_from(view, 0)
    table_len, meta_len, body_len = fields[8], fields[9], fields[10]
    declared = HEADER_SIZE + table_len + meta_len + body_len + CRC_SIZE
    check_length_and_crc(view, declared, limits, f' (table_len={table_len}, '
                         f'metadata_len={meta_len}, body_len={body_len})')
    return fields


_DIMS_STRUCTS: dict[int, struct.Struct] = {}


def _dims_struct(ndim: int) -> struct.Struct:
    st = _DIMS_STRUCTS.get(ndim)
    if st is None:
        st = _DIMS_STRUCTS[ndim] = struct.Struct(f'<{ndim}I')
    return st


@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    elements: int
    offset: int


def _parse_table(
    view: memoryview, start: int, table_len: int, count: int, body_len: int, limits: DecodeLimits
) -> list[_Entry]:
    """Parse and fully validate the tensor table occupying ``view[start:start + table_len]``."""
    end = start + table_len
    pos = start
    entries: list[_Entry] = []
    names: set[str] = set()
    total_elements = 0
    body_pos = 0
    for index in range(count):
        where = f'tensor table entry {index}'
        if pos + 1 > end:
            raise MalformedTable(f'{where}: table ends before name_len', field='name_len')
        name_len = view[pos]
        if name_len == 0:
            raise MalformedTable(f'{where}: empty tensor name', field='name_len')
        if name_len > limits.max_name_len:
            raise OversizedFrame(
                f'{where}: name_len {name_len} exceeds limit {limits.max_name_len}',
                field='name_len',
            )
        if pos + 1 + name_len + 2 > end:
            raise MalformedTable(f'{where}: table ends inside name/dtype/ndim', field='name')
        try:
            name = bytes(view[pos + 1 : pos + 1 + name_len]).decode('utf-8')
        except UnicodeDecodeError:
            raise MalformedTable(f'{where}: name is not valid UTF-8', field='name') from None
        if name in names:
            raise MalformedTable(f'{where}: duplicate tensor name {name!r}', field='name')
        names.add(name)
        where = f'tensor {name!r}'
        pos += 1 + name_len
        code, ndim = view[pos], view[pos + 1]
        pos += 2
        dtype = _CODE_TO_DTYPE.get(code)
        if dtype is None:
            raise MalformedTable(f'{where}: unknown dtype code {code}', field='dtype')
        if ndim > limits.max_ndim:
            raise OversizedFrame(
                f'{where}: ndim {ndim} exceeds limit {limits.max_ndim}', field='ndim'
            )
        if pos + 4 * ndim + _ENTRY_TAIL.size > end:
            raise MalformedTable(f'{where}: table ends inside dims/offset/length', field='dims')
        shape = _dims_struct(ndim).unpack_from(view, pos)
        pos += 4 * ndim
        offset, length = _ENTRY_TAIL.unpack_from(view, pos)
        pos += _ENTRY_TAIL.size
        elements = math.prod(shape)
        total_elements += elements
        if total_elements > limits.max_elements:
            raise OversizedFrame(
                f'{where}: total element count {total_elements} exceeds limit '
                f'{limits.max_elements}',
                field='dims',
            )
        if elements * dtype.itemsize != length:
            raise MalformedTable(
                f'{where}: dims {shape} x {dtype.itemsize} B = {elements * dtype.itemsize} B '
                f'but length is {length}',
                field='length',
            )
        if offset != body_pos:
            raise MalformedTable(
                f'{where}: offset {offset}, expected contiguous offset {body_pos}',
                field='offset',
            )
        body_pos += length
        if body_pos > body_len:
            raise MalformedTable(
                f'{where}: ends at body byte {body_pos}, beyond body_len {body_len}',
                field='length',
            )
        entries.append(_Entry(name, dtype, shape, elements, offset))
    if pos != end:
        raise MalformedTable(
            f'table_len is {table_len} but {count} entries use {pos - start} bytes',
            field='table_len',
        )
    if body_pos != body_len:
        raise MalformedTable(
            f'tensors cover {body_pos} body bytes but body_len is {body_len}', field='body_len'
        )
    return entries


def _check_shapes(entries: list[_Entry], expected: Mapping[str, tuple[int, ...]]) -> None:
    got = {e.name: e.shape for e in entries}
    missing = [name for name in expected if name not in got]
    extra = [name for name in got if name not in expected]
    if missing or extra:
        raise ShapeMismatch(
            f'tensor names differ from expected: missing {missing}, unexpected {extra}',
            field='tensors',
        )
    for name, shape in got.items():
        want = tuple(int(d) for d in expected[name])
        if shape != want:
            raise ShapeMismatch(f'tensor {name!r} has shape {shape}, expected {want}', field=name)


def decode_frame(
    data: bytes | bytearray | memoryview,
    limits: DecodeLimits = _DEFAULT_LIMITS,
    expected_fingerprint: bytes | None = None,
    expected_shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> Frame:
    """Validate and decode one frame.

    Checks, in order: buffer size vs ``limits`` (oversized), magic (bad_magic), version
    (version), minimum length (truncated), declared sizes vs limits and vs the buffer length
    (oversized / truncated / length), CRC32 (crc), kind (kind), reserved flags (header), tensor
    count and metadata size vs limits (oversized), tensor table (table / oversized), metadata
    (metadata), fingerprint (fingerprint), names and shapes vs ``expected_shapes`` (shape),
    finiteness of floating tensors (nonfinite).  Raises the matching ``FrameError`` subclass.

    ``expected_shapes``, if given, must name exactly the frame's tensors.
    """
    if expected_fingerprint is not None and len(expected_fingerprint) != FINGERPRINT_SIZE:
        raise ValueError(f'expected_fingerprint must be {FINGERPRINT_SIZE} bytes')
    view = _immutable_view(data, limits)
    (
        _,
        _,
        kind_code,
        flags,
        round_index,
        sender,
        count,
        fingerprint,
        table_len,
        meta_len,
        body_len,
    ) = _check_prologue(view, limits)

    try:
        kind = FrameKind(kind_code)
    except ValueError:
        raise UnknownKind(f'kind code {kind_code} is unknown', field='kind') from None
    if flags != 0:
        raise MalformedHeader(f'reserved flags are {flags:#06x}, must be 0', field='flags')
    if count > limits.max_tensors:
        raise OversizedFrame(
            f'tensor_count {count} exceeds limit {limits.max_tensors}', field='tensor_count'
        )
    if meta_len > limits.max_metadata_bytes:
        raise OversizedFrame(
            f'metadata_len {meta_len} exceeds limit {limits.max_metadata_bytes}',
            field='metadata_len',
        )

    entries = _parse_table(view, HEADER_SIZE, table_len, count, body_len, limits)
    meta_start = HEADER_SIZE + table_len
    metadata = parse_metadata(view[meta_start : meta_start + meta_len])

    if expected_fingerprint is not None and fingerprint != bytes(expected_fingerprint):
        raise FingerprintMismatch(
            f'fingerprint is {fingerprint.hex()}, expected {bytes(expected_fingerprint).hex()}',
            field='fingerprint',
        )
    if expected_shapes is not None:
        _check_shapes(entries, expected_shapes)

    body_start = meta_start + meta_len
    tensors: dict[str, np.ndarray] = {}
    for entry in entries:
        arr = np.frombuffer(
            view, dtype=entry.dtype, count=entry.elements, offset=body_start + entry.offset
        ).reshape(entry.shape)
        if entry.dtype.kind == 'f' and entry.elements and not np.isfinite(arr).all():
            raise NonFiniteValues(f'tensor {entry.name!r} contains NaN or Inf', field=entry.name)
        tensors[entry.name] = arr
    return Frame(kind, round_index, sender, fingerprint, tensors, metadata)


def float32_tensors(tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A decoded frame's tensors as the models' float32 arrays (float32 ones as they are).

    A frame may carry any v1 dtype (the fingerprint names the architecture, not the dtype it
    travels in), and :func:`decode_frame` checks finiteness in that dtype only: a finite
    float64 value beyond the float32 range (about 3.4e38) would become ±inf in the cast.
    Raises :class:`NonFiniteValues` naming the tensor instead, so a receiver counts it under
    ``nonfinite`` and never takes it (no other v1 dtype can overflow float32).
    """
    out: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        arr = np.asarray(value)
        if arr.dtype == np.float32:
            out[name] = arr
            continue
        with np.errstate(over='ignore'):
            cast = arr.astype(np.float32)
        if arr.dtype == np.float64 and cast.size and not np.isfinite(cast).all():
            raise NonFiniteValues(f'tensor {name!r} has float64 values beyond the float32 '
                                  f'range', field=name)
        out[name] = cast
    return out
