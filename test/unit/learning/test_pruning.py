import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from fl_uav.learning.models import build_model
from fl_uav.learning.pruning import (
    apply_mask,
    expand_update,
    extract_weights,
    feddpq_local_gradient,
    feddpq_local_update,
    feddpq_prune,
    global_magnitude_mask,
    is_prunable,
    layerwise_magnitude_mask,
    mask_density,
    shrink_model,
    structured_mask,
    two_ceoafl_compute_cost,
    two_ceoafl_local_update,
)
from fl_uav.learning.training import StopCondition, TrainConfig, train_local
from fl_uav.learning.weights import get_weights, set_weights, subtract, weight_shapes

MODELS = [('small_cnn', 3, 32), ('tiny_cnn', 3, 32), ('digits_cnn', 1, 8), ('lenet5', 1, 28)]


def _weights(seed: int = 0):
    rng = np.random.default_rng(seed)
    return {'a.weight': rng.normal(size=(4, 3, 3, 3)).astype(np.float32),
            'a.bias': rng.normal(size=4).astype(np.float32),
            'b.weight': rng.normal(size=(5, 36)).astype(np.float32),
            'b.bias': rng.normal(size=5).astype(np.float32)}


def _data(n: int, px: int = 8, channels: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n).astype(np.int64)
    inputs = rng.normal(0, 1, (n, channels, px, px)).astype(np.float32)
    inputs[:, 0] += labels[:, None, None]
    return inputs, labels


def _tiny(seed: int = 0):
    torch.set_num_threads(1)
    return build_model('tiny_cnn', 3, input_px=8, seed=seed)


# ------------------------------------------------------------------ unstructured masks ----
@pytest.mark.parametrize('fraction', [0.0, 0.1, 0.37, 0.5, 0.99])
def test_global_mask_prunes_exactly_floor_fraction_of_prunable_entries(fraction):
    # Arrange
    weights = _weights()
    prunable = 4 * 27 + 5 * 36
    # Act
    mask = global_magnitude_mask(weights, fraction)
    # Assert
    pruned = sum(int((~mask[n]).sum()) for n in ('a.weight', 'b.weight'))
    assert pruned == math.floor(fraction * prunable)
    assert mask['a.bias'].all() and mask['b.bias'].all()
    assert all(mask[n].dtype == bool and mask[n].shape == weights[n].shape for n in weights)


def test_global_mask_prunes_the_smallest_magnitudes_across_tensors():
    weights = _weights(1)
    mask = global_magnitude_mask(weights, 0.4)
    kept = np.concatenate([np.abs(weights[n][mask[n]]) for n in ('a.weight', 'b.weight')])
    pruned = np.concatenate([np.abs(weights[n][~mask[n]]) for n in ('a.weight', 'b.weight')])
    assert pruned.max() <= kept.min()


def test_layerwise_mask_prunes_floor_fraction_of_every_tensor():
    weights = _weights(2)
    mask = layerwise_magnitude_mask(weights, 0.3)
    assert int((~mask['a.weight']).sum()) == math.floor(0.3 * 108)
    assert int((~mask['b.weight']).sum()) == math.floor(0.3 * 180)
    assert mask['b.bias'].all()


def test_ties_are_broken_by_position_deterministically():
    # Arrange: every magnitude equal, signs mixed
    weights = {'x.weight': np.array([[1.0, -1.0], [1.0, -1.0]], np.float32),
               'y.weight': np.array([[-1.0, 1.0]], np.float32)}
    # Act
    first = global_magnitude_mask(weights, 0.5)
    second = global_magnitude_mask(weights, 0.5)
    # Assert: the first three positions in dict / row-major order are pruned
    np.testing.assert_array_equal(first['x.weight'], [[False, False], [False, True]])
    np.testing.assert_array_equal(first['y.weight'], [[True, True]])
    for name in weights:
        np.testing.assert_array_equal(first[name], second[name])


