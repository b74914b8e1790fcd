"""Point-mass multirotor kinematics and a battery model for the autopilot simulator.

Pure numpy; no MAVLink. Positions and velocities are ENU metres relative to the sim's
:class:`~fl_uav.world.geo.GeoOrigin`; yaw is ENU (counter-clockwise from east), radians.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_uav.world.geo import wrap_angle_rad

# Speeds below this are treated as hovering when choosing a heading.
_HEADING_MIN_SPEED_M_S = 0.5
# Horizontal distance below which the vehicle no longer turns toward its target.
_HEADING_MIN_DISTANCE_M = 1.0


@dataclass
class MotionLimits:
    """Speed, acceleration and turn-rate limits of one motion step."""

    horizontal_speed_m_s: float
    climb_speed_m_s: float
    descent_speed_m_s: float
    horizontal_accel_m_s2: float
    yaw_rate_rad_s: float


@dataclass
class KinematicState:
    """Ground-truth motion state of one vehicle."""

    position_enu_m: np.ndarray
    velocity_enu_m_s: np.ndarray
    yaw_rad: float = 0.0

    @classmethod
    def at_rest(cls, east_m: float, north_m: float, up_m: float = 0.0,
                yaw_rad: float = 0.0) -> KinematicState:
        """A vehicle standing still at a position."""
        return cls(np.array([east_m, north_m, up_m], dtype=float), np.zeros(3), yaw_rad)

    @property
    def horizontal_speed_m_s(self) -> float:
        """Ground speed, m/s."""
        return float(math.hypot(self.velocity_enu_m_s[0], self.velocity_enu_m_s[1]))


def step_toward(state: KinematicState, target_enu_m: np.ndarray, dt_s: float,
                limits: MotionLimits, yaw_target_rad: float | None = None,
                ground_up_m: float = 0.0) -> None:
    """Move ``state`` toward ``target_enu_m`` for ``dt_s`` seconds, in place.

    Horizontal motion accelerates at most ``horizontal_accel_m_s2`` and brakes so that it stops
    on the target (v <= sqrt(2 a d)); vertical motion runs at the climb or descent cap. The
    vehicle never goes below ``ground_up_m``. With ``yaw_target_rad`` None, the vehicle turns
    toward the direction of horizontal flight; yaw changes at most ``yaw_rate_rad_s``.
    """
    if dt_s <= 0.0:
        return
    position = state.position_enu_m
    offset = target_enu_m[:2] - position[:2]
    distance_m = float(math.hypot(offset[0], offset[1]))
    accel = limits.horizontal_accel_m_s2
    if distance_m > 1e-9:
        direction = offset / distance_m
        desired_speed = min(limits.horizontal_speed_m_s, math.sqrt(2.0 * accel * distance_m))
        desired_velocity = direction * desired_speed
    else:
        desired_velocity = np.zeros(2)
    delta_v = desired_velocity - state.velocity_enu_m_s[:2]
    delta_norm = float(math.hypot(delta_v[0], delta_v[1]))
    max_delta = accel * dt_s
    if delta_norm > max_delta:
        delta_v *= max_delta / delta_norm
    velocity_xy = state.velocity_enu_m_s[:2] + delta_v
    speed = float(math.hypot(velocity_xy[0], velocity_xy[1]))
    if speed > limits.horizontal_speed_m_s:
        velocity_xy *= limits.horizontal_speed_m_s / speed
    step_xy = velocity_xy * dt_s
    if distance_m <= float(math.hypot(step_xy[0], step_xy[1])) or (
            distance_m < 0.01 and speed < 0.1):
        # Arrives within this step: stop on the target.
        moved_velocity_xy = offset / dt_s
        position[:2] = target_enu_m[:2]
        velocity_xy = np.zeros(2)
    else:
        position[:2] += step_xy
        moved_velocity_xy = velocity_xy

    target_up_m = max(float(target_enu_m[2]), ground_up_m)
    dz_m = target_up_m - position[2]
    vz = min(max(dz_m / dt_s, -limits.descent_speed_m_s), limits.climb_speed_m_s)
    position[2] = max(position[2] + vz * dt_s, ground_up_m)
    state.velocity_enu_m_s = np.array([velocity_xy[0], velocity_xy[1], vz])

    if yaw_target_rad is None:
        moved_speed = float(math.hypot(moved_velocity_xy[0], moved_velocity_xy[1]))
        if moved_speed > _HEADING_MIN_SPEED_M_S and distance_m > _HEADING_MIN_DISTANCE_M:
            yaw_target_rad = math.atan2(moved_velocity_xy[1], moved_velocity_xy[0])
        elif distance_m > _HEADING_MIN_DISTANCE_M:
            yaw_target_rad = math.atan2(offset[1], offset[0])
    if yaw_target_rad is not None:
        state.yaw_rad = turn_toward(state.yaw_rad, yaw_target_rad,
                                    limits.yaw_rate_rad_s * dt_s)


def turn_toward(yaw_rad: float, target_rad: float, max_step_rad: float) -> float:
    """Rotate ``yaw_rad`` toward ``target_rad`` by at most ``max_step_rad``, the short way."""
    error = wrap_angle_rad(target_rad - yaw_rad)
    if abs(error) <= max_step_rad:
        return wrap_angle_rad(target_rad)
    return wrap_angle_rad(yaw_rad + math.copysign(max_step_rad, error))


@dataclass
class BatteryModel:
    """A LiPo pack drained by a power model that depends on the flight state.

    Power: ``idle_power_w`` disarmed; ``armed_ground_fraction * hover_power_w`` armed on the
    ground; in the air ``hover_power_w`` plus a quadratic term in ground speed reaching
    ``max_speed_power_w`` at ``max_speed_m_s``, plus ``climb_power_fraction * hover_power_w``
    at full climb rate. Voltage is linear in the remaining fraction per cell (4.2 V full,
    3.5 V empty) minus an internal-resistance sag.
    """

    capacity_wh: float
    energy_wh: float
    cells: int = 4
    idle_power_w: float = 5.0
    hover_power_w: float = 250.0
    max_speed_power_w: float = 350.0
    max_speed_m_s: float = 15.0
    climb_speed_m_s: float = 3.0
    armed_ground_fraction: float = 0.2
    climb_power_fraction: float = 0.3
    internal_resistance_ohm: float = 0.02
    power_w: float = 0.0
    consumed_wh: float = 0.0

    CELL_FULL_V = 4.2
    CELL_EMPTY_V = 3.5

    @property
    def remaining(self) -> float:
        """Remaining fraction of the capacity, in [0, 1]."""
        return max(0.0, min(1.0, self.energy_wh / self.capacity_wh))

    @property
    def open_circuit_voltage_v(self) -> float:
        """Pack voltage without load."""
        cell_v = self.CELL_EMPTY_V + (self.CELL_FULL_V - self.CELL_EMPTY_V) * self.remaining
        return self.cells * cell_v

    @property
    def current_a(self) -> float:
        """Current drawn at the present power."""
        return self.power_w / max(self.open_circuit_voltage_v, 1e-3)

    @property
    def voltage_v(self) -> float:
        """Pack voltage under the present load."""
        sag_v = self.current_a * self.internal_resistance_ohm
        return max(0.0, self.open_circuit_voltage_v - sag_v)

    @property
    def time_remaining_s(self) -> float:
        """Time to empty at the present power (inf when no power is drawn)."""
        if self.power_w <= 0.0:
            return math.inf
        return self.energy_wh * 3600.0 / self.power_w

    def power_for(self, armed: bool, airborne: bool, horizontal_speed_m_s: float,
                  climb_rate_m_s: float) -> float:
        """Electrical power (W) drawn in a flight state."""
        if not armed:
            return self.idle_power_w
        if not airborne:
            return self.idle_power_w + self.armed_ground_fraction * self.hover_power_w
        speed_ratio = min(horizontal_speed_m_s / max(self.max_speed_m_s, 1e-6), 1.5)
        extra_w = (self.max_speed_power_w - self.hover_power_w) * speed_ratio ** 2
        power = self.hover_power_w + extra_w
        if climb_rate_m_s > 0.0:
            climb_ratio = min(climb_rate_m_s / max(self.climb_speed_m_s, 1e-6), 1.5)
            power += self.climb_power_fraction * self.hover_power_w * climb_ratio
        return self.idle_power_w + power

    def drain(self, dt_s: float, power_w: float) -> None:
        """Draw ``power_w`` for ``dt_s`` seconds."""
        self.power_w = power_w
        used_wh = power_w * dt_s / 3600.0
        self.consumed_wh += used_wh
        self.energy_wh = max(0.0, self.energy_wh - used_wh)
