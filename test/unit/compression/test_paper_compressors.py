"""2CEOAFL's raw-or-quantized upload and LGC over lossy channels, as config-built compressors."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.compression.codec_v2 import lgc_frame_bytes, raw_frame_bytes
from fl_uav.compression.config import CompressionConfig, build_compressor
from fl_uav.compression.paper_compressors import CeoaflCompressor, LgcCompressor
from fl_uav.compression.quantization import flatten

FP = b'\x01' * 8


def _delta(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {'a.weight': rng.normal(size=(6, 5)).astype(np.float32),
            'a.bias': rng.normal(size=6).astype(np.float32)}


def _compress(compressor, delta, seed, **kwargs):
    return compressor.compress(delta, np.random.default_rng(seed), round_index=1, sender=2,
                               fingerprint=FP, **kwargs)


def test_config_builds_the_paper_compressors_and_names_bad_values():
    assert isinstance(CompressionConfig(method='ceoafl').build(), CeoaflCompressor)
    assert isinstance(CompressionConfig(method='lgc').build(), LgcCompressor)
    with pytest.raises(ValueError, match='lgc_drop_probabilities'):
        CompressionConfig(method='lgc', lgc_channel_entries=(2, 3),
                          lgc_drop_probabilities=(0.5,))
    with pytest.raises(ValueError, match='raw_probability'):
        CompressionConfig(method='ceoafl', raw_probability=1.5)


def test_ceoafl_raw_branch_sends_kept_entries_and_mask_exactly():
    # Arrange
    delta = _delta(0)
    mask = {n: np.abs(v) > 0.5 for n, v in delta.items()}
    masked = {n: np.where(mask[n], v, np.float32(0)) for n, v in delta.items()}
    flat_mask = flatten(mask)[0] != 0
    # Act
    compressor = CeoaflCompressor(levels=3, raw_probability=1.0)
    frame, decoded = _compress(compressor, masked, 0, mask=mask)
    # Assert
    assert compressor.last_raw is True
    assert len(frame) == raw_frame_bytes(int(flat_mask.sum()), mask=flat_mask)
    for name in delta:
        np.testing.assert_array_equal(decoded[name], masked[name])


def test_ceoafl_takes_the_per_call_raw_probability_as_the_papers_q():
    delta = _delta(1)
    compressor = CeoaflCompressor(levels=3)   # q from each call (q = δ in the paper)
    choices = [(_compress(compressor, delta, s, raw_probability=0.3), compressor.last_raw)[1]
               for s in range(200)]
    assert 0.2 < np.mean(choices) < 0.4
    _compress(compressor, delta, 0, raw_probability=0.0)
    assert compressor.last_raw is False


def test_ceoafl_is_unbiased():
    # Arrange
    delta = _delta(2)
    compressor = CeoaflCompressor(levels=3, raw_probability=0.2)
    # Act
    draws = np.array([flatten(_compress(compressor, delta, s)[1])[0] for s in range(3000)],
                     np.float64)
    # Assert: every coordinate's mean within 4 standard errors of the true value (fixed seeds)
    standard_error = draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
    error = np.abs(draws.mean(axis=0) - flatten(delta)[0])
    assert np.all(error <= 4 * standard_error + 1e-6), (error / standard_error).max()
    assert standard_error.max() < 0.03   # the bound is tight, not vacuous


def test_lgc_keeps_sent_plus_residual_equal_to_the_accumulated_updates_under_drops():
    # Arrange
    compressor = LgcCompressor((3, 5, 7), (0.3, 0.5, 0.7))
    accumulated = np.zeros(36, np.float64)
    received_total = np.zeros(36, np.float64)
    # Act
    for r in range(12):
        delta = _delta(10 + r)
        frame, decoded = _compress(compressor, delta, r)
        accumulated += flatten(delta)[0]
        received_total += flatten(decoded)[0]
        # Assert: every round's invariant and the charge for every sent layer frame
        residual = compressor.state_dict()['residual'].astype(np.float64)
        np.testing.assert_allclose(received_total + residual, accumulated, atol=1e-5)
        assert len(frame) == sum(lgc_frame_bytes(k) for k in (3, 5, 7))
    assert np.count_nonzero(compressor.state_dict()['residual']) > 0


def test_lgc_a_channel_that_always_drops_never_delivers_its_band():
    compressor = LgcCompressor((4, 6), (0.0, 1.0))
    _, decoded = _compress(compressor, _delta(3), 0)
    assert compressor.last_received == [0]
    assert np.count_nonzero(flatten(decoded)[0]) == 4


def test_lgc_a_lost_upload_keeps_everything_in_the_residual():
    # Arrange
    compressor = LgcCompressor((4, 6))
    delta = _delta(4)
    # Act
    _compress(compressor, delta, 0)
    compressor.upload_lost()
    # Assert
    np.testing.assert_allclose(compressor.state_dict()['residual'], flatten(delta)[0])


def test_lgc_an_encode_that_fails_keeps_the_update_and_does_not_block_the_next_round():
    # Arrange: metadata the codec refuses (NaN), as a bad telemetry value would give
    compressor = LgcCompressor((4, 6))
    delta = _delta(5)
    # Act
    with pytest.raises(ValueError):
        _compress(compressor, delta, 0, metadata={'train_loss': float('nan')})
    residual = compressor.state_dict()['residual'].copy()
    sent, _ = _compress(compressor, _delta(6), 1, metadata={'train_loss': 0.5})
    # Assert: nothing left, so the whole update stays in the residual; the next round encodes
    np.testing.assert_allclose(residual, flatten(delta)[0])
    assert len(sent) > 0


def test_lgc_upload_used_keeps_only_the_used_layers_acknowledged():
    # Arrange
    compressor = LgcCompressor((4, 6))
    delta = _delta(4)
    u = flatten(delta)[0]
    # Act: both layers were sent; the server summed only layer 1
    _compress(compressor, delta, 0)
    compressor.upload_used([1])
    compressor.upload_used([])          # settled: a second report changes nothing
    # Assert: e = u − layer 1, which holds the 6 entries ranked after the top 4
    residual = compressor.state_dict()['residual']
    order = np.argsort(-np.abs(u), kind='stable')
    np.testing.assert_allclose(residual[order[:4]], u[order[:4]])
    assert np.all(residual[order[4:10]] == 0) and compressor.last_received == [1]


def test_lgc_state_round_trips():
    compressor = LgcCompressor((4, 6), (0.5, 0.5))
    _compress(compressor, _delta(5), 0)
    restored = build_compressor('lgc', lgc_channel_entries=(4, 6),
                                lgc_drop_probabilities=(0.5, 0.5))
    restored.load_state_dict(compressor.state_dict())
    a, b = _compress(compressor, _delta(6), 1), _compress(restored, _delta(6), 1)
    assert a[0] == b[0]


def test_lgc_more_entries_than_the_model_names_the_key():
    with pytest.raises(ValueError, match='lgc_channel_entries'):
        _compress(LgcCompressor((30, 30)), _delta(0), 0)
