"""Unit tests for fl_uav.compression.quantization (QSGD, 2CEOAFL upload, FedDPQ quantizer).

Statistical checks use fixed seeds and tolerances of several standard errors computed from the
quantizers' exact per-entry variances, so they are deterministic and not flaky.
"""

from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from fl_uav.compression.quantization import (
    ceoafl_decode,
    ceoafl_payload_bits,
    ceoafl_upload,
    feddpq_payload_bits,
    flatten,
    layer_buckets,
    paper_qsgd_level_bits,
    qsgd_dequantize,
    qsgd_level_bits,
    qsgd_payload_bits,
    qsgd_quantize,
    qsgd_variance_bound,
    range_dequantize,
    range_payload_bits,
    range_quantize,
    range_variance_bound,
    unflatten,
)

# ResNet18 (CIFAR stem) parameter count used by the digests' worked numbers.
P_RESNET18 = 11_173_962

vectors = hnp.arrays(np.float32, st.integers(1, 64),
                     elements=st.floats(-1e6, 1e6, width=32, allow_nan=False))
seeds = st.integers(0, 2**32 - 1)


def _qsgd_entry_variance(v: np.ndarray, s: int) -> np.ndarray:
    """Exact Var[Q(v)_i] for one-norm QSGD: (‖v‖/s)² f(1 − f), f = s·r − l."""
    norm = float(np.float32(np.linalg.norm(v.astype(np.float64))))
    scaled = np.abs(v.astype(np.float64)) / norm * s
    frac = scaled - np.minimum(np.floor(scaled), s - 1)
    return (norm / s) ** 2 * frac * (1.0 - frac)


# --------------------------------------------------------------------------- flatten


def test_flatten_unflatten_round_trip_keeps_names_order_shapes_and_dtype():
    # Arrange
    weights = {'conv.w': np.arange(6, dtype=np.float32).reshape(2, 3),
               'conv.b': np.array([7.0], np.float64), 'empty': np.zeros((0, 4), np.float32)}
    # Act
    vector, layout = flatten(weights)
    back = unflatten(vector, layout)
    # Assert
    assert vector.dtype == np.float32 and vector.shape == (7,)
    assert layout.names == ('conv.w', 'conv.b', 'empty') and layer_buckets(layout) == (6, 1, 0)
    assert list(back) == list(weights)
    for name, array in weights.items():
        assert back[name].dtype == np.float32
        np.testing.assert_array_equal(back[name], array.astype(np.float32))


