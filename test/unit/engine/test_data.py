"""The engine's image folder: its own test/, one folder per drone (data.partition folders),
the random split of a plain folder, and the clear errors at start (fl_uav/engine/data.py)."""

from __future__ import annotations

import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from fl_uav.cli import main as cli_main
from fl_uav.configschema import ConfigError, build_config
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.data import drone_folders, load_experiment_data, partition_data
from fl_uav.learning import partition
from fl_uav.learning.datasets import load_image_folder, train_test_split_stratified
from fl_uav.streams import Stream, stream_seed

RED, GREEN, BLUE = (0, 0, 200), (0, 180, 0), (200, 0, 0)   # BGR on disk
SITES = {   # site -> class -> images; site_b holds no blue (a site may lack a class)
    'site_a': {'red': 3, 'green': 1, 'blue': 1},
    'site_b': {'green': 2},
    'site_c': {'red': 1, 'blue': 2},
}
COLOURS = {'red': RED, 'green': GREEN, 'blue': BLUE}
EXAMPLE = (Path(__file__).resolve().parents[3] / 'examples' / 'image_folder'
           / 'digits_sites.yaml')


def write_png(path: Path, bgr: tuple[int, int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full((6, 6, 3), bgr, np.uint8))


def write_sites(root: Path, train: str = 'clients') -> Path:
    """SITES under root/clients/ (train='train': all of them pooled in root/train/), and a
    test/ with two images of each class."""
    for site, classes in SITES.items():
        for name, count in classes.items():
            for i in range(count):
                folder = f'clients/{site}' if train == 'clients' else 'train'
                write_png(root / folder / name / f'{site}_{i}.png', COLOURS[name])
    for name, colour in COLOURS.items():
        for i in range(2):
            write_png(root / 'test' / name / f't{i}.png', colour)
    return root


def config(root: Path, **overrides) -> ExperimentConfig:
    return build_config(ExperimentConfig, {
        'data.dataset': 'image_folder', 'data.path': str(root), 'data.partition': 'folders',
        'num_drones': 3, 'learning.input_px': 16, **overrides})


def test_partition_folders_gives_each_drone_its_folder_and_the_summary_says_so(tmp_path):
    # Arrange
    run = config(write_sites(tmp_path))
    # Act
    data = load_experiment_data(run)
    parts = partition_data(run, data)
    report = drone_folders(run, data, parts)['drone_folders']
    # Assert: drone k holds exactly folder k (name order); classes in one order everywhere
    assert data.class_names == ('blue', 'green', 'red') and data.folder_names == tuple(SITES)
    assert [len(p) for p in parts] == [5, 2, 3]
    assert [r['folder'] for r in report] == ['clients/site_a', 'clients/site_b',
                                             'clients/site_c']
    for row, classes in zip(report, SITES.values()):
        assert row['samples'] == sum(classes.values())
        assert row['class_counts'] == {name: classes.get(name, 0)
                                       for name in ('blue', 'green', 'red')}
    red = data.class_names.index('red')   # what a drone trains on is its folder's pixels
    assert np.allclose(data.train_x[parts[0]][data.train_y[parts[0]] == red][:, 0], 200 / 255)
    assert len(data.test_y) == 6 and np.bincount(data.test_y).tolist() == [2, 2, 2]
    assert 'its own test/ (6 images, data.test_fraction unused)' in data.note
    assert 'drone k trains on clients/ folder k of 3' in data.note


def test_other_partitions_pool_the_client_folders(tmp_path):
    # Arrange
    run = config(write_sites(tmp_path), **{'data.partition': 'iid'})
    # Act
    data = load_experiment_data(run)
    parts = partition_data(run, data)
    # Assert: the 10 training images, dealt as partition.iid deals them; no folder report
    assert len(data.train_y) == 10
    expected = partition.iid(data.train_y, 3, stream_seed(0, 0, Stream.PARTITION))
    assert all(np.array_equal(a, b) for a, b in zip(parts, expected, strict=True))
    assert drone_folders(run, data, parts) == {}
    assert 'the 3 folders of clients/ pooled (10 images) and split iid' in data.note


def test_a_given_train_and_test_are_used_as_they_are(tmp_path):
    run = config(write_sites(tmp_path, train='train'), **{'data.partition': 'iid'})
    data = load_experiment_data(run)
    assert len(data.train_y) == 10 and len(data.test_y) == 6 and data.train_folders is None
    assert 'and train/ (10 images)' in data.note


def test_a_folder_of_classes_keeps_its_random_split(tmp_path):
    # Arrange: 10 images of 3 classes, no train/ or test/
    for i in range(10):
        write_png(tmp_path / ('red', 'green', 'blue')[i % 3] / f'{i}.png', RED)
    run = config(tmp_path, **{'data.partition': 'iid', 'data.test_fraction': 0.3})
    # Act
    data = load_experiment_data(run)
    # Assert: the stratified split of the whole folder, as before test/ was read
    _, test = train_test_split_stratified(load_image_folder(tmp_path, image_px=16), 0.3,
                                          stream_seed(0, 0, Stream.SPLIT))
    assert np.array_equal(data.test_y, test.labels) and len(data.train_y) == 7
    assert 'no test/ of its own: 0.3 of its 10 images drawn at random' in data.note


@pytest.mark.parametrize(('train', 'overrides', 'message'), [
    ('clients', {'num_drones': 4},
     'holds 3 (site_a, site_b, site_c): set num_drones = 3 (got 4)'),
    ('clients', {'data.test_fraction': 0.3}, 'data.test_fraction = 0.3 has no effect'),
    ('train', {}, 'data.partition folders needs'),
    ('classes', {}, 'holds class folders only'),
])
def test_a_layout_the_config_cannot_use_is_named_before_any_image_is_read(
        tmp_path, train, overrides, message):
    # Arrange: a corrupt image too, which would stop the reading with another message
    if train == 'classes':
        write_png(tmp_path / 'red' / 'a.png', RED)
    else:
        write_sites(tmp_path, train)
    red = tmp_path / ('red' if train == 'classes' else 'test/red')
    (red / 'corrupt.png').write_bytes(b'not a png')
    # Act / Assert
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        load_experiment_data(config(tmp_path, **overrides))
    assert str(tmp_path) in str(info.value)


def test_partition_folders_needs_an_image_folder_and_keeps_express_on_its_folders():
    with pytest.raises(ConfigError, match='partition folders needs dataset image_folder'):
        build_config(ExperimentConfig, {'data.partition': 'folders'})
    with pytest.raises(ConfigError, match='express.partition location replaces data.partition '
                                          'folders'):
        build_config(ExperimentConfig, {
            'data.dataset': 'image_folder', 'data.path': '/x', 'data.partition': 'folders',
            'express.enabled': True, 'express.partition': 'location', 'express.num_uavs': 1,
            'aggregation.strategy': 'fedex_sync', 'num_drones': 2})


def test_cli_names_a_class_missing_from_test_without_a_traceback(tmp_path, capsys):
    # Arrange: site_c holds blue, test/ has no blue
    root = write_sites(tmp_path / 'data')
    for image in (root / 'test' / 'blue').iterdir():
        image.unlink()
    (root / 'test' / 'blue').rmdir()
    # Act
    code = cli_main(['experiment', str(EXAMPLE), '--set', f'data.path={root}', '--set',
                     'num_drones=3', '--out', str(tmp_path / 'run')])
    # Assert
    err = capsys.readouterr().err
    assert code == 1
    assert (f"cannot set up the run: {root / 'clients' / 'site_a' / 'blue'}: class 'blue' has "
            f'no test images') in err
    assert 'Traceback' not in err and not (tmp_path / 'run').exists()
