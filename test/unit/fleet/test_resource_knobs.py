"""Resource knobs in the fleet (issue 5 item 3): the station plans them, the drones apply them."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from fl_uav.compression.codec import FrameKind, decode_frame, encode_frame, encoded_size
from fl_uav.compression.codec_v2 import (
    decode_v2,
    lgc_frame_bytes,
    metadata_section_bytes,
    range_frame_bytes,
)
from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import PoseSample, RoundTask
from fl_uav.fleet.resource_knobs import (
    KNOBS_APPLIED_KEY,
    KNOBS_REJECTED_KEY,
    POSITION_KEY,
    TOPUP_GENERATED_KEY,
)
from fl_uav.fleet.world_setup import map_labeler
from fl_uav.learning.topup import topup_counts
from fl_uav.netmodel.config import SystemConfig
from fl_uav.planning.round_resources import PlannerInputs, build_planner
from fl_uav.world.landcover import CLASS_NAMES

BASE = {'num_drones': 2, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'rounds.num_rounds': 3, 'rounds.first_round_extra_s': 0.0}
FEDDPQ = {**BASE, 'learning.client_algorithm': 'feddpq', 'learning.optimizer': 'sgd',
          'learning.momentum': 0.0, 'learning.lr': 0.05, 'learning.kappa_steps': 2,
          'compression.method': 'range', 'aggregation.strategy': 'feddpq',
          'aggregation.num_selected': 6, 'resources.planner': 'feddpq'}
LGC = {**BASE, 'compression.method': 'lgc', 'compression.lgc_channel_entries': [100, 300, 600],
       'resources.lgc_channel_max_entries': 800, 'resources.lgc_max_local_steps': 4,
       'resources.lgc_ddpg_train_steps': 30}
PLANNERS = {'feddpq': FEDDPQ, 'lgc_fixed': {**LGC, 'resources.planner': 'lgc_fixed'},
            'lgc_heuristic': {**LGC, 'resources.planner': 'lgc_heuristic'},
            'lgc_ddpg': {**LGC, 'resources.planner': 'lgc_ddpg'}}
# What each drone reports with its round-1 update: class histogram and upload position (ENU m).
REPORTS = {0: ([30, 4, 0, 9, 0, 2, 1], [600.0, 640.0, 30.0]),
           1: ([2, 0, 25, 0, 11, 0, 7], [900.0, 300.0, 30.0])}


def _eval_set(n: int = 40):
    rng = np.random.default_rng(0)
    return rng.normal(0, 1, (n, 3, 32, 32)).astype(np.float32), rng.integers(0, 7, n)


def _agent(config: FleetConfig, drone: int = 1) -> DroneAgent:
    return DroneAgent(config, drone, map_labeler(config.world, config.camera))


def _fill(agent: DroneAgent, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for k in range(count):
        agent.on_pose(PoseSample(200.0 + 10 * k, 400.0, 30.0, 0.0, stamp_s=float(k)))
        agent.on_camera_frame(rng.integers(0, 255, (64, 64, 3), np.uint8), stamp_s=float(k))


def _report_frame(station: GroundStation, drone: int, round_index: int) -> bytes:
    counts, position = REPORTS[drone]
    delta = {n: np.zeros_like(w) for n, w in station.weights.items()}
    return encode_frame(FrameKind.UPDATE, round_index, drone, station._fingerprint, delta,
                        {'num_samples': sum(counts), 'class_counts': counts,
                         POSITION_KEY: position})


def _sent_knobs(frame: bytes) -> dict[int, dict]:
    return {int(d): k for d, k in decode_frame(frame).metadata['knobs'].items()}


def _task(agent: DroneAgent, config: FleetConfig, knobs: dict, round_index: int = 1
          ) -> RoundTask:
    station = GroundStation(config, *_eval_set())
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    return RoundTask(round_index, task.weights, task.plan, knobs, task.deadline_s)


# --- config ----------------------------------------------------------------------------------

def test_fleet_resources_section_names_the_key_and_the_choices():
    # Act / Assert
    with pytest.raises(ConfigError, match=r"resources\.planner 'ddpg' unknown; choices: none, "
                                          r"feddpq, lgc_ddpg, lgc_fixed, lgc_heuristic"):
        build_config(FleetConfig, {'resources.planner': 'ddpg'})
    with pytest.raises(ConfigError, match=r"unknown config key 'resources\.plannr'"):
        build_config(FleetConfig, {'resources.plannr': 'feddpq'})


@pytest.mark.parametrize('overrides, key', [
    ({**FEDDPQ, 'learning.client_algorithm': 'sgd'}, "learning.client_algorithm = 'feddpq'"),
    ({**FEDDPQ, 'compression.method': 'qsgd'}, "compression.method = 'range'"),
    ({**FEDDPQ, 'aggregation.num_selected': 0}, 'aggregation.num_selected >= 1'),
    ({**PLANNERS['lgc_fixed'], 'compression.lgc_channel_entries': [100, 300]},
     'compression.lgc_channel_entries has 2 channels'),
    ({**PLANNERS['lgc_ddpg'], 'resources.lgc_steps_scale': 'online'},
     "lgc_steps_scale 'online' is the engine's"),
    ({**PLANNERS['lgc_fixed'], 'resources.lgc_steps_scale': 'auto'},
     "lgc_steps_scale 'auto' is the engine's"),
    ({**PLANNERS['lgc_fixed'], 'resources.lgc_plateau_window': 5},
     "lgc_plateau_window is the engine's"),
    ({**PLANNERS['lgc_ddpg'], 'resources.lgc_stall_window': 5},
     "lgc_stall_window is the engine's"),
])
def test_a_planner_without_the_procedure_it_drives_fails_at_start(overrides, key):
    # Act / Assert
    with pytest.raises(ConfigError, match=key):
        build_config(FleetConfig, overrides)


# --- the station plans ---------------------------------------------------------------------

@pytest.mark.parametrize('planner', sorted(PLANNERS))
def test_station_sends_the_knobs_the_planner_computes_from_the_drones_reports(planner):
    # Arrange
    config = build_config(FleetConfig, PLANNERS[planner])
    station = GroundStation(config, *_eval_set())
    first = station.open_round(0.0)
    for drone in (0, 1):
        assert station.receive_update(_report_frame(station, drone, 1)).accepted
    station.close_round(1.0)
    station_enu_m = np.array([*config.autopilot.home_enu_m(0), 0.0])
    expected = build_planner(PlannerInputs(
        drone_ids=(0, 1), class_counts=np.array([REPORTS[d][0] for d in (0, 1)], np.float64),
        distance_m=np.array([np.linalg.norm(np.array(REPORTS[d][1]) - station_enu_m)
                             for d in (0, 1)]),
        num_params=sum(w.size for w in station.weights.values()),
        batch_size=config.learning.batch_size, kappa_steps=config.learning.kappa_steps,
        num_selected=config.aggregation.num_selected, seed=config.world.seed,
        resources=config.resources, system=SystemConfig(),
        download_s=8.0 * len(first.frame) / SystemConfig().downlink_rate_bit_s,
        generator_makes_absent_classes=False))
    # Act
    second = station.open_round(2.0)
    # Assert: nothing planned in round 1; from round 2 the planner's knobs, merged per drone
    sent_first, sent_second = _sent_knobs(first.frame), _sent_knobs(second.frame)
    want = expected.knobs(2, [0, 1])
    assert want[0] and want[1]
    for drone in (0, 1):
        assert not set(want[drone]) & set(sent_first[drone])
        assert {k: sent_second[drone][k] for k in want[drone]} == want[drone]
        assert 'plan' in sent_second[drone]
    report = station.resources.report()
    assert report['status'] == 'planned' and report['planned_after_round'] == 1
    assert report['rounds'] == {'2': {str(d): want[d] for d in (0, 1)}}
    assert report['inputs']['class_counts'] == [REPORTS[0][0], REPORTS[1][0]]


def test_station_waits_for_every_drone_and_records_the_knobs_it_sent():
    # Arrange: drone 1 reports nothing in round 1
    station = GroundStation(build_config(FleetConfig, FEDDPQ), *_eval_set())
    station.open_round(0.0)
    station.receive_update(_report_frame(station, 0, 1))
    first = station.close_round(1.0)
    # Act
    waiting = station.open_round(2.0)
    station.receive_update(_report_frame(station, 1, 2))
    second = station.close_round(3.0)
    planned = station.open_round(4.0)
    # Assert
    assert first.resource_knobs == {} and second.resource_knobs == {}
    assert 'range_bits' not in _sent_knobs(waiting.frame)[1]
    assert station.resources.planned_after_round == 2
    assert all('range_bits' in k for k in _sent_knobs(planned.frame).values())
    assert station.resources.rounds[3] == {
        d: {k: v for k, v in sent.items() if k in station.resources.rounds[3][d]}
        for d, sent in _sent_knobs(planned.frame).items()}


def test_closing_a_round_only_takes_the_inputs_and_the_planner_is_built_apart():
    # Arrange
    station = GroundStation(build_config(FleetConfig, PLANNERS['lgc_ddpg']), *_eval_set())
    station.open_round(0.0)
    for drone in (0, 1):
        station.receive_update(_report_frame(station, drone, 1))
    # Act: the close takes the inputs; the build is a separate step (the node runs it
    # outside its lock)
    station.close_round(1.0)
    pending = (station.resources.pending, station.resources.planner)
    station.plan_pending()
    # Assert
    assert pending == (True, None)
    assert not station.resources.pending and station.resources.planner is not None
    assert station.resources.report()['status'] == 'planned'
    assert all('local_steps' in k for k in _sent_knobs(station.open_round(2.0).frame).values())


def _station_whose_planning_raises(monkeypatch, name: str, exc: Exception) -> GroundStation:
    """A FedDPQ station whose ``station_resources.<name>`` raises ``exc``, with round 1 open
    and both drones' reports received."""
    import fl_uav.fleet.station_resources as station_resources

    def broken(*args, **kwargs):
        raise exc

    monkeypatch.setattr(station_resources, name, broken)
    station = GroundStation(build_config(FleetConfig, FEDDPQ), *_eval_set())
    station.open_round(0.0)
    for drone in (0, 1):
        station.receive_update(_report_frame(station, drone, 1))
    return station


