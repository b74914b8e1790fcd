"""A drone agent with a filled buffer and a ground station of the same config, for tests that
pass frames between the two without ROS."""

from __future__ import annotations

import numpy as np

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import PoseSample
from fl_uav.fleet.world_setup import map_labeler


def eval_set(n: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """A small random held-out set (inputs 3x32x32, 7 classes)."""
    rng = np.random.default_rng(0)
    return rng.normal(0, 1, (n, 3, 32, 32)).astype(np.float32), rng.integers(0, 7, n)


def agent_and_station(flat: dict) -> tuple[DroneAgent, GroundStation]:
    """Drone 0 with ten camera frames buffered along a line, and the station, from ``flat``."""
    config = build_config(FleetConfig, flat)
    agent = DroneAgent(config, 0, map_labeler(config.world, config.camera))
    rng = np.random.default_rng(3)
    for k in range(10):
        agent.on_pose(PoseSample(200.0 + 10 * k, 400.0, 30.0, 0.0, stamp_s=float(k)))
        agent.on_camera_frame(rng.integers(0, 255, (64, 64, 3), np.uint8), stamp_s=float(k))
    return agent, GroundStation(config, *eval_set())
