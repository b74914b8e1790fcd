import numpy as np
import pytest

from fl_uav.aggregation import ClientUpdate, FedAvg, build_strategy


def _update(sender: int, value: float, n: int) -> ClientUpdate:
    return ClientUpdate(sender=sender, round_index=1, delta={'w': np.full(2, value, np.float32)},
                        num_samples=n)


def test_fedavg_is_the_sample_weighted_mean_delta():
    # Prepare: deltas 1 (n=10) and 4 (n=30) -> (10*1 + 30*4) / 40 = 3.25
    weights = {'w': np.array([1.0, -1.0], np.float32)}
    # Execute
    result = FedAvg().aggregate(1, weights, [_update(0, 1.0, 10), _update(1, 4.0, 30)])
    # Assert
    np.testing.assert_allclose(result.weights['w'], [4.25, 2.25])
    assert not result.empty and result.metrics['participants'] == 2


def test_server_lr_scales_the_step():
    weights = {'w': np.zeros(2, np.float32)}
    result = FedAvg(server_lr=0.5).aggregate(1, weights, [_update(0, 2.0, 5)])
    np.testing.assert_allclose(result.weights['w'], [1.0, 1.0])


def test_empty_round_keeps_the_model():
    weights = {'w': np.array([3.0, 4.0], np.float32)}
    for updates in ([], [_update(0, 9.0, 0)]):
        result = FedAvg().aggregate(2, weights, updates)
        assert result.empty
        np.testing.assert_array_equal(result.weights['w'], weights['w'])


def test_unknown_strategy_lists_choices():
    with pytest.raises(ValueError, match="strategy 'fedmagic' unknown; choices: fedavg, "):
        build_strategy('fedmagic')
