"""Issue 26 item 6 in the engine: a drone's forged sample count weighs no more than what it
holds, and each drone's update norm, the outliers and the capped counts are reported
(update_norms.csv, summary.json, the run's warnings)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fl_uav.configschema import build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine, run_experiment
from fl_uav.engine.results import UPDATE_NORMS_FILE, read_norm_rows

QUICK = Path(__file__).resolve().parents[3] / 'config' / 'experiments' / 'quick_digits.yaml'
CLAIM_2_53 = {'faults.poison': 'scale', 'faults.poison_scale': 1.0,
              'faults.poisoned_drones': [0], 'faults.claimed_samples': 2 ** 53}


def _config(**flat) -> ExperimentConfig:
    base = {**read_params_file(QUICK), 'num_drones': 5, 'num_rounds': 2,
            'data.partition': 'iid', 'aggregation.clip_norm': 0.0}
    return build_config(ExperimentConfig, {**base, **flat})


def test_a_drone_claiming_2_53_samples_weighs_no_more_than_it_holds(tmp_path):
    # Arrange: drone 0 sends its honest delta but claims 2^53 samples; plain FedAvg
    engine = ExperimentEngine(_config(**CLAIM_2_53), tmp_path / 'spy')
    seen = {}
    aggregate = engine.strategy.aggregate

    def spy(round_index, weights, updates):
        seen.update({u.sender: u.num_samples for u in updates})
        return aggregate(round_index, weights, updates)

    engine.strategy.aggregate = spy
    # Act
    engine.run_round()
    claimed = run_experiment(_config(**CLAIM_2_53), tmp_path / 'claimed', echo=lambda _: None)
    clean = run_experiment(_config(), tmp_path / 'clean', echo=lambda _: None)
    # Assert: weighed as its partition (all it holds offline), so FedAvg is the clean run's
    assert seen[0] == len(engine.parts[0]) < 2 ** 53
    assert claimed['final_accuracy'] == clean['final_accuracy']
    rows = read_norm_rows(tmp_path / 'claimed' / UPDATE_NORMS_FILE)
    assert {(r['drone'], r['samples_claimed']) for r in rows if r['round'] == 1} == {
        (0, 2 ** 53), *((k, len(engine.parts[k])) for k in range(1, 5))}
    assert claimed['update_norms']['samples_capped_rounds'] == {'0': 2}
    assert claimed['faults']['claimed_samples'] == 2 ** 53
    assert any(w.startswith('drone 0: reported more samples than it holds in 2 of 2 rounds')
               for w in claimed['warnings'])


def test_an_online_drone_is_capped_at_its_buffer_capacity(tmp_path):
    # Arrange: online arrivals into a 50-sample buffer; drone 0 claims 2^53
    config = _config(**CLAIM_2_53, **{'data.online': True, 'data.initial_samples': 40,
                                      'buffer.capacity_samples': 50})
    # Act
    run_experiment(config, tmp_path, echo=lambda _: None)
    # Assert
    rows = read_norm_rows(tmp_path / UPDATE_NORMS_FILE)
    assert [r['samples'] for r in rows if r['drone'] == 0] == [50, 50]
    assert all(r['samples'] == r['samples_claimed'] <= 50 for r in rows if r['drone'] != 0)


def test_norms_file_and_summary_name_the_x100_drone_as_the_outlier(tmp_path):
    # Arrange: drone 3 sends 100 × its delta
    config = _config(**{'faults.poison': 'scale', 'faults.poisoned_drones': [3],
                        'aggregation.clip_norm': 'median'})
    echoed = []
    # Act
    summary = run_experiment(config, tmp_path, echo=echoed.append)
    # Assert: one row per round and drone; drone 3 alone is an outlier, at ~100 × the median
    rows = read_norm_rows(tmp_path / UPDATE_NORMS_FILE)
    assert [(r['round'], r['drone']) for r in rows] == [(r, k) for r in (1, 2) for k in range(5)]
    assert {r['drone'] for r in rows if r['outlier']} == {3}
    ratios = [r['median_ratio'] for r in rows if r['drone'] == 3]
    assert all(60 < x < 140 for x in ratios), ratios
    honest = [r['median_ratio'] for r in rows if r['drone'] != 3]
    assert np.all(np.array(honest) < 3.0)
    saved = json.loads((tmp_path / 'summary.json').read_text())
    assert saved['update_norms'] == summary['update_norms'] == {
        'file': UPDATE_NORMS_FILE, 'outlier_factor': 5.0, 'outlier_rounds': {'3': 2},
        'samples_capped_rounds': {}}
    warning = "drone 3: update norm over 5 x the round's median in 2 of 2 rounds (rounds 1, 2"
    assert any(w.startswith(warning) for w in saved['warnings'])
    assert any(line.startswith(f'warning: {warning}') for line in echoed)


def test_a_resumed_run_keeps_the_norms_of_the_rounds_it_kept(tmp_path):
    # Arrange: 2 rounds, then resumed to 3
    run_experiment(_config(), tmp_path, echo=lambda _: None)
    # Act
    run_experiment(_config(num_rounds=3), tmp_path, resume=True, echo=lambda _: None)
    # Assert
    rows = read_norm_rows(tmp_path / UPDATE_NORMS_FILE)
    assert [(r['round'], r['drone']) for r in rows] == [(r, k) for r in (1, 2, 3)
                                                        for k in range(5)]
