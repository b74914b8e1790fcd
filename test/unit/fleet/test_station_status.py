"""The ground station's status for the operator (/diagnostics): where the run is, and who is
missing."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.compression.codec import FrameKind, encode_frame
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_status import ERROR, OK, WARN
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.station_status import STATION_STATUS_NAME, station_status
from test.unit._plugins import SPEC
from test.unit.fleet.test_express_fleet import EXPRESS

_FLAT = {'num_drones': 2, 'learning.model': 'tiny_cnn', 'rounds.num_rounds': 3,
         'rounds.deadline_s': 30.0, 'rounds.first_round_extra_s': 0.0}
CONFIG: FleetConfig = build_config(FleetConfig, _FLAT)


@pytest.fixture
def station() -> GroundStation:
    rng = np.random.default_rng(0)
    return GroundStation(CONFIG, rng.normal(0, 1, (40, 3, 32, 32)).astype(np.float32),
                         rng.integers(0, 7, 40))


def _update(station: GroundStation, sender: int, round_index: int) -> bytes:
    delta = {n: np.zeros_like(w) for n, w in station.weights.items()}
    return encode_frame(FrameKind.UPDATE, round_index, sender, station._fingerprint, delta,
                        {'num_samples': 10, 'run_id': station.run_id})


def test_before_round_one_it_waits_and_with_no_drone_it_is_an_error(station):
    # Act
    none = station_status(station, [], now_s=0.0)
    both = station_status(station, [0, 1], now_s=0.0)
    # Assert
    assert none.name == STATION_STATUS_NAME and none.level == ERROR
    assert none.message.startswith('no drone node subscribes to the global model')
    assert both.level == OK and both.message == 'round 0/3: waiting for drones'
    assert dict(both.values)['run_id'] == station.run_id


def test_an_open_round_counts_updates_and_the_deadline(station):
    # Arrange: round 1 open at t = 0 (deadline 30 s), drone 0's update in
    station.open_round(now_s=0.0)
    assert station.receive_update(_update(station, 0, 1)).accepted
    # Act
    report = station_status(station, [0, 1], now_s=10.0)
    # Assert
    assert report.level == OK
    assert report.message == 'round 1/3: round open, 1/2 updates, 20 s to the deadline'


def test_a_drone_missing_from_the_last_round_and_the_graph_warns(station):
    # Arrange: round 1 closed with drone 1 missing; drone 1's node is gone
    station.open_round(now_s=0.0)
    station.receive_update(_update(station, 0, 1))
    station.close_round(now_s=30.0)
    # Act
    report = station_status(station, [0], now_s=31.0)
    # Assert: both problems, then where the run is
    assert report.level == WARN
    assert report.message.startswith('drones not subscribed: [1]; round 1: late or missing [1]')
    assert report.message.endswith('round 1/3: between rounds')
    assert dict(report.values)['late_or_missing_last_round'] == '[1]'


def test_a_run_ended_as_failed_is_an_error_that_says_why():
    # Arrange: a strategy that always raises, the run stops at the first failed round
    config = build_config(FleetConfig, {**_FLAT, 'aggregation.max_failed_rounds': 1,
                                        'aggregation.strategy': SPEC + 'AlwaysRaises'})
    rng = np.random.default_rng(0)
    station = GroundStation(config, rng.normal(0, 1, (40, 3, 32, 32)).astype(np.float32),
                            rng.integers(0, 7, 40))
    station.open_round(now_s=0.0)
    station.receive_update(_update(station, 0, 1))
    station.close_round(now_s=30.0)
    # Act: the drones have gone (they landed on the finish)
    report = station_status(station, [], now_s=31.0)
    # Assert
    assert report.level == ERROR
    assert report.message.startswith('the run stopped as failed after round 1')
    assert report.message.endswith('round 1/3: failed')
    assert dict(report.values)['phase'] == 'failed'


def test_fedex_async_uavs_still_on_tour_are_not_late():
    # Arrange: FedEx-Async with 2 UAVs; round 1 closes with no landing (the UAVs are out)
    config = build_config(FleetConfig, {**EXPRESS, 'express.mode': 'async',
                                        'aggregation.strategy': 'fedex_async'})
    rng = np.random.default_rng(0)
    station = GroundStation(config, rng.normal(size=(40, 3, 32, 32)).astype(np.float32),
                            rng.integers(0, 7, 40))
    station.open_round(now_s=0.0)
    open_report = station_status(station, [0, 1], now_s=1.0)
    station.close_round(now_s=2.0)
    # Act
    report = station_status(station, [0, 1], now_s=3.0)
    # Assert
    assert 'round open until the next landing' in open_report.message
    assert report.level == OK, report.message
