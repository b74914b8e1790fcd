import numpy as np

from fl_uav.aggregation.scaffold import (
    DELTA_C_KEY,
    DELTA_C_TENSOR_PREFIX,
    SERVER_LR_KNOB,
    Scaffold,
    split_prefixed,
    with_prefix,
)

from ._helpers import model, update


def test_scaffold_updates_model_and_control_variate():
    # Arrange: N = 4 drones, 2 report; mean Δy = (1, 2), Σ Δc = (4, -8)
    strategy = Scaffold(num_clients=4, server_lr=0.5)
    updates = [update(0, [0.0, 1.0], n=1, **{DELTA_C_KEY: {'w': [1.0, -2.0]}}),
               update(1, [2.0, 3.0], n=100, **{DELTA_C_KEY: {'w': np.array([3.0, -6.0])}})]
    # Act
    result = strategy.aggregate(1, model([10.0, 10.0]), updates)
    # Assert: w + 0.5 · (1, 2); c = 0 + (4, -8)/4
    np.testing.assert_allclose(result.weights['w'], [10.5, 11.0])
    np.testing.assert_allclose(strategy.server_control(result.weights)['w'], [1.0, -2.0])
    assert strategy.configure_round(2, [0]) == {0: {SERVER_LR_KNOB: 0.5}}


def test_scaffold_control_starts_at_zero_and_empty_round_keeps_everything():
    strategy = Scaffold(num_clients=2)
    w = model([1.0, 2.0])
    np.testing.assert_array_equal(strategy.server_control(w)['w'], [0.0, 0.0])
    for updates in ([], [update(0, [5.0, 5.0])],   # no Δc
                    [update(0, [5.0, 5.0], **{DELTA_C_KEY: {'w': [1.0]}})]):  # wrong shape
        result = strategy.aggregate(1, w, updates)
        assert result.empty
        np.testing.assert_array_equal(result.weights['w'], w['w'])
    np.testing.assert_array_equal(strategy.server_control(w)['w'], [0.0, 0.0])


def test_scaffold_state_round_trip():
    strategy = Scaffold(num_clients=1)
    strategy.aggregate(1, model([0.0]), [update(0, [1.0], **{DELTA_C_KEY: {'w': [0.25]}})])
    restored = Scaffold(num_clients=1)
    restored.load_state_dict(strategy.state_dict())
    np.testing.assert_array_equal(restored.server_control(model([0.0]))['w'], [0.25])


def test_prefix_helpers_round_trip():
    dc = {'w': np.ones(2)}
    frame = {'w': np.zeros(2), **with_prefix(dc, DELTA_C_TENSOR_PREFIX)}
    plain, extra = split_prefixed(frame, DELTA_C_TENSOR_PREFIX)
    assert list(plain) == ['w'] and list(extra) == ['w']
    np.testing.assert_array_equal(extra['w'], dc['w'])
