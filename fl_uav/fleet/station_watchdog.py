"""A drone in the air that stops hearing its ground station returns to launch and lands.

The station sends one global-model frame per round, so while a run goes on a drone hears it at
least every round (rounds.deadline_s, plus rounds.first_round_extra_s in round 1, plus the
aggregation). If the station crashes, hangs, is killed, or its radio link is lost, the drone
would otherwise hover where its last mission ended until its battery failsafe. The station
also sends a heartbeat every ``status.heartbeat_period_s`` from its executor thread
(fl_uav/fleet/station_heartbeat.py), also while its worker thread aggregates or plans for
minutes, so a long resource planning between rounds is not a silence; each heartbeat counts as
heard. The station's node being on the ROS graph does not: a hung station (a stuck callback,
a deadlocked executor) stays on the graph for ever, a SIGSTOPped one for the DDS lease time
(Fast DDS: 20 s). A station that sends no heartbeat (an older version) is heard only by its
frames: its drones return when it plans for longer than the timeout (fail safe). After
``flight.station_timeout_s`` without a frame or a heartbeat (0: never), a drone that is in
flight and between rounds (not flying a mission, not returning, not finished) returns to
launch and lands; the next round it takes, from the same or a restarted station, arms and takes
off again. One return per silence: once commanded (landed or failed: the link is down, the
autopilot refused, an operator took over), it is not commanded again until the station is
heard again, so it never fights a pilot on the RC.

The rule ``flight.station_timeout_s`` >= STATION_TIMEOUT_HEARTBEATS x
``status.heartbeat_period_s`` is checked on each node's own config, but in the field the
station reads ground_station.yaml and the drones drone.yaml: each beat carries the station's
period (``period_s``), and the drone checks it against its own timeout
(:func:`heartbeat_period_problem`): it warns on /diagnostics and logs it once per period.

ROS-free: the drone node feeds :meth:`StationWatchdog.heard` (valid frames) and
:meth:`StationWatchdog.heartbeat` (the heartbeats its verifier took: with keys only genuine,
new and fresh ones, fl_uav/fleet/heartbeat_auth.py; refused ones never reset the watchdog, so
a rogue node beating in the station's name, or playing back a capture of its beats, does not
keep a drone from returning) and asks :meth:`StationWatchdog.should_return` on its status
timer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fl_uav.fleet.config import STATION_TIMEOUT_HEARTBEATS
from fl_uav.fleet.pilot_phase import Phase
from fl_uav.fleet.station_heartbeat import Heartbeat


def heartbeat_period_problem(timeout_s: float, beat: Heartbeat | None) -> str | None:
    """What is wrong with the station's heartbeat period for a drone whose
    ``flight.station_timeout_s`` is ``timeout_s`` (None: nothing, no beat yet, or the watchdog
    off): fewer than STATION_TIMEOUT_HEARTBEATS beats fit in the timeout, so a few beats lost
    on the radio link would return the drone."""
    if beat is None or not 0 < timeout_s < STATION_TIMEOUT_HEARTBEATS * beat.period_s:
        return None
    return (f"station's status.heartbeat_period_s {beat.period_s:g} s x "
            f"{STATION_TIMEOUT_HEARTBEATS} exceeds this drone's flight.station_timeout_s "
            f'{timeout_s:g} s: a few lost heartbeats return it (raise the timeout or lower the '
            f"station's period)")


@dataclass
class StationWatchdog:
    """Seconds since the station was last heard, and whether that calls for a return."""

    timeout_s: float
    last_heard_s: float
    fired: bool = False       # a return was commanded in this silence
    last_beat: Heartbeat | None = None     # the station's last heartbeat (None: never one)
    last_beat_s: float = math.nan          # when it arrived
    period_told_s: float = math.nan        # the last station period found too long (logged)

    def heard(self, now_s: float) -> None:
        """A frame from the station arrived (a valid one: signed and verified with keys)."""
        self.last_heard_s = max(self.last_heard_s, now_s)
        self.fired = False

    def heartbeat(self, now_s: float, beat: Heartbeat) -> str | None:
        """A heartbeat from the station arrived: the station is heard. Returns the problem
        with its period (:func:`heartbeat_period_problem`) the first time a period has it,
        to be logged once; None otherwise."""
        self.heard(now_s)
        self.last_beat, self.last_beat_s = beat, now_s
        problem = heartbeat_period_problem(self.timeout_s, beat)
        if problem is None or beat.period_s == self.period_told_s:
            return None
        self.period_told_s = beat.period_s
        return problem

    def station_phase_age_s(self, now_s: float) -> float:
        """Seconds the station has been in its last heartbeat's phase, as of now (NaN: no
        heartbeat yet)."""
        if self.last_beat is None:
            return math.nan
        return self.last_beat.phase_age_s + max(0.0, now_s - self.last_beat_s)

    def fire(self) -> None:
        """The return was commanded: none again until the station is heard."""
        self.fired = True

    def silent_for_s(self, now_s: float) -> float:
        """Seconds since the station was last heard (or since the node started)."""
        return max(0.0, now_s - self.last_heard_s)

    def should_return(self, now_s: float, *, in_flight: bool, phase: str) -> bool:
        """True if the drone should return to launch now: the watchdog is on, the station has
        been silent for ``timeout_s``, and the drone is in flight between rounds."""
        return (self.timeout_s > 0 and not self.fired and in_flight
                and phase == Phase.WAITING and self.silent_for_s(now_s) >= self.timeout_s)
