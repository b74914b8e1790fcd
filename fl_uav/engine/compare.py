"""``fl-uav compare``: several experiment runs overlaid in one set of plots, with a table of
their figures (energy to target accuracies, mean ± std over seeds, notes on runs that are not
like for like or not finished)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fl_uav.engine.results import (
    CONFIG_FILE,
    ROUNDS_FILE,
    SUMMARY_FILE,
    ExperimentError,
    energy_to_target,
    json_mapping,
    plot_runs,
    read_rows,
)


def _target_cells(summary: dict[str, Any]) -> str:
    """Target accuracy, energy to it (kJ) and its round, or '-' (not asked or not reached)."""
    target = summary.get('target_accuracy')
    energy, rounds = summary.get('energy_to_target_j'), summary.get('rounds_to_target')
    return (f'{(f"{target:.3f}" if target else "-"):>6} '
            f'{(f"{energy / 1e3:.1f}" if energy is not None else "-"):>12} '
            f'{(str(rounds) if rounds is not None else "-"):>6}')


def _targets_table(runs: list[tuple[str, list[dict[str, Any]]]], targets: Sequence[float],
                   width: int) -> str:
    """Per run, the energy (kJ) and round to each target accuracy (:func:`energy_to_target`)."""
    lines = [f'{"energy to target, kJ (round)":<{width}} '
             + ' '.join(f'{f"{t:.1%}":>16}' for t in targets)]
    for label, rows in runs:
        cells = []
        for t in targets:
            hit = energy_to_target(rows, t)
            cells.append('never' if hit['rounds_to_target'] is None else
                         f'{hit["energy_to_target_j"] / 1e3:.1f} ({hit["rounds_to_target"]})')
        lines.append(f'{label:<{width}} ' + ' '.join(f'{c:>16}' for c in cells))
    return '\n'.join(lines)


def _experiment_summary(run_dir: Path) -> dict[str, Any]:
    """The summary.json of an ``fl-uav experiment`` run, or ExperimentError saying what
    ``run_dir`` is instead (missing, unreadable, or a run of another command)."""
    summary = json_mapping(run_dir / SUMMARY_FILE)
    if 'name' not in summary:
        raise ExperimentError(f'{run_dir} is not an `fl-uav experiment` run (its {SUMMARY_FILE} '
                              f'has no name; `fl-uav sim` runs keep their rounds in it)')
    return summary


#: Config keys that differ between repetitions of one experiment (not a different setting).
REPETITION_KEYS = ('seed', 'name')
#: Keys whose difference between compared runs makes their figures incomparable: said so.
CONTEXT_KEYS = ('data.dataset', 'num_rounds', 'num_drones', 'learning.model')


def _seed_groups(run_dirs: Sequence[Path], labels: Sequence[str]
                 ) -> list[tuple[str, list[int]]]:
    """Runs whose config.json differ only in REPETITION_KEYS, as (label, indices) in first
    appearance order; runs without a readable config.json stand alone."""
    groups: dict[str, list[int]] = {}
    for index, run_dir in enumerate(run_dirs):
        try:
            config = json_mapping(Path(run_dir) / CONFIG_FILE)
        except ExperimentError:
            key = f'#{index}'
        else:
            key = json.dumps({k: v for k, v in config.items() if k not in REPETITION_KEYS},
                             sort_keys=True, default=str)
        groups.setdefault(key, []).append(index)
    return [(_group_label([labels[i].split(' (')[0] for i in members]), members)
            for members in groups.values()]


def _group_label(names: Sequence[str]) -> str:
    """What the runs' names share ('fedavg' for 'fedavg s0', 'fedavg s1'), without a trailing
    seed marker; the first name when they share too little to say."""
    if len(set(names)) == 1:
        return names[0]
    shared = re.sub(r'([\s_.-]+(s|seed)\d*)?[\s_.-]*$', '',
                    os.path.commonprefix(list(names)))
    return shared if len(shared) >= 3 else names[0]


def _mean_std(values: Sequence[float]) -> str:
    return f'{float(np.mean(values)):.4f} ± {float(np.std(values, ddof=1)):.4f}'


def _seed_table(runs: Sequence[tuple[str, list[dict]]],
                groups: Sequence[tuple[str, list[int]]], width: int) -> str:
    """Mean ± sample std over each group's seeds of the final and best accuracy and uplink."""
    lines = [f'{"over seeds":<{width}} {"runs":>4} {"final acc":>17} {"best acc":>17} '
             f'{"uplink MB":>17}']
    for label, members in groups:
        rows = [runs[i][1] for i in members if runs[i][1]]
        if len(rows) < 2:
            continue
        final = [r[-1]['accuracy'] for r in rows]
        best = [max(x['accuracy'] for x in r) for r in rows]
        uplink = [sum(x['uplink_bytes'] for x in r) / 1e6 for r in rows]
        lines.append(f'{label:<{width}} {len(rows):>4} {_mean_std(final):>17} '
                     f'{_mean_std(best):>17} {_mean_std(uplink):>17}')
    return '\n'.join(lines) if len(lines) > 1 else ''


