"""Labelled image sets of the synthetic world and the model's input transform.

Poses are float64 arrays of shape (N, 4) with the columns of :data:`POSE_COLUMNS`:
``east_m, north_m, altitude_m, yaw_rad`` (local ENU, yaw per REP-103).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import cv2
import numpy as np

from fl_uav.world.camera import AerialRenderer, CameraConfig
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import UNKNOWN, LandCoverMap

POSE_COLUMNS = ('east_m', 'north_m', 'altitude_m', 'yaw_rad')
"""Column order of a pose array."""

Box = tuple[float, float, float, float]
"""An axis-aligned box in local ENU metres: (east_min, north_min, east_max, north_max)."""

HELDOUT_MARGIN_M = 10.0
"""The held-out set keeps its poses this far inside the world edge (the fleet's geofence)."""

HELDOUT_ALTITUDE_RANGE_M = (20.0, 40.0)
"""Altitude band of the held-out poses."""

MODEL_INPUT_MEAN = np.array([0.39, 0.41, 0.29], np.float32)
"""Per-channel (R, G, B) mean of rendered frames scaled to [0, 1], used by to_model_input."""

MODEL_INPUT_STD = np.array([0.19, 0.17, 0.145], np.float32)
"""Per-channel (R, G, B) standard deviation of rendered frames scaled to [0, 1]."""


def sample_poses(world: LandCoverMap, n: int, rng: np.random.Generator,
                 altitude_range_m: tuple[float, float] = (20.0, 40.0),
                 region: Box | None = None) -> np.ndarray:
    """Uniform random poses over the world or over ``region`` (float64 N×4, see POSE_COLUMNS).

    Positions are uniform in the box (clipped to the world), altitude uniform in
    ``altitude_range_m``, yaw uniform in [-pi, pi).
    """
    if n < 0:
        raise ValueError(f'n must be >= 0, got {n}')
    low_alt, high_alt = altitude_range_m
    if not (0.0 < low_alt <= high_alt):
        raise ValueError(f'altitude_range_m must satisfy 0 < low <= high, got {altitude_range_m}')
    size_m = world.size_m
    east_min, north_min, east_max, north_max = (0.0, 0.0, size_m, size_m) if region is None \
        else region
    east_min, north_min = max(0.0, east_min), max(0.0, north_min)
    east_max, north_max = min(size_m, east_max), min(size_m, north_max)
    if not (east_min < east_max and north_min < north_max):
        raise ValueError(f'region {region} does not overlap the world [0, {size_m:g}]²')
    poses = np.empty((n, 4), np.float64)
    poses[:, 0] = rng.uniform(east_min, east_max, n)
    poses[:, 1] = rng.uniform(north_min, north_max, n)
    poses[:, 2] = rng.uniform(low_alt, high_alt, n)
    poses[:, 3] = rng.uniform(-np.pi, np.pi, n)
    return poses


def render_dataset(world: LandCoverMap, renderer: AerialRenderer, labeler: MapLabeler,
                   poses: np.ndarray | Iterable[Iterable[float]],
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Render and label every pose: (images uint8 N×H×W×3 RGB, labels int64 N).

    ``renderer`` and ``labeler`` must both be built over ``world``. A frame over unknown land
    cover is labelled :data:`~fl_uav.world.landcover.UNKNOWN` (:func:`without_unknown`).
    """
    if renderer.world != world or labeler.world != world:
        raise ValueError('renderer and labeler must be built over the given world')
    pose_array = np.asarray(poses, np.float64).reshape(-1, 4)
    size = renderer.camera.image_px
    images = np.empty((len(pose_array), size, size, 3), np.uint8)
    labels = np.empty(len(pose_array), np.int64)
    for i, (east_m, north_m, altitude_m, yaw_rad) in enumerate(pose_array.tolist()):
        images[i] = renderer.render(east_m, north_m, altitude_m, yaw_rad, rng)
        labels[i] = labeler.label(east_m, north_m, altitude_m, yaw_rad)
    return images, labels


def without_unknown(images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The frames and labels less those over unknown land cover (label UNKNOWN)."""
    known = np.asarray(labels) != UNKNOWN
    return images[known], labels[known]


def heldout_set(world: LandCoverMap, camera: CameraConfig, n: int = 1000,
                seed: int = 12345) -> tuple[np.ndarray, np.ndarray]:
    """The fixed held-out test set of a world: (images uint8 N×H×W×3, labels int64 N).

    Deterministic for (world, camera, n, seed); poses are uniform over the world less
    :data:`HELDOUT_MARGIN_M`, in the :data:`HELDOUT_ALTITUDE_RANGE_M` band; frames over unknown
    land cover are left out (then N < n). Cached per process; the returned arrays are
    read-only.
    """
    return _heldout_cached(world, camera, int(n), int(seed))


@functools.lru_cache(maxsize=4)
def _heldout_cached(world: LandCoverMap, camera: CameraConfig, n: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    margin = HELDOUT_MARGIN_M
    region = (margin, margin, world.size_m - margin, world.size_m - margin)
    poses = sample_poses(world, n, rng, HELDOUT_ALTITUDE_RANGE_M, region)
    renderer = AerialRenderer(world, camera, seed=seed)
    labeler = MapLabeler(world, camera.fov_deg)
    images, labels = without_unknown(*render_dataset(world, renderer, labeler, poses, rng))
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def to_model_input(images: np.ndarray, input_px: int = 32) -> np.ndarray:
    """uint8 N×H×W×3 RGB frames → float32 N×3×input_px×input_px model input.

    Frames are area-resized to ``input_px`` (skipped if already that size), scaled to [0, 1]
    and normalised with :data:`MODEL_INPUT_MEAN` and :data:`MODEL_INPUT_STD`.
    """
    if images.ndim != 4 or images.shape[3] != 3:
        raise ValueError(f'images must be N×H×W×3, got shape {images.shape}')
    if input_px < 1:
        raise ValueError(f'input_px must be >= 1, got {input_px}')
    count, height, width, _ = images.shape
    if (height, width) == (input_px, input_px):
        small = images
    else:
        small = np.empty((count, input_px, input_px, 3), images.dtype)
        for i in range(count):
            small[i] = cv2.resize(images[i], (input_px, input_px), interpolation=cv2.INTER_AREA)
    scaled = small.astype(np.float32) * np.float32(1.0 / 255.0)
    scaled -= MODEL_INPUT_MEAN
    scaled /= MODEL_INPUT_STD
    return np.ascontiguousarray(scaled.transpose(0, 3, 1, 2))
