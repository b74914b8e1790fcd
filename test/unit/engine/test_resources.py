"""Per-drone resource decisions in the engine (issue 5 item 3): config, knobs, energy to target."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fl_uav.configschema import ConfigError, build_config, read_params_file
from fl_uav.engine.compare import compare_runs
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine, engine_inputs, run_experiment
from fl_uav.engine.results import energy_to_target
from fl_uav.learning.client_algorithms import LOCAL_STEPS_KNOB, PRUNE_FRACTION_KNOB
from fl_uav.learning.training import evaluate
from fl_uav.learning.weights import set_weights
from fl_uav.planning.config import KNOBS_FILE
from fl_uav.planning.feddpq_opt import BITS_KNOB, PRUNE_KNOB, TOPUP_KNOB, TX_POWER_KNOB
from fl_uav.planning.lgc_control import ENTRIES_KNOB
from fl_uav.planning.lgc_control import LOCAL_STEPS_KNOB as LGC_STEPS_KNOB
from fl_uav.planning.round_resources import FeddpqRoundResources, NoRoundResources, RoundResources

REPO = Path(__file__).resolve().parents[3]
QUICK = REPO / 'config' / 'experiments' / 'quick_digits.yaml'
FEDDPQ = {'learning.client_algorithm': 'feddpq', 'learning.kappa_steps': 2,
          'compression.method': 'range', 'aggregation.strategy': 'feddpq',
          'aggregation.num_selected': 4, 'data.topup': True, 'data.partition': 'dirichlet'}
LGC = {'compression.method': 'lgc', 'compression.lgc_channel_entries': [100, 200, 300],
       'aggregation.strategy': 'lgc', 'resources.lgc_channel_max_entries': 400,
       'resources.lgc_max_local_steps': 6}


def _config(**overrides) -> ExperimentConfig:
    flat = read_params_file(QUICK)
    flat.update({'num_drones': 5, 'num_rounds': 2, **overrides})
    return build_config(ExperimentConfig, flat)


class _Knobs(RoundResources):
    """A stub planner: fixed knobs for some drones, none for the others."""

    def __init__(self, by_drone: dict[int, dict]) -> None:
        self.by_drone = by_drone

    def knobs(self, round_index, drone_ids):
        return {int(d): dict(self.by_drone.get(int(d), {})) for d in drone_ids}


def _one_round(config: ExperimentConfig, planner=None) -> dict[int, dict]:
    engine = ExperimentEngine(config, Path('/nonexistent'))
    if planner is not None:
        engine.resources = planner
    engine.run_round()
    return engine.last_round_drones


def test_no_planner_runs_with_default_knobs_and_writes_no_knobs_file(tmp_path):
    # Arrange
    config = _config(num_rounds=1)

    # Act
    summary = run_experiment(config, tmp_path, echo=lambda _: None)

    # Assert: the null planner adds nothing to a round, knobs.json or summary.json
    assert not (tmp_path / KNOBS_FILE).exists()
    assert summary['resources_planner'] == 'none' and 'lgc_steps_scale' not in summary
    assert NoRoundResources().knobs(1, [0, 1]) == {}
    assert _one_round(config) == _one_round(config, _Knobs({}))


def test_a_planner_without_channels_or_traces_answers_the_engines_hooks_neutrally():
    # Arrange
    planner = NoRoundResources()

    # Act / Assert: no trace asked, no probe group, no hover power, nothing to resume
    assert not planner.wants_trace(1) and planner.probe_drones(1) == set()
    assert planner.observe_trace(1, [2.3, 2.2]) is None
    assert planner.hover_power_w == 0.0 and not planner.online
    assert not planner.resumes_from_knobs
    with pytest.raises(NotImplementedError, match='none planner has no channels'):
        planner.upload(0, [100, 0])   # only a planner's per-channel entries lead here


# --- config -----------------------------------------------------------------------------------

def test_knob_names_agree_between_planners_and_clients():
    # Assert: the planners send what the client algorithms read
    assert LGC_STEPS_KNOB == LOCAL_STEPS_KNOB and PRUNE_KNOB == PRUNE_FRACTION_KNOB


def test_unknown_planner_names_the_key_and_the_choices():
    # Execute / Assert
    with pytest.raises(ConfigError, match=r"resources\.planner 'ddpg' unknown; choices: none, "
                                          r"feddpq, lgc_ddpg, lgc_fixed, lgc_heuristic"):
        _config(**{'resources.planner': 'ddpg'})


@pytest.mark.parametrize('overrides, key', [
    ({**FEDDPQ, 'resources.planner': 'feddpq', 'learning.client_algorithm': 'sgd'},
     'learning.client_algorithm'),
    ({**FEDDPQ, 'resources.planner': 'feddpq', 'data.topup': False}, 'data.topup'),
    ({**FEDDPQ, 'resources.planner': 'feddpq', 'compression.method': 'qsgd'},
     'compression.method'),
    ({**FEDDPQ, 'resources.planner': 'feddpq', 'aggregation.num_selected': 0},
     'aggregation.num_selected'),
    ({**LGC, 'resources.planner': 'lgc_fixed', 'compression.method': 'range'},
     'compression.method'),
    ({**LGC, 'resources.planner': 'lgc_ddpg', 'compression.lgc_channel_entries': [10, 20]},
     'lgc_channel_entries'),
])
def test_planner_without_the_procedure_it_drives_is_refused_at_start(overrides, key):
    # Execute / Assert: the message names the key that must change
    with pytest.raises(ConfigError, match=key):
        _config(**overrides)


def test_bad_resource_values_are_refused():
    # Execute / Assert
    with pytest.raises(ConfigError, match='lgc_channel_bandwidth_hz'):
        _config(**{'resources.lgc_channel_bandwidth_hz': [1e6]})
    with pytest.raises(ConfigError, match='target_accuracy'):
        _config(target_accuracy=1.5)


@pytest.mark.parametrize('key, value', [
    ('resources.lgc_channel_energy_j_per_mb', [float('inf'), 1.0, 2.0]),
    ('resources.lgc_channel_bandwidth_hz', [float('inf'), 1e6, 2e6]),
    ('resources.lgc_hover_power_w', float('inf')),
    ('resources.feddpq_heterogeneity_label_scale', float('inf')),
])
def test_infinite_resource_values_are_refused_naming_the_key(key, value):
    # Execute / Assert: refused by the config, not by a controller after the data is loaded
    with pytest.raises(ConfigError, match=key.split('.')[1]):
        _config(**{key: value})


@pytest.mark.parametrize('value, expected', [('auto', 'auto'), ('online', 'online'), (100, 100.0),
                                             (2.5, 2.5)])
def test_steps_scale_accepts_auto_and_numbers(value, expected):
    # Execute
    config = _config(**{'resources.lgc_steps_scale': value})
    # Assert: a YAML integer becomes a float, the word stays a word
    assert config.resources.lgc_steps_scale == expected
    assert type(config.resources.lgc_steps_scale) is type(expected)


@pytest.mark.parametrize('value', ['fast', 'Auto', 0, -3.0, float('inf'), True, [3.0]])
def test_steps_scale_junk_is_refused_naming_the_key(value):
    # Execute / Assert
    with pytest.raises(ConfigError, match='lgc_steps_scale'):
        _config(**{'resources.lgc_steps_scale': value})


def test_steps_scale_auto_needs_the_vectorised_trainer():
    # Execute / Assert: the warm-up's trace comes from the vectorised trainer
    with pytest.raises(ConfigError, match='engine.vectorized'):
        _config(**{**LGC, 'resources.planner': 'lgc_ddpg', 'resources.lgc_steps_scale': 'auto',
                   'engine.vectorized': False})


def test_shipped_lgc_ddpg_config_keeps_a_configured_h0():
    # Execute (auto and online are --set in docs/benchmarks/lgc.md; the shipped rows stay
    # reproducible)
    flat = read_params_file(REPO / 'config' / 'experiments' / 'lgc_ddpg_fmnist.yaml')
    # Assert
    assert build_config(ExperimentConfig, flat).resources.lgc_steps_scale == 3.0


# --- energy to target -------------------------------------------------------------------------

def test_energy_to_target_sums_up_to_the_first_round_at_the_target():
    # Setup
    rows = [{'round': 1, 'accuracy': 0.2, 'energy_total_j': 10.0},
            {'round': 2, 'accuracy': 0.6, 'energy_total_j': 20.0},
            {'round': 3, 'accuracy': 0.5, 'energy_total_j': 40.0},
            {'round': 4, 'accuracy': 0.9, 'energy_total_j': 80.0}]
    # Execute / Assert
    assert energy_to_target(rows, 0.6) == {'target_accuracy': 0.6, 'energy_to_target_j': 30.0,
                                           'rounds_to_target': 2}
    assert energy_to_target(rows, 0.85)['energy_to_target_j'] == 150.0
    assert energy_to_target(rows, 0.95)['energy_to_target_j'] is None
    assert energy_to_target(rows, 0.0)['rounds_to_target'] is None


# --- a knob changes its drone and only its drone ------------------------------------------------

def _only_drone_changed(base: dict[int, dict], other: dict[int, dict], drone: int, key: str
                        ) -> None:
    assert set(base) == set(other) and drone in base
    assert base[drone][key] != other[drone][key]
    for k in base:
        if k != drone:
            assert base[k] == other[k]


def test_local_steps_knob_changes_one_drone_in_the_vectorised_path():
    # Setup
    config = _config(**{'engine.vectorized': True})
    # Execute
    base = _one_round(config)
    knobbed = _one_round(config, _Knobs({2: {LOCAL_STEPS_KNOB: 7}}))
    # Assert: 7 steps for drone 2 (its energy with them), the others as without a planner
    assert knobbed[2]['steps'] == 7 and base[2]['steps'] != 7
    _only_drone_changed(base, knobbed, 2, 'energy_j')


def test_local_steps_knob_is_the_same_in_the_sequential_path():
    # Execute
    vec = _one_round(_config(), _Knobs({1: {LOCAL_STEPS_KNOB: 3}}))
    seq = _one_round(_config(**{'engine.vectorized': False}), _Knobs({1: {LOCAL_STEPS_KNOB: 3}}))
    # Assert
    assert vec[1]['steps'] == seq[1]['steps'] == 3
    assert vec[1]['energy_j'] == pytest.approx(seq[1]['energy_j'])


@pytest.mark.parametrize('knob, value, key', [
    (TX_POWER_KNOB, 0.01, 'energy_j'),   # a slower link: longer airtime at a tenth the power
    (BITS_KNOB, 12, 'uplink_bytes'),     # 12 instead of 4 bits per entry
    (PRUNE_KNOB, 0.5, 'energy_j'),       # FedDPQ eq. (36): (1 - rho) of the dense step
    (TOPUP_KNOB, 1.0, 'energy_j'),       # more generated samples, eq. (33)
])
def test_feddpq_knob_changes_one_drone(knob, value, key):
    # Setup: FedDPQ's client and quantizer, every drone trains (fedavg), Delta 0.2 by default
    config = _config(**{**FEDDPQ, 'aggregation.strategy': 'fedavg', 'data.topup_factor': 0.2,
                        'learning.prune_fraction': 0.2, 'engine.vectorized': False})
    # Execute
    base = _one_round(config)
    knobbed = _one_round(config, _Knobs({3: {knob: value}}))
    # Assert
    _only_drone_changed(base, knobbed, 3, key)


def test_tx_power_knob_sets_the_airtime_and_energy_of_the_upload():
    # Setup
    config = _config(**{**FEDDPQ, 'aggregation.strategy': 'fedavg', 'engine.vectorized': False})
    # Execute
    base = _one_round(config)
    low = _one_round(config, _Knobs({0: {TX_POWER_KNOB: 0.001}}))
    # Assert: less power, lower rate (eq. (14)), longer upload; the compute part is unchanged
    assert low[0]['upload_s'] > base[0]['upload_s']
    compute_j = base[0]['energy_j'] - 0.1 * base[0]['upload_s']
    assert low[0]['energy_j'] == pytest.approx(compute_j + 0.001 * low[0]['upload_s'])


def test_lgc_entries_knob_changes_one_drone_bytes_and_channel_energy():
    # Setup: the LGC channel model (fixed policy), one drone's entries overridden
    config = _config(**{**LGC, 'resources.planner': 'lgc_fixed'})
    engine = ExperimentEngine(config, Path('/nonexistent'))
    fixed = engine.resources.knobs

    def knobs(round_index, drone_ids):
        out = fixed(round_index, drone_ids)
        out[4][ENTRIES_KNOB] = [400, 0, 0]   # all on the cheapest channel
        return out

    base = _one_round(config)
    engine.resources.knobs = knobs
    # Execute
    engine.run_round()
    knobbed = engine.last_round_drones
    # Assert: drone 4 sends 400 entries (not 3 x 200) and pays 3G only; the rest unchanged
    _only_drone_changed(base, knobbed, 4, 'uplink_bytes')
    assert knobbed[4]['energy_j'] < base[4]['energy_j']


# --- tiny engine runs with each planner -------------------------------------------------------

@pytest.mark.parametrize('planner', ['feddpq', 'lgc_ddpg', 'lgc_fixed', 'lgc_heuristic'])
def test_tiny_run_with_each_planner_finishes_and_records_its_knobs(tmp_path, planner):
    # Setup
    extra = (FEDDPQ if planner == 'feddpq'
             else {**LGC, 'resources.lgc_ddpg_train_steps': 150})
    config = _config(**{**extra, 'resources.planner': planner, 'target_accuracy': 0.05,
                        'system.packet_errors': planner == 'feddpq'})
    # Execute
    summary = run_experiment(config, tmp_path, echo=lambda _: None)
    knobs = json.loads((tmp_path / KNOBS_FILE).read_text())
    # Assert
    assert summary['status'] == 'finished' and summary['resources_planner'] == planner
    assert summary['rounds_to_target'] == 1   # 5 % is reached at once: energy of round 1
    rows = (tmp_path / 'rounds.csv').read_text().splitlines()
    col = rows[0].split(',').index('energy_total_j')
    assert summary['energy_to_target_j'] == pytest.approx(float(rows[1].split(',')[col]))
    if planner == 'feddpq':
        by_drone = knobs['knobs_by_drone']
        assert sorted(by_drone) == [str(k) for k in range(5)]
        assert all(0.01 <= k[TX_POWER_KNOB] <= 0.1 and 6 <= k[BITS_KNOB] <= 16
                   and 0.1 <= k[PRUNE_KNOB] <= 0.3 for k in by_drone.values())
    else:
        decisions = knobs['decisions']
        assert sorted(decisions) == ['1', '2'] and len(decisions['1']) == 5
        steps = {d[LGC_STEPS_KNOB] for r in decisions.values() for d in r.values()}
        assert all(1 <= s <= 6 for s in steps)
        if planner == 'lgc_fixed':   # the mid action every round: H = 1 + round(2.5)
            assert steps == {3} and all(d[ENTRIES_KNOB] == [200, 200, 200]
                                        for r in decisions.values() for d in r.values())


def test_feddpq_plan_is_deterministic_for_a_seed_and_uses_the_engine_fleet():
    # Setup
    config = _config(**{**FEDDPQ, 'resources.planner': 'feddpq'})
    # Execute
    first = ExperimentEngine(config, Path('/nonexistent'))
    second = FeddpqRoundResources(engine_inputs(first))
    # Assert: the same knobs; the fleet is the engine's partition, distances and model
    assert first.resources.plan.knobs_by_drone() == second.plan.knobs_by_drone()
    fleet = second.fleet
    assert np.array_equal(fleet.distance_m, first.distance_m)
    counts = [np.bincount(first.data.train_y[p], minlength=10).tolist() for p in first.parts]
    assert fleet.class_counts.astype(int).tolist() == counts
    assert fleet.num_params == sum(w.size for w in first.weights.values())
    assert fleet.batch_size == config.learning.batch_size * config.learning.kappa_steps


def test_compare_shows_energy_to_a_given_target(tmp_path):
    # Setup: one tiny run without a target of its own
    run_experiment(_config(), tmp_path / 'run', echo=lambda _: None)
    # Execute
    own = compare_runs([tmp_path / 'run'], tmp_path / 'cmp')
    given = compare_runs([tmp_path / 'run'], tmp_path / 'cmp', target_accuracy=0.01)
    # Assert: '-' without a target; with 1 % the first round's fleet energy (kJ) and round 1
    assert own.splitlines()[1].split()[-3:] == ['-', '-', '-']
    energy_kj = run_rows_energy(tmp_path / 'run') / 1e3
    assert given.splitlines()[1].split()[-3:] == ['0.010', f'{energy_kj:.1f}', '1']


def run_rows_energy(run: Path) -> float:
    rows = (run / 'rounds.csv').read_text().splitlines()
    return float(rows[1].split(',')[rows[0].split(',').index('energy_total_j')])


def test_label_scale_default_is_the_convergence_model_default():
    # Setup
    from fl_uav.planning.config import ResourcesConfig
    from fl_uav.planning.feddpq_opt import ConvergenceConstants
    # Assert: the config does not drift from the model it parameterises
    assert (ResourcesConfig().feddpq_heterogeneity_label_scale
            == ConvergenceConstants().heterogeneity_label_scale)


# --- resources.lgc_steps_scale: auto ------------------------------------------------------------

AUTO = {**LGC, 'resources.planner': 'lgc_ddpg', 'resources.lgc_steps_scale': 'auto',
        'resources.lgc_ddpg_train_steps': 150, 'num_rounds': 3}


def test_auto_warms_up_at_the_mid_action_then_fits_h0_and_records_it(tmp_path):
    # Setup
    config = _config(**AUTO)
    # Execute
    summary = run_experiment(config, tmp_path, echo=lambda _: None)
    knobs = json.loads((tmp_path / KNOBS_FILE).read_text())
    # Assert: round 1 is lgc_fixed's mid action (H = 1 + round(2.5) = 3, 200 per channel)
    first = knobs['decisions']['1'].values()
    assert all(d[LGC_STEPS_KNOB] == 3 and d[ENTRIES_KNOB] == [200, 200, 200] for d in first)
    # the fit is on the warm-up's H + 1 losses (h = 0..3) and is what the surrogates use
    h0 = knobs['steps_scale']
    assert h0['setting'] == 'auto' and h0['calibrated'] and h0['warmup_rounds'] == 1
    assert len(h0['losses_after_steps']) == 4 and h0['fit']['num_steps'] == 4
    assert h0['cap'] == 10.0 * 6 and 0.1 <= h0['value'] <= h0['cap']
    assert summary['lgc_steps_scale'] == h0['value'] == h0['fit']['steps_scale']
    # the warm-up round's energy counts like any other (target 0: not asked, so check sums)
    rows = (tmp_path / 'rounds.csv').read_text().splitlines()
    col = rows[0].split(',').index('energy_total_j')
    assert summary['energy_total_j'] == pytest.approx(
        sum(float(r.split(',')[col]) for r in rows[1:]))


def test_auto_trace_starts_at_the_global_model_loss(tmp_path):
    # Setup
    engine = ExperimentEngine(_config(**AUTO), tmp_path)
    start = dict(engine.weights)
    # Execute
    engine.run_round()
    # Assert: h = 0 is the round's global model on the drones' sample (before any step)
    curve = engine.resources.steps_scale_curve
    parts = np.concatenate(engine.parts)
    x, y = engine.data.train_x[parts], engine.data.train_y[parts]
    set_weights(engine._worker, start)
    assert len(y) <= 4096   # the quick config's fleet is smaller than the sample: all of it
    assert curve[0] == pytest.approx(evaluate(engine._worker, x, y)[1], rel=1e-5)
    assert engine.resources.calibrated and len(curve) == 4


@pytest.mark.parametrize('mode, extra, stop_round', [
    ('auto', {'resources.lgc_steps_scale_min_drop': 0.0}, 2),   # stopped after the warm-up
    ('auto', {'resources.lgc_steps_scale_min_drop': 0.5}, 2),   # stopped within it
    ('online', {}, 3),                                          # stopped after a probe
])
def test_fitted_progress_model_resumes_with_the_same_decisions(tmp_path, mode, extra,
                                                               stop_round):
    # Setup: one run straight through, one stopped after stop_round and resumed
    keys = {**(AUTO if mode == 'auto' else ONLINE), 'engine.checkpoint_every': 1, **extra}
    config = _config(**keys)
    run_experiment(config, tmp_path / 'straight', echo=lambda _: None)
    run_experiment(_config(**{**keys, 'num_rounds': stop_round}), tmp_path / 'resumed',
                   echo=lambda _: None)
    # Execute
    run_experiment(config, tmp_path / 'resumed', resume=True, echo=lambda _: None)
    # Assert
    straight, resumed = (json.loads((tmp_path / d / KNOBS_FILE).read_text())
                         for d in ('straight', 'resumed'))
    assert resumed['decisions'] == straight['decisions']
    assert resumed['steps_scale'] == straight['steps_scale']


def test_min_drop_warms_up_until_the_curve_falls_enough_then_fits_that_round():
    # Setup: the warm-up needs a 1 % fall of the loss within the round
    engine = ExperimentEngine(_config(**{**AUTO, 'resources.lgc_steps_scale_min_drop': 0.01}),
                              Path('/nonexistent'))
    resources = engine.resources
    h = np.arange(12)
    flat_curve = (2.3 - 0.0002 * h).tolist()                   # falls 0.1 %: too little
    bent_curve = (2.3 - 0.2 * -np.expm1(-h / 4.0)).tolist()    # falls 8 %, h0 = 4
    # Execute
    resources.observe_trace(1, flat_curve)
    after_one = (resources.calibrated, resources.wants_trace(2))
    resources.observe_trace(2, bent_curve)
    # Assert: round 1 did not calibrate; round 2's curve is the one fitted
    assert after_one == (False, True)
    assert resources.calibrated and not resources.wants_trace(3)
    assert resources.steps_scale == pytest.approx(4.0, rel=1e-3)
    summary = resources.steps_scale_summary()
    assert summary['warmup_rounds'] == 2 and sorted(summary['warmup_curves']) == ['1', '2']
    assert all(env.config.steps_scale == pytest.approx(4.0, rel=1e-3)
               for env in resources.planner.envs.values())


def test_min_drop_fits_the_last_warm_up_round_when_the_loss_never_falls_enough():
    # Setup
    engine = ExperimentEngine(_config(**{**AUTO, 'resources.lgc_steps_scale_min_drop': 0.5}),
                              Path('/nonexistent'))
    curve = (2.3 - 0.01 * -np.expm1(-np.arange(6) / 2.0)).tolist()
    # Execute
    for r in range(1, 5):
        engine.resources.observe_trace(r, curve)
    before_last = engine.resources.calibrated
    engine.resources.observe_trace(5, curve)
    # Assert
    assert not before_last and engine.resources.calibrated
    assert engine.resources.steps_scale_summary()['warmup_rounds'] == 5


@pytest.mark.parametrize('value', [-0.1, 1.0])
def test_bad_min_drop_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match='lgc_steps_scale_min_drop'):
        _config(**{'resources.lgc_steps_scale_min_drop': value})


# --- resources.lgc_steps_scale: online ----------------------------------------------------------

ONLINE = {**LGC, 'resources.planner': 'lgc_ddpg', 'resources.lgc_steps_scale': 'online',
          'resources.lgc_ddpg_train_steps': 150,
          'resources.lgc_refit_rounds': 2, 'num_rounds': 4}


def test_online_probes_at_the_mid_action_every_k_rounds_and_refits_beta(tmp_path):
    # Setup: one probe group (the whole fleet probes)
    config = _config(**ONLINE, **{'resources.lgc_probe_groups': 1})
    # Execute
    summary = run_experiment(config, tmp_path, echo=lambda _: None)
    knobs = json.loads((tmp_path / KNOBS_FILE).read_text())
    # Assert: rounds 1 and 3 are probes at the mid action (H = 3, 200 per channel)
    for r in ('1', '3'):
        assert all(d[LGC_STEPS_KNOB] == 3 and d[ENTRIES_KNOB] == [200, 200, 200]
                   for d in knobs['decisions'][r].values())
    online = knobs['steps_scale']['online']
    assert sorted(online['probes']) == ['1', '3'] and online['refit_rounds'] == 2
    assert all(len(p['losses_after_steps']) == 4 for p in online['probes'].values())
    last = online['probes']['3']['fit']
    assert last['informative'] and online['exponent'] == last['exponent']
    assert summary['lgc_steps_exponent'] == online['exponent']
    assert sorted(summary['lgc_steps_exponent_probes']) == ['1', '3']


def test_online_flat_probe_keeps_the_warm_up_and_a_falling_one_sets_every_surrogate():
    # Setup
    engine = ExperimentEngine(_config(**ONLINE), Path('/nonexistent'))
    resources = engine.resources
    h = np.arange(4)
    # Execute
    resources.observe_trace(1, [2.3, 2.3, 2.31, 2.32])      # rises: nothing to fit
    after_flat = (resources.calibrated, resources.steps_exponent, dict(resources.agents))
    resources.observe_trace(2, (2.3 - 0.01 * h).tolist())   # not a probe round: ignored
    resources.observe_trace(3, (2.3 - 0.01 * h ** 1.5).tolist())
    # Assert
    assert after_flat == (False, None, {})
    assert sorted(resources.exponent_fits) == ['1', '3']
    assert resources.steps_exponent == pytest.approx(1.5, abs=0.01)
    assert all(env.config.steps_exponent == resources.steps_exponent
               for env in resources.planner.envs.values())
    assert sorted(resources.agents) == list(range(5))


def test_online_needs_the_vectorised_trainer():
    # Execute / Assert
    with pytest.raises(ConfigError, match='engine.vectorized'):
        _config(**{**ONLINE, 'engine.vectorized': False})


def test_online_finetune_keeps_the_agents_and_retraining_replaces_them():
    # Setup
    h = np.arange(4)
    agents = {}
    for steps in (0, 60):
        engine = ExperimentEngine(_config(**{**ONLINE, 'resources.lgc_finetune_steps': steps}),
                                  Path('/nonexistent'))
        engine.resources.observe_trace(1, (2.3 - 0.01 * h).tolist())
        first = dict(engine.resources.agents)
        engine.resources.observe_trace(3, (2.3 - 0.01 * h ** 0.5).tolist())
        agents[steps] = (first, engine.resources.agents)
    # Assert: fine-tuning continues the same agent objects, retraining builds new ones
    assert all(agents[60][1][k] is agents[60][0][k] for k in range(5))
    assert all(agents[0][1][k] is not agents[0][0][k] for k in range(5))


def test_every_drones_ddpg_training_and_fine_tuning_have_their_own_seeds(monkeypatch):
    import fl_uav.planning.round_resources as planning

    # Arrange: train at the first probe, fine-tune at round 3; the seeds each run gets
    engine = ExperimentEngine(_config(**{**ONLINE, 'resources.lgc_finetune_steps': 20}),
                              Path('/nonexistent'))
    seeds = []
    train, finetune = planning.train_ddpg, planning.finetune_ddpg
    monkeypatch.setattr(planning, 'train_ddpg', lambda *args, seed, **kwargs: (
        seeds.append(seed), train(*args, seed=seed, **kwargs))[1])
    monkeypatch.setattr(planning, 'finetune_ddpg', lambda *args, seed, **kwargs: (
        seeds.append(seed), finetune(*args, seed=seed, **kwargs))[1])
    h = np.arange(4)
    # Act
    engine.resources.observe_trace(1, (2.3 - 0.01 * h).tolist())
    engine.resources.observe_trace(3, (2.3 - 0.01 * h ** 0.5).tolist())
    # Assert: 5 trainings, 5 fine-tunings, no two on one stream (seed * 1000 + k beside
    # (seed * 1000 + k) * 1000 + round made drone 0's round-3 fine-tuning drone 3's training)
    assert len(seeds) == 10
    assert len(set(seeds)) == 10


def test_online_probe_curve_ends_at_the_model_the_lgc_server_produced(tmp_path):
    # Setup: two rounds, so round 2's memories are not zero; probes every round
    engine = ExperimentEngine(_config(**{**ONLINE, 'resources.lgc_refit_rounds': 1}), tmp_path)
    engine.run_round()
    seen = {}
    observe = engine.resources.observe_trace
    engine.resources.observe_trace = lambda r, c: (seen.setdefault(r, c), observe(r, c))
    # Execute
    engine.run_round()
    # Assert: h = H is the round's compressed aggregate (every drone took H = 3 steps)
    curve = seen[2]
    parts = np.concatenate(engine.parts)
    x, y = engine.data.train_x[parts], engine.data.train_y[parts]
    set_weights(engine._worker, engine.weights)
    assert len(curve) == 4
    assert curve[-1] == pytest.approx(evaluate(engine._worker, x, y)[1], rel=1e-4)


def test_online_probe_groups_take_turns_after_the_first_fit():
    # Setup: 5 drones, 2 groups (even / odd ids), a probe every 2 rounds
    engine = ExperimentEngine(_config(**{**ONLINE, 'resources.lgc_probe_groups': 2}),
                              Path('/nonexistent'))
    resources = engine.resources
    # Execute / Assert: the whole fleet until a fit, then group 1 (round 3), group 0 (round 5)
    assert resources.probe_drones(1) == set(range(5))
    resources.observe_trace(1, (2.3 - 0.01 * np.arange(4)).tolist())
    assert resources.probe_drones(2) == set()
    assert resources.probe_drones(3) == {1, 3} and resources.probe_drones(5) == {0, 2, 4}
    knobs = resources.knobs(3, list(range(5)))
    assert all(knobs[k][LGC_STEPS_KNOB] == 3 and knobs[k][ENTRIES_KNOB] == [200, 200, 200]
               for k in (1, 3))
    assert all(type(resources.planner.policies[k]).__name__ == 'DdpgPolicy' for k in (0, 2, 4))


# --- resources.lgc_plateau_*: fixed-decision LGC, then H = 1 after the plateau ---------------

PLATEAU = {**LGC, 'resources.planner': 'lgc_fixed', 'resources.lgc_plateau_window': 1,
           'resources.lgc_plateau_min_gain': 1.0, 'num_rounds': 4}


def test_plateau_rule_switches_every_drone_to_its_local_steps_after_the_plateau(tmp_path):
    # Setup: window 1, min gain 100 %: round 2 never gains that much, so the switch latches
    # after round 2 and rounds 3-4 run at H = 2
    config = _config(**PLATEAU, **{'resources.lgc_plateau_local_steps': 2})
    # Execute
    summary = run_experiment(config, tmp_path, echo=lambda _: None)
    knobs = json.loads((tmp_path / KNOBS_FILE).read_text())
    # Assert: the mid decision (H = 3, 200 per channel) until then, H = 2 with the same entries
    decisions = knobs['decisions']
    for r, steps in (('1', 3), ('2', 3), ('3', 2), ('4', 2)):
        assert all(d[LGC_STEPS_KNOB] == steps and d[ENTRIES_KNOB] == [200, 200, 200]
                   for d in decisions[r].values())
    assert knobs['plateau']['switched_after_round'] == 2
    assert sorted(knobs['accuracies']) == ['1', '2', '3', '4'] and knobs['stall'] is None
    assert summary['lgc_plateau_switched_after_round'] == 2


def test_plateau_rule_resume_gives_the_same_decisions(tmp_path):
    # Setup: one run straight through, one stopped after round 2 (the switch) and resumed
    extra = {'engine.checkpoint_every': 1}
    run_experiment(_config(**PLATEAU, **extra), tmp_path / 'straight', echo=lambda _: None)
    run_experiment(_config(**{**PLATEAU, **extra, 'num_rounds': 2}), tmp_path / 'resumed',
                   echo=lambda _: None)
    # Execute
    run_experiment(_config(**PLATEAU, **extra), tmp_path / 'resumed', resume=True,
                   echo=lambda _: None)
    # Assert
    straight, resumed = (json.loads((tmp_path / d / KNOBS_FILE).read_text())
                         for d in ('straight', 'resumed'))
    assert resumed['decisions'] == straight['decisions']
    assert resumed['plateau'] == straight['plateau']
    assert resumed['accuracies'] == straight['accuracies']


@pytest.mark.parametrize('overrides, match', [
    ({'resources.lgc_plateau_window': -1}, 'lgc_plateau_window must be >= 0'),
    ({'resources.lgc_plateau_min_gain': 1.5}, 'lgc_plateau_min_gain in'),
    ({'resources.lgc_plateau_local_steps': 7}, 'lgc_plateau_local_steps must be in'),
    ({'resources.lgc_steps_scale': 'online', 'resources.planner': 'lgc_ddpg'},
     'configured lgc_steps_scale'),
    ({'resources.lgc_stall_window': -1}, 'lgc_stall_window must be >= 0'),
    ({'resources.lgc_stall_min_gain': -0.1}, 'lgc_stall_min_gain'),
])
def test_bad_plateau_settings_are_refused_naming_the_key(overrides, match):
    # Act / Assert
    with pytest.raises(ConfigError, match=match):
        _config(**{**PLATEAU, **overrides})


STALL = {**LGC, 'resources.planner': 'lgc_heuristic', 'resources.lgc_stall_window': 1,
         'resources.lgc_stall_min_gain': 1.0, 'num_rounds': 4}


def test_stall_guard_takes_the_mid_decision_while_the_accuracy_stalls(tmp_path):
    # Setup: the heuristic's own decisions, then (window 1, min gain 100 %: every round stalls)
    # the mid decision from round 3 on (the verdict after round 2 applies to round 3)
    own = _config(**{**STALL, 'resources.lgc_stall_window': 0})
    guarded = _config(**STALL, **{'engine.checkpoint_every': 1})
    # Execute
    run_experiment(own, tmp_path / 'own', echo=lambda _: None)
    summary = run_experiment(guarded, tmp_path / 'guarded', echo=lambda _: None)
    # Assert
    mine, knobs = (json.loads((tmp_path / d / KNOBS_FILE).read_text())
                   for d in ('own', 'guarded'))
    assert knobs['decisions']['1'] == mine['decisions']['1']
    assert knobs['decisions']['2'] == mine['decisions']['2']
    assert any(d[LGC_STEPS_KNOB] != 3 or d[ENTRIES_KNOB] != [200, 200, 200]
               for d in mine['decisions']['3'].values())   # the heuristic is not the mid
    for r in ('3', '4'):
        assert all(d[LGC_STEPS_KNOB] == 3 and d[ENTRIES_KNOB] == [200, 200, 200]
                   for d in knobs['decisions'][r].values())
    assert knobs['stall']['rounds'] == [3, 4] and summary['lgc_stall_rounds'] == 2
    # resume after round 3: the same record
    run_experiment(_config(**{**STALL, 'engine.checkpoint_every': 1, 'num_rounds': 3}),
                   tmp_path / 'resumed', echo=lambda _: None)
    run_experiment(guarded, tmp_path / 'resumed', resume=True, echo=lambda _: None)
    resumed = json.loads((tmp_path / 'resumed' / KNOBS_FILE).read_text())
    assert resumed['decisions'] == knobs['decisions'] and resumed['stall'] == knobs['stall']


def test_resume_without_planner_ignores_an_unreadable_knobs_file(tmp_path):
    # Arrange: a planner-less run checkpointed after round 1; a knobs.json it never wrote
    # (left by an earlier run in the same directory, here truncated)
    run_experiment(_config(num_rounds=1), tmp_path, echo=lambda _: None)
    (tmp_path / KNOBS_FILE).write_text('{"planner": "lgc", "decisions": {')

    # Act: resume to round 2
    summary = run_experiment(_config(num_rounds=2), tmp_path, resume=True, echo=lambda _: None)

    # Assert: planner none reads nothing from knobs.json (as before RoundResources)
    assert summary['status'] == 'finished' and summary['rounds_completed'] == 2
