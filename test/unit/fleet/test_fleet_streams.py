"""The fleet's random streams: a drone's batches and compressor draws, a ground client's
batches, each its own stream of (world.seed, round, purpose, id)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.compression.compressor import QsgdCompressor
from fl_uav.fleet.ground_client import GroundClient
from fl_uav.learning.training import NonFiniteLossError
from fl_uav.learning.weights import get_weights
from test.unit.fleet._fleet_pair import agent_and_station
from test.unit.fleet.test_express_fleet import EXPRESS

FLAT = {'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'compression.method': 'qsgd'}


def _state(rng: np.random.Generator) -> int:
    """The bit generator's position: two generators on one stream have equal states."""
    return int(rng.bit_generator.state['state']['state'])


def _drone_round(world_seed: int, monkeypatch) -> dict[str, int]:
    """Drone 0's round 1 under ``world_seed``: its training seed and compressor stream."""
    agent, station = agent_and_station({**FLAT, 'world.seed': world_seed})
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    seen, train, compress = {}, agent._client.train, QsgdCompressor.compress

    def spy_train(*args, seed, **kwargs):
        seen['batches'] = seed
        return train(*args, seed=seed, **kwargs)

    def spy_compress(self, delta, rng, **kwargs):
        seen['compressor'] = _state(rng)
        return compress(self, delta, rng, **kwargs)

    monkeypatch.setattr(agent._client, 'train', spy_train)
    monkeypatch.setattr(QsgdCompressor, 'compress', spy_compress)
    agent.train_round(task)
    return seen


def test_a_drones_compressor_draws_are_not_its_coverage_box_draws(monkeypatch):
    # Arrange: the station's coverage plan draws from [world.seed, drone, round]
    coverage = _state(np.random.default_rng([7, 0, 1]))
    # Act
    seen = _drone_round(7, monkeypatch)
    # Assert
    assert seen['compressor'] != coverage


def test_a_drones_batches_change_with_the_run_seed(monkeypatch):
    # Act: drone 0, round 1 in two runs that differ only in world.seed
    runs = [_drone_round(seed, monkeypatch)['batches'] for seed in (7, 8)]
    # Assert
    assert runs[0] != runs[1]


def _client_seed(world_seed: int, monkeypatch) -> int:
    """Ground client 0's training seed for base round 1 under ``world_seed``."""
    import fl_uav.fleet.ground_client as module
    from fl_uav.configschema import build_config
    from fl_uav.fleet.config import FleetConfig

    config = build_config(FleetConfig, {**EXPRESS, 'world.seed': world_seed})
    rng = np.random.default_rng(0)
    client = GroundClient(config, 0, rng.random((8, 3, 32, 32), dtype=np.float32),
                          np.arange(8) % 7)
    client._base, client._base_round, client._pending_steps = get_weights(client._model), 1, 1
    seen = []

    def spy_train_local(model, inputs, labels, config, seed, should_stop=None):
        seen.append(seed)
        raise NonFiniteLossError('stopped after the seed is seen')

    monkeypatch.setattr(module, 'train_local', spy_train_local)
    client.train()
    return seen[0]


def test_a_ground_clients_batches_change_with_the_run_seed_and_are_not_a_drones(monkeypatch):
    # Act
    seeds = [_client_seed(seed, monkeypatch) for seed in (7, 8)]
    drone = _drone_round(7, monkeypatch)['batches']
    # Assert: client 0 of base round 1 is not drone 0 of round 1 (both were hash((0, 1)))
    assert seeds[0] != seeds[1]
    assert drone not in seeds


@pytest.mark.xfail(strict=True, reason='known: the station passes world.seed to its '
                   'strategy (the documented plug-in contract), and default_rng(seed) is '
                   "generate_world's first draw default_rng([seed, 0]); fixing it changes "
                   'that contract or the measured figures: left for the owner')
def test_the_stations_feddpq_draws_are_not_the_worlds_land_cover_draws():
    # Arrange: the land-cover map is drawn from [world.seed, attempt], attempt 0 first
    world = _state(np.random.default_rng([7, 0]))
    # Act
    _, station = agent_and_station({**FLAT, 'world.seed': 7, 'aggregation.strategy': 'feddpq'})
    # Assert: FedDPQ's drone selection has its own stream
    assert _state(station._strategy.rng) != world
