"""A drone in the air that stops hearing its ground station returns to launch and lands.

The station sends one global-model frame per round, so while a run goes on a drone hears it at
least every round (rounds.deadline_s, plus rounds.first_round_extra_s in round 1, plus the
aggregation). If the station crashes, is killed, or its radio link is lost, the drone would
otherwise hover where its last mission ended until its battery failsafe. The drone node also
counts the station as heard while the station's node is on the ROS graph (a long resource
planning between rounds is not a silence; a crashed station or a lost link drops out within
the DDS lease time, a hung but running station does not). After
``flight.station_timeout_s`` without a frame from the station (0: never), a drone that is in
flight and between rounds (not flying a mission, not returning, not finished) returns to
launch and lands; the next round it takes, from the same or a restarted station, arms and takes
off again. One return per silence: once commanded (landed or failed: the link is down, the
autopilot refused, an operator took over), it is not commanded again until the station is
heard again, so it never fights a pilot on the RC. ROS-free: the drone node feeds
:meth:`StationWatchdog.heard` and asks :meth:`StationWatchdog.should_return` on its status
timer.
"""

from __future__ import annotations

from dataclasses import dataclass

from fl_uav.fleet.drone_pilot import Phase


@dataclass
class StationWatchdog:
    """Seconds since the station was last heard, and whether that calls for a return."""

    timeout_s: float
    last_heard_s: float
    fired: bool = False       # a return was commanded in this silence

    def heard(self, now_s: float) -> None:
        """A frame from the station arrived (a valid one: signed and verified with keys)."""
        self.last_heard_s = max(self.last_heard_s, now_s)
        self.fired = False

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
