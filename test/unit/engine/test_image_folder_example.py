"""examples/image_folder: the digits written as an image folder with its own test/ and one
folder per drone, run by ``fl-uav experiment`` as docs/cli.md shows it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fl_uav.cli import main as cli_main

EXAMPLE = Path(__file__).resolve().parents[3] / 'examples' / 'image_folder'


@pytest.fixture(scope='module')
def make_sites():
    spec = importlib.util.spec_from_file_location('make_digits_sites',
                                                  EXAMPLE / 'make_digits_sites.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def images_per_folder(root: Path) -> dict[str, dict[str, int]]:
    """{folder: {class: PNG files}} as the example wrote them on disk."""
    return {str(folder.relative_to(root)): {c.name: len(list(c.glob('*.png')))
                                           for c in sorted(folder.iterdir())}
            for folder in [root / 'test', *sorted((root / 'clients').iterdir())]}


def test_the_example_runs_each_drone_on_its_site_and_beats_chance(tmp_path, make_sites,
                                                                   capsys):
    # Arrange: the folder, written by the example's command
    root = tmp_path / 'digits_sites'
    assert make_sites.main([str(root)]) == 0
    on_disk = images_per_folder(root)
    # Act: the documented command, 3 rounds instead of 10
    code = cli_main(['experiment', str(EXAMPLE / 'digits_sites.yaml'), '--set',
                     f'data.path={root}', '--set', 'num_rounds=3', '--out',
                     str(tmp_path / 'run')])
    summary = json.loads((tmp_path / 'run' / 'summary.json').read_text())
    # Assert: drone k on site k, with the images on disk; 10 digits, so chance is 0.1
    assert code == 0 and summary['status'] == 'finished'
    assert [r['folder'] for r in summary['drone_folders']] == [
        f'clients/{site}' for site in make_sites.SITES]
    for row in summary['drone_folders']:
        counts = on_disk[row['folder']]
        assert row['class_counts'] == counts and row['samples'] == sum(counts.values())
        home = max(counts, key=counts.get)        # the digit this site sees most
        assert int(home) % 4 == row['drone']
    assert summary['final_accuracy'] > 0.5
    out = capsys.readouterr().out
    assert f'data: {root}: its own test/ ({sum(on_disk["test"].values())} images' in out


def test_the_pooled_example_is_a_given_train_and_test_split(tmp_path, make_sites):
    # Act
    counts = make_sites.write_folder(tmp_path / 'pooled', pooled=True)
    sites = make_sites.write_folder(tmp_path / 'sites')
    # Assert: the same test set, the sites' images pooled in train/; the same seed, the same
    # folder
    assert set(counts) == {'test', 'train'} and counts['test'] == sites['test'] == 359
    assert counts['train'] == sum(n for f, n in sites.items() if f.startswith('clients/'))
    assert make_sites.write_folder(tmp_path / 'again', pooled=True) == counts
    assert sorted(p.name for p in (tmp_path / 'again' / 'test' / '3').iterdir()) == sorted(
        p.name for p in (tmp_path / 'pooled' / 'test' / '3').iterdir())