def test_include_selects_the_prunable_tensors():
    weights = _weights(3)
    mask = global_magnitude_mask(weights, 0.5, include=['b.weight', 'b.bias'])
    assert mask['a.weight'].all()
    assert int((~mask['b.weight']).sum()) + int((~mask['b.bias']).sum()) == 92
    with pytest.raises(ValueError, match='include'):
        global_magnitude_mask(weights, 0.5, include=['nope'])


def test_default_rule_skips_biases_and_buffers():
    assert is_prunable('features.0.weight', np.zeros((2, 2, 3, 3)))
    assert not is_prunable('features.0.bias', np.zeros(2))
    assert not is_prunable('bn.weight', np.zeros(4))
    assert not is_prunable('bn.running_mean', np.zeros(4))


@pytest.mark.parametrize('fraction', [1.0, -0.1, 1.5, float('nan')])
def test_fraction_outside_unit_interval_is_rejected(fraction):
    with pytest.raises(ValueError, match='fraction'):
        global_magnitude_mask(_weights(), fraction)
    with pytest.raises(ValueError, match='fraction'):
        layerwise_magnitude_mask(_weights(), fraction)


def test_apply_mask_zeroes_pruned_entries_and_keeps_the_rest():
    weights = _weights(4)
    mask = global_magnitude_mask(weights, 0.5)
    masked = apply_mask(weights, mask)
    for name in weights:
        np.testing.assert_array_equal(masked[name][mask[name]], weights[name][mask[name]])
        assert not masked[name][~mask[name]].any()
        assert masked[name].dtype == np.float32
    assert mask_density(mask, ['a.weight', 'b.weight']) == pytest.approx(1 - 144 / 288)


# ------------------------------------------------------------------ 2CEOAFL ----
def test_two_ceoafl_update_is_zero_outside_the_mask_and_pruned_weights_stay_zero():
    # Arrange
    model = _tiny()
    received = get_weights(model)
    config = TrainConfig(lr=0.05, momentum=0.9, weight_decay=1e-3, batch_size=16)
    # Act
    update, mask, steps = two_ceoafl_local_update(
        model, received, _data(64), rho_steps=2, kappa_steps=5, delta=0.6,
        train_config=config, seed=3)
    # Assert
    assert steps == (2, 5)
    after = get_weights(model)
    for name in received:
        assert not update[name][~mask[name]].any()
        assert not after[name][~mask[name]].any()
        assert np.abs(update[name][mask[name]]).sum() > 0
    assert mask_density(mask, ['features.0.weight', 'classifier.1.weight']) == pytest.approx(
        1 - math.floor(0.6 * (8 * 27 + 3 * 32)) / (8 * 27 + 3 * 32))


def test_two_ceoafl_rewinds_to_the_received_weights():
    # Arrange: plain SGD (eq. (10)), so w̄^κ = w^t ⊙ m − η̃ d exactly
    model = _tiny(1)
    received = get_weights(model)
    config = TrainConfig(lr=0.1, momentum=0.0, batch_size=8)
    # Act
    update, mask, _ = two_ceoafl_local_update(
        model, received, _data(40), rho_steps=3, kappa_steps=4, delta=0.5,
        train_config=config, seed=0)
    # Assert
    start = apply_mask(received, mask)
    after = get_weights(model)
    for name in received:
        np.testing.assert_allclose(after[name], start[name] - 0.1 * update[name], atol=1e-6)


def test_two_ceoafl_mask_comes_from_the_trained_not_the_received_weights():
    # Arrange
    data = _data(64)
    config = TrainConfig(lr=0.5, momentum=0.0, batch_size=16)
    received = get_weights(_tiny(2))
    reference = _tiny(2)
    train_local(reference, *data, TrainConfig(lr=0.5, momentum=0.0, batch_size=16,
                                              local_epochs=5, max_steps=3), seed=7)
    expected = global_magnitude_mask(get_weights(reference), 0.5)
    stale = global_magnitude_mask(received, 0.5)
    # Act
    _, mask, _ = two_ceoafl_local_update(_tiny(2), received, data, rho_steps=3, kappa_steps=1,
                                         delta=0.5, train_config=config, seed=7)
    # Assert (float round-off may swap a near-tie)
    disagree = sum(int((mask[n] != expected[n]).sum()) for n in mask)
    assert disagree <= 2
    assert sum(int((mask[n] != stale[n]).sum()) for n in mask) > 10


