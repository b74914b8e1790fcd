"""The drone's geofence on its autopilot: the second, independent layer.

fl_uav checks every plan against the drone's geofence before it goes up
(:mod:`fl_uav.planning.geofence`); that check lives on the companion computer. The autopilot
enforces a fence of its own (MAVLink fence items; PX4 acts on a breach with GF_ACTION: Hold,
Return, Land, ...) whatever the companion computer does: a crashed drone node, an operator who
flies the vehicle out on the sticks and hands it back, a bug. Before its first flight the drone
puts its fence there (``geofence.autopilot_fence``):

* ``upload`` (default): fl_uav's box, widened by ``geofence.autopilot_margin_m`` (a mission
  overshoots its waypoints by up to its acceptance radius, and a waypoint may lie on the box's
  edge), as one inclusion polygon, when the autopilot holds no fence. A fence already there is
  kept and logged: an operator's fence drawn in QGroundControl may be tighter (a building, a
  road) and is never loosened or replaced by ours. Ours from an earlier run counts as there.
* ``replace``: fl_uav's fence replaces whatever the autopilot holds.
* ``off``: the autopilot's fence is left alone.

The polygon is horizontal: PX4's fence polygons have no altitude (its ceiling is GF_MAX_VER_DIST
above home, a parameter the drone leaves to the operator). A fence does nothing unless GF_ACTION
acts: 0 (None) and 1 (Warning) are reported as a warning (:func:`gf_action_problem`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fl_uav.configschema import require_choice
from fl_uav.planning.geofence import AUTOPILOT_FENCE_MODES, Geofence
from fl_uav.vehicle.interface import AutopilotFence, FencePolygon

#: PX4's GF_ACTION values by name.
GF_ACTION_NAMES = {0: 'None', 1: 'Warning', 2: 'Hold', 3: 'Return', 4: 'Terminate', 5: 'Land'}
#: GF_ACTION values that only report a breach (the vehicle flies on).
GF_ACTIONS_WITHOUT_ACTION = frozenset({0, 1})
#: Corners of a fence read back from the autopilot count as ours within this distance (MAVLink
#: sends them as 1e-7 degrees, about a centimetre).
SAME_CORNER_TOLERANCE_M = 0.5


@dataclass(frozen=True)
class FencePlan:
    """What the drone does with the autopilot's fence: ``action`` is 'upload' (send
    ``fence``), 'in_place' (the autopilot holds ours already), 'keep' (it holds another fence,
    left alone) or 'off' (not looked at); ``summary`` says so in a few words."""

    action: str
    fence: AutopilotFence
    summary: str


def fence_for_autopilot(fence: Geofence, margin_m: float) -> AutopilotFence:
    """fl_uav's horizontal box widened by ``margin_m`` on every side, as one inclusion polygon
    (corners counter-clockwise from the south-west)."""
    east_min, north_min = fence.east_min_m - margin_m, fence.north_min_m - margin_m
    east_max, north_max = fence.east_max_m + margin_m, fence.north_max_m + margin_m
    corners = ((east_min, north_min), (east_max, north_min), (east_max, north_max),
               (east_min, north_max))
    return AutopilotFence(polygons=(FencePolygon(corners, inclusion=True),))


def same_fence(first: AutopilotFence, second: AutopilotFence,
               tolerance_m: float = SAME_CORNER_TOLERANCE_M) -> bool:
    """Whether two fences have the same shapes, in the same order, within ``tolerance_m``."""
    if len(first.polygons) != len(second.polygons) or len(first.circles) != len(second.circles):
        return False
    for a, b in zip(first.polygons, second.polygons):
        if a.inclusion != b.inclusion or len(a.corners_en_m) != len(b.corners_en_m):
            return False
        if any(math.dist(p, q) > tolerance_m for p, q in zip(a.corners_en_m, b.corners_en_m)):
            return False
    for a, b in zip(first.circles, second.circles):
        if (a.inclusion != b.inclusion or math.dist(a.center_en_m, b.center_en_m) > tolerance_m
                or abs(a.radius_m - b.radius_m) > tolerance_m):
            return False
    return True


def plan_fence(mode: str, ours: AutopilotFence, found: AutopilotFence | None) -> FencePlan:
    """What to do with the autopilot's fence in ``mode`` (:data:`AUTOPILOT_FENCE_MODES`),
    given ``found``, the fence it holds (None: not read, for mode 'off' or 'replace')."""
    require_choice('geofence.autopilot_fence', mode, AUTOPILOT_FENCE_MODES)
    if mode == 'off':
        return FencePlan('off', AutopilotFence(), 'not managed (geofence.autopilot_fence off)')
    if found is not None and same_fence(found, ours):
        return FencePlan('in_place', ours, "fl_uav's, already on the autopilot")
    if mode == 'replace' or found is None or found.empty:
        return FencePlan('upload', ours, "fl_uav's, uploaded")
    return FencePlan('keep', found, f"the autopilot's own ({found.describe()}), kept")


def gf_action_problem(action: int | None, fence_on_autopilot: bool) -> str:
    """A warning if the autopilot holds a fence but PX4's GF_ACTION only reports a breach
    (0 None, 1 Warning), else '' (also for an unknown GF_ACTION)."""
    if not fence_on_autopilot or action not in GF_ACTIONS_WITHOUT_ACTION:
        return ''
    return (f'PX4 GF_ACTION is {action} ({GF_ACTION_NAMES[action]}): a breach of the '
            f"autopilot's fence does not stop the vehicle; set GF_ACTION to 2 (Hold), "
            f'3 (Return) or 5 (Land)')
