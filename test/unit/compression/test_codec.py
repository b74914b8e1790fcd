"""Unit tests for the v1 wire codec (fl_uav.compression.codec).

Malformed frames are built with an independent, test-local frame builder that follows the
layout in docs/wire_format.md, so the tests also check the documented contract.
"""

from __future__ import annotations

import math
import re
import struct
import time
import tracemalloc
import zlib
from pathlib import Path

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from fl_uav.compression.codec import (
    CRC_SIZE,
    GROUND_STATION_ID,
    HEADER_SIZE,
    MAGIC,
    TABLE_ENTRY_FIXED_SIZE,
    DecodeLimits,
    FrameKind,
    decode_frame,
    dtype_code,
    encode_frame,
    encoded_size,
    fingerprint_of,
    model_fingerprint,
    table_entry_size,
)
from fl_uav.compression.errors import ALL_REASONS, FrameError

DOC = Path(__file__).resolve().parents[3] / 'docs' / 'wire_format.md'
FP = bytes(range(1, 9))
SUPPORTED = ['float32', 'float16', 'float64', 'int8', 'uint8', 'int16', 'int32', 'int64']
SHAPES = [(), (0,), (1,), (5,), (2, 3), (0, 4), (3, 0, 2), (2, 1, 3, 1), (1, 1, 1, 1, 1, 2)]

# Byte offsets of the fixed header fields (docs/wire_format.md, "Fixed header").
OFF_VERSION, OFF_KIND, OFF_FLAGS, OFF_ROUND, OFF_SENDER, OFF_COUNT = 4, 5, 6, 8, 12, 14
OFF_FINGERPRINT, OFF_TABLE_LEN, OFF_META_LEN, OFF_BODY_LEN = 16, 24, 28, 32
HEADER_FMT = '<4sBBHIHH8sIIQ'


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _entry(name: bytes, code: int, dims, offset: int, length: int, *, ndim=None, name_len=None):
    """One raw tensor-table entry, built from the documented layout."""
    return (
        struct.pack('<B', len(name) if name_len is None else name_len)
        + name
        + struct.pack('<BB', code, len(dims) if ndim is None else ndim)
        + struct.pack(f'<{len(dims)}I', *dims)
        + struct.pack('<QQ', offset, length)
    )


def _raw_frame(entries=(), meta=b'', body=b'', **over) -> bytes:
    """A raw frame with a correct CRC unless ``crc`` is given; header fields overridable."""
    table = b''.join(entries)
    fields = {
        'magic': MAGIC,
        'version': 1,
        'kind': 2,
        'flags': 0,
        'round_index': 3,
        'sender': 1,
        'count': len(entries),
        'fingerprint': FP,
        'table_len': len(table),
        'meta_len': len(meta),
        'body_len': len(body),
    }
    crc = over.pop('crc', None)
    fields.update(over)
    data = struct.pack(HEADER_FMT, *fields.values()) + table + meta + body
    return data + struct.pack('<I', zlib.crc32(data) if crc is None else crc)


def _reseal(frame: bytes | bytearray) -> bytes:
    """Recompute the CRC trailer after a deliberate edit."""
    data = bytes(frame[:-CRC_SIZE])
    return data + struct.pack('<I', zlib.crc32(data))


