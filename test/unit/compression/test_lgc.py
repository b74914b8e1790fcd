"""Unit tests for fl_uav.compression.lgc (LGC layered top-k with error feedback)."""

from __future__ import annotations

import itertools

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from fl_uav.compression.config import CompressionConfig
from fl_uav.compression.lgc import (
    Layer,
    LgcEncoder,
    decode,
    layer_payload_bits,
    layered_top_k,
    top_k_indices,
)
from fl_uav.compression.quantization import flatten, unflatten

vectors = hnp.arrays(np.float32, st.integers(1, 60),
                     elements=st.floats(-1e3, 1e3, width=32, allow_nan=False))


# --------------------------------------------------------------------------- operators


def test_layered_top_k_hand_computed_bands():
    # Arrange: ranks by |x|: idx1 (5), idx4 (4), idx2 (3), idx5 (1), idx3 (0.25), idx0 (0.125)
    x = np.array([0.125, -5.0, 3.0, 0.25, -4.0, 1.0], np.float32)
    # Act
    layers = layered_top_k(x, (1, 2, 2))
    # Assert
    assert [layer.layer_id for layer in layers] == [0, 1, 2]
    assert [layer.rank_lo for layer in layers] == [0, 1, 3]
    assert [layer.indices.tolist() for layer in layers] == [[1], [4, 2], [5, 3]]
    assert [layer.values.tolist() for layer in layers] == [[-5.0], [-4.0, 3.0], [1.0, 0.25]]
    assert all(layer.indices.dtype == np.int32 and layer.values.dtype == np.float32
               for layer in layers)
    np.testing.assert_array_equal(decode(layers, 6), [0.0, -5.0, 3.0, 0.25, -4.0, 1.0])


def test_top_k_ties_are_broken_by_lower_index():
    x = np.array([1.0, -2.0, 2.0, 1.0, -1.0], np.float32)
    assert top_k_indices(x, 3).tolist() == [1, 2, 0]
    assert top_k_indices(x, 5).tolist() == [1, 2, 0, 3, 4]
    assert top_k_indices(x, 0).tolist() == []


