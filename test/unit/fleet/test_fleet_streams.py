"""The fleet's random streams: a drone's batches, compressor and top-up draws, a ground
client's batches, the station's strategy seed, each its own stream of (world.seed, round,
purpose, id), none the world's [world.seed, attempt]."""

from __future__ import annotations

import numpy as np

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


def test_the_stations_feddpq_draws_are_not_the_worlds_land_cover_draws():
    # Arrange: the land-cover map is drawn from [world.seed, attempt], attempt 0 first
    world = _state(np.random.default_rng([7, 0]))
    # Act
    _, station = agent_and_station({**FLAT, 'world.seed': 7, 'aggregation.strategy': 'feddpq'})
    # Assert: FedDPQ's drone selection has its own stream
    assert _state(station._strategy.rng) != world


ROUND_ONE = {'num_drones': 2, 'world.seed': 7, 'learning.model': 'tiny_cnn',
             'learning.min_samples_to_train': 4, 'learning.client_algorithm': 'feddpq',
             'compression.method': 'range', 'aggregation.strategy': 'feddpq',
             'aggregation.num_selected': 4, 'learning.optimizer': 'sgd',
             'learning.momentum': 0.0}


def _key(rng: np.random.Generator) -> tuple[int, int]:
    """A new generator's whole PCG64 state: equal exactly when two generators are one stream."""
    state = rng.bit_generator.state['state']
    return int(state['state']), int(state['inc'])


def _round_one_generators(monkeypatch) -> list[tuple[str, tuple[int, int]]]:
    """(call site, stream) of every numpy generator fl_uav makes while a two-drone FedDPQ fleet
    (top-up knob given) builds its station, opens round 1 and trains it on both drones."""
    import os
    import sys
    from dataclasses import replace

    from fl_uav.configschema import build_config
    from fl_uav.fleet.config import FleetConfig
    from fl_uav.fleet.drone_agent import DroneAgent
    from fl_uav.fleet.ground_station import GroundStation
    from fl_uav.fleet.messages import PoseSample
    from fl_uav.fleet.world_setup import map_labeler
    from fl_uav.planning.feddpq_opt import TOPUP_KNOB
    from test.unit.fleet._fleet_pair import eval_set

    config = build_config(FleetConfig, ROUND_ONE)
    frames, agents = np.random.default_rng(3), []
    for drone in range(config.num_drones):       # built before the spy: the world is cached
        agent = DroneAgent(config, drone, map_labeler(config.world, config.camera))
        for k in range(10):
            agent.on_pose(PoseSample(200.0 + 10 * k, 400.0 + 50 * drone, 30.0, 0.0,
                                     stamp_s=float(k)))
            agent.on_camera_frame(frames.integers(0, 255, (64, 64, 3), np.uint8),
                                  stamp_s=float(k))
        agents.append(agent)
    inputs, labels = eval_set()
    made, real = [], np.random.default_rng
    package = f'{os.sep}fl_uav{os.sep}'

    def spy(seed=None):
        rng, caller = real(seed), sys._getframe(1)
        if package in caller.f_code.co_filename:
            made.append((f'{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}',
                         _key(rng)))
        return rng

    monkeypatch.setattr(np.random, 'default_rng', spy)
    station = GroundStation(config, inputs, labels)
    frame = station.open_round(0.0).frame
    for agent in agents:
        task = agent.accept_global_frame(frame)
        agent.train_round(replace(task, knobs={**task.knobs, TOPUP_KNOB: 0.5}))
    return made


def test_every_stream_of_a_fleets_first_round_is_its_own_and_not_the_worlds(monkeypatch):
    # Arrange: the land-cover map's streams, [world.seed, attempt] for every attempt
    from fl_uav.world.landcover import _MAX_ATTEMPTS
    world = {_key(np.random.default_rng([7, attempt])) for attempt in range(_MAX_ATTEMPTS)}
    # Act
    made = sorted(set(_round_one_generators(monkeypatch)))
    # Assert: FedDPQ's selection, and per drone its coverage box, top-up, batches (FedDPQ's
    # pruned SGD) and compressor; no stream made at two call sites, none the world's
    sites = {}
    for site, key in made:
        sites.setdefault(key, []).append(site)
    assert len(made) == 9, made
    assert {site.split(':')[0] for site, _ in made} >= {'feddpq.py', 'coverage.py',
                                                       'pruning.py'}
    assert [s for s in sites.values() if len(s) > 1] == []
    assert [site for site, key in made if key in world] == []


def test_a_drones_topup_draws_are_its_fleet_topup_stream(monkeypatch):
    # Arrange
    import fl_uav.fleet.drone_agent as module
    from fl_uav.streams import Stream, stream_rng
    seen, top_up = [], module.top_up

    def spy_top_up(images, labels, num_classes, factor, generator, rng):
        seen.append(_key(rng))
        return top_up(images, labels, num_classes, factor, generator, rng)

    monkeypatch.setattr(module, 'top_up', spy_top_up)
    # Act
    _round_one_generators(monkeypatch)
    # Assert: drone d's round-1 top-up is stream (world.seed, 1, FLEET_TOPUP, d)
    assert seen == [_key(stream_rng(7, 1, Stream.FLEET_TOPUP, d)) for d in (0, 1)]
