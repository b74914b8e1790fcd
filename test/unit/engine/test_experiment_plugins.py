"""Plug-ins in the experiment engine: used every round, recorded, checkpointed and resumed."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from fl_uav.aggregation.strategy import weighted_mean_delta
from fl_uav.configschema import build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine, run_experiment
from fl_uav.engine.results import ExperimentError
from test.unit import _plugins
from test.unit._plugins import SPEC

REPO = Path(__file__).resolve().parents[3]
QUICK = REPO / 'config' / 'experiments' / 'quick_digits.yaml'
FEDAVGM = 'fedavgm:FedAvgM'    # examples/fedavgm.py, with examples/ on the path


@pytest.fixture(autouse=True)
def _examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / 'examples'))


def _config(**overrides) -> ExperimentConfig:
    flat = read_params_file(QUICK)
    flat.update({'num_drones': 4, 'num_rounds': 2, 'learning.local_epochs': 1, **overrides})
    return build_config(ExperimentConfig, flat)


def _losses(out: Path) -> list[float]:
    with open(out / 'rounds.csv', newline='') as f:
        return [float(row['loss']) for row in csv.DictReader(f)]


def _quiet(_: str) -> None:
    pass


def test_a_plug_in_strategy_aggregates_each_round_with_its_own_rule(tmp_path):
    # Arrange: FedAvgM from examples/, unclipped (its own rule alone), its aggregate watched
    engine = ExperimentEngine(_config(**{'aggregation.strategy': FEDAVGM,
                                         'aggregation.server_lr': 0.5,
                                         'aggregation.clip_norm': 0.0}), tmp_path)
    calls = []
    rule = engine.strategy.aggregate

    def watched(round_index, global_weights, updates):
        result = rule(round_index, global_weights, updates)
        calls.append((dict(global_weights), list(updates), result))
        return result

    engine.strategy.aggregate = watched
    # Act
    engine.run_round()
    engine.run_round()
    # Assert: w2 = w1 + η (β m1 + m2), not FedAvg's w1 + η m2
    assert type(engine.strategy).__name__ == 'FedAvgM' and len(calls) == 2
    (_, first, _), (w1, second, result) = calls
    m1, m2 = (weighted_mean_delta(u, [x.num_samples for x in u]) for u in (first, second))
    name = next(iter(w1))
    expected = w1[name] + 0.5 * (0.9 * m1[name].astype(np.float64) + m2[name])
    np.testing.assert_allclose(result.weights[name], expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(result.weights[name], w1[name] + 0.5 * m2[name], atol=1e-4)
    np.testing.assert_array_equal(engine.weights[name], result.weights[name])


def test_a_resumed_plug_in_run_equals_the_uninterrupted_one_and_records_the_spec(tmp_path):
    # Arrange: 3 rounds straight, and 2 rounds then a resume to 3
    whole = tmp_path / 'whole'
    part = tmp_path / 'part'
    run_experiment(_config(**{'aggregation.strategy': FEDAVGM, 'num_rounds': 3}), whole,
                   echo=_quiet)
    run_experiment(_config(**{'aggregation.strategy': FEDAVGM}), part, echo=_quiet)
    with np.load(part / 'checkpoint.npz') as archive:
        # the default clip_norm wraps it: NormClip's state is {'inner': FedAvgM's}
        velocity = [archive[n] for n in archive.files
                    if n.startswith('strategy/inner/velocity/')]
    # Act
    summary = run_experiment(_config(**{'aggregation.strategy': FEDAVGM, 'num_rounds': 3}),
                             part, resume=True, echo=_quiet)
    # Assert: the velocity was checkpointed and restored (round 3 would differ without it)
    assert velocity and all(np.any(v != 0) for v in velocity)
    assert _losses(part) == pytest.approx(_losses(whole), rel=1e-6)
    assert summary['strategy'] == FEDAVGM
    assert summary['plugins']['aggregation.strategy']['module_file'].endswith('fedavgm.py')
    assert json.loads((part / 'config.json').read_text())['aggregation.strategy'] == FEDAVGM


def test_resume_refuses_a_plug_in_that_kept_state_without_a_state_dict(tmp_path):
    # Arrange
    spec = SPEC + 'CountsRoundsWithoutStateDict'
    run_experiment(_config(**{'aggregation.strategy': spec, 'num_rounds': 1}), tmp_path,
                   echo=_quiet)
    # Act / Assert
    with pytest.raises(ExperimentError, match=r"a plug-in kept state its checkpoint does not "
                                              r"hold \(aggregation\.strategy '.*"
                                              r"CountsRoundsWithoutStateDict' changed "
                                              r"rounds_seen\) and defines no state_dict"):
        run_experiment(_config(**{'aggregation.strategy': spec}), tmp_path, resume=True,
                       echo=_quiet)


def test_a_stateless_plug_in_resumes_and_a_different_one_is_refused(tmp_path):
    # Arrange
    _plugins.AGGREGATE_CALLS.clear()
    spec = SPEC + 'RecordingFedAvg'
    run_experiment(_config(**{'aggregation.strategy': spec, 'num_rounds': 1}), tmp_path,
                   echo=_quiet)
    # Act
    with pytest.raises(ExperimentError, match=r"aggregation\.strategy: run '.*RecordingFedAvg'"
                                              r", given 'fedavg'"):
        run_experiment(_config(), tmp_path, resume=True, echo=_quiet)
    summary = run_experiment(_config(**{'aggregation.strategy': spec}), tmp_path, resume=True,
                             echo=_quiet)
    # Assert
    assert summary['status'] == 'finished' and summary['rounds_completed'] == 2
    assert _plugins.AGGREGATE_CALLS == [(1, (0, 1, 2, 3)), (2, (0, 1, 2, 3))]


def test_a_compressor_plug_in_keeps_per_drone_state_through_a_resume(tmp_path):
    # Arrange
    spec = SPEC + 'TopFractionWithMemory'
    run_experiment(_config(**{'compression.method': spec, 'num_rounds': 3}), tmp_path / 'whole',
                   echo=_quiet)
    run_experiment(_config(**{'compression.method': spec}), tmp_path / 'part', echo=_quiet)
    with np.load(tmp_path / 'part' / 'checkpoint.npz') as archive:
        owners = {n.split('/')[1] for n in archive.files if n.startswith('compressor/')}
    # Act
    run_experiment(_config(**{'compression.method': spec, 'num_rounds': 3}), tmp_path / 'part',
                   resume=True, echo=_quiet)
    # Assert: one residual per drone, restored (the third round would differ without it)
    assert owners == {'0', '1', '2', '3'}
    assert _losses(tmp_path / 'part') == pytest.approx(_losses(tmp_path / 'whole'), rel=1e-6)


def test_a_compressor_plug_in_is_charged_its_frames_and_aggregated_as_decoded(tmp_path):
    # Arrange
    engine = ExperimentEngine(_config(**{'compression.method': SPEC + 'TopFractionWithMemory',
                                         'num_drones': 2}), tmp_path)
    before = dict(engine.weights)
    # Act
    row = engine.run_round()
    # Assert: each drone sent a dense v1 frame; a quarter of the entries moved
    dense = sum(w.size for w in before.values())
    assert row['participants'] == 2
    assert row['uplink_bytes'] == sum(d['uplink_bytes'] for d in engine.last_round_drones.values())
    moved = sum(int(np.count_nonzero(engine.weights[n] != before[n])) for n in before)
    assert 0 < moved <= 2 * int(0.25 * dense) + 2
    assert len(engine._compressors) == 2 and engine._compressors[0] is not engine._compressors[1]


@pytest.mark.parametrize(('name', 'problem'), [
    ('GarbageFrame', 'returned bytes the station cannot decode'),
    ('HalvesButReportsWhole', 'reported a delta that differs from what its frame decodes to'),
    ('SendsNaN', 'returned a frame the station refuses (nonfinite: tensor'),
    ('SendsBeyondFloat32', 'returned a frame the station refuses (nonfinite: tensor'),
])
def test_a_compressor_plug_in_whose_frame_the_station_would_not_read_stops_the_run(
        tmp_path, name, problem):
    # Act
    summary = run_experiment(_config(**{'compression.method': SPEC + name, 'num_rounds': 1}),
                             tmp_path, echo=_quiet)
    # Assert
    assert summary['status'] == 'failed'
    assert f"round 1, drone 0: compression.method '{SPEC}{name}' {problem}" in summary['error']


def test_a_generator_plug_in_tops_up_with_the_engines_layout(tmp_path):
    # Arrange
    _plugins.GENERATORS_BUILT.clear()
    _plugins.GENERATE_REQUESTS.clear()
    config = _config(**{'data.topup': True, 'data.topup_factor': 0.5, 'num_rounds': 1,
                        'data.topup_generator': SPEC + 'ConstantGenerator'})
    # Act
    summary = run_experiment(config, tmp_path, echo=_quiet)
    # Assert: built once for the 'chw' inputs; shards leave classes absent, and it fills them
    assert _plugins.GENERATORS_BUILT == [('chw', 'digits')]
    assert len(_plugins.GENERATE_REQUESTS) == 4
    for labels, counts in _plugins.GENERATE_REQUESTS:
        absent = np.setdiff1d(np.arange(10), labels)
        assert len(absent) > 0 and np.all(counts[absent] > 0)
    assert summary['plugins']['data.topup_generator']['spec'] == SPEC + 'ConstantGenerator'


def test_a_strategy_state_the_checkpoint_cannot_hold_stops_the_run_naming_the_contract(
        tmp_path):
    # Act
    summary = run_experiment(_config(**{'aggregation.strategy': SPEC + 'StateNotJson',
                                        'num_rounds': 1}), tmp_path, echo=_quiet)
    # Assert
    assert summary['status'] == 'failed'
    assert "aggregation.strategy 'test.unit._plugins:StateNotJson' holds a value that is " \
           'neither JSON nor a numpy array' in summary['error']


@pytest.mark.parametrize(('name', 'problem'), [
    ('ReturnsNaN', r"returned tensor '[\w.]+' with \d+ NaN or Inf entries"),
    ('ReturnsFlattened', r"returned tensor '[\w.]+' with shape \(\d+,\) float32, the model's "
                         r'is \(\d+, \d+, \d+, \d+\) float32'),
    ('ReturnsFloat64', r"returned tensor '[\w.]+' with shape .* float64, the model's is .* "
                       r'float32'),
    ('ReturnsWeightsDict', r'returned a dict, not an AggregateResult'),
])
def test_a_strategy_plug_in_that_breaks_the_model_stops_the_run_naming_the_fault(
        tmp_path, name, problem):
    # Act
    summary = run_experiment(_config(**{'aggregation.strategy': SPEC + name, 'num_rounds': 1}),
                             tmp_path, echo=_quiet)
    # Assert: the engine's error, not the next round's training loss or a traceback
    assert summary['status'] == 'failed'
    assert re.search(rf"round 1: aggregation.strategy '{SPEC}{name}': {name}.aggregate "
                     + problem, summary['error']), summary['error']


def test_a_plug_in_that_raises_in_round_2_stops_the_run_naming_where_and_resumes_once_fixed(
        tmp_path, monkeypatch):
    # Arrange
    config = _config(**{'aggregation.strategy': SPEC + 'RaisesInRound2', 'num_rounds': 3})
    # Act
    summary = run_experiment(config, tmp_path, echo=_quiet)
    kept = _losses(tmp_path)
    monkeypatch.setattr(_plugins.RaisesInRound2, 'aggregate', _plugins.FedAvg.aggregate)
    resumed = run_experiment(config, tmp_path, echo=_quiet, resume=True)
    # Assert: round 1 kept; the message names the exception and the plug-in's line
    assert summary['status'] == 'failed' and len(kept) == 1
    assert re.search(r"round 2: aggregation.strategy '.*RaisesInRound2': RaisesInRound2."
                     r'aggregate raised RuntimeError: my rule broke \(at .*_plugins.py:\d+\)',
                     summary['error']), summary['error']
    assert resumed['status'] == 'finished' and _losses(tmp_path)[:1] == kept
    assert len(_losses(tmp_path)) == 3


def test_a_compressor_plug_in_that_raises_stops_the_run_naming_drone_and_where(tmp_path):
    # Act
    summary = run_experiment(_config(**{'compression.method': SPEC + 'CompressRaisesInRound2'}),
                             tmp_path, echo=_quiet)
    # Assert
    assert summary['status'] == 'failed'
    assert re.search(r"round 2, drone 0: compression.method '.*CompressRaisesInRound2': "
                     r'CompressRaisesInRound2.compress raised ValueError: my compressor '
                     r'broke \(at .*_plugins.py:\d+\)', summary['error']), summary['error']


def test_a_plug_in_drawing_from_numpys_global_generator_gives_the_same_run_for_the_seed(
        tmp_path):
    # Arrange
    config = _config(**{'aggregation.strategy': SPEC + 'NoisyFedAvg'})
    np.random.seed(1)
    expected_next = np.random.random()
    np.random.seed(1)
    # Act: the caller's draws from the global generator between two runs
    run_experiment(config, tmp_path / 'a', echo=_quiet)
    between = np.random.random()
    run_experiment(config, tmp_path / 'b', echo=_quiet)
    # Assert: equal runs; the caller's global generator as if the runs had not drawn
    assert _losses(tmp_path / 'a') == _losses(tmp_path / 'b')
    assert between == expected_next


def test_the_top_k_example_sends_a_tenth_of_the_entries_and_keeps_the_rest_owed(tmp_path):
    # Arrange: examples/topk_ef.py, one drone
    engine = ExperimentEngine(_config(**{'compression.method': 'topk_ef:TopKErrorFeedback',
                                         'num_drones': 1}), tmp_path)
    before = dict(engine.weights)
    dense = sum(w.size for w in before.values())
    # Act
    row = engine.run_round()
    # Assert: k = ⌈d/10⌉ values and a d-bit mask, well under the dense 4 d bytes; e = u − sent
    compressor = engine._compressors[0]
    moved = sum(int(np.count_nonzero(engine.weights[n] != before[n])) for n in before)
    assert row['participants'] == 1 and 0 < moved <= int(np.ceil(dense / 10))
    assert row['uplink_bytes'] < 4 * dense / 10 + dense / 8 + 1024
    assert dense // 2 < np.count_nonzero(compressor.residual) <= dense - np.ceil(dense / 10)
    assert set(compressor.state_dict()) == {'residual'}


def test_the_top_k_example_neither_sends_nor_owes_entries_a_pruned_drone_masks_out():
    # Arrange: a residual owed everywhere, then a round whose mask keeps the first half
    from topk_ef import TopKErrorFeedback
    compressor = TopKErrorFeedback(fraction=0.5)
    compressor.load_state_dict({'residual': np.full(8, 10.0, np.float32)})
    delta = {'w': np.arange(1.0, 9.0, dtype=np.float32)}
    mask = {'w': np.arange(8) < 4}
    # Act
    _, sent = compressor.compress(delta, np.random.default_rng(0), round_index=1, sender=0,
                                  fingerprint=bytes(8), mask=mask)
    # Assert: the 4 kept entries go (11..14), nothing outside the mask is sent or owed
    np.testing.assert_array_equal(sent['w'], [11, 12, 13, 14, 0, 0, 0, 0])
    np.testing.assert_array_equal(compressor.residual, np.zeros(8))


@pytest.mark.parametrize(('name', 'fault'), [
    ('ConfigureRaises', r"ConfigureRaises.configure_round raised KeyError: 'mu' "
                        r"\(at .*_plugins.py:\d+\)"),
    ('DrawsAsText', r"DrawsAsText.configure_round gave drone 0 the knob draws = 'two' is not "
                    r"an integer >= 0"),
])
def test_a_strategy_plug_in_whose_configure_round_fails_stops_the_run_naming_it(tmp_path, name,
                                                                                 fault):
    # Act
    summary = run_experiment(_config(**{'aggregation.strategy': SPEC + name}), tmp_path,
                             echo=_quiet)
    # Assert
    assert summary['status'] == 'failed'
    assert re.search(rf"round 1: aggregation.strategy '.*{name}': {fault}", summary['error']), \
        summary['error']
