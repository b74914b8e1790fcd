"""The station node's update inbox: frames in arrival order, bounded, refusals counted."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.update_inbox import (
    INBOX_FULL,
    UPDATE_INBOX_FRAMES_PER_DRONE,
    UpdateInbox,
    inbox_capacity_bytes,
    inbox_capacity_frames,
)


def test_frames_come_out_in_arrival_order_and_the_inbox_empties():
    # Arrange
    inbox = UpdateInbox(capacity_frames=3)
    # Act
    put = [inbox.put(frame) for frame in (b'a', b'b', b'c')]
    first = inbox.take_all()
    second = inbox.take_all()
    # Assert
    assert put == [True, True, True]
    assert first == ([b'a', b'b', b'c'], 0)
    assert second == ([], 0) and len(inbox) == 0


def test_a_full_inbox_refuses_and_counts_until_it_is_taken():
    # Arrange: room for 2 frames (the worker aggregates: nobody takes them)
    inbox = UpdateInbox(capacity_frames=2)
    # Act
    put = [inbox.put(frame) for frame in (b'a', b'b', b'c', b'd')]
    taken = inbox.take_all()
    again = inbox.put(b'e')
    # Assert: the first two kept in order, two refused and counted once; room again after
    assert put == [True, True, False, False]
    assert taken == ([b'a', b'b'], 2)
    assert again and inbox.take_all() == ([b'e'], 0)


def test_a_few_huge_frames_fill_the_inbox_in_bytes_long_before_its_frame_count():
    # Arrange: 100 frames or 10 kB; a flood of 4 kB frames (a 64 MiB one is refused the same)
    inbox = UpdateInbox(capacity_frames=100, capacity_bytes=10_000)
    # Act
    put = [inbox.put(bytes(4_000)) for _ in range(4)] + [inbox.put(bytes(20_000))]
    held = inbox.held_bytes
    frames, refused = inbox.take_all()
    # Assert: two fit; the others refused and counted; empty (in bytes too) after the take
    assert put == [True, True, False, False, False]
    assert held == 8_000 and len(frames) == 2 and refused == 3
    assert inbox.held_bytes == 0 and inbox.put(bytes(9_000))


def test_the_byte_capacity_holds_a_few_dense_updates_per_drone():
    # A small_cnn-sized model (155,000 values, 620 kB a dense update), 4 drones
    capacity = inbox_capacity_bytes(4, 155_000)
    assert 4 * 4 * 620_000 < capacity < 12_000_000
    with pytest.raises(ValueError, match='at least 1 byte, got 0'):
        UpdateInbox(1, capacity_bytes=0)


def test_the_capacity_grows_with_the_fleet_and_is_never_empty():
    assert inbox_capacity_frames(10) == 10 * UPDATE_INBOX_FRAMES_PER_DRONE
    with pytest.raises(ValueError, match='at least 1 frame, got 0'):
        UpdateInbox(0)


def test_refused_frames_are_counted_by_reason_in_the_round_and_the_run():
    # Arrange: a 2-drone station with round 1 open
    config = build_config(FleetConfig, {
        'num_drones': 2, 'learning.model': 'tiny_cnn', 'rounds.num_rounds': 1,
        'rounds.deadline_s': 10.0, 'rounds.first_round_extra_s': 0.0,
        'autopilot.home_east_m': 585.0, 'autopilot.home_north_m': 600.0})
    rng = np.random.default_rng(0)
    station = GroundStation(config, rng.normal(0, 1, (8, 3, 32, 32)).astype(np.float32),
                            rng.integers(0, 7, 8))
    station.open_round(now_s=0.0)
    # Act
    station.count_rejected(INBOX_FULL, 3)
    station.receive_update(b'')
    record = station.close_round(now_s=10.0)
    # Assert
    assert station.rejected_total == {INBOX_FULL: 3, 'truncated': 1}
    assert record.rejected == {INBOX_FULL: 3, 'truncated': 1}
