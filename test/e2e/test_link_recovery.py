"""End to end: a drone's pilot keeps flying rounds across an autopilot reboot, without a restart.

The DronePilot flies through the unmodified MAVSDK client (MavsdkVehicle) to the embedded
autopilot simulator over real UDP. After round 1 (the drone holds in the air) the autopilot
process goes away long enough for MAVSDK to declare the link lost, and a new one boots on the
same ports: disarmed on the ground, no mission, possibly at another altitude. Round 2 must
re-check readiness and home, then arm, take off and upload its mission again; with a home far
from the configured origin altitude it must refuse to arm and fly nothing.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from fl_uav.autopilot_sim.autopilot import AutopilotSim, AutopilotSimThread
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.messages import RoundTask
from fl_uav.vehicle.mavsdk_vehicle import MavsdkVehicle
from test.conftest import BIND_PORT_OFFSET
from test.e2e.pilot_scenario import (
    FENCE,
    FLIGHT,
    PLAN,
    ROUND_DEADLINE_S,
    StandInAgent,
    until,
)

pytestmark = [pytest.mark.e2e]
ORIGIN_ALT_AMSL_M = 488.0



def _start_sim(port_base: int, site_alt_amsl_m: float) -> tuple[AutopilotSim, AutopilotSimThread]:
    """An autopilot booting at a site whose ground is at ``site_alt_amsl_m``."""
    sim = AutopilotSim(AutopilotSimConfig(
        num_vehicles=1, remote_base_port=port_base, bind_base_port=port_base + BIND_PORT_OFFSET,
        time_factor=10.0, heartbeat_rate_hz=2.0, origin_alt_amsl_m=site_alt_amsl_m))
    return sim, sim.run_in_thread()



@pytest.mark.timeout(90)
@pytest.mark.parametrize('home_below_origin_m, flies', [(0.0, True), (25.0, False)])
def test_after_an_autopilot_reboot_the_next_round_rechecks_home_and_arms_again(
        port_base, home_below_origin_m, flies):
    # Prepare: round 1 flown, the drone holding in the air.
    first_sim, first_handle = _start_sim(port_base, ORIGIN_ALT_AMSL_M)
    handles = [first_handle]
    agent = StandInAgent()

    async def scenario():
        vehicle = MavsdkVehicle(f'udpin://127.0.0.1:{port_base}', first_sim.config.origin)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pilot = DronePilot(agent, vehicle, FLIGHT, pool, geofence=FENCE)
            try:
                await pilot.run_round(RoundTask(1, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
                after_first = pilot.state.last_error
                # Execute: the autopilot goes away until MAVSDK gives the link up, and boots
                # again (ground at the origin, or 25 m lower).
                first_handle.stop()
                await until(lambda: vehicle.link_losses == 1, 10.0)
                sim, handle = _start_sim(port_base, ORIGIN_ALT_AMSL_M - home_below_origin_m)
                handles.append(handle)
                await pilot.run_round(RoundTask(2, {}, PLAN, deadline_s=ROUND_DEADLINE_S))
                return sim, after_first, pilot.state.last_error, pilot.in_flight
            finally:
                await pilot.shutdown(rtl_timeout_s=10.0)

    try:
        sim, after_first, after_reboot, in_flight = asyncio.run(scenario())
    finally:
        for handle in handles:
            handle.stop()
    # Assert
    assert after_first == ''
    events = [e['event'] for e in sim.events_of(0)]
    if flies:
        assert after_reboot == ''
        assert agent.waypoints_reached == 4
        for earlier, later in [('armed', 'takeoff'), ('takeoff', 'mission_uploaded'),
                               ('mission_uploaded', 'mission_complete')]:
            assert events.index(earlier) < events.index(later), (earlier, later, events)
    else:
        assert 'max_home_offset_up_m' in after_reboot and '-25.0 m' in after_reboot
        assert agent.waypoints_reached == 2 and not in_flight
        assert not {'armed', 'takeoff', 'mission_uploaded'} & set(events), events
        assert not sim.vehicles[0].armed
