import numpy as np
import pytest
import torch
from torch import nn

from fl_uav.learning.models import build_model
from fl_uav.learning.training import NonFiniteLossError, TrainConfig, train_local
from fl_uav.learning.vectorized import (
    VectorizedTrainer,
    _to_grouped,
    _to_stacked,
    client_batches,
    first_diverging_client,
    torch_epoch_orders,
    train_clients_sequential,
    train_clients_vectorized,
)
from fl_uav.learning.weights import get_weights, set_weights

# Unequal sizes: not multiples of the batch, one client with a single partial batch, one empty.
SIZES = (37, 5, 24, 0, 16, 29)


def _clients(sizes, channels=3, px=8, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1, (n, channels, px, px)).astype(np.float32),
             rng.integers(0, classes, n)) for n in sizes]


def _one_channel_net() -> nn.Module:
    """Exercises both convolution paths (im2col for 1 channel, grouped), stride and dilation."""
    torch.manual_seed(3)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=2, dilation=2), nn.ReLU(),
        nn.Conv2d(4, 8, 3, padding=1, stride=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 2 * 2, 16), nn.ReLU(), nn.Linear(16, 3))


def _max_difference(a, b):
    return max(float(np.abs(a[name] - b[name]).max()) for name in a)


def test_sequential_reference_is_train_local():
    # Prepare
    model = build_model('tiny_cnn', 3, input_px=8, seed=1)
    weights = get_weights(model)
    data = _clients(SIZES)
    config = TrainConfig(local_epochs=2, batch_size=8, momentum=0.9)
    seeds = [11, 12, 13, 14, 15, 16]
    # Execute
    updates = train_clients_sequential(model, weights, data, config, seeds)
    # Assert: identical batches, identical arithmetic
    for (x, y), seed, update in zip(data, seeds, updates):
        alone = build_model('tiny_cnn', 3, input_px=8)
        set_weights(alone, weights)
        result = train_local(alone, x, y, config, seed)
        assert update.result == result or (result.steps == 0 and update.result.steps == 0)
        for name, value in get_weights(alone).items():
            np.testing.assert_array_equal(update.weights[name], value)


@pytest.mark.parametrize('config', [
    TrainConfig(local_epochs=3, batch_size=8, momentum=0.0),
    TrainConfig(local_epochs=3, batch_size=8, momentum=0.9, weight_decay=1e-3),
    TrainConfig(local_epochs=2, batch_size=8, optimizer='adam', lr=1e-3, weight_decay=1e-4),
    TrainConfig(local_epochs=3, batch_size=8, max_steps=4),
], ids=['sgd', 'momentum-wd', 'adam', 'max-steps'])
@pytest.mark.parametrize('model_name', ['tiny_cnn', 'one_channel', 'lenet5'])
def test_vectorized_matches_sequential(config, model_name):
    # Prepare
    if model_name == 'one_channel':
        model, data = _one_channel_net(), _clients(SIZES, channels=1)
    elif model_name == 'lenet5':
        model = build_model('lenet5', 3, input_px=12, seed=2, in_channels=1)
        data = _clients(SIZES, channels=1, px=12)
    else:
        model, data = build_model('tiny_cnn', 3, input_px=8, seed=2), _clients(SIZES)
    weights = get_weights(model)
    seeds = list(range(20, 20 + len(SIZES)))
    trainer = VectorizedTrainer(model, config, max_clients_per_chunk=4)
    # Execute
    expected = train_clients_sequential(model, weights, data, config, seeds)
    actual = trainer.train(weights, data, seeds)
    # Assert
    assert trainer.backend == 'stacked'
    # Adam divides by the root of tiny second moments, which lifts LeNet-5's float-order
    # differences to ~1e-5; its updates are still ~1e-3 per step.
    tolerance = 5e-5 if (model_name, config.optimizer) == ('lenet5', 'adam') else 1e-5
    for want, got in zip(expected, actual):
        assert _max_difference(want.weights, got.weights) < tolerance
        assert (got.result.steps, got.result.samples_seen) == (want.result.steps,
                                                               want.result.samples_seen)
        if want.result.steps:
            assert got.result.mean_loss == pytest.approx(want.result.mean_loss, rel=1e-5)


