"""End to end: a command the drone did not give is a takeover.

The DronePilot flies through the unmodified MAVSDK client (MavsdkVehicle) to the embedded
autopilot simulator over real UDP. After round 1 (holding in the air) a second MAVLink client
on the vehicle's port, as another laptop on the link would, forces a DISARM in the air or sets
PX4's Land mode. The pilot sees it (its status tick: taken_over_by), commands nothing more, and
round 2 neither arms nor takes off again: the vehicle stays on the ground, and says why.
"""

from __future__ import annotations

import asyncio

import pytest
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.fleet.drone_pilot import UNBIDDEN_DISARM
from fl_uav.fleet.messages import RoundTask
from test.conftest import BIND_PORT_OFFSET
from test.e2e.pilot_scenario import PLAN, ROUND_DEADLINE_S, pilot_on, start_sim, until
from test.unit.autopilot_sim.mav_client import MavClient

pytestmark = [pytest.mark.e2e]
FORCE_DISARM = 21196.0                  # MAV_CMD_COMPONENT_ARM_DISARM param2: in the air too
PX4_AUTO, PX4_AUTO_LAND = 4, 6          # PX4 custom main mode AUTO, sub mode LAND
STATUS_PERIOD_S = 0.5                   # the node's status tick, where it looks at the vehicle


def _rogue(client: MavClient, how: str) -> None:
    if how == 'forced_disarm':
        client.mav.command_long_send(1, 1, mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 0, 0.0,
                                     FORCE_DISARM, 0, 0, 0, 0, 0)
    else:
        custom_mode = (PX4_AUTO << 16) | (PX4_AUTO_LAND << 24)
        client.mav.set_mode_send(1, mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, custom_mode)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(('how', 'taken_over'), [('forced_disarm', UNBIDDEN_DISARM),
                                                 ('land_mode', 'LAND')])
def test_a_rogue_clients_disarm_or_land_is_a_takeover_and_the_drone_is_not_armed_again(
        port_base, how, taken_over):
    # Arrange: round 1 flown, the vehicle holding in the air
    sim, handle = start_sim(port_base)
    seen = {}

    async def scenario():
        async with pilot_on(sim) as (pilot, vehicle):
            await pilot.run_round(RoundTask(1, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
            seen['round 1'] = (pilot.state.round_error, vehicle.in_air)
            rogue = MavClient(0, port_base + BIND_PORT_OFFSET)
            try:
                # Act: the rogue's command; the node's status tick looks meanwhile
                _rogue(rogue, how)

                async def ticking() -> None:
                    while True:
                        pilot.taken_over_by()
                        await asyncio.sleep(STATUS_PERIOD_S)

                tick = asyncio.ensure_future(ticking())
                await until(lambda: vehicle.in_air is False and vehicle.armed is False, 40.0)
                tick.cancel()
            finally:
                rogue.close()
            events_before = len(sim.events_of(0))
            await pilot.run_round(RoundTask(2, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
            seen['round 2'] = (pilot.state.round_error, pilot.state.taken_over)
            seen['after'] = [e['event'] for e in sim.events_of(0)[events_before:]]

    try:
        asyncio.run(scenario())
    finally:
        handle.stop()
    # Assert: round 1 flew; round 2 refused to arm, naming the takeover; the vehicle was
    # neither armed nor taken off again
    assert seen['round 1'] == ('', True)
    error, remembered = seen['round 2']
    assert remembered == taken_over
    assert 'not arming: a failsafe or an operator took the vehicle over' in error, error
    assert not {'armed', 'takeoff'} & set(seen['after']), seen['after']
