"""Compressors by config: frame sizes, reconstruction, unknown names."""

import numpy as np
import pytest

from fl_uav.compression.codec import decode_frame
from fl_uav.compression.codec_v2 import qsgd_frame_bytes
from fl_uav.compression.compressor import build_compressor


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
