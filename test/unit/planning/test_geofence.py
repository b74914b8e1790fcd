"""The geofence check and its config (fl_uav.planning.geofence)."""

from __future__ import annotations

import pytest

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.planning.coverage import PlanError, PlanWaypoint
from fl_uav.planning.geofence import (
    Geofence,
    GeofenceConfig,
    GeofenceViolationError,
    plan_violations,
    require_inside,
    resolve_geofence,
)

FENCE = Geofence(0.0, 0.0, 100.0, 200.0, min_up_m=5.0, max_up_m=120.0)


def test_waypoints_on_the_boundary_pass_and_every_offender_is_named():
    # Arrange
    plan = [PlanWaypoint(0.0, 200.0, 5.0), PlanWaypoint(100.0, 0.0, 120.0),
            PlanWaypoint(100.5, 10.0, 30.0), PlanWaypoint(50.0, 50.0, 121.0)]
    # Act
    violations = plan_violations(plan, FENCE)
    # Assert
    assert [(v.index, v.reason) for v in violations] == [(2, 'outside_fence'),
                                                         (3, 'above_band')]


def test_require_inside_raises_a_plan_error_naming_the_waypoint_and_the_fence():
    # Arrange
    plan = [PlanWaypoint(50.0, 50.0, 30.0), PlanWaypoint(50.0, 250.0, 30.0)]
    # Act
    with pytest.raises(GeofenceViolationError) as caught:
        require_inside(plan, FENCE)
    # Assert
    assert isinstance(caught.value, PlanError) and caught.value.reason == 'outside_fence'
    assert 'waypoint 1 (50.0, 250.0, 30.0) m is outside the box' in str(caught.value)
    assert 'north [0.0, 200.0] m' in str(caught.value)


def test_world_source_is_the_world_less_the_coverage_margin_and_box_is_explicit():
    # Arrange
    world = GeofenceConfig()
    box = GeofenceConfig(source='box', east_min_m=-50.0, north_min_m=0.0, east_max_m=50.0,
                         north_max_m=80.0, min_up_m=10.0, max_up_m=60.0)
    # Act
    from_world = resolve_geofence(world, world_size_m=1200.0, margin_m=10.0)
    from_box = resolve_geofence(box, world_size_m=1200.0, margin_m=10.0)
    # Assert
    assert from_world.box == (10.0, 10.0, 1190.0, 1190.0)
    assert (from_world.min_up_m, from_world.max_up_m) == (5.0, 120.0)
    assert from_box == Geofence(-50.0, 0.0, 50.0, 80.0, 10.0, 60.0)


@pytest.mark.parametrize('flat, key', [
    ({'geofence.source': 'polygon'}, 'polygon'),
    ({'geofence.source': 'box'}, 'east_min_m < east_max_m'),
    ({'geofence.min_up_m': 50.0, 'geofence.max_up_m': 40.0}, 'min_up_m < max_up_m'),
    ({'geofence.max_up_m': 25.0}, 'flight.takeoff_altitude_m 30.0 m is outside'),
    ({'geofence.min_up_m': 35.0}, 'flight.takeoff_altitude_m 30.0 m is outside'),
])
def test_bad_geofence_config_fails_at_start_naming_the_key(flat, key):
    # Arrange / Act / Assert
    with pytest.raises(ConfigError, match=key):
        build_config(FleetConfig, flat)


def test_fleet_config_resolves_the_drones_geofence():
    # Arrange
    config = build_config(FleetConfig, {'world.size_m': 600.0, 'coverage.margin_m': 20.0})
    # Act
    fence = config.geofence_enu()
    # Assert
    assert fence.box == (20.0, 20.0, 580.0, 580.0)
