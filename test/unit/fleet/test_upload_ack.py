"""The station tells each drone whether its previous upload was used (UPLOAD_ACK_KNOB), and the
drone rolls back what was not: LGC's residual and SCAFFOLD's c_k, as the engine does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fl_uav.compression.codec import GROUND_STATION_ID, FrameKind, decode_frame, encode_frame
from fl_uav.compression.codec_v2 import decode_v2
from fl_uav.compression.lgc import decode as lgc_sum
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import UPLOAD_ACK_KNOB, RoundTask
from test.unit.fleet._fleet_pair import agent_and_station, eval_set

_BASE = {'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
         'rounds.num_rounds': 3, 'rounds.deadline_s': 10.0,
         'rounds.first_round_extra_s': 0.0}


def _pair(overrides: dict) -> tuple[DroneAgent, GroundStation]:
    return agent_and_station({**_BASE, **overrides})


def _lgc_pair() -> tuple[DroneAgent, GroundStation]:
    return _pair({'compression.method': 'lgc',
                  'compression.lgc_channel_entries': [100, 300, 600]})


def _scaffold_pair() -> tuple[DroneAgent, GroundStation]:
    return _pair({'learning.optimizer': 'sgd', 'learning.client_algorithm': 'scaffold',
                  'aggregation.strategy': 'scaffold'})


def _sent(frames) -> np.ndarray:
    parts = [decode_v2(f).update for f in frames]
    return lgc_sum([p.layer for p in parts], parts[0].dim)


def _ack(opening) -> dict:
    return decode_frame(opening.frame).metadata['knobs']['0'][UPLOAD_ACK_KNOB]


def test_a_late_lgc_upload_is_reported_unused_and_its_layers_return_to_the_residual():
    # Prepare: round 1 closes at its deadline before the drone's layers arrive
    agent, station = _lgc_pair()
    first = station.open_round(0.0)
    report = agent.train_round(agent.accept_global_frame(first.frame))
    residual_after_send = agent._compressor.encoder.residual
    station.close_round(first.deadline_s)
    second = station.open_round(first.deadline_s)
    late = [station.receive_update(f) for f in report.frames]
    task = agent.accept_global_frame(second.frame)
    # Execute
    agent.settle_previous_upload(task)
    # Assert: as if never sent, e = u_1 = Σ sent + e_after_send (nothing lost)
    assert [v.reason for v in late] == ['wrong_round'] * 3
    assert _ack(second) == {'round': 1, 'used': False}
    np.testing.assert_allclose(agent._compressor.encoder.residual,
                               _sent(report.frames) + residual_after_send, atol=1e-7)
    assert np.count_nonzero(_sent(report.frames)) == 1000
    assert agent.uploads_rolled_back == 1


def test_an_accepted_lgc_upload_does_not_roll_back():
    # Prepare
    agent, station = _lgc_pair()
    first = station.open_round(0.0)
    report = agent.train_round(agent.accept_global_frame(first.frame))
    verdicts = [station.receive_update(f) for f in report.frames]
    residual_after_send = agent._compressor.encoder.residual
    station.close_round(1.0)
    second = station.open_round(1.0)
    # Execute
    agent.settle_previous_upload(agent.accept_global_frame(second.frame))
    # Assert
    assert all(v.accepted for v in verdicts)
    assert _ack(second) == {'round': 1, 'used': True, 'layers': [0, 1, 2]}
    np.testing.assert_array_equal(agent._compressor.encoder.residual, residual_after_send)
    assert agent.uploads_rolled_back == 0 and agent.malformed_acks == 0


def test_only_the_lgc_layers_the_station_summed_stay_acknowledged():
    # Prepare: layer 1 arrives after the deadline, layers 0 and 2 in time
    agent, station = _lgc_pair()
    first = station.open_round(0.0)
    report = agent.train_round(agent.accept_global_frame(first.frame))
    in_time = [station.receive_update(report.frames[c]) for c in (0, 2)]
    residual_after_send = agent._compressor.encoder.residual
    station.close_round(first.deadline_s)
    second = station.open_round(first.deadline_s)
    # Execute
    agent.settle_previous_upload(agent.accept_global_frame(second.frame))
    # Assert: e = e_after_send + layer 1, so summed + e is still u_1
    assert all(v.accepted for v in in_time)
    assert _ack(second) == {'round': 1, 'used': True, 'layers': [0, 2]}
    np.testing.assert_allclose(agent._compressor.encoder.residual,
                               residual_after_send + _sent([report.frames[1]]), atol=1e-7)
    assert agent.uploads_rolled_back == 1


def test_a_late_scaffold_upload_restores_c_k_and_an_accepted_one_keeps_it():
    # Prepare: round 1 accepted, round 2 late
    agent, station = _scaffold_pair()
    first = station.open_round(0.0)
    station.receive_update(agent.train_round(agent.accept_global_frame(first.frame)).frame)
    station.close_round(1.0)
    second = station.open_round(1.0)
    task_2 = agent.accept_global_frame(second.frame)
    agent.settle_previous_upload(task_2)
    control_after_round_1 = {n: c.copy() for n, c in agent._client.control.items()}
    late = agent.train_round(task_2)
    station.close_round(second.deadline_s)
    third = station.open_round(second.deadline_s)
    verdict = station.receive_update(late.frame)
    changed_by_round_2 = any(np.any(agent._client.control[n] != c)
                             for n, c in control_after_round_1.items())
    # Execute
    agent.settle_previous_upload(agent.accept_global_frame(third.frame))
    # Assert: c_k is round 1's again, so c = mean c_k (N = 1: c = c_0)
    assert _ack(second)['used'] and verdict.reason == 'wrong_round'
    assert _ack(third) == {'round': 2, 'used': False}
    assert changed_by_round_2
    c = {n[len('scaffold_c/'):]: t for n, t in decode_frame(third.frame).tensors.items()
         if n.startswith('scaffold_c/')}
    for name, value in control_after_round_1.items():
        np.testing.assert_array_equal(agent._client.control[name], value)
        np.testing.assert_allclose(c[name], value, rtol=1e-5, atol=1e-7)
    assert agent.uploads_rolled_back == 1


@pytest.mark.parametrize('ack', ['unused', {'round': '1', 'used': False}, {'round': 1},
                                 {'round': 1, 'used': 0}, {'round': 1, 'used': True,
                                                           'layers': ['0']}, [1, False]])
def test_a_malformed_ack_is_counted_and_ignored(ack):
    # Prepare
    agent, station = _lgc_pair()
    first = station.open_round(0.0)
    agent.train_round(agent.accept_global_frame(first.frame))
    residual_after_send = agent._compressor.encoder.residual
    station.close_round(first.deadline_s)
    task = agent.accept_global_frame(station.open_round(first.deadline_s).frame)
    task = dataclasses.replace(task, knobs={**task.knobs, UPLOAD_ACK_KNOB: ack})
    # Execute
    agent.settle_previous_upload(task)
    agent.settle_previous_upload(task)        # settled once: the second call does nothing
    # Assert
    assert agent.malformed_acks == 1 and agent.uploads_rolled_back == 0
    np.testing.assert_array_equal(agent._compressor.encoder.residual, residual_after_send)


def test_a_global_frame_with_a_malformed_ack_is_still_a_round_task():
    # Prepare
    agent, station = _lgc_pair()
    first = station.open_round(0.0)
    agent.train_round(agent.accept_global_frame(first.frame))
    frame = encode_frame(FrameKind.GLOBAL_MODEL, 2, GROUND_STATION_ID, station._fingerprint,
                         station.weights, {'knobs': {'0': {UPLOAD_ACK_KNOB: {'used': 'no'}}}})
    # Execute
    task = agent.accept_global_frame(frame)
    report = agent.train_round(task)
    # Assert
    assert isinstance(task, RoundTask) and agent.rejected_frames == 0
    assert report.round_index == 2 and agent.malformed_acks == 1


def test_an_update_the_strategy_did_not_apply_is_acknowledged_unused():
    # Prepare: SCAFFOLD skips an update without samples (c_k must then be rolled back)
    agent, station = _scaffold_pair()
    first = station.open_round(0.0)
    report = agent.train_round(agent.accept_global_frame(first.frame))
    update = decode_frame(report.frame)
    empty = encode_frame(FrameKind.UPDATE, 1, 0, station._fingerprint, update.tensors,
                         {**update.metadata, 'num_samples': 0})
    # Execute
    verdict = station.receive_update(empty)
    record = station.close_round(1.0)
    second = station.open_round(1.0)
    # Assert: it arrived, but it was not applied, so the drone hears 'unused'
    assert verdict.accepted and record.participants == []
    assert _ack(second) == {'round': 1, 'used': False}


def test_a_new_run_starts_the_drones_learning_state_over():
    # Prepare: an LGC drone's residual after a round of run 1; the station restarts
    agent, station = _lgc_pair()
    first = station.open_round(0.0)
    agent.train_round(dataclasses.replace(agent.accept_global_frame(first.frame), run_epoch=1))
    residual_run_1 = agent._compressor.encoder.residual
    restarted = GroundStation(station.config, *eval_set())
    task = agent.accept_global_frame(restarted.open_round(0.0).frame)
    # Execute
    agent.start_run(2)
    fresh_encoder, fresh_pending = agent._compressor.encoder, agent._pending_upload
    agent.start_run(2)                       # the same run again: nothing more
    report = agent.train_round(dataclasses.replace(task, run_epoch=2))
    # Assert: run 2 starts without run 1's residual and without its pending upload
    assert np.count_nonzero(residual_run_1) > 0
    assert fresh_encoder is None and fresh_pending is None
    assert agent.runs_started == 1 and agent.uploads_rolled_back == 0
    assert restarted.run_id != station.run_id and task.run_id == restarted.run_id
    assert all(restarted.receive_update(f).accepted for f in report.frames)


def test_updates_carry_the_run_id_and_another_runs_update_is_refused():
    # Prepare
    agent, station = _lgc_pair()
    frames = agent.train_round(agent.accept_global_frame(station.open_round(0.0).frame)).frames
    restarted = GroundStation(station.config, *eval_set())
    restarted.open_round(0.0)
    # Execute
    verdicts = [restarted.receive_update(f) for f in frames]
    # Assert
    assert decode_v2(frames[0]).metadata['run_id'] == station.run_id
    assert [v.reason for v in verdicts] == ['wrong_run'] * 3
    assert station.run_id in verdicts[0].detail and restarted.run_id in verdicts[0].detail
    assert restarted.rejected_total == {'wrong_run': 3}


def test_a_round_of_a_run_left_is_not_trained_and_leaves_the_new_runs_state():
    # Prepare: run 2 trained a round; then run 1's round (still queued) comes to training
    agent, station = _lgc_pair()
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    agent.train_round(dataclasses.replace(task, run_epoch=1))
    agent.train_round(dataclasses.replace(task, run_epoch=2))
    compressor, residual = agent._compressor, agent._compressor.encoder.residual
    # Execute
    late = agent.train_round(dataclasses.replace(task, run_epoch=1))
    # Assert: nothing sent, nothing reset
    assert late.frames == () and agent._compressor is compressor
    np.testing.assert_array_equal(agent._compressor.encoder.residual, residual)
    assert agent.runs_started == 1
