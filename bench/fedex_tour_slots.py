"""Figure: FedEx CARP tour lengths in slots (and energies); in docs/benchmarks/fedex.md.

Tour lengths in whole 1-min slots of the engine's FedEx plans (CARP, FedEx Sec. VI) for the
paper's setting (config/experiments/fedex_{sync,async}_fmnist.yaml: 40 clients, 4 UAVs,
2 km x 2 km, 15 kJ), per route objective and placement seed: how unbalanced can the tours get?
FedEx's Sync/Async ordering depends on it (bench/fedex_sync_vs_async_quadratic.py).

    PYTHONPATH=. .venv/bin/python bench/fedex_tour_slots.py [--seeds 4] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse

from fl_uav.configschema import build_config, parse_override, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.planning.express import place_clients, plan_routes, tour_slots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seeds', type=int, default=4)
    parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE')
    args = parser.parse_args()
    overrides = dict(map(parse_override, args.set))
    print('| mode | route objective | seed | tour slots (each tour) | revisit slots | '
          'clients per tour | energy per tour (kJ) |')
    print('|---|---|---|---|---|---|---|')
    for mode, objective in (('sync', 'auto'), ('async', 'auto'), ('sync', 'total'),
                            ('async', 'total')):
        for seed in range(args.seeds):
            flat = read_params_file(f'config/experiments/fedex_{mode}_fmnist.yaml')
            flat.update({'seed': seed, 'express.placement_seed': seed,
                         'express.route_objective': objective, **overrides})
            config = build_config(ExperimentConfig, flat)
            positions, _ = place_clients(config.express, config.num_drones)
            _, plan = plan_routes(config.express, positions, seed)
            step_s = config.express.step_time_s
            slots = [tour_slots(s, step_s) for s, t in zip(plan.round_trip_s, plan.tours) if t]
            revisit = (f'{max(slots)} (Sync: the longest tour)' if mode == 'sync'
                       else 'each its own tour')
            print(f'| {mode} | {objective} | {seed} | {", ".join(map(str, slots))} | {revisit} | '
                  f'{", ".join(str(len(t)) for t in plan.tours)} | '
                  f'{", ".join(f"{e / 1000:.2f}" for e in plan.energy_j)} |', flush=True)


if __name__ == '__main__':
    main()
