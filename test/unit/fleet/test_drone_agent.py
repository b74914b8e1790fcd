"""DroneAgent catching up: a round a newer one superseded is dropped (before, during or after
its training; nothing sent, nothing to acknowledge), and local steps fit the round's time left
at the drone's own measured step speed; every client algorithm stops at the deadline."""

from __future__ import annotations

import time

import numpy as np
import pytest

from fl_uav.compression.compressor import decode_update_frame
from fl_uav.compression.signing import now_ms
from fl_uav.fleet import drone_agent
from fl_uav.fleet.drone_agent import (
    DROPPED_SUPERSEDED,
    STEP_SPEED_ROUNDS,
    STEP_TIME_SAFETY,
    UPLOAD_MARGIN_S,
    DroneAgent,
    steps_that_fit,
)
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import RoundTask
from fl_uav.learning.training import STOP_DEADLINE
from test.unit.fleet._fleet_pair import agent_and_station

# tiny_cnn, ten buffered samples, batch 32: one local step per epoch
_BASE = {'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
         'learning.optimizer': 'sgd', 'rounds.num_rounds': 3, 'rounds.deadline_s': 60.0,
         'rounds.first_round_extra_s': 0.0}

# Every client algorithm, with about `steps` local steps configured (overrides of _BASE).
_STEPS = 100000


def _client_overrides(client: str, steps: int = _STEPS) -> dict:
    return {
        'sgd': {'learning.local_epochs': steps},
        '2ceoafl': {'learning.client_algorithm': '2ceoafl', 'aggregation.strategy': '2ceoafl',
                    'learning.rho_steps': 1, 'learning.kappa_steps': steps - 1},
        'feddpq': {'learning.client_algorithm': 'feddpq', 'aggregation.strategy': 'feddpq',
                   'learning.momentum': 0.0, 'learning.kappa_steps': steps},
        'osafl': {'learning.client_algorithm': 'osafl', 'aggregation.strategy': 'osafl',
                  'learning.min_local_steps': steps, 'learning.max_local_steps': steps},
        'scaffold': {'learning.client_algorithm': 'scaffold', 'aggregation.strategy': 'scaffold',
                     'learning.local_epochs': steps},
    }[client]


CLIENTS = ('sgd', '2ceoafl', 'feddpq', 'osafl', 'scaffold')


