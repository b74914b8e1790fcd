"""Figure: FedEx Sync / Async on the reference simulator; in docs/benchmarks/fedex.md.

FedEx's slot-level reference simulator (test/unit/engine/_fedex_reference.py, written from
digest 003 Secs. 2.2-2.3 alone) run on the engine's own clients: the experiment config's
FMNIST data, client split, CARP plan and model, one minibatch SGD step per client per slot.
It answers whether an ordering seen in the engine (e.g. FedEx-Async behind FedEx-Sync) is the
algorithm's or the engine's. ``--model linear`` swaps in multinomial logistic regression (a
convex model) to separate the algorithm from the network's nonconvexity. ``--tour-slots``
replaces the plan's round-trip times Δ_k (eq. (9), in slots) by the given ones, keeping its
client sets: e.g. Async with equal tours (which is Sync) against Async with tours a slot apart.

    PYTHONPATH=. .venv/bin/python bench/fedex_reference_fmnist.py sync 0 [--model linear] \
        [--tour-slots 8,8,8,9] [--set KEY=VALUE ...]

Prints the accuracy of the global model as of each simulated hour (1 slot = 1 min) and the
mean of its evaluations in each hour. ~100 s a run with small_cnn (single-threaded), ~6 s
with --model linear, plus the CARP plan. Each slot draws a fresh minibatch (the engine
walks per-visit epochs), so runs match the engine in law, not bit for bit.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from fl_uav.configschema import build_config, parse_override, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine
from test.unit.engine import _fedex_reference as ref

SLOTS_PER_HOUR, HOURS = 60, 8


class FlatModel:
    """A torch model seen as a flat float64 vector: loss gradients and test accuracy."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.loss = torch.nn.CrossEntropyLoss()

    def vector(self) -> np.ndarray:
        return parameters_to_vector(self.model.parameters()).detach().numpy().astype(np.float64)

    def load(self, x: np.ndarray) -> None:
        with torch.no_grad():
            vector_to_parameters(torch.as_tensor(x, dtype=torch.float32),
                                 self.model.parameters())

    def grad(self, x: np.ndarray, inputs: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
        self.load(x)
        self.model.zero_grad()
        self.loss(self.model(inputs), labels).backward()
        grads = parameters_to_vector(p.grad for p in self.model.parameters())
        return grads.numpy().astype(np.float64)

    def accuracy(self, x: np.ndarray, inputs: torch.Tensor, labels: torch.Tensor) -> float:
        self.load(x)
        with torch.no_grad():
            return float((self.model(inputs).argmax(1) == labels).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('mode', choices=('sync', 'async'))
    parser.add_argument('seed', type=int)
    parser.add_argument('--model', choices=('engine', 'linear'), default='engine')
    parser.add_argument('--tour-slots', metavar='D1,D2,...',
                        help="each UAV's round trip in slots, in place of the plan's")
    parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE')
    args = parser.parse_args()
    torch.set_num_threads(1)
    flat = read_params_file(f'config/experiments/fedex_{args.mode}_fmnist.yaml')
    flat.update({'seed': args.seed, 'express.placement_seed': args.seed,
                 **dict(map(parse_override, args.set))})
    config = build_config(ExperimentConfig, flat)
    with tempfile.TemporaryDirectory() as out:
        engine = ExperimentEngine(config, Path(out))
    runtime = engine.express.runtime
    tours = [list(engine.express.plan.tours[k]) for k in runtime.uavs]
    deltas = [runtime.period_slots[k] for k in runtime.uavs]
    if args.tour_slots:
        deltas = [int(d) for d in args.tour_slots.split(',')]
        if len(deltas) != len(tours) or min(deltas) < 2:
            parser.error(f'--tour-slots needs {len(tours)} round trips of at least 2 slots, '
                         f'got {args.tour_slots!r}')
    offsets = [[1 + j % (d - 1) for j in range(len(t))] for t, d in zip(tours, deltas)]
    print(f'{args.mode} seed {args.seed}: tour slots {deltas}, clients per tour '
          f'{[len(t) for t in tours]}', flush=True)
    model = engine.model
    if args.model == 'linear':
        torch.manual_seed(config.learning.init_seed)
        features = int(np.prod(engine.data.train_x.shape[1:]))
        model = torch.nn.Sequential(torch.nn.Flatten(),
                                    torch.nn.Linear(features, engine.data.num_classes))
    net = FlatModel(model)
    train_x = torch.as_tensor(engine.data.train_x)
    train_y = torch.as_tensor(engine.data.train_y).long()
    parts = [torch.as_tensor(p) for p in engine.express.parts]
    rng = np.random.default_rng(args.seed)
    batch = config.learning.batch_size

    def grad(i: int, x: np.ndarray) -> np.ndarray:
        pick = parts[i][torch.as_tensor(rng.choice(len(parts[i]), batch, replace=False))]
        return net.grad(x, train_x[pick], train_y[pick])

    slots = SLOTS_PER_HOUR * HOURS
    x0 = net.vector()
    lr = config.learning.lr
    start = time.monotonic()
    if args.mode == 'sync':
        updates = ref.run_sync(tours, offsets, deltas, grad, x0, lr, slots // max(deltas) + 1)
    else:
        updates = ref.run_async(tours, offsets, deltas, grad, x0, lr, slots)
    test_x = torch.as_tensor(engine.data.test_x)
    test_y = torch.as_tensor(engine.data.test_y).long()
    evals = [(u.slot, net.accuracy(u.x, test_x, test_y)) for u in updates if u.slot <= slots]
    at, hour_mean = [], []
    for h in range(1, HOURS + 1):
        before = [a for t, a in evals if t <= SLOTS_PER_HOUR * h]
        at.append(before[-1] if before else net.accuracy(x0, test_x, test_y))
        inside = [a for t, a in evals if SLOTS_PER_HOUR * (h - 1) < t <= SLOTS_PER_HOUR * h]
        hour_mean.append(float(np.mean(inside)) if inside else at[-1])
    print(f'{args.mode} seed {args.seed} ({args.model}, lr {lr}): accuracy at 1..{HOURS} h '
          + ' '.join(f'{100 * a:.1f}' for a in at) + ' | hour mean '
          + ' '.join(f'{100 * a:.1f}' for a in hour_mean)
          + f' | {time.monotonic() - start:.0f} s', flush=True)


if __name__ == '__main__':
    main()
