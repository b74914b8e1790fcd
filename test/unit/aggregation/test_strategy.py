"""checked_aggregate holds every rule to the Strategy contract: what it may return, and that
it leaves the global weights it is given alone."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest

from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.scaffold import Scaffold
from fl_uav.aggregation.strategy import AggregationError, checked_aggregate
from test.unit import _plugins

from ._helpers import update
from .test_all_rules import JSON_RULES


def _weights() -> dict[str, np.ndarray]:
    return {'w': np.array([0.5, -1.0], np.float32), 'b': np.array([[2.0]], np.float32)}


def _updates() -> list:
    metrics = {'steps': 2, 'local_lr': 0.1, 'class_counts': [5, 5],
               'scaffold_delta_c': {'w': [0.0, 0.0], 'b': [[0.0]]}}
    return [update(k, [1.0 + k, -1.0], n=10, **metrics) for k in range(3)]


def _with_b(updates: list) -> list:
    return [type(u)(u.sender, u.round_index, {**u.delta, 'b': np.array([[k * 0.5]], np.float32)},
                    u.num_samples, u.metrics) for k, u in enumerate(updates)]


@pytest.mark.parametrize('strategy', JSON_RULES + [FedAvg(), Scaffold(num_clients=3)],
                         ids=lambda s: s.name)
def test_every_built_in_rule_passes_unchanged_on_read_only_weights(strategy):
    # Arrange: the same rule twice, one called directly
    direct = copy.deepcopy(strategy)
    weights = _weights()
    for rule in (strategy, direct):
        rule.configure_round(1, [0, 1, 2])
    # Act
    checked = checked_aggregate(strategy, 1, weights, _with_b(_updates()))
    expected = direct.aggregate(1, _weights(), _with_b(_updates()))
    # Assert
    for name, w in expected.weights.items():
        np.testing.assert_array_equal(checked.weights[name], w)
        assert checked.weights[name].flags.writeable
    assert checked.used == expected.used
    np.testing.assert_array_equal(weights['w'], _weights()['w'])


def test_a_rule_that_steps_the_given_weights_in_place_is_refused_and_changes_nothing():
    # Arrange
    weights = _weights()
    # Act
    with pytest.raises(AggregationError) as caught:
        checked_aggregate(_plugins.StepsInPlace(), 1, weights, _with_b(_updates()))
    # Assert: the caller's model is as it was; the message says what to do
    np.testing.assert_array_equal(weights['w'], _weights()['w'])
    assert 'StepsInPlace.aggregate raised ValueError' in str(caught.value)
    assert str(caught.value).endswith('(aggregate must not change the global weights it is '
                                      'given: build new arrays)')


def test_weights_handed_back_unchanged_are_the_callers_own_arrays():
    # Arrange: nothing arrived, so FedAvg keeps the model
    weights = _weights()
    # Act
    result = checked_aggregate(FedAvg(), 1, weights, [])
    # Assert
    assert result.empty
    assert all(result.weights[n] is weights[n] for n in weights)


def test_a_fault_raised_in_an_fl_uav_helper_names_the_plug_ins_line_that_called_it():
    # Act: nothing arrived; the plug-in averages anyway
    with pytest.raises(AggregationError) as caught:
        checked_aggregate(_plugins.MeanOfNothing(), 1, _weights(), [])
    # Assert: the helper's line, and the plug-in's
    assert re.search(r'raised ValueError: aggregation weights must sum to a positive number '
                     r'\(at .*fl_uav/aggregation/strategy.py:\d+, called from '
                     r'.*test/unit/_plugins.py:\d+\)$', str(caught.value)), str(caught.value)


def test_a_fault_raised_in_a_library_names_the_plug_ins_line_that_called_it():
    # Arrange: the line of _plugins.StacksBadly that calls np.stack
    source = Path(_plugins.__file__).read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(source) if "# the plug-in's faulty line" in text)
    # Act
    with pytest.raises(AggregationError) as caught:
        checked_aggregate(_plugins.StacksBadly(), 1, _weights(), [])
    # Assert: numpy's line, and the plug-in's
    assert re.search(rf'\(at .*numpy/.*\.py:\d+, called from .*test/unit/_plugins.py:{line}\)$',
                     str(caught.value)), str(caught.value)
