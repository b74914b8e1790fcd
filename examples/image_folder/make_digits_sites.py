"""Write scikit-learn's digits (they ship with it: nothing is downloaded) as an image folder
with a test set of its own and one folder per drone, for ``fl-uav experiment``:

    .venv/bin/python examples/image_folder/make_digits_sites.py runs/digits_sites
    .venv/bin/fl-uav experiment examples/image_folder/digits_sites.yaml --out runs/sites

OUT/test/<digit>/*.png                  a fifth of each digit, shared by every drone
OUT/clients/site_{a,b,c,d}/<digit>/*.png   the rest, one folder per drone: digit d mostly
                                        (70 %) at site d mod 4, 10 % at each other site

``--pooled`` writes the rest to OUT/train/<digit>/ instead (a given train/test split, no
drone folders). The images are the 8×8 grayscale digits as PNG; the engine enlarges them to
learning.input_px. The same seed writes the same folder.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np

from fl_uav.learning.datasets import load_digits

SITES = ('site_a', 'site_b', 'site_c', 'site_d')
TEST_FRACTION = 0.2
HOME_SHARE = 0.7
"""Share of a digit's training images at its home site; the rest is spread evenly."""


def site_of(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each training image's site: digit d's home site d mod 4 with HOME_SHARE, else another."""
    away = (1.0 - HOME_SHARE) / (len(SITES) - 1)
    sites = np.empty(len(labels), np.int64)
    for i, label in enumerate(labels):
        share = np.full(len(SITES), away)
        share[label % len(SITES)] = HOME_SHARE
        sites[i] = rng.choice(len(SITES), p=share)
    return sites


def write_folder(out: Path, pooled: bool = False, seed: int = 0) -> dict[str, int]:
    """Write the folder (replacing ``out``); returns the images written per top folder."""
    digits = load_digits()
    rng = np.random.default_rng(seed)
    is_test = np.zeros(len(digits), bool)
    for label in range(digits.num_classes):
        members = rng.permutation(np.flatnonzero(digits.labels == label))
        is_test[members[:round(TEST_FRACTION * len(members))]] = True
    train = np.flatnonzero(~is_test)
    sites = site_of(digits.labels[train], rng)
    if out.exists():
        shutil.rmtree(out)
    counts: dict[str, int] = {}
    places = [(i, 'test') for i in np.flatnonzero(is_test)]
    places += [(i, 'train' if pooled else f'clients/{SITES[s]}') for i, s in zip(train, sites)]
    for index, folder in places:
        path = out / folder / digits.class_names[digits.labels[index]] / f'{index:04d}.png'
        path.parent.mkdir(parents=True, exist_ok=True)
        if not cv2.imwrite(str(path), digits.images[index, 0]):
            raise OSError(f'{path}: cannot write')
        counts[folder] = counts.get(folder, 0) + 1
    return dict(sorted(counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out', type=Path, help='folder to write (replaced if it exists)')
    parser.add_argument('--pooled', action='store_true',
                        help='train/<digit>/ instead of clients/site_*/<digit>/')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    for folder, count in write_folder(args.out, args.pooled, args.seed).items():
        print(f'{args.out / folder}: {count} images')
    return 0


if __name__ == '__main__':
    sys.exit(main())
