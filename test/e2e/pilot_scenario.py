"""What the end-to-end pilot tests share: a DronePilot flown through the real MAVSDK client
(MavsdkVehicle) to the embedded autopilot simulator, with a stand-in agent, a small fence and a
two-waypoint plan."""

from __future__ import annotations

import asyncio

from fl_uav.fleet.config import FlightConfig
from fl_uav.fleet.messages import RoundTask
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.geofence import Geofence

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