class _MixedLayers(nn.Module):
    """Grouped convolutions joined by per-channel layers (kept grouped) and by layers that
    need the samples per client (a residual sum of two branches, inplace ReLU, AvgPool,
    torch.relu as a function): every conversion path of the stacked replay."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv3 = nn.Conv2d(4, 6, 3, padding=1)
        self.act = nn.ReLU(inplace=True)
        self.pool = nn.AvgPool2d(2)
        self.head = nn.Linear(6 * 4 * 4, 3)

    def forward(self, x):
        a = torch.relu(self.conv1(x))
        b = self.conv2(a) + a
        c = self.pool(nn.functional.max_pool2d(self.act(self.conv3(b)), 1))
        return self.head(c.flatten(1))


def test_grouped_layout_round_trip():
    x = torch.arange(3 * 2 * 5 * 4 * 4, dtype=torch.float32).reshape(6, 5, 4, 4)
    grouped = _to_grouped(x, 3)
    assert grouped.shape == (2, 15, 4, 4)
    # client c's channels are group c of the grouped tensor, sample order kept
    torch.testing.assert_close(grouped[1, 5:10], x[3])
    torch.testing.assert_close(_to_stacked(grouped, 3), x)


class _PoolWithIndices(nn.Module):
    """A pooling layer that returns indices: not a per-channel layer for the replay."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveMaxPool2d(2, return_indices=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        pooled, _ = self.pool(self.conv(x))
        return self.head(pooled.flatten(1))


class _InPlaceUnused(nn.Module):
    """ReLU in place with its result unused: the model relies on the conv output changing.
    Non-negative weights: on non-negative inputs the ReLU would do nothing."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(4 * 4 * 4, 3)
        with torch.no_grad():
            self.conv.weight.abs_()
            self.conv.bias.zero_()

    def forward(self, x):
        y = self.conv(x)
        nn.functional.relu(y, inplace=True)
        return self.head(self.pool(y).flatten(1))


class _ViewOfChannelsLast(nn.Module):
    """``view`` on a convolution's output, which the replay stores channels-last."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.head(y.view(y.size(0), -1))


@pytest.mark.parametrize(('model_class', 'backend'), [
    (_MixedLayers, 'stacked'), (_PoolWithIndices, 'stacked'), (_InPlaceUnused, 'stacked'),
    (_ViewOfChannelsLast, 'vmap'),   # the replay cannot run it: falls back, no crash
])
def test_replay_edge_cases_match_sequential(model_class, backend):
    model, data = model_class(), _clients((10, 7, 5))
    weights = get_weights(model)
    config = TrainConfig(local_epochs=1, batch_size=4, momentum=0.9)
    trainer = VectorizedTrainer(model, config, max_clients_per_chunk=2)
    expected = train_clients_sequential(model, weights, data, config, [0, 1, 2])
    actual = trainer.train(weights, data, [0, 1, 2])
    assert trainer.backend == backend
    for want, got in zip(expected, actual):
        assert _max_difference(want.weights, got.weights) < 1e-5


def test_a_forced_stacked_backend_says_why_the_replay_failed():
    model = _ViewOfChannelsLast()
    trainer = VectorizedTrainer(model, TrainConfig(local_epochs=1, batch_size=4),
                                backend='stacked')
    with pytest.raises(ValueError, match='stacked replay failed'):
        trainer.train(get_weights(model), _clients((6, 5)), [0, 1])


def test_vmap_backend_matches_sequential():
    model = build_model('tiny_cnn', 3, input_px=8, seed=2)
    weights = get_weights(model)
    data = _clients(SIZES)
    config = TrainConfig(local_epochs=2, batch_size=8, momentum=0.9)
    seeds = list(range(len(SIZES)))
    trainer = VectorizedTrainer(model, config, backend='vmap')
    expected = train_clients_sequential(model, weights, data, config, seeds)
    actual = trainer.train(weights, data, seeds)
    assert trainer.backend == 'vmap'
    for want, got in zip(expected, actual):
        assert _max_difference(want.weights, got.weights) < 1e-5


