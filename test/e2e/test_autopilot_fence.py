"""End to end: the drone's geofence on the autopilot, enforced by the autopilot.

The DronePilot flies through the unmodified MAVSDK client (MavsdkVehicle) to the embedded
autopilot simulator over real UDP. Before round 1 it uploads its box, widened by
``geofence.autopilot_margin_m``, as the autopilot's fence (MAVLink fence protocol). Then an
operator sends the vehicle east, out of the fence ("Go to location" in QGroundControl): the
autopilot stops it at the fence in its failsafe Hold (GF_ACTION 2) without the drone node, and
the drone node sends nothing over it. The operator's switch to Hold hands it back, and round 3
flies the plan from where it stopped.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from fl_uav.autopilot_sim.flight import FlightMode
from fl_uav.fleet.messages import RoundTask
from fl_uav.planning.geofence import GeofenceConfig
from fl_uav.world.geo import enu_to_geodetic
from test.e2e.pilot_scenario import (
    FENCE,
    PLAN,
    ROUND_DEADLINE_S,
    pilot_on,
    start_sim,
    until,
)

pytestmark = [pytest.mark.e2e]

MARGIN_M = GeofenceConfig().autopilot_margin_m
OUT_EAST_M = FENCE.east_max_m + 4.0 * MARGIN_M       # where the operator sends the vehicle


def _operator_goes_east(truth, origin) -> None:
    """On the sim's loop: the operator's "Go to location" far east of the fence."""
    lat_deg, lon_deg, alt_amsl_m = enu_to_geodetic(origin, OUT_EAST_M, 0.0, PLAN[0].up_m)
    truth.reposition(lat_deg, lon_deg, alt_amsl_m)


@pytest.mark.timeout(90)
def test_the_autopilot_stops_a_vehicle_flown_out_of_the_drones_fence(port_base):
    # Arrange: a simulated PX4 (GF_ACTION 2, Hold, its default) with no fence
    sim, handle = start_sim(port_base)
    truth = sim.vehicles[0]
    seen = {}

    async def scenario():
        async with pilot_on(sim) as (pilot, vehicle):
            # Act: round 1 (the fence goes up first), the operator's go-to, round 2
            await pilot.run_round(RoundTask(1, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
            seen['round 1'] = (pilot.state.round_error, pilot.state.autopilot_fence,
                               pilot.state.autopilot_fence_problem)
            seen['fence'] = handle.call(lambda: (
                truth.fence.allows(FENCE.east_max_m + 0.5 * MARGIN_M, 0.0),
                truth.fence.allows(FENCE.east_max_m + 1.5 * MARGIN_M, 0.0)))
            handle.call(lambda: _operator_goes_east(truth, sim.config.origin))
            await until(lambda: vehicle.failsafe is True, 30.0)
            await until(lambda: handle.call(lambda: truth.velocity_enu_m_s[0]) < 0.05, 20.0)
            seen['stopped at east_m'] = handle.call(lambda: truth.position_enu_m[0])
            events_before = len(sim.events_of(0))
            await pilot.run_round(RoundTask(2, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
            seen['round 2'] = pilot.state.round_error
            seen['after'] = [e['event'] for e in sim.events_of(0)[events_before:]]
            # the operator switches to Hold: PX4's failsafe ends, round 3 flies back in
            handle.call(lambda: truth.set_mode(FlightMode.HOLD, time.monotonic()))
            await until(lambda: vehicle.failsafe is False, 5.0)
            await pilot.run_round(RoundTask(3, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
            seen['round 3'] = (pilot.state.round_error, pilot.agent.waypoints_reached,
                               handle.call(lambda: truth.position_enu_m[0]))

    try:
        asyncio.run(scenario())
    finally:
        handle.stop()
    events = sim.events_of(0)
    names = [e['event'] for e in events]
    breach = next(e for e in events if e['event'] == 'geofence_breach')
    # Assert: the fence went up before the first arming, the box plus the margin
    assert seen['round 1'] == ('', "fl_uav's, uploaded", '')
    assert names.index('fence_uploaded') < names.index('armed')
    assert seen['fence'] == (True, False)
    # the autopilot, not the drone node, stopped the vehicle at its fence, in a failsafe Hold
    assert breach['action'] == 'hold'
    assert FENCE.east_max_m + MARGIN_M <= breach['east_m'] <= FENCE.east_max_m + 1.5 * MARGIN_M
    assert seen['stopped at east_m'] < FENCE.east_max_m + 4.0 * MARGIN_M - 10.0
    # nothing was sent over PX4's failsafe; handed back, round 3 flew the plan back inside
    assert 'PX4 failsafe active' in seen['round 2']
    assert not {'mission_uploaded', 'mode', 'rtl', 'land'} & set(seen['after']), seen['after']
    assert seen['round 3'][:2] == ('', 4)
    assert seen['round 3'][2] == pytest.approx(PLAN[-1].east_m, abs=2.0)
