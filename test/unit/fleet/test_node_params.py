"""The nodes' own parameters are checked like the config: errors name the key and the range."""

from __future__ import annotations

import pytest

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import (
    AutopilotSimNodeParams,
    DroneNodeParams,
    FleetConfig,
    GroundStationNodeParams,
)


@pytest.mark.parametrize('cls, key, value, expected', [
    (DroneNodeParams, 'drone_id', 'abc', 'expected an integer'),
    (DroneNodeParams, 'drone_id', 1.5, 'expected an integer'),
    (DroneNodeParams, 'camera_transport', 'theora', 'unknown; choices: raw, compressed'),
    (GroundStationNodeParams, 'tick_period_s', -1.0, r'\(0, 60\]'),
    (GroundStationNodeParams, 'tick_period_s', 0.0, r'\(0, 60\]'),
    (GroundStationNodeParams, 'finish_linger_s', -1.0, '>= 0'),
    (AutopilotSimNodeParams, 'ground_truth_rate_hz', 0.0, r'\(0, 1000\]'),
    (AutopilotSimNodeParams, 'ground_truth_rate_hz', float('inf'), r'\(0, 1000\]'),
])
def test_a_bad_node_parameter_names_its_key_and_what_is_allowed(cls, key, value, expected):
    # Act / Assert
    with pytest.raises(ConfigError, match=f'{key}.*{expected}|{expected}.*{key}'):
        build_config(cls, {key: value})


@pytest.mark.parametrize('drone_id', [-1, 2, 5])
def test_a_drone_id_outside_the_fleet_is_refused(drone_id):
    # Arrange
    params = build_config(DroneNodeParams, {'drone_id': drone_id})
    # Act / Assert
    with pytest.raises(ValueError, match=r'drone_id must be in \[0, 1\] \(num_drones 2\)'):
        params.check(FleetConfig(num_drones=2))


def test_defaults_and_good_values_pass():
    # Act
    drone = build_config(DroneNodeParams, {'drone_id': 1, 'exit_on_finish': True})
    station = build_config(GroundStationNodeParams, {'tick_period_s': 1})
    # Assert
    drone.check(FleetConfig(num_drones=2))
    assert station.tick_period_s == 1.0 and AutopilotSimNodeParams().ground_truth_rate_hz > 0


@pytest.mark.parametrize('assignment, drone_id, refused', [
    ('fixed', 0, False),       # drone 0's sector (the south-west quarter) is inside the box
    ('fixed', 3, True),        # drone 3's (north-east) is not
    ('rotating', 0, True),     # drone 0 sweeps every sector in turn
])
def test_a_geofence_that_leaves_out_the_drones_sweep_sectors_is_refused(assignment, drone_id,
                                                                        refused):
    # Arrange: 4 drones on the 1200 m world (sectors of 590 m from the 10 m margin); a box
    # fence around the south-west quarter only
    config = build_config(FleetConfig, {
        'num_drones': 4, 'coverage.assignment': assignment, 'geofence.source': 'box',
        'geofence.east_min_m': 5.0, 'geofence.north_min_m': 5.0,
        'geofence.east_max_m': 605.0, 'geofence.north_max_m': 605.0})
    own = DroneNodeParams(drone_id=drone_id)
    # Act / Assert
    if refused:
        with pytest.raises(ValueError, match=r'not inside its geofence .*every plan would '
                                             r'be rejected'):
            own.check(config)
    else:
        own.check(config)
