"""The station's heartbeat: its phase clock, and what a drone accepts as one."""

from __future__ import annotations

import pytest

from fl_uav.fleet.station_heartbeat import (
    HEARTBEAT_NAME,
    Heartbeat,
    PhaseClock,
    StationPhase,
)


def test_the_phase_clock_says_the_phase_its_round_and_seconds_in_it():
    # Arrange: started at 100 s, waiting for the drones
    clock = PhaseClock('a1b2', 10, 1.0, now_s=100.0)
    waiting = clock.beat(104.0)
    # Act: round 1 opens at 110 s, closes at 170 s, the planner starts at 172 s
    clock.enter(StationPhase.ROUND_OPEN, 110.0, round_index=1)
    clock.enter(StationPhase.AGGREGATING, 170.0)
    clock.enter(StationPhase.PLANNING, 172.0)
    planning = clock.beat(250.0)
    # Assert
    assert (waiting.phase, waiting.round_index, waiting.phase_age_s) == ('waiting', 0, 4.0)
    assert planning == Heartbeat('a1b2', 1, 10, 'planning', 78.0, 1.0)
    assert planning.describe() == 'run a1b2 round 1/10: planning for 78 s'


def test_entering_the_phase_it_is_in_keeps_its_start():
    # Arrange: aggregating since 170 s (the close failed; the next tick retries it)
    clock = PhaseClock('a1b2', 10, 1.0, now_s=0.0)
    clock.enter(StationPhase.AGGREGATING, 170.0, round_index=1)
    # Act
    clock.enter(StationPhase.AGGREGATING, 200.0)
    # Assert: the age counts from the first attempt
    assert clock.beat(230.0).phase_age_s == 60.0


def test_a_heartbeat_survives_its_key_values():
    # Arrange
    beat = Heartbeat('a1b2', 3, 10, StationPhase.ROUND_OPEN, 12.5, 0.5)
    # Act
    back = Heartbeat.from_values(HEARTBEAT_NAME, dict(beat.values()))
    # Assert
    assert back == beat


GOOD = dict(Heartbeat('a1b2', 3, 10, 'planning', 12.5, 1.0).values())


@pytest.mark.parametrize('name, values, message', [
    ('fl_uav: uav0', GOOD, r"status name 'fl_uav: uav0' is not"),
    (HEARTBEAT_NAME, {k: v for k, v in GOOD.items() if k != 'phase'},
     r"heartbeat without \['phase'\]"),
    (HEARTBEAT_NAME, {**GOOD, 'round': 'three'}, r'malformed value: invalid literal'),
    (HEARTBEAT_NAME, {**GOOD, 'phase': 'napping'}, r"phase 'napping' is not one of"),
    (HEARTBEAT_NAME, {**GOOD, 'phase_age_s': 'nan'}, r'out of range'),
    (HEARTBEAT_NAME, {**GOOD, 'round': '11'}, r'out of range: round 11 of 10'),
])
def test_anything_else_is_refused_naming_the_problem(name, values, message):
    with pytest.raises(ValueError, match=message):
        Heartbeat.from_values(name, values)
