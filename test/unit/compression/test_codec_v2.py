"""Unit tests for wire format v2 (fl_uav.compression.bitpack and codec_v2).

Malformed frames are made by editing encoded frames at the offsets documented in
docs/wire_format.md ("Version 2") and recomputing the CRC32, so the tests also check the
documented layout.
"""

from __future__ import annotations

import math
import struct
import zlib

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from fl_uav.compression import bitpack
from fl_uav.compression.codec import DecodeLimits
from fl_uav.compression.codec_v2 import (
    ALL_REASONS_V2,
    FLAG_METADATA,
    HEADER_V2_SIZE,
    SUBHEADER_SIZE,
    FrameKindV2,
    decode_lgc_parts,
    decode_v2,
    encode_lgc,
    encode_qsgd,
    encode_range,
    encode_raw,
    lgc_frame_bytes,
    metadata_section_bytes,
    qsgd_frame_bytes,
    range_frame_bytes,
    raw_frame_bytes,
    split_frames,
)
from fl_uav.compression.errors import FrameError
from fl_uav.compression.lgc import decode as lgc_decode
from fl_uav.compression.lgc import layered_top_k
from fl_uav.compression.quantization import (
    ceoafl_payload_bits,
    qsgd_dequantize,
    qsgd_payload_bits,
    qsgd_quantize,
    range_dequantize,
    range_payload_bits,
    range_quantize,
)

FP = bytes(range(8))
KW = {'round_index': 7, 'sender': 3, 'fingerprint': FP}
FAST = settings(max_examples=50, deadline=None)
CRC_OFFSET = -4


def recrc(frame: bytes | bytearray) -> bytes:
    """Recompute the trailing CRC32 after an edit (the checks behind the CRC are under test)."""
    body = bytes(frame[:CRC_OFFSET])
    return body + struct.pack('<I', zlib.crc32(body))


def reason_of(frame: bytes, **kwargs) -> str:
    with pytest.raises(FrameError) as info:
        decode_v2(frame, **kwargs)
    return info.value.reason


def masked_vector(rng: np.random.Generator, dim: int,
                  keep: float) -> tuple[np.ndarray, np.ndarray]:
    mask = rng.random(dim) < keep
    vector = rng.standard_normal(dim).astype(np.float32)
    vector[~mask] = 0.0
    return vector, mask


# ------------------------------------------------------------------------------- bitpack


@FAST
@given(width=st.integers(1, 32), count=st.integers(0, 200), seed=st.integers(0, 2**32 - 1),
       offset=st.integers(0, 15))
def test_pack_uint_round_trip_all_widths(width, count, seed, offset):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**width, size=count, dtype=np.uint64)
    data = bitpack.pack_uint(values, width)
    assert len(data) == bitpack.packed_size(count, width) == math.ceil(count * width / 8)
    assert np.array_equal(bitpack.unpack_uint(data, width, count), values)
    writer = bitpack.BitWriter()
    writer.write_uint(np.zeros(offset, np.uint8), 1)
    writer.write_uint(values, width)
    assert writer.nbits == offset + count * width
    got = bitpack.unpack_uint(writer.getvalue(), width, count, bit_offset=offset)
    assert np.array_equal(got, values)


@pytest.mark.parametrize('width', range(1, 33))
def test_pack_uint_extremes_and_overflow(width):
    top = 2**width - 1
    values = np.array([0, top, top, 0, 1], np.uint64)
    assert np.array_equal(bitpack.unpack_uint(bitpack.pack_uint(values, width), width, 5), values)
    with pytest.raises(ValueError):
        bitpack.pack_uint(np.array([top + 1], np.uint64), width)


def test_pack_uint_is_lsb_first():
    assert bitpack.pack_uint(np.array([1, 2, 3]), 2) == bytes([0b111001])
    assert bitpack.pack_uint(np.array([0x12345678]), 32) == struct.pack('<I', 0x12345678)
    assert bitpack.pack_bitmap(np.array([True, False, False, True])) == bytes([0b1001])


