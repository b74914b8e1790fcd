"""The drone's round as a coroutine: fly the plan through the Vehicle, then train off-loop.

Asynchronous and ROS-free; the drone node runs it on the vehicle's event loop
(:class:`fl_uav.vehicle.runner.VehicleRunner`) and publishes what it returns. Every plan is
checked against the drone's own geofence (:mod:`fl_uav.planning.geofence`) before anything is
sent to the autopilot; a plan that leaves it is rejected whole, counted by reason and logged,
and the drone flies nothing that round (it holds in the air, or stays on the ground). With an
:class:`~fl_uav.fleet.onboard_planner.OnboardPlanner`, the round's plan is first replaced by the
drone's own mission (its 2CEOAFL q_t after the survey rounds), which passes the same check.

Telemetry (:meth:`DronePilot.stream_telemetry`) follows the vehicle link: it starts whenever a
connection is established, by itself or by a round's :meth:`DronePilot.ensure_airborne`, so a
drone whose autopilot comes up late still gets poses (and keeps its camera frames). A link lost
once connected fails the flight step in progress (the vehicle raises); the next round's flight
checks readiness again (link, health, a fresh home) and, if the autopilot is on the ground
(rebooted, or landed unseen, e.g. during a link loss), checks the home altitude, arms and
takes off again before its mission is uploaded.
:meth:`DronePilot.shutdown` ends the pilot: a vehicle still in the air is sent home (RTL,
waited for at most a given time), then the link is closed.

A vehicle in the air in a mode the pilot did not leave it in (:data:`PILOT_MODES`) is held by
a failsafe (PX4's battery, geofence or data-link action) or by an operator (RC,
QGroundControl): the pilot then commands nothing, neither a round's mission nor a return to
launch, so it never overrides the autopilot's return or landing or takes the vehicle from the
pilot on the sticks. Switching the vehicle back to Hold in the air hands it back for the next
round; a vehicle taken over and then landed is not armed again by this node (restart the drone
node to fly it again), so its propellers never start by themselves after an abort. A disarm the
pilot did not command (it never disarms a vehicle it flies; PX4 does after the pilot's own
return) is a takeover too: forced in the air by another MAVLink client or the RC, or the
vehicle found landed and disarmed with the link up since the arming (:data:`UNBIDDEN_DISARM`;
a rebooted autopilot drops the link first and is armed again as before).

A failsafe whose action is Hold (offboard or data-link loss, GF_ACTION Hold, ...) leaves the
vehicle in a pilot mode, so the mode alone cannot tell it from the pilot's own Hold: PX4 says a
failsafe acts in its HEARTBEAT (system_status CRITICAL while armed; the vehicle's ``failsafe``).
A vehicle in the air with a failsafe reported is taken over whatever its mode, and it is handed
back only in Hold in the air with no failsafe reported (the operator's switch to Hold ends
PX4's failsafe). No arming while a failsafe is reported.

Before its first flight the pilot puts the drone's geofence on the autopilot as well
(:mod:`fl_uav.fleet.autopilot_fence`, ``geofence.autopilot_fence``), so that PX4 enforces it
(GF_ACTION) whatever the companion computer does; until that succeeds the drone does not fly.
After a lost link it looks again (the autopilot may have rebooted or been replaced).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass

from fl_uav.compression.signing import now_ms
from fl_uav.fleet.autopilot_fence import fence_for_autopilot, gf_action_problem, plan_fence
from fl_uav.fleet.config import FlightConfig
from fl_uav.fleet.drone_agent import DroneAgent, UpdateReport
from fl_uav.fleet.express_carrier import (
    ExpressCarrier,
    ExpressLink,
    ExpressTaskError,
    TourLog,
)
from fl_uav.fleet.messages import PoseSample, RoundTask, short_flight_error
from fl_uav.fleet.onboard_planner import OnboardPlanner
from fl_uav.fleet.pilot_phase import Phase
from fl_uav.planning.geofence import (
    Geofence,
    GeofenceConfig,
    GeofenceViolationError,
    require_inside,
)
from fl_uav.vehicle.interface import BatteryStatus, Vehicle, VehicleError, WaypointEnu

_log = logging.getLogger(__name__)

#: The flight modes the pilot leaves a vehicle in (MAVSDK FlightMode names): PX4's Hold after
#: a take-off, Takeoff and Mission. In any other mode in the air a failsafe or an operator has
#: the vehicle (RETURN_TO_LAUNCH, LAND, POSCTL, ALTCTL, MANUAL, ...).
PILOT_MODES = frozenset({'HOLD', 'TAKEOFF', 'MISSION'})
#: The mode of a return to launch (the pilot's own after it commanded one).
RETURN_MODE = 'RETURN_TO_LAUNCH'
#: A takeover by a disarm the pilot never commands: the vehicle it flies reported disarmed
#: (forced in the air by another MAVLink client or the RC's kill switch, or landed and
#: disarmed by someone else), with the autopilot link up since the pilot armed it.
UNBIDDEN_DISARM = 'a disarm the drone node did not command: another MAVLink client or the RC'


@dataclass
class FlightState:
    """What the pilot has done so far."""

    connected: bool = False
    armed: bool = False
    airborne: bool = False
    landed_after_flight: bool = False
    last_error: str = ''     # the last flight error of the node's life, 'round N: why'
    round_error: str = ''    # the round in progress or last flown: its error ('' = none)
    phase: str = Phase.WAITING
    # The mode a failsafe or an operator took the vehicle over in, seen in the air ('' none);
    # cleared when the vehicle is handed back (Hold, in the air), kept once it landed. For a
    # PX4 failsafe: 'PX4 failsafe active (system_status CRITICAL), mode HOLD'.
    taken_over: str = ''
    taken_over_by_failsafe: bool = False    # the takeover remembered was a PX4 failsafe
    # The autopilot's own fence, in a few words ('' = not settled yet: the drone does not fly)
    autopilot_fence: str = ''
    # Why the autopilot's fence does not stop a breach ('' = it does, or not known)
    autopilot_fence_problem: str = ''


class DronePilot:
    """Flies each round's plan and hands the buffer to the agent for training."""

    def __init__(self, agent: DroneAgent, vehicle: Vehicle, flight: FlightConfig,
                 train_executor: Executor, *, geofence: Geofence,
                 planner: OnboardPlanner | None = None,
                 geofence_config: GeofenceConfig | None = None) -> None:
        """``geofence``: where the drone may fly; ``geofence_config``: its
        ``autopilot_fence`` and ``autopilot_margin_m`` say what goes on the autopilot (the
        defaults when None)."""
        self.agent = agent
        self.planner = planner
        self.vehicle = vehicle
        self.flight = flight
        self.geofence = geofence
        self.geofence_config = GeofenceConfig() if geofence_config is None else geofence_config
        self.state = FlightState()
        self.plans_rejected: Counter[str] = Counter()   # by the first violation's reason
        self._train_executor = train_executor
        self._lock: asyncio.Lock | None = None
        self._link_up: asyncio.Event | None = None   # set on every established connection
        self._link_losses_checked = 0   # vehicle.link_losses at the last readiness check
        self._run_epoch = 0             # the run (RoundTask.run_epoch) of the last round flown
        # (run_epoch, round_index, opened_ms) of the newest round begun: older rounds (and a
        # round the station opened again after a restart, fl_uav.fleet.round_gate) supersede
        self._newest_round = (0, 0, 0)
        self._own_return = False        # RETURN_TO_LAUNCH is the pilot's own command
        self._armed_link_losses = 0     # vehicle.link_losses when the pilot last armed it
        self._closed = False

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _link_event(self) -> asyncio.Event:
        if self._link_up is None:
            self._link_up = asyncio.Event()
        return self._link_up

    async def ensure_connected(self) -> None:
        """Connect and wait until the autopilot is healthy (once); wakes the telemetry. After a
        link loss, waits again for the link, health and a fresh home (the vehicle's connect)."""
        async with self._guard():
            losses = self.vehicle.link_losses
            if self.state.connected and losses == self._link_losses_checked:
                return
            if self.state.connected:
                _log.warning('the autopilot link was lost since the last check: checking '
                             'readiness again (link, health, home, its fence)')
                # A rebooted or replaced autopilot may hold another fence, or none
                self.state.autopilot_fence = ''
            await self.vehicle.connect(self.flight.connect_timeout_s)
            self._link_losses_checked = losses
            if not self.state.connected:
                self.state.connected = True
                self._link_event().set()

    async def ensure_airborne(self) -> None:
        """Connect, arm and take off if not done yet. A vehicle the autopilot reports armed
        and in the air (this process restarted in flight, or the link dropped during a
        take-off) is taken as airborne: no second arm or take-off command in the air."""
        await self.ensure_connected()
        async with self._guard():
            mode = self.taken_over_by()
            if mode and self.state.taken_over_by_failsafe:
                raise VehicleError(
                    f'not flying: {mode}: PX4 holds the vehicle and the drone node does not '
                    f'take it back; switch it to Hold (QGroundControl, RC) to end the failsafe '
                    f'and hand it back, or let it land')
            if mode:
                raise VehicleError(
                    f'not flying: the autopilot flies the vehicle in {mode} (a failsafe, or an '
                    f'operator on the RC or QGroundControl) and the drone node does not take it '
                    f'back; switch it to Hold to hand it back, or let it land')
            if (self.state.taken_over_by_failsafe and self.vehicle.in_air is True
                    and self.vehicle.flight_mode != 'HOLD'):
                raise VehicleError(
                    f'not flying: the vehicle was taken over ({self.state.taken_over}) and is '
                    f'now in {self.vehicle.flight_mode or "an unknown mode"}; the drone node '
                    f'flies it on only once it is in Hold in the air with no PX4 failsafe')
            if self.state.taken_over and self.vehicle.in_air is False:
                raise VehicleError(
                    f'not arming: a failsafe or an operator took the vehicle over '
                    f'({self.state.taken_over}) and it is on the ground; the drone node does not '
                    f'start it again by itself: restart the drone node to fly it')
            if self.state.taken_over and self.vehicle.in_air is True:
                _log.warning('the vehicle is handed back (mode %s, was %s): flying on from '
                             'where it is', self.vehicle.flight_mode, self.state.taken_over)
                self.state.taken_over = ''
                self.state.taken_over_by_failsafe = False
            if self.state.airborne and self.vehicle.in_air is False:
                _log.warning('the vehicle is on the ground (autopilot rebooted, or landed while '
                             'unseen): checking home, arming and taking off again')
                self.state.airborne = self.state.armed = False
            if (not self.state.airborne and self.vehicle.armed is True
                    and self.vehicle.in_air is True):
                self.state.armed = True     # in flight whatever the home check says below
                self._armed_link_losses = self.vehicle.link_losses
                self._check_home()
                _log.warning('the autopilot reports the vehicle armed and in the air already '
                             '(this node restarted in flight, or a flight step failed in the '
                             'air): flying on from where it is, without arming or taking off')
                self.state.armed = self.state.airborne = True
            # The pilot flies on (a mission follows): a return to launch from now on is not
            # its own, also after an own return that failed or was cut short in the air.
            self._own_return = False
            if not self.state.autopilot_fence:
                await self._settle_autopilot_fence()
            if not self.state.airborne:
                self._check_home()
                if self.failsafe_reported:
                    raise VehicleError(
                        f'not arming: PX4 reports a failsafe (system_status '
                        f'{self._system_status()}); the drone node arms only once it is over')
                await self.vehicle.arm()
                self.state.armed = True
                self._armed_link_losses = self.vehicle.link_losses
                await self.vehicle.takeoff(self.flight.takeoff_altitude_m)
                self.state.airborne = True

    async def _settle_autopilot_fence(self) -> None:
        """Put the drone's fence on the autopilot as ``geofence.autopilot_fence`` says
        (:func:`fl_uav.fleet.autopilot_fence.plan_fence`); ``state.autopilot_fence`` says
        what it holds. A VehicleError (nothing flown) if it cannot be read or uploaded: the
        next round tries again."""
        config = self.geofence_config
        ours = fence_for_autopilot(self.geofence, config.autopilot_margin_m)
        try:
            found = None
            if config.autopilot_fence == 'upload':
                found = await self.vehicle.download_fence()
            plan = plan_fence(config.autopilot_fence, ours, found)
            if plan.action == 'upload':
                await self.vehicle.upload_fence(plan.fence)
        except VehicleError as exc:
            # The remedy first: a flight error reported with the update keeps 200 characters
            raise VehicleError(
                f'not flying: the geofence could not be put on the autopilot '
                f'(geofence.autopilot_fence off flies without it): {exc}') from exc
        self.state.autopilot_fence = plan.summary
        problem = gf_action_problem(getattr(self.vehicle, 'geofence_action', None),
                                    plan.action != 'off')
        self.state.autopilot_fence_problem = problem
        _log.info("autopilot geofence: %s (fl_uav's box %s, %g m outside it)", plan.summary,
                  self.geofence.describe(), config.autopilot_margin_m)
        if plan.action == 'keep':
            _log.warning("the autopilot holds a fence of its own (%s): kept, not replaced by "
                         "fl_uav's; fl_uav still checks every plan against its box. "
                         "geofence.autopilot_fence replace puts fl_uav's there instead",
                         plan.fence.describe())
        if problem:
            _log.warning('%s', problem)

    @property
    def failsafe_reported(self) -> bool:
        """PX4 reports a failsafe acting (its HEARTBEAT's system_status; the vehicle's
        ``failsafe``, None when not heard or not known to the vehicle)."""
        return getattr(self.vehicle, 'failsafe', None) is True

    def _system_status(self) -> str:
        return getattr(self.vehicle, 'system_status', '') or 'unknown'

    def taken_over_by(self) -> str:
        """What holds the vehicle in the air if not the pilot, else '': a PX4 failsafe
        reported (whatever the mode: 'PX4 failsafe active (system_status CRITICAL), mode
        HOLD'), or the autopilot's flight mode if a failsafe or an operator flies it in a mode
        not in :data:`PILOT_MODES` (other than the pilot's own return to launch). A takeover
        seen is remembered in ``state.taken_over``. So is a vehicle the pilot flies found
        disarmed though the pilot never disarms it and the link stayed up
        (:data:`UNBIDDEN_DISARM`; returned while it falls, remembered once on the ground)."""
        if not self.state.taken_over and self._disarmed_unbidden():
            _log.error('the vehicle was disarmed %s, not by the drone node (another MAVLink '
                       'client, or the RC): it commands nothing more and does not arm it '
                       'again until it is handed back',
                       'in the air' if self.vehicle.in_air else 'on the ground')
            self.state.taken_over = UNBIDDEN_DISARM
            self.state.taken_over_by_failsafe = False
            self.state.armed = self.state.airborne = False
        if (self.state.taken_over == UNBIDDEN_DISARM and self.vehicle.in_air is True
                and self.vehicle.armed is False):
            return UNBIDDEN_DISARM
        mode = self.vehicle.flight_mode
        if self.vehicle.in_air is True and self.failsafe_reported:
            reason = (f'PX4 failsafe active (system_status {self._system_status()}), mode '
                      f'{mode or "unknown"}')
            self.state.taken_over = reason
            self.state.taken_over_by_failsafe = True
            return reason
        if (self.vehicle.in_air is True and mode and mode not in PILOT_MODES
                and not (self._own_return and mode == RETURN_MODE)):
            self.state.taken_over = mode
            self.state.taken_over_by_failsafe = False
            return mode
        return ''

    def _disarmed_unbidden(self) -> bool:
        """The vehicle the pilot armed and flew reports disarmed, not after the pilot's own
        return, with no autopilot link lost since the arming (a rebooted autopilot also comes
        up disarmed: that is no takeover)."""
        return (self.state.armed and self.state.airborne and self.vehicle.armed is False
                and not self._own_return
                and self.vehicle.link_losses == self._armed_link_losses)

    async def _return_to_launch(self) -> None:
        """Command the vehicle home (its RETURN_TO_LAUNCH is then the pilot's own mode)."""
        self._own_return = True
        await self.vehicle.return_to_launch()

    def _begin_round(self, task: RoundTask) -> None:
        """A round's flight starts: no error yet; a new run's figures and errors start over;
        older rounds are superseded from now on."""
        self._newest_round = max(self._newest_round, _round_key(task))
        self.state.round_error = ''
        if task.run_epoch != self._run_epoch:
            self._run_epoch = task.run_epoch
            self.state.last_error = ''
        self.agent.begin_flight(task.run_epoch)

    def _failed(self, task: RoundTask, reason: str) -> None:
        """Record the round's flight error (state.last_error and state.round_error)."""
        self.state.last_error = self.state.round_error = f'round {task.round_index}: {reason}'

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """state.phase is ``name`` inside; back to waiting after, unless something else (the
        finish) changed it meanwhile."""
        self.state.phase = name
        try:
            yield
        finally:
            if self.state.phase == name:
                self.state.phase = Phase.WAITING

    def _check_home(self) -> None:
        """VehicleError (the drone does not arm) if the autopilot's home is outside the
        geofence's box (the take-off and the return to launch would fly outside it), or
        further above or below the ENU origin than flight.max_home_offset_up_m (the origin
        altitude in the config does not match the site, and every altitude would be off by
        the difference), or if PX4's return altitude (RTL_RETURN_ALT above home) is above the
        geofence's band (every return to launch, ours or a PX4 failsafe's, would climb out
        of it), or if PX4 would not end a return on the ground disarmed (:meth:`_check_landing`).
        """
        home_east_m, home_north_m, home_up_m = self.vehicle.home_enu_m
        fence = self.geofence
        if not fence.contains_en(home_east_m, home_north_m):
            raise VehicleError(
                f'not arming: the autopilot home ({home_east_m:.1f}, {home_north_m:.1f}) m ENU '
                f'is outside the geofence ({fence.describe()}); the take-off and the return to '
                f'launch would fly outside it. Take off from inside the fence, or set '
                f'geofence.* (and autopilot.origin_* if the origin is wrong)')
        if not abs(home_up_m) <= self.flight.max_home_offset_up_m:   # NaN: unknown, refused
            raise VehicleError(
                f'not arming: the autopilot home is {home_up_m:+.1f} m from the origin altitude '
                f'(autopilot.origin_alt_amsl_m), more than flight.max_home_offset_up_m '
                f'({self.flight.max_home_offset_up_m} m); every altitude and the geofence band '
                f'would be off by as much. Set the origin to the site, or raise the limit on '
                f'sloped ground')
        return_alt_m = self.vehicle.rtl_return_alt_m
        # To the decimetre, as the message says: a float32 home altitude is off by micrometres.
        if return_alt_m is not None and not round(home_up_m + return_alt_m, 1) <= fence.max_up_m:
            raise VehicleError(
                f'not arming: the autopilot returns to launch at RTL_RETURN_ALT {return_alt_m:g} '
                f'm above its home, {home_up_m + return_alt_m:.1f} m above the origin, over the '
                f'geofence top geofence.max_up_m ({fence.max_up_m:g} m); every return to launch '
                f'(end of run, silent station, Ctrl-C, a PX4 failsafe) would leave the fence. '
                f'Set RTL_RETURN_ALT to at most {fence.max_up_m - home_up_m:.1f} m')
        self._check_landing()

    def _check_landing(self) -> None:
        """VehicleError (the drone does not arm) if PX4's RTL_LAND_DELAY is negative (every
        return to launch hovers over home for ever instead of landing) or its COM_DISARM_LAND
        is zero or negative (a landed vehicle never disarms by itself): the pilot's return,
        landing and shutdown wait for a vehicle landed and disarmed, and would time out with
        it in the air or armed. The value to set comes first (a flight error keeps 200
        characters). An unknown value (not read) is not refused."""
        land_delay_s = self.vehicle.rtl_land_delay_s
        if land_delay_s is not None and land_delay_s < 0.0:
            raise VehicleError(
                f'not arming: PX4 RTL_LAND_DELAY is {land_delay_s:g} s, so every return to '
                f'launch hovers over home and never lands; set RTL_LAND_DELAY to 0 (the PX4 '
                f'default) or a delay in s. Our returns (end of run, silent station, Ctrl-C) '
                f'wait for the landing and would time out with the vehicle in the air')
        disarm_s = self.vehicle.disarm_land_s
        if disarm_s is not None and disarm_s <= 0.0:
            raise VehicleError(
                f'not arming: PX4 COM_DISARM_LAND is {disarm_s:g} s, so a landed vehicle never '
                f'disarms by itself; set COM_DISARM_LAND to 2 (the PX4 default) or another '
                f'delay > 0 s. Our return to launch waits for the disarm and would time out '
                f'with the propellers armed on the ground')

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
        """Time the flight may take so that training and upload still meet the deadline: the
        round's time left (its deadline less the time since the station opened it, for a
        drone that got the round late; clocks agree to security.max_clock_skew_s) less
        flight.train_reserve_s, but at least flight.min_flight_budget_s."""
        elapsed_s = 0.0
        if task.opened_ms is not None:
            elapsed_s = max(0.0, (now_ms() - task.opened_ms) / 1000.0)
        return max(self.flight.min_flight_budget_s,
                   task.deadline_s - elapsed_s - self.flight.train_reserve_s)

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

    def superseded(self, task: RoundTask) -> bool:
        """A newer round (or a new run) has begun since ``task``: the station opens a round
        only after closing the previous one, so ``task``'s update would be refused
        (``wrong_round``). Safe to call from the training thread."""
        return self._newest_round > _round_key(task)

    async def run_round(self, task: RoundTask) -> UpdateReport:
        """Choose the round's mission (onboard planner), fly it (bounded by the round's
        deadline), then train; a failed or cut-short flight is recorded and the drone still
        reports what it learned.

        A drone that fell behind catches up: once a newer round has begun (the node starts it
        while this one trains or waits for the training thread), this round's training is
        dropped (:meth:`DroneAgent.train_round` with :meth:`superseded`: before it starts, at
        its next local step, or before encoding) and nothing is uploaded, so the training
        thread is free for the newer round at once instead of finishing work the station will
        refuse."""
        self._begin_round(task)
        with self._phase(Phase.FLYING):
            task = await self.own_mission(task)
            error = await self._fly_round(task)
        if error:      # reported with the update (FLIGHT_ERROR_KEY)
            task = dataclasses.replace(task, flight_error=short_flight_error(error))
        train = functools.partial(self.agent.train_round, task,
                                  superseded=functools.partial(self.superseded, task))
        with self._phase(Phase.TRAINING):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._train_executor, train)

    async def _fly_round(self, task: RoundTask) -> str:
        """Fly the round; returns why the flight failed ('' if it did not)."""
        try:
            reached = await asyncio.wait_for(self.fly_plan(task), self.flight_budget_s(task))
            self.agent.waypoints_reached += reached
        except GeofenceViolationError as exc:
            self.plans_rejected[exc.reason] += 1
            self._failed(task, f'plan rejected: {exc}')
            _log.error('round %d: plan rejected, flying nothing (holding): %s',
                       task.round_index, exc)
            return f'plan rejected: {exc.reason}'
        except VehicleError as exc:
            self.taken_over_by()            # a failsafe or an operator interrupted it?
            reason = str(exc)
            self._failed(task, reason)
            # The autopilot may have landed (failsafe); arm and take off again next round.
            self.state.airborne = False
            _log.warning('flight failed in round %d: %s', task.round_index, reason)
            return reason
        except TimeoutError:
            # By design (flight.train_reserve_s): the plan was longer than the round leaves
            # for flying. Not a failure; the drone trains on what it sampled.
            _log.info('round %d: flight cut short at its budget (%.0f s, to train and upload '
                      'before the deadline)', task.round_index, self.flight_budget_s(task))
        return ''

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
        self._begin_round(task)
        with self._phase(Phase.TOURING):
            return await self._tour(task, carrier, link, speed_m_s)

    async def _tour(self, task: RoundTask, carrier: ExpressCarrier, link: ExpressLink,
                    speed_m_s: float) -> bytes:
        try:
            tour = carrier.start_tour(task)
        except ExpressTaskError as exc:
            self._failed(task, str(exc))
            _log.error('%s', exc)
            carrier.tour = None
            raise
        try:
            await asyncio.wait_for(self._fly_tour(task, carrier, link, speed_m_s),
                                   self.flight_budget_s(task))
        except GeofenceViolationError as exc:
            self.plans_rejected[exc.reason] += 1
            tour.error = f'plan rejected: {exc.reason}'
            self._failed(task, f'plan rejected: {exc}')
            _log.error('round %d: tour rejected, flying nothing: %s', task.round_index, exc)
        except (VehicleError, TimeoutError) as exc:
            self.taken_over_by()            # a failsafe or an operator interrupted it?
            reason = str(exc) or f'flight budget of {self.flight_budget_s(task):.0f} s exceeded'
            tour.error = reason
            self._failed(task, reason)
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
        """Come home and land at the end of the run (a vehicle in flight by the pilot's
        account or by the autopilot's, e.g. after a round whose flight step failed in the
        air)."""
        self.state.phase = Phase.FINISHED
        if not self.in_flight:
            return
        mode = self.taken_over_by()
        if mode:
            _log.warning('run finished with the vehicle in %s (a failsafe, or an operator): not '
                         'commanding a return to launch', mode)
            return
        if self.flight.land_on_finish:
            self.state.phase = Phase.RETURNING
            try:
                await self._return_to_launch()
            finally:
                self.state.phase = Phase.FINISHED
            self.state.armed = False           # RTL returns once landed and disarmed
        self.state.airborne = False
        self.state.landed_after_flight = True

    async def return_home(self, reason: str) -> bool:
        """Return to launch and land now, between rounds (the station went silent:
        fl_uav/fleet/station_watchdog.py); the next round arms and takes off again. Holds the
        pilot's guard, so a round that starts meanwhile waits for the landing; does nothing if
        a round started first or the vehicle is not in flight. A VehicleError is logged (the
        autopilot keeps its mode), never raised. True if it landed."""
        async with self._guard():
            if not self.in_flight or self.state.phase != Phase.WAITING:
                return False
            mode = self.taken_over_by()
            if mode:
                _log.warning('%s, but the vehicle flies in %s (a failsafe, or an operator): not '
                             'commanding a return to launch', reason, mode)
                return False
            _log.warning('%s: returning to launch and landing; the next round takes off '
                         'again', reason)
            with self._phase(Phase.RETURNING):
                try:
                    await self._return_to_launch()
                except VehicleError as exc:
                    _log.error('return to launch failed: %s', exc)
                    return False
                self.state.armed = self.state.airborne = False
                self.state.landed_after_flight = True
            _log.info('landed at home; waiting for the station')
            return True

    @property
    def flying_mission(self) -> bool:
        """A round's mission (or its onboard planning) is under way."""
        return self.state.phase == Phase.FLYING

    @property
    def in_flight(self) -> bool:
        """True from arming until the pilot saw the vehicle land (it may still be climbing,
        flying, hovering after the run with ``land_on_finish`` false, or landed by a failsafe
        the pilot could not see), unless the vehicle reports itself disarmed; and whenever the
        autopilot reports the vehicle armed and in the air (this node restarted in flight):
        shutdown, the finish and the station watchdog bring such a vehicle home too."""
        reported = self.vehicle.armed is True and self.vehicle.in_air is True
        return reported or (self.state.armed and self.vehicle.armed is not False)

    async def shutdown(self, rtl_timeout_s: float) -> None:
        """End the pilot: a vehicle in flight is commanded to return to launch and waited for
        at most ``rtl_timeout_s`` (the autopilot goes on with RTL after that), then the link
        is closed and the telemetry ends. Never raises a VehicleError (logged instead)."""
        self._closed = True
        try:
            if self.in_flight and (mode := self.taken_over_by()):
                _log.warning('shutting down in flight in %s (a failsafe, or an operator): not '
                             'commanding a return to launch; the autopilot keeps the vehicle',
                             mode)
            elif self.in_flight:
                _log.warning('shutting down in flight: returning to launch (waiting up to '
                             '%.0f s)', rtl_timeout_s)
                await asyncio.wait_for(self._return_to_launch(), rtl_timeout_s)
                self.state.armed = self.state.airborne = False
                self.state.landed_after_flight = True
                _log.warning('landed at home')
        except TimeoutError:
            _log.warning('not landed within %.0f s: closing the link; the autopilot '
                         'continues its return to launch', rtl_timeout_s)
        except VehicleError as exc:
            _log.error('return to launch at shutdown failed: %s', exc)
        finally:
            try:
                await self.vehicle.close()
            except VehicleError as exc:
                _log.warning('vehicle close failed: %s', exc)
            self._link_event().set()            # let a waiting telemetry loop see the end

    async def stream_telemetry(self, on_pose: Callable[[PoseSample], None],
                               on_battery: Callable[[BatteryStatus], None]) -> None:
        """Forward poses (to the agent and ``on_pose``) and battery states (to
        ``on_battery``) whenever the vehicle link is up, until :meth:`shutdown`.

        Tries to connect first; if that fails (autopilot not up yet) it waits, and starts the
        streams as soon as a later connection succeeds (e.g. a round's ensure_airborne). A link
        lost once connected does not end the streams: they pause and resume when the autopilot's
        heartbeats return. Streams that end or fail without a shutdown wait for the next
        established connection."""
        try:
            await self.ensure_connected()
        except VehicleError as exc:
            _log.warning('telemetry waits for the vehicle link: %s', exc)
        link_up = self._link_event()
        while True:
            await link_up.wait()
            link_up.clear()
            if self._closed:
                return
            await self._stream_until_end(on_pose, on_battery)
            if self._closed:
                return
            _log.warning('telemetry ended: waiting for the vehicle link')

    async def _stream_until_end(self, on_pose: Callable[[PoseSample], None],
                                on_battery: Callable[[BatteryStatus], None]) -> None:
        batteries = asyncio.ensure_future(self._forward(self.vehicle.batteries(), on_battery))
        try:
            await self.stream_poses(on_pose)
        except VehicleError as exc:
            _log.warning('pose stream failed: %s', exc)
        finally:
            batteries.cancel()

    @staticmethod
    async def _forward(stream: AsyncIterator[BatteryStatus],
                       callback: Callable[[BatteryStatus], None]) -> None:
        try:
            async for item in stream:
                callback(item)
        except VehicleError as exc:
            _log.warning('battery stream failed: %s', exc)

    async def stream_poses(self, on_pose: Callable[[PoseSample], None]) -> None:
        """Forward telemetry poses to the agent and to a callback (e.g. a publisher)."""
        async for pose in self.vehicle.poses():
            # Stamped on receipt with the system clock, the clock camera frames carry.
            sample = PoseSample(pose.east_m, pose.north_m, pose.up_m, pose.yaw_rad, time.time())
            self.agent.on_pose(sample)
            on_pose(sample)


def _round_key(task: RoundTask) -> tuple[int, int, int]:
    """Orders the rounds a drone begins: run, round, and when the station opened it (a round
    opened again by a resumed station supersedes its first opening)."""
    return task.run_epoch, task.round_index, task.opened_ms or 0