def _patch(frame: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(frame)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def _small_tensors() -> dict[str, np.ndarray]:
    return {
        'w': np.arange(6, dtype=np.float32).reshape(2, 3),
        'b': np.array([-1, 2], dtype=np.int8),
    }


def _small_frame(**kwargs) -> bytes:
    args = {
        'kind': FrameKind.UPDATE,
        'round_index': 3,
        'sender': 1,
        'fingerprint': FP,
        'tensors': _small_tensors(),
        'metadata': {'num_samples': 12, 'loss': 0.25},
    }
    args.update(kwargs)
    return encode_frame(**args)


def _reason(data, **kwargs) -> str:
    with pytest.raises(FrameError) as info:
        decode_frame(data, **kwargs)
    return info.value.reason


def _assert_same(decoded: dict, original: dict) -> None:
    assert list(decoded) == list(original)
    for name, value in original.items():
        expected = np.asarray(value)
        got = decoded[name]
        assert got.dtype == expected.dtype.newbyteorder('<')
        assert got.shape == expected.shape
        assert got.tobytes() == expected.astype(got.dtype).tobytes()


# ----------------------------------------------------------------------------------------------
# Layout and round trips
# ----------------------------------------------------------------------------------------------


def test_fixed_sizes_match_documentation():
    assert (HEADER_SIZE, TABLE_ENTRY_FIXED_SIZE, CRC_SIZE) == (40, 19, 4)
    assert struct.calcsize(HEADER_FMT) == HEADER_SIZE
    assert table_entry_size('conv1.weight', 4) == 19 + 12 + 16


def test_raw_builder_agrees_with_encoder():
    # Arrange
    w = np.array([1.5, -2.0], dtype=np.float32)
    entries = [_entry(b'w', 1, (2,), 0, 8)]
    # Act
    expected = _raw_frame(entries, b'{"n":4}', w.tobytes(), round_index=9, sender=7)
    frame = encode_frame(FrameKind.UPDATE, 9, 7, FP, {'w': w}, {'n': 4})
    # Assert
    assert frame == expected


@pytest.mark.parametrize('dtype', SUPPORTED)
@pytest.mark.parametrize('shape', SHAPES)
def test_round_trip_is_exact_for_dtypes_and_shapes(dtype, shape):
    # Arrange
    rng = np.random.default_rng(1)
    if np.dtype(dtype).kind == 'f':
        value = rng.standard_normal(shape).astype(dtype)
    else:
        value = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, size=shape, dtype=dtype)
    tensors = {'t': value, 'extra': np.array([7], dtype=np.int32)}
    # Act
    frame = decode_frame(encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, FP, tensors))
    # Assert
    _assert_same(frame.tensors, tensors)


def test_round_trip_preserves_header_fields_and_metadata():
    # Arrange
    metadata = {
        'num_samples': 512,
        'train_loss': 0.125,
        'deadline': 1700000000.5,
        'knobs': {'sparsity': 0.9, 'bits': 4, 'layers': ['fc1', 'fc2']},
        'ok': True,
        'note': 'drone ü',
        'none': None,
    }
    # Act
    frame = decode_frame(encode_frame(FrameKind.UPDATE, 2**32 - 1, 0xFFFE, FP, {}, metadata))
    # Assert
    assert frame.kind is FrameKind.UPDATE
    assert (frame.round_index, frame.sender, frame.fingerprint) == (2**32 - 1, 0xFFFE, FP)
    assert frame.tensors == {}
    assert frame.metadata == metadata


def test_control_frame_without_tensors_or_metadata():
    # Act
    data = encode_frame(FrameKind.CONTROL, 0, GROUND_STATION_ID, FP, {})
    frame = decode_frame(data)
    # Assert
    assert len(data) == HEADER_SIZE + CRC_SIZE
    assert frame.kind is FrameKind.CONTROL and frame.sender == GROUND_STATION_ID
    assert frame.tensors == {} and frame.metadata == {}


def test_big_endian_and_strided_inputs_round_trip_by_value():
    # Arrange
    big = np.arange(12, dtype='>f4').reshape(3, 4)
    strided = np.arange(24, dtype=np.int64).reshape(4, 6)[::2, ::3]
    fortran = np.asfortranarray(np.arange(6, dtype=np.float16).reshape(2, 3))
    # Act
    frame = decode_frame(
        encode_frame(
            FrameKind.UPDATE, 0, 0, FP, {'big': big, 'strided': strided, 'fortran': fortran}
        )
    )
    # Assert
    np.testing.assert_array_equal(frame.tensors['big'], big)
    np.testing.assert_array_equal(frame.tensors['strided'], strided)
    np.testing.assert_array_equal(frame.tensors['fortran'], fortran)
    assert frame.tensors['big'].dtype == np.dtype('<f4')


