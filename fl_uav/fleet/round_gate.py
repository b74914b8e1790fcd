"""Which of the station's rounds a drone takes: the rule for round indices of global frames.

Frames may be unsigned (``security.require_signatures`` false) and a station may be restarted
(a new run starts at round 1 again), so the drone must neither stick to the highest round it
ever saw nor follow any index:

* a round ahead of the last one taken is taken (rounds may be skipped: a drone that was away
  takes the round the station is at);
* the same round again is ignored (``repeat``: the latched model topic re-delivers it);
* a round behind the last one taken starts a new run (the ground station was restarted or a
  new run began): the gate resets and takes it (``new_run`` in :attr:`RoundGate.events`);
* a round outside 1..num_rounds is rejected as implausible (``beyond_run``); num_rounds is
  the run length the frame announces, capped by the drone's own ``rounds.num_rounds`` (the
  field guide keeps the two equal), so a frame cannot widen the window by announcing a longer
  run. A rejected round does not move the gate, so it cannot lock the drone out of the real
  rounds either.

A finish command is obeyed unless it is for a round behind the last one taken
(``stale_finish``: an earlier run's, or forged). Not covered: a *replayed* frame of an earlier
run, even a genuinely signed one, is taken as a new run (frames carry no run identity yet).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

TAKE, REPEAT, NEW_RUN, BEYOND_RUN, STALE_FINISH = (
    'take', 'repeat', 'new_run', 'beyond_run', 'stale_finish')


@dataclass(frozen=True)
class RoundVerdict:
    """What to do with a frame's round: ``take`` it (``new_run`` also takes it, after a
    reset) or ignore it for ``reason``; ``detail`` says why, for the log."""

    action: str
    detail: str

    @property
    def taken(self) -> bool:
        """True if the drone should run the round (or obey the finish)."""
        return self.action in (TAKE, NEW_RUN)


class RoundGate:
    """The last round a drone took and the rule above; counts what it ignored by reason."""

    def __init__(self, default_num_rounds: int) -> None:
        self.default_num_rounds = default_num_rounds
        self.last_round = 0                        # 0: none taken yet
        self.ignored: Counter[str] = Counter()     # by reason: repeat, beyond_run, stale_finish
        self.events: Counter[str] = Counter()      # new_run

    def admit_round(self, round_index: int, num_rounds: int | None) -> RoundVerdict:
        """The verdict on a GLOBAL_MODEL frame's round; taken rounds move the gate."""
        limit = (self.default_num_rounds if num_rounds is None
                 else min(num_rounds, self.default_num_rounds))
        if not 1 <= round_index <= limit:
            return self._ignore(BEYOND_RUN, f'round {round_index} is outside the run of '
                                            f'{limit} rounds')
        if round_index == self.last_round:
            return self._ignore(REPEAT, f'round {round_index} was already taken')
        if round_index < self.last_round:
            detail = (f'round {round_index} after round {self.last_round}: a new run '
                      f'(ground station restarted?), starting over')
            self.events[NEW_RUN] += 1
            self.last_round = round_index
            return RoundVerdict(NEW_RUN, detail)
        self.last_round = round_index
        return RoundVerdict(TAKE, f'round {round_index}')

    def admit_finish(self, round_index: int) -> RoundVerdict:
        """The verdict on a finish command for ``round_index``."""
        if round_index < self.last_round:
            return self._ignore(STALE_FINISH, f'finish for round {round_index}, behind '
                                              f'round {self.last_round}')
        return RoundVerdict(TAKE, f'finish at round {round_index}')

    def _ignore(self, reason: str, detail: str) -> RoundVerdict:
        self.ignored[reason] += 1
        return RoundVerdict(reason, detail)
