"""The pilot's phases (torch-free).

Apart from fl_uav.fleet.drone_pilot (which re-exports :class:`Phase`) because the readers of a
phase (the drone's status report, the station watchdog) are imported by nodes that fly or
train nothing; drone_pilot imports the drone agent and with it torch.
"""

from __future__ import annotations


class Phase:
    """What the pilot is doing (FlightState.phase; shown on the drone's status)."""

    WAITING = 'waiting'       # between rounds: no round or tour under way
    FLYING = 'flying'         # a round's mission (and its onboard planning)
    TRAINING = 'training'
    TOURING = 'touring'       # an express tour
    RETURNING = 'returning'   # return to launch (end of run, or the station went silent)
    FINISHED = 'finished'     # the run is over
