"""The engine's random streams: one per (seed, round, purpose, drone), never shared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_uav.configschema import build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine

REPO = Path(__file__).resolve().parents[3]
QUICK = REPO / 'config' / 'experiments' / 'quick_digits.yaml'


def _state(rng: np.random.Generator) -> int:
    """The bit generator's position: two generators on one stream have equal states."""
    return int(rng.bit_generator.state['state']['state'])


def test_every_drones_batch_and_compressor_streams_of_a_round_are_distinct(tmp_path):
    # Arrange: 100 drones (drone k + 10's batch seed was drone k's compressor seed: tags
    # 10 + k and 20 + k), QSGD so that every drone's upload draws from its generator
    flat = read_params_file(QUICK)
    flat.update({'num_drones': 100, 'num_rounds': 1, 'data.partition': 'iid',
                 'learning.local_epochs': 1, 'compression.method': 'qsgd'})
    engine = ExperimentEngine(build_config(ExperimentConfig, flat), tmp_path)
    streams: dict[tuple[str, int], int] = {}
    train, compress = engine._train_clients, engine.compressor.compress

    def spy_train(r, active, client_data, seeds, config, knobs):
        streams.update({('batches', k): _state(np.random.default_rng(seed))
                        for k, seed in zip(active, seeds)})
        return train(r, active, client_data, seeds, config, knobs)

    def spy_compress(delta, rng, **kwargs):
        streams['compressor', kwargs['sender']] = _state(rng)
        return compress(delta, rng, **kwargs)

    engine._train_clients = spy_train
    engine.compressor.compress = spy_compress
    # Act
    engine.run_round()
    # Assert: 100 batch streams and 100 compressor streams, no two alike
    assert len(streams) == 200
    assert len(set(streams.values())) == 200


def test_the_split_test_subset_partition_and_strategy_draw_from_four_streams(monkeypatch):
    from fl_uav.engine.data import load_experiment_data, partition_data

    # Arrange: every generator made while the data are split, subsampled and partitioned
    flat = read_params_file(QUICK)
    flat.update({'data.max_test_samples': 100, 'aggregation.strategy': 'feddpq'})
    config = build_config(ExperimentConfig, flat)
    made, default_rng = [], np.random.default_rng

    def spy(*args, **kwargs):
        rng = default_rng(*args, **kwargs)
        made.append(_state(rng))
        return rng

    monkeypatch.setattr(np.random, 'default_rng', spy)
    # Act
    partition_data(config, load_experiment_data(config))
    config.aggregation.build(config.num_drones, seed=config.seed)   # FedDPQ's selection draws
    # Assert: one generator each, each on its own stream
    assert len(made) == 4
    assert len(set(made)) == 4


class _Stop(Exception):
    """Ends _world_data once the poses are drawn (the rendering itself is not needed)."""


def test_the_world_frames_and_the_strategys_draws_are_two_streams(monkeypatch):
    import fl_uav.fleet.world_setup
    import fl_uav.world.dataset
    from fl_uav.engine.data import load_experiment_data

    # Arrange: the world stubbed; the stream the poses (and frames) are drawn from recorded
    flat = read_params_file(REPO / 'config' / 'experiments' / 'world_location.yaml')
    flat.update({'aggregation.strategy': 'feddpq'})
    config = build_config(ExperimentConfig, flat)
    streams = {'strategy': _state(config.aggregation.build(config.num_drones,
                                                           seed=config.seed).rng)}

    def sample_poses(world, count, rng):
        streams['poses'] = _state(rng)
        raise _Stop

    monkeypatch.setattr(fl_uav.fleet.world_setup, 'world_map', lambda world: None)
    monkeypatch.setattr(fl_uav.world.dataset, 'sample_poses', sample_poses)
    # Act
    with pytest.raises(_Stop):
        load_experiment_data(config)
    # Assert: FedDPQ's selection draws are not the frames' draws
    assert streams['poses'] != streams['strategy']