class _TrueFromCall:
    """A ``superseded`` callable that turns true at its n-th call (1-based) and counts calls."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


def _first_task(overrides: dict) -> tuple[DroneAgent, GroundStation, RoundTask]:
    agent, station = agent_and_station({**_BASE, **overrides})
    return agent, station, agent.accept_global_frame(station.open_round(0.0).frame)


def test_a_round_superseded_before_training_is_dropped_and_nothing_is_sent():
    # Arrange
    agent, _, task = _first_task({})
    # Act
    report = agent.train_round(task, superseded=lambda: True)
    # Assert
    assert report.dropped == DROPPED_SUPERSEDED and report.frames == () and report.steps == 0
    assert agent.rounds_dropped == 1 and agent.rounds_trained == 0
    assert agent._pending_upload is None     # nothing awaits the station's acknowledgement


@pytest.mark.parametrize('client', CLIENTS)
def test_every_client_superseded_during_training_stops_at_the_next_step(client):
    # Arrange: 500 local steps configured; the newer round arrives at the 3rd check (the
    # check before training, then one per local step)
    agent, _, task = _first_task(_client_overrides(client, 500))
    state_before = agent._client.state_dict()
    superseded = _TrueFromCall(3)
    # Act
    report = agent.train_round(task, superseded=superseded)
    # Assert: stopped at the second step, nothing sent, the client's state as it was
    assert report.dropped == DROPPED_SUPERSEDED and report.frames == ()
    assert superseded.calls == 3
    assert agent.rounds_trained == 0 and agent._pending_upload is None
    assert agent._client.state_dict().keys() == state_before.keys()


def test_a_round_superseded_during_training_stops_at_the_next_step():
    # Arrange: 500 local steps configured; the newer round arrives at the 3rd check (the
    # check before training, then one per local step)
    agent, _, task = _first_task({'learning.local_epochs': 500})
    superseded = _TrueFromCall(3)
    # Act
    report = agent.train_round(task, superseded=superseded)
    # Assert: stopped at the second step, not after 500
    assert report.dropped == DROPPED_SUPERSEDED and report.frames == ()
    assert superseded.calls == 3
    assert agent.rounds_trained == 0 and agent._pending_upload is None


def test_the_next_round_trains_after_a_dropped_one():
    # Arrange: round 1 dropped during training, round 2 then trains undisturbed
    agent, station, task = _first_task({'learning.local_epochs': 3})
    agent.train_round(task, superseded=_TrueFromCall(2))
    station.close_round(task.deadline_s)
    second = agent.accept_global_frame(station.open_round(task.deadline_s).frame)
    # Act
    report = agent.train_round(second, superseded=lambda: False)
    # Assert: the station takes it
    assert not report.dropped and report.steps == 3
    assert [station.receive_update(f).reason for f in report.frames] == ['accepted']


def test_a_scaffold_round_superseded_after_training_keeps_c_k_as_it_was():
    # Arrange: 2 steps, so the 4th check is the one after training
    agent, _, task = _first_task({'learning.client_algorithm': 'scaffold',
                                  'aggregation.strategy': 'scaffold',
                                  'learning.local_epochs': 2})
    control_before = agent._client.control
    superseded = _TrueFromCall(4)
    # Act
    report = agent.train_round(task, superseded=superseded)
    # Assert: trained (4 checks) but dropped, and c_k untouched, as if never trained
    assert superseded.calls == 4 and report.dropped == DROPPED_SUPERSEDED
    assert agent._client.control is control_before and agent._pending_upload is None


@pytest.mark.parametrize('time_left_s, per_step_s, overhead_s, steps', [
    (32.0, 10.0, 0.0, 3),                 # (32 − 2) / 10
    (32.0, 10.0, 10.0, 2),                # (32 − 10 − 2) / 10
    (1.0, 10.0, 0.0, 1),                  # too late for even one: one step
    (-5.0, 0.5, 0.0, 1),
    (UPLOAD_MARGIN_S + 100 * 0.25, 0.25, 0.0, 100),
])
def test_steps_that_fit_the_time_left(time_left_s, per_step_s, overhead_s, steps):
    assert steps_that_fit(time_left_s, per_step_s, overhead_s) == steps


@pytest.mark.parametrize('per_step_s', [0.0, -1.0, float('nan')])
def test_steps_that_fit_needs_a_step_speed(per_step_s):
    with pytest.raises(ValueError, match='seconds_per_step'):
        steps_that_fit(10.0, per_step_s, 0.0)


def test_local_steps_are_capped_to_the_time_left_at_the_measured_speed():
    # Arrange: 20 steps configured, a measured 10 s per step (planned with the safety factor);
    # the round opened now with the upload margin and 3.4 planned steps to its deadline
    agent, _, task = _first_task({'learning.local_epochs': 20})
    agent.record_step_time(10.0)
    agent.overhead_s = 0.0
    deadline_s = UPLOAD_MARGIN_S + 3.4 * 10.0 * STEP_TIME_SAFETY
    task = RoundTask(task.round_index, task.weights, task.plan, task.knobs,
                     deadline_s=deadline_s, run_id=task.run_id, opened_ms=now_ms())
    # Act
    report = agent.train_round(task)
    # Assert
    assert report.steps == 3 and report.steps_cap == 3 and agent.rounds_capped == 1
    assert report.planned_steps == 20 and report.capped


def _planned_task(agent: DroneAgent, task: RoundTask, planned_steps: float) -> RoundTask:
    """``task`` opened now, with a measured 10 s per step and ``planned_steps`` steps (with the
    safety factor) between the upload margin and its deadline."""
    agent.record_step_time(10.0)
    agent.overhead_s = 0.0
    return RoundTask(task.round_index, task.weights, task.plan, task.knobs,
                     deadline_s=UPLOAD_MARGIN_S + planned_steps * 10.0 * STEP_TIME_SAFETY,
                     run_id=task.run_id, opened_ms=now_ms())


def test_a_cap_equal_to_the_clients_own_steps_cut_nothing_and_is_not_counted():
    # Arrange: 3 steps configured (3 epochs of one batch), and time for 3.4 planned steps
    agent, _, task = _first_task({'learning.local_epochs': 3})
    task = _planned_task(agent, task, 3.4)
    # Act
    report = agent.train_round(task)
    # Assert: the cap (3) met the 3 steps the client takes anyway: not a capped round
    assert (report.steps, report.steps_cap, agent.rounds_capped) == (3, 3, 0)
    assert report.planned_steps == 3 and not report.capped


@pytest.mark.parametrize('client', ['2ceoafl', 'feddpq', 'osafl', 'sgd_local_steps_knob'])
def test_a_client_with_its_own_step_count_is_not_capped(client):
    # Arrange: 3 local steps from the client's own count (2CEOAFL: ρ = 1 + κ = 2; a planner's
    # H for sgd), and time for 3.4 planned steps: a cap would be 3
    overrides = ({'learning.local_epochs': 20} if client == 'sgd_local_steps_knob'
                 else _client_overrides(client, 3))
    agent, _, task = _first_task(overrides)
    knobs = {'local_steps': 3} if client == 'sgd_local_steps_knob' else task.knobs
    task = _planned_task(agent, RoundTask(task.round_index, task.weights, task.plan, knobs,
                                          deadline_s=task.deadline_s, run_id=task.run_id), 3.4)
    # Act
    report = agent.train_round(task)
    # Assert: all 3 steps taken; no cap applied, none reported, the round not counted
    assert (report.steps_cap, agent.rounds_capped, report.stopped) == (None, 0, '')
    assert report.steps + report.probe_steps == 3
    assert (report.planned_steps, report.capped) == (None, False)


def test_a_2ceoafl_drone_sends_the_masked_steps_as_steps_and_the_probe_apart():
    # Arrange: ρ = 2 probe steps, κ = 3 masked steps
    agent, station, task = _first_task({'learning.client_algorithm': '2ceoafl',
                                        'aggregation.strategy': '2ceoafl',
                                        'learning.rho_steps': 2, 'learning.kappa_steps': 3})
    # Act
    report = agent.train_round(task)
    # Assert: steps = κ (what Δ covers, what FedNova / OSAFL divide by), ρ as probe_steps,
    # on the wire as in the report; the station takes it
    metadata = decode_update_frame(report.frame, task.weights).metadata
    assert (metadata['steps'], metadata.get('probe_steps')) == (3, 2)
    assert (report.steps, report.probe_steps) == (3, 2)
    assert station.receive_update(report.frame).reason == 'accepted'


class _TrainingClock:
    """drone_agent's ``time``: ``perf_counter`` stands still except while the client trains,
    which takes ``train_s``; ``monotonic`` is the real one."""

    def __init__(self, train_s: float) -> None:
        self.train_s = train_s
        self.now_s = 0.0
        self.monotonic = time.monotonic

    def perf_counter(self) -> float:
        return self.now_s

    def around(self, train):
        def timed(*args, **kwargs):
            self.now_s += self.train_s
            return train(*args, **kwargs)
        return timed


def test_a_2ceoafl_drones_step_time_counts_its_probe_steps(monkeypatch):
    # Arrange: ρ = 2 + κ = 3 steps that take 5 s in all
    agent, _, task = _first_task({'learning.client_algorithm': '2ceoafl',
                                  'aggregation.strategy': '2ceoafl',
                                  'learning.rho_steps': 2, 'learning.kappa_steps': 3})
    clock = _TrainingClock(5.0)
    monkeypatch.setattr(drone_agent, 'time', clock)
    agent._client.train = clock.around(agent._client.train)
    # Act
    agent.train_round(task)
    # Assert: 1 s a step (5 steps ran), not 5/3 s (the cap would plan too few steps)
    assert agent.seconds_per_step == pytest.approx(1.0)


def test_without_the_opening_time_or_a_measured_speed_steps_are_not_capped():
    # Arrange: round 1 of an agent that has not trained yet (no speed), then a round that
    # does not say when it opened
    agent, _, task = _first_task({'learning.local_epochs': 20})
    opened = RoundTask(task.round_index, task.weights, task.plan, task.knobs,
                       deadline_s=34.0, run_id=task.run_id, opened_ms=now_ms())
    # Act
    first = agent.train_round(opened)
    measured = agent.seconds_per_step
    agent.record_step_time(10.0)
    second = agent.train_round(RoundTask(2, task.weights, task.plan, {}, deadline_s=34.0,
                                         run_id=task.run_id))
    # Assert: both trained all 20 steps; the first one measured the step speed
    assert (first.steps, first.steps_cap) == (20, None)
    assert (second.steps, second.steps_cap) == (20, None)
    assert measured is not None and np.isfinite(measured) and measured > 0


@pytest.mark.parametrize('measured_s, used_s', [
    ([0.3, 0.1, 0.1, 0.1], 0.1),      # the slow round has left the window of 3
    ([0.1, 0.3, 0.1], 0.3),           # the slowest of the last 3
    ([0.2], 0.2),
    ([], None),
])
def test_the_cap_uses_the_slowest_step_time_of_the_last_rounds(measured_s, used_s):
    # Arrange
    agent, _ = agent_and_station(_BASE)
    # Act
    for value_s in measured_s:
        agent.record_step_time(value_s)
    # Assert
    assert STEP_SPEED_ROUNDS == 3 and agent.seconds_per_step == used_s


@pytest.mark.parametrize('client', CLIENTS)
def test_every_client_stops_in_time_for_the_deadline_whatever_its_steps_cost(client):
    # Arrange: 100000 steps configured, no step time measured yet (no cap); the round (the
    # station's opening, which the update echoes) ends 0.5 s after the upload margin from now
    agent, station, task = _first_task(_client_overrides(client))
    since_opened_s = (now_ms() - task.opened_ms) / 1000.0
    task = RoundTask(task.round_index, task.weights, task.plan, task.knobs,
                     deadline_s=since_opened_s + UPLOAD_MARGIN_S + 0.5, run_id=task.run_id,
                     opened_ms=task.opened_ms)
    # Act
    report = agent.train_round(task)
    # Assert: stopped long before the 100000 steps (minutes of work), the steps taken are
    # sent and reported, and the station takes the update
    assert report.steps >= 1 and report.steps < _STEPS and report.steps_cap is None
    assert report.stopped == STOP_DEADLINE and agent.rounds_stopped_at_deadline == 1
    assert [station.receive_update(f).reason for f in report.frames] == ['accepted']


def test_a_round_that_ends_before_its_deadline_was_not_stopped():
    # Arrange: 3 steps and a round that ends in a minute
    agent, _, task = _first_task({'learning.local_epochs': 3})
    task = RoundTask(task.round_index, task.weights, task.plan, task.knobs,
                     deadline_s=60.0, run_id=task.run_id, opened_ms=now_ms())
    # Act
    report = agent.train_round(task)
    # Assert
    assert (report.steps, report.stopped, agent.rounds_stopped_at_deadline) == (3, '', 0)
