"""2CEOAFL trajectory planning (SCA on the eq. (4)-(5) MICP) against lawnmower and random walks.

Cases:

    map      default world (generate_world(WorldConfig())), regions = the map's ClassRegions
             (moment-matched Gaussians), T = 50, C = 7
    fitted   default world, regions fitted (2 components per class) from 3000 uniformly sampled
             positions labelled with the map class under them, T = 50, C = 7
    synth    synthetic 20 regions over the same fence, T = 100, C = 10 (timing target < 30 s)

Priorities ψ from 2CEOAFL eq. (2) (class_priorities). Start at the world centre, fence = world
less 10 m, 5 m/s x 20 s rounds (100 m steps), battery budget 0.6 x T x step. Baselines: a
lawnmower over the fence walked for the same path length as our plan, and a seeded random walk
within the same constraints. Reported: objective eq. (4), per-class balance of Σ_t I ψ
(normalised entropy, min/max, classes visited), path length, planning time.

    .venv/bin/python bench/trajectory_planning.py
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fl_uav.planning.coverage import geofence_box
from fl_uav.planning.trajectory import (
    GaussianRegion,
    TrajectoryConstraints,
    class_balance,
    class_priorities,
    expected_class_samples,
    fit_class_regions,
    lawnmower_baseline,
    plan_trajectory_detailed,
    random_baseline,
    regions_from_landcover,
    total_path_m,
    two_ceoafl_objective,
)
from fl_uav.world.landcover import WorldConfig, generate_world


def _row(name: str, waypoints, regions, psi, start, seconds: float) -> dict:
    samples = expected_class_samples(waypoints, regions, psi)
    return {'method': name, 'objective': round(two_ceoafl_objective(waypoints, regions, psi), 3),
            **{k: round(v, 3) for k, v in class_balance(samples).items()},
            'path_m': round(total_path_m(start, waypoints), 1), 'time_s': round(seconds, 2)}


def run_case(label: str, regions: list[GaussianRegion], num_rounds: int, num_classes: int,
             fence, seed: int) -> list[dict]:
    psi = class_priorities(num_rounds, num_classes, seed)
    start = ((fence[0] + fence[2]) / 2, (fence[1] + fence[3]) / 2)
    c = TrajectoryConstraints(fence=fence, budget_m=0.6 * num_rounds * 100.0)
    plan = plan_trajectory_detailed(regions, psi, start, c, seed=seed)
    length = total_path_m(start, plan.waypoints)
    lawn = lawnmower_baseline(fence, start, num_rounds, length, c.altitude_m, c.step_m)
    rand = random_baseline(c, start, num_rounds, seed)
    rows = [_row('sca', plan.waypoints, regions, psi, start, plan.solve_time_s),
            _row('lawnmower', lawn, regions, psi, start, 0.0),
            _row('random', rand, regions, psi, start, 0.0)]
    for row in rows:
        row.update(case=label, T=num_rounds, C=num_classes, regions=len(regions))
    rows[0].update(iterations=plan.iterations, upper_bound=round(plan.upper_bound, 3))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    world = generate_world(WorldConfig())
    fence = geofence_box(world.size_m, 10.0)
    rows = run_case('map', regions_from_landcover(world.regions), 50, 7, fence, args.seed)
    rng = np.random.default_rng(args.seed)
    positions = rng.uniform(0.0, world.size_m, (3000, 2))
    labels = np.array([world.class_at(e, n) for e, n in positions])
    fitted = fit_class_regions(positions, labels, world.num_classes, 2, args.seed)
    rows += run_case('fitted', fitted, 50, 7, fence, args.seed)
    centres = rng.uniform(fence[0] + 50, fence[2] - 50, (20, 2))
    synth = [GaussianRegion(i % 10, (float(e), float(n)), ((900.0, 0.0), (0.0, 900.0)), 0.05)
             for i, (e, n) in enumerate(centres)]
    rows += run_case('synth', synth, 100, 10, fence, args.seed)
    for row in rows:
        print(json.dumps(row))


if __name__ == '__main__':
    started = time.perf_counter()
    main()
    print(json.dumps({'total_s': round(time.perf_counter() - started, 1)}))
