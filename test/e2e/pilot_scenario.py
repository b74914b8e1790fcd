"""What the end-to-end pilot tests share: a DronePilot flown through the real MAVSDK client
(MavsdkVehicle) to the embedded autopilot simulator, with a stand-in agent, a small fence and a
two-waypoint plan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from fl_uav.autopilot_sim.autopilot import AutopilotSim, AutopilotSimThread
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.fleet.config import FlightConfig
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.messages import RoundTask
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.geofence import Geofence
from fl_uav.vehicle.mavsdk_vehicle import MavsdkVehicle
from test.conftest import BIND_PORT_OFFSET

FENCE = Geofence(-100.0, -100.0, 100.0, 100.0, min_up_m=5.0, max_up_m=60.0)
PLAN = (PlanWaypoint(20.0, 0.0, 8.0), PlanWaypoint(20.0, 20.0, 8.0))
FLIGHT = FlightConfig(speed_m_s=10.0, takeoff_altitude_m=8.0, land_on_finish=False,
                      connect_timeout_s=10.0, train_reserve_s=0.0)
ROUND_DEADLINE_S = 15.0       # the flight budget of each round (no reserve for training)


class StandInAgent:
    """What the pilot needs of a DroneAgent."""

    def __init__(self) -> None:
        self.waypoints_reached = 0

    def begin_flight(self, run_epoch: int) -> None:
        pass

    def train_round(self, task: RoundTask, superseded=None) -> int:
        return task.round_index


async def until(predicate, timeout_s: float, poll_s: float = 0.05) -> None:
    """Wait (polling) until ``predicate()`` holds; asyncio.TimeoutError after ``timeout_s``."""
    async def _poll() -> None:
        while not predicate():
            await asyncio.sleep(poll_s)
    await asyncio.wait_for(_poll(), timeout_s)


def start_sim(port_base: int) -> tuple[AutopilotSim, AutopilotSimThread]:
    """One simulated PX4 on the test's ports (time factor 10, heartbeats at 2 Hz), running in
    its thread; stop it with the handle."""
    sim = AutopilotSim(AutopilotSimConfig(
        num_vehicles=1, remote_base_port=port_base, bind_base_port=port_base + BIND_PORT_OFFSET,
        time_factor=10.0, heartbeat_rate_hz=2.0))
    return sim, sim.run_in_thread()


@contextlib.asynccontextmanager
async def pilot_on(sim: AutopilotSim) -> AsyncIterator[tuple[DronePilot, MavsdkVehicle]]:
    """A DronePilot (stand-in agent, FENCE, FLIGHT) on vehicle 0 of ``sim`` through the real
    MAVSDK client; shut down (a return to launch, at most 5 s) on the way out."""
    vehicle = MavsdkVehicle(f'udpin://127.0.0.1:{sim.config.remote_base_port}',
                            sim.config.origin)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(StandInAgent(), vehicle, FLIGHT, pool, geofence=FENCE)
        try:
            yield pilot, vehicle
        finally:
            await pilot.shutdown(rtl_timeout_s=5.0)