def test_frame_size_equals_documented_formula():
    # Arrange
    tensors = {
        'conv1.weight': np.zeros((8, 3, 3, 3), np.float32),
        'conv1.bias': np.zeros(8, np.float16),
        'höhe': np.zeros((), np.int64),
        'empty': np.zeros((0, 5), np.uint8),
    }
    metadata = {'num_samples': 100, 'loss': 0.5}
    meta_len = len(b'{"num_samples":100,"loss":0.5}')
    # Act
    frame = encode_frame(FrameKind.UPDATE, 1, 2, FP, tensors, metadata)
    # Assert
    expected = (
        HEADER_SIZE
        + sum(19 + len(n.encode('utf-8')) + 4 * a.ndim for n, a in tensors.items())
        + meta_len
        + sum(a.nbytes for a in tensors.values())
        + CRC_SIZE
    )
    assert len(frame) == expected == encoded_size(tensors, metadata)
    assert struct.unpack_from('<I', frame, OFF_META_LEN)[0] == meta_len


def test_decoded_tensors_are_read_only_zero_copy_views_of_bytes():
    # Arrange
    data = _small_frame()
    # Act
    frame = decode_frame(data)
    # Assert
    w = frame.tensors['w']
    assert not w.flags.writeable
    assert np.shares_memory(w, np.frombuffer(data, np.uint8))
    with pytest.raises(ValueError):
        w[0, 0] = 1.0


def test_mutable_input_is_copied_so_later_writes_do_not_leak_into_tensors():
    # Arrange
    data = bytearray(_small_frame())
    frame = decode_frame(data)
    before = frame.tensors['w'].copy()
    # Act
    data[-CRC_SIZE - 20 : -CRC_SIZE] = b'\xff' * 20
    # Assert
    np.testing.assert_array_equal(frame.tensors['w'], before)


def test_accepts_memoryview_and_array_buffers():
    # Arrange
    import array

    data = _small_frame()
    # Act
    from_view = decode_frame(memoryview(b'xx' + data)[2:])
    from_array = decode_frame(memoryview(array.array('B', data)))
    # Assert
    _assert_same(from_view.tensors, _small_tensors())
    _assert_same(from_array.tensors, _small_tensors())


def test_documented_hexdump_matches_encoder_output():
    # Arrange
    text = DOC.read_text(encoding='utf-8')
    block = text.split('<!-- hexdump:begin -->')[1].split('<!-- hexdump:end -->')[0]
    lines = [ln for ln in block.splitlines() if re.match(r'^[0-9a-f]{8} ', ln)]
    documented = bytes.fromhex(''.join(ln.split('|')[0][8:] for ln in lines))
    w = np.array([1.0, -2.0], dtype=np.float32)
    # Act
    frame = encode_frame(
        FrameKind.UPDATE, 3, 1, model_fingerprint([('w', (2,), 'float32')]), {'w': w}, {'n': 4}
    )
    # Assert
    assert frame == documented


# ----------------------------------------------------------------------------------------------
# Rejections
# ----------------------------------------------------------------------------------------------


def test_every_single_bit_flip_is_rejected_with_expected_reason():
    # Arrange
    data = _small_frame()
    length_fields = range(OFF_TABLE_LEN, HEADER_SIZE)
    # Act / Assert
    for pos in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            reason = _reason(bytes(flipped))
            if pos < 4:
                assert reason == 'bad_magic', pos
            elif pos == OFF_VERSION:
                assert reason == 'version', pos
            elif pos in length_fields:
                assert reason in {'truncated', 'length', 'oversized'}, pos
            else:
                assert reason == 'crc', (pos, bit)


def test_whole_byte_inversion_in_table_metadata_body_or_crc_is_a_crc_error():
    # Arrange
    data = _small_frame()
    # Act / Assert
    for pos in range(HEADER_SIZE, len(data)):
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        assert _reason(bytes(flipped)) == 'crc', pos