def test_two_ceoafl_with_rho_zero_and_delta_zero_is_plain_local_sgd():
    # Arrange
    data = _data(50)
    config = TrainConfig(lr=0.05, momentum=0.9, weight_decay=1e-4, batch_size=16)
    received = get_weights(_tiny(4))
    plain = _tiny(4)
    train_local(plain, *data, TrainConfig(lr=0.05, momentum=0.9, weight_decay=1e-4,
                                          batch_size=16, local_epochs=3, max_steps=6), seed=11)
    # Act
    update, mask, steps = two_ceoafl_local_update(
        _tiny(4), received, data, rho_steps=0, kappa_steps=6, delta=0.0, train_config=config,
        seed=11)
    # Assert
    assert steps == (0, 6)
    assert all(m.all() for m in mask.values())
    delta_w = subtract(received, get_weights(plain))
    for name in received:
        np.testing.assert_allclose(update[name], delta_w[name] / 0.05, rtol=1e-4, atol=1e-4)


def test_two_ceoafl_past_its_deadline_keeps_one_dense_and_one_masked_step():
    # Arrange: a stop instant long past (the drone's deadline)
    stop = StopCondition(stop_at_s=0.0, clock=lambda: 1.0)
    # Act
    update, mask, steps = two_ceoafl_local_update(
        _tiny(3), get_weights(_tiny(3)), _data(64), rho_steps=3, kappa_steps=5, delta=0.5,
        train_config=TrainConfig(batch_size=16), seed=1, should_stop=stop)
    # Assert: the mask is from one trained step, and d holds one masked step (not zero)
    assert steps == (1, 1) and stop.reason == 'deadline'
    assert sum(np.abs(update[n][mask[n]]).sum() for n in update) > 0


def test_two_ceoafl_is_deterministic_for_a_seed():
    received = get_weights(_tiny(5))
    runs = [two_ceoafl_local_update(_tiny(5), received, _data(40), 1, 3, 0.3,
                                    TrainConfig(batch_size=8), seed=2) for _ in range(2)]
    for name in received:
        np.testing.assert_array_equal(runs[0][0][name], runs[1][0][name])
        np.testing.assert_array_equal(runs[0][1][name], runs[1][1][name])


@pytest.mark.parametrize('kwargs, parameter', [
    ({'delta': 1.0}, 'delta'), ({'delta': -0.2}, 'delta'), ({'rho_steps': -1}, 'rho_steps'),
    ({'kappa_steps': 0}, 'kappa_steps'), ({'data': (np.zeros((0, 3, 8, 8)), np.zeros(0))},
                                          'data')])
def test_two_ceoafl_rejects_bad_input_naming_the_parameter(kwargs, parameter):
    args = dict(model=_tiny(), global_weights=get_weights(_tiny()), data=_data(8), rho_steps=1,
                kappa_steps=2, delta=0.5, train_config=TrainConfig(), seed=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=parameter):
        two_ceoafl_local_update(**args)


def test_two_ceoafl_compute_cost_model():
    assert two_ceoafl_compute_cost(1, 5, 0.375) == pytest.approx(4.125)


# ------------------------------------------------------------------ FedDPQ ----
def test_feddpq_prune_zeroes_ratio_of_parameters():
    weights = _weights(5)
    pruned, mask = feddpq_prune(weights, 0.2)
    assert sum(int((pruned[n] == 0).sum()) for n in ('a.weight', 'b.weight')) == math.floor(
        0.2 * 288)
    np.testing.assert_array_equal(pruned['a.bias'], weights['a.bias'])
    _, layer_mask = feddpq_prune(weights, 0.2, scope='layer')
    assert int((~layer_mask['a.weight']).sum()) == math.floor(0.2 * 108)
    with pytest.raises(ValueError, match='ratio'):
        feddpq_prune(weights, 1.2)
    with pytest.raises(ValueError, match='scope'):
        feddpq_prune(weights, 0.2, scope='row')


