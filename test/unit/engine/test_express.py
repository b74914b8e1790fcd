"""FedEx express delivery in the engine: round times, running sums, the server rule, order,
energy, config errors, engine runs and resume."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from fl_uav.aggregation.config import AggregationConfig
from fl_uav.aggregation.fedex import FedExAsync, FedExSync
from fl_uav.aggregation.strategy import AggregationError
from fl_uav.configschema import ConfigError, build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import run_experiment
from fl_uav.engine.express import ExpressRuntime, location_partition
from fl_uav.netmodel.flight import ConstantPower, tour_cost
from fl_uav.planning.express import (
    ExpressConfig,
    ExpressPlanError,
    local_steps_per_visit,
    place_clients,
    plan_routes,
    revisit_slots,
    tour_slots,
)
from fl_uav.planning.routing import RoutePlan
from test.unit._plugins import SPEC, StepsInPlace

REPO = Path(__file__).resolve().parents[3]
QUICK = REPO / 'config' / 'experiments' / 'quick_digits.yaml'
FAST_CARP = {'gibbs_sweeps': 8, 'gibbs_chains': 2}


def _plan(round_trip_s, tours) -> RoutePlan:
    """A hand-made plan: tours (client ids per UAV) and their round-trip times."""
    return RoutePlan('sync', tuple(tuple(t) for t in tours), (0.0,) * len(tours),
                     tuple(float(r) for r in round_trip_s), (1.0,) * len(tours), 0.0)


def _toy_train(base, clients, steps, seeds):
    """CLU of client i from base x: x_i - x = -0.5 x + (i + 1) (a hand-checkable rule)."""
    deltas = [{'w': -0.5 * base['w'] + (i + 1)} for i in clients]
    return deltas, [0.0] * len(clients)


def _run(runtime, strategy, n, weights=None):
    weights = {'w': np.array([1.0])} if weights is None else weights
    steps = []
    for _ in range(n):
        step = runtime.advance(weights, _toy_train, strategy)
        weights = step.weights
        steps.append(step)
    return steps


def _express_config(**overrides) -> ExpressConfig:
    return ExpressConfig(**{**FAST_CARP, **overrides})


# ----------------------------------------------------------------------------- runtime

def test_sync_round_lasts_the_longest_tour_of_the_netmodel():
    config = _express_config(num_uavs=3, mode='sync')
    clients, _ = place_clients(config, 10)
    problem, plan = plan_routes(config, clients, seed=0)
    runtime = ExpressRuntime(config, plan, {'w': np.zeros(1)})
    times = [s.time_s for s in _run(runtime, FedExSync(10), 3)]
    # The tour time from the flight model, independently of the planner (FedEx eq. (9)).
    station = np.asarray(config.station_enu_m)
    tour_s = [tour_cost(np.vstack([station, clients[list(t)]]), config.speed_m_s,
                        ConstantPower(), config.hover_time_per_client_s * len(t),
                        closed=True).total_time_s for t in plan.tours]
    # The round is the longest tour in whole slots (FedEx Sec. IV-A, eq. (9)).
    round_s = np.ceil(max(tour_s) / config.step_time_s) * config.step_time_s
    assert np.diff([0.0, *times]) == pytest.approx([round_s] * 3)
    assert len(set(np.round(tour_s, 3))) == 3   # the tours differ, so max is a real choice
    assert runtime.steps == dict.fromkeys(runtime.uavs, round_s / config.step_time_s)


def test_running_sum_carried_equals_the_sum_of_its_clients_updates():
    runtime = ExpressRuntime(_express_config(mode='sync', step_time_s=50.0),
                             _plan([100, 150], [[0, 3], [1, 2]]),
                             {'w': np.array([2.0])})
    first, second = _run(runtime, FedExSync(4), 2, {'w': np.array([2.0])})
    assert first.participants == 0 and all(np.all(u['w'] == 0) for u in first.sums.values())
    # Base 2.0: client i's CLU is -1 + (i + 1) = i.
    assert second.sums[0]['w'] == pytest.approx([0 + 3])
    assert second.sums[1]['w'] == pytest.approx([1 + 2])
    assert second.participants == 4 and second.visited == 4


def test_sync_server_rule_on_a_hand_computed_case():
    # FedEx eq. (13) with the one-round lag: x_{r+1} = x_r + (1/N) sum_i CLU_i(x_{r-1}).
    runtime = ExpressRuntime(_express_config(mode='sync', step_time_s=50.0),
                             _plan([100, 150], [[0, 1], [2, 3]]), {'w': np.array([1.0])})
    steps = _run(runtime, FedExSync(4), 4)
    assert [float(s.weights['w'][0]) for s in steps] == pytest.approx([1.0, 3.0, 5.0, 6.0])
    assert [s.time_s for s in steps] == pytest.approx([150, 300, 450, 600])
    assert [s.staleness_s for s in steps[1:]] == pytest.approx([300] * 3)   # 2 Delta


def test_async_server_rule_and_landing_order_on_a_hand_computed_case():
    # FedEx eqs. (14)-(15): UAV 0 lands every 100 s, UAV 1 every 150 s; at 300 s both.
    runtime = ExpressRuntime(_express_config(mode='async', step_time_s=50.0),
                             _plan([100, 150], [[0, 1], [2, 3]]), {'w': np.array([1.0])})
    steps = _run(runtime, FedExAsync(4), 5)
    assert [(s.time_s, s.uavs) for s in steps] == [
        (100, [0]), (150, [1]), (200, [0]), (300, [0, 1]), (400, [0])]
    assert [float(s.weights['w'][0]) for s in steps] == pytest.approx(
        [1.0, 1.0, 1.5, 3.5, 3.875])
    assert steps[-1].staleness_s == pytest.approx(200)   # 2 Delta_0 (eq. (21))
    assert runtime.steps == {0: 2, 1: 3}   # Delta_k in 50 s slots: one local step per slot


def test_async_applies_updates_in_tour_completion_order():
    periods = [70.0, 110.0, 130.0]
    runtime = ExpressRuntime(_express_config(mode='async', step_time_s=10.0),
                             _plan(periods, [[0], [1, 2], [3]]), {'w': np.array([1.0])})
    steps = _run(runtime, FedExAsync(4), 12)
    events = sorted((n * p, k) for k, p in enumerate(periods) for n in range(1, 20))[:12]
    assert [(s.time_s, s.uavs) for s in steps] == [(pytest.approx(t), [k]) for t, k in events]
    for s in steps:
        k = s.uavs[0]
        assert s.staleness_s <= 2 * periods[k] + 1e-9


def test_a_strategy_that_breaks_the_contract_is_named_and_no_uav_carries_its_result():
    # Arrange: round 2 has updates (round 1 only delivers); the rule adds its step in place
    runtime = ExpressRuntime(_express_config(mode='sync', step_time_s=50.0),
                             _plan([100, 150], [[0, 1], [2, 3]]), {'w': np.array([1.0])})
    weights = _run(runtime, FedExSync(4), 1)[-1].weights
    carried = {k: dict(m) for k, m in runtime.carried.items()}
    # Act
    with pytest.raises(AggregationError) as caught:
        runtime.advance(weights, _toy_train, StepsInPlace())
    # Assert: the contract check's error; the model given and the carried ones unchanged
    assert 'StepsInPlace.aggregate raised ValueError' in str(caught.value)
    assert 'must not change the global weights' in str(caught.value)
    assert weights['w'] == pytest.approx([1.0])
    assert runtime.carried == carried and runtime.tours_done == {0: 1, 1: 1}


def test_a_non_finite_training_loss_is_the_clients_fault_not_the_strategys():
    # Arrange: the clients' training diverges in round 2
    runtime = ExpressRuntime(_express_config(mode='sync', step_time_s=50.0),
                             _plan([100, 150], [[0, 1], [2, 3]]), {'w': np.array([1.0])})
    weights = _run(runtime, FedExSync(4), 1)[-1].weights

    def diverges(base, clients, steps, seeds):
        return [{'w': base['w'] * np.nan} for _ in clients], [np.nan] * len(clients)

    # Act / Assert
    with pytest.raises(FloatingPointError, match='FedEx update 2: non-finite local training'):
        runtime.advance(weights, diverges, FedExSync(4))


def test_the_engine_stops_as_failed_naming_a_strategy_that_breaks_the_contract_in_express(
        tmp_path, monkeypatch):
    # Arrange: the engine's FedEx rule replaced by one that adds its step in place (no config
    # lets a plug-in run express; a wrapper or a future rule reaches this path the same way)
    config = build_config(ExperimentConfig, _flat(num_rounds=3))
    monkeypatch.setattr(AggregationConfig, 'build',
                        lambda self, num_clients, seed=0: StepsInPlace())
    # Act
    summary = run_experiment(config, tmp_path, echo=lambda _: None)
    # Assert: failed at the first update (it writes even when nothing arrived), naming the
    # rule and the fault
    assert summary['status'] == 'failed' and _rows(tmp_path) == []
    assert re.match(r"update 1: aggregation.strategy 'fedex_sync': StepsInPlace.aggregate "
                    r'raised ValueError: .*must not change the global weights',
                    summary['error']), summary['error']


# ----------------------------------------------------------------------------- slotted clock

def test_a_tour_takes_whole_slots_rounded_up():
    # FedEx Sec. IV-A / eq. (14): a UAV back during slot t0 + Delta_k - 1 updates x^{t0+Delta_k}.
    assert [tour_slots(s, 60.0) for s in (441.0, 480.0, 480.0 + 1e-8, 480.5, 1.0, 0.0)] == [
        8, 8, 8, 9, 1, 1]
    assert local_steps_per_visit(441.0, 60.0) == 8   # the floor rule gave 7
    plan = _plan([441.0, 500.0, 459.5, 0.0], [[0], [1, 2], [3], []])
    assert revisit_slots('async', plan, 60.0) == {0: 8, 1: 9, 2: 8}
    assert revisit_slots('sync', plan, 60.0) == {0: 9, 1: 9, 2: 9}   # max_k Delta_k


@pytest.mark.parametrize('mode', ['sync', 'async'])
def test_clients_train_one_step_per_slot_elapsed_whatever_the_tour_times(mode):
    # Tours of 7.35, 8.33 and 7.66 slots: on the old continuous clock with floor(P / slot)
    # steps a client lost the fraction every visit (7 steps per 7.35 slots in Async). Checks
    # steps against the runtime's own slot clock; the rounding itself is checked above.
    slot = 60.0
    plan = _plan([441.0, 500.0, 459.5], [[0, 1], [2], [3, 4]])
    runtime = ExpressRuntime(_express_config(mode=mode, step_time_s=slot), plan,
                             {'w': np.array([1.0])})
    trained = dict.fromkeys(range(5), 0)
    last_visit_s = dict.fromkeys(range(5), 0.0)

    def train(base, clients, steps, seeds):
        for i, n in zip(clients, steps, strict=True):
            trained[i] += n
        return _toy_train(base, clients, steps, seeds)

    weights = {'w': np.array([1.0])}
    strategy = FedExSync(5) if mode == 'sync' else FedExAsync(5)
    for _ in range(40):
        step = runtime.advance(weights, train, strategy)
        weights = step.weights
        assert step.time_s / slot == pytest.approx(round(step.time_s / slot))   # slot grid
        for k in step.uavs:
            for i in plan.tours[k]:
                last_visit_s[i] = step.time_s
    # A client is visited at the same offset into every tour of its UAV, so the slots from its
    # first delivery (first tour: a model, no CLU) to its last collection are the slots between
    # its UAV's first and last landings; it trained one local step in each of them.
    for k in runtime.uavs:
        for i in plan.tours[k]:
            elapsed = round((last_visit_s[i] - runtime.period_s[k]) / slot)
            assert trained[i] == elapsed > 0


def test_async_uavs_back_in_the_same_slot_are_one_update():
    # 441 s and 459.5 s tours are both 8 slots: every landing of UAV 0 is also one of UAV 2,
    # one eq. (15) update (on the continuous clock they were separate landings).
    runtime = ExpressRuntime(_express_config(mode='async', step_time_s=60.0),
                             _plan([441.0, 500.0, 459.5], [[0], [1], [2]]),
                             {'w': np.array([1.0])})
    steps = _run(runtime, FedExAsync(3), 6)
    assert [(s.time_s, s.uavs) for s in steps] == [
        (480, [0, 2]), (540, [1]), (960, [0, 2]), (1080, [1]), (1440, [0, 2]), (1620, [1])]


def test_every_tour_fits_the_budget_and_matches_the_flight_model():
    config = _express_config(num_uavs=4, energy_budget_j=15e3)
    clients, _ = place_clients(config, 20)
    _, plan = plan_routes(config, clients, seed=0)
    station = np.asarray(config.station_enu_m)
    for tour, energy_j in zip(plan.tours, plan.energy_j):
        cost = tour_cost(np.vstack([station, clients[list(tour)]]), config.speed_m_s,
                         ConstantPower(), config.hover_time_per_client_s * len(tour),
                         config.tx_power_w, closed=True)
        assert energy_j == pytest.approx(cost.total_energy_j)
        assert energy_j <= config.energy_budget_j


def test_a_budget_below_one_tour_gives_the_reason():
    config = _express_config(energy_budget_j=2000.0)
    clients, _ = place_clients(config, 8)
    with pytest.raises(ExpressPlanError, match='no feasible FedEx plan.*budget'):
        plan_routes(config, clients, seed=0)


def test_engine_reports_a_budget_below_one_tour_before_loading_the_data(tmp_path,
                                                                        monkeypatch):
    # Arrange: a budget no tour fits; loading the dataset would fail the test
    from fl_uav.engine import experiment

    def no_data(config):
        raise AssertionError('the dataset was loaded before the plan was checked')

    monkeypatch.setattr(experiment, 'load_experiment_data', no_data)
    config = build_config(ExperimentConfig, _flat(**{'express.energy_budget_j': 2000.0}))
    # Act / Assert
    with pytest.raises(ExpressPlanError, match='express .*energy_budget_j.*budget'):
        experiment.ExperimentEngine(config, tmp_path)


def test_clients_fill_the_blocks_and_location_data_follow_the_block():
    config = ExpressConfig(area_east_m=2000, area_north_m=2000, blocks_east=5, blocks_north=2)
    positions, blocks = place_clients(config, 40)
    assert np.bincount(blocks).tolist() == [4] * 10
    east_block = (positions[:, 0] // 400).astype(int)
    north_block = (positions[:, 1] // 1000).astype(int)
    assert np.array_equal(east_block + 5 * north_block, blocks)
    labels = np.repeat(np.arange(10), 300)
    parts = location_partition(labels, blocks, 10, 60, 0.7, seed=0)
    main_share = np.mean([np.mean(labels[p] == b % 10) for p, b in zip(parts, blocks)])
    assert 0.62 < main_share < 0.78
    assert len(np.unique(np.concatenate(parts))) == 40 * 60   # without replacement


# ----------------------------------------------------------------------------- config

def _flat(**overrides) -> dict:
    flat = read_params_file(QUICK)
    flat.update({'num_drones': 8, 'num_rounds': 2, 'data.partition': 'iid',
                 'aggregation.strategy': 'fedex_sync', 'express.enabled': True,
                 'express.num_uavs': 2, 'express.gibbs_sweeps': 8, 'express.gibbs_chains': 2,
                 **overrides})
    return flat


@pytest.mark.parametrize('key, value, named', [
    ('express.mode', 'express', 'express.mode'),
    ('express.num_uavs', 0, 'express.num_uavs'),
    ('express.speed_m_s', -1.0, 'express.speed_m_s'),
    ('express.altitude_m', 2000.0, 'express.radio_range_m'),
    ('express.partition', 'blocks', 'express.partition'),
    ('aggregation.strategy', 'fedavg', 'aggregation.strategy'),
    ('aggregation.strategy', SPEC + 'RecordingFedAvg', 'aggregation.strategy'),   # a plug-in
    ('learning.client_algorithm', 'scaffold', 'learning.client_algorithm'),
    ('express.num_uavs', 9, 'num_drones'),
    ('learning.lr_decay', 0.99, 'learning.lr_decay'),
    ('express.station_east_m', float('nan'), 'express.station_east_m'),
    ('express.station_north_m', float('nan'), 'express.station_north_m'),
    ('express.placement_seed', -1, 'express.placement_seed'),
    ('seed', -1, 'seed'),
])
def test_config_errors_name_the_key(key, value, named):
    with pytest.raises(ConfigError, match=named.replace('.', r'\.')):
        build_config(ExperimentConfig, _flat(**{key: value}))


# ----------------------------------------------------------------------------- engine

def _rows(out: Path) -> list[dict]:
    with open(out / 'rounds.csv', newline='') as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize('mode', ['sync', 'async'])
def test_two_update_engine_run(tmp_path, mode):
    config = build_config(ExperimentConfig, _flat(**{
        'express.mode': mode, 'aggregation.strategy': f'fedex_{mode}', 'num_rounds': 3}))
    summary = run_experiment(config, tmp_path, echo=lambda _: None)
    rows = _rows(tmp_path)
    express = json.loads((tmp_path / 'express.json').read_text())
    assert summary['status'] == 'finished' and len(rows) == 3
    times = [float(r['sim_time_s']) for r in rows]
    assert times == pytest.approx([u['time_s'] for u in express['updates']])
    assert int(rows[0]['participants']) == 0 and int(rows[0]['uplink_bytes']) == 0
    slot = express['step_time_s']
    if mode == 'sync':   # the longest tour in whole slots (FedEx Sec. IV-A)
        round_s = np.ceil(express['max_round_trip_s'] / slot) * slot
        assert times == pytest.approx([round_s * r for r in (1, 2, 3)])
        assert int(rows[1]['participants']) == 8   # every client's CLU in round 2
    else:
        assert times == sorted(times) and times[0] == pytest.approx(
            np.ceil(min(express['round_trip_s']) / slot) * slot)
    assert express['period_s'] == {k: n * slot for k, n in express['period_slots'].items()}
    assert all(0 < float(r['energy_max_j']) <= 15e3 for r in rows)


def test_resume_equals_uninterrupted(tmp_path):
    flat = _flat(**{'express.mode': 'async', 'aggregation.strategy': 'fedex_async'})
    whole = run_experiment(build_config(ExperimentConfig, {**flat, 'num_rounds': 6}),
                           tmp_path / 'whole', echo=lambda _: None)
    run_experiment(build_config(ExperimentConfig, {**flat, 'num_rounds': 3}),
                   tmp_path / 'part', echo=lambda _: None)
    resumed = run_experiment(build_config(ExperimentConfig, {**flat, 'num_rounds': 6}),
                             tmp_path / 'part', resume=True, echo=lambda _: None)
    assert resumed['rounds_completed'] == 6
    for key in ('accuracy', 'loss', 'sim_time_s', 'train_loss_mean'):
        assert [float(r[key]) for r in _rows(tmp_path / 'part')] == pytest.approx(
            [float(r[key]) for r in _rows(tmp_path / 'whole')], nan_ok=True)
    assert whole['final_accuracy'] == pytest.approx(resumed['final_accuracy'])
    logs = [json.loads((tmp_path / d / 'express.json').read_text())['updates']
            for d in ('whole', 'part')]
    assert logs[0] == logs[1]



@pytest.mark.parametrize('drop', ['step_time_s', 'period_slots', None])
def test_resume_on_another_slot_clock_is_refused(drop):
    # Arrange: tours of 500 s checkpointed on 1000 s slots; resumed on 60 s slots (or from a
    # checkpoint without the slot clock, as made before the slotted clock)
    plan = _plan([500.0, 500.0], [[0], [1]])
    weights = {'w': np.array([1.0])}
    old = ExpressRuntime(_express_config(mode='async', step_time_s=1000.0), plan, weights)
    _run(old, FedExAsync(2), 5)
    arrays: dict = {}
    state = old.state_dict(arrays)
    if drop is not None:
        del state[drop]
    new = ExpressRuntime(_express_config(mode='async',
                                         step_time_s=1000.0 if drop else 60.0), plan, weights)
    # Act + Assert: refused before anything is loaded, naming the key
    with pytest.raises(ValueError, match='express.step_time_s'):
        new.load_state_dict(state, arrays)
    assert new.tours_done == dict.fromkeys(new.uavs, 0)

def test_express_log_is_written_at_checkpoints_and_the_end_not_per_update(tmp_path):
    # Arrange: 3 updates, a checkpoint every 2 (and at the last); the echo after each update
    # records what express.json holds then
    config = build_config(ExperimentConfig, _flat(**{
        'num_rounds': 3, 'engine.checkpoint_every': 2}))
    path = tmp_path / 'express.json'
    seen = []

    def echo(_):
        seen.append(len(json.loads(path.read_text())['updates']) if path.exists() else None)

    # Act
    run_experiment(config, tmp_path, echo=echo)
    # Assert: nothing after update 1; updates 1-2 at the checkpoint; 1-3 at the end. The
    # checkpoint does not carry the (growing) log a second time.
    assert seen == [None, 2, 3]
    assert [u['update'] for u in json.loads(path.read_text())['updates']] == [1, 2, 3]
    with np.load(tmp_path / 'checkpoint.npz') as archive:
        meta = json.loads(bytes(archive['meta']).decode())
    assert 'express_log' not in meta and meta['express']['update_index'] == 3


def test_clients_train_with_one_trainer_and_alike_with_or_without_engine_vectorized(
        tmp_path, monkeypatch):
    # Arrange: count the vectorised trainers built
    from fl_uav.engine.experiment import ExperimentEngine
    from fl_uav.learning import vectorized
    built = []

    class Counted(vectorized.VectorizedTrainer):
        def __init__(self, *args, **kwargs):
            built.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(vectorized, 'VectorizedTrainer', Counted)
    engines = {flag: ExperimentEngine(build_config(ExperimentConfig, _flat(**{
        'engine.vectorized': flag})), tmp_path / str(flag)) for flag in (False, True)}
    rows = {flag: [engine.run_round()] for flag, engine in engines.items()}
    built.clear()
    # Act
    for flag, engine in engines.items():
        rows[flag] += [engine.run_round() for _ in range(2)]
    # Assert: no trainer built after the first update; the same numbers either way
    assert built == []
    for key in ('accuracy', 'loss', 'train_loss_mean', 'sim_time_s'):
        assert [r[key] for r in rows[False]] == [r[key] for r in rows[True]]


@pytest.mark.parametrize('mode', ['sync', 'async'])
def test_fmnist_configs_select_fedex_in_the_papers_setting(mode):
    flat = read_params_file(REPO / 'config' / 'experiments' / f'fedex_{mode}_fmnist.yaml')
    config = build_config(ExperimentConfig, flat)
    e = config.express
    assert e.enabled and e.mode == mode and e.objective == mode
    assert config.aggregation.strategy == f'fedex_{mode}'
    assert (config.num_drones, e.num_uavs, e.energy_budget_j) == (40, 4, 15e3)
    assert (e.area_east_m, e.area_north_m, e.samples_per_client) == (2000, 2000, 60)


def test_engine_assigns_data_by_client_position(tmp_path):
    from fl_uav.engine.experiment import ExperimentEngine
    config = build_config(ExperimentConfig, _flat(**{
        'num_drones': 10, 'express.partition': 'location', 'express.samples_per_client': 30,
        'express.location_main_prob': 0.8}))
    engine = ExperimentEngine(config, tmp_path)
    blocks = engine.express.blocks
    labels = engine.data.train_y
    assert [len(p) for p in engine.parts] == [30] * 10
    share = [np.mean(labels[p] == b % 10) for p, b in zip(engine.parts, blocks)]
    assert 0.65 < np.mean(share) < 0.95
    rows = [engine.run_round() for _ in range(2)]
    assert rows[1]['participants'] == 10