def test_every_truncation_is_rejected_as_truncated_without_big_allocations():
    # Arrange
    data = _small_frame()
    tracemalloc.start()
    try:
        # Act / Assert
        for size in range(len(data)):
            assert _reason(data[:size]) == 'truncated', size
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


def test_trailing_bytes_are_rejected():
    assert _reason(_small_frame() + b'\x00') == 'length'


def test_buffer_larger_than_limit_is_oversized_before_any_copy():
    # Arrange
    data = bytearray(_small_frame())
    # Act / Assert
    assert _reason(data, limits=DecodeLimits(max_frame_bytes=len(data) - 1)) == 'oversized'


@pytest.mark.parametrize('field_offset', [OFF_TABLE_LEN, OFF_META_LEN, OFF_BODY_LEN])
def test_huge_declared_lengths_are_oversized_without_allocation(field_offset):
    # Arrange
    fmt = '<Q' if field_offset == OFF_BODY_LEN else '<I'
    huge = 2**63 if field_offset == OFF_BODY_LEN else 2**32 - 1
    data = _reseal(_patch(_small_frame(), field_offset, fmt, huge))
    tracemalloc.start()
    try:
        # Act
        reason = _reason(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Assert
    assert reason == 'oversized'
    assert peak < 256 * 1024


def test_declared_lengths_beyond_buffer_are_truncated():
    # Arrange: body_len grows by 100 bytes, frame stays as is (CRC resealed).
    data = _small_frame()
    body_len = struct.unpack_from('<Q', data, OFF_BODY_LEN)[0]
    # Act / Assert
    assert _reason(_reseal(_patch(data, OFF_BODY_LEN, '<Q', body_len + 100))) == 'truncated'


@pytest.mark.parametrize(
    ('limits', 'tensors', 'metadata'),
    [
        (DecodeLimits(max_tensors=2), {f't{i}': np.zeros(1) for i in range(3)}, None),
        (DecodeLimits(max_metadata_bytes=10), {}, {'a': 'x' * 20}),
        (DecodeLimits(), {'deep': np.zeros((1,) * 7, np.float32)}, None),
        (DecodeLimits(), {'n' * 129: np.zeros(1, np.float32)}, None),
        (DecodeLimits(max_elements=10), {'a': np.zeros(6), 'b': np.zeros(5)}, None),
    ],
    ids=['tensors', 'metadata', 'ndim', 'name_len', 'elements'],
)
def test_limits_are_enforced_as_oversized(limits, tensors, metadata):
    # Arrange
    data = encode_frame(FrameKind.UPDATE, 0, 0, FP, tensors, metadata)
    # Act / Assert
    assert _reason(data, limits=limits) == 'oversized'


def test_huge_dims_are_rejected_before_any_view_is_made():
    # Arrange: 6 dims of 2**32-1 elements each, declared length 8.
    entries = [_entry(b'x', 1, (2**32 - 1,) * 6, 0, 8)]
    data = _raw_frame(entries, b'', b'\x00' * 8)
    # Act / Assert
    assert _reason(data) == 'oversized'
    assert _reason(data, limits=DecodeLimits(max_elements=2**200)) == 'table'


def test_bad_magic_version_kind_and_flags_are_rejected():
    # Arrange
    data = _small_frame()
    # Act / Assert
    assert _reason(b'ROS2' + data[4:]) == 'bad_magic'
    assert _reason(b'FX') == 'bad_magic'
    assert _reason(_patch(data, OFF_VERSION, '<B', 2)) == 'version'
    assert _reason(_patch(data, OFF_VERSION, '<B', 0)) == 'version'
    assert _reason(_reseal(_patch(data, OFF_KIND, '<B', 0))) == 'kind'
    assert _reason(_reseal(_patch(data, OFF_KIND, '<B', 4))) == 'kind'
    assert _reason(_reseal(_patch(data, OFF_FLAGS, '<H', 1))) == 'header'


@pytest.mark.parametrize(
    ('entries', 'body'),
    [
        ([_entry(b'a', 1, (1,), 0, 4), _entry(b'a', 1, (1,), 4, 4)], bytes(8)),
        ([_entry(b'a', 1, (2, 3), 0, 20)], bytes(20)),
        ([_entry(b'a', 1, (2,), 0, 8), _entry(b'b', 1, (2,), 4, 8)], bytes(16)),
        ([_entry(b'a', 1, (2,), 0, 8)], bytes(12)),
        ([_entry(b'a', 99, (2,), 0, 8)], bytes(8)),
        ([_entry(b'a', 0, (2,), 0, 8)], bytes(8)),
        ([_entry(b'\xff\xfe', 1, (2,), 0, 8)], bytes(8)),
        ([_entry(b'', 1, (2,), 0, 8)], bytes(8)),
    ],
    ids=[
        'duplicate',
        'dims_vs_length',
        'gap_offset',
        'body_not_covered',
        'dtype99',
        'dtype0',
        'utf8',
        'empty_name',
    ],
)
def test_malformed_tables_are_rejected(entries, body):
    assert _reason(_raw_frame(entries, b'', body)) == 'table'


def test_table_length_and_count_disagreement_is_rejected():
    # Arrange
    entries = [_entry(b'a', 1, (1,), 0, 4)]
    # Act / Assert: count says 2 but table holds 1 entry; count 0 leaves the table unread.
    assert _reason(_raw_frame(entries, b'', bytes(4), count=2)) == 'table'
    assert _reason(_raw_frame(entries, b'', bytes(4), count=0)) == 'table'
    # table_len covers bytes after the last entry.
    assert _reason(_raw_frame([entries[0] + b'\x00\x00'], b'', bytes(4))) == 'table'
    # name_len points past the table end.
    bad = [_entry(b'a', 1, (1,), 0, 4, name_len=100)]
    assert _reason(_raw_frame(bad, b'', bytes(4))) == 'table'
    # ndim claims more dims than the table holds.
    bad = [_entry(b'a', 1, (1,), 0, 4, ndim=5)]
    assert _reason(_raw_frame(bad, b'', bytes(4))) == 'table'


@pytest.mark.parametrize(
    'meta',
    [
        b'{',
        b'[1, 2]',
        b'"text"',
        b'\xff\xfe{}',
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": 1e999}',
        b'{"a": [-1E+400]}',
        b'{"a": 1, "a": 2}',
        b'{"a":' + b'[' * 30000 + b']' * 30000 + b'}',
        b'{"a": 1} x',
        b'{"n": ' + b'9' * 5000 + b'}',
    ],
    ids=[
        'unterminated',
        'list',
        'string',
        'utf8',
        'nan',
        'inf',
        'overflow',
        'nested_overflow',
        'dup_key',
        'deep',
        'trailing',
        'huge_int',
    ],
)
def test_malformed_metadata_is_rejected(meta):
    assert _reason(_raw_frame((), meta)) == 'metadata'


@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected(dtype, bad):
    # Arrange
    value = np.ones((3, 3), dtype=dtype)
    value[2, 1] = bad
    data = encode_frame(FrameKind.UPDATE, 0, 0, FP, {'ok': np.ones(2, np.float32), 'x': value})
    # Act
    with pytest.raises(FrameError) as info:
        decode_frame(data)
    # Assert
    assert info.value.reason == 'nonfinite'
    assert info.value.field == 'x' and "'x'" in str(info.value)


def test_fingerprint_mismatch_is_rejected():
    # Arrange
    data = _small_frame()
    # Act / Assert
    assert _reason(data, expected_fingerprint=b'\x00' * 8) == 'fingerprint'
    assert decode_frame(data, expected_fingerprint=FP).fingerprint == FP
    with pytest.raises(ValueError) as info:
        decode_frame(data, expected_fingerprint=b'short')
    assert not isinstance(info.value, FrameError)


@pytest.mark.parametrize(
    'expected',
    [
        {'w': (3, 2), 'b': (2,)},
        {'w': (2, 3)},
        {'w': (2, 3), 'b': (2,), 'c': (1,)},
        {'w': (6,), 'b': (2,)},
    ],
    ids=['transposed', 'missing', 'extra', 'flattened'],
)
def test_shape_mismatch_is_rejected(expected):
    assert _reason(_small_frame(), expected_shapes=expected) == 'shape'


def test_matching_expected_shapes_are_accepted():
    frame = decode_frame(_small_frame(), expected_shapes={'b': [2], 'w': (2, 3)})
    assert frame.tensors['w'].shape == (2, 3)


def test_random_garbage_only_raises_frame_error():
    # Arrange
    rng = np.random.default_rng(42)
    prologue = MAGIC + b'\x01'
    # Act / Assert
    for i in range(3000):
        size = int(rng.integers(0, 160))
        junk = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        for candidate in (junk, prologue + junk, _reseal(prologue + junk + b'\0' * 4)):
            with pytest.raises(FrameError):
                decode_frame(candidate)
        assert i >= 0


def test_error_taxonomy_is_complete_and_unique():
    assert len(set(ALL_REASONS)) == len(ALL_REASONS)
    assert {
        'bad_magic',
        'crc',
        'truncated',
        'oversized',
        'shape',
        'nonfinite',
        'fingerprint',
        'table',
        'metadata',
        'version',
        'kind',
    } <= set(ALL_REASONS)
    assert issubclass(FrameError, ValueError)


# ----------------------------------------------------------------------------------------------
# Encoder argument checks and fingerprints
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('kwargs', 'error'),
    [
        ({'tensors': {'m': np.zeros(2, bool)}}, TypeError),
        ({'tensors': {'c': np.zeros(2, np.complex64)}}, TypeError),
        ({'tensors': {'u': np.zeros(2, np.uint32)}}, TypeError),
        ({'tensors': {'': np.zeros(2)}}, ValueError),
        ({'tensors': {'x' * 256: np.zeros(2)}}, ValueError),
        ({'tensors': {1: np.zeros(2)}}, TypeError),
        ({'round_index': -1}, ValueError),
        ({'round_index': 2**32}, ValueError),
        ({'round_index': 1.0}, TypeError),
        ({'sender': 0x10000}, ValueError),
        ({'fingerprint': b'1234567'}, ValueError),
        ({'kind': 9}, ValueError),
        ({'metadata': {'loss': float('nan')}}, ValueError),
        ({'metadata': {'x': object()}}, TypeError),
        ({'metadata': {1: 'a', '1': 'b'}}, ValueError),
    ],
)
def test_encoder_rejects_bad_arguments(kwargs, error):
    with pytest.raises(error):
        _small_frame(**kwargs)


