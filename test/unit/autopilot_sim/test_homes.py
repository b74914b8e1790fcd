"""The embedded simulator's vehicle homes: a large fleet stands inside the world's geofence."""

from __future__ import annotations

from pathlib import Path

from fl_uav.configschema import build_config, read_params_file
from fl_uav.fleet.config import FleetConfig

REPO = Path(__file__).resolve().parents[3]


def test_every_home_of_the_largest_fleet_is_inside_the_shipped_geofence():
    # Arrange: the shipped fleet config at the largest fleet it allows
    flat = {**read_params_file(REPO / 'config' / 'fleet.yaml'), 'num_drones': 250}
    config = build_config(FleetConfig, flat)
    fence = config.geofence_enu()
    # Act
    homes = [config.autopilot.home_enu_m(i) for i in range(config.num_drones)]
    # Assert: inside the box (drones refuse to arm otherwise), and no two homes coincide
    outside = [(i, h) for i, h in enumerate(homes)
               if not (fence.east_min_m <= h[0] <= fence.east_max_m
                       and fence.north_min_m <= h[1] <= fence.north_max_m)]
    assert outside == []
    assert len(set(homes)) == len(homes)
