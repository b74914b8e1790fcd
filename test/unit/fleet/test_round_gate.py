"""RoundGate: which of the station's rounds a drone takes (restarts, repeats, forged rounds)."""

from __future__ import annotations

import pytest

from fl_uav.fleet.round_gate import (
    BEYOND_RUN,
    NEW_RUN,
    OLD_RUN,
    OTHER_RUN,
    REOPENED,
    REPEAT,
    STALE_FINISH,
    STALE_ROUND,
    TAKE,
    RoundGate,
)

RUN = 10       # the run length the station announces


def _gate_at(round_index: int) -> RoundGate:
    gate = RoundGate(default_num_rounds=RUN)
    assert gate.admit_round(round_index, RUN).taken
    return gate


def test_rounds_ahead_are_taken_even_when_some_were_missed():
    # Arrange
    gate = _gate_at(1)
    # Act
    verdicts = [gate.admit_round(r, RUN).action for r in (2, 5)]
    # Assert
    assert verdicts == [TAKE, TAKE] and gate.last_round == 5 and not gate.ignored


def test_the_same_round_again_is_ignored_and_counted():
    # Arrange
    gate = _gate_at(3)
    # Act
    verdict = gate.admit_round(3, RUN)
    # Assert
    assert not verdict.taken and verdict.action == REPEAT and gate.ignored == {REPEAT: 1}


def test_a_round_behind_the_last_starts_a_new_run():
    # Arrange: the drone was at round 7 when the ground station was restarted
    gate = _gate_at(7)
    # Act
    verdict = gate.admit_round(1, RUN)
    # Assert
    assert verdict.taken and verdict.action == NEW_RUN and 'new run' in verdict.detail
    assert gate.last_round == 1 and gate.events == {NEW_RUN: 1}
    assert gate.admit_round(2, RUN).action == TAKE


@pytest.mark.parametrize('round_index, num_rounds', [
    (4_000_000_000, RUN),      # the forged frame of the review
    (RUN + 1, RUN),
    (0, RUN),
    (-3, RUN),
    (RUN + 1, None),           # no run length announced: the drone's own rounds.num_rounds
    (4_000_000_000, 4_000_000_000),   # a forged frame announcing its own run length
])
def test_a_round_outside_the_run_is_rejected_and_never_locks_the_drone_out(round_index,
                                                                          num_rounds):
    # Arrange
    gate = _gate_at(2)
    # Act
    verdict = gate.admit_round(round_index, num_rounds)
    # Assert: rejected, counted, the gate unmoved: the next real round is still taken
    assert not verdict.taken and verdict.action == BEYOND_RUN
    assert str(round_index) in verdict.detail and gate.ignored == {BEYOND_RUN: 1}
    assert gate.last_round == 2 and gate.admit_round(3, RUN).action == TAKE


def test_a_finish_for_an_earlier_round_is_ignored_a_current_one_obeyed():
    # Arrange
    gate = _gate_at(5)
    # Act
    stale, current = gate.admit_finish(1), gate.admit_finish(5)
    # Assert
    assert not stale.taken and stale.action == STALE_FINISH
    assert current.taken and gate.ignored == {STALE_FINISH: 1}


def test_a_fresh_gate_takes_any_round_of_the_run_and_obeys_any_finish():
    # Arrange
    gate = RoundGate(default_num_rounds=RUN)
    # Act / Assert: a drone (re)started mid-run joins the round the station is at
    assert gate.admit_finish(1).taken
    assert gate.admit_round(8, RUN).action == TAKE


RUN_A, RUN_B, RUN_C = '0123456789abcdef', 'fedcba9876543210', '00000000000000aa'


def test_the_first_run_id_is_joined_at_any_round():
    # Arrange
    gate = RoundGate(default_num_rounds=RUN)
    # Act
    verdict = gate.admit_round(4, RUN, RUN_A)
    # Assert
    assert verdict.action == TAKE and gate.run_id == RUN_A and gate.epoch == 1
    assert not gate.events


def test_a_new_run_id_starts_a_new_run_at_any_round_and_retires_the_old_one():
    # Arrange
    gate = RoundGate(default_num_rounds=RUN)
    gate.admit_round(1, RUN, RUN_A)
    gate.admit_round(2, RUN, RUN_A)
    # Act: the station restarted (round 1), then a recording of run A is replayed
    restart = gate.admit_round(1, RUN, RUN_B)
    replay = gate.admit_round(3, RUN, RUN_A)
    # Assert
    assert restart.action == NEW_RUN and gate.run_id == RUN_B and gate.epoch == 2
    assert replay.action == OLD_RUN and not replay.taken and gate.run_id == RUN_B
    assert gate.admit_round(2, RUN, RUN_B).action == TAKE
    assert gate.admit_round(5, RUN, RUN_C).action == NEW_RUN     # a run starting later too
    assert gate.events == {NEW_RUN: 2} and gate.ignored == {OLD_RUN: 1}


