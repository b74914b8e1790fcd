"""The ground station's heartbeat: proof of life for the drones, and where the station is.

The station node publishes a :class:`Heartbeat` every ``status.heartbeat_period_s`` on
``/fl/station_heartbeat`` from a timer on its executor thread; its round closing (aggregation)
and the resource planner run on a worker thread, so heartbeats keep coming while it plans for
minutes (lgc_ddpg: ~1.5-2 s per drone). A station whose process hangs (a stuck callback, a
deadlocked executor, SIGSTOP) stops beating even while its node stays on the ROS graph, and
the drones' watchdog (fl_uav/fleet/station_watchdog.py) returns them to launch.

A heartbeat says which run, which round (the one open or last closed; 0 before round 1), in
which phase the station is and for how long (``phase_age_s``). A worker stuck in a phase
(planning that never ends) keeps the heartbeats coming: the drones do not act on it, their
status on /diagnostics says it (fl_uav/fleet/drone_status.py).

A heartbeat commands nothing, and its run id and round never move a drone's round gate; but
it keeps a drone's return from being commanded, as a frame would, so a forged one could keep
the drones hovering between rounds after the station died, until PX4's battery failsafe.
With keys (``security.keys_dir``) the station therefore signs each beat with ``station.key``
over its fields, its boot id, a counter and a stamp, and a drone that requires signatures
(``security.require_signatures``) counts only genuine, new and fresh beats as heard:
unsigned, forged, replayed and stale ones are refused and counted by reason
(fl_uav/fleet/heartbeat_auth.py has the rules). Without keys a beat proves nothing: anyone on
the DDS domain can send one. ROS-free: the node converts (fl_uav/ros/conversions.py).
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass

#: The DiagnosticStatus name a heartbeat carries (other names on the topic are refused).
HEARTBEAT_NAME = 'fl_uav: ground_station heartbeat'


class StationPhase(enum.StrEnum):
    """Where the station is (a heartbeat's ``phase``; its members are the only phases)."""

    WAITING = 'waiting'            # before round 1 (drones to subscribe) or between rounds
    ROUND_OPEN = 'round_open'      # a round is open: collecting updates until its deadline
    AGGREGATING = 'aggregating'    # closing the round: aggregate, evaluate, report
    PLANNING = 'planning'          # the resource planner for the next round (worker thread)
    FINISHED = 'finished'          # the run is over (finish sent)


#: Phases the station's worker thread is in: one that lasts for long is a stuck worker.
WORKER_PHASES = (StationPhase.AGGREGATING, StationPhase.PLANNING)


@dataclass(frozen=True)
class Heartbeat:
    """One heartbeat: run id, round (0: none yet) of num_rounds, phase, seconds in it, and
    the station's heartbeat period."""

    run_id: str
    round_index: int
    num_rounds: int
    phase: str
    phase_age_s: float
    period_s: float

    def values(self) -> tuple[tuple[str, str], ...]:
        """The key/value pairs the message carries."""
        return (('run_id', self.run_id), ('round', str(self.round_index)),
                ('num_rounds', str(self.num_rounds)), ('phase', self.phase),
                ('phase_age_s', f'{self.phase_age_s:.1f}'), ('period_s', f'{self.period_s:g}'))

    def describe(self) -> str:
        """One line for the message and for logs."""
        return (f'run {self.run_id} round {self.round_index}/{self.num_rounds}: {self.phase} '
                f'for {self.phase_age_s:.0f} s')

    @classmethod
    def from_values(cls, name: str, values: Mapping[str, str]) -> Heartbeat:
        """The heartbeat a message carries; ValueError naming the problem for anything else
        (another status name, a missing or malformed value, an unknown phase)."""
        if name != HEARTBEAT_NAME:
            raise ValueError(f'status name {name!r} is not {HEARTBEAT_NAME!r}')
        missing = [k for k in ('run_id', 'round', 'num_rounds', 'phase', 'phase_age_s',
                               'period_s') if k not in values]
        if missing:
            raise ValueError(f'heartbeat without {missing}')
        try:
            beat = cls(values['run_id'], int(values['round']), int(values['num_rounds']),
                       values['phase'], float(values['phase_age_s']),
                       float(values['period_s']))
        except ValueError as exc:
            raise ValueError(f'heartbeat with a malformed value: {exc}') from None
        phases = tuple(p.value for p in StationPhase)
        if beat.phase not in phases:
            raise ValueError(f'heartbeat phase {beat.phase!r} is not one of {phases}')
        if not (0 <= beat.round_index <= beat.num_rounds and math.isfinite(beat.phase_age_s)
                and beat.phase_age_s >= 0.0 and math.isfinite(beat.period_s)
                and beat.period_s > 0.0):
            raise ValueError(f'heartbeat out of range: round {beat.round_index} of '
                             f'{beat.num_rounds}, phase_age_s {beat.phase_age_s}, period_s '
                             f'{beat.period_s}')
        return beat


class PhaseClock:
    """The station's phase and since when (thread-safe: the worker thread enters phases, the
    executor's heartbeat timer reads them; neither waits for the station's own lock)."""

    def __init__(self, run_id: str, num_rounds: int, period_s: float, now_s: float) -> None:
        self._run_id, self._num_rounds, self._period_s = run_id, num_rounds, period_s
        self._lock = threading.Lock()
        self._phase, self._since_s, self._round = StationPhase.WAITING, now_s, 0

    def enter(self, phase: str, now_s: float, round_index: int | None = None) -> None:
        """The station is in ``phase`` from ``now_s`` (of round ``round_index``; None: the
        same round); entering the phase it is in keeps its start (a retried close)."""
        with self._lock:
            round_index = self._round if round_index is None else round_index
            if (phase, round_index) != (self._phase, self._round):
                self._phase, self._since_s, self._round = phase, now_s, round_index

    def beat(self, now_s: float) -> Heartbeat:
        """The heartbeat to send now."""
        with self._lock:
            return Heartbeat(self._run_id, self._round, self._num_rounds, self._phase,
                             max(0.0, now_s - self._since_s), self._period_s)