def test_encoder_accepts_numpy_scalars_in_metadata():
    frame = decode_frame(_small_frame(metadata={'loss': np.float32(0.5), 'n': np.int64(3)}))
    assert frame.metadata == {'loss': 0.5, 'n': 3}


def test_dtype_codes_are_stable():
    codes = [dtype_code(d) for d in SUPPORTED]
    assert codes == [1, 2, 3, 4, 5, 6, 7, 8]
    assert dtype_code('>f4') == 1


def test_model_fingerprint_is_order_independent_and_sensitive():
    # Arrange
    import torch

    base = [('fc.weight', (10, 4), 'float32'), ('fc.bias', (10,), 'float32')]
    # Act
    fp = model_fingerprint(base)
    # Assert
    assert len(fp) == 8
    assert fp == model_fingerprint(reversed(base))
    assert fp == model_fingerprint(
        [('fc.weight', (10, 4), np.float32), ('fc.bias', [10], torch.float32)]
    )
    assert fp == model_fingerprint(
        [('fc.weight', (10, 4), 'torch.float32'), ('fc.bias', (10,), np.dtype('<f4'))]
    )
    assert fp != model_fingerprint([('fc.weight', (4, 10), 'float32'), base[1]])
    assert fp != model_fingerprint([('fc.weight', (10, 4), 'float16'), base[1]])
    assert fp != model_fingerprint([('fc.w', (10, 4), 'float32'), base[1]])
    assert fp == fingerprint_of(
        {'fc.weight': np.zeros((10, 4), np.float32), 'fc.bias': torch.zeros(10)}
    )
    with pytest.raises(ValueError):
        model_fingerprint(base + base[:1])