def test_a_round_behind_in_the_same_run_is_stale_not_a_new_run():
    # Arrange
    gate = RoundGate(default_num_rounds=RUN)
    gate.admit_round(6, RUN, RUN_A)
    # Act
    verdict = gate.admit_round(2, RUN, RUN_A)
    # Assert
    assert verdict.action == STALE_ROUND and gate.last_round == 6 and gate.epoch == 1


def test_a_finish_of_another_run_is_ignored():
    # Arrange
    gate = RoundGate(default_num_rounds=RUN)
    gate.admit_round(3, RUN, RUN_B)
    # Act
    other, older, this = (gate.admit_finish(3, RUN_A), gate.admit_finish(2, RUN_B),
                          gate.admit_finish(3, RUN_B))
    # Assert
    assert (other.action, older.action, this.action) == (OTHER_RUN, STALE_FINISH, TAKE)


def test_an_old_station_without_run_ids_keeps_the_round_rule_and_epochs_count_runs():
    # Arrange
    gate = RoundGate(default_num_rounds=RUN)
    # Act
    actions = [gate.admit_round(r, RUN).action for r in (1, 2, 1)]
    # Assert
    assert actions == [TAKE, TAKE, NEW_RUN] and gate.epoch == 2 and gate.run_id is None


def test_a_run_that_did_not_start_later_cannot_retire_the_run_in_progress():
    # Arrange: a (restarted) drone joined run B, started at t = 2000 ms
    gate = RoundGate(default_num_rounds=RUN)
    gate.admit_round(1, RUN, RUN_B, run_started_ms=2000)
    # Act: a genuine recording of run A (started earlier), then run C (started later)
    replay = gate.admit_round(3, RUN, RUN_A, run_started_ms=1000)
    unordered = gate.admit_round(3, RUN, RUN_A, run_started_ms=None)
    real = gate.admit_round(2, RUN, RUN_B, run_started_ms=2000)
    later = gate.admit_round(1, RUN, RUN_C, run_started_ms=3000)
    # Assert: the replay neither switched runs nor locked B out; a later run still starts
    assert (replay.action, unordered.action, real.action, later.action) == (
        OLD_RUN, OLD_RUN, TAKE, NEW_RUN)
    assert gate.run_id == RUN_C and gate.run_started_ms == 3000


def test_a_drone_that_took_no_round_obeys_a_finish():
    # Arrange: a drone node restarted after the last round hears the latched finish
    gate = RoundGate(default_num_rounds=RUN)
    # Act
    verdict = gate.admit_finish(RUN, RUN_A)
    # Assert
    assert verdict.taken


def test_a_station_running_more_rounds_than_the_drone_is_configured_for_is_named():
    # Arrange: the drone's rounds.num_rounds is 3; the station announces a run of 4
    gate = RoundGate(3)
    for r in (1, 2, 3):
        gate.admit_round(r, 4, 'run-a', 1)
    # Act
    verdict = gate.admit_round(4, 4, 'run-a', 1)
    # Assert: ignored, and the message says which key differs
    assert verdict.action == BEYOND_RUN
    assert 'rounds.num_rounds 3' in verdict.detail and 'run of 4 rounds' in verdict.detail


def test_a_round_the_resumed_station_opens_again_is_taken_once_and_stays_in_the_run():
    # Arrange: round 3 of run r taken, opened at t = 1000 ms
    gate = RoundGate(default_num_rounds=RUN)
    run = 'ab' * 8
    assert gate.admit_round(3, RUN, run, 500, opened_ms=1000).action == TAKE
    # Act: the latched frame again; the resumed station's round 3, opened later; that again
    again = gate.admit_round(3, RUN, run, 500, opened_ms=1000)
    reopened = gate.admit_round(3, RUN, run, 500, opened_ms=9000)
    latched = gate.admit_round(3, RUN, run, 500, opened_ms=9000)
    earlier = gate.admit_round(3, RUN, run, 500, opened_ms=2000)
    # Assert: taken once, in the same run (no new run: the drone keeps its learning state)
    assert (again.action, reopened.action, latched.action, earlier.action) == (
        REPEAT, REOPENED, REPEAT, REPEAT)
    assert reopened.taken and gate.epoch == 1 and gate.events[REOPENED] == 1
    assert not gate.events[NEW_RUN] and gate.admit_round(4, RUN, run, 500, 9500).action == TAKE


def test_a_round_without_a_run_id_or_opening_time_is_never_reopened():
    gate = _gate_at(3)
    assert gate.admit_round(3, RUN, opened_ms=9000).action == REPEAT
