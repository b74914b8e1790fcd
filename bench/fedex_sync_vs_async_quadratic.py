"""Figure: FedEx Sync vs Async on quadratic clients; in docs/benchmarks/fedex.md.

What FedEx's own model predicts for Sync vs Async: the slot-level reference simulator
(test/unit/engine/_fedex_reference.py, digest 003 Secs. 2.2-2.3) on quadratic clients with exact
gradients, N = 40 clients, K = 4 transporters of 10 clients each, 480 slots (8 h at 1 min).

f_i(x) = 0.5 sum_d a_id (x_d - c_id)^2 in 2-D, base curvature (1, 0.1) (a fast and a slow
direction), x0 = 0. Data regimes:
  iid       all clients identical: c_i = (1, 1), a_i = base.
  random    c_i = (1, 1) + N(0, 1) per client, a_i = base * U(0.5, 1.5) per client: tour means
            close to the global one (like Dirichlet / random splits).
  location  as random, plus a per-tour offset of length 1.5 (the four offsets sum to 0): each
            tour's clients are biased (the paper's location-based non-IID).
Reported: the relative gap g_t = (f(x_t) - f*) / (f(x0) - f*) of the global model as of slot
t, averaged over the hour (h - 1, h] (the delayed updates make g_t oscillate, so single slots
mislead), and the slot from which g_t stays below 1e-2 up to slot 480.
Run: PYTHONPATH=. .venv/bin/python bench/fedex_sync_vs_async_quadratic.py (~4 s CPU).
"""

from __future__ import annotations

import numpy as np

from test.unit.engine import _fedex_reference as ref

N_PER_TOUR, K, SLOTS, DIM = 10, 4, 480, 2
BASE_CURV = np.array([1.0, 0.1])
TOUR_SETS = {'balanced 9,9,9,9': (9, 9, 9, 9), 'mild 8,9,9,9': (8, 9, 9, 9),
             'seed-0 Async 8,8,8,9': (8, 8, 8, 9), 'strong 5,7,9,12': (5, 7, 9, 12)}
ETAS = (0.02, 0.05, 0.2)
HOURS = (1, 2, 4, 8)


def problem(regime: str, seed: int = 0):
    n = N_PER_TOUR * K
    rng = np.random.default_rng(seed)
    centers = np.ones((n, DIM))
    curv = np.tile(BASE_CURV, (n, 1))
    if regime != 'iid':
        centers += rng.normal(size=(n, DIM))
        curv *= rng.uniform(0.5, 1.5, size=(n, 1))
    if regime == 'location':
        angles = np.pi / 4 + np.arange(K) * np.pi / 2
        offsets = 1.5 * np.stack([np.cos(angles), np.sin(angles)], 1)
        centers += np.repeat(offsets, N_PER_TOUR, axis=0)
    return centers, curv


def suboptimality(xs, centers, curv):
    def f(x):
        return 0.5 * np.mean(np.sum(curv[None] * (x[:, None] - centers[None]) ** 2, -1), 1)
    star = ref.quadratic_optimum(centers, curv)
    f_star = f(star[None])[0]
    return (f(xs) - f_star) / (f(np.zeros((1, DIM)))[0] - f_star)


def run(mode: str, deltas, centers, curv, eta: float) -> np.ndarray:
    tours = [list(range(k * N_PER_TOUR, (k + 1) * N_PER_TOUR)) for k in range(K)]
    offsets = [[1 + j % (d - 1) for j in range(N_PER_TOUR)] for d in deltas]
    grad = ref.quadratic_grad(centers, curv)
    x0 = np.zeros(DIM)
    if mode == 'sync':
        updates = ref.run_sync(tours, offsets, deltas, grad, x0, eta, SLOTS // max(deltas) + 1)
    else:
        updates = ref.run_async(tours, offsets, deltas, grad, x0, eta, SLOTS)
    return suboptimality(ref.model_at_slots(updates, x0, SLOTS), centers, curv)


def main() -> None:
    print('| data | tours (slots) | eta | mode | '
          + ' | '.join(f'mean g, hour {h}' for h in HOURS) + ' | g < 1e-2 from slot |')
    print('|---' * (5 + len(HOURS)) + '|')
    for regime in ('iid', 'random', 'location'):
        centers, curv = problem(regime)
        for name, deltas in TOUR_SETS.items():
            for eta in ETAS:
                for mode in ('sync', 'async'):
                    gap = run(mode, deltas, centers, curv, eta)
                    above = np.flatnonzero(gap >= 1e-2)
                    settle = 'never' if above[-1] == SLOTS else str(above[-1] + 1)
                    cells = ' | '.join(f'{gap[60 * h - 59:60 * h + 1].mean():.2e}'
                                       for h in HOURS)
                    print(f'| {regime} | {name} | {eta} | {mode} | {cells} | {settle} |')


if __name__ == '__main__':
    main()
