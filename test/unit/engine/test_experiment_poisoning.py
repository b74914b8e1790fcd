"""A poisoned drone in the engine: only the chosen drones' uploads are forged, and a ×100 drone
throws plain FedAvg (clip_norm 0) off while the default (FedAvg clipped to twice the round's
median norm), the median, the trimmed mean and median-norm clipping hold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fl_uav.configschema import build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine, run_experiment

QUICK = Path(__file__).resolve().parents[3] / 'config' / 'experiments' / 'quick_digits.yaml'
POISON_100 = {'faults.poison': 'scale', 'faults.poison_scale': 100.0,
              'faults.poisoned_drones': [0]}


def _config(**flat) -> ExperimentConfig:
    base = {**read_params_file(QUICK), 'num_drones': 5, 'num_rounds': 4,
            'data.partition': 'iid'}
    return build_config(ExperimentConfig, {**base, **flat})


def _round_updates(config: ExperimentConfig, out: Path) -> dict[int, dict]:
    """The deltas the strategy receives in round 1, by sender."""
    engine = ExperimentEngine(config, out)
    seen = {}
    aggregate = engine.strategy.aggregate

    def spy(round_index, weights, updates):
        seen.update({u.sender: u.delta for u in updates})
        return aggregate(round_index, weights, updates)

    engine.strategy.aggregate = spy
    engine.run_round()
    return seen


@pytest.mark.parametrize('kind, factor', [('scale', 100.0), ('sign_flip', -1.0)])
def test_only_the_chosen_drones_send_the_forged_update(tmp_path, kind, factor):
    # Arrange
    honest = _round_updates(_config(), tmp_path / 'honest')
    # Act
    forged = _round_updates(_config(**{'faults.poison': kind,
                                       'faults.poison_scale': abs(factor),
                                       'faults.poisoned_drones': [1, 3]}), tmp_path / 'forged')
    # Assert: drones 1 and 3 send factor × their honest delta, the others their own
    assert sorted(forged) == sorted(honest) == [0, 1, 2, 3, 4]
    for drone, delta in forged.items():
        for name, value in delta.items():
            want = honest[drone][name] * (factor if drone in (1, 3) else 1.0)
            np.testing.assert_allclose(value, want, rtol=1e-6, atol=0)


def _norm(delta: dict) -> float:
    return float(np.sqrt(sum(np.sum(np.square(v.astype(np.float64))) for v in delta.values())))


def test_random_forgeries_have_100_times_the_norm_and_the_same_draws_for_the_same_seed(
        tmp_path):
    # Arrange
    config = _config(**{'faults.poison': 'random', 'faults.poisoned_count': 2})
    poisoned = config.faults.drones(config.num_drones, config.seed)
    honest = _round_updates(_config(), tmp_path / 'honest')
    # Act
    first = _round_updates(config, tmp_path / 'a')
    again = _round_updates(config, tmp_path / 'b')
    # Assert
    assert len(poisoned) == 2
    for drone in first:
        want = 100.0 * _norm(honest[drone]) if drone in poisoned else _norm(honest[drone])
        assert _norm(first[drone]) == pytest.approx(want, rel=1e-5)
        for name in first[drone]:
            np.testing.assert_array_equal(first[drone][name], again[drone][name])


def _final(tmp_path: Path, name: str, **flat) -> dict:
    return run_experiment(_config(**flat), tmp_path / name, echo=lambda _: None)


def test_a_x100_drone_throws_fedavg_off_but_not_the_robust_rules(tmp_path):
    # Arrange / Act: 5 drones, IID digits, 4 rounds; drone 0 sends 100 × its delta
    clean = _final(tmp_path, 'clean')
    fedavg = _final(tmp_path, 'fedavg', **POISON_100, **{'aggregation.clip_norm': 0.0})
    robust = {
        'default': _final(tmp_path, 'default', **POISON_100),
        'median': _final(tmp_path, 'median', **POISON_100,
                         **{'aggregation.strategy': 'median'}),
        'trimmed_mean': _final(tmp_path, 'trimmed', **POISON_100,
                               **{'aggregation.strategy': 'trimmed_mean',
                                  'aggregation.trimmed_beta': 0.2}),
        'clip': _final(tmp_path, 'clip', **POISON_100,
                       **{'aggregation.clip_norm': 'median', 'aggregation.clip_factor': 1.0}),
    }
    # Assert
    assert clean['final_accuracy'] > 0.85
    assert fedavg['final_accuracy'] < 0.3          # at or near chance (10 classes)
    for name, summary in robust.items():
        assert summary['final_accuracy'] > 0.85, name   # clean: 0.93
        assert summary['faults'] == {'poison': 'scale', 'poison_scale': 100.0,
                                     'poisoned_drones': [0]}
    saved = json.loads((tmp_path / 'fedavg' / 'summary.json').read_text())
    assert saved['faults']['poisoned_drones'] == [0]
