import json

import numpy as np
import pytest

from fl_uav.aggregation.afacd import AFACD
from fl_uav.aggregation.ceoafl import TwoCEOAFL
from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.feddisco import FedDisco
from fl_uav.aggregation.feddpq import FedDPQ
from fl_uav.aggregation.fedex import FedExAsync, FedExSync
from fl_uav.aggregation.fednova import FedNova
from fl_uav.aggregation.fedprox import FedProx
from fl_uav.aggregation.lgc import LGC
from fl_uav.aggregation.osafl import OSAFL
from fl_uav.aggregation.robust import CoordinateMedian, Krum, MultiKrum, NormClip, TrimmedMean
from fl_uav.aggregation.scaffold import Scaffold

from ._helpers import model, update

JSON_RULES = [FedProx(), FedNova(), AFACD(), FedDisco(), OSAFL(), TwoCEOAFL(),
              FedDPQ(num_selected=2), LGC(num_clients=3), FedExSync(3), FedExAsync(3),
              CoordinateMedian(), TrimmedMean(), Krum(), MultiKrum(),
              NormClip(OSAFL(), 1.0), NormClip(FedAvg(), 'median', 2.0)]


@pytest.mark.parametrize('strategy', JSON_RULES + [Scaffold(num_clients=3)],
                         ids=lambda s: s.name)
def test_nothing_arrived_keeps_the_model(strategy):
    w = {'a': np.array([1.0, 2.0], np.float32), 'b': np.array([[3.0]], np.float32)}
    strategy.configure_round(1, [0, 1, 2])
    result = strategy.aggregate(1, w, [])
    assert result.empty
    for name in w:
        np.testing.assert_array_equal(result.weights[name], w[name])


@pytest.mark.parametrize('strategy', JSON_RULES + [FedAvg(), Scaffold(num_clients=3)],
                         ids=lambda s: s.name)
def test_used_names_the_senders_the_participants_metric_counts(strategy):
    # Arrange: a full update, one without samples (FedEx's first tour), one of another round
    w = model([0.0, 0.0])
    strategy.configure_round(2, [0, 1, 2, 3])
    dc = {'scaffold_delta_c': {'w': [0.0, 0.0]}}
    updates = [update(2, [1.0, 1.0], n=10, round_index=2, steps=2, local_lr=0.1,
                      class_counts=[5, 5], **dc),
               update(0, [0.0, 0.0], n=0, round_index=2, steps=0, **dc),
               update(1, [1.0, 1.0], n=10, round_index=1, steps=2, local_lr=0.1,
                      class_counts=[5, 5], **dc)]
    # Act
    result = strategy.aggregate(2, w, updates)
    # Assert: the round's participants are the updates the rule applied, whichever it skips
    assert result.used == tuple(sorted(set(result.used)))
    assert set(result.used) <= {0, 1, 2}
    assert len(result.used) == result.metrics['participants']
    assert result.empty == (not result.used)   # FedDPQ applies only the drones it drew


def test_fedex_applies_a_first_tour_without_samples_fedavg_does_not():
    # Arrange: u_k = 0 with no samples, what a UAV's first tour uploads
    updates = [update(0, [0.0], n=0), update(1, [0.0], n=0)]
    # Act
    fedex, fedavg = (rule.aggregate(1, model([1.0]), updates)
                     for rule in (FedExSync(4), FedAvg()))
    # Assert
    assert fedex.used == (0, 1) and not fedex.empty
    assert fedavg.used == () and fedavg.empty


@pytest.mark.parametrize('strategy', JSON_RULES, ids=lambda s: s.name)
def test_state_is_json_compatible_and_round_trips(strategy):
    strategy.configure_round(1, [0, 1, 2])
    state = json.loads(json.dumps(strategy.state_dict()))
    strategy.load_state_dict(state)
    assert json.loads(json.dumps(strategy.state_dict())) == state


def test_osafl_samples_weighting():
    updates = [update(0, [1.0], n=1, steps=1), update(1, [1.0], n=3, steps=1)]
    result = OSAFL(score_interval=1, weighting='samples').aggregate(1, model([0.0]), updates)
    np.testing.assert_allclose(result.weights['w'], [np.e], rtol=1e-6)  # cos = 1 for both
