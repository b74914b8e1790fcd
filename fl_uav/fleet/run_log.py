"""Files a run leaves behind: one JSON line per round, and the station's final report."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

from fl_uav.planning.config import KNOBS_FILE

PROGRESS_FILE = 'progress.jsonl'
STATION_REPORT_FILE = 'ground_station.json'
# the station checkpoint after each closed round, and its manifest (station_checkpoint.py)
STATION_CHECKPOINT_FILE = 'station_checkpoint.npz'
STATION_CHECKPOINT_MANIFEST = 'station_checkpoint.json'


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class RunLog:
    """Appends round records and writes the final report atomically."""

    def __init__(self, out_dir: str | os.PathLike | None) -> None:
        self.out_dir = Path(out_dir) if out_dir else None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)

    def append_round(self, record: dict[str, Any]) -> None:
        """One JSON line per closed round (the launcher tails this for live progress)."""
        if self.out_dir is None:
            return
        with open(self.out_dir / PROGRESS_FILE, 'a', encoding='utf-8') as f:
            f.write(json.dumps(_clean(record)) + '\n')

    def write_report(self, report: dict[str, Any]) -> None:
        """The station's final report, written via a temporary file and a rename."""
        self._write(STATION_REPORT_FILE, report)

    def write_knobs(self, knobs: dict[str, Any]) -> None:
        """The resource planner's record (fl_uav.fleet.station_resources), rewritten whole
        whenever it changes (a round opened or closed)."""
        self._write(KNOBS_FILE, knobs)

    def _write(self, name: str, payload: dict[str, Any]) -> None:
        if self.out_dir is None:
            return
        # A temporary name of this thread's own: two threads may write the same file.
        tmp = self.out_dir / f'{name}.{os.getpid()}.{threading.get_ident()}.tmp'
        tmp.write_text(json.dumps(_clean(payload), indent=2))
        tmp.replace(self.out_dir / name)


def read_progress(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Round records written so far (a partial last line is ignored)."""
    path = Path(out_dir) / PROGRESS_FILE
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding='utf-8').splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows
