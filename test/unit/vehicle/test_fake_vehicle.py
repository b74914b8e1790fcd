"""The kinematic fake behaves like a vehicle for code above the vehicle layer."""

import asyncio

import pytest

from fl_uav.vehicle.fake_vehicle import FakeVehicle
from fl_uav.vehicle.interface import MissionProgress, Vehicle, VehicleError, WaypointEnu


def test_fake_flies_a_plan_and_records_calls():
    # Prepare
    vehicle = FakeVehicle(home_enu_m=(5.0, 5.0, 0.0))
    progress = []

    async def fly():
        await vehicle.connect(1.0)
        await vehicle.arm()
        next_pose = asyncio.ensure_future(anext(vehicle.poses()))
        await asyncio.sleep(0)  # the stream subscribes on its first step
        await vehicle.takeoff(10.0)
        first_pose = await asyncio.wait_for(next_pose, 1.0)
        reached = await vehicle.fly_waypoints([WaypointEnu(20.0, 5.0, 10.0),
                                               WaypointEnu(20.0, 25.0, 12.0)], 5.0,
                                              on_progress=progress.append)
        at_end = tuple(vehicle.position_enu_m)
        await vehicle.return_to_launch()
        await vehicle.close()
        return first_pose, reached, at_end

    # Execute
    first_pose, reached, at_end = asyncio.run(fly())
    # Assert
    assert isinstance(vehicle, Vehicle)
    assert first_pose.up_m > 0.0
    assert reached == 2
    assert progress[-1] == MissionProgress(2, 2)
    assert at_end == pytest.approx((20.0, 25.0, 12.0))
    assert tuple(vehicle.position_enu_m) == pytest.approx((5.0, 5.0, 0.0))
    assert not vehicle.armed
    assert [c[0] for c in vehicle.calls] == ['connect', 'arm', 'takeoff', 'fly_waypoints',
                                             'return_to_launch', 'close']
    assert vehicle.battery_remaining < 1.0


def test_fake_injects_failures_and_guards_order():
    vehicle = FakeVehicle(fail_on={'arm': VehicleError('arm refused: COMMAND_DENIED')})

    async def attempt():
        with pytest.raises(VehicleError, match='before connect'):
            await vehicle.takeoff(5.0)
        await vehicle.connect(1.0)
        with pytest.raises(VehicleError, match='COMMAND_DENIED'):
            await vehicle.arm()
        with pytest.raises(VehicleError, match='not flying'):
            await vehicle.goto_enu(WaypointEnu(1.0, 1.0, 1.0), 2.0)

    asyncio.run(attempt())