def test_a_planner_that_fails_to_build_leaves_the_rounds_without_knobs(monkeypatch, caplog):
    # Arrange
    station = _station_whose_planning_raises(monkeypatch, 'build_planner',
                                             RuntimeError('solver exploded'))
    station.close_round(1.0)
    # Act
    with caplog.at_level(logging.ERROR):
        second = station.open_round(2.0)
    # Assert
    report = station.resources.report()
    assert report['status'] == 'failed' and 'solver exploded' in report['error']
    assert all('range_bits' not in k for k in _sent_knobs(second.frame).values())
    assert 'solver exploded' in caplog.text


def test_a_failure_taking_the_planner_inputs_still_closes_the_round_once(monkeypatch):
    # Arrange: taking the inputs raises (any unforeseen error after the aggregation)
    station = _station_whose_planning_raises(monkeypatch, 'PlannerInputs',
                                             OverflowError('inputs exploded'))
    # Act
    record = station.close_round(1.0)
    second = station.open_round(2.0)
    # Assert: one record, the next round opens, the failure is reported, no knobs are sent
    assert [r.round_index for r in station.records] == [record.round_index]
    assert second.round_index == record.round_index + 1
    report = station.resources.report()
    assert report['status'] == 'failed' and 'inputs exploded' in report['error']
    assert all('range_bits' not in k for k in _sent_knobs(second.frame).values())


