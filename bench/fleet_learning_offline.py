"""Figure: the fleet's learning-defaults table; in docs/benchmarks/fleet.md.

Offline stand-in for `fl-uav sim`'s learning: same roles, no processes, no flight.

Each drone's frames are rendered along its coverage plan at the spacing the embedded fleet
produces (flight speed × time factor / camera rate), labelled by the map labeler, buffered and
trained by the DroneAgent; the GroundStation aggregates and evaluates. Used to choose the
fleet's default learning settings quickly. Usage:

    .venv/bin/python bench/fleet_learning_offline.py --set learning.lr=0.02 --set ...
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from fl_uav.configschema import build_config, parse_override, read_params_file
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import PoseSample
from fl_uav.fleet.world_setup import map_labeler, world_map
from fl_uav.world.camera import AerialRenderer
from fl_uav.world.dataset import heldout_set, to_model_input


def frames_along(plan, start, spacing_m):
    """Poses every spacing_m along the polyline start -> plan."""
    points = [start] + [(w.east_m, w.north_m, w.up_m) for w in plan]
    out = []
    for a, b in zip(points, points[1:]):
        length = math.dist(a[:2], b[:2])
        steps = max(1, int(length / spacing_m))
        yaw = math.atan2(b[1] - a[1], b[0] - a[0])
        for k in range(steps):
            t = k / steps
            out.append((a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1]), b[2], yaw))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--set', action='append', default=[])
    parser.add_argument('--spacing-m', type=float, default=7.2)
    parser.add_argument('--pose-error-m', type=float, default=3.0)
    args = parser.parse_args()
    flat = read_params_file('config/fleet.yaml')
    flat.update(dict(parse_override(s) for s in args.set))
    cfg: FleetConfig = build_config(FleetConfig, flat)
    torch.set_num_threads(1)
    world = world_map(cfg.world)
    renderer = AerialRenderer(world, cfg.camera, seed=cfg.sim_camera.seed)
    images, labels = heldout_set(world, cfg.camera, cfg.rounds.eval_samples, cfg.rounds.eval_seed)
    station = GroundStation(cfg, to_model_input(images, cfg.learning.input_px), labels)
    agents = [DroneAgent(cfg, d, map_labeler(cfg.world, cfg.camera))
              for d in range(cfg.num_drones)]
    positions = {d: (cfg.autopilot.home_east_m + d * cfg.autopilot.home_spacing_m,
                     cfg.autopilot.home_north_m, cfg.flight.takeoff_altitude_m)
                 for d in range(cfg.num_drones)}
    rng = np.random.default_rng(0)
    start = time.time()
    print(f'initial accuracy {station.initial_accuracy:.3f}')
    for r in range(cfg.rounds.num_rounds):
        opening = station.open_round(float(r))
        for d, agent in enumerate(agents):
            task = agent.accept_global_frame(opening.frame)
            stamp = 0.0
            for east, north, up, yaw in frames_along(task.plan, positions[d], args.spacing_m):
                stamp += 0.1
                err = rng.normal(0, args.pose_error_m, 2)
                agent.on_pose(PoseSample(east + err[0], north + err[1], up, yaw, stamp))
                agent.on_camera_frame(renderer.render(east, north, up, yaw, rng), stamp)
            last = task.plan[-1]
            positions[d] = (last.east_m, last.north_m, last.up_m)
            report = agent.train_round(task)
            for frame in report.frames:
                station.receive_update(frame)
        record = station.close_round(float(r) + 1)
        print(f'round {record.round_index:2d} acc {record.accuracy:.3f} loss {record.loss:.3f} '
              f'samples {sum(record.samples.values())} t {time.time() - start:.0f}s', flush=True)


if __name__ == '__main__':
    main()
