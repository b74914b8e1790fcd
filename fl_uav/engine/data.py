"""The engine's dataset: the configured data set loaded and split into train and test
(no downloads: packages and files only), and each drone's share of the training set."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fl_uav.engine.config import ExperimentConfig
from fl_uav.learning import partition
from fl_uav.learning.datasets import (
    Dataset,
    load_digits,
    load_fashion_mnist,
    load_image_folder,
    train_test_split_stratified,
)
from fl_uav.streams import Stream, stream_rng, stream_seed


@dataclass(frozen=True)
class TrainTestData:
    """Float32 N×C×H×W inputs in [0, 1] and int64 labels, split into train and test."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    train_positions_m: np.ndarray | None = None


def _as_inputs(dataset: Dataset) -> np.ndarray:
    return np.ascontiguousarray(dataset.as_float32(), np.float32)


def load_experiment_data(config: ExperimentConfig) -> TrainTestData:
    """Load and split the configured dataset (no downloads: packages and files only)."""
    data = config.data
    if data.dataset == 'fashion_mnist':
        kwargs = {'root': data.path} if data.path else {}
        train, test = (load_fashion_mnist(split='train', **kwargs),
                       load_fashion_mnist(split='test', **kwargs))
    elif data.dataset == 'world':
        return _world_data(config)
    else:
        full = (load_digits() if data.dataset == 'digits' else
                load_image_folder(data.path, image_px=config.learning.input_px))
        train, test = train_test_split_stratified(full, data.test_fraction,
                                                  stream_seed(config.seed, 0, Stream.SPLIT))
    test_x, test_y = _as_inputs(test), test.labels
    if data.max_test_samples and len(test_y) > data.max_test_samples:
        keep = stream_rng(config.seed, 0, Stream.TEST_SUBSET).permutation(len(test_y))
        keep = np.sort(keep[:data.max_test_samples])
        test_x, test_y = test_x[keep], test_y[keep]
    return TrainTestData(_as_inputs(train), train.labels, test_x, test_y, train.num_classes)


def _world_data(config: ExperimentConfig) -> TrainTestData:
    from fl_uav.fleet.config import FleetConfig
    from fl_uav.fleet.world_setup import map_labeler, world_map
    from fl_uav.world.camera import AerialRenderer
    from fl_uav.world.dataset import heldout_set, render_dataset, sample_poses, to_model_input
    from fl_uav.world.landcover import CLASS_NAMES

    fleet = FleetConfig()
    world = world_map(fleet.world)
    rng = stream_rng(config.seed, 0, Stream.WORLD_DATA)
    poses = sample_poses(world, config.data.world_samples, rng)
    renderer = AerialRenderer(world, fleet.camera, seed=config.seed)   # its stream unused:
    # render_dataset passes ``rng`` (the poses' stream) to every frame
    images, labels = render_dataset(world, renderer, map_labeler(fleet.world, fleet.camera),
                                    poses, rng)
    test_images, test_labels = heldout_set(world, fleet.camera)
    px = config.learning.input_px
    return TrainTestData(to_model_input(images, px), labels, to_model_input(test_images, px),
                         np.asarray(test_labels), len(CLASS_NAMES), poses[:, :2])


def partition_data(config: ExperimentConfig, data: TrainTestData) -> list[np.ndarray]:
    """Indices of each drone's share of the training set."""
    k, seed, d = config.num_drones, stream_seed(config.seed, 0, Stream.PARTITION), config.data
    if d.partition == 'iid':
        return partition.iid(data.train_y, k, seed)
    if d.partition == 'dirichlet':
        return partition.dirichlet(data.train_y, k, d.dirichlet_alpha, seed,
                                   min_size=min(10, len(data.train_y) // k))
    if d.partition == 'shards':
        return partition.label_shards(data.train_y, k, d.shards_per_client, seed)
    return partition.by_location(data.train_positions_m, k, seed)
