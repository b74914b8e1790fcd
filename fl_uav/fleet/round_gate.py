"""Which of the station's rounds a drone takes: the rule for the run id and round index of
global frames.

A ground station draws a random run id when it starts and puts it in every frame it sends
(``run_id`` in the metadata; the drone echoes it in its updates). Frames may be unsigned
(``security.require_signatures`` false), a station may be restarted, and a recording of an
earlier run may be replayed, so the drone must neither stick to the highest round it ever saw
nor follow any index:

* a frame of the run in progress: a round ahead of the last one taken is taken (rounds may be
  skipped: a drone that was away takes the round the station is at); the same round again is
  ignored (``repeat``: the latched model topic re-delivers it) unless the station opened it
  again, later (``reopened``: its ``opened_ms`` is later than the taken frame's; a station
  resumed from its checkpoint after a crash opens the round it was in once more, and the
  drone takes it as the next round of its run, fl_uav/fleet/station_checkpoint.py); a round
  behind is ignored (``stale_round``: a replay, or a reordered frame);
* a frame with a run id the drone has not seen starts a new run (``new_run`` in
  :attr:`RoundGate.events`) if that run started after the one in progress (``run_started_ms``,
  the station's clock at its start, in every frame): the gate resets and takes it, whatever
  its round (a restarted station starts at 1; a drone joins a run at any round). The run
  left is *retired*;
* a frame of a retired run, or of a run that started before the one in progress, is ignored
  (``old_run``): a recording of an earlier run cannot pull the drone back, nor lock it out of
  the run in progress;
* a frame without a run id (an older station) falls back to the round rule alone: a round
  behind the last one taken starts a new run;
* a round outside 1..num_rounds is rejected as implausible (``beyond_run``); num_rounds is
  the run length the frame announces, capped by the drone's own ``rounds.num_rounds`` (the
  field guide keeps the two equal), so a frame cannot widen the window by announcing a longer
  run. A rejected round does not move the gate, so it cannot lock the drone out of the real
  rounds either.

A finish command is obeyed only for the run in progress (or by a drone that has taken no
round yet) and not for a round behind the last one taken (``other_run`` / ``stale_finish``).
What the gate cannot tell: a drone that has not taken part in any run yet (restarted) joins
a recording of an earlier run as its first run, until a frame of a later run comes; signed
frames are therefore also refused once older than ``security.max_frame_age_s``
(fl_uav.compression.signing.Freshness). In an unsigned fleet anyone can write a frame with a
later start or the real run id: there the rule orders honest stations' runs, it does not
stop forgery.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

TAKE, REPEAT, NEW_RUN, BEYOND_RUN, STALE_FINISH, STALE_ROUND, OLD_RUN, OTHER_RUN = (
    'take', 'repeat', 'new_run', 'beyond_run', 'stale_finish', 'stale_round', 'old_run',
    'other_run')
REOPENED = 'reopened'

#: Run ids a drone remembers having left (oldest forgotten first).
RETIRED_RUNS_KEPT = 64


@dataclass(frozen=True)
class RoundVerdict:
    """What to do with a frame's round: ``take`` it (``new_run`` also takes it, after a
    reset) or ignore it for ``reason``; ``detail`` says why, for the log."""

    action: str
    detail: str

    @property
    def taken(self) -> bool:
        """True if the drone should run the round (or obey the finish)."""
        return self.action in (TAKE, NEW_RUN, REOPENED)


class RoundGate:
    """The run and the last round a drone took and the rule above; counts what it ignored
    by reason."""

    def __init__(self, default_num_rounds: int) -> None:
        self.default_num_rounds = default_num_rounds
        self.last_round = 0                        # 0: none taken yet
        self.run_id: str | None = None             # the run in progress (None: not known)
        self.run_started_ms: int | None = None     # when it started (None: not announced)
        self.epoch = 0                             # runs taken part in (1: the first)
        self.last_opened_ms: int | None = None     # opened_ms of the last round taken
        self._retired: deque[str] = deque(maxlen=RETIRED_RUNS_KEPT)
        self.ignored: Counter[str] = Counter()     # by reason (module docstring)
        self.events: Counter[str] = Counter()      # new_run, reopened

    def admit_round(self, round_index: int, num_rounds: int | None,
                    run_id: str | None = None,
                    run_started_ms: int | None = None,
                    opened_ms: int | None = None) -> RoundVerdict:
        """The verdict on a GLOBAL_MODEL frame's round (``opened_ms``: when the station
        opened it, None: not announced); taken rounds move the gate."""
        verdict = self._admit_round(round_index, num_rounds, run_id, run_started_ms,
                                    opened_ms)
        if verdict.taken:
            self.last_opened_ms = opened_ms
        return verdict

    def _admit_round(self, round_index: int, num_rounds: int | None, run_id: str | None,
                     run_started_ms: int | None, opened_ms: int | None) -> RoundVerdict:
        limit = (self.default_num_rounds if num_rounds is None
                 else min(num_rounds, self.default_num_rounds))
        if (num_rounds is not None and self.default_num_rounds < round_index <= num_rounds):
            return self._ignore(BEYOND_RUN, f'round {round_index} of a run of {num_rounds} '
                                            f'rounds, but this drone is configured for '
                                            f'rounds.num_rounds {self.default_num_rounds}: set '
                                            f'the same rounds.num_rounds on the station and '
                                            f'every drone')
        if not 1 <= round_index <= limit:
            return self._ignore(BEYOND_RUN, f'round {round_index} is outside the run of '
                                            f'{limit} rounds')
        if run_id is not None and self.run_id is None and self.last_round == 0:
            self.run_id, self.last_round = run_id, round_index    # the first run: joined
            self.run_started_ms = run_started_ms
            self.epoch += 1
            return RoundVerdict(TAKE, f'round {round_index} of run {run_id}')
        if run_id is not None and run_id != self.run_id:
            if run_id in self._retired:
                return self._ignore(OLD_RUN, f'round {round_index} of run {run_id}, a run '
                                             f'this drone has left (a replayed recording?)')
            if (self.run_started_ms is not None
                    and (run_started_ms is None or run_started_ms <= self.run_started_ms)):
                return self._ignore(OLD_RUN, f'round {round_index} of run {run_id}, which '
                                             f'did not start after the run in progress '
                                             f'{self.run_id} (a replayed recording?)')
            verdict = self._new_run(round_index, run_id, f'run {run_id} starts (round '
                                                         f'{round_index})')
            self.run_started_ms = run_started_ms
            return verdict
        if round_index == self.last_round:
            if (run_id is not None and opened_ms is not None
                    and self.last_opened_ms is not None and opened_ms > self.last_opened_ms):
                self.events[REOPENED] += 1
                return RoundVerdict(REOPENED, f'round {round_index} of run {run_id} opened '
                                              f'again (the station resumed from its '
                                              f'checkpoint?): taken again')
            return self._ignore(REPEAT, f'round {round_index} was already taken')
        if round_index < self.last_round:
            if run_id is not None:
                return self._ignore(STALE_ROUND, f'round {round_index} after round '
                                                 f'{self.last_round} of the same run')
            return self._new_run(round_index, None,
                                 f'round {round_index} after round {self.last_round}: a new '
                                 f'run (ground station restarted?), starting over')
        if self.last_round == 0:
            self.epoch += 1                        # the first run (no run id): joined
        self.last_round = round_index
        return RoundVerdict(TAKE, f'round {round_index}')

    def admit_finish(self, round_index: int, run_id: str | None = None) -> RoundVerdict:
        """The verdict on a finish command for ``round_index`` of run ``run_id``."""
        if run_id is not None and run_id != self.run_id and self.last_round != 0:
            return self._ignore(OTHER_RUN, f'finish of run {run_id}, not of the run in '
                                           f'progress ({self.run_id})')
        if round_index < self.last_round:
            return self._ignore(STALE_FINISH, f'finish for round {round_index}, behind '
                                              f'round {self.last_round}')
        return RoundVerdict(TAKE, f'finish at round {round_index}')

    def _new_run(self, round_index: int, run_id: str | None, detail: str) -> RoundVerdict:
        if self.run_id is not None:
            self._retired.append(self.run_id)
        self.run_id = run_id
        self.last_round = round_index
        self.epoch += 1
        self.events[NEW_RUN] += 1
        return RoundVerdict(NEW_RUN, detail)

    def _ignore(self, reason: str, detail: str) -> RoundVerdict:
        self.ignored[reason] += 1
        return RoundVerdict(reason, detail)
