"""Figure: FedDPQ optimiser and LGC controller, own models; in docs/benchmarks/feddpq.md, lgc.md.

Resource decisions (issue 5 item 3): FedDPQ's optimiser and LGC's DDPG controller vs baselines.

Run: .venv/bin/python bench/resource_decisions.py [--seed 0] [--quick]

FedDPQ (fl_uav.planning.feddpq_opt): modelled energy (FedDPQ eq. (39)) to reach the convergence
target ε (rounds from eq. (31) with Theorem 1's Ψ) on a 20-drone fleet with the experiment
engine's default system section (fl_uav.engine.config.SystemConfig: 1 MHz, 0.1 W,
I = 1.5e-8 W, d ~ U[50, 500] m, 1.5 GHz CPU, c0_tr 2.7e8, c0_gen 2.2e8), the engine's default
model (small_cnn on 8x8 digits, V parameters counted from the model) and batch (32), digits
labels split Dirichlet(0.5) over the drones (the engine's partition function), S = 10 draws per
round (FedDPQ's "10 devices per round"). The optimiser is compared with three fixed-knob
baselines, all at the engine's tx_power_w for every drone (no power control):

* engine defaults: no top-up, no pruning, float32 upload (Δ = 0, ρ = 0, 32 bits: TFL);
* engine knob defaults: the values of data.topup_factor, learning.prune_fraction and
  compression.range_bits (Δ = 0.4, ρ = 0.2, 4 bits);
* Table I mid-box: Δ = 0.25, ρ = 0.2, δ = 11.

It also repeats the comparison with the convergence constants changed (the paper gives none)
and on FedDPQ's own Table I system (20-50 MHz CPUs, d ~ U[100, 300] m), where the upload
dominates the energy instead of the CPU.

LGC (fl_uav.planning.lgc_control): three drones (LGC's default) with LGC Table 1's 3G/4G/5G
channels at 150, 250 and 400 m; each drone's DDPG agent is trained on its own simulated rounds;
then DDPG, fixed-decision LGC (the mid action every round: the paper's "LGC without DRL") and
the greedy cheapest-channel heuristic run from the initial to the target loss on the same
fading draws; the figure is the modelled energy (compute + Table 1 comm + hover) to target.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from fl_uav.compression.config import CompressionConfig
from fl_uav.engine.config import DataConfig
from fl_uav.fleet.config import LearningConfig
from fl_uav.learning.datasets import load_digits
from fl_uav.learning.models import build_model
from fl_uav.learning.partition import dirichlet
from fl_uav.netmodel.config import SystemConfig
from fl_uav.planning.feddpq_opt import (
    ConvergenceConstants,
    FeddpqFleet,
    FeddpqKnobs,
    FeddpqModel,
    optimise_feddpq,
)
from fl_uav.planning.lgc_control import (
    DdpgConfig,
    DdpgPolicy,
    FixedPolicy,
    GreedyChannelPolicy,
    LgcEnv,
    LgcEnvConfig,
    decode_action,
    evaluate_policy,
    table1_channels,
    train_ddpg,
)

NUM_DRONES = 20
DRAWS_PER_ROUND = 10


def engine_fleet(seed: int) -> FeddpqFleet:
    """20 drones with SystemConfig's defaults and digits labels split Dirichlet(0.5)."""
    system, learning, data = SystemConfig(), LearningConfig(), DataConfig()
    digits = load_digits()
    parts = dirichlet(digits.labels, NUM_DRONES, data.dirichlet_alpha, seed)
    counts = np.array([np.bincount(digits.labels[p], minlength=10) for p in parts])
    model = build_model(learning.model, 10, input_px=8, in_channels=1)
    num_params = sum(p.numel() for p in model.parameters())
    rng = np.random.default_rng(seed)
    distance = rng.uniform(system.distance_min_m, system.distance_max_m, NUM_DRONES)
    return FeddpqFleet(tuple(range(NUM_DRONES)), counts, distance, num_params=num_params,
                       interference_w=system.interference_w, cpu_freq_hz=system.cpu_freq_hz,
                       batch_size=learning.batch_size, draws_per_round=DRAWS_PER_ROUND,
                       bandwidth_hz=system.bandwidth_hz,
                       train_cycles_per_sample=system.train_cycles_per_sample,
                       gen_cycles_per_sample=system.gen_cycles_per_sample)


def table1_fleet(base: FeddpqFleet, seed: int) -> FeddpqFleet:
    """The same drones and data with FedDPQ's Table I radio and CPU draws."""
    rng = np.random.default_rng(seed + 1)
    n = base.size
    return FeddpqFleet(base.drone_ids, base.class_counts, rng.uniform(100, 300, n),
                       num_params=base.num_params, interference_w=rng.uniform(1e-8, 2e-8, n),
                       cpu_freq_hz=rng.uniform(20e6, 50e6, n), batch_size=base.batch_size,
                       draws_per_round=base.draws_per_round)


def baselines(fleet: FeddpqFleet) -> dict[str, FeddpqKnobs]:
    system, data = SystemConfig(), DataConfig()
    learning, compression = LearningConfig(), CompressionConfig()
    p = system.tx_power_w
    return {
        'engine defaults (TFL: no top-up/pruning, fp32)': FeddpqKnobs.uniform(fleet, p, 0.0,
                                                                              0.0, 32),
        f'engine knob defaults (Δ={data.topup_factor}, ρ={learning.prune_fraction}, '
        f'δ={compression.range_bits})': FeddpqKnobs.uniform(
            fleet, p, data.topup_factor, learning.prune_fraction, compression.range_bits),
        'Table I mid-box (Δ=0.25, ρ=0.2, δ=11)': FeddpqKnobs.uniform(fleet, p, 0.25, 0.2, 11),
    }


