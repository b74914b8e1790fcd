"""Compressors by config: frame sizes, reconstruction, unknown names."""

import numpy as np
import pytest

from fl_uav.compression.codec import decode_frame
from fl_uav.compression.codec_v2 import qsgd_frame_bytes
from fl_uav.compression.config import build_compressor


def _delta():
    rng = np.random.default_rng(0)
    return {'conv.weight': rng.normal(size=(4, 3, 3, 3)).astype(np.float32),
            'fc.bias': rng.normal(size=(10,)).astype(np.float32)}


def test_none_is_a_dense_v1_frame_and_exact():
    frame, decoded = build_compressor('none').compress(
        _delta(), np.random.default_rng(1), round_index=2, sender=1, fingerprint=b'f' * 8)
    assert decode_frame(frame).round_index == 2
    for name, value in _delta().items():
        np.testing.assert_array_equal(decoded[name], value)


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
def test_none_frame_size_equals_the_built_frame_length(dtype):
    # Arrange: what the engine charges without building the frame
    delta = {n: v.astype(dtype) for n, v in _delta().items()}
    compressor = build_compressor('none')
    # Act
    frame, _ = compressor.compress(delta, np.random.default_rng(1), round_index=3, sender=7,
                                   fingerprint=b'f' * 8)
    # Assert
    assert compressor.frame_size(delta) == len(frame)


def test_qsgd_frame_has_the_formula_size_and_is_unbiased_on_average():
    # Prepare
    delta, compressor = _delta(), build_compressor('qsgd', qsgd_levels=3)
    dim = sum(v.size for v in delta.values())
    # Execute
    draws = [compressor.compress(delta, np.random.default_rng(seed), round_index=1, sender=0,
                                 fingerprint=b'f' * 8) for seed in range(400)]
    # Assert
    assert all(len(frame) == qsgd_frame_bytes(dim, 3) for frame, _ in draws)
    mean = np.mean([d['conv.weight'] for _, d in draws], axis=0)
    assert np.abs(mean - delta['conv.weight']).max() < 0.35
    assert len(draws[0][0]) < dim * 4 / 4     # 3 bits per entry + header vs 32 bits


def test_unknown_method_lists_choices():
    with pytest.raises(ValueError, match='qsgd'):
        build_compressor('zip')


def _mask():
    even_filters = np.arange(4).reshape(4, 1, 1, 1) % 2 == 0     # structured: whole filters
    return {'conv.weight': np.broadcast_to(even_filters, (4, 3, 3, 3)).copy(),
            'fc.bias': np.ones(10, bool)}


@pytest.mark.parametrize('method', ['qsgd', 'range'])
def test_masked_update_sends_only_kept_entries_with_metadata(method):
    # Prepare
    from fl_uav.compression.codec_v2 import (
        decode_v2,
        metadata_section_bytes,
        qsgd_frame_bytes,
        range_frame_bytes,
    )

    delta, mask, meta = _delta(), _mask(), {'num_samples': 9, 'steps': 2}
    flat = np.concatenate([mask['conv.weight'].ravel(), mask['fc.bias']])
    kept = int(flat.sum())
    compressor = build_compressor(method, qsgd_levels=3, range_bits=4, per_layer=True)
    # Execute
    frame, decoded = compressor.compress(delta, np.random.default_rng(3), round_index=4,
                                         sender=2, fingerprint=b'f' * 8, mask=mask,
                                         metadata=meta)
    # Assert
    formula = (qsgd_frame_bytes(kept, 3, num_buckets=2, mask=flat) if method == 'qsgd'
               else range_frame_bytes(kept, 4, num_buckets=2, mask=flat))
    assert len(frame) == formula + metadata_section_bytes(meta)
    parsed = decode_v2(frame)
    assert parsed.metadata == meta and parsed.update.payload.bucket_sizes == (kept - 10, 10)
    assert np.all(decoded['conv.weight'][~mask['conv.weight']] == 0)
    assert np.any(decoded['conv.weight'][mask['conv.weight']] != 0)


def test_none_with_mask_zeroes_the_pruned_entries_and_keeps_metadata():
    delta, mask = _delta(), _mask()
    frame, decoded = build_compressor('none').compress(
        delta, np.random.default_rng(1), round_index=1, sender=0, fingerprint=b'f' * 8,
        mask=mask, metadata={'num_samples': 3})
    parsed = decode_frame(frame)
    assert parsed.metadata == {'num_samples': 3}
    np.testing.assert_array_equal(parsed.tensors['conv.weight'],
                                  np.where(mask['conv.weight'], delta['conv.weight'], 0))
    np.testing.assert_array_equal(decoded['fc.bias'], delta['fc.bias'])


def test_mask_with_other_names_is_refused():
    with pytest.raises(ValueError, match='mask'):
        build_compressor('qsgd').compress(_delta(), np.random.default_rng(0), round_index=1,
                                          sender=0, fingerprint=b'f' * 8,
                                          mask={'fc.bias': np.ones(10, bool)})
