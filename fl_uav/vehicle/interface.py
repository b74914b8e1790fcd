"""The vehicle boundary: what the fleet needs from an autopilot, in ENU metres.

Positions are ENU metres relative to a :class:`~fl_uav.world.geo.GeoOrigin` given to the
implementation at construction; ``up_m`` is height above the origin's altitude. Yaw is ENU:
radians counter-clockwise from east. Implementations convert to whatever the autopilot needs
(geodetic, AMSL or relative-to-home altitudes, NED).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class VehicleError(RuntimeError):
    """A vehicle operation failed or timed out; the message says which and why."""


@dataclass(frozen=True)
class PoseEnu:
    """Vehicle position (ENU metres from the origin), yaw (ENU radians) and receive time."""

    east_m: float
    north_m: float
    up_m: float
    yaw_rad: float
    stamp_s: float


@dataclass(frozen=True)
class BatteryStatus:
    """Remaining charge as a fraction in [0, 1] and pack voltage."""

    remaining_fraction: float
    voltage_v: float


@dataclass(frozen=True)
class WaypointEnu:
    """A position to fly to, ENU metres from the origin."""

    east_m: float
    north_m: float
    up_m: float


@dataclass(frozen=True)
class MissionProgress:
    """Mission progress: ``current`` items done out of ``total`` (finished when equal)."""

    current: int
    total: int


ProgressCallback = Callable[[MissionProgress], None]


@dataclass(frozen=True)
class FencePolygon:
    """A polygon of the autopilot's geofence: its corners (east_m, north_m) in order, ENU
    metres from the origin. ``inclusion``: the vehicle must stay inside (else outside)."""

    corners_en_m: tuple[tuple[float, float], ...]
    inclusion: bool = True


@dataclass(frozen=True)
class FenceCircle:
    """A circle of the autopilot's geofence: centre (east_m, north_m) in ENU metres and
    radius. ``inclusion``: the vehicle must stay inside (else outside)."""

    center_en_m: tuple[float, float]
    radius_m: float
    inclusion: bool = True


@dataclass(frozen=True)
class AutopilotFence:
    """The geofence stored on the autopilot (MAVLink's fence items, which PX4 keeps across
    reboots and acts on with GF_ACTION when the vehicle leaves it). Empty: no fence."""

    polygons: tuple[FencePolygon, ...] = ()
    circles: tuple[FenceCircle, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the autopilot holds no fence."""
        return not self.polygons and not self.circles

    def describe(self) -> str:
        """The fence in words, for log lines."""
        if self.empty:
            return 'no fence'
        parts = []
        for kind, shapes in (('polygon', self.polygons), ('circle', self.circles)):
            for inclusion in (True, False):
                count = sum(1 for shape in shapes if shape.inclusion == inclusion)
                if count:
                    side = 'inclusion' if inclusion else 'exclusion'
                    parts.append(f'{count} {side} {kind}{"s" if count > 1 else ""}')
        return ', '.join(parts)


@runtime_checkable
class Vehicle(Protocol):
    """An autopilot-controlled multirotor. Every method is a coroutine or async iterator.

    Failures raise :class:`VehicleError`; operations that wait (take-off, go-to, missions,
    landing) raise it on time-out as well. Once connected, a vehicle also has ``home_enu_m``,
    the autopilot's home in the ENU frame (not declared here: ``isinstance`` on a runtime
    protocol reads every member, and the home is unknown before ``connect``). Every vehicle
    also has ``link_up`` (heartbeats heard now), ``link_losses`` (times the autopilot link
    was lost since ``connect``), ``telemetry_rejected`` (position and home telemetry refused
    as no place on Earth, a Counter by stream), ``armed``
    and ``in_air`` (last reported; None when unknown) and ``flight_mode`` (the autopilot's
    mode by MAVSDK's FlightMode name, e.g. ``HOLD``, ``MISSION``, ``RETURN_TO_LAUNCH``,
    ``POSCTL``; '' when unknown), ``system_status`` (the autopilot's HEARTBEAT MAV_STATE
    name, e.g. ``ACTIVE``, ``CRITICAL``; '' when not heard) and ``failsafe`` (PX4 reports a
    failsafe acting: its HEARTBEAT says CRITICAL, EMERGENCY or FLIGHT_TERMINATION; None when
    no heartbeat was heard) and the PX4 parameters read at connect (None when unknown):
    ``rtl_return_alt_m`` (the height above home every return to launch climbs to,
    RTL_RETURN_ALT), ``rtl_land_delay_s`` (how long a return waits over home before it lands,
    RTL_LAND_DELAY; negative: it never lands), ``disarm_land_s`` (how long a landed vehicle
    waits before it disarms, COM_DISARM_LAND; zero or negative: never) and
    ``geofence_action`` (what PX4 does when the vehicle leaves the autopilot's fence,
    GF_ACTION: 0 none, 1 warning, 2 Hold, 3 Return, 4 terminate, 5 Land). A lost link fails
    the operation in progress; ``connect`` on a connected vehicle waits until it is ready again.
    """

    async def connect(self, timeout_s: float) -> None:
        """Connect (or after a link loss, reconnect) and wait until the autopilot is healthy
        and has a home position."""

    async def arm(self) -> None:
        """Arm the motors in Hold (a vehicle in another mode is switched to Hold first);
        returns once the autopilot reports armed."""

    async def takeoff(self, altitude_m: float) -> None:
        """Take off to ``altitude_m`` (up, metres above the origin); returns at altitude."""

    async def goto_enu(self, waypoint: WaypointEnu, speed_m_s: float) -> None:
        """Fly straight to a position at a horizontal speed; returns on arrival."""

    async def fly_waypoints(self, waypoints: Sequence[WaypointEnu], speed_m_s: float,
                            on_progress: ProgressCallback | None = None) -> int:
        """Fly the waypoints as one autopilot mission; returns the number reached."""

    async def land(self) -> None:
        """Land where the vehicle is; returns once landed and disarmed."""

    async def return_to_launch(self) -> None:
        """Fly home and land; returns once landed and disarmed."""

    async def download_fence(self) -> AutopilotFence:
        """The geofence stored on the autopilot (empty if it has none)."""

    async def upload_fence(self, fence: AutopilotFence) -> None:
        """Replace the autopilot's geofence with ``fence``; returns once it accepted it."""

    def poses(self) -> AsyncIterator[PoseEnu]:
        """Stream of poses as telemetry arrives."""

    def batteries(self) -> AsyncIterator[BatteryStatus]:
        """Stream of battery states as telemetry arrives."""

    async def close(self) -> None:
        """Release the connection; the vehicle object cannot be used afterwards."""
