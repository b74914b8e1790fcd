"""Flight logic of one simulated PX4 multirotor: arming, modes, take-off, missions, RTL, landing.

No MAVLink here: :mod:`fl_uav.autopilot_sim.link` turns messages into calls of
:class:`FlightController` and reports its state back. Simulated time comes from a clock
callable (seconds); client-facing time-outs (offboard set-point loss) use the wall time passed in.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.autopilot_sim.fence import NO_FENCE, Fence, GeofenceAction
from fl_uav.autopilot_sim.mission import RELATIVE_ALT_FRAMES, MissionItem
from fl_uav.autopilot_sim.physics import BatteryModel, KinematicState, MotionLimits, step_toward
from fl_uav.world.geo import GeoOrigin, enu_to_geodetic, geodetic_to_enu

# Vertical distance (m) within which an altitude target counts as reached.
ALTITUDE_TOLERANCE_M = 0.3
# Mission waypoints: vertical acceptance (PX4 NAV_MC_ALT_RAD).
MISSION_ALTITUDE_RADIUS_M = 0.8
# Height above ground below which a descending vehicle is on the ground.
TOUCHDOWN_HEIGHT_M = 0.01
# Below this height above ground, LAND descends at MPC_LAND_SPEED instead of MPC_Z_VEL_MAX_DN.
LAND_SLOW_HEIGHT_M = 5.0
# Offboard is refused unless a set-point arrived within this wall time (s).
OFFBOARD_SETPOINT_FRESH_S = 0.5
# Targets farther than this from the origin (horizontally or vertically) are refused.
MAX_OFFSET_M = 100_000.0
# PX4 MAV_CMD_COMPONENT_ARM_DISARM param2 magic number that forces arming or disarming.
FORCE_ARM_MAGIC = 21196.0
# STATUSTEXTs of a geofence breach (the sim's short wording of PX4's geofence violation
# report) and of PX4's failsafe framework when a failsafe action takes the vehicle.
GEOFENCE_VIOLATION_TEXT = 'Geofence violation'
FAILSAFE_ACTIVATED_TEXT = 'Failsafe activated'


class FlightMode(enum.Enum):
    """PX4 flight modes the simulator implements."""

    HOLD = 'hold'
    TAKEOFF = 'takeoff'
    MISSION = 'mission'
    RTL = 'rtl'
    LAND = 'land'
    OFFBOARD = 'offboard'


#: The modes PX4 refuses to arm in (its mode_req_prevent_arming: Return, Land, and modes the
#: simulator lacks: Descend, Termination, Precision land, Follow me, Orbit). On disarm PX4
#: goes back to the last mode selected that allows arming (UserModeIntention::onDisarm).
PREVENTS_ARMING = frozenset({FlightMode.RTL, FlightMode.LAND})

#: The mode each GF_ACTION failsafe switches to (unless the vehicle already returns or lands).
GEOFENCE_FAILSAFE_MODES = {GeofenceAction.HOLD: FlightMode.HOLD,
                           GeofenceAction.RETURN: FlightMode.RTL,
                           GeofenceAction.LAND: FlightMode.LAND}


class LandedState(enum.IntEnum):
    """MAV_LANDED_STATE values."""

    UNDEFINED = mavlink.MAV_LANDED_STATE_UNDEFINED
    ON_GROUND = mavlink.MAV_LANDED_STATE_ON_GROUND
    IN_AIR = mavlink.MAV_LANDED_STATE_IN_AIR
    TAKEOFF = mavlink.MAV_LANDED_STATE_TAKEOFF
    LANDING = mavlink.MAV_LANDED_STATE_LANDING


class CommandResult(enum.IntEnum):
    """MAV_RESULT values returned by controller commands."""

    ACCEPTED = mavlink.MAV_RESULT_ACCEPTED
    TEMPORARILY_REJECTED = mavlink.MAV_RESULT_TEMPORARILY_REJECTED
    DENIED = mavlink.MAV_RESULT_DENIED
    UNSUPPORTED = mavlink.MAV_RESULT_UNSUPPORTED
    FAILED = mavlink.MAV_RESULT_FAILED


# name -> (default, minimum, maximum); every parameter is a REAL32 as in PX4.
PARAM_SPECS: dict[str, tuple[float, float, float]] = {
    'MIS_TAKEOFF_ALT': (2.5, 0.0, 200.0),
    'RTL_RETURN_ALT': (60.0, 0.0, 500.0),
    # Return: descend over home to RTL_DESCEND_ALT, wait RTL_LAND_DELAY s there, then land;
    # a negative delay (PX4: -1) loiters there and never lands.
    'RTL_DESCEND_ALT': (30.0, 0.0, 500.0),
    'RTL_LAND_DELAY': (0.0, -1.0, 300.0),
    'MPC_XY_CRUISE': (5.0, 0.1, 50.0),
    'MPC_XY_VEL_MAX': (15.0, 0.1, 50.0),
    'MPC_Z_VEL_MAX_UP': (3.0, 0.1, 20.0),
    'MPC_Z_VEL_MAX_DN': (1.5, 0.1, 20.0),
    'MPC_LAND_SPEED': (0.7, 0.1, 5.0),
    'MPC_ACC_HOR': (3.0, 0.5, 20.0),
    'MPC_YAWRAUTO_MAX': (45.0, 1.0, 360.0),
    'NAV_ACC_RAD': (2.0, 0.05, 200.0),
    # Auto-disarm delays (s) after a landing and after arming without a take-off; zero or
    # negative disables it (PX4's commander_params).
    'COM_DISARM_LAND': (2.0, -1.0, 20.0),
    'COM_DISARM_PRFLT': (10.0, -1.0, 60.0),
    'COM_OF_LOSS_T': (1.0, 0.0, 60.0),
    'BAT_LOW_THR': (0.15, 0.0, 0.5),
    'BAT_CRIT_THR': (0.07, 0.0, 0.5),
    'BAT_EMERGEN_THR': (0.05, 0.0, 0.5),
    # Geofence breach action (GeofenceAction): 0 none, 1 warning, 2 Hold, 3 Return,
    # 4 terminate, 5 Land. Default 2 (Hold) as in current PX4 parameter references; older PX4
    # versions defaulted to 1 (warning only).
    'GF_ACTION': (float(GeofenceAction.HOLD), float(min(GeofenceAction)),
                  float(max(GeofenceAction))),
}
#: PX4 INT32 parameters: whole values only, sent as MAV_PARAM_TYPE_INT32 with PX4's bytewise
#: encoding (fl_uav/autopilot_sim/link.py); the store keeps them as floats like the rest.
INTEGER_PARAMS = frozenset({'GF_ACTION'})


class ParamStore:
    """PX4-named parameters with range checks; the order is the PARAM protocol index."""

    def __init__(self, overrides: dict[str, float] | None = None) -> None:
        self._values = {name: spec[0] for name, spec in PARAM_SPECS.items()}
        for name, value in (overrides or {}).items():
            if not self.set(name, value):
                raise ValueError(f'parameter {name} = {value} is unknown or out of range')
        self.names = tuple(self._values)

    def __getitem__(self, name: str) -> float:
        return self._values[name]

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def __len__(self) -> int:
        return len(self._values)

    def set(self, name: str, value: float) -> bool:
        """Set a parameter; False (and no change) when unknown or out of range."""
        spec = PARAM_SPECS.get(name)
        if spec is None or not math.isfinite(value) or not spec[1] <= value <= spec[2]:
            return False
        if name in INTEGER_PARAMS and value != int(value):
            return False
        self._values[name] = float(value)
        return True


class FlightListener:
    """What the controller reports to its link; the default does nothing."""

    def on_state_changed(self) -> None:
        """Armed state, mode or landed state changed."""

    def on_mission_changed(self) -> None:
        """Mission current item, total or state changed."""

    def on_mission_item_reached(self, seq: int) -> None:
        """A mission item was reached."""

    def on_status_text(self, severity: int, text: str) -> None:
        """A message for the operator (STATUSTEXT)."""

    def on_home_changed(self) -> None:
        """The home position was set."""


@dataclass
class _OffboardSetpoint:
    position_enu_m: np.ndarray | None
    velocity_enu_m_s: np.ndarray | None
    yaw_enu_rad: float | None
    wall_s: float


class FlightController:
    """State machine and motion of one simulated PX4 multirotor.

    Ground truth is exposed as ``position_enu_m`` (ENU metres relative to ``origin``),
    ``velocity_enu_m_s``, ``yaw_rad`` (ENU: counter-clockwise from east), ``armed``, ``mode``,
    ``landed_state``, ``battery_remaining`` and ``mission_items_reached``.

    ``failsafe`` is PX4's ``vehicle_status.failsafe``: set when a failsafe acts (battery
    critical or emergency, offboard set-points lost, a geofence breach with GF_ACTION Hold,
    Return, Land or terminate), cleared as PX4's failsafe framework
    clears the actions the sim has: on disarm, and on a mode commanded over MAVLink (a user
    takeover: PX4 lets the user take over Hold, Return and Land failsafes by a mode switch,
    and a Hold/Return/Land action clears on a mode change once its condition is gone).

    ``fence`` is the geofence (:class:`~fl_uav.autopilot_sim.fence.Fence`, ENU metres) the link
    hands over with :meth:`set_fence` after a FENCE upload; :meth:`step` acts on a breach as
    PX4's GF_ACTION says, and :meth:`arm` refuses to arm outside it.
    """

    def __init__(self, index: int, origin: GeoOrigin, home_east_m: float, home_north_m: float,
                 params: ParamStore, battery: BatteryModel,
                 clock: Callable[[], float],
                 event_sink: Callable[[int, str, dict], None] | None = None) -> None:
        self.index = index
        self.origin = origin
        self.params = params
        self.battery = battery
        self._clock = clock
        self._event_sink = event_sink
        self.listener = FlightListener()
        self.kinematics = KinematicState.at_rest(home_east_m, home_north_m, 0.0,
                                                 yaw_rad=math.pi / 2.0)
        self.ground_up_m = 0.0
        self.local_origin_enu_m = self.kinematics.position_enu_m.copy()
        self.home_enu_m = self.kinematics.position_enu_m.copy()
        self.armed = False
        self.mode = FlightMode.HOLD
        self.landed_state = LandedState.ON_GROUND
        self.gps_ok = True
        self.mission: list[MissionItem] = []
        self.mission_current = 0
        self.mission_state = mavlink.MISSION_STATE_NO_MISSION
        self.mission_items_reached: list[int] = []
        self._target_enu_m = self.kinematics.position_enu_m.copy()
        self._target_yaw_rad: float | None = None
        self._speed_override_m_s: float | None = None
        self._mission_speed_m_s: float | None = None
        self._takeoff_up_m = 0.0
        self._rtl_phase = ''
        self._rtl_return_up_m = 0.0
        self._rtl_land_at_s: float | None = None   # end of the RTL_LAND_DELAY wait
        self._mode_after_disarm = FlightMode.HOLD
        self._last_item_target_enu_m: np.ndarray | None = None
        self._loiter_until_s: float | None = None
        self._ground_since_s = 0.0
        self._armed_since_s = 0.0
        self._flew_since_arming = False
        self._offboard: _OffboardSetpoint | None = None
        self._battery_failsafe = 0
        self.failsafe = False       # PX4's vehicle_status.failsafe: a failsafe action acts
        self.fence: Fence = NO_FENCE
        # Outside the fence at the last check: a breach acts once, again only after re-entry.
        self._fence_breached = False

    # ----------------------------------------------------------------- ground truth

    @property
    def position_enu_m(self) -> tuple[float, float, float]:
        """Ground-truth position (east, north, up) in metres relative to the origin."""
        east_m, north_m, up_m = self.kinematics.position_enu_m
        return float(east_m), float(north_m), float(up_m)

    @property
    def velocity_enu_m_s(self) -> tuple[float, float, float]:
        """Ground-truth velocity (east, north, up) in m/s."""
        ve, vn, vu = self.kinematics.velocity_enu_m_s
        return float(ve), float(vn), float(vu)

    @property
    def yaw_rad(self) -> float:
        """Ground-truth yaw, ENU convention (counter-clockwise from east), radians."""
        return float(self.kinematics.yaw_rad)

    @property
    def battery_remaining(self) -> float:
        """Remaining battery fraction in [0, 1]."""
        return self.battery.remaining

    @property
    def airborne(self) -> bool:
        """True unless the vehicle is on the ground."""
        return self.landed_state != LandedState.ON_GROUND

    @property
    def height_above_ground_m(self) -> float:
        """Height above the (flat) ground."""
        return float(self.kinematics.position_enu_m[2] - self.ground_up_m)

    @property
    def home_geodetic(self) -> tuple[float, float, float]:
        """Home as (lat_deg, lon_deg, alt_amsl_m)."""
        return enu_to_geodetic(self.origin, *self.home_enu_m)

    @property
    def geodetic(self) -> tuple[float, float, float]:
        """Current position as (lat_deg, lon_deg, alt_amsl_m)."""
        return enu_to_geodetic(self.origin, *self.kinematics.position_enu_m)

    @property
    def mission_speed_m_s(self) -> float:
        """Horizontal speed used in Mission mode."""
        return self._clamp_speed(self._mission_speed_m_s or self.params['MPC_XY_CRUISE'])

    # ----------------------------------------------------------------- commands

    def arm(self, force: bool = False) -> CommandResult:
        """Arm on the ground; denied with a low battery, without GPS, in a mode PX4 does not
        arm in (:data:`PREVENTS_ARMING`: Return, Land) or outside the geofence while GF_ACTION
        is not 0 (none), unless forced.

        As PX4 (v1.14+ commander): the failed health check's own text ("Preflight Fail: ...")
        first, then the generic "Arming denied: Resolve system health failures first" (with
        the tab PX4 puts on texts that double an event), and TEMPORARILY_REJECTED.
        """
        if self.armed:
            return CommandResult.ACCEPTED
        if not force:
            if self.mode in PREVENTS_ARMING:
                self._status(mavlink.MAV_SEVERITY_CRITICAL,
                             'Preflight Fail: Mode not suitable for arming')
                return self._arming_denied(f'mode_{self.mode.value}')
            if self.battery.remaining < self.params['BAT_LOW_THR']:
                self._status(mavlink.MAV_SEVERITY_EMERGENCY, 'Preflight Fail: low battery\t')
                return self._arming_denied('low_battery')
            if not self.gps_ok:
                self._status(mavlink.MAV_SEVERITY_CRITICAL, 'Preflight Fail: GPS fix too low')
                return self._arming_denied('no_gps')
            if self._geofence_action() != GeofenceAction.NONE and not self._inside_fence():
                self._status(mavlink.MAV_SEVERITY_CRITICAL,
                             'Preflight Fail: Vehicle outside geofence')
                return self._arming_denied('outside_geofence')
        self.armed = True
        self._armed_since_s = self._clock()
        self._flew_since_arming = False
        self._battery_failsafe = 0
        if not self.airborne:
            self.home_enu_m = self.kinematics.position_enu_m.copy()
            self.listener.on_home_changed()
        self._target_enu_m = self.kinematics.position_enu_m.copy()
        self.record_event('armed', forced=force)
        self.listener.on_state_changed()
        return CommandResult.ACCEPTED

    def _arming_denied(self, reason: str) -> CommandResult:
        self._status(mavlink.MAV_SEVERITY_CRITICAL,
                     'Arming denied: Resolve system health failures first\t')
        self.record_event('arm_denied', reason=reason)
        return CommandResult.TEMPORARILY_REJECTED

    def disarm(self, force: bool = False, reason: str = 'command') -> CommandResult:
        """Disarm on the ground; in the air only when forced (the vehicle drops)."""
        if not self.armed:
            return CommandResult.ACCEPTED
        if self.airborne and not force:
            self._status(mavlink.MAV_SEVERITY_CRITICAL, 'Disarming denied: not landed')
            return CommandResult.DENIED
        self.armed = False
        self._fence_breached = False     # the next flight acts on a breach afresh
        self._clear_failsafe('disarmed')
        if self.airborne:
            self.kinematics.position_enu_m[2] = self.ground_up_m
            self.landed_state = LandedState.ON_GROUND
            self.record_event('landed', forced=True)
        self.kinematics.velocity_enu_m_s[:] = 0.0
        self.record_event('disarmed', reason=reason)
        if self.mode in PREVENTS_ARMING:
            # As PX4: the mode selected last that allows arming (a Return or Land, commanded
            # or a failsafe's, does not outlive the flight).
            # A finished mission stays finished (armed in Mission, the vehicle holds on the
            # ground), and its items reached stay on record.
            restored = self._mode_after_disarm
            if restored == FlightMode.MISSION and not self.mission:
                restored = FlightMode.HOLD
            self._set_mode(restored, restart_mission=False)
        self.listener.on_state_changed()
        return CommandResult.ACCEPTED

    def takeoff(self, alt_amsl_m: float = math.nan) -> CommandResult:
        """NAV_TAKEOFF: climb to an AMSL altitude (NaN: MIS_TAKEOFF_ALT above home)."""
        if not self.armed:
            self._status(mavlink.MAV_SEVERITY_CRITICAL, 'Takeoff denied: disarmed')
            return CommandResult.DENIED
        if not math.isnan(alt_amsl_m):
            up_m = alt_amsl_m - self.origin.alt_amsl_m
            if not self._altitude_ok(up_m):
                return CommandResult.DENIED
        else:
            up_m = self.home_enu_m[2] + self.params['MIS_TAKEOFF_ALT']
        self._takeoff_up_m = float(max(up_m, self.ground_up_m + 1.0))
        self._set_mode(FlightMode.TAKEOFF)
        return CommandResult.ACCEPTED

    def land(self) -> CommandResult:
        """NAV_LAND at the current position (a user takeover of a failsafe)."""
        self._clear_failsafe('user_takeover')
        self._set_mode(FlightMode.LAND)
        return CommandResult.ACCEPTED

    def return_to_launch(self) -> CommandResult:
        """Return to home: climb to RTL_RETURN_ALT, fly home, land (a user takeover of a
        failsafe)."""
        self._clear_failsafe('user_takeover')
        self._set_mode(FlightMode.RTL)
        return CommandResult.ACCEPTED

    def set_mode(self, mode: FlightMode, wall_s: float = 0.0) -> CommandResult:
        """DO_SET_MODE with PX4's refusal rules. A mode accepted (the current one too) is a
        user takeover: it ends a failsafe (PX4 clears ``vehicle_status.failsafe``)."""
        if mode == self.mode:
            self._clear_failsafe('user_takeover')
            if mode == FlightMode.MISSION and self.mission_state == (
                    mavlink.MISSION_STATE_COMPLETE):
                self._restart_mission()
            return CommandResult.ACCEPTED
        if mode == FlightMode.MISSION and not self.mission:
            self._status(mavlink.MAV_SEVERITY_CRITICAL, 'Mission mode denied: no mission')
            return CommandResult.DENIED
        if mode == FlightMode.OFFBOARD and (
                self._offboard is None
                or wall_s - self._offboard.wall_s > OFFBOARD_SETPOINT_FRESH_S):
            self._status(mavlink.MAV_SEVERITY_CRITICAL, 'Offboard denied: no set-point')
            return CommandResult.DENIED
        if mode == FlightMode.TAKEOFF:
            return self.takeoff()
        self._clear_failsafe('user_takeover')
        self._set_mode(mode)
        return CommandResult.ACCEPTED

    def reposition(self, lat_deg: float, lon_deg: float, alt_amsl_m: float,
                   speed_m_s: float = math.nan, yaw_ned_rad: float = math.nan) -> CommandResult:
        """DO_REPOSITION: fly to a global position in Hold mode (NaN fields: keep current)."""
        if not self.armed:
            self._status(mavlink.MAV_SEVERITY_CRITICAL, 'Reposition denied: disarmed')
            return CommandResult.DENIED
        current = self.kinematics.position_enu_m
        east_m, north_m, up_m = current
        if not (math.isnan(lat_deg) and math.isnan(lon_deg)):
            if not self._lat_lon_ok(lat_deg, lon_deg):
                return CommandResult.DENIED
            east_m, north_m, _ = geodetic_to_enu(self.origin, lat_deg, lon_deg,
                                                 self.origin.alt_amsl_m)
        if not math.isnan(alt_amsl_m):
            up_m = alt_amsl_m - self.origin.alt_amsl_m
            if not self._altitude_ok(up_m):
                return CommandResult.DENIED
        if math.isfinite(speed_m_s) and speed_m_s > 0.0:
            self._speed_override_m_s = self._clamp_speed(speed_m_s)
        self._set_mode(FlightMode.HOLD)
        self._target_enu_m = np.array([east_m, north_m, max(up_m, self.ground_up_m)])
        self._target_yaw_rad = (math.pi / 2.0 - yaw_ned_rad) if math.isfinite(yaw_ned_rad) \
            else None
        if not self.airborne and self._target_enu_m[2] > self.ground_up_m + TOUCHDOWN_HEIGHT_M:
            self._takeoff_up_m = float(self._target_enu_m[2])
        self.record_event('reposition',
                          target_enu_m=[round(float(v), 3) for v in self._target_enu_m])
        return CommandResult.ACCEPTED

    def _lat_lon_ok(self, lat_deg: float, lon_deg: float) -> bool:
        """A real position within MAX_OFFSET_M of the origin."""
        if not (-90.0 <= lat_deg <= 90.0 and -180.0 <= lon_deg <= 180.0):
            return False
        east_m, north_m, _ = geodetic_to_enu(self.origin, lat_deg, lon_deg,
                                             self.origin.alt_amsl_m)
        return math.hypot(east_m, north_m) <= MAX_OFFSET_M

    def _altitude_ok(self, up_m: float) -> bool:
        return math.isfinite(up_m) and abs(up_m) <= MAX_OFFSET_M

    def change_speed(self, speed_type: float, speed_m_s: float) -> CommandResult:
        """DO_CHANGE_SPEED: ground/air speed (type 0 or 1); -1 or -2 restores the default."""
        if speed_type not in (0.0, 1.0) and math.isfinite(speed_type):
            return CommandResult.ACCEPTED
        if not math.isfinite(speed_m_s):
            return CommandResult.DENIED
        new_speed = None if speed_m_s <= 0.0 else self._clamp_speed(speed_m_s)
        if self.mode == FlightMode.MISSION:
            self._mission_speed_m_s = new_speed
        else:
            self._speed_override_m_s = new_speed
        return CommandResult.ACCEPTED

    def set_home(self, use_current: bool, lat_deg: float, lon_deg: float,
                 alt_amsl_m: float) -> CommandResult:
        """DO_SET_HOME: at the current position or a given global position."""
        if use_current:
            self.home_enu_m = self.kinematics.position_enu_m.copy()
        else:
            if not (self._lat_lon_ok(lat_deg, lon_deg)
                    and self._altitude_ok(alt_amsl_m - self.origin.alt_amsl_m)):
                return CommandResult.DENIED
            self.home_enu_m = np.array(geodetic_to_enu(self.origin, lat_deg, lon_deg,
                                                       alt_amsl_m))
        self.record_event('home_set', home_enu_m=[round(float(v), 3) for v in self.home_enu_m])
        self.listener.on_home_changed()
        return CommandResult.ACCEPTED

    def offboard_setpoint(self, wall_s: float, position_enu_m: np.ndarray | None = None,
                          velocity_enu_m_s: np.ndarray | None = None,
                          yaw_enu_rad: float | None = None) -> None:
        """Record an offboard set-point (from SET_POSITION_TARGET_LOCAL_NED)."""
        self._offboard = _OffboardSetpoint(position_enu_m, velocity_enu_m_s, yaw_enu_rad, wall_s)

    def set_fence(self, fence: Fence) -> None:
        """Replace the geofence (after a complete FENCE upload, or :data:`NO_FENCE` when it is
        cleared). A vehicle already outside the new fence breaches it at the next step
        (once: a breach still running under the old fence does not act again)."""
        self.fence = fence
        if fence.is_empty:
            self.record_event('fence_cleared')
        else:
            self.record_event('fence_uploaded', inclusion_shapes=fence.inclusion_count,
                              exclusion_shapes=fence.exclusion_count)

    # ----------------------------------------------------------------- mission

    def set_mission(self, items: list[MissionItem]) -> None:
        """Replace the mission (after a complete upload); execution restarts at item 0."""
        self.mission = list(items)
        self._mission_speed_m_s = None
        self.mission_current = 0
        self.mission_items_reached = []
        self._loiter_until_s = None
        self.mission_state = (mavlink.MISSION_STATE_NOT_STARTED if self.mission
                              else mavlink.MISSION_STATE_NO_MISSION)
        self.record_event('mission_uploaded' if self.mission else 'mission_cleared',
                          count=len(self.mission))
        if self.mode == FlightMode.MISSION and not self.mission:
            self._set_mode(FlightMode.HOLD)
        self.listener.on_mission_changed()

    def set_mission_current(self, seq: int) -> bool:
        """Jump to a mission item; False if out of range."""
        if not 0 <= seq < len(self.mission):
            return False
        self.mission_current = seq
        self._loiter_until_s = None
        if self.mission_state == mavlink.MISSION_STATE_COMPLETE:
            self.mission_state = mavlink.MISSION_STATE_ACTIVE if (
                self.mode == FlightMode.MISSION and self.armed) else (
                mavlink.MISSION_STATE_NOT_STARTED)
        self.listener.on_mission_changed()
        return True

    def _restart_mission(self) -> None:
        self._mission_speed_m_s = None
        self.mission_current = 0
        self.mission_items_reached = []
        self._loiter_until_s = None
        self.mission_state = mavlink.MISSION_STATE_NOT_STARTED
        self.listener.on_mission_changed()

    # ----------------------------------------------------------------- simulation

    def step(self, dt_s: float, wall_s: float) -> None:
        """Advance the simulation by ``dt_s`` simulated seconds."""
        if dt_s <= 0.0:
            return
        if self.armed:
            self._check_offboard_loss(wall_s)
            target, limits, yaw = self._guidance()
            step_toward(self.kinematics, target, dt_s, limits, yaw, self.ground_up_m)
            self._update_landed_state()
            self._auto_disarm()
            self._geofence_check()
        else:
            self.kinematics.velocity_enu_m_s[:] = 0.0
        power_w = self.battery.power_for(
            self.armed, self.airborne, self.kinematics.horizontal_speed_m_s,
            float(self.kinematics.velocity_enu_m_s[2]))
        self.battery.drain(dt_s, power_w)
        self._battery_failsafes()

    def _limits(self, speed_m_s: float | None = None, landing: bool = False) -> MotionLimits:
        params = self.params
        descent = params['MPC_Z_VEL_MAX_DN']
        if landing and self.height_above_ground_m <= LAND_SLOW_HEIGHT_M:
            descent = params['MPC_LAND_SPEED']
        return MotionLimits(
            horizontal_speed_m_s=self._clamp_speed(speed_m_s or params['MPC_XY_CRUISE']),
            climb_speed_m_s=params['MPC_Z_VEL_MAX_UP'],
            descent_speed_m_s=descent,
            horizontal_accel_m_s2=params['MPC_ACC_HOR'],
            yaw_rate_rad_s=math.radians(params['MPC_YAWRAUTO_MAX']),
        )

    def _clamp_speed(self, speed_m_s: float) -> float:
        return max(0.1, min(speed_m_s, self.params['MPC_XY_VEL_MAX']))

    def _guidance(self) -> tuple[np.ndarray, MotionLimits, float | None]:
        """Target position, limits and yaw target for the current mode."""
        position = self.kinematics.position_enu_m
        if self.mode == FlightMode.TAKEOFF:
            return self._takeoff_guidance()
        if self.mode == FlightMode.LAND:
            target = np.array([position[0], position[1], self.ground_up_m - 1.0])
            return target, self._limits(landing=True), self._target_yaw_rad
        if self.mode == FlightMode.RTL:
            return self._rtl_guidance()
        if self.mode == FlightMode.MISSION:
            return self._mission_guidance()
        if self.mode == FlightMode.OFFBOARD:
            return self._offboard_guidance()
        # HOLD: fly to (and stay at) the hold target; reposition on the ground climbs first.
        if not self.airborne and self._target_enu_m[2] <= self.ground_up_m + TOUCHDOWN_HEIGHT_M:
            return position.copy(), self._limits(), None
        if self.landed_state in (LandedState.ON_GROUND, LandedState.TAKEOFF) and (
                position[2] < self._takeoff_up_m - ALTITUDE_TOLERANCE_M):
            target = np.array([position[0], position[1], self._takeoff_up_m])
            return target, self._limits(), None
        return self._target_enu_m, self._limits(self._speed_override_m_s), self._target_yaw_rad

    def _takeoff_guidance(self) -> tuple[np.ndarray, MotionLimits, float | None]:
        position = self.kinematics.position_enu_m
        target = np.array([position[0], position[1], self._takeoff_up_m])
        if abs(position[2] - self._takeoff_up_m) <= 1e-6:
            # PX4 switches to Hold (Loiter) once the take-off altitude is reached.
            self.record_event('takeoff_complete', up_m=round(float(position[2]), 3))
            self._target_enu_m = target.copy()
            self._target_yaw_rad = None
            self.landed_state = LandedState.IN_AIR
            self._set_mode(FlightMode.HOLD)
        return target, self._limits(), None

    def _rtl_guidance(self) -> tuple[np.ndarray, MotionLimits, float | None]:
        position = self.kinematics.position_enu_m
        home = self.home_enu_m
        if not self.airborne:
            return position.copy(), self._limits(), None
        if self._rtl_phase == 'climb':
            if position[2] >= self._rtl_return_up_m - 1e-6:
                self._rtl_phase = 'return'
            else:
                target = np.array([position[0], position[1], self._rtl_return_up_m])
                return target, self._limits(), None
        if self._rtl_phase == 'return':
            target = np.array([home[0], home[1], self._rtl_return_up_m])
            if np.linalg.norm(position[:2] - home[:2]) <= 1e-6:
                self._rtl_phase = 'descend'
            else:
                return target, self._limits(), None
        if self._rtl_phase == 'descend':
            # Over home: down to RTL_DESCEND_ALT (no climb), wait RTL_LAND_DELAY, then land.
            loiter_up_m = min(float(position[2]),
                              home[2] + self.params['RTL_DESCEND_ALT'])
            target = np.array([home[0], home[1], loiter_up_m])
            if position[2] > loiter_up_m + 1e-6:
                return target, self._limits(), None
            delay_s = self.params['RTL_LAND_DELAY']
            if delay_s < 0.0:
                return target, self._limits(), None      # PX4: loiter, never land
            now = self._clock()
            if self._rtl_land_at_s is None:
                self._rtl_land_at_s = now + delay_s
                self.record_event('rtl_loiter', up_m=round(loiter_up_m, 3), delay_s=delay_s)
            if now < self._rtl_land_at_s:
                return target, self._limits(), None
            self._rtl_phase = 'land'
        target = np.array([home[0], home[1], self.ground_up_m - 1.0])
        if self.landed_state == LandedState.IN_AIR:
            self.landed_state = LandedState.LANDING
            self.listener.on_state_changed()
        return target, self._limits(landing=True), None

    def _start_rtl(self) -> None:
        position = self.kinematics.position_enu_m
        self._rtl_return_up_m = max(float(position[2]),
                                    self.home_enu_m[2] + self.params['RTL_RETURN_ALT'])
        self._rtl_phase = 'climb'
        self._rtl_land_at_s = None

    def _offboard_guidance(self) -> tuple[np.ndarray, MotionLimits, float | None]:
        position = self.kinematics.position_enu_m
        setpoint = self._offboard
        if setpoint is None:
            return position.copy(), self._limits(), None
        if setpoint.position_enu_m is not None:
            return (setpoint.position_enu_m, self._limits(self.params['MPC_XY_VEL_MAX']),
                    setpoint.yaw_enu_rad)
        velocity = setpoint.velocity_enu_m_s if setpoint.velocity_enu_m_s is not None \
            else np.zeros(3)
        speed_h = float(math.hypot(velocity[0], velocity[1]))
        # Chase a point far along the commanded velocity at the commanded speed.
        target = position + velocity * 1000.0
        limits = self._limits(max(speed_h, 0.1))
        limits.climb_speed_m_s = max(float(velocity[2]), 0.0)
        limits.descent_speed_m_s = max(-float(velocity[2]), 0.0)
        if speed_h < 1e-6:
            target[:2] = position[:2]
        return target, limits, setpoint.yaw_enu_rad

    def _mission_guidance(self) -> tuple[np.ndarray, MotionLimits, float | None]:
        position = self.kinematics.position_enu_m
        if self.mission_state == mavlink.MISSION_STATE_COMPLETE or not self.mission:
            return self._mission_hold()
        if self.mission_state != mavlink.MISSION_STATE_ACTIVE:
            self.mission_state = mavlink.MISSION_STATE_ACTIVE
            self.record_event('mission_started', current=self.mission_current)
            self.listener.on_mission_changed()
        # Non-navigation items run at once; at most one pass over the mission per step.
        for _ in range(len(self.mission) + 1):
            if self.mission_current >= len(self.mission):
                self._complete_mission()
                return self._mission_hold()
            item = self.mission[self.mission_current]
            if item.is_nav:
                break
            if item.command == mavlink.MAV_CMD_DO_CHANGE_SPEED:
                self.change_speed(item.param1, item.param2)
            self._item_reached(advance=True)
        item = self.mission[self.mission_current]
        if item.command == mavlink.MAV_CMD_NAV_RETURN_TO_LAUNCH:
            return self._mission_rtl(item)
        item_target = self._item_target_enu(item)
        if item.command == mavlink.MAV_CMD_NAV_LAND:
            return self._mission_land(item_target)
        if not self.airborne or self.landed_state == LandedState.TAKEOFF:
            # Mission take-off: climb straight up before flying to the first item.
            climb_up_m = max(self.home_enu_m[2] + self.params['MIS_TAKEOFF_ALT'],
                             float(item_target[2]) if item.command ==
                             mavlink.MAV_CMD_NAV_TAKEOFF else 0.0)
            self._takeoff_up_m = float(climb_up_m)
            if position[2] < climb_up_m - ALTITUDE_TOLERANCE_M:
                target = np.array([position[0], position[1], climb_up_m])
                return target, self._limits(), None
        if item.command == mavlink.MAV_CMD_NAV_TAKEOFF:
            item_target[:2] = position[:2]
            if abs(position[2] - item_target[2]) <= ALTITUDE_TOLERANCE_M:
                self._item_reached(advance=True)
            return item_target, self._limits(), None
        yaw = (math.pi / 2.0 - math.radians(item.param4)) if (
            item.command == mavlink.MAV_CMD_NAV_WAYPOINT and math.isfinite(item.param4)) \
            else None
        acceptance_m = self.params['NAV_ACC_RAD']
        if item.command == mavlink.MAV_CMD_NAV_WAYPOINT and item.param2 > 0.0:
            acceptance_m = item.param2
        horizontal_m = float(np.linalg.norm(position[:2] - item_target[:2]))
        arrived = (horizontal_m <= acceptance_m
                   and abs(position[2] - item_target[2]) <= MISSION_ALTITUDE_RADIUS_M)
        self._target_enu_m = item_target
        self._last_item_target_enu_m = item_target
        if arrived:
            self._on_position_item_arrived(item)
            if self.mission_state == mavlink.MISSION_STATE_COMPLETE:
                return self._mission_hold()
        return item_target, self._limits(self.mission_speed_m_s), yaw

    def _mission_hold(self) -> tuple[np.ndarray, MotionLimits, None]:
        return self._target_enu_m, self._limits(self.mission_speed_m_s), None

    def _on_position_item_arrived(self, item: MissionItem) -> None:
        now = self._clock()
        if item.command == mavlink.MAV_CMD_NAV_LOITER_UNLIM:
            if self.mission_current not in self.mission_items_reached:
                self._item_reached(advance=False)
            return
        hold_s = 0.0
        if item.command in (mavlink.MAV_CMD_NAV_WAYPOINT, mavlink.MAV_CMD_NAV_LOITER_TIME):
            hold_s = item.param1 if math.isfinite(item.param1) else 0.0
        if hold_s > 0.0:
            if self._loiter_until_s is None:
                self._loiter_until_s = now + hold_s
            if now < self._loiter_until_s:
                return
        self._loiter_until_s = None
        self._item_reached(advance=True)

    def _mission_land(self, item_target: np.ndarray) -> tuple[np.ndarray, MotionLimits, None]:
        position = self.kinematics.position_enu_m
        if not self.airborne:
            # Touched down: the land item is reached and the mission is over.
            self._item_reached(advance=True)
            return position.copy(), self._limits(), None
        horizontal_m = float(np.linalg.norm(position[:2] - item_target[:2]))
        if horizontal_m > 0.05 and self.landed_state != LandedState.LANDING:
            target = np.array([item_target[0], item_target[1], position[2]])
            return target, self._limits(self.mission_speed_m_s), None
        if self.landed_state == LandedState.IN_AIR:
            self.landed_state = LandedState.LANDING
            self.listener.on_state_changed()
        target = np.array([item_target[0], item_target[1], self.ground_up_m - 1.0])
        return target, self._limits(landing=True), None

    def _mission_rtl(self, item: MissionItem) -> tuple[np.ndarray, MotionLimits, float | None]:
        if not self.airborne:
            self._rtl_phase = ''
            self._item_reached(advance=True)
            return self.kinematics.position_enu_m.copy(), self._limits(), None
        if not self._rtl_phase:
            self._start_rtl()
        return self._rtl_guidance()

    def _item_target_enu(self, item: MissionItem) -> np.ndarray:
        position = self.kinematics.position_enu_m
        if item.has_position:
            east_m, north_m, _ = geodetic_to_enu(self.origin, item.lat_deg, item.lon_deg,
                                                 self.origin.alt_amsl_m)
        else:
            east_m, north_m = float(position[0]), float(position[1])
        if item.frame in RELATIVE_ALT_FRAMES:
            up_m = self.home_enu_m[2] + item.z
        else:
            up_m = item.z - self.origin.alt_amsl_m
        return np.array([east_m, north_m, max(up_m, self.ground_up_m)])

    def _item_reached(self, advance: bool) -> None:
        seq = self.mission_current
        self.mission_items_reached.append(seq)
        self.record_event('mission_item_reached', seq=seq, position_enu_m=[
            round(float(v), 3) for v in self.kinematics.position_enu_m])
        self.listener.on_mission_item_reached(seq)
        if advance:
            self.mission_current += 1
            if self.mission_current >= len(self.mission):
                self._complete_mission()
        self.listener.on_mission_changed()

    def _complete_mission(self) -> None:
        if self.mission_state == mavlink.MISSION_STATE_COMPLETE:
            return
        self.mission_current = len(self.mission)
        self.mission_state = mavlink.MISSION_STATE_COMPLETE
        # PX4 loiters at the last position item once the mission is done.
        if self._last_item_target_enu_m is not None and self.airborne:
            self._target_enu_m = self._last_item_target_enu_m.copy()
        else:
            self._target_enu_m = self.kinematics.position_enu_m.copy()
        self.record_event('mission_complete', reached=len(self.mission_items_reached))
        self.listener.on_mission_changed()

    # ----------------------------------------------------------------- state changes

    def _set_mode(self, mode: FlightMode, restart_mission: bool = True) -> None:
        previous = self.mode
        self.mode = mode
        if mode in (FlightMode.HOLD, FlightMode.MISSION, FlightMode.OFFBOARD):
            self._mode_after_disarm = mode
        position = self.kinematics.position_enu_m
        if mode == FlightMode.HOLD:
            self._target_enu_m = position.copy()
            self._target_yaw_rad = None
        elif mode == FlightMode.MISSION:
            self._target_enu_m = position.copy()
            if restart_mission and self.mission_state == mavlink.MISSION_STATE_COMPLETE:
                self._restart_mission()
        elif mode == FlightMode.RTL:
            self._start_rtl()
            self._speed_override_m_s = None
            self.record_event('rtl')
        elif mode == FlightMode.LAND:
            self.record_event('land')
        elif mode == FlightMode.TAKEOFF:
            self.record_event('takeoff', target_up_m=round(self._takeoff_up_m, 3))
        if previous != mode:
            self.record_event('mode', mode=mode.value, previous=previous.value)
        if previous == FlightMode.MISSION and mode != FlightMode.MISSION:
            if self.mission_state == mavlink.MISSION_STATE_ACTIVE:
                self.mission_state = mavlink.MISSION_STATE_PAUSED
            self.listener.on_mission_changed()
        elif mode == FlightMode.MISSION:
            self.listener.on_mission_changed()
        self.listener.on_state_changed()

    def _update_landed_state(self) -> None:
        height_m = self.height_above_ground_m
        climbing = self.kinematics.velocity_enu_m_s[2] > 0.0
        previous = self.landed_state
        if self.landed_state == LandedState.ON_GROUND:
            if height_m > TOUCHDOWN_HEIGHT_M and climbing:
                self.landed_state = LandedState.TAKEOFF
                self._flew_since_arming = True
                if self.mode != FlightMode.TAKEOFF:
                    self.record_event('takeoff', target_up_m=round(self._takeoff_up_m, 3))
        elif height_m <= TOUCHDOWN_HEIGHT_M and not climbing:
            self.landed_state = LandedState.ON_GROUND
            self._ground_since_s = self._clock()
            self.kinematics.position_enu_m[2] = self.ground_up_m
            self.kinematics.velocity_enu_m_s[:] = 0.0
            self.record_event('landed')
        elif self.landed_state == LandedState.TAKEOFF and self.mode != FlightMode.TAKEOFF and (
                self.kinematics.position_enu_m[2] >= self._takeoff_up_m - ALTITUDE_TOLERANCE_M):
            self.landed_state = LandedState.IN_AIR
        elif self.landed_state == LandedState.LANDING and self.mode not in (
                FlightMode.LAND, FlightMode.RTL, FlightMode.MISSION):
            self.landed_state = LandedState.IN_AIR
        if self.mode == FlightMode.LAND and self.landed_state in (LandedState.IN_AIR,
                                                                  LandedState.TAKEOFF):
            self.landed_state = LandedState.LANDING
        if self.landed_state != previous:
            self.listener.on_state_changed()

    def _auto_disarm(self) -> None:
        if not self.armed or self.airborne:
            return
        now = self._clock()
        if self._flew_since_arming:
            delay_s = self.params['COM_DISARM_LAND']
            if delay_s > 0.0 and now - self._ground_since_s >= delay_s:
                self.disarm(reason='auto_landed')
        else:
            delay_s = self.params['COM_DISARM_PRFLT']
            if delay_s > 0.0 and now - self._armed_since_s >= delay_s and (
                    not self._takeoff_pending()):
                self.disarm(reason='auto_preflight')

    def _takeoff_pending(self) -> bool:
        """True when the current mode is about to lift off."""
        if self.mode == FlightMode.TAKEOFF:
            return True
        if self.mode == FlightMode.MISSION and self.mission_state != (
                mavlink.MISSION_STATE_COMPLETE):
            return True
        return self.mode == FlightMode.HOLD and (
            self._target_enu_m[2] > self.ground_up_m + TOUCHDOWN_HEIGHT_M)

    def _check_offboard_loss(self, wall_s: float) -> None:
        if self.mode != FlightMode.OFFBOARD or self._offboard is None:
            return
        if wall_s - self._offboard.wall_s > self.params['COM_OF_LOSS_T']:
            self._status(mavlink.MAV_SEVERITY_WARNING, 'Offboard set-points lost: Hold')
            self.record_event('offboard_lost')
            self._set_mode(FlightMode.HOLD)
            self._failsafe_acts('offboard_lost')

    def _battery_failsafes(self) -> None:
        """PX4's battery warnings in flight (COM_LOW_BAT_ACT 3): below BAT_LOW_THR a warning
        only, below BAT_CRIT_THR return to launch, below BAT_EMERGEN_THR land; each level
        announced once per flight with PX4's STATUSTEXT (the health check's "Low battery",
        "Critical battery", "Emergency battery level", then the failsafe framework's
        "Failsafe activated" when it acts)."""
        remaining = self.battery.remaining
        if not (self.armed and self.airborne):
            return
        if remaining < self.params['BAT_EMERGEN_THR'] and self._battery_failsafe < 3:
            self._battery_failsafe = 3
            self._status(mavlink.MAV_SEVERITY_EMERGENCY, 'Emergency battery level')
            self._status(mavlink.MAV_SEVERITY_CRITICAL, FAILSAFE_ACTIVATED_TEXT)
            self.record_event('battery_emergency_land', remaining=round(remaining, 4))
            if self.mode != FlightMode.LAND:
                self._set_mode(FlightMode.LAND)
            self._failsafe_acts('battery_emergency')
        elif remaining < self.params['BAT_CRIT_THR'] and self._battery_failsafe < 2:
            self._battery_failsafe = 2
            self._status(mavlink.MAV_SEVERITY_CRITICAL, 'Critical battery')
            self._status(mavlink.MAV_SEVERITY_CRITICAL, FAILSAFE_ACTIVATED_TEXT)
            self.record_event('battery_critical_rtl', remaining=round(remaining, 4))
            if self.mode not in (FlightMode.RTL, FlightMode.LAND):
                self._set_mode(FlightMode.RTL)
            self._failsafe_acts('battery_critical')
        elif remaining < self.params['BAT_LOW_THR'] and self._battery_failsafe < 1:
            self._battery_failsafe = 1
            # Declared critical by PX4 so a ground station reads it out; no action.
            self._status(mavlink.MAV_SEVERITY_CRITICAL, 'Low battery')
            self.record_event('battery_low', remaining=round(remaining, 4))

    def _geofence_action(self) -> GeofenceAction:
        return GeofenceAction(int(self.params['GF_ACTION']))

    def _inside_fence(self) -> bool:
        east_m, north_m, _ = self.position_enu_m
        return self.fence.allows(east_m, north_m)

    def _geofence_check(self) -> None:
        """PX4's geofence breach while armed and airborne: the action of GF_ACTION once as the
        vehicle leaves the allowed area; armed again only once it is back inside. 1 warns
        (critical STATUSTEXT), 2 Hold, 3 Return, 5 Land (each a failsafe; a vehicle already
        returning or landing keeps doing so), 4 flight termination (motors off in the air: a
        forced disarm, the vehicle drops), 0 nothing but the event log entry."""
        if not (self.armed and self.airborne):
            return
        if self._inside_fence():
            self._fence_breached = False
            return
        if self._fence_breached:
            return
        self._fence_breached = True
        action = self._geofence_action()
        east_m, north_m, _ = self.position_enu_m
        self.record_event('geofence_breach', action=action.label, east_m=round(east_m, 3),
                          north_m=round(north_m, 3))
        if action == GeofenceAction.NONE:
            return
        self._status(mavlink.MAV_SEVERITY_CRITICAL, GEOFENCE_VIOLATION_TEXT)
        if action == GeofenceAction.WARNING:
            return
        self._status(mavlink.MAV_SEVERITY_CRITICAL, FAILSAFE_ACTIVATED_TEXT)
        if action == GeofenceAction.TERMINATE:
            self._failsafe_acts('geofence')
            self.record_event('flight_termination', cause='geofence')
            self.disarm(force=True, reason='flight_termination')
            return
        if self.mode not in (FlightMode.RTL, FlightMode.LAND):
            self._set_mode(GEOFENCE_FAILSAFE_MODES[action])
        self._failsafe_acts('geofence')

    def _failsafe_acts(self, cause: str) -> None:
        """A failsafe action takes the vehicle (PX4 sets ``vehicle_status.failsafe``)."""
        if not self.failsafe:
            self.failsafe = True
            self.record_event('failsafe', active=True, cause=cause)
            self.listener.on_state_changed()

    def _clear_failsafe(self, reason: str) -> None:
        if self.failsafe:
            self.failsafe = False
            self.record_event('failsafe', active=False, reason=reason)
            self.listener.on_state_changed()

    def record_event(self, event: str, /, **details) -> None:
        """Add an entry to the simulator's event log."""
        if self._event_sink is not None:
            self._event_sink(self.index, event, details)

    def _status(self, severity: int, text: str) -> None:
        self.listener.on_status_text(severity, text)