def test_the_planner_takes_the_fleets_planning_model_constants():
    # Arrange: an operator's radio and companion computer
    config = build_config(FleetConfig, {**FEDDPQ, 'planning_model.cpu_freq_hz': 8.0e8,
                                        'planning_model.downlink_rate_bit_s': 2.0e6,
                                        'planning_model.bandwidth_hz': 2.0e5})
    station = GroundStation(config, *_eval_set())
    station.open_round(0.0)
    for drone in (0, 1):
        station.receive_update(_report_frame(station, drone, 1))
    # Act
    station.close_round(1.0)
    # Assert: the model download (not the whole frame) at the operator's rate
    system = station.resources.inputs.system
    assert (system.cpu_freq_hz, system.bandwidth_hz) == (8.0e8, 2.0e5)
    model_bits = 8.0 * encoded_size(station.weights, {'round': 1})
    assert station.resources.inputs.download_s == pytest.approx(model_bits / 2.0e6)


def test_a_bad_planning_model_constant_fails_naming_the_key():
    with pytest.raises(ConfigError, match='planning_model.cpu_freq_hz must be > 0'):
        build_config(FleetConfig, {**FEDDPQ, 'planning_model.cpu_freq_hz': 0.0})


def test_malformed_planning_reports_are_rejected_as_metadata():
    # Arrange
    station = GroundStation(build_config(FleetConfig, FEDDPQ), *_eval_set())
    station.open_round(0.0)
    delta = {n: np.zeros_like(w) for n, w in station.weights.items()}
    bad = [{'num_samples': 3, 'class_counts': [1, 2]},
           {'num_samples': 3, 'class_counts': [1, -2, 0, 0, 0, 0, 0]},
           {'num_samples': 3, POSITION_KEY: [1.0, 'north', 3.0]},
           {'num_samples': 3, KNOBS_REJECTED_KEY: ['range_bits']},
           # a JSON int beyond a float: the planner's inputs (float64) could not take it
           {'num_samples': 3, 'class_counts': [10 ** 400, 0, 0, 0, 0, 0, 0]}]
    # Act
    verdicts = [station.receive_update(encode_frame(FrameKind.UPDATE, 1, 0,
                                                    station._fingerprint, delta, meta))
                for meta in bad]
    # Assert
    assert [v.reason for v in verdicts] == ['metadata'] * 5