def test_feddpq_gradient_is_taken_at_the_pruned_point():
    # Arrange
    received = get_weights(_tiny(6))
    x, y = _data(16)
    pruned, _ = feddpq_prune(received, 0.3)
    reference = _tiny(6)
    set_weights(reference, pruned)
    loss = nn.CrossEntropyLoss()(reference(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    # Act: batch = the whole set, so the batch order does not matter for the mean loss
    gradient, mask = feddpq_local_gradient(_tiny(6), received, (x, y), 0.3, batch_size=16,
                                           seed=0)
    # Assert
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(gradient[name], p.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert not all(m.all() for m in mask.values())


def test_feddpq_gradient_is_minus_one_step_update_over_lr_and_leaves_the_pruned_model():
    # Arrange: a mini-batch smaller than the data, so the seeded draw matters
    received = get_weights(_tiny(6))
    x, y = _data(16)
    model = _tiny(6)
    # Act
    gradient, mask = feddpq_local_gradient(model, received, (x, y), 0.3, batch_size=4, seed=2)
    update, update_mask, _ = feddpq_local_update(_tiny(6), received, (x, y), 0.3, steps=1,
                                                 lr=0.1, batch_size=4, seed=2)
    # Assert: FedDPQ eq. (5), Δ = −η g; the model holds w̃ (eq. (10)), not the stepped one
    for name in received:
        np.testing.assert_allclose(gradient[name], -update[name] / 0.1, rtol=1e-5, atol=1e-6)
        assert np.array_equal(mask[name], update_mask[name])
    pruned, _ = feddpq_prune(received, 0.3)
    for name, value in get_weights(model).items():
        assert np.array_equal(value, pruned[name])


# ------------------------------------------------------------------ structured ----
def _dense(name, channels, px, seed=0):
    torch.set_num_threads(1)
    return build_model(name, 10, input_px=px, in_channels=channels, seed=seed)


@pytest.mark.parametrize('name, channels, px', MODELS)
@pytest.mark.parametrize('prune_hidden', [False, True])
def test_small_model_forward_equals_dense_with_pruned_channels_zeroed(name, channels, px,
                                                                      prune_hidden):
    # Arrange
    dense = _dense(name, channels, px)
    x = torch.from_numpy(_data(6, px, channels)[0])
    # Act
    small, index_map = shrink_model(dense, 0.5, prune_hidden=prune_hidden)
    weights = get_weights(dense)
    keep = structured_mask(index_map, weight_shapes(weights))
    zeroed = _dense(name, channels, px)
    set_weights(zeroed, apply_mask(weights, keep))
    # Assert
    with torch.no_grad():
        torch.testing.assert_close(small(x), zeroed(x), rtol=1e-5, atol=1e-5)
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in dense.parameters())


def test_shrink_keeps_the_most_important_filters_and_matches_next_layer_inputs():
    # Arrange
    dense = _dense('small_cnn', 3, 32)
    weights = get_weights(dense)
    # Act
    small, index_map = shrink_model(dense, 0.25)
    # Assert: conv widths 16/32/64 → 4/8/16, first Linear inputs follow the kept channels
    convs = [m for m in small.features if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(3, 4), (4, 8), (8, 16)]
    assert small.classifier[1].in_features == 16 * 16
    assert small.classifier[3].out_features == 10
    l1 = np.abs(weights['features.3.weight']).reshape(32, -1).sum(axis=1)
    kept = index_map['features.3.weight'][0]
    dropped = np.setdiff1d(np.arange(32), kept)
    assert l1[kept].min() >= l1[dropped].max()
    np.testing.assert_array_equal(index_map['features.6.weight'][1], kept)
    last = index_map['features.6.weight'][0]
    np.testing.assert_array_equal(index_map['classifier.1.weight'][1],
                                  (last[:, None] * 16 + np.arange(16)).ravel())


def test_extract_expand_round_trip_places_every_kept_weight_at_its_dense_index():
    # Arrange
    dense = _dense('digits_cnn', 1, 8)
    weights = get_weights(dense)
    _, index_map = shrink_model(dense, 0.5, prune_hidden=True)
    shapes = weight_shapes(weights)
    # Act
    small = extract_weights(weights, index_map)
    back = expand_update(small, index_map, shapes)
    # Assert
    keep = structured_mask(index_map, shapes)
    for name in weights:
        np.testing.assert_array_equal(back[name], np.where(keep[name], weights[name], 0))
    out_idx, in_idx = index_map['features.2.weight'][:2]
    for a, o in enumerate(out_idx):
        for b, i in enumerate(in_idx):
            np.testing.assert_array_equal(small['features.2.weight'][a, b],
                                          weights['features.2.weight'][o, i])


def test_expanded_update_of_a_trained_small_model_is_zero_where_pruned():
    # Arrange
    dense = _dense('tiny_cnn', 3, 8)
    small, index_map = shrink_model(dense, 0.5)
    before = get_weights(small)
    x, y = _data(32, 8)
    # Act
    train_local(small, x, y, TrainConfig(local_epochs=1, batch_size=16), seed=0)
    shapes = weight_shapes(get_weights(dense))
    update = expand_update(subtract(get_weights(small), before), index_map, shapes)
    # Assert
    keep = structured_mask(index_map, shapes)
    assert all(not update[n][~keep[n]].any() for n in shapes)
    assert np.abs(update['features.0.weight']).sum() > 0
    assert keep['features.0.weight'].sum() == 4 * 27


@pytest.mark.parametrize('keep', [0.0, -0.5, 1.5])
def test_shrink_rejects_keep_fraction_outside_range(keep):
    with pytest.raises(ValueError, match='keep_fraction'):
        shrink_model(_dense('tiny_cnn', 3, 32), keep)


def test_shrink_rejects_unknown_importance():
    with pytest.raises(ValueError, match="importance 'taylor' unknown; choices: l1, l2"):
        shrink_model(_dense('tiny_cnn', 3, 32), 0.5, importance='taylor')


@pytest.mark.parametrize('model', [
    nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(16, 2)),
    nn.Sequential(nn.Flatten(), nn.Linear(12, 2)),
    nn.LSTM(4, 4)])
def test_shrink_rejects_unknown_model_structure(model):
    with pytest.raises(ValueError, match='model'):
        shrink_model(model, 0.5)


def test_expand_update_rejects_a_mismatched_shape():
    dense = _dense('tiny_cnn', 3, 32)
    _, index_map = shrink_model(dense, 0.5)
    shapes = weight_shapes(get_weights(dense))
    with pytest.raises(ValueError, match='small_update'):
        expand_update({'features.0.weight': np.zeros((8, 3, 3, 3), np.float32)}, index_map,
                      shapes)


def test_shrink_supports_a_plain_sequential_cnn():
    # Arrange
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Conv2d(2, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 5, 3),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(20, 7),
                          nn.ReLU(), nn.Linear(7, 3))
    x = torch.randn(4, 2, 6, 6)
    # Act
    small, index_map = shrink_model(dense, 0.5, importance='l2', prune_hidden=True)
    shapes = weight_shapes(get_weights(dense))
    zeroed = apply_mask(get_weights(dense), structured_mask(index_map, shapes))
    reference = copy.deepcopy(dense)
    set_weights(reference, zeroed)
    # Assert: 6 → 3 and 5 → 3 filters (half rounded up), 7 → 4 hidden units, 3 outputs kept
    assert [len(index_map[f'{i}.weight'][0]) for i in (0, 2, 6, 8)] == [3, 3, 4, 3]
    with torch.no_grad():
        torch.testing.assert_close(small(x), reference(x), rtol=1e-5, atol=1e-5)