def feddpq_section(title: str, fleet: FeddpqFleet, constants: ConvergenceConstants,
                   seed: int, quick: bool) -> None:
    print(f'\n## FedDPQ: {title}')
    model = FeddpqModel(fleet, constants)
    kwargs = dict(max_bcd_rounds=2, q_trials=5, block_trials=20) if quick else {}
    t0 = time.perf_counter()
    plan = optimise_feddpq(fleet, constants, seed=seed, **kwargs)
    wall = time.perf_counter() - t0
    opt = plan.prediction
    print(f'optimised ({plan.mode}, {wall:.1f} s): energy {opt.energy_j / 1e6:.4f} MJ, '
          f'{opt.rounds:.0f} rounds, {opt.per_round_energy_j:.1f} J/round, generation '
          f'{opt.generation_energy_j / 1e3:.2f} kJ')
    k = plan.knobs
    print(f'  q target {plan.packet_error_target:.4f}; tx_power_w {k.tx_power_w.min():.3f}-'
          f'{k.tx_power_w.max():.3f}; Δ {k.topup_factor.min():.2f}-{k.topup_factor.max():.2f}; '
          f'ρ {k.prune_fraction.min():.2f}-{k.prune_fraction.max():.2f}; bits '
          f'{k.bits.min()}-{k.bits.max()}; q_u {opt.packet_error.min():.4f}-'
          f'{opt.packet_error.max():.4f}')
    if plan.mode == 'clipped_q':
        print(f'  fallback: {plan.fallback_reason.split(";")[0]}')
    print(f'  {"baseline":<58} {"energy MJ":>10} {"rounds":>7} {"optimised saves":>16}')
    for name, knobs in baselines(fleet).items():
        base = model.predict(knobs)
        rounds = f'{base.rounds:.0f}' if base.reached else f'>{constants.max_rounds}'
        saving = 1.0 - opt.energy_j / base.energy_j
        print(f'  {name:<58} {base.energy_j / 1e6:>10.4f} {rounds:>7} {saving:>15.1%}')


def lgc_section(seed: int, quick: bool) -> None:
    print('\n## LGC: DDPG vs fixed-decision LGC vs greedy heuristic (3 drones, 3G/4G/5G)')
    ddpg = DdpgConfig(train_steps=600 if quick else 1500)
    eval_seeds = range(100, 103 if quick else 105)
    totals: dict[str, list[float]] = {'ddpg': [], 'fixed': [], 'heuristic': []}
    times: dict[str, list[float]] = {name: [] for name in totals}
    print(f'  {"drone":<6} {"policy":<10} {"energy kJ":>10} {"time s":>8} {"rounds":>7}  '
          f'decision at the first round')
    for drone, distance in enumerate((150.0, 250.0, 400.0)):
        config = LgcEnvConfig(channels=table1_channels(60_000, distance))
        t0 = time.perf_counter()
        agent, _ = train_ddpg(config, ddpg, seed=seed + drone)
        train_s = time.perf_counter() - t0
        mid = decode_action(np.zeros(config.action_dim), config)
        policies = {'ddpg': DdpgPolicy(agent), 'fixed': FixedPolicy(mid),
                    'heuristic': GreedyChannelPolicy(mid.local_steps, mid.total_entries)}
        for name, policy in policies.items():
            runs = [evaluate_policy(config, policy, seed=s) for s in eval_seeds]
            energy = float(np.mean([r.energy_j for r in runs]))
            time_s = float(np.mean([r.time_s for r in runs]))
            rounds = float(np.mean([r.rounds for r in runs]))
            totals[name].append(energy)
            times[name].append(time_s)
            env = LgcEnv(config, seed=eval_seeds[0])
            first = policy.decide(env, env.reset())
            print(f'  {drone:<6} {name:<10} {energy / 1e3:>10.1f} {time_s:>8.0f} {rounds:>7.1f}  '
                  f'H={first.local_steps} D={list(first.entries_per_channel)}'
                  + (f'  (trained {train_s:.1f} s)' if name == 'ddpg' else ''))
    fixed = sum(totals['fixed'])
    for name in totals:
        print(f'  fleet total {name:<10} {sum(totals[name]) / 1e3:>9.1f} kJ to the target loss '
              f'(saves {1.0 - sum(totals[name]) / fixed:.1%} vs fixed), '
              f'time {sum(times[name]):.0f} s')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--quick', action='store_true', help='fewer trials and steps')
    args = parser.parse_args()
    torch.set_num_threads(1)
    fleet = engine_fleet(args.seed)
    print(f'fleet: {fleet.size} drones, V = {fleet.num_params} parameters, b = '
          f'{fleet.batch_size}, S = {fleet.draws_per_round}, d {np.min(fleet.distance_m):.0f}-'
          f'{np.max(fleet.distance_m):.0f} m, samples per drone '
          f'{fleet.class_counts.sum(1).min():.0f}-{fleet.class_counts.sum(1).max():.0f}')
    base = ConvergenceConstants()
    print(f'convergence constants (assumed; FedDPQ gives none): {base}')
    feddpq_section('engine default system, default constants', fleet, base, args.seed,
                   args.quick)
    feddpq_section('engine default system, paper-literal Z (no label term)', fleet,
                   ConvergenceConstants(heterogeneity_label_scale=0.0), args.seed, args.quick)
    feddpq_section('engine default system, Γ² doubled (pruning costs more rounds)', fleet,
                   ConvergenceConstants(param_sq_bound=1.0), args.seed, args.quick)
    feddpq_section('FedDPQ Table I system (20-50 MHz CPUs, d 100-300 m)',
                   table1_fleet(fleet, args.seed), base, args.seed, args.quick)
    lgc_section(args.seed, args.quick)


if __name__ == '__main__':
    main()
