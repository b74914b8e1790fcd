"""The engine's dataset: the configured data set loaded and split into train and test
(no downloads: packages and files only), and each drone's share of the training set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_uav.engine.config import DataConfig, ExperimentConfig
from fl_uav.learning import partition
from fl_uav.learning.datasets import (
    Dataset,
    ImageFolderLayout,
    load_digits,
    load_fashion_mnist,
    scan_image_folder,
    train_test_split_stratified,
)
from fl_uav.streams import Stream, stream_rng, stream_seed


@dataclass(frozen=True)
class TrainTestData:
    """Float32 N×C×H×W inputs in [0, 1] and int64 labels, split into train and test.

    train_folders: each training sample's client folder (an index into folder_names), for
    partition folders; None when the data came unsplit. class_names: one per class, or ()
    when unnamed. note: how the data was split, for the run's log ('' = nothing to say).
    """

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    train_positions_m: np.ndarray | None = None
    train_folders: np.ndarray | None = None
    folder_names: tuple[str, ...] = ()
    class_names: tuple[str, ...] = ()
    note: str = ''


def _as_inputs(dataset: Dataset) -> np.ndarray:
    return np.ascontiguousarray(dataset.as_float32(), np.float32)


def load_experiment_data(config: ExperimentConfig) -> TrainTestData:
    """Load and split the configured dataset (no downloads: packages and files only)."""
    data = config.data
    folders, folder_names, note = None, (), ''
    if data.dataset == 'fashion_mnist':
        kwargs = {'root': data.path} if data.path else {}
        train, test = (load_fashion_mnist(split='train', **kwargs),
                       load_fashion_mnist(split='test', **kwargs))
    elif data.dataset == 'world':
        return _world_data(config)
    elif data.dataset == 'image_folder':
        layout = scan_image_folder(data.path)
        note = check_image_folder(config, layout)   # before reading any image
        px = config.learning.input_px
        if layout.layout == 'classes':
            train, test = train_test_split_stratified(
                layout.load('train', px), data.test_fraction,
                stream_seed(config.seed, 0, Stream.SPLIT))
        else:
            train, test = layout.load('train', px), layout.load('test', px)
        folders, folder_names = layout.train_folders, layout.folder_names
    else:
        train, test = train_test_split_stratified(load_digits(), data.test_fraction,
                                                  stream_seed(config.seed, 0, Stream.SPLIT))
    test_x, test_y = _as_inputs(test), test.labels
    if data.max_test_samples and len(test_y) > data.max_test_samples:
        keep = stream_rng(config.seed, 0, Stream.TEST_SUBSET).permutation(len(test_y))
        keep = np.sort(keep[:data.max_test_samples])
        test_x, test_y = test_x[keep], test_y[keep]
    return TrainTestData(_as_inputs(train), train.labels, test_x, test_y, train.num_classes,
                         train_folders=folders, folder_names=folder_names,
                         class_names=train.class_names, note=note)


def check_image_folder(config: ExperimentConfig, layout: ImageFolderLayout) -> str:
    """ValueError naming the key when the folder's layout and the config disagree (partition
    folders without clients/ or with another number of drones; a test_fraction set beside a
    test/ of the folder's own); else the line that tells the log how the data is split."""
    data, root = config.data, layout.root
    train_n, test_n = len(layout.train_files), len(layout.test_files)
    if layout.layout == 'classes':
        if data.partition == 'folders':
            raise ValueError(f'data.partition folders needs {root}/clients/<folder>/<class>/ '
                             f'and {root}/test/<class>/; {root} holds class folders only')
        return (f'{root}: no test/ of its own: {data.test_fraction:g} of its {train_n} images '
                f'drawn at random as the test set (overstates accuracy on neighbouring patches '
                f'of one survey: give test/ its own area, docs/cli.md)')
    if data.test_fraction != DataConfig.test_fraction:   # the default: cannot tell it set
        raise ValueError(f'data.test_fraction = {data.test_fraction!r} has no effect: {root} '
                         f'has its own test/ ({test_n} images); leave data.test_fraction out')
    given = f'{root}: its own test/ ({test_n} images, data.test_fraction unused)'
    if layout.layout == 'train_test':
        if data.partition == 'folders':
            raise ValueError(f'data.partition folders needs {root}/clients/<folder>/<class>/ '
                             f'(one folder per drone); {root} has train/ instead')
        return f'{given} and train/ ({train_n} images)'
    names = layout.folder_names
    if data.partition != 'folders':
        return (f'{given}; the {len(names)} folders of clients/ pooled ({train_n} images) '
                f'and split {data.partition} over {config.num_drones} drones')
    if len(names) != config.num_drones:
        shown = ', '.join(names[:8]) + (', ...' if len(names) > 8 else '')
        raise ValueError(f'data.partition folders gives each drone one folder of '
                         f'{root}/clients, which holds {len(names)} ({shown}): set num_drones '
                         f'= {len(names)} (got {config.num_drones})')
    return f'{given}; drone k trains on clients/ folder k of {len(names)} (name order)'


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
    if d.partition == 'folders':
        if data.train_folders is None:
            raise ValueError('data.partition folders needs data split into client folders')
        return partition.by_folder(data.train_folders, k)
    return partition.by_location(data.train_positions_m, k, seed)


def drone_folders(config: ExperimentConfig, data: TrainTestData,
                  parts: list[np.ndarray]) -> dict[str, Any]:
    """For partition folders, summary.json's ``drone_folders``: each drone's folder, sample
    count and samples per class; {} for other partitions."""
    if config.data.partition != 'folders':
        return {}
    names = data.class_names or tuple(str(c) for c in range(data.num_classes))
    rows = []
    for k, part in enumerate(parts):
        counts = np.bincount(data.train_y[part], minlength=data.num_classes)
        folder = data.folder_names[int(data.train_folders[part[0]])] if len(part) else ''
        rows.append({'drone': k, 'folder': f'clients/{folder}', 'samples': len(part),
                     'class_counts': {n: int(c) for n, c in zip(names, counts)}})
    return {'drone_folders': rows}