def test_encode_and_decode_of_5_mb_model_is_cheap():
    # Arrange: ~1.25 M float32 parameters. Bound is ~50x the measured cost, to stay robust.
    rng = np.random.default_rng(0)
    tensors = {
        f'layer{i}.weight': rng.standard_normal((250, 1250), dtype=np.float32) for i in range(4)
    }
    fp = fingerprint_of(tensors)
    best_encode = best_decode = math.inf
    # Act
    for _ in range(5):
        t0 = time.perf_counter()
        data = encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, fp, tensors)
        t1 = time.perf_counter()
        decode_frame(data, expected_fingerprint=fp)
        t2 = time.perf_counter()
        best_encode, best_decode = min(best_encode, t1 - t0), min(best_decode, t2 - t1)
    # Assert
    assert len(data) > 5_000_000
    assert best_encode < 0.05 and best_decode < 0.05


# ----------------------------------------------------------------------------------------------
# Property tests
# ----------------------------------------------------------------------------------------------

_names = st.text(st.characters(codec='utf-8'), min_size=1, max_size=24)


@st.composite
def _tensor(draw):
    dtype = np.dtype(draw(st.sampled_from(SUPPORTED)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
    if dtype.kind == 'f':
        elements = hnp.from_dtype(dtype, allow_nan=False, allow_infinity=False)
    else:
        elements = hnp.from_dtype(dtype)
    return draw(hnp.arrays(dtype, shape, elements=elements))


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _names,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=50, deadline=None)
@given(
    tensors=st.dictionaries(_names, _tensor(), max_size=5),
    metadata=st.dictionaries(_names, _json, max_size=4),
    kind=st.sampled_from(list(FrameKind)),
    round_index=st.integers(0, 2**32 - 1),
    sender=st.integers(0, 0xFFFF),
    fingerprint=st.binary(min_size=8, max_size=8),
)
def test_property_round_trip(tensors, metadata, kind, round_index, sender, fingerprint):
    # Act
    data = encode_frame(kind, round_index, sender, fingerprint, tensors, metadata)
    frame = decode_frame(
        data,
        expected_fingerprint=fingerprint,
        expected_shapes={n: a.shape for n, a in tensors.items()},
    )
    # Assert
    assert len(data) == encoded_size(tensors, metadata)
    assert (frame.kind, frame.round_index, frame.sender) == (kind, round_index, sender)
    assert frame.metadata == metadata
    _assert_same(frame.tensors, tensors)


@settings(max_examples=50, deadline=None)
@given(
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4)
)
def test_property_resealed_mutations_decode_or_raise_frame_error(edits):
    # Arrange: valid CRC after arbitrary edits, so semantic validation is what gets exercised.
    data = bytearray(_small_frame())
    for pos, value in edits:
        data[pos % (len(data) - CRC_SIZE)] = value
    # Act / Assert
    try:
        decode_frame(_reseal(data))
    except FrameError:
        pass


@settings(max_examples=50, deadline=None)
@given(junk=st.binary(max_size=300))
def test_property_garbage_raises_only_frame_error(junk):
    for candidate in (junk, MAGIC + b'\x01' + junk):
        with pytest.raises(FrameError):
            decode_frame(candidate)
    try:  # with a valid CRC, junk may by chance form a valid (e.g. empty CONTROL) frame
        decode_frame(_reseal(MAGIC + b'\x01' + junk + bytes(4)))
    except FrameError:
        pass