# --- the drone applies --------------------------------------------------------------------

def test_range_bits_knob_sets_the_upload_quantizer():
    # Arrange
    config = build_config(FleetConfig, FEDDPQ)
    agent = _agent(config)
    _fill(agent, 10, seed=3)
    dim = sum(int(np.prod(s)) for s in agent.shapes.values())
    sizes = {}
    # Act
    for bits in (4, 9):
        report = agent.train_round(_task(agent, config, {'range_bits': bits}, round_index=bits))
        frame = decode_v2(report.frame)
        sizes[bits] = len(report.frame) - metadata_section_bytes(frame.metadata)
    # Assert
        assert frame.update.payload.bits == bits and frame.metadata[KNOBS_APPLIED_KEY] == {
            'range_bits': bits}
    assert sizes == {b: range_frame_bytes(dim, b) for b in (4, 9)}
    assert sizes[9] > sizes[4]


@pytest.mark.parametrize('steps', [1, 3])
def test_local_steps_knob_sets_the_training_steps(steps):
    # Arrange
    config = build_config(FleetConfig, BASE)
    agent = _agent(config)
    _fill(agent, 12, seed=4)
    # Act
    report = agent.train_round(_task(agent, config, {'local_steps': steps}))
    # Assert
    assert report.steps == steps and decode_frame(report.frame).metadata['steps'] == steps


def test_prune_fraction_and_topup_knobs_set_the_pruning_and_the_mixed_set():
    # Arrange
    config = build_config(FleetConfig, FEDDPQ)
    agent = _agent(config)
    _fill(agent, 12, seed=5)
    counts = agent.class_counts()
    wanted = np.where(counts > 0, topup_counts(counts, 0.9), 0)   # augmentation: none absent
    # Act
    report = agent.train_round(_task(agent, config, {'prune_fraction': 0.25,
                                                     'topup_factor': 0.9}))
    meta = decode_v2(report.frame).metadata
    # Assert
    assert meta['prune_fraction'] == 0.25
    assert meta[TOPUP_GENERATED_KEY] == int(wanted.sum()) > 0
    assert report.num_samples == 12 + int(wanted.sum())


