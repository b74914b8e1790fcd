"""The ground station's state at a glance, beside the drones' on ``/diagnostics``.

One DiagnosticStatus named ``fl_uav: ground_station``, every ``status.period_s``, so the
operator's rqt_runtime_monitor or Foxglove diagnostics panel shows the station and each drone
(fl_uav/fleet/drone_status.py) together. Levels:
- ERROR: the run is not over and no drone node subscribes to the global model; the run ended
  as failed (its aggregation failed ``aggregation.max_failed_rounds`` rounds in a row).
- WARN: some drones do not subscribe (their node is down, or DDS does not see it); the last
  round closed with drones late or missing (not in FedEx-Async, where the UAVs still on their
  tour are missing from every round by design), with flight errors, or with a learning warning (a
  diverged model, fl_uav/learning/divergence.py).
- OK otherwise. The message says the worst condition first, then where the run is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fl_uav.fleet.drone_status import ERROR, OK, WARN, StatusReport
from fl_uav.fleet.ground_station import GroundStation

STATION_STATUS_NAME = 'fl_uav: ground_station'


def _where(station: GroundStation, now_s: float) -> tuple[str, str, str]:
    """(phase, round text, seconds to the deadline) of the run now."""
    total = station.config.rounds.num_rounds
    progress = station.round_progress
    if station.finished:
        return station.status, f'{len(station.records)}/{total}', ''
    if progress is None:
        phase = 'waiting for drones' if not station.records else 'between rounds'
        return phase, f'{len(station.records)}/{total}', ''
    index, deadline_s, complete = progress
    left_s = max(0.0, deadline_s - now_s)
    if _asynchronous(station):       # closes at the next landing, not when all are in
        return 'round open until the next landing', f'{index}/{total}', f'{left_s:.0f}'
    return (f'round open, {len(complete)}/{len(station.drone_ids)} updates',
            f'{index}/{total}', f'{left_s:.0f}')


def _asynchronous(station: GroundStation) -> bool:
    """FedEx-Async: a round closes at the first landing, the other UAVs are still out."""
    return station.config.mode == 'express' and station.config.express.mode == 'async'


def station_status(station: GroundStation, listening: Sequence[int],
                   now_s: float) -> StatusReport:
    """The station's status now; ``listening``: the drones whose node subscribes to the
    global model (the node asks the ROS graph)."""
    phase, round_text, left_s = _where(station, now_s)
    problems: list[tuple[int, str]] = []
    missing = [d for d in station.drone_ids if d not in listening]
    if station.failure:   # aggregation.max_failed_rounds: the run ended as failed
        problems.append((ERROR, station.failure))
    if not station.finished and not listening:
        problems.append((ERROR, 'no drone node subscribes to the global model'))
    elif not station.finished and missing:
        problems.append((WARN, f'drones not subscribed: {missing}'))
    last = station.records[-1] if station.records else None
    if last is not None:
        if last.late_or_missing and not _asynchronous(station):   # Async: still on tour
            problems.append((WARN, f'round {last.round_index}: late or missing '
                                   f'{last.late_or_missing}'))
        if last.flight_errors:
            problems.append((WARN, f'round {last.round_index}: flight errors from '
                                   f'{sorted(last.flight_errors)}'))
        problems.extend((WARN, warning) for warning in last.warnings)
    problems.sort(key=lambda p: -p[0])
    level = problems[0][0] if problems else OK
    where = f'round {round_text}: {phase}' + (f', {left_s} s to the deadline' if left_s else '')
    accuracy = last.accuracy if last is not None else station.initial_accuracy
    loss = last.loss if last is not None else station.initial_loss
    values = (
        ('run_id', station.run_id),
        ('phase', phase),
        ('round', round_text),
        ('seconds_to_deadline', left_s or 'none'),
        ('drones_subscribed', str(sorted(listening))),
        ('accuracy', 'unknown' if math.isnan(accuracy) else f'{accuracy:.4f}'),
        ('loss', 'unknown' if math.isnan(loss) else f'{loss:.4f}'),
        ('late_or_missing_last_round', str(last.late_or_missing if last else [])),
        ('flight_failures', str(station.flight_failures())),
        ('frames_rejected', ', '.join(f'{k}={v}' for k, v in
                                      sorted(station.rejected_total.items())) or 'none'),
    )
    return StatusReport(STATION_STATUS_NAME, 'ground_station', level,
                        '; '.join([*(text for _, text in problems), where]), values)