def test_unflatten_rejects_a_vector_of_the_wrong_length():
    _, layout = flatten({'w': np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match='vector'):
        unflatten(np.zeros(4, np.float32), layout)


# --------------------------------------------------------------------------- QSGD


def test_qsgd_hand_computed_4_vector_s2():
    # Arrange: v = (3, -4, 0, 0), ‖v‖ = 5, s = 2 -> s·r = (1.2, 1.6, 0, 0), l = (1, 1, 0, 0),
    # P(up) = (0.2, 0.6, 0, 0).  default_rng(0).random(4) = (0.637, 0.270, 0.041, 0.017), so
    # entry 0 stays at level 1 (0.637 >= 0.2) and entry 1 goes up to level 2 (0.270 < 0.6).
    v = np.array([3.0, -4.0, 0.0, 0.0], np.float32)
    # Act
    payload = qsgd_quantize(v, 2, np.random.default_rng(0))
    decoded = qsgd_dequantize(payload)
    # Assert
    np.testing.assert_array_equal(payload.norms, [5.0])
    np.testing.assert_array_equal(payload.levels, [1, 2, 0, 0])
    np.testing.assert_array_equal(payload.negative, [False, True, False, False])
    np.testing.assert_array_equal(decoded, [2.5, -5.0, 0.0, 0.0])
    assert decoded.dtype == np.float32


def test_qsgd_is_exact_when_every_entry_sits_on_a_level():
    # Arrange: v = (1, -1, 1, -1), ‖v‖ = 2, r = 1/2, s = 2 -> s·r = 1 exactly (no randomness)
    v = np.array([1.0, -1.0, 1.0, -1.0], np.float32)
    # Act
    decoded = qsgd_dequantize(qsgd_quantize(v, 2, np.random.default_rng(5)))
    # Assert
    np.testing.assert_array_equal(decoded, v)


def test_qsgd_single_entry_clamps_to_the_top_level():
    # r = 1 -> l clamped to s - 1, rounded up with probability 1 -> level s, Q = v exactly
    payload = qsgd_quantize(np.array([-2.5], np.float32), 3, np.random.default_rng(0))
    assert payload.levels.tolist() == [3]
    np.testing.assert_array_equal(qsgd_dequantize(payload), [-2.5])


def test_qsgd_zero_vector_and_zero_bucket_give_zeros():
    # Arrange: per-layer buckets (2, 2); the first bucket is all zeros
    v = np.array([0.0, 0.0, 3.0, 4.0], np.float32)
    # Act
    whole = qsgd_quantize(np.zeros(5, np.float32), 4, np.random.default_rng(0))
    bucketed = qsgd_quantize(v, 4, np.random.default_rng(0), buckets=(2, 2))
    # Assert
    np.testing.assert_array_equal(qsgd_dequantize(whole), np.zeros(5))
    np.testing.assert_array_equal(bucketed.norms, [0.0, 5.0])
    np.testing.assert_array_equal(qsgd_dequantize(bucketed)[:2], [0.0, 0.0])


def test_qsgd_per_layer_variant_uses_one_norm_per_tensor():
    # Arrange
    weights = {'a': np.array([[3.0, 4.0]], np.float32), 'b': np.array([-12.0, 5.0], np.float32)}
    vector, layout = flatten(weights)
    # Act
    payload = qsgd_quantize(vector, 4, np.random.default_rng(1), buckets=layer_buckets(layout))
    decoded = unflatten(qsgd_dequantize(payload), layout)
    # Assert
    np.testing.assert_array_equal(payload.norms, [5.0, 13.0])
    assert payload.bits == 2 * 32 + 4 * (1 + 3)
    assert decoded['a'].shape == (1, 2) and decoded['b'].shape == (2,)
    assert np.all(np.abs(decoded['a']) <= 5.0) and np.all(np.abs(decoded['b']) <= 13.0)


def test_qsgd_same_seed_same_output():
    v = np.random.default_rng(3).normal(size=50).astype(np.float32)
    a = qsgd_dequantize(qsgd_quantize(v, 3, np.random.default_rng(11)))
    b = qsgd_dequantize(qsgd_quantize(v, 3, np.random.default_rng(11)))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('s', [1, 2, 3, 8])
def test_qsgd_is_unbiased(s):
    # Arrange
    v = np.array([0.3, -1.2, 0.05, 2.0, -0.7, 0.0, 0.9, -0.01], np.float32)
    rng = np.random.default_rng(2024 + s)
    draws = 4000
    # Act
    mean = np.mean([qsgd_dequantize(qsgd_quantize(v, s, rng)) for _ in range(draws)],
                   axis=0, dtype=np.float64)
    # Assert: within 5 standard errors of the exact per-entry variance
    tolerance = 5.0 * np.sqrt(_qsgd_entry_variance(v, s) / draws) + 1e-6
    assert np.all(np.abs(mean - v) <= tolerance)


@pytest.mark.parametrize(('d', 's'), [(4, 1), (16, 2), (100, 3), (400, 16)])
def test_qsgd_variance_within_min_d_over_s2_sqrt_d_over_s(d, s):
    # Arrange
    rng = np.random.default_rng(d * 31 + s)
    v = rng.standard_cauchy(d).astype(np.float32)
    bound = qsgd_variance_bound(d, s) * float(np.sum(v.astype(np.float64) ** 2))
    # Act: exact expectation and a Monte Carlo estimate
    exact = float(np.sum(_qsgd_entry_variance(v, s)))
    errors = [np.sum((qsgd_dequantize(qsgd_quantize(v, s, rng)) - v).astype(np.float64) ** 2)
              for _ in range(300)]
    # Assert
    assert exact <= bound * (1 + 1e-6)
    assert np.mean(errors) <= bound * 1.15
    assert np.mean(errors) == pytest.approx(exact, rel=0.25)


def test_qsgd_bucketed_variance_within_bound_of_the_largest_bucket():
    # Arrange: per-layer buckets (5, 20, 40); each bucket obeys its own min(d_b/s², √d_b/s)
    rng = np.random.default_rng(8)
    v = rng.normal(size=65).astype(np.float32)
    sizes, s = (5, 20, 40), 2
    bound = qsgd_variance_bound(max(sizes), s) * float(np.sum(v.astype(np.float64) ** 2))
    # Act
    errors = [np.sum((qsgd_dequantize(qsgd_quantize(v, s, rng, buckets=sizes)) - v)
                     .astype(np.float64) ** 2) for _ in range(300)]
    # Assert
    assert np.mean(errors) <= bound


def test_qsgd_variance_bound_values():
    assert qsgd_variance_bound(4, 2) == pytest.approx(1.0)  # min(4/4, 2/2)
    assert qsgd_variance_bound(100, 1) == pytest.approx(10.0)  # min(100, 10)
    assert qsgd_variance_bound(9, 9) == pytest.approx(1 / 9)  # min(9/81, 3/9)


@settings(max_examples=50, deadline=None)
@given(v=vectors, s=st.integers(1, 20), seed=seeds)
def test_qsgd_property_shape_dtype_sign_and_error(v, s, seed):
    # Act
    payload = qsgd_quantize(v, s, np.random.default_rng(seed))
    decoded = qsgd_dequantize(payload)
    # Assert
    norm = float(payload.norms[0])
    assert decoded.shape == v.shape and decoded.dtype == np.float32
    assert int(payload.levels.max()) <= s
    assert np.all(decoded.astype(np.float64) * v >= 0.0)
    assert np.all(np.abs(decoded) <= norm * (1 + 1e-6))
    step = norm / s
    assert np.all(np.abs(decoded.astype(np.float64) - v) <= step * (1 + 1e-5) + 1e-30)


@settings(max_examples=30, deadline=None)
@given(v=vectors, s=st.integers(1, 20), seed=seeds, data=st.data())
def test_qsgd_bucketed_property_error_per_bucket(v, s, seed, data):
    # Arrange: a random split of v into consecutive buckets
    cuts = sorted(data.draw(st.lists(st.integers(0, v.size), max_size=4)))
    sizes = np.diff([0, *cuts, v.size]).tolist()
    # Act
    payload = qsgd_quantize(v, s, np.random.default_rng(seed), buckets=sizes)
    decoded = qsgd_dequantize(payload)
    # Assert
    step = np.repeat(payload.norms.astype(np.float64), sizes) / s
    assert decoded.shape == v.shape and decoded.dtype == np.float32
    assert np.all(np.abs(decoded.astype(np.float64) - v) <= step * (1 + 1e-5) + 1e-30)


def test_qsgd_bad_inputs_raise_value_error_naming_the_parameter():
    rng = np.random.default_rng(0)
    v = np.ones(4, np.float32)
    with pytest.raises(ValueError, match='update'):
        qsgd_quantize(np.array([1.0, np.nan], np.float32), 2, rng)
    with pytest.raises(ValueError, match='update'):
        qsgd_quantize(np.array([1.0, np.inf]), 2, rng)
    with pytest.raises(ValueError, match='update'):
        qsgd_quantize(np.ones((2, 2), np.float32), 2, rng)
    with pytest.raises(ValueError, match='update norm'):
        qsgd_quantize(np.array([3e38, 3e38], np.float32), 2, rng)
    for bad_s in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match='s must'):
            qsgd_quantize(v, bad_s, rng)
    with pytest.raises(ValueError, match='buckets'):
        qsgd_quantize(v, 2, rng, buckets=(1, 2))
    with pytest.raises(TypeError, match='rng'):
        qsgd_quantize(v, 2, np.random.RandomState(0))