def test_lgc_entries_knob_sets_the_layer_sizes_and_tx_power_is_recorded():
    # Arrange
    config = build_config(FleetConfig, LGC)
    agent = _agent(config)
    _fill(agent, 10, seed=6)
    # Act
    planned = agent.train_round(_task(agent, config, {'lgc_channel_entries': [50, 0, 400],
                                                      'tx_power_w': 0.02}))
    default = agent.train_round(_task(agent, config, {}, round_index=2))
    # Assert: channel 1 sends an empty layer (the station counts layers to know the update is
    # complete); the next round is the config's again
    metas = [decode_v2(f).metadata for f in planned.frames]
    assert [len(f) for f in planned.frames] == [
        lgc_frame_bytes(k) + metadata_section_bytes(m) for k, m in zip((50, 0, 400), metas)]
    assert [decode_v2(f).update.layer.indices.size for f in default.frames] == [100, 300, 600]
    assert metas[0][KNOBS_APPLIED_KEY]['tx_power_w'] == 0.02
    assert agent.recorded_knobs == {'tx_power_w': 0.02}


def test_malformed_or_unsupported_knobs_are_rejected_counted_and_logged(caplog):
    # Arrange
    config = build_config(FleetConfig, FEDDPQ)
    agent = _agent(config)
    _fill(agent, 10, seed=7)
    knobs = {'range_bits': 'eight', 'prune_fraction': 1.5, 'topup_factor': -1.0,
             'tx_power_w': float('nan'), 'local_steps': 3,
             'lgc_channel_entries': [10, 20, 30]}
    station = GroundStation(config, *_eval_set())
    opening = station.open_round(0.0)
    task = agent.accept_global_frame(opening.frame)
    # Act
    with caplog.at_level(logging.WARNING, logger='fl_uav.fleet.drone_agent'):
        report = agent.train_round(RoundTask(1, task.weights, task.plan, knobs))
        agent.train_round(RoundTask(2, task.weights, task.plan, {'range_bits': 99}))
    verdict = station.receive_update(report.frame)
    record = station.close_round(1.0)
    # Assert: trained with the config's values, every bad knob counted and logged
    meta = decode_v2(report.frame).metadata
    assert report.steps == config.learning.kappa_steps and meta['prune_fraction'] == 0.2
    assert decode_v2(report.frame).update.payload.bits == config.compression.range_bits
    assert dict(agent.knobs_rejected) == {
        'range_bits/malformed': 2, 'prune_fraction/malformed': 1, 'topup_factor/malformed': 1,
        'tx_power_w/malformed': 1, 'local_steps/unsupported': 1,
        'lgc_channel_entries/unsupported': 1}
    assert meta[KNOBS_REJECTED_KEY] == {k: v[0] for k, v in report.knobs_rejected.items()}
    assert KNOBS_APPLIED_KEY not in meta and TOPUP_GENERATED_KEY not in meta
    assert sum('rejected' in r.getMessage() for r in caplog.records) == 7
    assert verdict.accepted and record.knobs_rejected == {1: meta[KNOBS_REJECTED_KEY]}


def test_feddpq_knobs_travel_from_the_station_to_the_drones_uploads():
    # Arrange: a station and two drones in process, three rounds
    config = build_config(FleetConfig, FEDDPQ)
    station = GroundStation(config, *_eval_set())
    agents = [_agent(config, d) for d in (0, 1)]
    for d, agent in enumerate(agents):
        _fill(agent, 10, seed=10 + d)
    uploads: dict[int, dict[int, bytes]] = {}
    # Act
    for r in (1, 2, 3):
        opening = station.open_round(float(r))
        for d, agent in enumerate(agents):
            report = agent.train_round(agent.accept_global_frame(opening.frame))
            uploads.setdefault(r, {})[d] = report.frame
            assert station.receive_update(report.frame).accepted
        station.close_round(float(r) + 0.5)
    # Assert: round 1 at the config's bits; rounds 2-3 at the plan's δ_u, same plan
    plan = station.resources.planner.plan.knobs_by_drone()
    for d in (0, 1):
        assert decode_v2(uploads[1][d]).update.payload.bits == config.compression.range_bits
        for r in (2, 3):
            meta = decode_v2(uploads[r][d]).metadata
            assert decode_v2(uploads[r][d]).update.payload.bits == plan[d]['range_bits']
            if meta['steps']:      # drawn this round (FedDPQ eq. (7)): trained with ρ_u
                assert meta['prune_fraction'] == pytest.approx(plan[d]['prune_fraction'])
                assert meta[TOPUP_GENERATED_KEY] >= 0
            assert meta[KNOBS_APPLIED_KEY]['tx_power_w'] == plan[d]['tx_power_w']
    assert station.records[1].resource_knobs == station.records[2].resource_knobs
    assert station.resources.inputs.class_counts.shape == (2, len(CLASS_NAMES))


