"""StopHold: who keeps a stopping autopilot simulator running, and until when."""

import logging
import signal
import time

import pytest

from fl_uav.autopilot_sim.stop_hold import CLIENT_HEARTBEAT_TIMEOUT_S, StopHold, VehicleLinkState
from fl_uav.fleet.recording import StopSignals

MAX_HOLD_S = 35.0
FLYING = VehicleLinkState(0, armed=True, in_air=True, client_silent_s=0.5)


def _state(vehicle=0, armed=True, in_air=True, client_silent_s=0.5) -> VehicleLinkState:
    return VehicleLinkState(vehicle, armed, in_air, client_silent_s)


def test_a_flying_vehicle_with_its_client_connected_holds_the_simulator():
    # Prepare
    hold = StopHold(MAX_HOLD_S, started_s=100.0)
    # Execute
    held = hold.holding([_state(0), _state(1, armed=False, in_air=False)], 101.0)
    # Assert: only the flying one; the one on the ground does not hold
    assert [s.vehicle for s in held] == [0]


@pytest.mark.parametrize('silent_s', [None, CLIENT_HEARTBEAT_TIMEOUT_S + 0.1])
def test_a_vehicle_whose_client_is_gone_does_not_hold(silent_s):
    # Prepare: in the air, but no client heard (ever, or for longer than the time-out)
    hold = StopHold(MAX_HOLD_S, started_s=0.0)
    # Execute
    held = hold.holding([_state(client_silent_s=silent_s)], 1.0)
    # Assert
    assert held == []


def test_a_landed_vehicle_holds_until_its_client_goes_silent():
    # Prepare: flying at the first signal, then landed and disarmed, its client closing
    hold = StopHold(MAX_HOLD_S, started_s=0.0)
    hold.holding([_state()], 0.0)
    landed = _state(armed=False, in_air=False, client_silent_s=1.0)
    gone = _state(armed=False, in_air=False, client_silent_s=CLIENT_HEARTBEAT_TIMEOUT_S + 0.1)
    # Execute
    while_closing = hold.holding([landed], 10.0)
    after = hold.holding([gone], 12.0)
    # Assert: the client may still restore its parameters and close; then the hold ends
    assert [s.vehicle for s in while_closing] == [0]
    assert after == []
    assert 'on the ground' in hold.outcome(12.0)


def test_a_vehicle_on_the_ground_at_the_signal_does_not_hold_even_with_its_client():
    # Prepare: disarmed on the ground, its drone node still connected
    hold = StopHold(MAX_HOLD_S, started_s=0.0)
    # Execute
    held = hold.holding([_state(armed=False, in_air=False, client_silent_s=0.2)], 0.0)
    # Assert
    assert held == []


def test_the_hold_ends_at_its_deadline():
    # Prepare
    hold = StopHold(MAX_HOLD_S, started_s=100.0)
    # Execute
    before = hold.holding([FLYING], 100.0 + MAX_HOLD_S - 0.01)
    at = hold.holding([FLYING], 100.0 + MAX_HOLD_S)
    # Assert
    assert before == [FLYING] and at == []
    assert 'limit (35 s)' in hold.outcome(100.0 + MAX_HOLD_S)


def test_a_second_signal_ends_the_hold_at_once():
    # Prepare
    hold = StopHold(MAX_HOLD_S, started_s=0.0)
    assert hold.holding([FLYING], 1.0)
    # Execute
    hold.release()
    # Assert
    assert hold.holding([FLYING], 1.0) == []
    assert hold.outcome(1.0) == 'a SIGTERM'


@pytest.mark.parametrize('kwargs', [{'max_hold_s': 0.0}, {'max_hold_s': 1.0,
                                                          'client_timeout_s': -1.0}])
def test_bad_limits_are_refused_by_name(kwargs):
    # Execute / Assert
    name = 'client_timeout_s' if 'client_timeout_s' in kwargs else 'max_hold_s'
    with pytest.raises(ValueError, match=name):
        StopHold(started_s=0.0, **kwargs)


def test_wait_polls_until_the_vehicle_is_home_and_logs_what_it_waits_for_once(caplog):
    # Prepare: a fake clock; the vehicle lands at t=3, its client goes silent after
    now = [0.0]
    hold = StopHold(MAX_HOLD_S, started_s=0.0)

    def states():
        t = now[0]
        if t < 3.0:
            return [_state(client_silent_s=0.2)]
        return [_state(armed=False, in_air=False, client_silent_s=t - 3.0)]

    def pause(seconds):
        now[0] += seconds

    # Execute
    with caplog.at_level(logging.WARNING, logger='fl_uav.autopilot_sim.stop_hold'):
        held_s = hold.wait(states, clock=lambda: now[0], pause=pause, poll_s=0.5)
    # Assert: held until the client was silent for the time-out; one line before, one after
    assert held_s == pytest.approx(3.0 + CLIENT_HEARTBEAT_TIMEOUT_S + 0.5)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert 'vehicle 0 (armed, in the air; its client heard 0.2 s ago)' in lines[0]
    assert 'at most 35 s' in lines[0] and 'a SIGTERM stops it at once' in lines[0]
    assert 'on the ground with its client gone' in lines[1]


def test_wait_returns_at_once_without_logging_when_nothing_holds(caplog):
    # Prepare
    hold = StopHold(MAX_HOLD_S, started_s=0.0)
    # Execute
    with caplog.at_level(logging.WARNING, logger='fl_uav.autopilot_sim.stop_hold'):
        held_s = hold.wait(lambda: [_state(client_silent_s=None)], clock=lambda: 0.0,
                           pause=pytest.fail)
    # Assert
    assert held_s == 0.0 and caplog.records == []


def test_a_further_signal_during_the_wait_ends_it_at_the_next_poll(caplog):
    # Prepare: the vehicle flies on; a second signal comes after two polls
    now = [0.0]
    hold = StopHold(MAX_HOLD_S, started_s=0.0)

    def pause(seconds):
        now[0] += seconds

    # Execute
    with caplog.at_level(logging.WARNING, logger='fl_uav.autopilot_sim.stop_hold'):
        held_s = hold.wait(lambda: [FLYING], interrupted=lambda: now[0] >= 0.2,
                           clock=lambda: now[0], pause=pause, poll_s=0.1)
    # Assert
    assert held_s == pytest.approx(0.2) and hold.released
    assert 'a SIGTERM' in caplog.records[-1].getMessage()


def test_stop_signals_take_a_real_signal_as_a_request_without_interrupting():
    # Prepare: what the autopilot_sim node wraps its hold in
    hold = StopHold(MAX_HOLD_S, started_s=time.monotonic())
    # Execute: a real SIGINT (no KeyboardInterrupt) and SIGTERM (the process lives on)
    with StopSignals() as signals:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
        hold.wait(lambda: [FLYING], interrupted=lambda: signals.requested,
                  pause=lambda seconds: None)
    # Assert
    assert signals.received == ['SIGINT', 'SIGTERM'] and hold.released