# --------------------------------------------------------------------------- payload bits


@pytest.mark.parametrize(('s', 'exact', 'paper'),
                         [(1, 1, 0), (2, 2, 1), (3, 2, 2), (4, 3, 2), (7, 3, 3), (8, 4, 3)])
def test_level_bits_exact_vs_paper(s, exact, paper):
    # exact: ⌈log2(s+1)⌉ (digest 000 §2.4 pitfall); paper: ⌈log2 s⌉
    assert qsgd_level_bits(s) == exact == math.ceil(math.log2(s + 1))
    assert paper_qsgd_level_bits(s) == paper == math.ceil(math.log2(s))


def test_qsgd_payload_bits_formula():
    assert qsgd_payload_bits(4, 2) == 32 + 4 * (1 + 2)
    assert qsgd_payload_bits(10, 3, num_buckets=3) == 3 * 32 + 10 * 3


@pytest.mark.parametrize(('delta', 'raw', 'mbit'), [
    (0.0, True, 379.9),    # AFL by the formula, 34p
    (0.7, True, 121.8),    # 2CEOAFL raw branch, δ = 0.7
    (0.05, True, 361.5),   # 2CEOAFL raw branch, δ = 0.05
    (0.0, False, 44.7),    # AFL-Quant with the p-bit mask, 4p + 32
    (0.7, False, 21.2),    # 2CEOAFL quantized branch, δ = 0.7
    (0.05, False, 43.0),   # 2CEOAFL quantized branch, δ = 0.05
])
def test_ceoafl_payload_bits_match_digest_worked_numbers(delta, raw, mbit):
    # digest 000 §5 [DERIVED] table: p = 11,173,962, s = 3
    kept = round(P_RESNET18 * (1 - delta))
    bits = ceoafl_payload_bits(P_RESNET18, kept, raw=raw, s=3)
    assert round(bits / 1e6, 1) == mbit


