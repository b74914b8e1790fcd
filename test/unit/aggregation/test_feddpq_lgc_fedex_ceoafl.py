import numpy as np
import pytest

from fl_uav.aggregation.ceoafl import TwoCEOAFL
from fl_uav.aggregation.feddpq import DRAWS_KNOB, FedDPQ
from fl_uav.aggregation.fedex import FedExAsync, FedExSync
from fl_uav.aggregation.lgc import LGC

from ._helpers import json_round_trip, model, update


def test_feddpq_draws_s_with_replacement_reproducibly():
    # Arrange
    a, b = FedDPQ(num_selected=5, seed=7), FedDPQ(num_selected=5, seed=7)
    # Act
    knobs_a, knobs_b = a.configure_round(1, [0, 1, 2]), b.configure_round(1, [0, 1, 2])
    # Assert
    assert knobs_a == knobs_b
    assert sum(k[DRAWS_KNOB] for k in knobs_a.values()) == 5


def test_feddpq_shares_restrict_the_draws():
    knobs = FedDPQ(num_selected=4, seed=1, shares={0: 0.0, 1: 1.0}).configure_round(1, [0, 1])
    assert knobs == {0: {DRAWS_KNOB: 0}, 1: {DRAWS_KNOB: 4}}


def test_feddpq_mean_over_arrived_draws_counts_duplicates():
    # Arrange: drone 0 drawn twice, drone 1 once, drone 2 not drawn but answers anyway
    strategy = FedDPQ(num_selected=3)
    strategy.selection = {1: {0: 2, 1: 1}}
    updates = [update(0, [1.0]), update(1, [4.0]), update(2, [100.0])]
    # Act
    result = strategy.aggregate(1, model([0.0]), updates)
    # Assert: (2·1 + 1·4) / 3
    np.testing.assert_allclose(result.weights['w'], [2.0])
    assert result.metrics['ignored'] == 1


def test_feddpq_empty_round_and_json_state():
    strategy = FedDPQ(num_selected=2, seed=3)
    strategy.configure_round(1, [0, 1])
    w = model([1.0])
    drawn = {d for d, c in strategy.selection[1].items() if c > 0}
    absent = ({0, 1, 2} - drawn).pop()
    for updates in ([], [update(absent, [5.0])]):
        result = strategy.aggregate(1, w, updates)
        assert result.empty
        np.testing.assert_array_equal(result.weights['w'], w['w'])
    restored = FedDPQ(num_selected=2, seed=99)
    restored.load_state_dict(json_round_trip(strategy.state_dict()))
    assert restored.selection == strategy.selection
    assert restored.configure_round(2, [0, 1]) == strategy.configure_round(2, [0, 1])


def test_lgc_sums_layers_and_divides_by_the_fleet():
    # Arrange: M = 4; drone 0 sends two disjoint layers, drone 1 one layer
    updates = [update(0, [2.0, 0.0]), update(0, [0.0, 4.0]), update(1, [2.0, 0.0])]
    # Act
    result = LGC(num_clients=4).aggregate(1, model([1.0, 1.0]), updates)
    # Assert
    np.testing.assert_allclose(result.weights['w'], [2.0, 2.0])
    assert result.metrics == {'participants': 2, 'layers': 3}
    empty = LGC(num_clients=4).aggregate(1, model([1.0, 1.0]), [])
    assert empty.empty and LGC(num_clients=1).state_dict() == {}


def test_fedex_sync_adds_the_sum_over_n_and_ignores_other_rounds():
    strategy = FedExSync(num_clients=4)
    updates = [update(0, [4.0], round_index=3), update(1, [8.0], round_index=3),
               update(2, [400.0], round_index=2)]
    result = strategy.aggregate(3, model([1.0]), updates)
    np.testing.assert_allclose(result.weights['w'], [1.0 + 12.0 / 4])
    assert result.metrics['ignored'] == 1 and result.metrics['version'] == 1
    assert strategy.aggregate(4, model([1.0]), updates).empty


def test_fedex_async_applies_stale_updates_to_the_current_model():
    # Arrange
    strategy = FedExAsync(num_clients=2)
    # Act: two returns in a row, each added to the model the previous one produced
    first = strategy.aggregate(5, model([0.0]), [update(0, [2.0], round_index=4)])
    second = strategy.aggregate(6, first.weights, [update(1, [4.0], round_index=4)])
    # Assert
    np.testing.assert_allclose(second.weights['w'], [3.0])
    assert second.metrics['max_lag'] == 2
    restored = FedExAsync(num_clients=2)
    restored.load_state_dict(json_round_trip(strategy.state_dict()))
    assert restored.applied == 2
    assert restored.aggregate(7, model([1.0]), []).empty


def test_two_ceoafl_recovers_the_accumulated_gradient():
    # Arrange: η̃ = 0.1 -> Π = −Δ/0.1; U = 4 fixed α = 1/4; η = 0.2; drone 1 reports η̃ = 0.05
    strategy = TwoCEOAFL(server_lr=0.2, local_lr=0.1, num_clients=4)
    updates = [update(0, [-0.1, 0.0]), update(1, [0.0, -0.05], local_lr=0.05)]
    # Act
    result = strategy.aggregate(1, model([1.0, 1.0]), updates)
    # Assert: Π = (1, 0), (0, 1); w − 0.2 · ¼ · Π
    np.testing.assert_allclose(result.weights['w'], [0.95, 0.95], rtol=1e-6)


def test_two_ceoafl_decay_and_empty_round():
    strategy = TwoCEOAFL(server_lr=1.0, lr_decay=0.5, decay_every=20)
    assert [strategy.server_lr_at(r) for r in (1, 20, 21, 41)] == pytest.approx(
        [1.0, 1.0, 0.5, 0.25])
    w = model([1.0])
    for updates in ([], [update(0, [1.0], n=0)], [update(0, [1.0], local_lr=-1.0)]):
        result = strategy.aggregate(1, w, updates)
        assert result.empty
        np.testing.assert_array_equal(result.weights['w'], w['w'])
