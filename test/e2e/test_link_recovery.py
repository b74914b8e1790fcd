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

from fl_uav.fleet.config import FlightConfig
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.messages import RoundTask
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.geofence import Geofence
from fl_uav.sim.autopilot import AutopilotSim, AutopilotSimConfig, AutopilotSimThread
from fl_uav.vehicle.mavsdk_vehicle import MavsdkVehicle
from test.conftest import BIND_PORT_OFFSET

pytestmark = [pytest.mark.e2e]
ORIGIN_ALT_AMSL_M = 488.0
FENCE = Geofence(-100.0, -100.0, 100.0, 100.0, min_up_m=5.0, max_up_m=60.0)
PLAN = (PlanWaypoint(20.0, 0.0, 8.0), PlanWaypoint(20.0, 20.0, 8.0))
FLIGHT = FlightConfig(speed_m_s=10.0, takeoff_altitude_m=8.0, land_on_finish=False,
                      connect_timeout_s=10.0, train_reserve_s=0.0)
ROUND_DEADLINE_S = 15.0       # the flight budget of each round (no reserve for training)


class _Agent:
    """What the pilot needs of a DroneAgent."""

    def __init__(self) -> None:
        self.waypoints_reached = 0

    def begin_flight(self, run_epoch: int) -> None:
        pass

    def train_round(self, task: RoundTask, superseded=None) -> int:
        return task.round_index


def _start_sim(port_base: int, site_alt_amsl_m: float) -> tuple[AutopilotSim, AutopilotSimThread]:
    """An autopilot booting at a site whose ground is at ``site_alt_amsl_m``."""
    sim = AutopilotSim(AutopilotSimConfig(
        num_vehicles=1, remote_base_port=port_base, bind_base_port=port_base + BIND_PORT_OFFSET,
        time_factor=10.0, heartbeat_rate_hz=2.0, origin_alt_amsl_m=site_alt_amsl_m))
    return sim, sim.run_in_thread()


async def _until(predicate, timeout_s: float, poll_s: float = 0.05) -> None:
    async def _poll() -> None:
        while not predicate():
            await asyncio.sleep(poll_s)
    await asyncio.wait_for(_poll(), timeout_s)


@pytest.mark.timeout(90)
@pytest.mark.parametrize('home_below_origin_m, flies', [(0.0, True), (25.0, False)])
def test_after_an_autopilot_reboot_the_next_round_rechecks_home_and_arms_again(
        port_base, home_below_origin_m, flies):
    # Prepare: round 1 flown, the drone holding in the air.
    first_sim, first_handle = _start_sim(port_base, ORIGIN_ALT_AMSL_M)
    handles = [first_handle]
    agent = _Agent()

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
                await _until(lambda: vehicle.link_losses == 1, 10.0)
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