def test_ceoafl_payload_bits_without_mask_and_exact_levels():
    # AFL-Quant without a mask: 3p + 32 = 33.5 Mbit (digest 000 §5)
    bits = ceoafl_payload_bits(P_RESNET18, P_RESNET18, raw=False, s=3, with_mask=False)
    assert round(bits / 1e6, 1) == 33.5
    # s = 4: the paper counts 2 level bits, an encoder needs 3
    assert ceoafl_payload_bits(10, 6, raw=False, s=4) == 6 * 3 + 32 + 10
    assert ceoafl_payload_bits(10, 6, raw=False, s=4, paper=False) == 6 * 4 + 32 + 10
    with pytest.raises(ValueError, match='num_kept'):
        ceoafl_payload_bits(10, 11, raw=True)


@pytest.mark.parametrize(('bits', 'mbit'), [(6, 67.0), (8, 89.4), (16, 178.8)])
def test_feddpq_payload_bits_match_digest_worked_numbers(bits, mbit):
    # digest 001 §1.7: V·δ for V ≈ 11.17 M (eq. (13) without the overhead o)
    assert round(feddpq_payload_bits(P_RESNET18, bits, 0) / 1e6, 1) == mbit


def test_range_payload_bits_counts_signs_and_endpoints():
    # eq. (13) with o = V sign bits + 2 float32 endpoints per range
    assert range_payload_bits(100, 8) == 100 * 8 + 100 + 64
    assert range_payload_bits(100, 8, num_buckets=3) == 100 * 9 + 3 * 64


