"""The station watchdog: a drone in flight between rounds returns when the station is silent."""

from __future__ import annotations

import math

import pytest

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.station_heartbeat import Heartbeat, StationPhase
from fl_uav.fleet.station_watchdog import StationWatchdog, heartbeat_period_problem

PLANNING = Heartbeat('a1b2', 3, 10, StationPhase.PLANNING, 40.0, 1.0)


@pytest.mark.parametrize('now_s, in_flight, phase, expected', [
    (129.9, True, 'waiting', False),     # not silent long enough
    (130.0, True, 'waiting', True),
    (500.0, False, 'waiting', False),    # on the ground: nothing to do
    (500.0, True, 'flying', False),      # a round's mission is bounded by its own deadline
    (500.0, True, 'returning', False),
    (500.0, True, 'finished', False),    # the run is over: land_on_finish decides
])
def test_returns_only_in_flight_between_rounds_after_the_timeout(now_s, in_flight, phase,
                                                                   expected):
    # Arrange: last heard at 100 s, timeout 30 s
    watchdog = StationWatchdog(timeout_s=30.0, last_heard_s=100.0)
    # Act / Assert
    assert watchdog.should_return(now_s, in_flight=in_flight, phase=phase) is expected


def test_hearing_the_station_resets_it_and_zero_turns_it_off():
    watchdog = StationWatchdog(timeout_s=30.0, last_heard_s=0.0)
    watchdog.heard(100.0)
    watchdog.heard(50.0)                 # an earlier stamp never moves it back
    assert watchdog.silent_for_s(120.0) == 20.0
    assert not watchdog.should_return(129.0, in_flight=True, phase='waiting')
    off = StationWatchdog(timeout_s=0.0, last_heard_s=0.0)
    assert not off.should_return(1e9, in_flight=True, phase='waiting')


def test_a_timeout_within_two_of_the_longest_rounds_is_refused_by_name():
    # deadline 60 s + first round extra 60 s = 120 s: at least 240 s
    with pytest.raises(ConfigError, match=r'station_timeout_s 239 s must be at least 2 x the '
                                          r'longest round'):
        build_config(FleetConfig, {'flight.station_timeout_s': 239.0})
    assert build_config(FleetConfig, {'flight.station_timeout_s': 240.0})
    assert build_config(FleetConfig, {'flight.station_timeout_s': 0.0}).flight \
        .station_timeout_s == 0.0


def test_one_return_per_silence_until_the_station_is_heard_again():
    # Arrange: silent for long, a return commanded (it failed: the operator took over)
    watchdog = StationWatchdog(timeout_s=30.0, last_heard_s=0.0)
    assert watchdog.should_return(100.0, in_flight=True, phase='waiting')
    watchdog.fire()
    # Act / Assert: not again in this silence; again after the station was heard and fell
    # silent once more
    assert not watchdog.should_return(200.0, in_flight=True, phase='waiting')
    watchdog.heard(210.0)
    assert not watchdog.should_return(220.0, in_flight=True, phase='waiting')
    assert watchdog.should_return(240.0, in_flight=True, phase='waiting')


def test_heartbeats_without_frames_keep_a_drone_from_returning():
    # Arrange: the last frame at 100 s; the station plans for minutes, beating every second
    watchdog = StationWatchdog(timeout_s=30.0, last_heard_s=100.0)
    # Act
    for now_s in range(101, 300):
        watchdog.heartbeat(float(now_s), PLANNING)
    # Assert: heard; the phase age runs on from the last beat
    assert not watchdog.should_return(300.0, in_flight=True, phase='waiting')
    assert watchdog.silent_for_s(300.0) == 1.0
    assert watchdog.station_phase_age_s(305.0) == PLANNING.phase_age_s + 6.0


def test_heartbeats_that_stop_return_the_drone_after_the_timeout():
    # Arrange: beats until 200 s, then the station hangs (it may stay on the ROS graph:
    # that no longer counts)
    watchdog = StationWatchdog(timeout_s=30.0, last_heard_s=100.0)
    watchdog.heartbeat(200.0, PLANNING)
    # Act / Assert
    assert not watchdog.should_return(229.9, in_flight=True, phase='waiting')
    assert watchdog.should_return(230.0, in_flight=True, phase='waiting')


def test_a_station_without_heartbeats_is_heard_by_its_frames_only():
    # Arrange: an older station: frames at 100 s and 120 s, never a heartbeat
    watchdog = StationWatchdog(timeout_s=30.0, last_heard_s=0.0)
    watchdog.heard(100.0)
    watchdog.heard(120.0)
    # Act / Assert: it plans for longer than the timeout: the drone returns (fail safe)
    assert watchdog.last_beat is None and math.isnan(watchdog.station_phase_age_s(130.0))
    assert not watchdog.should_return(149.0, in_flight=True, phase='waiting')
    assert watchdog.should_return(150.0, in_flight=True, phase='waiting')


def test_a_timeout_under_five_heartbeat_periods_is_refused_by_name():
    with pytest.raises(ConfigError, match=r'station_timeout_s 299 s must be at least 5 x '
                                          r'status.heartbeat_period_s \(60 s\)'):
        build_config(FleetConfig, {'flight.station_timeout_s': 299.0,
                                   'status.heartbeat_period_s': 60.0})
    with pytest.raises(ConfigError, match=r'heartbeat_period_s must be in \[0.1, 60\] s'):
        build_config(FleetConfig, {'status.heartbeat_period_s': 0.0})
    assert build_config(FleetConfig, {'flight.station_timeout_s': 300.0,
                                      'status.heartbeat_period_s': 60.0})


def test_a_station_period_too_long_for_the_drones_timeout_is_told_once_per_period():
    # Arrange: this drone's timeout is 30 s (its drone.yaml); the station reads its own
    # ground_station.yaml and beats every 10 s: 5 x 10 s > 30 s
    watchdog = StationWatchdog(timeout_s=30.0, last_heard_s=0.0)
    slow = Heartbeat('a1b2', 3, 10, StationPhase.WAITING, 1.0, 10.0)
    # Act
    told = [watchdog.heartbeat(t, slow) for t in (10.0, 20.0, 30.0)]
    fine = watchdog.heartbeat(40.0, Heartbeat('a1b2', 3, 10, StationPhase.WAITING, 1.0, 6.0))
    # Assert: said once (naming both keys), not on every beat; a fitting period is fine
    assert told[1:] == [None, None] and fine is None
    assert told[0] == heartbeat_period_problem(30.0, slow)
    assert 'status.heartbeat_period_s 10 s x 5' in told[0]
    assert 'flight.station_timeout_s 30 s' in told[0]


@pytest.mark.parametrize('timeout_s, period_s, problem', [
    (30.0, 6.0, False),      # 5 beats fit exactly
    (30.0, 6.1, True),
    (0.0, 60.0, False),      # the watchdog is off: no return, nothing to tell
])
def test_the_heartbeat_period_is_checked_against_the_drones_own_timeout(timeout_s, period_s,
                                                                        problem):
    beat = Heartbeat('a1b2', 3, 10, StationPhase.WAITING, 1.0, period_s)
    assert (heartbeat_period_problem(timeout_s, beat) is not None) == problem
    assert heartbeat_period_problem(timeout_s, None) is None