def test_short_stream_raises_before_allocating():
    with pytest.raises(bitpack.BitstreamError):
        bitpack.unpack_uint(b'\x00\x00', 3, 6)
    with pytest.raises(ValueError):
        bitpack.pack_uint(np.array([1]), 0)
    with pytest.raises(ValueError):
        bitpack.pack_uint(np.array([1]), 33)


def _masks():
    rng = np.random.default_rng(5)
    alternating = np.arange(1000) % 2 == 1
    return {
        'empty': np.zeros(0, bool),
        'one_true': np.ones(1, bool),
        'all_true': np.ones(1000, bool),
        'all_false': np.zeros(1000, bool),
        'alternating': alternating,
        'random_sparse': rng.random(5000) < 0.01,
        'random_half': rng.random(5000) < 0.5,
        'blocks': np.repeat(np.arange(20) % 2 == 0, 97),
    }


@pytest.mark.parametrize('name', list(_masks()))
def test_mask_round_trip_and_size(name):
    mask = _masks()[name]
    data = bitpack.encode_mask(mask)
    assert len(data) == math.ceil(bitpack.mask_bits(mask) / 8)
    assert bitpack.mask_bits(mask) == 1 + min(mask.size, bitpack.rle_bits(mask))
    back = bitpack.decode_mask(data, mask.size)
    assert back.dtype == np.bool_ and np.array_equal(back, mask)
    assert np.array_equal(bitpack.unpack_bitmap(bitpack.pack_bitmap(mask), mask.size), mask)


def test_mask_picks_smaller_encoding():
    masks = _masks()
    for name in ('all_true', 'all_false', 'random_sparse', 'blocks'):
        assert bitpack.encode_mask(masks[name])[0] & 1 == 1, name  # RLE flag
    for name in ('alternating', 'random_half'):
        assert bitpack.encode_mask(masks[name])[0] & 1 == 0, name  # bitmap flag
    assert list(bitpack.rle_runs(np.array([True, True, False]))) == [0, 2, 1]
    assert list(bitpack.rle_runs(np.array([False, True]))) == [1, 1]


@FAST
@given(st.lists(st.booleans(), max_size=300), st.integers(1, 40))
def test_mask_round_trip_hypothesis(flags, repeat):
    mask = np.repeat(np.array(flags, bool), repeat)
    assert np.array_equal(bitpack.decode_mask(bitpack.encode_mask(mask), mask.size), mask)


def _rle(width, runs):
    writer = bitpack.BitWriter()
    writer.write_uint(np.array([1]), 1)
    writer.write_uint(np.array([width - 1]), 5)
    writer.write_uint(np.array([len(runs)]), 32)
    writer.write_uint(np.array(runs, np.uint64), width)
    return writer.getvalue()


@pytest.mark.parametrize('width,runs', [
    (6, [30, 40]),  # sum != dim
    (7, [0, 0, 101]),  # empty later run
    (7, [100, 2]),  # sum != dim
    (6, [50, 0, 51]),  # empty later run
    (7, [50, 51]),  # wider than the longest run needs
    (2, [3] * 33 + [2]),  # 37 + 34 * 2 bits is not smaller than the 101-bit bitmap
])
def test_bad_rle_is_rejected(width, runs):
    assert np.array_equal(bitpack.decode_mask(_rle(6, [50, 51]), 101), np.arange(101) >= 50)
    with pytest.raises(bitpack.BitstreamError):
        bitpack.decode_mask(_rle(width, runs), 101)


def test_rle_huge_run_count_rejected_without_allocation():
    data = _rle(8, [10])[:1] + b'\xff' * 8
    with pytest.raises(bitpack.BitstreamError):
        bitpack.decode_mask(data, 10)


# ------------------------------------------------------------------------------- round trips


@FAST
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(0, 400), s=st.integers(1, 300),
       keep=st.sampled_from([None, 0.0, 0.3, 0.9, 1.0]), nb=st.integers(1, 3))