# --------------------------------------------------------------------------- 2CEOAFL eq. (11)


def test_ceoafl_upload_raw_probability_one_sends_the_exact_update():
    # Arrange
    v = np.array([0.5, 0.0, -2.0, 0.0], np.float32)
    mask = np.array([True, False, True, True])
    # Act
    upload = ceoafl_upload(v, 3, 1.0, np.random.default_rng(0), mask=mask)
    # Assert
    assert upload.raw and upload.quantized is None
    np.testing.assert_array_equal(ceoafl_decode(upload), v)
    assert upload.paper_bits == 3 * 33 + 4 == upload.bits


def test_ceoafl_upload_raw_probability_zero_quantizes_kept_entries_only():
    # Arrange
    v = np.array([3.0, 0.0, -4.0, 0.0], np.float32)
    mask = np.array([True, False, True, False])
    # Act
    upload = ceoafl_upload(v, 4, 0.0, np.random.default_rng(0), mask=mask)
    decoded = ceoafl_decode(upload)
    # Assert: 2 kept entries, s = 4: paper 2·(1+2)+32+4, exact 2·(1+3)+32+4
    assert not upload.raw and upload.quantized.dim == 2
    assert upload.paper_bits == 42 and upload.bits == 44
    np.testing.assert_array_equal(decoded[~mask], 0.0)
    assert decoded.dtype == np.float32 and decoded.shape == (4,)


def test_ceoafl_upload_without_mask_sends_no_mask_bits():
    upload = ceoafl_upload(np.ones(8, np.float32), 3, 0.0, np.random.default_rng(0))
    assert upload.bits == 8 * 3 + 32 and upload.paper_bits == 8 * 3 + 32 + 8


def test_ceoafl_upload_chooses_raw_with_probability_q_and_is_unbiased():
    # Arrange
    v = np.array([0.4, -1.0, 0.0, 0.25, 2.0], np.float32)
    rng = np.random.default_rng(77)
    q, draws = 0.3, 3000
    # Act
    uploads = [ceoafl_upload(v, 2, q, rng) for _ in range(draws)]
    raw_share = np.mean([u.raw for u in uploads])
    mean = np.mean([ceoafl_decode(u) for u in uploads], axis=0, dtype=np.float64)
    # Assert: binomial and mean tolerances of 5 standard errors
    assert abs(raw_share - q) <= 5 * math.sqrt(q * (1 - q) / draws)
    variance = (1 - q) * _qsgd_entry_variance(v, 2)
    assert np.all(np.abs(mean - v) <= 5 * np.sqrt(variance / draws) + 1e-6)


def test_ceoafl_upload_bad_inputs():
    rng = np.random.default_rng(0)
    v = np.array([1.0, 0.0], np.float32)
    for bad_q in (-0.1, 1.5, float('nan')):
        with pytest.raises(ValueError, match='raw_probability'):
            ceoafl_upload(v, 2, bad_q, rng)
    with pytest.raises(ValueError, match='mask'):
        ceoafl_upload(v, 2, 0.5, rng, mask=np.array([False, True]))
    with pytest.raises(ValueError, match='mask'):
        ceoafl_upload(v, 2, 0.5, rng, mask=np.array([1, 0]))
    with pytest.raises(ValueError, match='update'):
        ceoafl_upload(np.array([np.nan, 0.0]), 2, 0.5, rng)
    with pytest.raises(ValueError, match='s must'):
        ceoafl_upload(v, 0, 0.5, rng)


# ------------------------------------------------------------------- FedDPQ range quantizer


