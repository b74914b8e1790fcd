"""Figure: energy to each accuracy target, paired runs; in docs/benchmarks/feddpq.md, lgc.md.

Energy to an accuracy target, a candidate's runs against a baseline's, paired by seed.

For each target T: the modelled energy (rounds.csv ``energy_total_j``, summed) up to the first
round whose test accuracy is >= T, summed over the pairs, and the candidate's saving
1 − Σ candidate / Σ baseline, with each pair's saving and first rounds in brackets. A target
some run never reaches is reported as such (no sum). Used for FedDPQ (optimiser vs fixed
knobs, docs/benchmarks/feddpq.md) and LGC (controller vs fixed decision, lgc.md):

    python bench/energy_to_targets.py --targets 0.7,0.75 \\
        --baseline runs/feddpq_fixed_s0 runs/s7/feddpq_fixed_s1 \\
        --candidate runs/feddpq_opt_paperz_s0 runs/s7/feddpq_opt_paperz_s1
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path


def read_rows(run_dir: Path) -> list[dict[str, float]]:
    path = Path(run_dir) / 'rounds.csv'
    if not path.is_file():
        raise SystemExit(f'no rounds.csv in {run_dir}')
    with open(path, newline='') as f:
        return [{k: float(v) for k, v in row.items() if v not in ('', None)}
                for row in csv.DictReader(f)]


def energy_to(rows: list[dict[str, float]], target: float) -> tuple[float, int] | None:
    """(J, round) up to and including the first round with accuracy >= target, or None."""
    total = 0.0
    for row in rows:
        total += row['energy_total_j']
        if row['accuracy'] >= target:
            return total, int(row['round'])
    return None


def table(baseline: list[Path], candidate: list[Path], targets: list[float]) -> list[str]:
    pairs = [(read_rows(b), read_rows(c)) for b, c in zip(baseline, candidate)]
    lines = ['| target | baseline | candidate | saving | per pair: saving [rounds b/c] |',
             '|---|---|---|---|---|']
    for t in targets:
        reached = [(energy_to(b, t), energy_to(c, t)) for b, c in pairs]
        cells = ['never' if b is None or c is None
                 else f'{100 * (1 - c[0] / b[0]):.1f} % [{b[1]}/{c[1]}]' for b, c in reached]
        if any(b is None or c is None for b, c in reached):
            lines.append(f'| {t:.0%} | | | not reached by every run | {" / ".join(cells)} |')
            continue
        sum_b = sum(b[0] for b, _ in reached)
        sum_c = sum(c[0] for _, c in reached)
        lines.append(f'| {t:.0%} | {sum_b / 1e3:,.0f} kJ | {sum_c / 1e3:,.0f} kJ | '
                     f'{100 * (1 - sum_c / sum_b):.1f} % | {" / ".join(cells)} |')
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--targets', required=True, help='comma-separated fractions')
    parser.add_argument('--baseline', nargs='+', type=Path, required=True)
    parser.add_argument('--candidate', nargs='+', type=Path, required=True)
    args = parser.parse_args()
    if len(args.baseline) != len(args.candidate):
        raise SystemExit('--baseline and --candidate need the same number of runs (pairs)')
    targets = [float(t) for t in args.targets.split(',')]
    print('\n'.join(table(args.baseline, args.candidate, targets)))


if __name__ == '__main__':
    main()
