"""Who still holds a stopping autopilot simulator, and until when (ROS-free).

A real PX4 does not stop when the companion computer's ROS processes do. Under ``ros2 launch
fl_uav fleet_sim.launch.py`` a Ctrl-C signals every process at once, so the embedded
simulator (the autopilot_sim node) gets its SIGINT at the same moment as the drone nodes,
whose shutdown commands a return to launch and waits for the landing. :class:`StopHold`
decides how long the simulator goes on simulating (and serving MAVLink) after that first
signal:

- a vehicle holds it while its MAVLink client (the drone node) is still connected (a
  HEARTBEAT heard within ``client_timeout_s``) and the vehicle is armed or in the air, or
  was so at some poll since the stop began: after the landing its client waits for the
  disarm, restores MIS_TAKEOFF_ALT and closes the link, so the hold lasts until its
  heartbeats stop;
- a vehicle not seen armed or in the air since the stop began, or whose client is gone
  (never heard, or silent for ``client_timeout_s``), does not hold it;
- never beyond ``max_hold_s`` after the first signal (the longest a drone node takes to
  exit after SIGINT: :func:`fl_uav.fleet_run.launch_plan.autopilot_stop_hold_s`);
- a SIGTERM (:meth:`StopHold.release`) ends the wait at once; a further SIGINT does not:
  it is the same Ctrl-C, which reaches the node once from the terminal and once from
  ros2 launch.

Under ``fl-uav sim`` the drone nodes are stopped first (:meth:`ProcessGroup.stop` with
``last``), so by the simulator's signal their vehicles are down and their clients gone: it
stops at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_log = logging.getLogger(__name__)

#: a client silent this long is gone: MAVSDK's own heartbeat time-out (3 heartbeats at
#: MAVLink's 1 Hz), after which a drone node also declares its autopilot lost
CLIENT_HEARTBEAT_TIMEOUT_S = 3.0
#: how often a held simulator looks at its vehicles, its clients and for a further signal
HOLD_POLL_S = 0.1


@dataclass(frozen=True)
class VehicleLinkState:
    """One simulated vehicle as the stop decision sees it.

    vehicle: index (0-based). armed, in_air: the vehicle's state (in_air: taking off, flying
    or landing). client_silent_s: wall seconds since its MAVLink client's last HEARTBEAT;
    None when no client was ever heard.
    """

    vehicle: int
    armed: bool
    in_air: bool
    client_silent_s: float | None

    @property
    def flying(self) -> bool:
        """Armed or in the air: its client may still need the autopilot."""
        return self.armed or self.in_air

    def client_connected(self, client_timeout_s: float) -> bool:
        """Its client was heard within ``client_timeout_s``."""
        return self.client_silent_s is not None and self.client_silent_s <= client_timeout_s

    def describe(self) -> str:
        """'vehicle 0 (armed, in the air; its client heard 0.4 s ago)', for the log."""
        state = ', '.join(text for flag, text in ((self.armed, 'armed'),
                                                  (self.in_air, 'in the air')) if flag)
        heard = ('never heard' if self.client_silent_s is None
                 else f'heard {self.client_silent_s:.1f} s ago')
        return f'vehicle {self.vehicle} ({state or "on the ground"}; its client {heard})'


class StopHold:
    """The hold of one stop, from the first signal (``started_s``, wall clock) on.

    Parameters
    ----------
    max_hold_s : float
        Longest hold after the first signal, seconds (> 0).
    started_s : float
        When the first signal came, on the clock later passed as ``now_s``.
    client_timeout_s : float, default CLIENT_HEARTBEAT_TIMEOUT_S
        A client silent longer than this is gone, seconds (> 0).
    """

    def __init__(self, max_hold_s: float, started_s: float,
                 client_timeout_s: float = CLIENT_HEARTBEAT_TIMEOUT_S) -> None:
        if not max_hold_s > 0.0:
            raise ValueError(f'max_hold_s must be > 0, got {max_hold_s}')
        if not client_timeout_s > 0.0:
            raise ValueError(f'client_timeout_s must be > 0, got {client_timeout_s}')
        self.max_hold_s = max_hold_s
        self.client_timeout_s = client_timeout_s
        self.deadline_s = started_s + max_hold_s
        self.released = False          # a plain flag: set from a signal handler
        self._engaged: set[int] = set()

    def release(self) -> None:
        """A SIGTERM after the stop: hold nothing from now on."""
        self.released = True

    def holding(self, states: Sequence[VehicleLinkState], now_s: float
                ) -> list[VehicleLinkState]:
        """The vehicles that hold the simulator at ``now_s`` (empty: stop now). A vehicle
        seen flying with its client connected stays engaged until its client goes silent,
        so the client can finish landing, disarm and close its link."""
        if self.released or now_s >= self.deadline_s:
            return []
        connected = [s for s in states if s.client_connected(self.client_timeout_s)]
        self._engaged.update(s.vehicle for s in connected if s.flying)
        return [s for s in connected if s.vehicle in self._engaged]

    def outcome(self, now_s: float) -> str:
        """Why the hold ended (after :meth:`holding` returned empty), for the log."""
        if self.released:
            return 'a SIGTERM'
        if now_s >= self.deadline_s:
            return f'its limit ({self.max_hold_s:.0f} s)'
        return 'every held vehicle on the ground with its client gone'

    def wait(self, read_states: Callable[[], Sequence[VehicleLinkState]],
             interrupted: Callable[[], bool] = lambda: False,
             clock: Callable[[], float] = time.monotonic,
             pause: Callable[[float], None] = time.sleep,
             poll_s: float = HOLD_POLL_S) -> float:
        """Poll ``read_states`` until nothing holds the simulator, :meth:`release` as soon as
        ``interrupted()`` (a SIGTERM since the stop, seen through
        :class:`fl_uav.fleet.recording.StopSignals`); logs once what it waits for (if
        anything) and how the wait ended. Returns the seconds held."""
        start_s = clock()
        held = self.holding(read_states(), start_s)
        if not held:
            return 0.0
        _log.warning('stopping: the simulator keeps flying %s until they are on the ground '
                     'and their clients gone (silent %.0f s), at most %.0f s; a SIGTERM '
                     'stops it at once', ', '.join(s.describe() for s in held),
                     self.client_timeout_s, self.deadline_s - start_s)
        now_s = start_s
        while held:
            pause(poll_s)
            if interrupted():
                self.release()
            now_s = clock()
            held = self.holding(read_states(), now_s)
        _log.warning('stopping after %.1f s: %s', now_s - start_s, self.outcome(now_s))
        return now_s - start_s
