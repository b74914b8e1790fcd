"""Figure: local training time, dense vs pruned SmallCnn; in docs/benchmarks/pruning.md.

Local training wall time: dense SmallCnn against physically shrunk (filter-pruned) copies.

Workload: the fleet's SmallCnn (width 16, 10 classes) on synthetic 3×32×32 inputs, N samples
(3000 by default), 1 local epoch of train_local (batch 32, SGD lr 0.05, momentum 0.9), so every
variant runs the same data and the same number of SGD steps (⌈N/32⌉). One torch thread.

Variants (fl_uav.learning.pruning.shrink_model, L1 filter importance):

    dense        the unpruned model
    keep=0.5     every conv keeps half its filters (δ = 0.5)
    keep=0.25    every conv keeps a quarter (δ = 0.75)

``--prune-hidden`` also prunes the hidden units of the first Linear layer. The variants are run
interleaved, ``--reps`` times each, in one process (warm-up run first); min and median wall
times of the training call only are reported, with ratios to dense. Also reported: the time of
shrink + extract + expand (the per-round bookkeeping), and a per-step fixed overhead estimate
from a batch-1 run. Targets (issue): keep=0.5 ≤ 0.6× dense, keep=0.25 ≤ 0.35× dense.

    .venv/bin/python bench/structured_pruning.py                 # 5 reps, 3000 samples
    .venv/bin/python bench/structured_pruning.py --reps 9 --prune-hidden
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fl_uav.learning.models import build_model  # noqa: E402
from fl_uav.learning.pruning import expand_update, extract_weights, shrink_model  # noqa: E402
from fl_uav.learning.training import TrainConfig, train_local  # noqa: E402
from fl_uav.learning.weights import get_weights, subtract, weight_shapes  # noqa: E402

TARGETS = {0.5: 0.6, 0.25: 0.35}


def make_data(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, samples).astype(np.int64)
    inputs = rng.normal(0.0, 1.0, (samples, 3, 32, 32)).astype(np.float32)
    return inputs, labels


def timed_train(model, inputs, labels, config) -> tuple[float, int]:
    start = time.perf_counter()
    result = train_local(model, inputs, labels, config, seed=1)
    return time.perf_counter() - start, result.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--reps', type=int, default=5)
    parser.add_argument('--samples', type=int, default=3000)
    parser.add_argument('--prune-hidden', action='store_true')
    parser.add_argument('--json', type=Path, help='also write the results here')
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    inputs, labels = make_data(args.samples)
    config = TrainConfig(local_epochs=1, batch_size=32, lr=0.05, momentum=0.9)
    dense = build_model('small_cnn', 10, seed=0)
    dense_weights = get_weights(dense)
    shapes = weight_shapes(dense_weights)
    variants = {'dense': (dense, None)}
    bookkeeping = {}
    for keep in TARGETS:
        start = time.perf_counter()
        small, index_map = shrink_model(dense, keep, prune_hidden=args.prune_hidden)
        small_weights = extract_weights(dense_weights, index_map)
        expand_update(subtract(small_weights, small_weights), index_map, shapes)
        bookkeeping[keep] = time.perf_counter() - start
        variants[f'keep={keep}'] = (small, index_map)
    params = {name: sum(p.numel() for p in m.parameters()) for name, (m, _) in variants.items()}

    def fresh(name):
        model, index_map = variants[name]
        if index_map is None:
            clone = build_model('small_cnn', 10, seed=0)
        else:
            clone, _ = shrink_model(dense, float(name.split('=')[1]),
                                    prune_hidden=args.prune_hidden)
        return clone

    for name in variants:                    # warm-up
        timed_train(fresh(name), inputs[:320], labels[:320], config)
    times = {name: [] for name in variants}
    steps = {}
    for rep in range(args.reps):
        for name in variants:
            model = fresh(name)
            wall, steps[name] = timed_train(model, inputs, labels, config)
            times[name].append(wall)
        print(f'rep {rep + 1}/{args.reps}: ' +
              ', '.join(f'{n} {times[n][-1]:.3f}s' for n in variants), flush=True)
    # Per-step fixed overhead: the same number of steps with batch 1 (almost no arithmetic).
    overhead = {}
    for name in variants:
        one = TrainConfig(local_epochs=1, batch_size=1, lr=0.05, momentum=0.9, max_steps=200)
        walls = [timed_train(fresh(name), inputs, labels, one)[0] / 200 for _ in range(3)]
        overhead[name] = min(walls)
    dense_min, dense_med = min(times['dense']), statistics.median(times['dense'])
    print(f'\nSmallCnn, {args.samples} samples, batch 32, 1 epoch, 1 thread, '
          f'{args.reps} reps, prune_hidden={args.prune_hidden}')
    print(f'{"variant":<10} {"params":>8} {"steps":>6} {"min s":>8} {"median s":>9} '
          f'{"min ×":>7} {"med ×":>7} {"target":>7} {"ms/step@b1":>11}')
    report = {'samples': args.samples, 'reps': args.reps, 'prune_hidden': args.prune_hidden,
              'variants': {}}
    for name in variants:
        lo, med = min(times[name]), statistics.median(times[name])
        keep = None if name == 'dense' else float(name.split('=')[1])
        target = TARGETS.get(keep)
        print(f'{name:<10} {params[name]:>8} {steps[name]:>6} {lo:>8.3f} {med:>9.3f} '
              f'{lo / dense_min:>7.3f} {med / dense_med:>7.3f} '
              f'{"" if target is None else f"≤{target}":>7} {1e3 * overhead[name]:>11.2f}')
        report['variants'][name] = {
            'params': params[name], 'steps': steps[name], 'times_s': times[name],
            'min_s': lo, 'median_s': med, 'min_ratio': lo / dense_min,
            'median_ratio': med / dense_med, 'target_ratio': target,
            'step_overhead_batch1_s': overhead[name]}
    for keep, wall in bookkeeping.items():
        print(f'shrink+extract+expand keep={keep}: {1e3 * wall:.1f} ms')
    report['bookkeeping_s'] = {str(k): v for k, v in bookkeeping.items()}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == '__main__':
    main()