def _unfinished_notes(run_dirs: Sequence[Path],
                      runs: Sequence[tuple[str, list[dict]]]) -> list[str]:
    """A note for each run with fewer rounds in rounds.csv than its config's num_rounds
    (stopped or still running): its final figures are not the configured run's."""
    notes = []
    for run_dir, (label, rows) in zip(run_dirs, runs):
        try:
            planned = json_mapping(Path(run_dir) / CONFIG_FILE).get('num_rounds')
        except ExperimentError:
            continue
        if isinstance(planned, int) and len(rows) < planned:
            notes.append(f'note: {label} has {len(rows)} of its {planned} rounds (stopped or '
                         f'still running; `fl-uav experiment --resume {run_dir}` goes on)')
    return notes


def _context_notes(run_dirs: Sequence[Path]) -> list[str]:
    """A note for each CONTEXT_KEYS key whose value differs between the runs."""
    values: dict[str, set[str]] = {key: set() for key in CONTEXT_KEYS}
    for run_dir in run_dirs:
        try:
            config = json_mapping(Path(run_dir) / CONFIG_FILE)
        except ExperimentError:
            continue
        for key in CONTEXT_KEYS:
            if key in config:
                values[key].add(str(config[key]))
    return [f'note: the runs differ in {key} ({", ".join(sorted(found))}): their figures are '
            f'not like for like' for key, found in values.items() if len(found) > 1]


def compare_runs(run_dirs: list[Path], out_dir: Path, target_accuracy: float | None = None,
                 targets: Sequence[float] = ()) -> str:
    """Overlay runs in one set of plots and return a table of their figures.

    The energy-to-target columns use each run's own ``target_accuracy`` or, if given,
    ``target_accuracy`` for every run (recomputed from its rounds.csv). ``targets`` adds a
    second table: each run's energy (kJ) to the first round at or above each target, and that
    round ('never' if not reached), the paper-style "energy to a target accuracy" curve. Runs
    whose configs differ only in the seed get a table of mean ± sample std over their seeds;
    runs on different datasets, models, fleet sizes or run lengths get a note saying so."""
    for name, value in [('--target', target_accuracy), *(('--targets', t) for t in targets)]:
        if value is not None and not 0.0 < value <= 1.0:
            raise ExperimentError(f'{name} must be in (0, 1], got {value}')
    runs, summaries = [], []
    for run_dir in run_dirs:
        summary = _experiment_summary(Path(run_dir))
        rows = read_rows(Path(run_dir) / ROUNDS_FILE)
        if target_accuracy is not None:
            summary.update(energy_to_target(rows, target_accuracy))
        runs.append((f'{summary["name"]} ({Path(run_dir).name})', rows))
        summaries.append(summary)
    width = max([28, *(len(label) for label, _ in runs)])   # whole labels: seeds differ late
    lines = [f'{"run":<{width}} {"rounds":>6} {"final acc":>9} {"best acc":>9} '
             f'{"uplink MB":>10} {"sim s":>9} {"wall s":>8} {"target":>6} '
             f'{"kJ to target":>12} {"rounds":>6}']
    for (label, rows), summary in zip(runs, summaries):
        lines.append(f'{label:<{width}} {len(rows):>6} '
                     f'{(rows[-1]["accuracy"] if rows else math.nan):>9.4f} '
                     f'{max((r["accuracy"] for r in rows), default=math.nan):>9.4f} '
                     f'{sum(r["uplink_bytes"] for r in rows) / 1e6:>10.2f} '
                     f'{(rows[-1]["sim_time_s"] if rows else 0.0):>9.1f} '
                     f'{sum(r["wall_s"] for r in rows):>8.1f} ' + _target_cells(summary))
    if targets:
        lines += ['', _targets_table(runs, targets, width)]
    seeds = _seed_table(runs, _seed_groups(run_dirs, [label for label, _ in runs]), width)
    if seeds:
        lines += ['', seeds]
    lines += _context_notes(run_dirs) + _unfinished_notes(run_dirs, runs)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    plot_runs(runs, Path(out_dir))
    table = '\n'.join(lines)
    (Path(out_dir) / 'comparison.txt').write_text(table + '\n')
    return table