def test_range_quantizer_hand_computed_known_range():
    # Arrange: |g| in [0.5, 2.0], δ = 2 -> levels b = (0.5, 1.0, 1.5, 2.0).  0.5, 1.0, 2.0 sit on
    # levels; 1.25 is halfway between 1.0 and 1.5: default_rng(1).random(4)[2] = 0.144 < 0.5 -> up.
    g = np.array([0.5, -1.0, 1.25, -2.0], np.float32)
    # Act
    payload = range_quantize(g, 2, np.random.default_rng(1))
    decoded = range_dequantize(payload)
    # Assert
    np.testing.assert_array_equal(payload.low, [0.5])
    np.testing.assert_array_equal(payload.high, [2.0])
    np.testing.assert_array_equal(payload.index, [0, 1, 2, 3])
    np.testing.assert_array_equal(decoded, [0.5, -1.0, 1.5, -2.0])
    assert payload.payload_bits == 4 * 2 + 4 + 64


def test_range_quantizer_constant_magnitude_is_exact():
    g = np.array([-3.0, 3.0, 3.0], np.float32)
    decoded = range_dequantize(range_quantize(g, 4, np.random.default_rng(0)))
    np.testing.assert_array_equal(decoded, g)


@pytest.mark.parametrize('bits', [1, 2, 6])
def test_range_quantizer_is_unbiased_and_meets_eq_26(bits):
    # Arrange
    g = np.array([0.02, -0.9, 0.33, 1.7, -0.15, 0.0, 0.61, -1.1], np.float32)
    rng = np.random.default_rng(500 + bits)
    draws = 4000
    # Act
    decoded = np.array([range_dequantize(range_quantize(g, bits, rng)) for _ in range(draws)],
                       np.float64)
    mean = decoded.mean(axis=0)
    mse = np.mean(np.sum((decoded - g) ** 2, axis=1))
    # Assert
    step = (1.7 - 0.0) / (2**bits - 1)
    frac = np.abs(g) / step - np.minimum(np.floor(np.abs(g) / step), 2**bits - 2)
    variance = step**2 * frac * (1 - frac)
    assert np.all(np.abs(mean - g) <= 5 * np.sqrt(variance / draws) + 1e-6)
    assert mse <= range_variance_bound(1.7, bits, g.size) * 1.1


@settings(max_examples=50, deadline=None)
@given(v=vectors, bits=st.integers(1, 16), seed=seeds)
def test_range_quantizer_property_shape_dtype_and_error(v, bits, seed):
    # Act
    payload = range_quantize(v, bits, np.random.default_rng(seed))
    decoded = range_dequantize(payload)
    # Assert
    low, high = float(payload.low[0]), float(payload.high[0])
    step = (high - low) / (2**bits - 1)
    assert decoded.shape == v.shape and decoded.dtype == np.float32
    assert int(payload.index.max()) <= 2**bits - 1
    magnitude = np.abs(decoded.astype(np.float64))
    slack = 1e-6 * high + 1e-30
    assert np.all(magnitude >= low - slack) and np.all(magnitude <= high + slack)
    assert np.all(np.abs(decoded.astype(np.float64) - v) <= step + slack)
    assert np.all(decoded.astype(np.float64) * v >= 0.0)


def test_range_quantizer_per_layer_buckets_have_their_own_range():
    g = np.array([1.0, 2.0, -10.0, 20.0], np.float32)
    payload = range_quantize(g, 3, np.random.default_rng(0), buckets=(2, 2))
    np.testing.assert_array_equal(payload.low, [1.0, 10.0])
    np.testing.assert_array_equal(payload.high, [2.0, 20.0])
    np.testing.assert_array_equal(range_dequantize(payload), g)


def test_range_quantizer_bad_inputs():
    rng = np.random.default_rng(0)
    v = np.ones(3, np.float32)
    with pytest.raises(ValueError, match='update'):
        range_quantize(np.array([0.0, np.nan]), 4, rng)
    for bad_bits in (0, 33, 2.0):
        with pytest.raises(ValueError, match='bits'):
            range_quantize(v, bad_bits, rng)
    with pytest.raises(TypeError, match='rng'):
        range_quantize(v, 4, 0)
