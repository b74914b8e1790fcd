"""``fl-uav sim --record``: the recorder process watched while the fleet runs (ROS-free).

The federated run is the user's main output, so a recorder that dies (a crash, the OOM
killer, a full disk, a ``kill``) does not stop it; but it is said at once, clearly: what died,
how (its exit code or signal), when, where its log is, and that the bag ends there. The run's
summary then says the recording is incomplete (``recording.complete`` false, the reason in
``recording.incomplete`` and under ``warnings``), and ``fl-uav sim`` exits with
:data:`RECORDING_INCOMPLETE_EXIT` instead of 0. A recording is complete only if the recorder
ran until the fleet's nodes were stopped, then exited 0 and left a bag that opens.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fl_uav.fleet.recording import format_summary, read_bag_summary, read_unclosed_bag
from fl_uav.fleet_run.launcher import RunningNode

RECORDING_INCOMPLETE_EXIT = 3
"""``fl-uav sim --record``'s exit code when the run finished but its recording is incomplete
(1: the run itself failed)."""


def exit_text(code: int, why: bool = False) -> str:
    """A process's exit as a person reads it: ``exit code 1``, or the signal that killed it
    (``why``: SIGKILL's likely senders, the OOM killer or ``kill -9``)."""
    if code >= 0:
        return f'exit code {code}'
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f'exit code {code}'
    senders = (' (the OOM killer or kill -9; dmesg tells which)'
               if why and -code == signal.SIGKILL else '')
    return f'killed by {name}{senders}, exit code {code}'


@dataclass
class RecorderWatch:
    """The recorder's process, looked at once per tick of the run's loop (:meth:`poll`)."""

    node: RunningNode
    bag: Path
    run_start_s: float            # time.monotonic() at the run's start
    died_s: float | None = None   # seconds into the run when its exit was seen
    died_utc: str | None = None
    exit_code: int | None = None

    @property
    def died(self) -> bool:
        """The recorder ended before it was stopped."""
        return self.died_s is not None

    def poll(self, now_s: float | None = None) -> str | None:
        """The message to show the first time the recorder is seen to have exited; else None.

        ``now_s``: time.monotonic() now (default: read it)."""
        if self.died:
            return None
        code = self.node.process.poll()
        if code is None:
            return None
        self.exit_code = code
        self.died_s = (time.monotonic() if now_s is None else now_s) - self.run_start_s
        self.died_utc = datetime.now(UTC).strftime('%H:%M:%S UTC')
        if code == 0:       # a SIGINT or SIGTERM fl-uav sim did not send: the bag is closed
            what, lost = ('stopped', 'exit code 0: a SIGINT or SIGTERM from outside the run; '
                          'it closed the bag')
        else:
            what, lost = 'died', exit_text(code, why=True)
            if code < 0:    # no chance to close: what it held since its last flush is lost
                lost += '; the second before it may be lost too (not flushed)'
        return (f'--record: the recorder (PID {self.node.process.pid}) {what} '
                f'{self.died_s:.0f} s into the run, at {self.died_utc}: {lost}. The bag '
                f'{self.bag} ends there (nothing after it is recorded); the run goes on. '
                f'Its log: {self.node.log_path}')

    def log_tail(self, tail: Callable[[RunningNode], str]) -> str:
        """What of the log to show under :meth:`poll`'s message: its last lines (``tail``) if
        the recorder ended on its own (exit code 1: a traceback; 0: its closing summary);
        nothing if a signal killed it (its log says nothing about that)."""
        if self.exit_code is None or self.exit_code < 0:
            return ''
        return tail(self.node)

    def stopped(self, stop_exit_code: int | None) -> str | None:
        """Why the recording is incomplete as far as the process tells (None: it is not):
        it died during the run, or did not exit 0 when stopped (``stop_exit_code``)."""
        if self.died:
            return (f'the recorder {"stopped" if self.exit_code == 0 else "died"} '
                    f'{self.died_s:.0f} s into the run ({self.died_utc}, '
                    f'{exit_text(self.exit_code)}); the bag ends there; its log: '
                    f'{self.node.log_path}')
        if stop_exit_code != 0:
            how = 'did not exit' if stop_exit_code is None else exit_text(stop_exit_code)
            return (f'the recorder, stopped after the fleet, {how}; its log: '
                    f'{self.node.log_path}')
        return None


def recording_summary(bag: Path, watch: RecorderWatch | None, stop_exit_code: int | None,
                      echo: Callable[[str], None]) -> dict[str, Any]:
    """The recording's part of summary.json: its topics, counts and size read back from the
    bag (echoed), ``complete``, and if it is not, why (``incomplete``). A bag the recorder
    could not close (no metadata.yaml, no MCAP summary) is read as far as it goes."""
    problems = []
    if watch is None:
        problems.append('the recorder did not start')
    else:
        stopped = watch.stopped(stop_exit_code)
        if stopped:
            problems.append(stopped)
    try:
        recording = read_bag_summary(bag)
        echo(format_summary(recording))
    except Exception as exc:  # noqa: BLE001 - rosbags has its own errors; the run is done
        recording = read_unclosed_bag(bag)
        why = ('no metadata.yaml, no MCAP summary' if not (bag / 'metadata.yaml').exists()
               else str(exc))
        problems.append(f'the bag was not closed ({why}); {recording["messages"]} messages '
                        f'on {len(recording["topics"])} topics can be read from its .mcap '
                        f'(`mcap recover` rewrites it, `ros2 bag reindex` rebuilds '
                        f'metadata.yaml)')
    recording['complete'] = not problems
    if problems:
        recording['incomplete'] = '; '.join(problems)
    return recording
