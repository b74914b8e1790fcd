"""A kinematic fake of the Vehicle protocol for unit tests of code above the vehicle layer.

No MAVLink and no sockets: the fake moves in straight lines at the requested speed in simulated
time steps, records every call in ``calls`` and can be told to fail an operation. With
``time_factor=0`` (the default) it never sleeps, so tests run as fast as the loop allows.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence

from fl_uav.vehicle.interface import (
    AutopilotFence,
    BatteryStatus,
    MissionProgress,
    PoseEnu,
    ProgressCallback,
    VehicleError,
    WaypointEnu,
)
from fl_uav.vehicle.streams import put_latest, subscribe


class FakeVehicle:
    """Straight-line kinematics, a linear battery and a call log.

    ``fail_on`` maps an operation name (``'connect'``, ``'arm'``, ``'takeoff'``, ``'goto_enu'``,
    ``'fly_waypoints'``, ``'land'``, ``'return_to_launch'``, ``'download_fence'``,
    ``'upload_fence'``) to the exception it raises. ``fence`` is the geofence stored on the
    autopilot (a test puts an operator's there) and ``geofence_action`` PX4's GF_ACTION.
    ``time_factor`` > 0 makes each simulated step sleep ``step_s / time_factor`` wall seconds.
    ``flight_mode`` follows the commands as PX4's would (HOLD after connect, a take-off or a
    go-to, MISSION, LAND, RETURN_TO_LAUNCH); a test sets it to stand for a failsafe or an
    operator on the RC. ``failsafe`` is None until connect, then False; a test sets it True
    to stand for PX4 reporting a failsafe (``system_status`` follows: CRITICAL).
    """

    def __init__(self, home_enu_m: tuple[float, float, float] = (0.0, 0.0, 0.0), *,
                 climb_speed_m_s: float = 3.0, descent_speed_m_s: float = 1.5,
                 step_s: float = 0.1, time_factor: float = 0.0,
                 flight_drain_per_s: float = 1e-4, rtl_return_alt_m: float | None = 60.0,
                 rtl_land_delay_s: float | None = 0.0, disarm_land_s: float | None = 2.0,
                 geofence_action: int | None = 2, fence: AutopilotFence | None = None,
                 fail_on: dict[str, Exception] | None = None) -> None:
        self.home_enu_m = home_enu_m
        self.position_enu_m = list(home_enu_m)
        self.yaw_rad = math.pi / 2.0
        self.climb_speed_m_s = climb_speed_m_s
        self.descent_speed_m_s = descent_speed_m_s
        self.step_s = step_s
        self.time_factor = time_factor
        self.flight_drain_per_s = flight_drain_per_s
        self.rtl_return_alt_m = rtl_return_alt_m     # PX4's RTL_RETURN_ALT (default 60 m)
        self.rtl_land_delay_s = rtl_land_delay_s     # PX4's RTL_LAND_DELAY (default 0 s)
        self.disarm_land_s = disarm_land_s           # PX4's COM_DISARM_LAND (default 2 s)
        self.geofence_action = geofence_action       # PX4's GF_ACTION (2: Hold)
        self.fence = AutopilotFence() if fence is None else fence
        self.fail_on = dict(fail_on or {})
        self.calls: list[tuple] = []
        self.connected = False
        self.link_losses = 0
        self.telemetry_rejected: Counter[str] = Counter()   # none: its telemetry is its own
        self.armed = False
        self.in_air = False
        self.flight_mode = ''
        self.failsafe: bool | None = None    # PX4's failsafe as its HEARTBEAT says (None unheard)
        self.battery_remaining = 1.0
        self.t_sim_s = 0.0
        self._closed = False
        self._pose_queues: set[asyncio.Queue] = set()
        self._battery_queues: set[asyncio.Queue] = set()

    # ----------------------------------------------------------------- helpers

    def _enter(self, name: str, *args: object) -> None:
        self.calls.append((name, *args))
        if self._closed:
            raise VehicleError(f'fake: {name} on a closed vehicle')
        if name != 'connect' and not self.connected:
            raise VehicleError(f'fake: {name} before connect()')
        error = self.fail_on.get(name)
        if error is not None:
            raise error

    @property
    def system_status(self) -> str:
        """The HEARTBEAT system_status PX4 would send ('' before connect)."""
        if self.failsafe is None:
            return ''
        if self.failsafe:
            return 'CRITICAL'
        return 'ACTIVE' if self.armed else 'STANDBY'

    @property
    def link_up(self) -> bool:
        """True while connected (a test sets ``connected`` False to cut the link)."""
        return self.connected and not self._closed

    def pose(self) -> PoseEnu:
        """The current pose."""
        east_m, north_m, up_m = self.position_enu_m
        return PoseEnu(east_m, north_m, up_m, self.yaw_rad, time.time())

    def _publish(self) -> None:
        for queue in list(self._pose_queues):
            put_latest(queue, self.pose())
        battery = BatteryStatus(self.battery_remaining, 12.6 + 4.2 * self.battery_remaining)
        for queue in list(self._battery_queues):
            put_latest(queue, battery)

    async def _step(self) -> None:
        self.t_sim_s += self.step_s
        if self.in_air:
            self.battery_remaining = max(0.0, self.battery_remaining
                                         - self.flight_drain_per_s * self.step_s)
        self._publish()
        await asyncio.sleep(self.step_s / self.time_factor if self.time_factor > 0 else 0)

    async def _move_to(self, target: Sequence[float], speed_m_s: float) -> None:
        while True:
            east_m, north_m, up_m = self.position_enu_m
            d_east, d_north = target[0] - east_m, target[1] - north_m
            distance_m = math.hypot(d_east, d_north)
            step_m = speed_m_s * self.step_s
            if distance_m > step_m:
                east_m += d_east / distance_m * step_m
                north_m += d_north / distance_m * step_m
                self.yaw_rad = math.atan2(d_north, d_east)
            else:
                east_m, north_m = target[0], target[1]
            d_up = target[2] - up_m
            max_dz_m = (self.climb_speed_m_s if d_up > 0 else self.descent_speed_m_s) * self.step_s
            up_m = target[2] if abs(d_up) <= max_dz_m else up_m + math.copysign(max_dz_m, d_up)
            self.position_enu_m = [east_m, north_m, up_m]
            await self._step()
            if (east_m, north_m, up_m) == (target[0], target[1], target[2]):
                return

    # ----------------------------------------------------------------- Vehicle protocol

    async def connect(self, timeout_s: float = 30.0) -> None:
        """Connect (immediately)."""
        self._enter('connect', timeout_s)
        self.connected = True
        self.flight_mode = self.flight_mode or 'HOLD'
        self.failsafe = bool(self.failsafe)
        self._publish()

    async def arm(self) -> None:
        """Arm in Hold (as the MAVSDK adapter: another mode is left for Hold first)."""
        self._enter('arm')
        self.flight_mode = 'HOLD'
        self.armed = True

    async def disarm(self) -> None:
        """Disarm on the ground."""
        self._enter('disarm')
        if self.in_air:
            raise VehicleError('fake: disarm refused in the air')
        self.armed = False

    async def takeoff(self, altitude_m: float) -> None:
        """Climb vertically to ``altitude_m``."""
        self._enter('takeoff', altitude_m)
        if not self.armed:
            raise VehicleError('fake: take-off refused: disarmed')
        self.in_air = True
        self.flight_mode = 'TAKEOFF'
        east_m, north_m, _ = self.position_enu_m
        await self._move_to((east_m, north_m, altitude_m), 1.0)
        self.flight_mode = 'HOLD'

    async def goto_enu(self, waypoint: WaypointEnu, speed_m_s: float) -> None:
        """Fly straight to ``waypoint``."""
        self._enter('goto_enu', waypoint, speed_m_s)
        self._require_air()
        self.flight_mode = 'HOLD'
        await self._move_to((waypoint.east_m, waypoint.north_m, waypoint.up_m), speed_m_s)

    async def fly_waypoints(self, waypoints: Sequence[WaypointEnu], speed_m_s: float,
                            on_progress: ProgressCallback | None = None) -> int:
        """Fly the waypoints in order, reporting progress after each."""
        self._enter('fly_waypoints', tuple(waypoints), speed_m_s)
        if not waypoints:
            return 0
        self._require_air()
        self.flight_mode = 'MISSION'
        total = len(waypoints)
        for index, waypoint in enumerate(waypoints):
            if on_progress is not None:
                on_progress(MissionProgress(index, total))
            await self._move_to((waypoint.east_m, waypoint.north_m, waypoint.up_m), speed_m_s)
        if on_progress is not None:
            on_progress(MissionProgress(total, total))
        return total

    async def land(self) -> None:
        """Descend to the ground here and disarm."""
        self._enter('land')
        self.flight_mode = 'LAND'
        east_m, north_m, _ = self.position_enu_m
        await self._move_to((east_m, north_m, self.home_enu_m[2]), 1.0)
        self.in_air = False
        self.armed = False

    async def return_to_launch(self) -> None:
        """Fly home at 5 m/s and land."""
        self._enter('return_to_launch')
        self.flight_mode = 'RETURN_TO_LAUNCH'
        east_m, north_m, up_m = self.position_enu_m
        await self._move_to((self.home_enu_m[0], self.home_enu_m[1], up_m), 5.0)
        await self._move_to(self.home_enu_m, 1.0)
        self.in_air = False
        self.armed = False

    async def download_fence(self) -> AutopilotFence:
        """The fence stored on the fake autopilot."""
        self._enter('download_fence')
        return self.fence

    async def upload_fence(self, fence: AutopilotFence) -> None:
        """Store ``fence`` (replacing the one there)."""
        self._enter('upload_fence', fence)
        self.fence = fence

    async def poses(self) -> AsyncIterator[PoseEnu]:
        """Poses as the fake moves (ends on close)."""
        async for pose in subscribe(self._pose_queues, 64):
            yield pose

    async def batteries(self) -> AsyncIterator[BatteryStatus]:
        """Battery states as the fake moves (ends on close)."""
        async for battery in subscribe(self._battery_queues, 64):
            yield battery

    async def close(self) -> None:
        """End the streams; further calls raise VehicleError."""
        self.calls.append(('close',))
        self._closed = True
        for queue in list(self._pose_queues) + list(self._battery_queues):
            put_latest(queue, None)

    def _require_air(self) -> None:
        if not (self.armed and self.in_air):
            raise VehicleError('fake: not flying; arm and take off first')
