import numpy as np
import pytest
import torch

from fl_uav.learning.models import build_model
from fl_uav.learning.training import (
    STOP_DEADLINE,
    STOP_SUPERSEDED,
    NonFiniteLossError,
    StopCondition,
    TrainConfig,
    evaluate,
    train_local,
)
from fl_uav.learning.weights import architecture_fingerprint, get_weights, set_weights, subtract


def _separable(n: int, seed: int):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    inputs = rng.normal(0, 0.3, (n, 3, 32, 32)).astype(np.float32)
    inputs[:, 0] += np.where(labels == 1, 1.0, -1.0)[:, None, None]
    return inputs, labels


def test_training_learns_a_separable_task():
    # Prepare
    torch.set_num_threads(1)
    model = build_model('tiny_cnn', num_classes=2, seed=0)
    x, y = _separable(256, seed=1)
    x_test, y_test = _separable(200, seed=2)
    before, _ = evaluate(model, x_test, y_test)
    # Execute
    result = train_local(model, x, y, TrainConfig(local_epochs=3, lr=0.05), seed=0)
    after, loss = evaluate(model, x_test, y_test)
    # Assert
    assert result.steps == 3 * 8
    assert after > 0.95 > before or after > before + 0.3
    assert np.isfinite(loss)


def test_training_is_deterministic_for_a_seed():
    x, y = _separable(64, seed=3)
    runs = []
    for _ in range(2):
        model = build_model('tiny_cnn', 2, seed=5)
        train_local(model, x, y, TrainConfig(local_epochs=1), seed=9)
        runs.append(get_weights(model))
    for name in runs[0]:
        np.testing.assert_array_equal(runs[0][name], runs[1][name])


def test_max_steps_caps_training():
    x, y = _separable(256, seed=3)
    model = build_model('tiny_cnn', 2)
    result = train_local(model, x, y, TrainConfig(local_epochs=5, max_steps=3), seed=0)
    assert result.steps == 3


def test_nan_input_stops_with_a_clear_error():
    x, y = _separable(32, seed=3)
    x[0, 0, 0, 0] = np.nan
    model = build_model('tiny_cnn', 2)
    with pytest.raises(NonFiniteLossError, match='step'):
        train_local(model, x, y, TrainConfig(batch_size=32), seed=0)


def test_weights_round_trip_and_fingerprint():
    model_a, model_b = build_model('small_cnn', 7, seed=1), build_model('small_cnn', 7, seed=2)
    weights_a = get_weights(model_a)
    assert architecture_fingerprint(weights_a) == architecture_fingerprint(get_weights(model_b))
    assert architecture_fingerprint(weights_a) != architecture_fingerprint(
        get_weights(build_model('tiny_cnn', 7)))
    set_weights(model_b, weights_a)
    delta = subtract(get_weights(model_b), weights_a)
    assert all(np.all(d == 0) for d in delta.values())


def test_set_weights_rejects_wrong_shape():
    model = build_model('tiny_cnn', 3)
    weights = get_weights(model)
    name = next(iter(weights))
    weights[name] = np.zeros((1, 1), np.float32)
    with pytest.raises(ValueError, match=name):
        set_weights(model, weights)


def test_unknown_model_lists_choices():
    with pytest.raises(ValueError, match='small_cnn'):
        build_model('resnet', 3)


def test_lenet5_keeps_the_classic_feature_map_on_28_px_and_names_too_small_inputs():
    # Arrange
    model = build_model('lenet5', 10, input_px=28, in_channels=1)
    # Act
    logits = model(torch.zeros(2, 1, 28, 28))
    # Assert: 16 x 5 x 5 features into 120-84-10 (FedEx Sec. VII-A: 2 conv + 3 FC)
    linears = [m for m in model.classifier if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(400, 120), (120, 84), (84, 10)]
    assert logits.shape == (2, 10)
    with pytest.raises(ValueError, match='at least 12 px, got 8'):
        build_model('lenet5', 10, input_px=8, in_channels=1)


def test_one_torch_thread_runs_on_one_thread_and_restores_the_count_even_on_error():
    # Arrange
    from fl_uav.learning.training import one_torch_thread
    before = torch.get_num_threads()
    inside = []
    # Act
    with pytest.raises(KeyError), one_torch_thread():
        inside.append(torch.get_num_threads())
        raise KeyError('boom')
    # Assert
    assert inside == [1] and torch.get_num_threads() == before


class _FakeClock:
    """A clock (s) the test moves by hand."""

    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


@pytest.mark.parametrize('now_s, steps_done, stops', [
    (9.9, 3, False),     # before the stop instant
    (10.0, 3, True),     # at it
    (50.0, 0, False),    # long past, but the first step always runs
    (50.0, 1, True),
])
def test_the_deadline_stops_at_its_instant_but_never_before_the_first_step(now_s, steps_done,
                                                                          stops):
    # Arrange
    stop = StopCondition(stop_at_s=10.0, clock=_FakeClock(now_s))
    # Act
    stopped = stop(steps_done)
    # Assert
    assert stopped is stops and stop.reason == (STOP_DEADLINE if stops else '')


def test_a_superseded_round_stops_at_once_and_outranks_the_deadline():
    # Arrange: the deadline trips first, then a newer round arrives
    newer = [False]
    stop = StopCondition(stop_at_s=10.0, superseded=lambda: newer[0], clock=_FakeClock(11.0))
    first = stop(1)
    newer[0] = True
    # Act
    second = stop(0)
    # Assert
    assert first and second and stop.reason == STOP_SUPERSEDED


def test_without_a_deadline_or_a_superseded_callable_nothing_stops():
    assert not StopCondition()(10 ** 9) and StopCondition().reason == ''


def test_the_stop_instant_must_be_a_time():
    with pytest.raises(ValueError, match='stop_at_s'):
        StopCondition(stop_at_s=float('nan'))


@pytest.mark.parametrize('n', [1, 4])
def test_train_local_takes_no_step_once_should_stop_says_so(n):
    # Arrange: 64 samples, batch 32, 3 epochs: 6 steps; the stop trips after n
    model = build_model('tiny_cnn', 2, seed=0)
    x, y = _separable(64, seed=3)
    asked: list[int] = []

    def should_stop(steps_done: int) -> bool:
        asked.append(steps_done)
        return steps_done >= n

    # Act
    result = train_local(model, x, y, TrainConfig(local_epochs=3), seed=0,
                         should_stop=should_stop)
    # Assert: asked before every step with the steps so far; the steps taken are counted
    assert asked == list(range(n + 1))
    assert result.steps == n and result.samples_seen == 32 * n


def test_train_local_past_its_deadline_takes_one_step_and_superseded_takes_none():
    # Arrange
    x, y = _separable(64, seed=3)
    late, stale = build_model('tiny_cnn', 2, seed=0), build_model('tiny_cnn', 2, seed=0)
    received = get_weights(stale)
    config = TrainConfig(local_epochs=3)
    # Act
    one = train_local(late, x, y, config, seed=0,
                      should_stop=StopCondition(stop_at_s=0.0, clock=_FakeClock(1.0)))
    none = train_local(stale, x, y, config, seed=0,
                       should_stop=StopCondition(superseded=lambda: True))
    # Assert
    assert one.steps == 1 and (none.steps, none.samples_seen) == (0, 0)
    assert np.isnan(none.mean_loss)
    for name, value in get_weights(stale).items():
        np.testing.assert_array_equal(value, received[name])
