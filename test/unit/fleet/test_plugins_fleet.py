"""Plug-ins in the fleet: the drone's compressor and the station's strategy come from the same
``module:Name`` spec; the station decodes a plug-in's frames without knowing the method."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fl_uav.compression.compressor import decode_update_frame
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent, UploadEncodingError
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import FinishCommand
from fl_uav.streams import Stream, stream_seed
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
    # Assert: **kwargs gets every documented argument; the fleet's seed is an int of its own
    # stream of world.seed (not world.seed: default_rng(11) is the world map's first stream)
    arguments = station._strategy.arguments
    assert arguments['num_clients'] == 3
    assert arguments['seed'] == stream_seed(11, 0, Stream.STRATEGY)
    assert isinstance(arguments['seed'], int)
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


def _close_rounds(agent: DroneAgent, station: GroundStation, rounds: int) -> None:
    """Open and close ``rounds`` rounds, each with the drone's update."""
    for _ in range(rounds):
        opening = station.open_round(0.0)
        station.receive_update(agent.train_round(agent.accept_global_frame(opening.frame)).frame)
        station.close_round(1.0)


def test_a_strategy_that_fails_max_failed_rounds_in_a_row_ends_the_run_as_failed():
    # Arrange: 5 rounds configured, the run stops after 2 failed aggregations in a row
    agent, station = _pair({'aggregation.strategy': SPEC + 'AlwaysRaises',
                            'aggregation.max_failed_rounds': 2, 'rounds.num_rounds': 5})
    _close_rounds(agent, station, 1)
    running = (station.finished, station.status)
    # Act
    _close_rounds(agent, station, 1)
    # Assert: failed after round 2 (not 5), says why, and no round opens any more
    assert running == (False, 'running')
    assert station.finished and station.status == 'failed' and len(station.records) == 2
    assert re.fullmatch(r'the run stopped as failed after round 2: the aggregation failed in 2 '
                        r'rounds in a row \(aggregation.max_failed_rounds 2\), the model is '
                        rf"the one before them; last: round 2: aggregation.strategy '{SPEC}"
                        r"AlwaysRaises': AlwaysRaises.aggregate raised ZeroDivisionError: .*",
                        station.failure), station.failure
    with pytest.raises(RuntimeError, match='the run stopped as failed after round 2'):
        station.open_round(2.0)
    report = station.report()
    assert report['status'] == 'failed' and report['error'] == station.failure
    assert [r['round_index'] for r in report['rounds']] == [1, 2]


def test_a_run_the_station_ends_as_failed_tells_the_drones_to_finish():
    # Arrange
    agent, station = _pair({'aggregation.strategy': SPEC + 'AlwaysRaises',
                            'aggregation.max_failed_rounds': 1, 'rounds.num_rounds': 5})
    _close_rounds(agent, station, 1)
    # Act: the frame the node sends when the station is finished
    command = agent.accept_global_frame(station.finish_frame())
    # Assert: the drone reads the normal finish command (it lands)
    assert station.status == 'failed'
    assert isinstance(command, FinishCommand) and command.round_index == 1


def test_a_round_that_aggregates_starts_the_failed_rounds_count_over():
    # Arrange: rounds 1 and 3 fail, round 2 aggregates
    agent, station = _pair({'aggregation.strategy': SPEC + 'RaisesButInRound2',
                            'aggregation.max_failed_rounds': 2, 'rounds.num_rounds': 4})
    # Act
    _close_rounds(agent, station, 3)
    # Assert: never 2 in a row, so the run goes on
    assert [bool(r.warnings) for r in station.records] == [True, False, True]
    assert not station.finished and station.failure == ''


def test_max_failed_rounds_0_never_ends_the_run_early():
    # Arrange
    agent, station = _pair({'aggregation.strategy': SPEC + 'AlwaysRaises',
                            'aggregation.max_failed_rounds': 0, 'rounds.num_rounds': 4})
    # Act
    _close_rounds(agent, station, 4)
    # Assert: every round closed on the kept model, the run finished (not failed)
    assert station.status == 'finished' and station.failure == ''
    assert station.report()['status'] == 'finished' and 'error' not in station.report()


def test_a_negative_max_failed_rounds_is_refused_naming_the_key():
    # Act / Assert
    with pytest.raises(ValueError, match=r"section 'aggregation': max_failed_rounds must be >= 0"):
        build_config(FleetConfig, {'aggregation.max_failed_rounds': -1})
