"""Figure: 2CEOAFL trajectories vs lawnmower and random; in docs/benchmarks/planning.md.

2CEOAFL trajectory planning (SCA on the eq. (4)-(5) MICP) against lawnmower and random walks.

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
(normalised entropy, min/max, classes visited), path length, planning time; for our plan also
the warm start's objective (the DP region tour the windowed SCA starts from), the number of
window MILPs, the relaxation upper bound (no plan can beat it), whether a wall-clock safety cap
bound (time_capped: then the plan depends on the load) and a SHA-256 prefix of the waypoints
(equal across runs: the planner's work is limited by counts, not time). Every plan (ours and the
baselines) is checked against the step (speed x round time), the geofence and the battery
budget; a violation aborts the bench.

    PYTHONPATH=. .venv/bin/python bench/trajectory_planning.py [--case map fitted synth]
"""

from __future__ import annotations

import argparse
import hashlib
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

CASES = ('map', 'fitted', 'synth')


def _assert_feasible(name: str, waypoints, start, c: TrajectoryConstraints) -> None:
    """Step <= max speed x round time, inside the fence and the altitude band, path <= budget."""
    east_min, north_min, east_max, north_max = c.fence
    xy = np.array([(w.east_m, w.north_m) for w in waypoints])
    steps = np.linalg.norm(np.diff(np.vstack([np.asarray(start)[None], xy]), axis=0), axis=1)
    problems = []
    if steps.max() > c.step_m + 1e-6:
        problems.append(f'step {steps.max():.3f} m > {c.step_m} m')
    if not np.all((xy[:, 0] >= east_min) & (xy[:, 0] <= east_max)
                  & (xy[:, 1] >= north_min) & (xy[:, 1] <= north_max)):
        problems.append('outside the geofence')
    if not all(c.min_altitude_m <= w.up_m <= c.max_altitude_m for w in waypoints):
        problems.append('outside the altitude band')
    if steps.sum() > c.budget_m + 1e-6:
        problems.append(f'path {steps.sum():.1f} m > budget {c.budget_m} m')
    if problems:
        raise AssertionError(f'{name}: ' + '; '.join(problems))


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
    for name, waypoints in (('sca', plan.waypoints), ('lawnmower', lawn), ('random', rand)):
        _assert_feasible(f'{label}/{name}', waypoints, start, c)
    rows = [_row('sca', plan.waypoints, regions, psi, start, plan.solve_time_s),
            _row('lawnmower', lawn, regions, psi, start, 0.0),
            _row('random', rand, regions, psi, start, 0.0)]
    for row in rows:
        row.update(case=label, T=num_rounds, C=num_classes, regions=len(regions))
    xy = np.array([(w.east_m, w.north_m, w.up_m) for w in plan.waypoints])
    rows[0].update(warm_start=round(plan.warm_start_objective, 3), milps=plan.iterations,
                   upper_bound=round(plan.upper_bound, 3), time_capped=plan.time_capped,
                   waypoints_sha256=hashlib.sha256(xy.tobytes()).hexdigest()[:16])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--case', nargs='+', choices=CASES, default=list(CASES))
    args = parser.parse_args()
    world = generate_world(WorldConfig())
    fence = geofence_box(world.size_m, 10.0)
    rows = []
    if 'map' in args.case:
        rows += run_case('map', regions_from_landcover(world.regions), 50, 7, fence, args.seed)
    rng = np.random.default_rng(args.seed)
    positions = rng.uniform(0.0, world.size_m, (3000, 2))   # drawn always: synth's rng state
    if 'fitted' in args.case:
        labels = np.array([world.class_at(e, n) for e, n in positions])
        fitted = fit_class_regions(positions, labels, world.num_classes, 2, args.seed)
        rows += run_case('fitted', fitted, 50, 7, fence, args.seed)
    centres = rng.uniform(fence[0] + 50, fence[2] - 50, (20, 2))
    if 'synth' in args.case:
        synth = [GaussianRegion(i % 10, (float(e), float(n)), ((900.0, 0.0), (0.0, 900.0)),
                                0.05) for i, (e, n) in enumerate(centres)]
        rows += run_case('synth', synth, 100, 10, fence, args.seed)
    for row in rows:
        print(json.dumps(row))


if __name__ == '__main__':
    started = time.perf_counter()
    main()
    print(json.dumps({'total_s': round(time.perf_counter() - started, 1)}))
