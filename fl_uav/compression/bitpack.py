"""Vectorised bit packing for wire format v2 (numpy, ROS-free).

Bit order is **LSB first** everywhere: bit ``i`` of a stream is bit ``i % 8`` of byte ``i // 8``,
and a ``w``-bit unsigned value is written least-significant bit first.  Hence a 32-bit field
written at a byte-aligned position is exactly the little-endian u32 (or float32) in the bytes.

Pieces (layouts in ``docs/wire_format.md``, "Version 2"):

* :func:`pack_uint` / :func:`unpack_uint`: n unsigned integers of w bits (1 ≤ w ≤ 32) in
  ⌈n·w/8⌉ bytes.
* :func:`pack_bitmap` / :func:`unpack_bitmap`: a boolean mask, one bit per entry.
* :func:`rle_runs` / :func:`rle_bits`: run-length code of a mask: alternating run lengths,
  starting with a run of ``False`` (0 when the mask starts with ``True``), every later run ≥ 1.
  Wire form: ``w − 1`` in 5 bits, the run count R in 32 bits, then R runs of w bits each, w the
  bit length of the longest run (at least 1); 37 + R·w bits in all.
* :func:`encode_mask` / :func:`decode_mask`: one flag bit (0 = bitmap, 1 = RLE) followed by
  whichever representation is smaller (the bitmap on a tie): 1 + min(p, 37 + R·w) bits
  (:func:`mask_bits`), replacing the p-bit mask of 2CEOAFL (digest 000 §2.5).

:class:`BitWriter` / :class:`BitReader` concatenate such fields into one bit stream without
padding between them.  Readers check that enough bits remain **before** allocating anything in
proportion to a declared count; malformed input raises :class:`BitstreamError` (a ValueError).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    'MAX_WIDTH',
    'RLE_COUNT_BITS',
    'RLE_WIDTH_BITS',
    'BitReader',
    'BitWriter',
    'BitstreamError',
    'decode_mask',
    'encode_mask',
    'mask_bits',
    'pack_bitmap',
    'pack_uint',
    'packed_size',
    'rle_bits',
    'rle_runs',
    'unpack_bitmap',
    'unpack_uint',
    'width_for',
]

MAX_WIDTH = 32
"""Largest field width in bits."""
RLE_WIDTH_BITS = 5
"""Bits of the RLE run-width field (stores w − 1, so w = 1..32)."""
RLE_COUNT_BITS = 32
"""Bits of the RLE run-count field."""


class BitstreamError(ValueError):
    """A bit stream is too short or holds an invalid field (e.g. a malformed RLE mask)."""


def _check_width(width: int) -> int:
    if isinstance(width, bool) or not isinstance(width, int | np.integer):
        raise TypeError(f'width must be an int, got {type(width).__name__}')
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f'width must be in [1, {MAX_WIDTH}], got {width}')
    return int(width)


def width_for(max_value: int) -> int:
    """Bits needed for values in [0, max_value]: ⌈log2(max_value + 1)⌉, at least 1."""
    if max_value < 0:
        raise ValueError(f'max_value must be >= 0, got {max_value}')
    return max(1, int(max_value).bit_length())


def packed_size(count: int, width: int) -> int:
    """Bytes of ``count`` values of ``width`` bits: ⌈count·width/8⌉."""
    return (int(count) * _check_width(width) + 7) // 8


def _uint_bits(values: np.ndarray, width: int) -> np.ndarray:
    """0/1 uint8 array of length n·w, LSB first per value."""
    width = _check_width(width)
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f'values must be 1-D, got shape {arr.shape}')
    if arr.size == 0:
        return np.zeros(0, np.uint8)
    if arr.dtype.kind not in 'ui':
        raise TypeError(f'values must be integers, got dtype {arr.dtype}')
    if arr.dtype.kind == 'i' and arr.min() < 0:
        raise ValueError('values must be non-negative')
    wide = arr.astype(np.uint64)
    if width < 64 and int(wide.max()) >> width:
        raise ValueError(f'a value does not fit in {width} bits')
    shifts = np.arange(width, dtype=np.uint64)
    return ((wide[:, None] >> shifts) & np.uint64(1)).astype(np.uint8).reshape(-1)


#: Reads of at most this many values take the one-product path of :func:`_bits_to_uint`.
_FEW_VALUES = 64


def _bits_to_uint(bits: np.ndarray, width: int) -> np.ndarray:
    count = bits.size // width
    if count == 0:
        return np.zeros(0, np.uint32)
    matrix = bits.reshape(count, width)
    if count <= _FEW_VALUES:     # a few header fields: one product
        weights = np.left_shift(np.uint64(1), np.arange(width, dtype=np.uint64))
        return (matrix.astype(np.uint64) @ weights).astype(np.uint32)
    # A stream: one bit plane at a time into uint32, 8 bytes per value beside the 0/1 bits
    # (a uint64 matrix would take 8·width: 256 bytes per float32 of a RAW frame).
    out = np.zeros(count, np.uint32)
    plane = np.empty(count, np.uint32)
    for i in range(width):
        np.left_shift(matrix[:, i], i, out=plane, dtype=np.uint32)
        out |= plane
    return out


def pack_uint(values: np.ndarray, width: int) -> bytes:
    """Pack unsigned integers of ``width`` bits (LSB first) into ⌈n·w/8⌉ bytes, zero padded."""
    return np.packbits(_uint_bits(values, width), bitorder='little').tobytes()


def unpack_uint(data: bytes | memoryview, width: int, count: int,
                bit_offset: int = 0) -> np.ndarray:
    """Inverse of :func:`pack_uint`: ``count`` values (uint32) starting at ``bit_offset``."""
    reader = BitReader(data, bit_offset)
    return reader.read_uint(count, width)


def pack_bitmap(mask: np.ndarray) -> bytes:
    """One bit per mask entry (LSB first), ⌈p/8⌉ bytes."""
    return np.packbits(_as_mask(mask), bitorder='little').tobytes()


def unpack_bitmap(data: bytes | memoryview, count: int, bit_offset: int = 0) -> np.ndarray:
    """Inverse of :func:`pack_bitmap`: a bool array of ``count`` entries."""
    return BitReader(data, bit_offset).read_bool(count)


def _as_mask(mask: np.ndarray) -> np.ndarray:
    arr = np.asarray(mask)
    if arr.dtype != np.bool_ or arr.ndim != 1:
        raise ValueError(f'mask must be a 1-D bool array, got {arr.dtype} {arr.shape}')
    if arr.size >= 2**RLE_COUNT_BITS - 1:
        raise ValueError('mask too long for the 32-bit run count')
    return arr


def rle_runs(mask: np.ndarray) -> np.ndarray:
    """Alternating run lengths of ``mask`` (first run counts ``False``, may be 0), int64."""
    arr = _as_mask(mask)
    if arr.size == 0:
        return np.zeros(0, np.int64)
    changes = np.flatnonzero(arr[1:] != arr[:-1]) + 1
    bounds = np.concatenate([[0], changes, [arr.size]])
    runs = np.diff(bounds).astype(np.int64)
    if arr[0]:
        runs = np.concatenate([[0], runs])
    return runs


def _rle_width(runs: np.ndarray) -> int:
    return width_for(int(runs.max())) if runs.size else 1


def rle_bits(mask: np.ndarray) -> int:
    """Bits of the RLE form of ``mask``: 5 + 32 + R·w."""
    runs = rle_runs(mask)
    return RLE_WIDTH_BITS + RLE_COUNT_BITS + runs.size * _rle_width(runs)


def mask_bits(mask: np.ndarray) -> int:
    """Bits :func:`encode_mask` emits: 1 flag bit + min(p, RLE bits)."""
    arr = _as_mask(mask)
    return 1 + min(arr.size, rle_bits(arr))


class BitWriter:
    """Accumulates fields into one LSB-first bit stream."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self.nbits = 0

    def _add(self, bits: np.ndarray) -> None:
        self._chunks.append(bits)
        self.nbits += int(bits.size)

    def write_uint(self, values: np.ndarray, width: int) -> None:
        """Append unsigned integers of ``width`` bits each."""
        self._add(_uint_bits(np.asarray(values), width))

    def write_bool(self, flags: np.ndarray) -> None:
        """Append one bit per bool."""
        self._add(np.asarray(flags, dtype=np.bool_).reshape(-1).astype(np.uint8))

    def write_f32(self, values: np.ndarray) -> None:
        """Append float32 values as their 32-bit patterns (little-endian bytes when aligned)."""
        self.write_uint(np.ascontiguousarray(values, dtype='<f4').view('<u4'), 32)

    def write_mask(self, mask: np.ndarray) -> None:
        """Append the :func:`encode_mask` form of ``mask`` (flag bit + bitmap or RLE)."""
        arr = _as_mask(mask)
        runs = rle_runs(arr)
        width = _rle_width(runs)
        rle = RLE_WIDTH_BITS + RLE_COUNT_BITS + runs.size * width
        if rle < arr.size:
            self.write_uint(np.array([1]), 1)
            self.write_uint(np.array([width - 1]), RLE_WIDTH_BITS)
            self.write_uint(np.array([runs.size]), RLE_COUNT_BITS)
            self.write_uint(runs, width)
        else:
            self.write_uint(np.array([0]), 1)
            self.write_bool(arr)

    def getvalue(self) -> bytes:
        """The stream as ⌈nbits/8⌉ bytes, padded with zero bits."""
        if not self._chunks:
            return b''
        return np.packbits(np.concatenate(self._chunks), bitorder='little').tobytes()


