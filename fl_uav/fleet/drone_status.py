"""A drone's state at a glance, for the operator: phase, round, autopilot link, battery, errors.

The drone node publishes it every ``status.period_s`` as a diagnostic_msgs/DiagnosticStatus on
``/diagnostics`` (rqt_runtime_monitor, Foxglove's diagnostics panel, ``ros2 topic echo``), one
status per drone named ``fl_uav: uav<i>``. ROS-free: :func:`drone_status` reads the pilot, the
agent and the round gate and returns a :class:`StatusReport`; the node converts it. Among its
values, ``heartbeats_refused`` counts the station heartbeats not taken as the station heard,
by reason (fl_uav/fleet/heartbeat_auth.py: malformed, unsigned, forged, replayed, stale).

Levels (diagnostic_msgs' OK / WARN / ERROR):
- ERROR: the autopilot link was up and is lost now; battery at or below
  ``status.battery_error_fraction``.
- WARN: nothing (no frame, no heartbeat) from the ground station for
  ``flight.station_timeout_s`` (the drone returns to launch: fl_uav/fleet/station_watchdog.py);
  the station's heartbeats say its worker has been aggregating or planning for
  ``flight.station_timeout_s`` or longer (stuck? the drone does not act on it: the station is
  alive and may still send the round); the station's heartbeat period (its
  ``status.heartbeat_period_s``, each beat says it) x STATION_TIMEOUT_HEARTBEATS exceeds this
  drone's ``flight.station_timeout_s`` (a few lost beats would return it); no autopilot link
  yet; battery at or below ``status.battery_warn_fraction``; the round in progress or last
  flown has a flight error (its reason is the message); the vehicle is in the air in a mode
  the pilot did not put it in (a PX4 failsafe or an operator has it:
  :meth:`DronePilot.taken_over_by`; the drone node commands nothing until it is back in
  Hold), or was and is now on the ground (not armed again until the node restarts); the run
  is over but the vehicle is still in the air.
- OK otherwise. The message says the worst condition first, then the phase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fl_uav.fleet.config import StatusConfig
from fl_uav.fleet.pilot_phase import Phase
from fl_uav.fleet.round_gate import RoundGate
from fl_uav.fleet.station_heartbeat import WORKER_PHASES, Heartbeat
from fl_uav.fleet.station_watchdog import heartbeat_period_problem
from fl_uav.vehicle.interface import BatteryStatus

if TYPE_CHECKING:
    # Only annotations: the agent trains (torch) and the pilot plans (scipy), and
    # StatusReport is read by fl_uav.ros.conversions, which every node imports.
    from fl_uav.fleet.drone_agent import DroneAgent
    from fl_uav.fleet.drone_pilot import DronePilot

OK, WARN, ERROR = 0, 1, 2       # diagnostic_msgs/DiagnosticStatus levels


@dataclass(frozen=True)
class StatusReport:
    """One DiagnosticStatus: name, hardware id, level, one-line message, key/value pairs."""

    name: str
    hardware_id: str
    level: int
    message: str
    values: tuple[tuple[str, str], ...]


def status_name(drone_id: int) -> str:
    """The DiagnosticStatus name of drone i (rqt groups by the prefix)."""
    return f'fl_uav: uav{drone_id}'


def _tristate(value: bool | None) -> str:
    return 'unknown' if value is None else str(value).lower()


def _counts(counter: Mapping[str, int]) -> str:
    return ', '.join(f'{k}={v}' for k, v in sorted(counter.items())) or 'none'


def _mavlink_signing(vehicle) -> str:
    """'off', or 'on' with what the signing relay dropped (unsigned or badly signed frames
    from the link: someone else on it)."""
    if not getattr(vehicle, 'signs_link', False):
        return 'off'
    relay = getattr(vehicle, 'signing_relay', None)
    return 'on' if relay is None else f'on; dropped: {_counts(relay.dropped)}'


def drone_status(drone_id: int, pilot: DronePilot, agent: DroneAgent, gate: RoundGate,
                 battery: BatteryStatus | None, config: StatusConfig,
                 station_silent_s: float = math.nan, station_beat: Heartbeat | None = None,
                 station_phase_age_s: float = math.nan,
                 heartbeats_refused: Mapping[str, int] | None = None) -> StatusReport:
    """The drone's status now (module docstring for the levels); ``station_silent_s``:
    seconds since the ground station was last heard (NaN: not tracked); ``station_beat``:
    the station's last heartbeat (None: none yet), in its phase for ``station_phase_age_s``
    as of now; ``heartbeats_refused``: station heartbeats not counted as heard, by reason
    (fl_uav/fleet/heartbeat_auth.py)."""
    vehicle, state = pilot.vehicle, pilot.state
    link_up = vehicle.link_up
    if not state.connected:
        link = 'not connected yet'
    else:
        link = 'up' if link_up else 'lost'
    fraction = battery.remaining_fraction if battery is not None else math.nan
    problems: list[tuple[int, str]] = []
    if state.connected and not link_up:
        problems.append((ERROR, f'autopilot link lost ({vehicle.link_losses} losses so far)'))
    elif not state.connected:
        problems.append((WARN, 'no autopilot link yet'))
    if fraction <= config.battery_error_fraction:
        problems.append((ERROR, f'battery {fraction:.0%}'))
    elif fraction <= config.battery_warn_fraction:
        problems.append((WARN, f'battery {fraction:.0%}'))
    if state.round_error:
        problems.append((WARN, state.round_error))
    taken_over = pilot.taken_over_by()
    if taken_over and state.taken_over_by_failsafe:
        problems.append((WARN, f'{taken_over}: the drone node commands nothing; switch the '
                               f'vehicle to Hold to end the failsafe and hand it back'))
    elif taken_over:
        problems.append((WARN, f'autopilot flies the vehicle in {taken_over} (a failsafe or '
                               f'an operator): the drone node commands nothing'))
    elif state.taken_over and vehicle.in_air is False:
        problems.append((WARN, f'taken over ({state.taken_over}) and on the ground: restart '
                               f'the drone node to fly it again'))
    if state.autopilot_fence_problem:
        problems.append((WARN, state.autopilot_fence_problem))
    timeout_s = pilot.flight.station_timeout_s
    if 0 < timeout_s <= station_silent_s and state.phase != Phase.FINISHED:
        problems.append((WARN, f'nothing from the ground station for '
                               f'{station_silent_s:.0f} s'))
    elif (station_beat is not None and station_beat.phase in WORKER_PHASES
          and 0 < timeout_s <= station_phase_age_s):
        problems.append((WARN, f'ground station {station_beat.phase} for '
                               f'{station_phase_age_s:.0f} s (stuck?)'))
    period_problem = heartbeat_period_problem(timeout_s, station_beat)
    if period_problem:
        problems.append((WARN, period_problem))
    if state.phase == Phase.FINISHED and pilot.in_flight:
        problems.append((WARN, 'run over, vehicle still in the air'))
    problems.sort(key=lambda p: -p[0])
    level = problems[0][0] if problems else OK
    where = (f'round {gate.last_round} {state.phase}' if gate.last_round
             else state.phase)
    message = '; '.join([*(text for _, text in problems), where])
    values = (
        ('drone_id', str(drone_id)),
        ('phase', state.phase),
        ('run_id', gate.run_id or 'unknown'),
        ('round', str(gate.last_round)),
        ('autopilot_link', link),
        ('link_losses', str(vehicle.link_losses)),
        ('armed', _tristate(vehicle.armed)),
        ('in_air', _tristate(vehicle.in_air)),
        ('flight_mode', vehicle.flight_mode or 'unknown'),
        ('system_status', getattr(vehicle, 'system_status', '') or 'unknown'),
        ('mavlink_signing', _mavlink_signing(vehicle)),
        ('autopilot_fence', state.autopilot_fence or 'not settled yet'),
        ('battery_percent', 'unknown' if math.isnan(fraction) else f'{100 * fraction:.0f}'),
        ('battery_voltage_v', 'unknown' if battery is None else f'{battery.voltage_v:.2f}'),
        ('buffered_samples', str(agent.buffered_samples)),
        ('rounds_trained', str(agent.rounds_trained)),
        ('waypoints_reached', str(agent.waypoints_reached)),
        ('station_silent_s', 'unknown' if math.isnan(station_silent_s)
         else f'{station_silent_s:.0f}'),
        ('station_phase', 'no heartbeat' if station_beat is None else station_beat.phase),
        ('station_phase_age_s', 'unknown' if math.isnan(station_phase_age_s)
         else f'{station_phase_age_s:.0f}'),
        ('heartbeats_refused', _counts(heartbeats_refused or {})),
        ('last_error', state.last_error or 'none'),
        ('plans_rejected', _counts(pilot.plans_rejected)),
        ('global_frames_rejected', _counts(agent.rejected_reasons)),
        ('global_frames_ignored', _counts(gate.ignored)),
        ('knobs_rejected', _counts(agent.knobs_rejected)),
        ('camera_frames_rejected', _counts(agent.camera_frames_rejected)),
        ('frames_unlabelled', str(agent.frames_unlabelled)),
        ('telemetry_rejected', _counts(vehicle.telemetry_rejected)),
        ('uploads_rolled_back', str(agent.uploads_rolled_back)),
        ('rounds_dropped', str(agent.rounds_dropped)),
        ('rounds_capped', str(agent.rounds_capped)),
        ('rounds_stopped_at_deadline', str(agent.rounds_stopped_at_deadline)),
    )
    return StatusReport(status_name(drone_id), f'uav{drone_id}', level, message, values)