def test_finished_and_empty_clients_are_masked():
    # Prepare: a 3-sample client trained next to a 40-sample one (10 times more steps)
    model = build_model('tiny_cnn', 3, input_px=8, seed=4)
    weights = get_weights(model)
    small, big, empty = _clients((3, 40, 0), seed=5)
    config = TrainConfig(local_epochs=2, batch_size=4, momentum=0.9)
    trainer = VectorizedTrainer(model, config)
    # Execute
    alone = trainer.train(weights, [small], [7])[0]
    together = trainer.train(weights, [big, small, empty], [8, 7, 9])
    # Assert
    assert together[1].result.steps == 2 and together[0].result.steps == 20
    assert _max_difference(alone.weights, together[1].weights) < 1e-6
    assert together[2].result.steps == 0
    for name, value in weights.items():
        np.testing.assert_array_equal(together[2].weights[name], value)


def test_chunking_does_not_change_results():
    model = build_model('tiny_cnn', 3, input_px=8)
    weights = get_weights(model)
    data = _clients((9, 17, 4, 30, 12, 1, 22), seed=6)
    config = TrainConfig(local_epochs=2, batch_size=8)
    seeds = list(range(7))
    whole = train_clients_vectorized(model, weights, data, config, seeds, max_clients_per_chunk=64)
    chunked = train_clients_vectorized(model, weights, data, config, seeds,
                                       max_clients_per_chunk=2)
    for a, b in zip(whole, chunked):
        assert _max_difference(a, b) < 1e-6


@pytest.mark.parametrize('backend', ['stacked', 'vmap'])
def test_worker_threads_give_bit_identical_results(backend):
    # Arrange: 7 clients in chunks of 2 (4 chunks), momentum so state carries across steps
    model = build_model('tiny_cnn', 3, input_px=8)
    weights = get_weights(model)
    data = _clients((9, 17, 4, 30, 12, 1, 22), seed=6)
    config = TrainConfig(local_epochs=2, batch_size=8, momentum=0.9)
    seeds = list(range(7))
    # Act
    one = VectorizedTrainer(model, config, 2, backend=backend).train(weights, data, seeds)
    three = VectorizedTrainer(model, config, 2, backend=backend, workers=3).train(
        weights, data, seeds)
    # Assert
    for a, b in zip(one, three):
        assert a.result == b.result
        for name in a.weights:
            np.testing.assert_array_equal(a.weights[name], b.weights[name])


def test_a_diverging_client_in_a_worker_thread_stops_the_round():
    model = build_model('tiny_cnn', 3, input_px=8)
    data = _clients((12, 10, 8, 6), seed=2)
    data[3][0][1, 0, 0, 0] = np.nan
    trainer = VectorizedTrainer(model, TrainConfig(batch_size=4), 1, workers=2)
    with pytest.raises(NonFiniteLossError, match='step'):
        trainer.train(get_weights(model), data, [0, 1, 2, 3])
    with pytest.raises(ValueError, match='workers'):
        VectorizedTrainer(model, TrainConfig(), workers=0)


@pytest.mark.parametrize('nan_client, named', [(2, 'c'), (None, None)])
def test_the_replay_names_the_first_client_that_diverges_alone(nan_client, named):
    # Arrange: a round of four clients; one has a NaN sample (or none does)
    model = build_model('tiny_cnn', 3, input_px=8)
    data = _clients((12, 10, 8, 6), seed=2)
    if nan_client is not None:
        data[nan_client][0][1, 0, 0, 0] = np.nan
    trainer = VectorizedTrainer(model, TrainConfig(batch_size=4), 4)
    # Act
    found = first_diverging_client(trainer, get_weights(model), ['a', 'b', 'c', 'd'], data,
                                   [0, 1, 2, 3], steps=[1, 2, 3, 1])
    # Assert
    assert found == named


