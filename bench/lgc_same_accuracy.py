"""Figure: LGC runs' energy to the same accuracy; in docs/benchmarks/lgc.md.

LGC controllers against fixed-decision LGC "for the same accuracy" (docs/benchmarks/lgc.md).

For every run directory given (their rounds.csv), one row: rounds, final and best accuracy,
the mean of the last 10 rounds, modelled energy to the first round at 70 %, total energy, and
for the reference accuracy A (``--reference``, a fraction: e.g. fixed-decision LGC's accuracy
at round 40 minus 1 point) the energy to the first round at A and to the first round from
which the accuracy stays >= A to the end of the run ("held"; '-' if the last round is < A).

    python bench/lgc_same_accuracy.py --reference 0.727 runs/lgc_fixed_s0 runs/lgc_online_s0
"""

from __future__ import annotations

import argparse
from pathlib import Path

from energy_to_targets import energy_to as energy_to_first  # bench/, beside this file
from energy_to_targets import read_rows


def energy_to_held(rows: list[dict[str, float]], target: float) -> tuple[float, int] | None:
    """Energy up to the first round from which every later round's accuracy is >= target."""
    start = None
    for i in range(len(rows) - 1, -1, -1):
        if rows[i]['accuracy'] < target:
            break
        start = i
    if start is None:
        return None
    return sum(r['energy_total_j'] for r in rows[:start + 1]), int(rows[start]['round'])


def summarise(rows: list[dict[str, float]], reference: float | None,
              upto: int | None = None) -> dict[str, object]:
    rows = rows[:upto] if upto else rows
    acc = [r['accuracy'] for r in rows]
    out: dict[str, object] = {
        'rounds': len(rows), 'final': acc[-1], 'best': max(acc),
        'last10': sum(acc[-10:]) / len(acc[-10:]),
        'to70': energy_to_first(rows, 0.70),
        'total_j': sum(r['energy_total_j'] for r in rows)}
    if reference is not None:
        out['to_ref'] = energy_to_first(rows, reference)
        out['held_ref'] = energy_to_held(rows, reference)
    return out


def _fmt(value) -> str:
    if value is None:
        return '-'
    if isinstance(value, tuple):
        return f'{value[0] / 1e3:,.0f} kJ ({value[1]})'
    if isinstance(value, float) and value <= 1.0:
        return f'{100 * value:.1f} %'
    if isinstance(value, float):
        return f'{value / 1e3:,.0f} kJ'
    return str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('runs', nargs='+', type=Path)
    parser.add_argument('--reference', type=float, default=None,
                        help='reference accuracy (fraction), e.g. fixed at round 40 - 0.01')
    parser.add_argument('--upto', type=int, default=None, help='only the first N rounds')
    args = parser.parse_args()
    keys = ['rounds', 'final', 'best', 'last10', 'to70', 'total_j', 'to_ref', 'held_ref']
    print('| run | ' + ' | '.join(keys) + ' |')
    print('|---' * (len(keys) + 1) + '|')
    for run in args.runs:
        s = summarise(read_rows(run), args.reference, args.upto)
        print(f'| {run.name} | ' + ' | '.join(_fmt(s.get(k)) for k in keys) + ' |')


if __name__ == '__main__':
    main()
