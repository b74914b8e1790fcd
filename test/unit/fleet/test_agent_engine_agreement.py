"""The fleet's DroneAgent and the experiment engine agree on what a drone reports and sends."""

from __future__ import annotations

import numpy as np

from fl_uav.compression.codec import decode_frame
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import PoseSample
from fl_uav.fleet.world_setup import map_labeler


def _eval_set(n: int = 40):
    rng = np.random.default_rng(0)
    return rng.normal(0, 1, (n, 3, 32, 32)).astype(np.float32), rng.integers(0, 7, n)


def _fill(agent: DroneAgent, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for k in range(count):
        agent.on_pose(PoseSample(200.0 + 10 * k, 400.0, 30.0, 0.0, stamp_s=float(k)))
        agent.on_camera_frame(rng.integers(0, 255, (64, 64, 3), np.uint8), stamp_s=float(k))


def test_2ceoafl_station_divides_by_the_drones_learning_rate_not_the_default():
    # Arrange: the drone steps with η̃ = 0.05, aggregation.local_lr stays at its 0.1
    config = build_config(FleetConfig, {
        'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'learning.optimizer': 'sgd', 'learning.lr': 0.05,
        'learning.client_algorithm': '2ceoafl', 'learning.prune_fraction': 0.3,
        'aggregation.strategy': '2ceoafl', 'aggregation.server_lr': 0.5})
    agent = DroneAgent(config, 0, map_labeler(config.world, config.camera))
    station = GroundStation(config, *_eval_set())
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    _fill(agent, 10, seed=4)
    before = {n: w.copy() for n, w in station.weights.items()}
    # Act
    report = agent.train_round(task)
    verdict = station.receive_update(report.frame)
    station.close_round(now_s=1.0)
    # Assert: w⁺ = w − η Π with Π = −Δ/η̃ (2CEOAFL eq. (13)), η = 0.5, α = 1, η̃ = 0.05
    delta = decode_frame(report.frame).tensors
    assert verdict.accepted and config.aggregation.local_lr != 0.05
    assert any(np.any(d != 0) for d in delta.values())
    for name, weight in station.weights.items():
        np.testing.assert_allclose(weight, before[name] + 0.5 * delta[name] / 0.05,
                                   rtol=1e-5, atol=1e-6)