def test_same_seeds_give_identical_weights_and_other_seeds_differ():
    model = build_model('tiny_cnn', 3, input_px=8)
    weights = get_weights(model)
    data = _clients((20, 13), seed=7)
    config = TrainConfig(local_epochs=2, batch_size=8)
    first = train_clients_vectorized(model, weights, data, config, [1, 2])
    second = train_clients_vectorized(model, weights, data, config, [1, 2])
    other = train_clients_vectorized(model, weights, data, config, [3, 2])
    for a, b in zip(first, second):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    assert _max_difference(first[0], other[0]) > 0


def test_client_batches_follow_the_shuffle_and_cap():
    config = TrainConfig(local_epochs=2, batch_size=4, max_steps=5)
    batches = client_batches(10, config, seed=3, shuffle=torch_epoch_orders)
    generator = torch.Generator().manual_seed(3)
    first = torch.randperm(10, generator=generator).numpy()
    second = torch.randperm(10, generator=generator).numpy()
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4]
    np.testing.assert_array_equal(np.concatenate(batches[:3]), first)
    np.testing.assert_array_equal(np.concatenate(batches[3:]), second[:8])


def test_unsupported_layers_fall_back_to_vmap():
    # LayerNorm has parameters the stacked replay does not know; the second model mixes
    # samples across the batch, which the first-use check catches.
    class MixesSamples(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(12, 3)

        def forward(self, x):
            flat = x.flatten(1)
            return self.fc(flat - flat.mean(0, keepdim=True))

    torch.manual_seed(0)
    layer_norm = nn.Sequential(nn.Flatten(), nn.LayerNorm(12), nn.Linear(12, 3))
    data = _clients((6, 9), channels=3, px=2, seed=8)
    config = TrainConfig(local_epochs=1, batch_size=4)
    for model in (layer_norm, MixesSamples()):
        trainer = VectorizedTrainer(model, config)
        trainer.train(get_weights(model), data, [0, 1])
        assert trainer.backend == 'vmap'
    with pytest.raises(ValueError, match='stacked'):
        VectorizedTrainer(layer_norm, config, backend='stacked')


def test_rejects_models_with_buffers_and_bad_arguments():
    with_buffers = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    with pytest.raises(ValueError, match='buffers'):
        VectorizedTrainer(with_buffers, TrainConfig())
    model = build_model('tiny_cnn', 3, input_px=8)
    with pytest.raises(ValueError, match='max_clients_per_chunk'):
        VectorizedTrainer(model, TrainConfig(), max_clients_per_chunk=0)
    with pytest.raises(ValueError, match='seeds'):
        VectorizedTrainer(model, TrainConfig()).train(get_weights(model), _clients((4,)), [])


def test_nan_input_stops_with_a_clear_error_and_threads_are_restored():
    model = build_model('tiny_cnn', 3, input_px=8)
    x, y = _clients((12,))[0]
    x[5, 0, 0, 0] = np.nan
    before = torch.get_num_threads()
    with pytest.raises(NonFiniteLossError, match='step'):
        train_clients_vectorized(model, get_weights(model), [(x, y)], TrainConfig(batch_size=4),
                                 [0], num_threads=1)
    assert torch.get_num_threads() == before


def test_fedprox_proximal_term_matches_between_paths_and_pulls_towards_the_anchor():
    # Prepare
    import numpy as np

    from fl_uav.learning.models import build_model
    from fl_uav.learning.training import TrainConfig
    from fl_uav.learning.vectorized import VectorizedTrainer, train_clients_sequential
    from fl_uav.learning.weights import get_weights

    rng = np.random.default_rng(0)
    model = build_model('tiny_cnn', 3, input_px=8, in_channels=1)
    weights = get_weights(model)
    data = [(rng.normal(size=(n, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, n))
            for n in (20, 9)]
    plain = TrainConfig(local_epochs=2, batch_size=4, lr=0.1, momentum=0.0)
    prox = TrainConfig(local_epochs=2, batch_size=4, lr=0.1, momentum=0.0, proximal_mu=5.0)
    # Execute
    sequential = train_clients_sequential(model, weights, data, prox, [1, 2])
    vectorized = VectorizedTrainer(model, prox).train(weights, data, [1, 2])
    free = train_clients_sequential(model, weights, data, plain, [1, 2])
    # Assert
    for seq, vec, unconstrained in zip(sequential, vectorized, free):
        for name in weights:
            np.testing.assert_allclose(seq.weights[name], vec.weights[name], atol=1e-5)
        drift = sum(float(np.sum((seq.weights[n] - weights[n]) ** 2)) for n in weights)
        drift_free = sum(float(np.sum((unconstrained.weights[n] - weights[n]) ** 2))
                         for n in weights)
        assert drift < drift_free


@pytest.mark.parametrize('chunk', [32, 2])
def test_mean_trace_is_the_weighted_fleet_mean_after_each_step(chunk):
    # Setup: unequal step counts (a client that stopped keeps its final weights)
    model = build_model('tiny_cnn', 3, input_px=8, seed=1)
    weights = get_weights(model)
    data = _clients((37, 5, 24, 16))
    steps, trace_weights = [4, 1, 3, 2], [37.0, 5.0, 24.0, 16.0]
    config = TrainConfig(local_epochs=1, batch_size=8)
    trainer = VectorizedTrainer(model, config, max_clients_per_chunk=chunk)
    # Execute
    updates = trainer.train(weights, data, [1, 2, 3, 4], steps=steps,
                            trace_weights=trace_weights)
    trace = trainer.last_mean_trace
    # Assert: t = 0 is the start, t = 4 the weighted mean of the final weights, and t = 2 the
    # mean of the clients' weights after two steps (the one-step client at its final weights)
    assert len(trace) == 5
    for name in weights:
        np.testing.assert_allclose(trace[0][name], weights[name], atol=1e-6)
        final = sum(w * u.weights[name] for w, u in zip(trace_weights, updates)) / 82.0
        np.testing.assert_allclose(trace[4][name], final, atol=1e-5)
    after_two = trainer.train(weights, data, [1, 2, 3, 4], steps=[min(s, 2) for s in steps])
    for name in weights:
        mean = sum(w * u.weights[name] for w, u in zip(trace_weights, after_two)) / 82.0
        np.testing.assert_allclose(trace[2][name], mean, atol=1e-5)
    assert trainer.last_mean_trace == []   # the second call recorded nothing


def test_traces_are_the_same_with_worker_threads():
    # Setup: 5 clients in chunks of 2 (3 chunks), unequal steps
    model = build_model('tiny_cnn', 3, input_px=8, seed=1)
    weights = get_weights(model)
    data = _clients((37, 5, 24, 16, 9))
    kwargs = dict(steps=[4, 1, 3, 2, 2], trace_weights=[37.0, 5.0, 24.0, 16.0, 9.0],
                  trace_clients=True)
    config = TrainConfig(local_epochs=1, batch_size=8)
    one = VectorizedTrainer(model, config, max_clients_per_chunk=2)
    two = VectorizedTrainer(model, config, max_clients_per_chunk=2, workers=2)
    # Execute
    one.train(weights, data, [1, 2, 3, 4, 5], **kwargs)
    two.train(weights, data, [1, 2, 3, 4, 5], **kwargs)
    # Assert: the chunks' traces are put together in the same order
    assert len(one.last_mean_trace) == len(two.last_mean_trace) == 5
    for a, b in zip(one.last_mean_trace, two.last_mean_trace):
        for name in weights:
            np.testing.assert_array_equal(a[name], b[name])
    assert [len(t) for t in two.last_client_trace] == [5, 2, 4, 3, 3]
    for ta, tb in zip(one.last_client_trace, two.last_client_trace):
        for a, b in zip(ta, tb):
            for name in weights:
                np.testing.assert_array_equal(a[name], b[name])


def test_mean_trace_needs_one_weight_per_client():
    # Setup
    model = build_model('tiny_cnn', 3, input_px=8, seed=1)
    trainer = VectorizedTrainer(model, TrainConfig(batch_size=8))
    # Execute / Assert
    with pytest.raises(ValueError, match='trace weights'):
        trainer.train(get_weights(model), _clients((8, 8)), [1, 2], trace_weights=[1.0])
