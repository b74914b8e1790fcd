"""End to end: a PX4 failsafe that holds the vehicle is not taken for the pilot's own Hold.

The DronePilot flies through the unmodified MAVSDK client (MavsdkVehicle) to the embedded
autopilot simulator over real UDP. After round 1 (the drone holds in the air in Mission), the
simulator's offboard-loss failsafe puts the vehicle in Hold: its HEARTBEAT says CRITICAL, the
vehicle reports ``failsafe``, and round 2 and a station-silent return send it nothing (no
mission, no mode, no return to launch). The operator's switch to Hold ends the failsafe and
hands it back: round 3 flies.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from fl_uav.autopilot_sim.flight import CommandResult, FlightMode
from fl_uav.fleet.messages import RoundTask
from test.e2e.pilot_scenario import PLAN, ROUND_DEADLINE_S, pilot_on, start_sim, until

pytestmark = [pytest.mark.e2e]




def _lose_offboard(truth) -> None:
    """On the sim's loop: Offboard with one set-point, then none (PX4's offboard-loss Hold)."""
    truth.offboard_setpoint(time.monotonic())
    assert truth.set_mode(FlightMode.OFFBOARD, time.monotonic()) == CommandResult.ACCEPTED


@pytest.mark.timeout(60)
def test_a_failsafe_hold_in_flight_is_not_flown_on_until_the_operator_hands_it_back(port_base):
    # Arrange: round 1 flown, the drone holding in the air
    sim, handle = start_sim(port_base)
    truth = sim.vehicles[0]
    seen = {}

    async def scenario():
        async with pilot_on(sim) as (pilot, vehicle):
            await pilot.run_round(RoundTask(1, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
            seen['round 1'] = (pilot.state.round_error, vehicle.failsafe)
            # Act: PX4's failsafe holds the vehicle; round 2 and the shutdown follow
            handle.call(lambda: _lose_offboard(truth))
            await until(lambda: vehicle.failsafe is True, 10.0)
            events_before = len(sim.events_of(0))
            await pilot.run_round(RoundTask(2, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
            seen['round 2'] = (pilot.state.round_error, pilot.state.taken_over)
            seen['return home'] = await pilot.return_home('station silent')
            seen['after'] = [e['event'] for e in sim.events_of(0)[events_before:]]
            seen['truth'] = (truth.mode, truth.failsafe, truth.airborne)
            # the operator switches it to Hold: PX4's failsafe ends, round 3 flies
            handle.call(lambda: truth.set_mode(FlightMode.HOLD, time.monotonic()))
            await until(lambda: vehicle.failsafe is False, 5.0)
            await pilot.run_round(RoundTask(3, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
            seen['round 3'] = (pilot.state.round_error, pilot.state.taken_over,
                               pilot.agent.waypoints_reached)

    try:
        asyncio.run(scenario())
    finally:
        handle.stop()
    # Assert: the vehicle reports the failsafe; nothing is sent over it
    reason = 'PX4 failsafe active (system_status CRITICAL), mode HOLD'
    assert seen['round 1'] == ('', False)
    assert f'round 2: not flying: {reason}' in seen['round 2'][0]
    assert seen['round 2'][1] == reason
    assert not {'mission_uploaded', 'mode', 'rtl', 'land'} & set(seen['after']), seen['after']
    assert seen['return home'] is False
    assert seen['truth'] == (FlightMode.HOLD, True, True)
    assert seen['round 3'] == ('', '', 4)
