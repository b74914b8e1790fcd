"""Plug-ins in the fleet: the drone's compressor and the station's strategy come from the same
``module:Name`` spec; the station decodes a plug-in's frames without knowing the method."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fl_uav.compression.compressor import decode_update_frame
from fl_uav.fleet.drone_agent import DroneAgent, UploadEncodingError
from fl_uav.fleet.ground_station import GroundStation
from test.unit import _plugins
from test.unit._plugins import SPEC
from test.unit.fleet._fleet_pair import agent_and_station

_BASE = {'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
         'rounds.num_rounds': 2, 'rounds.deadline_s': 10.0, 'rounds.first_round_extra_s': 0.0}


def _pair(overrides: dict) -> tuple[DroneAgent, GroundStation]:
    return agent_and_station({**_BASE, **overrides})


def test_a_plug_in_compressors_frame_reaches_a_plug_in_strategy_at_the_station():
    # Arrange: both nodes read the same two specs
    _plugins.AGGREGATE_CALLS.clear()
    agent, station = _pair({'aggregation.strategy': SPEC + 'RecordingFedAvg',
                            'compression.method': SPEC + 'TopFractionWithMemory'})
    before = dict(station.weights)
    opening = station.open_round(0.0)
    report = agent.train_round(agent.accept_global_frame(opening.frame))
    sent = decode_update_frame(report.frame, before)
    # Act
    verdict = station.receive_update(report.frame)
    record = station.close_round(1.0)
    # Assert: the top quarter of the drone's update, applied by the plug-in rule (FedAvg of one)
    assert type(agent._compressor).__name__ == 'TopFractionWithMemory'
    assert verdict.accepted and record.participants == [0]
    assert _plugins.AGGREGATE_CALLS == [(1, (0,))]
    dense = sum(w.size for w in before.values())
    assert sum(int(np.count_nonzero(v)) for v in sent.delta.values()) == int(0.25 * dense)
    for name, w in before.items():
        np.testing.assert_allclose(station.weights[name], w + sent.delta[name], atol=1e-6)
    assert any(np.any(r != 0) for r in agent._compressor.residual.values())


def test_a_plug_in_whose_bytes_are_no_frame_is_refused_by_the_station_and_counted():
    # Arrange
    agent, station = _pair({'compression.method': SPEC + 'GarbageFrame'})
    opening = station.open_round(0.0)
    report = agent.train_round(agent.accept_global_frame(opening.frame))
    # Act
    verdict = station.receive_update(report.frame)
    # Assert
    assert not verdict.accepted and verdict.reason == 'bad_magic'
    assert station.rejected_total == {'bad_magic': 1}


def test_the_station_builds_a_strategy_plug_in_with_the_fleets_arguments():
    # Act
    _, station = _pair({'num_drones': 3, 'world.seed': 11, 'aggregation.server_lr': 0.5,
                        'aggregation.strategy': SPEC + 'KeepsAllArguments'})
    # Assert: **kwargs gets every documented argument; the fleet's seed is world.seed
    arguments = station._strategy.arguments
    assert arguments['num_clients'] == 3 and arguments['seed'] == 11
    assert arguments['server_lr'] == 0.5
    assert set(arguments) == {'server_lr', 'num_clients', 'proximal_mu', 'score_interval',
                              'score_shrink_steps', 'trimmed_beta', 'num_selected', 'local_lr',
                              'seed'}


@pytest.mark.parametrize(('name', 'fault'), [
    ('AlwaysRaises', r'AlwaysRaises.aggregate raised ZeroDivisionError: division by zero in '
                     r'my rule \(at .*_plugins.py:\d+\)'),
    ('ReturnsNaN', r"ReturnsNaN.aggregate returned tensor '[\w.]+' with \d+ NaN or Inf"),
    ('ReturnsFlattened', r"ReturnsFlattened.aggregate returned tensor '[\w.]+' with shape"),
])
def test_a_failing_strategy_plug_in_closes_the_round_on_the_kept_model_with_a_warning(
        name, fault):
    # Arrange: one drone's update arrived
    agent, station = _pair({'aggregation.strategy': SPEC + name})
    before = {n: w.copy() for n, w in station.weights.items()}
    opening = station.open_round(0.0)
    station.receive_update(agent.train_round(agent.accept_global_frame(opening.frame)).frame)
    # Act
    record = station.close_round(1.0)
    # Assert: closed (the next round can open), nothing applied, the fault in its warnings
    assert station.open_round(2.0).round_index == 2
    assert record.participants == [] and record.empty and record.model_change_l2 == 0.0
    for n, w in before.items():
        np.testing.assert_array_equal(station.weights[n], w)
    assert re.search(rf"round 1: aggregation.strategy '{SPEC}{name}': {fault}",
                     record.warnings[0]), record.warnings
    assert record.warnings[0].endswith('the model is kept and no update applied')


def test_a_compressor_plug_in_that_raises_on_a_drone_names_itself_and_undoes_the_training():
    # Arrange
    agent, station = _pair({'compression.method': SPEC + 'CompressAlwaysRaises'})
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    lost = []
    agent._client.upload_lost = lambda: lost.append(True)
    # Act
    with pytest.raises(UploadEncodingError) as caught:
        agent.train_round(task)
    # Assert: what broke and where; the client's state does not count the unsent update
    assert re.fullmatch(rf"round 1, drone 0: compression.method '{SPEC}CompressAlwaysRaises': "
                        r'CompressAlwaysRaises.compress raised IndexError: my compressor broke '
                        r'\(at .*_plugins.py:\d+\); nothing sent this round', str(caught.value))
    assert agent.rounds_trained == 1 and lost == [True]


def test_a_strategy_plug_in_whose_configure_round_raises_still_opens_and_closes_the_round():
    # Arrange
    agent, station = _pair({'aggregation.strategy': SPEC + 'ConfigureRaises'})
    # Act
    opening = station.open_round(0.0)
    station.receive_update(agent.train_round(agent.accept_global_frame(opening.frame)).frame)
    record = station.close_round(1.0)
    # Assert: the round went out without knobs, was aggregated, and says why
    assert opening.round_index == 1 and record.participants == [0]
    assert re.fullmatch(rf"round 1: aggregation.strategy '{SPEC}ConfigureRaises': "
                        r"ConfigureRaises.configure_round raised KeyError: 'mu' \(at .*"
                        r"_plugins.py:\d+\); the round went out without the strategy's knobs",
                        record.warnings[0]), record.warnings