@settings(max_examples=50, deadline=None)
@given(x=vectors, data=st.data())
def test_top_k_matches_a_stable_full_sort(x, data):
    # Arrange
    k = data.draw(st.integers(0, x.size))
    expected = np.argsort(-np.abs(x), kind='stable')[:k]
    # Act
    got = top_k_indices(x, k)
    # Assert
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=50, deadline=None)
@given(x=vectors, data=st.data())
def test_layers_partition_top_k_and_contract(x, data):
    # Arrange: a random allocation k_1..k_C with Σk ≤ D
    ks = data.draw(st.lists(st.integers(0, x.size), min_size=1, max_size=4))
    if sum(ks) > x.size:
        ks = [min(k, x.size // len(ks)) for k in ks]
    total = sum(ks)
    # Act
    layers = layered_top_k(x, ks)
    dense = decode(layers, x.size)
    # Assert: sizes, disjoint bands, Σ layers == Top_K(x), ‖x − LGC(x)‖² ≤ (1 − K/D)‖x‖²
    assert [layer.k for layer in layers] == list(ks)
    all_indices = np.concatenate([layer.indices for layer in layers])
    assert np.unique(all_indices).size == total
    top = np.zeros_like(x)
    top[top_k_indices(x, total)] = x[top_k_indices(x, total)]
    np.testing.assert_array_equal(dense, top)
    x64 = x.astype(np.float64)
    assert np.sum((x64 - dense) ** 2) <= (1 - total / x.size) * np.sum(x64**2) * (1 + 1e-9)
    for upper, lower in itertools.pairwise(layers):
        if upper.k and lower.k:
            assert np.abs(upper.values).min() >= np.abs(lower.values).max()


def test_layer_payload_bits_are_64_per_entry():
    layers = layered_top_k(np.arange(10, dtype=np.float32), (3, 0, 2))
    assert [layer.payload_bits for layer in layers] == [192, 0, 128]
    assert layer_payload_bits(5) == 5 * (32 + 32)


def test_decode_rejects_duplicate_layers_and_bad_indices():
    layer = Layer(layer_id=0, rank_lo=0, indices=np.array([3], np.int32),
                  values=np.array([1.0], np.float32))
    with pytest.raises(ValueError, match='twice'):
        decode([layer, layer], 4)
    with pytest.raises(ValueError, match='index outside'):
        decode([layer], 3)


# --------------------------------------------------------------------------- error feedback


@pytest.mark.parametrize('received', [
    ids for n in range(4) for ids in itertools.combinations(range(3), n)])
def test_residual_plus_received_equals_update_plus_old_residual_for_every_subset(received):
    # Arrange: an encoder with a non-zero residual left by a first, fully dropped round
    rng = np.random.default_rng(9)
    encoder = LgcEncoder(40, (3, 5, 7))
    encoder.encode(rng.normal(size=40).astype(np.float32))
    encoder.acknowledge([])
    residual_old = encoder.residual
    update = rng.normal(size=40).astype(np.float32)
    # Act
    layers = encoder.encode(update)
    residual_new = encoder.acknowledge(received)
    dense = decode([layer for layer in layers if layer.layer_id in received], 40)
    # Assert: exact in float32 (the layers are disjoint and e = u with received entries zeroed)
    np.testing.assert_array_equal(residual_new + dense, update + residual_old)
    sent = np.concatenate([layers[i].indices for i in received]) if received else []
    np.testing.assert_array_equal(residual_new[sent], 0.0)


def test_nothing_is_lost_over_many_rounds_with_random_drops():
    # Arrange
    rng = np.random.default_rng(42)
    dim, rounds = 30, 25
    encoder = LgcEncoder(dim, (2, 3, 4))
    applied = np.zeros(dim, np.float64)
    total = np.zeros(dim, np.float64)
    # Act
    for _ in range(rounds):
        update = rng.normal(size=dim).astype(np.float32)
        total += update
        layers = encoder.encode(update)
        received = [layer.layer_id for layer in layers if rng.random() > 0.3]
        encoder.acknowledge(received)
        applied += decode([layers[i] for i in received], dim)
    # Assert: Σ applied + e == Σ updates (up to float32 accumulation)
    np.testing.assert_allclose(applied + encoder.residual, total, atol=1e-4)


def test_error_feedback_accumulates_a_small_entry_until_it_is_sent():
    # Arrange: k = 1; entry 0 is 1.0 every round, entry 1 is 0.375 every round (exact in binary)
    encoder = LgcEncoder(3, (1,))
    update = np.array([1.0, 0.375, 0.0], np.float32)
    sent = []
    # Act
    for _ in range(3):
        (layer,) = encoder.encode(update)
        encoder.acknowledge([0])
        sent.append((layer.indices.tolist(), layer.values.tolist()))
    # Assert: 0.375, 0.75 wait in the residual; at 1.125 > 1.0 entry 1 goes out
    assert sent == [([0], [1.0]), ([0], [1.0]), ([1], [1.125])]
    np.testing.assert_array_equal(encoder.residual, [1.0, 0.0, 0.0])


def test_a_dropped_layer_is_resent_next_round():
    # Arrange
    encoder = LgcEncoder(5, (1, 1))
    update = np.array([0.0, 4.0, 0.0, -3.0, 0.5], np.float32)
    first = encoder.encode(update)
    # Act: the server only received layer 0; the next update is zero
    encoder.acknowledge([0])
    second = encoder.encode(np.zeros(5, np.float32))
    encoder.acknowledge([0, 1])
    # Assert: layer 1 of round 1 (index 3, -3.0) is now the top entry
    assert first[1].indices.tolist() == [3]
    assert second[0].indices.tolist() == [3] and second[0].values.tolist() == [-3.0]
    assert second[1].indices.tolist() == [4]
    np.testing.assert_array_equal(encoder.residual, np.zeros(5))


def test_encode_accepts_a_per_round_allocation_and_named_weights():
    # Arrange
    weights = {'w': np.array([[1.0, -6.0], [2.0, 0.5]], np.float32), 'b': np.array([3.0])}
    vector, layout = flatten(weights)
    encoder = LgcEncoder(layout.dim, (1,))
    # Act
    layers = encoder.encode(vector, ks=(1, 1))
    encoder.acknowledge([0, 1])
    received = unflatten(decode(layers, layout.dim), layout)
    # Assert
    np.testing.assert_array_equal(received['w'], [[0.0, -6.0], [0.0, 0.0]])
    np.testing.assert_array_equal(received['b'], [3.0])


def test_lgc_bad_inputs_raise():
    encoder = LgcEncoder(4, (1, 2))
    with pytest.raises(ValueError, match='update'):
        encoder.encode(np.array([1.0, np.nan, 0.0, 0.0], np.float32))
    with pytest.raises(ValueError, match='update'):
        encoder.encode(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match='ks'):
        encoder.encode(np.zeros(4, np.float32), ks=(3, 2))
    with pytest.raises(ValueError, match='ks'):
        LgcEncoder(4, (5,))
    with pytest.raises(ValueError, match='ks'):
        LgcEncoder(4, (-1, 2))
    with pytest.raises(ValueError, match='ks'):
        LgcEncoder(4, ())
    with pytest.raises(ValueError, match='dim'):
        LgcEncoder(0, (0,))
    with pytest.raises(ValueError, match='k must'):
        top_k_indices(np.zeros(3, np.float32), 4)
    with pytest.raises(RuntimeError, match='encode first'):
        encoder.acknowledge([0])
    encoder.encode(np.ones(4, np.float32))
    with pytest.raises(RuntimeError, match='not been acknowledged'):
        encoder.encode(np.ones(4, np.float32))
    with pytest.raises(ValueError, match='received_layer_ids'):
        encoder.acknowledge([2])
    # a rejected acknowledge leaves the encode pending; a valid one then succeeds
    assert encoder.awaiting_ack
    encoder.acknowledge([])
    np.testing.assert_array_equal(encoder.residual, np.ones(4))


def test_encoder_reset_clears_residual_and_pending():
    encoder = LgcEncoder(3, (1,))
    encoder.encode(np.array([1.0, 2.0, 3.0], np.float32))
    encoder.reset()
    assert not encoder.awaiting_ack
    np.testing.assert_array_equal(encoder.residual, np.zeros(3))


def test_an_lgc_update_travels_in_one_frame_per_channel_at_most_others_in_one():
    assert CompressionConfig(method='lgc', lgc_channel_entries=(10, 20, 30, 40)
                             ).frames_per_update == 4
    assert CompressionConfig(method='qsgd').frames_per_update == 1
