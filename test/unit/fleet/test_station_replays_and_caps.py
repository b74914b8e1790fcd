"""Issue 26 item 6 at the ground station: a frame it already had, or an update of a round it
closed with that drone's update, is a ``replay`` (not a late update); a drone's sample count
weighs at most what it can hold; each update's norm and the outliers are in the round record
and the fl-uav sim summary."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from fl_uav.compression.codec import FrameKind, encode_frame
from fl_uav.configschema import build_config
from fl_uav.fleet import ground_station, station_checkpoint
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import REPLAY, ROUND_OPENED_KEY
from fl_uav.fleet_run.run import build_summary
from fl_uav.learning.weights import architecture_fingerprint
from fl_uav.planning.feddpq_opt import TOPUP_KNOB
from fl_uav.world.landcover import CLASS_NAMES
from test.unit.fleet._fleet_pair import eval_set

FLEET = {'num_drones': 3, 'learning.model': 'tiny_cnn', 'rounds.num_rounds': 4,
         'buffer.capacity_samples': 600}


def _station(**keys) -> GroundStation:
    return GroundStation(build_config(FleetConfig, {**FLEET, **keys}), *eval_set())


def _frame(station: GroundStation, sender: int, round_index: int, value: float,
           num_samples: int = 100) -> bytes:
    delta = {n: np.full_like(w, value) for n, w in station.weights.items()}
    return encode_frame(FrameKind.UPDATE, round_index, sender,
                        architecture_fingerprint(station.weights), delta,
                        {'num_samples': num_samples, 'run_id': station.run_id})


def test_a_frame_delivered_again_after_its_round_closed_is_a_replay_not_late():
    # Arrange: round 1 takes drone 0's update; drone 1's comes after the close
    station = _station()
    station.open_round(0.0)
    taken = _frame(station, 0, 1, 0.01)
    assert station.receive_update(taken).accepted
    station.close_round(1.0)
    station.open_round(1.0)
    late = _frame(station, 1, 1, 0.01)
    # Act
    verdicts = [station.receive_update(f) for f in (
        taken,                            # the same bytes again (a kept update re-delivered)
        _frame(station, 0, 1, 0.02),      # another update of a round closed with drone 0's
        late, late)]                      # late once, then the late frame again
    # Assert
    assert [v.reason for v in verdicts] == [REPLAY, REPLAY, 'wrong_round', REPLAY]
    assert 'a frame received before' in verdicts[0].detail
    assert 'already taken when the round closed' in verdicts[1].detail
    assert station.rejected_total == {REPLAY: 3, 'wrong_round': 1}
    record = station.close_round(2.0)
    assert record.rejected == {REPLAY: 3, 'wrong_round': 1}


def test_a_resumed_station_still_knows_the_updates_it_took(tmp_path):
    # Arrange: round 1 closed with drone 2's update, checkpointed, resumed in a new station
    station = _station()
    station.open_round(0.0)
    frame = _frame(station, 2, 1, 0.01)
    assert station.receive_update(frame).accepted
    station.close_round(1.0)
    station_checkpoint.save(station, tmp_path)
    resumed = _station()
    station_checkpoint.resume(resumed, tmp_path)
    resumed.open_round(1.0)
    # Act / Assert
    assert resumed.receive_update(frame).reason == REPLAY


def test_a_drone_claiming_2_53_samples_weighs_as_its_buffer_capacity():
    # Arrange: plain FedAvg; drone 0 sends +1 claiming 2^53 samples, drone 1 -1 with 600
    station = _station(**{'aggregation.clip_norm': 0.0})
    before = {n: w.copy() for n, w in station.weights.items()}
    station.open_round(0.0)
    # Act
    assert station.receive_update(_frame(station, 0, 1, 1.0, num_samples=2 ** 53)).accepted
    assert station.receive_update(_frame(station, 1, 1, -1.0, num_samples=600)).accepted
    record = station.close_round(1.0)
    # Assert: weighed 600 against 600, the model does not move (2^53 would have moved it +1)
    for name, w in station.weights.items():
        np.testing.assert_allclose(w, before[name], atol=1e-6)
    assert record.samples == {0: 600, 1: 600}
    assert record.samples_claimed == {0: 2 ** 53}
    assert record.aggregation['samples'] == 1200


def test_the_cap_grows_by_what_a_feddpq_top_up_adds():
    station = _station()
    assert station.sample_cap(0) == 600
    station.open_round(0.0)
    station._round.resource_knobs[1] = {TOPUP_KNOB: 0.25}   # what a planner sent drone 1
    # every class topped up to at most ceil(0.25 × 600) = 150 samples
    assert station.sample_cap(1) == 600 + len(CLASS_NAMES) * 150
    assert station.sample_cap(0) == 600


def test_the_round_record_has_every_updates_norm_and_the_outliers():
    # Arrange: the default rule (FedAvg clipped to 2 × the median norm); drone 2 sends 100 ×
    station = _station()
    station.open_round(0.0)
    for drone, value in enumerate((0.01, 0.012, 1.0)):
        assert station.receive_update(_frame(station, drone, 1, value)).accepted
    # Act
    record = station.close_round(1.0)
    # Assert: norms as sent (before clipping), in proportion to the values
    size = np.sqrt(sum(w.size for w in station.weights.values()))
    assert record.update_norms == pytest.approx({0: 0.01 * size, 1: 0.012 * size,
                                                 2: 1.0 * size}, rel=1e-5)
    assert record.outliers == [2]
    assert record.aggregation['clipped'] == 1
    row = record.to_dict()
    assert set(row['update_norms']) == {'0', '1', '2'} and row['outliers'] == [2]


def test_the_sim_summary_warns_of_outliers_capped_counts_and_replays(tmp_path):
    # Arrange: a station's report of 2 rounds; drone 1 an outlier in both, drone 0 capped in
    # round 2, 2 replayed frames
    config = build_config(FleetConfig, {'num_drones': 2})
    rows = [{'round_index': r, 'accuracy': 0.5, 'loss': 1.0, 'participants': [0, 1],
             'late_or_missing': [], 'bytes_up': {}, 'bytes_down_per_drone': 0, 'rejected': {},
             'opened_s': 0.0, 'closed_s': 60.0, 'samples_collected': {},
             'update_norms': {'0': 1.0, '1': 120.0}, 'outliers': [1],
             'samples_claimed': {'0': 2 ** 53} if r == 2 else {}} for r in (1, 2)]
    (tmp_path / 'ground_station.json').write_text(json.dumps(
        {'rounds': rows, 'rejected_total': {REPLAY: 2}}))
    # Act
    summary = build_summary(tmp_path, config, 'finished', 120.0, {}, 5)
    # Assert
    warnings = summary['warnings']
    assert "drone 1: update norm over 5 x the round's median in 2 of 2 rounds (1, 2" in (
        '\n'.join(warnings))
    assert any(w.startswith(f'drone 0: reported more samples than it can hold in 1 of 2 rounds '
                            f'(round 2: {2 ** 53})') for w in warnings)
    assert any(w.startswith('2 replayed update frame(s) refused (rejected as replay)')
               for w in warnings)
    assert not any('came after their round had closed' in w for w in warnings)
    assert summary['drones']['1']['outlier_rounds'] == 2
    assert summary['drones']['0']['samples_capped_rounds'] == 1
    assert summary['rounds'][0]['update_norms'] == {'0': 1.0, '1': 120.0}
    assert summary['rounds'][1]['samples_claimed'] == {'0': 2 ** 53}


def test_a_late_lgc_layer_is_late_and_a_summed_layer_again_a_replay():
    from test.unit.fleet.test_roles import _fill, _lgc_pair

    # Arrange: layers 2 and 0 arrive in round 1, which closes at its deadline without layer 1
    agent, station = _lgc_pair([])
    opening = station.open_round(0.0)
    _fill(agent, 10, seed=5)
    report = agent.train_round(agent.accept_global_frame(opening.frame))
    assert all(station.receive_update(report.frames[i]).accepted for i in (2, 0))
    station.close_round(100.0)
    station.open_round(100.0)
    # Act: layer 1 comes late; layer 0 is delivered again
    late = station.receive_update(report.frames[1])
    again = station.receive_update(report.frames[0])
    # Assert
    assert (late.reason, again.reason) == ('wrong_round', REPLAY)


def _frame_of_opening(station: GroundStation, sender: int, opened_ms: int) -> bytes:
    delta = {n: np.full_like(w, 0.01) for n, w in station.weights.items()}
    return encode_frame(FrameKind.UPDATE, 2, sender, architecture_fingerprint(station.weights),
                        delta, {'num_samples': 100, 'run_id': station.run_id,
                                ROUND_OPENED_KEY: opened_ms})


def test_an_update_for_the_opening_before_a_resume_is_a_replay_and_the_retrained_one_counts(
        tmp_path, monkeypatch):
    # Arrange: round 1 closed and checkpointed; round 2 opened and the station killed;
    # resumed, it opens round 2 again, later (a wall clock that moves 1 s a reading)
    clock = itertools.count(1000, 1000)
    monkeypatch.setattr(ground_station, 'now_ms', lambda: next(clock))
    station = _station()
    station.open_round(0.0)
    station.close_round(1.0)
    station_checkpoint.save(station, tmp_path)
    station.open_round(1.0)
    resumed = _station()
    station_checkpoint.resume(resumed, tmp_path)
    resumed.open_round(2.0)
    first, second = station._round.opened_ms, resumed._round.opened_ms
    assert first < second
    # Act: drone 0's upload for the first opening, kept by DDS and delivered again, then the
    # one it retrained for the second; drone 1's of the second opening; one without the echo
    # (a drone of an older fl_uav)
    verdicts = [resumed.receive_update(f) for f in (
        _frame_of_opening(resumed, 0, first), _frame_of_opening(resumed, 0, second),
        _frame_of_opening(resumed, 1, second))]
    older = _frame(resumed, 2, 2, 0.01)
    # Assert: the first opening's is a replay, saying why; the others count
    assert [v.reason for v in verdicts] == [REPLAY, 'accepted', 'accepted']
    assert 'earlier opening of the round (before the station resumed)' in verdicts[0].detail
    assert resumed.receive_update(older).accepted
    # and the first station, never resumed, takes the first opening's update
    assert station.receive_update(_frame_of_opening(station, 0, first)).accepted
