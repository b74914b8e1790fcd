"""A strategy plug-in (``aggregation.strategy: module:Name``) is built like a built-in: the
arguments its signature names, norm clipping around it; FedAvgM (examples/) as the example."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_uav.aggregation import STRATEGY_PLUGIN_ARGUMENTS, build_strategy
from fl_uav.aggregation.config import AggregationConfig
from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.robust import NormClip
from test.unit._plugins import SPEC

from ._helpers import json_round_trip, model, update

EXAMPLES = Path(__file__).resolve().parents[3] / 'examples'


@pytest.fixture
def fedavgm(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from fedavgm import FedAvgM

    return FedAvgM


def test_a_class_gets_the_arguments_it_names_and_kwargs_gets_them_all():
    # Act
    named = build_strategy(SPEC + 'RecordingFedAvg', server_lr=0.25, num_clients=7)
    everything = AggregationConfig(strategy=SPEC + 'KeepsAllArguments', server_lr=0.5,
                                   trimmed_beta=0.2).build(num_clients=4, seed=9)
    # Assert
    assert named.server_lr == 0.25
    assert set(everything.arguments) == set(STRATEGY_PLUGIN_ARGUMENTS)
    assert (everything.arguments['server_lr'], everything.arguments['num_clients'],
            everything.arguments['seed'], everything.arguments['trimmed_beta']) == (0.5, 4, 9,
                                                                                   0.2)


def test_a_factory_is_called_and_clip_norm_wraps_a_plug_in_as_it_wraps_a_built_in():
    # Act
    strategy = build_strategy(SPEC + 'fedavg_half_step', server_lr=1.0, clip_norm=1.0)
    result = strategy.aggregate(1, model([0.0, 0.0]), [update(0, [3.0, 4.0])])
    # Assert: |Δ| = 5 clipped to 1, then half a FedAvg step
    assert isinstance(strategy, NormClip) and isinstance(strategy.inner, FedAvg)
    np.testing.assert_allclose(result.weights['w'], [0.3, 0.4], rtol=1e-6)


def test_fedavgm_accumulates_server_momentum_and_its_state_round_trips(fedavgm):
    # Arrange
    strategy = fedavgm(server_lr=1.0, momentum=0.5)
    w0 = model([0.0, 0.0])
    # Act
    w1 = strategy.aggregate(1, w0, [update(0, [1.0, 0.0], n=1), update(1, [3.0, 2.0], n=3)])
    w2 = strategy.aggregate(2, w1.weights, [update(0, [0.0, 2.0])])
    restored = fedavgm(momentum=0.5)
    restored.load_state_dict(strategy.state_dict())
    # Assert: v1 = m1 = (2.5, 1.5); v2 = 0.5 v1 + (0, 2) = (1.25, 2.75); w2 = w1 + v2
    np.testing.assert_allclose(w1.weights['w'], [2.5, 1.5])
    np.testing.assert_allclose(w2.weights['w'], [3.75, 4.25])
    assert w2.used == (0,) and w2.metrics['participants'] == 1
    np.testing.assert_allclose(restored.velocity['w'], [1.25, 2.75])
    assert strategy.aggregate(3, w2.weights, []).empty


def test_fedavgm_state_survives_the_checkpoints_json_for_its_non_array_parts(fedavgm):
    # Arrange: the engine stores arrays in the npz and the rest as JSON
    strategy = fedavgm()
    strategy.aggregate(1, model([0.0]), [update(0, [1.0])])
    # Act
    state = strategy.state_dict()
    # Assert
    assert json_round_trip({k: v for k, v in state.items() if k != 'velocity'}) == {}
    assert isinstance(state['velocity']['w'], np.ndarray)