def test_an_integer_too_large_for_a_float_is_a_malformed_knob_not_a_crash():
    # Arrange: JSON carries 10**400 as a plain int; math.isfinite on it raises OverflowError
    config = build_config(FleetConfig, FEDDPQ)
    agent = _agent(config)
    _fill(agent, 10, seed=8)
    knobs = {'prune_fraction': 10 ** 400, 'topup_factor': -(10 ** 400), 'range_bits': 6}
    # Act
    report = agent.train_round(_task(agent, config, knobs))
    # Assert: both rejected as malformed, the well-formed knob applied, the upload sent
    assert set(report.knobs_rejected) == {'prune_fraction', 'topup_factor'}
    assert {kind for kind, _ in report.knobs_rejected.values()} == {'malformed'}
    assert decode_v2(report.frame).update.payload.bits == 6


@pytest.mark.parametrize(('knob', 'value'), [
    ('draws', 'x'), ('draws', None), ('draws', []), ('draws', -1), ('draws', 1.5),
    ('draws', True), ('proximal_mu', 'x'), ('proximal_mu', 'nan'), ('proximal_mu', 'inf'),
    ('proximal_mu', -1.0), ('proximal_mu', 1e308), ('proximal_mu', None), ('proximal_mu', True),
])
def test_a_malformed_strategy_knob_is_rejected_and_the_round_still_trains(knob, value):
    # Arrange: FedDPQ's draws and FedProx's proximal_mu come with the round like the
    # resource knobs; a bad one used to end the round in a ValueError, TypeError or NaN loss
    config = build_config(FleetConfig, BASE)
    agent = _agent(config)
    _fill(agent, 10, seed=9)
    # Act
    report = agent.train_round(_task(agent, config, {knob: value}))
    # Assert: counted and reported, trained with the drone's own value, the upload sent
    assert dict(agent.knobs_rejected) == {f'{knob}/malformed': 1}
    assert decode_frame(report.frame).metadata[KNOBS_REJECTED_KEY] == {knob: 'malformed'}
    assert report.num_samples == 10 and np.isfinite(report.train_loss)


def test_well_formed_strategy_knobs_are_taken():
    # Arrange
    config = build_config(FleetConfig, BASE)
    agent = _agent(config)
    _fill(agent, 10, seed=9)
    # Act: not drawn (no training), then a proximal term
    skipped = agent.train_round(_task(agent, config, {'draws': 0}))
    proximal = agent.train_round(_task(agent, config, {'draws': 2, 'proximal_mu': 0.5}, 2))
    # Assert
    assert skipped.num_samples == 0 and proximal.num_samples == 10
    assert not agent.knobs_rejected


def test_a_pose_with_a_nan_altitude_leaves_the_position_out_and_the_upload_goes():
    # Arrange: an autopilot altitude can be NaN; the codec refuses NaN in metadata
    config = build_config(FleetConfig, LGC)
    agent = _agent(config)
    _fill(agent, 10, seed=9)
    agent.on_pose(PoseSample(250.0, 400.0, float('nan'), 0.0, stamp_s=20.0))
    # Act: two rounds (an LGC encode that failed would block every later round)
    reports = [agent.train_round(_task(agent, config, {}, round_index=r)) for r in (1, 2)]
    # Assert
    for report in reports:
        assert report.frames and POSITION_KEY not in decode_v2(report.frames[0]).metadata
