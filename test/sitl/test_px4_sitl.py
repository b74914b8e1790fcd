"""Against a real PX4 SITL instance: runs only where one is reachable (PX4_SITL_URL is set)."""

from __future__ import annotations

import asyncio
import os

import pytest

from fl_uav.vehicle.interface import WaypointEnu
from fl_uav.vehicle.mavsdk_vehicle import MavsdkVehicle
from fl_uav.world.geo import GeoOrigin

pytestmark = [pytest.mark.sitl, pytest.mark.skipif(
    'PX4_SITL_URL' not in os.environ,
    reason='needs PX4 SITL (set PX4_SITL_URL, e.g. udpin://0.0.0.0:14540)')]


def test_vehicle_layer_flies_px4_sitl():
    async def fly() -> int:
        vehicle = MavsdkVehicle(os.environ['PX4_SITL_URL'], GeoOrigin())
        await vehicle.connect(60.0)
        await vehicle.arm()
        await vehicle.takeoff(10.0)
        reached = await vehicle.fly_waypoints([WaypointEnu(10.0, 0.0, 10.0),
                                               WaypointEnu(10.0, 10.0, 10.0)], 5.0)
        await vehicle.return_to_launch()
        await vehicle.close()
        return reached

    assert asyncio.run(fly()) == 2
