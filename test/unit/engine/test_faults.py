"""faults.*: the forged updates of a poisoned drone, which drones, and the config's checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_uav.configschema import ConfigError, build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.faults import FaultsConfig, poison_delta

QUICK = Path(__file__).resolve().parents[3] / 'config' / 'experiments' / 'quick_digits.yaml'

DELTA = {'a': np.array([[3.0, -4.0]], np.float32), 'b': np.array([12.0], np.float32)}   # ‖Δ‖ 13


def _norm(delta) -> float:
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(d, np.float64)))
                             for d in delta.values())))


def _config(**flat) -> ExperimentConfig:
    return build_config(ExperimentConfig, {**read_params_file(QUICK), **flat})


def test_scale_multiplies_every_tensor_and_keeps_the_dtype():
    # Act
    forged = poison_delta(DELTA, 'scale', 100.0)
    # Assert
    np.testing.assert_array_equal(forged['a'], [[300.0, -400.0]])
    np.testing.assert_array_equal(forged['b'], [1200.0])
    assert forged['a'].dtype == np.float32
    np.testing.assert_array_equal(DELTA['b'], [12.0])   # the honest delta is not changed


def test_sign_flip_is_minus_s_times_the_delta():
    # Act
    flipped = poison_delta(DELTA, 'sign_flip', 1.0)
    boosted = poison_delta(DELTA, 'sign_flip', 4.0)
    # Assert
    np.testing.assert_array_equal(flipped['a'], [[-3.0, 4.0]])
    np.testing.assert_array_equal(flipped['b'], [-12.0])
    np.testing.assert_array_equal(boosted['b'], [-48.0])


def test_random_has_s_times_the_honest_norm_a_new_direction_and_is_seeded():
    # Act
    forged = poison_delta(DELTA, 'random', 100.0, np.random.default_rng(3))
    again = poison_delta(DELTA, 'random', 100.0, np.random.default_rng(3))
    other = poison_delta(DELTA, 'random', 100.0, np.random.default_rng(4))
    # Assert: norm 100 × 13, exact up to float32 rounding; not along ±Δ
    assert _norm(forged) == pytest.approx(1300.0, rel=1e-6)
    honest = np.concatenate([DELTA['a'].ravel(), DELTA['b']]).astype(np.float64)
    made = np.concatenate([forged['a'].ravel(), forged['b']]).astype(np.float64)
    assert abs(made @ honest) / (1300.0 * 13.0) < 0.99
    for name in DELTA:
        np.testing.assert_array_equal(forged[name], again[name])
        assert forged[name].shape == DELTA[name].shape and forged[name].dtype == np.float32
    assert not np.array_equal(forged['a'], other['a'])


def test_random_keeps_the_zeros_outside_a_pruning_mask():
    # Arrange: the drone sends a's first entry and b only
    mask = {'a': np.array([[True, False]]), 'b': np.array([True])}
    delta = {'a': np.array([[3.0, 0.0]], np.float32), 'b': np.array([4.0], np.float32)}
    # Act
    forged = poison_delta(delta, 'random', 2.0, np.random.default_rng(0), mask)
    # Assert
    assert forged['a'][0, 1] == 0.0
    assert _norm(forged) == pytest.approx(10.0, rel=1e-6)


def test_random_of_a_zero_delta_is_zero_and_needs_a_generator():
    zero = {'a': np.zeros(3, np.float32)}
    np.testing.assert_array_equal(
        poison_delta(zero, 'random', 100.0, np.random.default_rng(0))['a'], 0.0)
    with pytest.raises(ValueError, match='needs a random generator'):
        poison_delta(DELTA, 'random', 1.0)


def test_the_given_drones_or_a_seeded_draw_of_the_count():
    # Act
    given = FaultsConfig(poison='scale', poisoned_drones=(7, 2)).drones(10, seed=0)
    drawn = FaultsConfig(poison='scale', poisoned_count=3).drones(10, seed=0)
    same = FaultsConfig(poison='sign_flip', poisoned_count=3).drones(10, seed=0)
    # Assert
    assert given == (2, 7)
    assert len(set(drawn)) == 3 and all(0 <= k < 10 for k in drawn) and drawn == same
    assert {FaultsConfig(poison='scale', poisoned_count=3).drones(10, seed=s)
            for s in range(5)} != {drawn}   # another seed, other drones (for some seed)
    assert FaultsConfig().drones(10, seed=0) == ()


@pytest.mark.parametrize('flat, message', [
    ({'faults.poison': 'boost', 'faults.poisoned_drones': [0]},
     r"poison 'boost' unknown; choices: none, scale, sign_flip, random"),
    ({'faults.poison': 'scale', 'faults.poison_scale': 0.0, 'faults.poisoned_drones': [0]},
     'poison_scale must be a finite number > 0, got 0.0'),
    ({'faults.poison': 'scale'}, 'poison scale poisons no drone: set poisoned_drones'),
    ({'faults.poisoned_drones': [1]}, 'poisoned_drones / poisoned_count have no effect with '
                                      'poison none'),
    ({'faults.poison_scale': 10.0}, 'poison_scale = 10.0 has no effect with poison none'),
    ({'faults.poison': 'scale', 'faults.poisoned_drones': [1, 1]},
     r'poisoned_drones must be distinct drone ids >= 0, got \[1, 1\]'),
    ({'faults.poison': 'scale', 'faults.poisoned_drones': [1], 'faults.poisoned_count': 1},
     'set poisoned_drones .* or poisoned_count .*, not both'),
    ({'faults.poison': 'random', 'faults.poisoned_drones': [3, 10]},
     r'faults.poisoned_drones \[10\] are not drones: ids go from 0 to num_drones - 1 = 9'),
    ({'faults.poison': 'random', 'faults.poisoned_count': 11},
     r'faults.poisoned_count \(11\) exceeds num_drones \(10\)'),
])
def test_a_bad_faults_setting_is_refused_at_start_naming_the_key(flat, message):
    with pytest.raises(ConfigError, match=message):
        _config(**flat)


def test_faults_do_not_run_with_express():
    with pytest.raises(ConfigError, match='faults.poison scale does not run with '
                                          'express.enabled'):
        build_config(ExperimentConfig, {
            **read_params_file(QUICK.parent / 'fedex_sync_fmnist.yaml'),
            'faults.poison': 'scale', 'faults.poisoned_count': 1})


def test_the_summary_entry_says_which_drones_and_how():
    assert FaultsConfig(poison='sign_flip', poison_scale=1.0, poisoned_drones=(4,)).summary(
        10, 0) == {'poison': 'sign_flip', 'poison_scale': 1.0, 'poisoned_drones': [4]}
    assert FaultsConfig().summary(10, 0) == {'poison': 'none', 'poisoned_drones': []}
