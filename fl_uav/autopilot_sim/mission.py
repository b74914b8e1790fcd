"""Mission items as the simulated autopilot stores them, and their validation.

Items are kept exactly as uploaded (MISSION_ITEM_INT fields), so a download returns what was
sent. Validation follows what PX4 checks before accepting a plan: supported commands and frames,
latitude/longitude in range, finite altitude and parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pymavlink.dialects.v20 import common as mavlink

# Commands that move the vehicle and are executed by the simulated mission.
NAV_POSITION_COMMANDS = frozenset({
    mavlink.MAV_CMD_NAV_WAYPOINT,
    mavlink.MAV_CMD_NAV_LOITER_UNLIM,
    mavlink.MAV_CMD_NAV_LOITER_TURNS,
    mavlink.MAV_CMD_NAV_LOITER_TIME,
    mavlink.MAV_CMD_NAV_LAND,
    mavlink.MAV_CMD_NAV_TAKEOFF,
})
NAV_COMMANDS = NAV_POSITION_COMMANDS | {mavlink.MAV_CMD_NAV_RETURN_TO_LAUNCH}
# DO/condition/camera items PX4 accepts; only DO_CHANGE_SPEED has an effect in the sim.
ACCEPTED_DO_COMMANDS = frozenset({
    mavlink.MAV_CMD_DO_CHANGE_SPEED,
    mavlink.MAV_CMD_CONDITION_DELAY,
    mavlink.MAV_CMD_DO_SET_HOME,
    mavlink.MAV_CMD_DO_SET_ROI_LOCATION,
    mavlink.MAV_CMD_DO_SET_ROI_WPNEXT_OFFSET,
    mavlink.MAV_CMD_DO_SET_ROI_NONE,
    mavlink.MAV_CMD_DO_SET_ROI,
    mavlink.MAV_CMD_DO_MOUNT_CONTROL,
    mavlink.MAV_CMD_DO_SET_CAM_TRIGG_DIST,
    mavlink.MAV_CMD_DO_GIMBAL_MANAGER_PITCHYAW,
    mavlink.MAV_CMD_IMAGE_START_CAPTURE,
    mavlink.MAV_CMD_IMAGE_STOP_CAPTURE,
    mavlink.MAV_CMD_VIDEO_START_CAPTURE,
    mavlink.MAV_CMD_VIDEO_STOP_CAPTURE,
    mavlink.MAV_CMD_DO_LAND_START,
    mavlink.MAV_CMD_DO_VTOL_TRANSITION,
})
GLOBAL_FRAMES = frozenset({
    mavlink.MAV_FRAME_GLOBAL,
    mavlink.MAV_FRAME_GLOBAL_INT,
    mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT,
    mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT,
})
RELATIVE_ALT_FRAMES = frozenset({
    mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT,
    mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT,
})
MAX_MISSION_ITEMS = 1000
# Altitudes outside this band (m) are rejected as nonsense.
MAX_ABS_ALTITUDE_M = 20_000.0


@dataclass(frozen=True)
class MissionItem:
    """One stored mission item (MISSION_ITEM_INT fields; x/y are degrees * 1e7)."""

    seq: int
    frame: int
    command: int
    current: int
    autocontinue: int
    param1: float
    param2: float
    param3: float
    param4: float
    x: int
    y: int
    z: float
    mission_type: int = mavlink.MAV_MISSION_TYPE_MISSION

    @classmethod
    def from_message(cls, msg) -> MissionItem:
        """Build from a MISSION_ITEM_INT or a legacy float MISSION_ITEM message."""
        if msg.get_type() == 'MISSION_ITEM_INT':
            x, y = int(msg.x), int(msg.y)
        else:
            x, y = _degrees_to_int(msg.x), _degrees_to_int(msg.y)
        return cls(int(msg.seq), int(msg.frame), int(msg.command), int(msg.current),
                   int(msg.autocontinue), float(msg.param1), float(msg.param2),
                   float(msg.param3), float(msg.param4), x, y, float(msg.z),
                   int(getattr(msg, 'mission_type', 0)))

    @property
    def lat_deg(self) -> float:
        """Latitude in degrees."""
        return self.x * 1e-7

    @property
    def lon_deg(self) -> float:
        """Longitude in degrees."""
        return self.y * 1e-7

    @property
    def has_position(self) -> bool:
        """False when latitude and longitude are both zero (meaning: current position)."""
        return not (self.x == 0 and self.y == 0)

    @property
    def is_nav(self) -> bool:
        """True for items that move the vehicle."""
        return self.command in NAV_COMMANDS


def _degrees_to_int(value_deg: float) -> int:
    if not math.isfinite(value_deg):
        return 0
    scaled = round(value_deg * 1e7)
    # Keep out-of-range values out of range (validation rejects them) without overflow.
    return max(-2**31, min(2**31 - 1, scaled))


def validate_item(item: MissionItem) -> int:
    """Return MAV_MISSION_ACCEPTED or the MAV_MISSION_* error PX4 would report."""
    if item.mission_type != mavlink.MAV_MISSION_TYPE_MISSION:
        return _validate_geo_item(item)
    if item.command in NAV_POSITION_COMMANDS:
        if item.frame not in GLOBAL_FRAMES:
            return mavlink.MAV_MISSION_UNSUPPORTED_FRAME
        if item.command == mavlink.MAV_CMD_NAV_LOITER_TIME and not item.param1 >= 0.0:
            return mavlink.MAV_MISSION_INVALID_PARAM1
        if item.command == mavlink.MAV_CMD_NAV_WAYPOINT and not (
                math.isnan(item.param1) or item.param1 >= 0.0):
            return mavlink.MAV_MISSION_INVALID_PARAM1
        return _validate_position(item)
    if item.command == mavlink.MAV_CMD_NAV_RETURN_TO_LAUNCH:
        return mavlink.MAV_MISSION_ACCEPTED
    if item.command == mavlink.MAV_CMD_DO_CHANGE_SPEED:
        if not math.isfinite(item.param2):
            return mavlink.MAV_MISSION_INVALID_PARAM2
        return mavlink.MAV_MISSION_ACCEPTED
    if item.command in ACCEPTED_DO_COMMANDS:
        return mavlink.MAV_MISSION_ACCEPTED
    return mavlink.MAV_MISSION_UNSUPPORTED


def _validate_position(item: MissionItem) -> int:
    if not -90.0 <= item.lat_deg <= 90.0:
        return mavlink.MAV_MISSION_INVALID_PARAM5_X
    if not -180.0 <= item.lon_deg <= 180.0:
        return mavlink.MAV_MISSION_INVALID_PARAM6_Y
    if not (math.isfinite(item.z) and abs(item.z) <= MAX_ABS_ALTITUDE_M):
        return mavlink.MAV_MISSION_INVALID_PARAM7
    return mavlink.MAV_MISSION_ACCEPTED


def _validate_geo_item(item: MissionItem) -> int:
    """Geofence and rally items: only their position is checked here (a fence's commands,
    frames and shapes are :mod:`fl_uav.autopilot_sim.fence`'s, rally points are only stored)."""
    if item.mission_type not in (mavlink.MAV_MISSION_TYPE_FENCE, mavlink.MAV_MISSION_TYPE_RALLY):
        return mavlink.MAV_MISSION_UNSUPPORTED
    if item.frame in GLOBAL_FRAMES:
        return _validate_position(item)
    return mavlink.MAV_MISSION_ACCEPTED


def mission_result_name(result: int) -> str:
    """Readable name of a MAV_MISSION_RESULT value."""
    entry = mavlink.enums['MAV_MISSION_RESULT'].get(result)
    return entry.name if entry is not None else str(result)
