"""Procedural noise and geometry helpers for the synthetic world (numpy + OpenCV only).

All fields are float32 arrays in raster order (row = north cells, column = east cells), the same
convention as :class:`fl_uav.world.landcover.LandCoverMap`.
"""

from __future__ import annotations

import math

import cv2
import numpy as np


def value_noise(shape: tuple[int, int], cell_px: float, rng: np.random.Generator) -> np.ndarray:
    """Smooth value noise: a random lattice every ``cell_px`` cells, cubic-upsampled.

    Returns a float32 field of ``shape`` standardised to zero mean and unit standard deviation.
    """
    rows, cols = shape
    lattice_rows = max(2, math.ceil(rows / cell_px) + 1)
    lattice_cols = max(2, math.ceil(cols / cell_px) + 1)
    lattice = rng.standard_normal((lattice_rows, lattice_cols)).astype(np.float32)
    field = cv2.resize(lattice, (cols, rows), interpolation=cv2.INTER_CUBIC)
    return _standardise(field)


def fractal_noise(shape: tuple[int, int], cell_px: float, rng: np.random.Generator,
                  octaves: int = 3, persistence: float = 0.5) -> np.ndarray:
    """Sum of ``octaves`` value-noise layers, each at half the cell size of the previous one.

    Returns a standardised float32 field (zero mean, unit standard deviation).
    """
    total = np.zeros(shape, np.float32)
    amplitude = 1.0
    for octave in range(octaves):
        cell = max(1.0, cell_px / (2 ** octave))
        total += np.float32(amplitude) * value_noise(shape, cell, rng)
        amplitude *= persistence
    return _standardise(total)


def blob_field(shape: tuple[int, int], spacing_px: float, sigma_px: float,
               rng: np.random.Generator) -> np.ndarray:
    """Round blobs (tree crowns, bushes): random impulses about ``spacing_px`` apart, blurred.

    Returns a float32 field in [0, 1], 1 at the strongest blob centres.
    """
    rows, cols = shape
    count = max(1, int(rows * cols / (spacing_px * spacing_px)))
    impulses = np.zeros(shape, np.float32)
    flat = rng.integers(0, rows * cols, count)
    impulses.reshape(-1)[flat] = rng.uniform(0.5, 1.0, count).astype(np.float32)
    blobs = cv2.GaussianBlur(impulses, (0, 0), sigma_px)
    peak = float(blobs.max())
    if peak > 0:
        blobs *= np.float32(1.0 / peak)
    return blobs


def smooth_polyline(points: np.ndarray, iterations: int = 3) -> np.ndarray:
    """Chaikin corner cutting of an open polyline (K×2 float array); endpoints are kept."""
    result = np.asarray(points, np.float64)
    for _ in range(iterations):
        if len(result) < 3:
            break
        first, last = result[:1], result[-1:]
        q = 0.75 * result[:-1] + 0.25 * result[1:]
        r = 0.25 * result[:-1] + 0.75 * result[1:]
        middle = np.empty((2 * len(q), 2))
        middle[0::2] = q
        middle[1::2] = r
        result = np.concatenate([first, middle[1:-1], last])
    return result


def meander(start: np.ndarray, end: np.ndarray, step_m: float, wiggle_m: float,
            rng: np.random.Generator) -> np.ndarray:
    """A smooth random path from ``start`` to ``end`` (metres), jittered sideways.

    Control points every ``step_m`` get a lateral offset with standard deviation ``wiggle_m``
    (a correlated random walk, so the path bends gently); returns a K×2 array in metres.
    """
    start = np.asarray(start, np.float64)
    end = np.asarray(end, np.float64)
    length = float(np.hypot(*(end - start)))
    count = max(2, int(length / step_m) + 1)
    t = np.linspace(0.0, 1.0, count)
    direction = (end - start) / max(length, 1e-9)
    normal = np.array([-direction[1], direction[0]])
    walk = np.cumsum(rng.normal(0.0, wiggle_m, count))
    walk -= np.linspace(walk[0], walk[-1], count)  # pinned at both ends
    points = start[None, :] + t[:, None] * (end - start)[None, :] + walk[:, None] * normal
    return smooth_polyline(points, iterations=3)


def _standardise(field: np.ndarray) -> np.ndarray:
    field -= np.float32(field.mean())
    std = float(field.std())
    if std > 1e-12:
        field *= np.float32(1.0 / std)
    return field
