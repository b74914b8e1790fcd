"""The fleet's DroneAgent and the experiment engine agree on what a drone reports and sends."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.compression.codec import decode_frame
from fl_uav.compression.codec_v2 import decode_v2, metadata_section_bytes, range_frame_bytes
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


def _engine(tmp_path, keep: float, vectorized: bool):
    from fl_uav.engine.config import ExperimentConfig
    from fl_uav.engine.data import TrainTestData
    from fl_uav.engine.experiment import ExperimentEngine

    rng = np.random.default_rng(1)   # camera-shaped data: the fleet's tiny_cnn, 7 classes
    data = TrainTestData(rng.random((24, 3, 32, 32), dtype=np.float32),
                         np.arange(24) % 7, rng.random((8, 3, 32, 32), dtype=np.float32),
                         np.arange(8) % 7, 7)
    config = build_config(ExperimentConfig, {
        'num_drones': 1, 'num_rounds': 1, 'data.partition': 'iid',
        'learning.model': 'tiny_cnn', 'learning.structured_keep': keep,
        'learning.min_samples_to_train': 4, 'compression.method': 'range',
        'compression.range_bits': 4, 'system.deadline_s': 0.0,
        'engine.vectorized': vectorized})
    return ExperimentEngine(config, tmp_path, data=data)


@pytest.mark.parametrize('vectorized', [True, False], ids=['vectorized', 'drone_by_drone'])
def test_engine_charges_the_fleets_masked_frame_under_structured_pruning(tmp_path, vectorized):
    # Arrange: the same model, start weights, keep and range quantizer in the fleet and engine
    config = build_config(FleetConfig, {
        'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'learning.structured_keep': 0.5, 'compression.method': 'range',
        'compression.range_bits': 4})
    agent = DroneAgent(config, 0, map_labeler(config.world, config.camera))
    station = GroundStation(config, *_eval_set())
    _fill(agent, 10, seed=3)
    report = agent.train_round(agent.accept_global_frame(station.open_round(0.0).frame))
    frame = decode_v2(report.frame)
    engine = _engine(tmp_path / 'pruned', 0.5, vectorized)
    dense = _engine(tmp_path / 'dense', 1.0, vectorized)
    # Act
    charged = engine.run_round()['uplink_bytes']
    unmasked = dense.run_round()['uplink_bytes']
    # Assert: the fleet's frame is the engine's plus the drone's metadata section (the engine
    # sends none); the filter mask (FedDPQ eq. (9), filter granularity) makes it smaller
    dim = frame.update.dim
    assert engine.weights.keys() == station.weights.keys() and frame.update.mask is not None
    assert charged == len(report.frame) - metadata_section_bytes(frame.metadata)
    assert charged == range_frame_bytes(int(frame.update.mask.sum()), 4, mask=frame.update.mask)
    assert charged < unmasked == range_frame_bytes(dim, 4)
