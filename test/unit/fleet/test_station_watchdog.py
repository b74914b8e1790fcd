"""The station watchdog: a drone in flight between rounds returns when the station is silent."""

from __future__ import annotations

import pytest

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.station_watchdog import StationWatchdog


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
