"""The drone's round as a coroutine: fly the plan through the Vehicle, then train off-loop.

Asynchronous and ROS-free; the drone node runs it on the vehicle's event loop
(:class:`fl_uav.vehicle.runner.VehicleRunner`) and publishes what it returns. Every plan is
checked against the drone's own geofence (:mod:`fl_uav.planning.geofence`) before anything is
sent to the autopilot; a plan that leaves it is rejected whole, counted by reason and logged,
and the drone flies nothing that round (it holds in the air, or stays on the ground). With an
:class:`~fl_uav.fleet.onboard_planner.OnboardPlanner`, the round's plan is first replaced by the
drone's own mission (its 2CEOAFL q_t after the survey rounds), which passes the same check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from fl_uav.fleet.config import FlightConfig
from fl_uav.fleet.drone_agent import DroneAgent, UpdateReport
from fl_uav.fleet.express_carrier import (
    ExpressCarrier,
    ExpressLink,
    ExpressTaskError,
    TourLog,
)
from fl_uav.fleet.messages import PoseSample, RoundTask
from fl_uav.fleet.onboard_planner import OnboardPlanner
from fl_uav.planning.geofence import Geofence, GeofenceViolationError, require_inside
from fl_uav.vehicle.interface import Vehicle, VehicleError, WaypointEnu

_log = logging.getLogger(__name__)


@dataclass
class FlightState:
    """What the pilot has done so far."""

    connected: bool = False
    armed: bool = False
    airborne: bool = False
    landed_after_flight: bool = False
    last_error: str = ''


class DronePilot:
    """Flies each round's plan and hands the buffer to the agent for training."""

    def __init__(self, agent: DroneAgent, vehicle: Vehicle, flight: FlightConfig,
                 train_executor: Executor, *, geofence: Geofence,
                 planner: OnboardPlanner | None = None) -> None:
        self.agent = agent
        self.planner = planner
        self.vehicle = vehicle
        self.flight = flight
        self.geofence = geofence
        self.state = FlightState()
        self.plans_rejected: Counter[str] = Counter()   # by the first violation's reason
        self._train_executor = train_executor
        self._lock: asyncio.Lock | None = None

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def ensure_connected(self) -> None:
        """Connect and wait until the autopilot is healthy (once)."""
        async with self._guard():
            if not self.state.connected:
                await self.vehicle.connect(self.flight.connect_timeout_s)
                self.state.connected = True

    async def ensure_airborne(self) -> None:
        """Connect, arm and take off if not done yet."""
        await self.ensure_connected()
        async with self._guard():
            if not self.state.airborne:
                await self.vehicle.arm()
                self.state.armed = True
                await self.vehicle.takeoff(self.flight.takeoff_altitude_m)
                self.state.airborne = True

    def checked_mission(self, task: RoundTask) -> list[WaypointEnu]:
        """The round's plan as a mission, if every waypoint is inside the geofence; else
        GeofenceViolationError naming the waypoints and why."""
        require_inside(task.plan, self.geofence)
        return [WaypointEnu(w.east_m, w.north_m, w.up_m) for w in task.plan]

    async def fly_plan(self, task: RoundTask) -> int:
        """Fly the round's waypoints as a mission; returns the waypoints reached. The plan is
        checked before arming or uploading: a plan outside the geofence raises
        GeofenceViolationError and nothing is sent to the vehicle."""
        if not task.plan:
            return 0
        waypoints = self.checked_mission(task)
        await self.ensure_airborne()
        return await self.vehicle.fly_waypoints(waypoints, self.flight.speed_m_s)

    def flight_budget_s(self, task: RoundTask) -> float:
        """Time the flight may take so that training and upload still meet the deadline."""
        return max(self.flight.min_flight_budget_s,
                   task.deadline_s - self.flight.train_reserve_s)

    async def own_mission(self, task: RoundTask) -> RoundTask:
        """The task with the onboard planner's mission for this round as its plan (planning,
        when due, runs on the training executor, off the vehicle loop)."""
        if self.planner is None:
            return task
        pose = self.agent.latest_pose()
        start_enu_m = None if pose is None else (pose.east_m, pose.north_m)
        if not self.planner.onboard:
            return self.planner.round_task(task, start_enu_m)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._train_executor, self.planner.round_task, task,
                                          start_enu_m)

    async def run_round(self, task: RoundTask) -> UpdateReport:
        """Choose the round's mission (onboard planner), fly it (bounded by the round's
        deadline), then train; a failed or cut-short flight is recorded and the drone still
        reports what it learned."""
        task = await self.own_mission(task)
        try:
            reached = await asyncio.wait_for(self.fly_plan(task), self.flight_budget_s(task))
            self.agent.waypoints_reached += reached
        except GeofenceViolationError as exc:
            self.plans_rejected[exc.reason] += 1
            self.state.last_error = f'round {task.round_index}: plan rejected: {exc}'
            _log.error('round %d: plan rejected, flying nothing (holding): %s',
                       task.round_index, exc)
        except (VehicleError, TimeoutError) as exc:
            reason = str(exc) or f'flight budget of {self.flight_budget_s(task):.0f} s exceeded'
            self.state.last_error = f'round {task.round_index}: {reason}'
            # The autopilot may have landed (failsafe); arm and take off again next round.
            self.state.airborne = not isinstance(exc, VehicleError)
            _log.warning('flight failed in round %d: %s', task.round_index, reason)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._train_executor, self.agent.train_round, task)

    async def run_express_tour(self, task: RoundTask, carrier: ExpressCarrier,
                               link: ExpressLink, speed_m_s: float) -> bytes:
        """FedEx in the fleet: fly the round's tour and return u_k's upload frame.

        The whole tour (a hover waypoint per client, then the station) is checked against
        the geofence first; then each leg is flown as a one-item MAVLink mission, after which
        the autopilot holds position (PX4 loiters at mission end) over the client for the
        exchange (:meth:`ExpressCarrier.visit`), so the hover lasts as long as the exchange
        and never less. The tour is bounded by the round's deadline like a standard flight;
        a rejected plan, a vehicle error or the deadline end the tour early and the UAV
        uploads what it collected. A task whose express knob is unusable raises
        ExpressTaskError (nothing flown, nothing uploaded; the station's deadline covers it).
        """
        try:
            tour = carrier.start_tour(task)
        except ExpressTaskError as exc:
            self.state.last_error = f'round {task.round_index}: {exc}'
            _log.error('%s', exc)
            carrier.tour = None
            raise
        try:
            await asyncio.wait_for(self._fly_tour(task, carrier, link, speed_m_s),
                                   self.flight_budget_s(task))
        except GeofenceViolationError as exc:
            self.plans_rejected[exc.reason] += 1
            tour.error = f'plan rejected: {exc.reason}'
            self.state.last_error = f'round {task.round_index}: plan rejected: {exc}'
            _log.error('round %d: tour rejected, flying nothing: %s', task.round_index, exc)
        except (VehicleError, TimeoutError) as exc:
            reason = str(exc) or f'flight budget of {self.flight_budget_s(task):.0f} s exceeded'
            tour.error = reason
            self.state.last_error = f'round {task.round_index}: {reason}'
            self.state.airborne = not isinstance(exc, VehicleError)
            _log.warning('tour failed in round %d: %s', task.round_index, reason)
        tour.missed.extend(c for c in tour.clients
                           if c not in tour.exchanged and c not in tour.missed)
        return carrier.upload_frame(self.agent.waypoints_reached)

    async def _fly_tour(self, task: RoundTask, carrier: ExpressCarrier, link: ExpressLink,
                        speed_m_s: float) -> None:
        mission = self.checked_mission(task)     # the whole tour, before anything is flown
        if not mission:
            return
        await self.ensure_airborne()
        tour = carrier.tour
        for client, waypoint in zip(tour.clients, mission[:-1]):
            await self._fly_leg(waypoint, tour, speed_m_s)
            await carrier.visit(client, link)
        await self._fly_leg(mission[-1], tour, speed_m_s)

    async def _fly_leg(self, waypoint: WaypointEnu, tour: TourLog, speed_m_s: float) -> None:
        reached = await self.vehicle.fly_waypoints([waypoint], speed_m_s)
        tour.waypoints_reached += reached
        self.agent.waypoints_reached += reached

    async def finish(self) -> None:
        """Come home and land at the end of the run."""
        if not self.state.airborne:
            return
        if self.flight.land_on_finish:
            await self.vehicle.return_to_launch()
        self.state.airborne = False
        self.state.landed_after_flight = True

    async def stream_poses(self, on_pose: Callable[[PoseSample], None]) -> None:
        """Forward telemetry poses to the agent and to a callback (e.g. a publisher)."""
        async for pose in self.vehicle.poses():
            # Stamped on receipt with the system clock, the clock camera frames carry.
            sample = PoseSample(pose.east_m, pose.north_m, pose.up_m, pose.yaw_rad, time.time())
            self.agent.on_pose(sample)
            on_pose(sample)
