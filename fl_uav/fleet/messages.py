"""Plain message types exchanged by the roles (the ROS layer converts them to ROS messages)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.values import is_int

#: The station's rejection reason of an update frame it already had (the same bytes), or of an
#: update of a round that closed with that drone's update in it: a recording played again, or
#: a drone's kept last update delivered once more when a link comes back (/fl/updates keeps
#: it, fl_uav.ros.names.updates_publisher_qos). Not a late update (``wrong_round``).
REPLAY = 'replay'

#: Largest count a message may carry: the integers a float64 holds exactly (JSON ints are
#: unbounded; counts are summed and planned with as floats).
MAX_COUNT = 2 ** 53


#: Per-drone knob of a GLOBAL_MODEL frame (round r ≥ 2) saying whether the drone's round r − 1
#: upload was used: ``{'round': r - 1, 'used': bool, 'layers': [ids]}``; ``layers`` (LGC only)
#: lists the layer ids the station summed. The drone rolls back what was not used (LGC
#: residual, SCAFFOLD c_k) before training round r. See docs/wire_format.md.
UPLOAD_ACK_KNOB = 'upload_ack'


@dataclass(frozen=True)
class PoseSample:
    """A drone pose in local ENU metres with its time stamp (seconds)."""

    east_m: float
    north_m: float
    up_m: float
    yaw_rad: float
    stamp_s: float

    def non_finite_fields(self) -> tuple[str, ...]:
        """Names of the fields that are NaN or infinite (empty for a usable pose): a bad
        telemetry or ground-truth message is refused by name, not rendered or labelled."""
        return tuple(name for name in ('east_m', 'north_m', 'up_m', 'yaw_rad', 'stamp_s')
                     if not math.isfinite(getattr(self, name)))


#: Metadata key of an update: why the drone's flight in that round failed (a plan refused by
#: its geofence, a vehicle error, the flight budget), at most FLIGHT_ERROR_MAX_CHARS
#: characters; absent when the flight did not fail (and from drones of an older fl_uav).
FLIGHT_ERROR_KEY = 'flight_error'
FLIGHT_ERROR_MAX_CHARS = 200


def short_flight_error(reason: str) -> str:
    """``reason`` as an update carries it: at most FLIGHT_ERROR_MAX_CHARS characters (a cut
    one ends with '...')."""
    if len(reason) <= FLIGHT_ERROR_MAX_CHARS:
        return reason
    return reason[:FLIGHT_ERROR_MAX_CHARS - 3] + '...'


#: Metadata key of every station frame (and, echoed, of every update): the run id the
#: station drew at start (RUN_ID_HEX_CHARS hex digits). See fl_uav/fleet/round_gate.py.
RUN_ID_KEY = 'run_id'
RUN_ID_HEX_CHARS = 16
#: Metadata key of every station frame: when the station started the run (UNIX ms). Runs are
#: ordered by it: a drone never goes back to a run that started before the one it is in.
RUN_STARTED_KEY = 'run_started_ms'


#: Metadata key of a GLOBAL_MODEL frame: when the station opened the round (UNIX ms, its wall
#: clock). A drone that gets the frame late (restarted, joined late, a slow link) flies only
#: for what is left of the round (DronePilot.flight_budget_s).
ROUND_OPENED_KEY = 'opened_ms'


def round_opened_of(metadata: dict[str, Any]) -> int | None:
    """When the round opened (UNIX ms; None: absent, an older station); ValueError naming
    the key when present but not a time."""
    opened_ms = metadata.get(ROUND_OPENED_KEY)
    if opened_ms is not None and not (is_int(opened_ms) and 0 <= opened_ms <= MAX_COUNT):
        raise ValueError(f'{ROUND_OPENED_KEY} {opened_ms!r} is not a time')
    return opened_ms


def valid_run_id(value: Any) -> bool:
    """A run id as a station draws it: RUN_ID_HEX_CHARS lower-case hex digits."""
    return (isinstance(value, str) and len(value) == RUN_ID_HEX_CHARS
            and all(c in '0123456789abcdef' for c in value))


def run_metadata(run_id: str | None, run_started_ms: int | None) -> dict[str, Any]:
    """The metadata entries that carry a run (the inverse of :func:`run_of`; None: left out)."""
    return {key: value for key, value in ((RUN_ID_KEY, run_id),
                                          (RUN_STARTED_KEY, run_started_ms))
            if value is not None}


def run_of(metadata: dict[str, Any]) -> tuple[str | None, int | None]:
    """The run id and start (UNIX ms) a station frame's metadata carries (None: absent, an
    older sender); ValueError naming the key when one is present but malformed."""
    run_id, started_ms = metadata.get(RUN_ID_KEY), metadata.get(RUN_STARTED_KEY)
    if run_id is not None and not valid_run_id(run_id):
        raise ValueError(f'{RUN_ID_KEY} {run_id!r} is not a run id')
    if started_ms is not None and not (is_int(started_ms) and 0 <= started_ms <= MAX_COUNT):
        raise ValueError(f'{RUN_STARTED_KEY} {started_ms!r} is not a time')
    return run_id, started_ms


@dataclass(frozen=True)
class RoundTask:
    """What a drone must do in a round: fly the plan, then train from the global weights.
    ``num_rounds`` is the run length the station announced with it (None: not announced),
    ``run_id`` the station's run (None: an older station) and ``run_started_ms`` when it
    started (UNIX ms), ``run_epoch`` the drone's count of
    runs taken part in (its RoundGate's): learning state carried between rounds (SCAFFOLD's
    c_k, LGC's residual, the pending upload) starts over when it changes, and so do the
    per-run flight figures (``DroneAgent.waypoints_reached``). ``flight_error`` is why the
    round's flight failed ('' if it did not), set by the pilot before training.
    ``opened_ms``: when the station opened the round (UNIX ms; None: not announced)."""

    round_index: int
    weights: dict
    plan: tuple[PlanWaypoint, ...]
    knobs: dict[str, Any] = field(default_factory=dict)
    deadline_s: float = 0.0
    num_rounds: int | None = None
    run_id: str | None = None
    run_epoch: int = 0
    run_started_ms: int | None = None
    flight_error: str = ''
    opened_ms: int | None = None


@dataclass(frozen=True)
class FinishCommand:
    """The station ended the run ``run_id`` (None: an older station): land and stop."""

    round_index: int
    run_id: str | None = None
    run_started_ms: int | None = None


#: Per-UAV knob of a GLOBAL_MODEL frame in ``mode: express``: ``{'clients': [ids in tour
#: order], 'local_steps': s}``. The round's ``plan`` knob then holds one hover waypoint per
#: client (same order) and the station last. See docs/wire_format.md.
EXPRESS_KNOB = 'express'
