"""Figure: FedEx accuracy per simulated hour, paired runs; in docs/benchmarks/fedex.md.

FedEx runs on the paper's clock: the global model's accuracy at each simulated hour, the
mean of the evaluations in the last hour, and the hours to accuracy thresholds, for two sets
of runs paired by position (e.g. FedEx-Sync and FedEx-Async with the same seeds), with the
per-pair differences. The clock is FedEx Sec. VII-A's (1 slot = 1 min); the accuracy "at hour
h" is the model as of the last server update at or before h (Async updates ~K x as often);
with --metric hour-mean it is the mean of the evaluations in (h - 1, h] instead (the delayed
updates make single evaluations oscillate; hour 1's mean counts the first tours' empty
updates, which Async has more of, so read it with care).

    PYTHONPATH=. .venv/bin/python bench/fedex_hours.py --hours 8 --thresholds 0.5,0.6,0.7 \
        --first runs/sync_s0 runs/sync_s1 --second runs/async_s0 runs/async_s1

Reads each run's rounds.csv (columns sim_time_s, accuracy).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from energy_to_targets import read_rows  # bench/, beside this file

SECONDS_PER_HOUR = 3600.0


def read_curve(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """(sim_time_s, accuracy) of a run's server updates, in time order."""
    rows = read_rows(run)
    if not rows:
        raise SystemExit(f'{run}: no rounds recorded')
    return (np.array([r['sim_time_s'] for r in rows]),
            np.array([r['accuracy'] for r in rows]))


def accuracy_at(time_s: np.ndarray, accuracy: np.ndarray, at_s: float) -> float:
    """Accuracy of the last update at or before ``at_s`` (nan before the first update)."""
    index = int(np.searchsorted(time_s, at_s, side='right')) - 1
    return float(accuracy[index]) if index >= 0 else math.nan


def last_hour_mean(time_s: np.ndarray, accuracy: np.ndarray, hours: int) -> float:
    """Mean accuracy of the evaluations in (hours - 1, hours] h."""
    mask = (time_s > (hours - 1) * SECONDS_PER_HOUR) & (time_s <= hours * SECONDS_PER_HOUR)
    return float(accuracy[mask].mean()) if mask.any() else math.nan


def hours_to(time_s: np.ndarray, accuracy: np.ndarray, threshold: float) -> float:
    """Simulated hours to the first evaluation at or above ``threshold`` (nan: never)."""
    hits = np.flatnonzero(accuracy >= threshold)
    return float(time_s[hits[0]] / SECONDS_PER_HOUR) if hits.size else math.nan


def summarise(run: Path, hours: int, thresholds: list[float], metric: str
              ) -> dict[str, list[float]]:
    time_s, accuracy = read_curve(run)
    if time_s[-1] < hours * SECONDS_PER_HOUR:
        raise SystemExit(f'{run}: ends at {time_s[-1] / SECONDS_PER_HOUR:.2f} h, before '
                         f'--hours {hours}')
    if metric == 'last':
        at = [accuracy_at(time_s, accuracy, h * SECONDS_PER_HOUR) for h in range(1, hours + 1)]
    else:
        at = [last_hour_mean(time_s, accuracy, h) for h in range(1, hours + 1)]
    return {'at': at,
            'last': [last_hour_mean(time_s, accuracy, hours)],
            'to': [hours_to(time_s, accuracy, t) for t in thresholds]}


def fmt(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    return ' | '.join('never' if math.isnan(v) else f'{v * scale:.{digits}f}' for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hours', type=int, default=8)
    parser.add_argument('--metric', choices=('last', 'hour-mean'), default='last')
    parser.add_argument('--thresholds', default='0.5,0.6,0.7', help='comma-separated fractions')
    parser.add_argument('--first', nargs='+', type=Path, required=True)
    parser.add_argument('--second', nargs='+', type=Path, required=True)
    args = parser.parse_args()
    if len(args.first) != len(args.second):
        raise SystemExit('--first and --second need the same number of runs (paired)')
    thresholds = [float(t) for t in args.thresholds.split(',')]
    cols = [f'{h} h' for h in range(1, args.hours + 1)]
    cols += [f'mean in ({args.hours - 1}, {args.hours}] h']
    cols += [f'h to {t:.0%}' for t in thresholds]
    print('| runs | ' + ' | '.join(cols) + ' |')
    print('|---' * (len(cols) + 1) + '|')
    sums = {}
    for label, runs in (('first', args.first), ('second', args.second)):
        per_run = [summarise(r, args.hours, thresholds, args.metric) for r in runs]
        for run, s in zip(runs, per_run):
            print(f'| {run} | {fmt(s["at"] + s["last"])} | {fmt(s["to"], 1.0, 2)} |')
        mean = {k: list(np.mean([s[k] for s in per_run], axis=0)) for k in per_run[0]}
        print(f'| **{label}: mean of {len(runs)}** | {fmt(mean["at"] + mean["last"])} | '
              f'{fmt(mean["to"], 1.0, 2)} |')
        sums[label] = per_run
    diff_at, diff_to = [], []
    for first, second, run in zip(sums['first'], sums['second'], args.second):
        diff_at.append(np.subtract(second['at'] + second['last'], first['at'] + first['last']))
        diff_to.append(np.subtract(second['to'], first['to']))
        print(f'| second - first ({run.name}) | {fmt(list(diff_at[-1]))} | '
              f'{fmt(list(diff_to[-1]), 1.0, 2)} |')
    print(f'| **second - first, mean** | {fmt(list(np.mean(diff_at, axis=0)))} | '
          f'{fmt(list(np.mean(diff_to, axis=0)), 1.0, 2)} |')

if __name__ == '__main__':
    main()
