import numpy as np
import pytest

from fl_uav.aggregation.afacd import AFACD
from fl_uav.aggregation.fednova import FedNova
from fl_uav.aggregation.fedprox import PROXIMAL_MU_KNOB, FedProx

from ._helpers import model, update


def test_fedprox_sends_mu_and_aggregates_like_fedavg():
    # Arrange
    strategy = FedProx(mu=0.05)
    # Act
    knobs = strategy.configure_round(1, [3, 7])
    result = strategy.aggregate(1, model([0.0]), [update(3, [1.0], n=10),
                                                  update(7, [4.0], n=30)])
    # Assert
    assert knobs == {3: {PROXIMAL_MU_KNOB: 0.05}, 7: {PROXIMAL_MU_KNOB: 0.05}}
    np.testing.assert_allclose(result.weights['w'], [3.25])
    assert strategy.state_dict() == {}


def test_fedprox_rejects_negative_mu():
    with pytest.raises(ValueError):
        FedProx(mu=-1.0)


def test_fednova_normalizes_by_tau_one_and_four():
    # Arrange: equal n, τ = (1, 4), Δ = (2, 4) -> d = (2, 1), τ_eff = 2.5, step = 2.5 · 1.5
    updates = [update(0, [2.0], steps=1), update(1, [4.0], steps=4)]
    # Act
    result = FedNova().aggregate(1, model([1.0]), updates)
    # Assert (FedAvg would give 1 + 3 = 4)
    np.testing.assert_allclose(result.weights['w'], [1.0 + 3.75])
    assert result.metrics['tau_eff'] == pytest.approx(2.5)


def test_fednova_equal_tau_is_fedavg():
    updates = [update(0, [1.0], n=10, steps=3), update(1, [4.0], n=30, steps=3)]
    result = FedNova(server_lr=0.5).aggregate(1, model([0.0]), updates)
    np.testing.assert_allclose(result.weights['w'], [0.5 * 3.25])


def test_fednova_and_afacd_empty_rounds_keep_the_model():
    w = model([3.0, 4.0])
    for strategy in (FedNova(), AFACD()):
        for updates in ([], [update(0, [9.0, 9.0], n=0, steps=2)],
                        [update(0, [9.0, 9.0], n=5)], [update(0, [9.0, 9.0], steps=0)]):
            result = strategy.aggregate(2, w, updates)
            assert result.empty
            np.testing.assert_array_equal(result.weights['w'], w['w'])


def test_afacd_is_the_equal_weight_mean_of_per_step_deltas():
    # Arrange: Δ/τ = (2/1, 4/4) = (2, 1); equal weights whatever n -> 1.5, η̃ = 2 -> 3
    updates = [update(0, [2.0], n=1, steps=1), update(1, [4.0], n=99, steps=4)]
    # Act
    result = AFACD(server_lr=2.0).aggregate(1, model([0.0]), updates)
    # Assert
    np.testing.assert_allclose(result.weights['w'], [3.0])
    assert result.metrics['participants'] == 2