def test_qsgd_round_trip(seed, dim, s, keep, nb):
    rng = np.random.default_rng(seed)
    vector, mask = masked_vector(rng, dim, 1.0 if keep is None else keep)
    kept = vector if keep is None else vector[mask]
    cuts = np.sort(rng.integers(0, kept.size + 1, nb - 1))
    buckets = np.diff(np.concatenate([[0], cuts, [kept.size]])).tolist()
    payload = qsgd_quantize(kept, s, rng, buckets=buckets)
    send_mask = None if keep is None else mask
    frame = encode_qsgd(payload, mask=send_mask, **KW)
    assert len(frame) == qsgd_frame_bytes(kept.size, s, num_buckets=nb, mask=send_mask)
    decoded = decode_v2(frame, expected_fingerprint=FP)
    assert (decoded.kind, decoded.round_index, decoded.sender) == (FrameKindV2.QSGD, 7, 3)
    got = decoded.update.payload
    assert got.s == s and got.bucket_sizes == payload.bucket_sizes
    assert np.array_equal(got.norms, payload.norms)
    assert np.array_equal(got.negative, payload.negative)
    assert np.array_equal(got.levels, payload.levels) and got.levels.dtype == payload.levels.dtype
    assert np.array_equal(qsgd_dequantize(got), qsgd_dequantize(payload))
    dense = decoded.update.dense()
    assert dense.shape == (dim,)
    if send_mask is not None:
        assert np.array_equal(decoded.update.mask, mask)
        assert np.array_equal(dense[mask], qsgd_dequantize(payload))
        assert not dense[~mask].any()


@FAST
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(0, 300), bits=st.integers(1, 32),
       keep=st.sampled_from([None, 0.2, 1.0]), nb=st.integers(1, 3))
def test_range_round_trip(seed, dim, bits, keep, nb):
    rng = np.random.default_rng(seed)
    vector, mask = masked_vector(rng, dim, 1.0 if keep is None else keep)
    kept = vector if keep is None else vector[mask]
    cuts = np.sort(rng.integers(0, kept.size + 1, nb - 1))
    buckets = np.diff(np.concatenate([[0], cuts, [kept.size]])).tolist()
    payload = range_quantize(kept, bits, rng, buckets=buckets)
    send_mask = None if keep is None else mask
    frame = encode_range(payload, mask=send_mask, **KW)
    assert len(frame) == range_frame_bytes(kept.size, bits, num_buckets=nb, mask=send_mask)
    update = decode_v2(frame).update
    got = update.payload
    assert np.array_equal(got.low, payload.low) and np.array_equal(got.high, payload.high)
    assert np.array_equal(got.index, payload.index) and got.index.dtype == payload.index.dtype
    assert np.array_equal(got.negative, payload.negative)
    assert np.array_equal(range_dequantize(got), range_dequantize(payload))
    assert update.dense().shape == (dim,)


@FAST
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(0, 300),
       keep=st.sampled_from([None, 0.0, 0.5, 1.0]))
def test_raw_round_trip(seed, dim, keep):
    rng = np.random.default_rng(seed)
    vector, mask = masked_vector(rng, dim, 1.0 if keep is None else keep)
    send_mask = None if keep is None else mask
    values = vector if keep is None else vector[mask]
    frame = encode_raw(values, mask=send_mask, **KW)
    assert len(frame) == raw_frame_bytes(values.size, mask=send_mask)
    update = decode_v2(frame).update
    assert update.values.tobytes() == values.tobytes()
    assert np.array_equal(update.dense(), vector)


