"""Figure: LGC's fitted h0 round by round; in docs/benchmarks/lgc.md.

What the LGC progress surrogate's h0 measures round by round (resources.lgc_steps_scale: auto).

Run: .venv/bin/python bench/lgc_steps_scale_trace.py [--config FILE] [--seed 0] [--rounds 4]
     [--steps H]

Runs the config (default config/experiments/lgc_ddpg_fmnist.yaml) as fixed-decision LGC (the
mid action every round: H = 11, the auto warm-up's decision) and, before each round, measures
from the round's global model, with the drones' own data and the round's seeds:

* global: the training loss of the fleet's FedAvg model had every drone stopped after h = 0..H
  local steps (the engine's auto measurement: fl_uav.engine.clients, ``_trace_losses``, on the
  same seeded sample of the drones' training data), and the h0 that
  fl_uav.planning.lgc_control.fit_steps_scale fits to it (cap 10 H_max);
* local: the fleet mean of each drone's own mini-batch losses at steps 0..H-1 (its training
  loss within the round) and the h0 fitted to that.

The paper (LGC, arXiv 2109.08819) has no progress model; the surrogate's
κ (1 − e^(−H/h0)) (1 − e^(−K/k0)) is ours (fl_uav.planning.lgc_control). The bench shows which
h0 each measurement gives in which round: the engine uses round 1's global curve only.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np

import fl_uav.learning.vectorized as vectorized
from fl_uav.configschema import build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine
from fl_uav.planning.lgc_control import LINEAR_STEPS_FACTOR, LgcDecision, fit_steps_scale
from fl_uav.streams import Stream, stream_seed

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--config', default=str(REPO / 'config' / 'experiments'
                                                / 'lgc_ddpg_fmnist.yaml'))
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--rounds', type=int, default=4)
    parser.add_argument('--steps', type=int, default=0, help='H (default: the mid action)')
    args = parser.parse_args()
    flat = read_params_file(args.config)
    flat.update({'seed': args.seed, 'resources.planner': 'lgc_fixed',
                 'resources.lgc_steps_scale': 3.0})
    config = build_config(ExperimentConfig, flat)
    engine = ExperimentEngine(config, Path('/nonexistent'))
    if args.steps:
        for policy in engine.resources.planner.policies.values():
            policy.decision = LgcDecision(args.steps, policy.decision.entries_per_channel)
    cap = LINEAR_STEPS_FACTOR * config.resources.lgc_max_local_steps
    # The per-step mini-batch losses stay inside the trainer: keep a copy of each chunk's.
    step_losses = []
    updates = vectorized.VectorizedTrainer._updates

    def keep_losses(self, params, batches, steps, losses):
        step_losses.append(losses.clone().numpy())
        return updates(self, params, batches, steps, losses)

    vectorized.VectorizedTrainer._updates = keep_losses
    print(f'seed {args.seed}, cap {cap:.0f} steps; per round: global curve (h = 0..H), its h0; '
          f'local curve, its h0')
    for r in range(1, args.rounds + 1):
        t0 = time.perf_counter()
        knobs = engine.resources.knobs(r, list(range(config.num_drones)))
        steps = [knobs[k]['local_steps'] for k in range(config.num_drones)]
        data = [(engine.data.train_x[p], engine.data.train_y[p]) for p in engine.parts]
        seeds = [stream_seed(config.seed, r, Stream.BATCHES, k) for k in range(config.num_drones)]
        lr = config.learning.lr * config.learning.lr_decay ** (r - 1)
        engine._trainer.config = dataclasses.replace(engine.train_config, lr=lr)
        step_losses.clear()
        engine._trainer.train(engine.weights, data, seeds, steps=steps,
                              trace_weights=[len(y) for _, y in data])
        global_curve = engine._trace_losses(data)
        local = np.concatenate(step_losses, axis=1).T   # drones x steps (chunk order)
        global_fit = fit_steps_scale([global_curve], cap)
        local_fit = fit_steps_scale(local, cap)
        print(f'round {r} (H = {max(steps)}): global {global_curve[0]:.4f} -> '
              f'{global_curve[-1]:.4f}, h0 {global_fit.steps_scale:6.1f}'
              f'{" (cap)" if global_fit.at_upper_bound else ""}; local '
              f'{local.mean(0)[0]:.3f} -> {local.mean(0)[-1]:.3f}, h0 '
              f'{local_fit.steps_scale:6.1f}{" (cap)" if local_fit.at_upper_bound else ""}'
              f'  [{time.perf_counter() - t0:.0f} s]', flush=True)
        print('  global drop after h steps: '
              + ' '.join(f'{global_curve[0] - v:.4f}' for v in global_curve[1:]))
        engine.run_round()


if __name__ == '__main__':
    main()
