import json

import numpy as np
import pytest

from fl_uav.aggregation.afacd import AFACD
from fl_uav.aggregation.ceoafl import TwoCEOAFL
from fl_uav.aggregation.feddisco import FedDisco
from fl_uav.aggregation.feddpq import FedDPQ
from fl_uav.aggregation.fedex import FedExAsync, FedExSync
from fl_uav.aggregation.fednova import FedNova
from fl_uav.aggregation.fedprox import FedProx
from fl_uav.aggregation.lgc import LGC
from fl_uav.aggregation.osafl import OSAFL
from fl_uav.aggregation.robust import CoordinateMedian, NormClip, TrimmedMean
from fl_uav.aggregation.scaffold import Scaffold

from ._helpers import model, update

JSON_RULES = [FedProx(), FedNova(), AFACD(), FedDisco(), OSAFL(), TwoCEOAFL(),
              FedDPQ(num_selected=2), LGC(num_clients=3), FedExSync(3), FedExAsync(3),
              CoordinateMedian(), TrimmedMean(), NormClip(OSAFL(), 1.0)]


@pytest.mark.parametrize('strategy', JSON_RULES + [Scaffold(num_clients=3)],
                         ids=lambda s: s.name)
def test_nothing_arrived_keeps_the_model(strategy):
    w = {'a': np.array([1.0, 2.0], np.float32), 'b': np.array([[3.0]], np.float32)}
    strategy.configure_round(1, [0, 1, 2])
    result = strategy.aggregate(1, w, [])
    assert result.empty
    for name in w:
        np.testing.assert_array_equal(result.weights[name], w[name])


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