@FAST
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(1, 300), nlayers=st.integers(1, 4))
def test_lgc_round_trip(seed, dim, nlayers):
    rng = np.random.default_rng(seed)
    vector = rng.standard_normal(dim).astype(np.float32)
    ks = rng.integers(0, dim // nlayers + 1, nlayers).tolist()
    layers = layered_top_k(vector, ks)
    frames = encode_lgc(layers, dim, **KW)
    assert [len(f) for f in frames] == [lgc_frame_bytes(k) for k in ks]
    parts, errors = decode_lgc_parts(frames, expected_fingerprint=FP)
    assert errors == []
    for part, layer in zip(parts, layers):
        assert part.num_layers == nlayers and part.dim == dim
        assert part.layer.layer_id == layer.layer_id and part.layer.rank_lo == layer.rank_lo
        assert np.array_equal(part.layer.indices, layer.indices)
        assert part.layer.values.tobytes() == layer.values.tobytes()
    assert np.array_equal(lgc_decode([p.layer for p in parts], dim), lgc_decode(layers, dim))


# ------------------------------------------------------------------------------- sizes


@pytest.mark.parametrize('dim', [0, 1, 7, 8, 9, 63, 1000, 4097])
@pytest.mark.parametrize('s', [1, 2, 3, 4, 7, 15, 16, 255])
def test_qsgd_size_equals_bit_formula(dim, s):
    rng = np.random.default_rng(dim * 1000 + s)
    vector = rng.standard_normal(dim).astype(np.float32)
    frame = encode_qsgd(qsgd_quantize(vector, s, rng), **KW)
    fixed = HEADER_V2_SIZE + SUBHEADER_SIZE[FrameKindV2.QSGD] + 4 + 4
    assert len(frame) == fixed + math.ceil(qsgd_payload_bits(dim, s) / 8)
    assert len(frame) == qsgd_frame_bytes(dim, s)


@pytest.mark.parametrize('dim,keep,s', [(10, 0.5, 3), (1000, 0.1, 3), (1000, 0.9, 15),
                                        (4096, 0.5, 1), (5000, 1.0, 7)])
def test_masked_sizes_equal_ceoafl_formula(dim, keep, s):
    """2CEOAFL formula under eq. (12), with the p mask bits replaced by the encoded mask."""
    rng = np.random.default_rng(dim)
    vector, mask = masked_vector(rng, dim, keep)
    k = int(mask.sum())
    mbits = bitpack.mask_bits(mask)
    quant = encode_qsgd(qsgd_quantize(vector[mask], s, rng), mask=mask, **KW)
    exact = ceoafl_payload_bits(dim, k, raw=False, s=s, paper=False, with_mask=False)
    fixed_q = HEADER_V2_SIZE + SUBHEADER_SIZE[FrameKindV2.QSGD] + 4 + 4
    assert len(quant) == fixed_q + math.ceil((exact + mbits) / 8)
    raw = encode_raw(vector[mask], mask=mask, **KW)
    raw_bits = ceoafl_payload_bits(dim, k, raw=True, with_mask=False) - k  # no redundant sign
    assert len(raw) == HEADER_V2_SIZE + SUBHEADER_SIZE[FrameKindV2.RAW] + 4 + math.ceil(
        (raw_bits + mbits) / 8)
    assert mbits <= dim + 1


@pytest.mark.parametrize('dim,bits', [(1, 1), (100, 2), (333, 5), (1024, 8), (77, 32)])
def test_range_size_equals_feddpq_formula(dim, bits):
    rng = np.random.default_rng(bits)
    frame = encode_range(range_quantize(rng.standard_normal(dim), bits, rng), **KW)
    fixed = HEADER_V2_SIZE + SUBHEADER_SIZE[FrameKindV2.RANGE] + 4 + 4
    assert len(frame) == fixed + math.ceil(range_payload_bits(dim, bits) / 8)


def test_small_cnn_example_sizes():
    """The numbers quoted in docs/wire_format.md (SmallCnn, 156,074 parameters, s = 3)."""
    dim, s = 156_074, 3
    rng = np.random.default_rng(0)
    vector = rng.standard_normal(dim).astype(np.float32)
    dense = encode_qsgd(qsgd_quantize(vector, s, rng), **KW)
    assert len(dense) == 51 + math.ceil(qsgd_payload_bits(dim, s) / 8) == 58_583
    mask = np.zeros(dim, bool)
    mask[: dim // 2] = True  # one contiguous block: RLE wins
    vector[~mask] = 0.0
    quant = encode_qsgd(qsgd_quantize(vector[mask], s, rng), mask=mask, **KW)
    assert bitpack.mask_bits(mask) == 1 + 37 + 3 * 17  # runs (0, 78037, 78037)
    assert len(quant) == qsgd_frame_bytes(dim // 2, s, mask=mask) == 51 + math.ceil(
        (32 + 89 + 78_037 * 3) / 8) == 29_330


# ------------------------------------------------------------------------------- corruption


def small_frames() -> dict[str, bytes]:
    rng = np.random.default_rng(11)
    vector, mask = masked_vector(rng, 24, 0.5)
    return {
        'qsgd': encode_qsgd(qsgd_quantize(vector[mask], 3, rng), mask=mask, **KW),
        'qsgd_dense': encode_qsgd(qsgd_quantize(vector, 2, rng, buckets=[10, 14]), **KW),
        'range': encode_range(range_quantize(vector[mask], 3, rng), mask=mask, **KW),
        'raw': encode_raw(vector[mask], mask=mask, **KW),
        'lgc': encode_lgc(layered_top_k(vector, [3, 2]), 24, **KW)[0],
        'qsgd_metadata': encode_qsgd(qsgd_quantize(vector[mask], 3, rng), mask=mask,
                                     metadata={'num_samples': 7, 'loss': 0.5}, **KW),
    }


@pytest.mark.parametrize('name', list(small_frames()))
def test_every_truncation_is_a_typed_error(name):
    frame = small_frames()[name]
    for cut in range(len(frame)):
        reason = reason_of(frame[:cut])
        assert reason == 'truncated', (cut, reason)
    assert reason_of(frame + b'\x00') == 'length'


@pytest.mark.parametrize('name', list(small_frames()))
def test_every_flipped_byte_is_a_typed_error(name):
    frame = small_frames()[name]
    for pos in range(len(frame)):
        for xor in (0x01, 0x80, 0xFF):
            bad = bytearray(frame)
            bad[pos] ^= xor
            assert reason_of(bytes(bad)) in ALL_REASONS_V2


@pytest.mark.parametrize('name', list(small_frames()))
def test_flipped_bytes_behind_a_valid_crc_never_escape(name):
    """Edits with a recomputed CRC reach the field checks: a FrameError or a valid decode."""
    frame = small_frames()[name]
    for pos in range(4, len(frame) - 4):
        for xor in (0x01, 0x10, 0x80, 0xFF):
            bad = bytearray(frame)
            bad[pos] ^= xor
            try:
                decoded = decode_v2(recrc(bad))
            except FrameError as exc:
                assert exc.reason in ALL_REASONS_V2
            else:
                assert np.isfinite(getattr(decoded.update, 'dense', lambda: np.zeros(0))()).all()


def test_header_errors():
    frame = small_frames()['qsgd']
    assert reason_of(b'XLUV' + frame[4:]) == 'bad_magic'
    assert reason_of(frame[:4] + b'\x01' + frame[5:]) == 'version'
    assert reason_of(recrc(frame[:5] + b'\x09' + frame[6:])) == 'kind'
    assert reason_of(recrc(frame[:6] + b'\x02' + frame[7:])) == 'header'   # bit 0 = metadata
    assert reason_of(frame, expected_fingerprint=bytes(8)) == 'fingerprint'
    assert reason_of(frame, limits=DecodeLimits(max_frame_bytes=len(frame) - 1)) == 'oversized'
    assert reason_of(frame, limits=DecodeLimits(max_elements=23)) == 'oversized'
    huge = bytearray(frame)
    huge[22:26] = struct.pack('<I', 2**31)
    assert reason_of(bytes(huge)) == 'oversized'


def _qsgd_frame(levels, s=2, norm=1.0):
    from fl_uav.compression.quantization import QsgdPayload

    levels = np.asarray(levels, np.uint8)
    payload = QsgdPayload(s=s, bucket_sizes=(levels.size,), norms=np.float32([norm]),
                          negative=np.zeros(levels.size, bool), levels=levels)
    return encode_qsgd(payload, **KW)


# body offsets (docs/wire_format.md): QSGD stream starts at 26 + 17 + 4·B.
QSGD_STREAM = HEADER_V2_SIZE + 17 + 4


def test_level_above_s_is_rejected():
    frame = bytearray(_qsgd_frame([2, 2, 2, 2]))
    # stream: 32 norm bits, 4 sign bits, then 2-bit levels; level 0 = stream bits 36..37.
    frame[QSGD_STREAM + 4] |= 0b0011_0000
    assert reason_of(recrc(frame)) == 'levels'


@pytest.mark.parametrize('name', ['qsgd', 'qsgd_dense', 'range', 'raw', 'lgc'])
def test_a_dim_other_than_the_expected_is_shape_before_the_stream_is_read(name):
    # Arrange: every kind (dim 24), and a QSGD frame whose level 0 is out of range
    frame = small_frames()[name]
    damaged = bytearray(_qsgd_frame([2, 2, 2, 2]))
    damaged[QSGD_STREAM + 4] |= 0b0011_0000
    # Act + Assert: the expected dim decodes, another is refused by its dim alone
    assert decode_v2(frame, expected_dim=24).update.dim == 24
    assert reason_of(frame, expected_dim=23) == 'shape'
    assert reason_of(recrc(damaged)) == 'levels'
    assert reason_of(recrc(damaged), expected_dim=5) == 'shape'      # the stream unread
    assert reason_of(frame, expected_dim=23,
                     limits=DecodeLimits(max_elements=23)) == 'oversized'   # limit first


def test_nan_or_negative_norm_is_rejected():
    frame = bytearray(_qsgd_frame([1, 2, 0, 1]))
    frame[QSGD_STREAM:QSGD_STREAM + 4] = struct.pack('<f', float('nan'))
    assert reason_of(recrc(frame)) == 'nonfinite'
    frame[QSGD_STREAM:QSGD_STREAM + 4] = struct.pack('<f', float('inf'))
    assert reason_of(recrc(frame)) == 'nonfinite'
    frame[QSGD_STREAM:QSGD_STREAM + 4] = struct.pack('<f', -1.0)
    assert reason_of(recrc(frame)) == 'body'
    assert np.isfinite(decode_v2(_qsgd_frame([2, 2], norm=3.4e38)).update.dense()).all()


def test_mask_popcount_mismatch_is_rejected():
    mask = np.arange(16) % 2 == 1  # alternating: bitmap encoding
    frame = bytearray(encode_raw(np.ones(8, np.float32), mask=mask, **KW))
    start = HEADER_V2_SIZE + 9 + 32  # raw stream: 8 float32, then flag bit, then bitmap
    assert frame[start] & 1 == 0
    frame[start] |= 0b10  # mask entry 0: False -> True
    assert reason_of(recrc(frame)) == 'mask'
    frame[start] &= ~0b110 & 0xFF  # entries 0 and 1 both False: popcount 7
    assert reason_of(recrc(frame)) == 'mask'


def test_kept_count_inconsistent_is_rejected():
    frame = bytearray(_qsgd_frame([1, 1, 1, 1]))
    frame[HEADER_V2_SIZE + 4:HEADER_V2_SIZE + 8] = struct.pack('<I', 3)  # kept 3, dim 4, no mask
    assert reason_of(recrc(frame)) == 'body'
    frame = bytearray(_qsgd_frame([1, 1, 1, 1]))
    frame[HEADER_V2_SIZE + 12:HEADER_V2_SIZE + 16] = struct.pack('<I', 10**6)  # num_buckets
    assert reason_of(recrc(frame)) == 'oversized'


def test_lgc_index_errors():
    vector = np.arange(1, 11, dtype=np.float32)
    layers = layered_top_k(vector, [3, 3])
    frame = encode_lgc(layers, 10, **KW)[0]
    start = HEADER_V2_SIZE + 14
    for index in (10, -1, 2**31 - 1):
        bad = bytearray(frame)
        bad[start:start + 4] = struct.pack('<i', index)
        assert reason_of(recrc(bad)) == 'index'
    bad = bytearray(frame)
    bad[start:start + 4] = bad[start + 4:start + 8]  # repeated index
    assert reason_of(recrc(bad)) == 'index'
    bad = bytearray(frame)
    bad[HEADER_V2_SIZE + 2:HEADER_V2_SIZE + 6] = struct.pack('<I', 8)  # rank_lo 8 + k 3 > 10
    assert reason_of(recrc(bad)) == 'index'
    bad = bytearray(frame)
    bad[start + 12:start + 16] = struct.pack('<f', float('nan'))  # first value
    assert reason_of(recrc(bad)) == 'nonfinite'


def test_lgc_lost_or_corrupt_layer_leaves_the_others_usable():
    rng = np.random.default_rng(3)
    dim = 500
    vector = rng.standard_normal(dim).astype(np.float32)
    layers = layered_top_k(vector, [10, 20, 40])
    frames = encode_lgc(layers, dim, **KW)

    parts, errors = decode_lgc_parts([frames[0], frames[2]])  # layer 1 lost
    assert errors == [] and [p.layer.layer_id for p in parts] == [0, 2]
    assert np.array_equal(lgc_decode([p.layer for p in parts], dim),
                          lgc_decode([layers[0], layers[2]], dim))

    corrupt = bytearray(frames[1])
    corrupt[60] ^= 0x40
    truncated = frames[2][:-7]
    parts, errors = decode_lgc_parts([frames[0], bytes(corrupt), truncated])
    assert [p.layer.layer_id for p in parts] == [0]
    assert [(pos, exc.reason) for pos, exc in errors] == [(1, 'crc'), (2, 'truncated')]
    assert np.array_equal(lgc_decode([parts[0].layer], dim), lgc_decode([layers[0]], dim))

    other_round = encode_lgc(layers, dim, round_index=8, sender=3, fingerprint=FP)[1]
    parts, errors = decode_lgc_parts([frames[0], other_round, frames[0]])
    assert [p.layer.layer_id for p in parts] == [0]
    assert [exc.reason for _, exc in errors] == ['body', 'body']


def test_encoder_rejects_bad_arguments():
    rng = np.random.default_rng(0)
    payload = qsgd_quantize(rng.standard_normal(4), 3, rng)
    with pytest.raises(ValueError):
        encode_qsgd(payload, mask=np.array([True, False, False, False]), **KW)
    with pytest.raises(ValueError):
        encode_qsgd(payload, round_index=-1, sender=0, fingerprint=FP)
    with pytest.raises(ValueError):
        encode_qsgd(payload, round_index=0, sender=0, fingerprint=b'short')
    with pytest.raises(ValueError):
        encode_qsgd(_bad_levels_payload(), **KW)
    with pytest.raises(ValueError):
        encode_lgc(layered_top_k(np.ones(4, np.float32), [2]), 1, **KW)


def _bad_levels_payload():
    from fl_uav.compression.quantization import QsgdPayload

    return QsgdPayload(s=2, bucket_sizes=(2,), norms=np.float32([1.0]),
                       negative=np.zeros(2, bool), levels=np.array([3, 0], np.uint8))


# ------------------------------------------------------------------------------- metadata

METADATA = {'num_samples': 12, 'steps': 4, 'train_loss': 1.25, 'class_counts': [3, 0, 9]}


def _with_and_without_metadata(rng):
    vector, mask = masked_vector(rng, 300, 0.4)
    encoders = {
        'qsgd': (lambda **kw: encode_qsgd(qsgd_quantize(vector[mask], 3,
                                                        np.random.default_rng(1)),
                                          mask=mask, **kw),
                 qsgd_frame_bytes(int(mask.sum()), 3, mask=mask)),
        'range': (lambda **kw: encode_range(range_quantize(vector, 4, np.random.default_rng(1)),
                                            **kw),
                  range_frame_bytes(vector.size, 4)),
        'raw': (lambda **kw: encode_raw(vector[mask], mask=mask, **kw),
                raw_frame_bytes(int(mask.sum()), mask=mask)),
    }
    return {name: (enc(**KW), enc(metadata=METADATA, **KW), size)
            for name, (enc, size) in encoders.items()}


@pytest.mark.parametrize('name', ['qsgd', 'range', 'raw'])
def test_metadata_section_adds_exactly_its_bytes_and_round_trips(name):
    # Prepare
    plain, with_meta, formula = _with_and_without_metadata(np.random.default_rng(5))[name]
    json_bytes = len(b'{"num_samples":12,"steps":4,"train_loss":1.25,"class_counts":[3,0,9]}')
    # Execute
    decoded_plain, decoded = decode_v2(plain), decode_v2(with_meta)
    # Assert
    assert len(plain) == formula and plain[6:8] == b'\x00\x00'
    assert metadata_section_bytes(METADATA) == 4 + json_bytes
    assert len(with_meta) == formula + 4 + json_bytes
    assert struct.unpack_from('<H', with_meta, 6)[0] == FLAG_METADATA
    assert decoded.metadata == METADATA and decoded_plain.metadata == {}
    np.testing.assert_array_equal(decoded.update.dense(), decoded_plain.update.dense())


def _set_metadata_section(frame: bytes, section: bytes) -> bytes:
    """Replace a metadata-carrying frame's section (u32 length + JSON) and fix body_len."""
    (meta_len,) = struct.unpack_from('<I', frame, HEADER_V2_SIZE)
    rest = frame[HEADER_V2_SIZE + 4 + meta_len:-4]
    head = bytearray(frame[:HEADER_V2_SIZE])
    head[22:26] = struct.pack('<I', len(section) + len(rest))
    return recrc(bytes(head) + section + rest + b'\x00' * 4)


@pytest.mark.parametrize('section, reason', [
    (struct.pack('<I', 0), 'metadata'),                       # flag set, empty section
    (struct.pack('<I', 7) + b'{"a":1', 'metadata'),           # length runs into the sub-header
    (struct.pack('<I', 5) + b'[1,2]', 'metadata'),            # not an object
    (struct.pack('<I', 9) + b'{"a":NaN}', 'metadata'),        # non-finite number
    (struct.pack('<I', 10**6) + b'{}', 'oversized'),          # beyond max_metadata_bytes
    (struct.pack('<I', 60_000) + b'{}', 'body'),              # runs past the body
])
def test_malformed_metadata_sections_are_typed_errors(section, reason):
    # Prepare
    frame = small_frames()['qsgd_metadata']
    # Execute
    bad = _set_metadata_section(frame, section)
    # Assert
    assert reason_of(bad) == reason


def test_a_body_too_short_for_the_metadata_length_is_a_body_error():
    head = bytearray(small_frames()['qsgd_metadata'][:HEADER_V2_SIZE])
    head[22:26] = struct.pack('<I', 2)
    assert reason_of(recrc(bytes(head) + b'\x01\x00' + b'\x00' * 4)) == 'body'


def test_every_lgc_layer_carries_the_metadata_and_back_to_back_frames_split():
    # Prepare
    vector = np.random.default_rng(8).standard_normal(50).astype(np.float32)
    layers = layered_top_k(vector, [3, 5, 7])
    # Execute
    frames = encode_lgc(layers, 50, metadata=METADATA, **KW)
    parts = split_frames(b''.join(frames))
    # Assert
    assert parts == frames
    assert [len(f) for f in frames] == [lgc_frame_bytes(k) + metadata_section_bytes(METADATA)
                                        for k in (3, 5, 7)]
    assert all(decode_v2(f).metadata == METADATA for f in parts)
    with pytest.raises(FrameError) as cut:
        split_frames(b''.join(frames)[:-1])
    with pytest.raises(FrameError) as junk:
        split_frames(frames[0] + b'junk')
    assert (cut.value.reason, junk.value.reason) == ('truncated', 'bad_magic')