class BitReader:
    """Reads fields from an LSB-first bit stream, checking the remaining length first."""

    def __init__(self, data: bytes | memoryview, bit_offset: int = 0,
                 bit_end: int | None = None) -> None:
        self._data = np.frombuffer(data, dtype=np.uint8)
        total = self._data.size * 8
        self.end = total if bit_end is None else int(bit_end)
        if not 0 <= bit_offset <= self.end <= total:
            raise BitstreamError(f'bit range [{bit_offset}, {self.end}) outside {total} bits')
        self.pos = int(bit_offset)

    @property
    def remaining(self) -> int:
        """Bits left before the end of the stream."""
        return self.end - self.pos

    def _take(self, nbits: int) -> np.ndarray:
        if nbits < 0 or nbits > self.remaining:
            raise BitstreamError(f'need {nbits} bits at bit {self.pos}, {self.remaining} left')
        first, last = self.pos // 8, (self.pos + nbits + 7) // 8
        bits = np.unpackbits(self._data[first:last], bitorder='little')
        skip = self.pos % 8
        self.pos += nbits
        return bits[skip:skip + nbits]

    def read_uint(self, count: int, width: int) -> np.ndarray:
        """``count`` unsigned values of ``width`` bits, as uint32."""
        width = _check_width(width)
        return _bits_to_uint(self._take(int(count) * width), width)

    def read_bool(self, count: int) -> np.ndarray:
        """``count`` bits as a bool array."""
        return self._take(int(count)).astype(np.bool_)

    def read_f32(self, count: int) -> np.ndarray:
        """``count`` float32 values (may be NaN/Inf; the caller validates)."""
        return self.read_uint(count, 32).astype('<u4').view('<f4')

    def read_mask(self, dim: int) -> np.ndarray:
        """Read an :func:`encode_mask` field for a mask of ``dim`` entries, fully validated.

        Raises BitstreamError when the stream is short, the run count exceeds dim + 1 (before
        any allocation), a run after the first is 0, the runs do not sum to ``dim``, or the
        code is not canonical (w larger than the longest run needs, or RLE not smaller than
        the bitmap), so that every mask has exactly one encoding.
        """
        dim = int(dim)
        if self.read_uint(1, 1)[0] == 0:
            return self.read_bool(dim)
        width = int(self.read_uint(1, RLE_WIDTH_BITS)[0]) + 1
        count = int(self.read_uint(1, RLE_COUNT_BITS)[0])
        if count > dim + 1:
            raise BitstreamError(f'RLE run count {count} exceeds mask length {dim} + 1')
        if count * width > self.remaining:
            raise BitstreamError(f'RLE needs {count * width} bits, {self.remaining} left')
        runs = self.read_uint(count, width).astype(np.int64)
        if dim == 0 and count:
            raise BitstreamError('RLE of an empty mask must have no runs')
        if count and np.any(runs[1:] == 0):
            raise BitstreamError('RLE run after the first has length 0')
        if np.any(runs > dim) or int(runs.sum()) != dim:
            raise BitstreamError(f'RLE runs sum to {int(runs.sum())}, mask length is {dim}')
        if width != _rle_width(runs) or RLE_WIDTH_BITS + RLE_COUNT_BITS + count * width >= dim:
            raise BitstreamError('RLE is not canonical (wider than needed or not smaller)')
        values = (np.arange(count) % 2).astype(np.bool_)
        return np.repeat(values, runs)


def encode_mask(mask: np.ndarray) -> bytes:
    """A mask as flag bit + bitmap or RLE, whichever is smaller (:func:`mask_bits` bits)."""
    writer = BitWriter()
    writer.write_mask(mask)
    return writer.getvalue()


def decode_mask(data: bytes | memoryview, dim: int) -> np.ndarray:
    """Inverse of :func:`encode_mask`; the padding bits after the field must be zero."""
    reader = BitReader(data)
    mask = reader.read_mask(dim)
    if reader.remaining >= 8 or np.any(reader.read_bool(reader.remaining)):
        raise BitstreamError('trailing bytes or non-zero padding after the mask')
    return mask
