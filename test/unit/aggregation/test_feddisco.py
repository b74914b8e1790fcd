import math

import numpy as np
import pytest

from fl_uav.aggregation.feddisco import FedDisco

from ._helpers import model, update


def test_kl_weights_on_a_hand_example():
    # Arrange: equal sizes; drone 0 balanced (KL 0), drone 1 one class (KL ln 2 -> normalised 1)
    strategy = FedDisco(a=0.5, b=0.1)
    updates = [update(0, [1.0], n=10, class_counts=[5, 5]),
               update(1, [3.0], n=10, class_counts=[10, 0])]
    # Act
    result = strategy.aggregate(1, model([0.0]), updates)
    # Assert: raw = (0.5 + 0.1, 0.5 - 0.5 + 0.1) = (0.6, 0.1) -> p = (6/7, 1/7)
    assert result.metrics['weights'] == pytest.approx({0: 6 / 7, 1: 1 / 7})
    np.testing.assert_allclose(result.weights['w'], [6 / 7 + 3 / 7], rtol=1e-6)


def test_l1_discrepancy_and_relu_fallback():
    strategy = FedDisco(a=10.0, b=0.0, measure='l1')
    h = [np.array([1.0, 0.0]), np.array([0.5, 0.5])]
    assert strategy.discrepancies(h) == pytest.approx([1.0, 0.0])
    # all ReLU terms 0 -> fall back to the size weights
    strategy = FedDisco(a=10.0, b=0.0, measure='l1')
    assert strategy.weights_for([1, 3], [h[0], h[0]]) == pytest.approx([0.25, 0.75])


def test_kl_against_a_custom_target():
    strategy = FedDisco(measure='kl', target=[1, 3])
    d = strategy.discrepancies([np.array([0.25, 0.75]), np.array([1.0, 0.0])])
    assert d == pytest.approx([0.0, 1.0])   # normalised by the sum
    assert math.isfinite(d.sum())


def test_feddisco_empty_round_keeps_the_model():
    w = model([2.0])
    for updates in ([], [update(0, [1.0], n=0, class_counts=[1, 1])],
                    [update(0, [1.0])], [update(0, [1.0], class_counts=[0, 0])]):
        result = FedDisco().aggregate(1, w, updates)
        assert result.empty
        np.testing.assert_array_equal(result.weights['w'], w['w'])
    assert FedDisco().state_dict() == {}
