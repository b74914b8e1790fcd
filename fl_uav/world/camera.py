"""The downward camera: what a drone at a pose sees of the synthetic world.

Image convention: a nadir camera, image up = the drone's forward direction (body x), image
right = the drone's right side. Yaw follows ROS REP-103 in ENU: 0 = facing east, positive
counter-clockwise (so yaw = pi/2 faces north and the image is north-up).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import cv2
import numpy as np

from fl_uav.world.landcover import LandCoverMap
from fl_uav.world.texture import synthesize_texture

BORDER_RGB = (28, 28, 30)
"""Colour of the ground outside the world (a dark, neutral border)."""

COLOUR_CAST_SPAN = 0.16
"""Per-channel white-balance gain is uniform in 1 ± COLOUR_CAST_SPAN / 2."""

SATURATION_RANGE = (0.75, 1.15)
"""Range of the random colour saturation factor (1 = unchanged)."""

CLOUD_SHADOW_PROBABILITY = 0.3
"""Share of frames crossed by a cloud-shadow edge (darkening 20-55 % on one side)."""


@dataclass(frozen=True)
class CameraConfig:
    """The downward camera and its nuisances.

    image_px: side of the square image; fov_deg: field of view (horizontal = vertical);
    noise_std: Gaussian sensor noise (0..255 units); blur_max_px: upper bound of the random
    Gaussian blur sigma in pixels; illumination_min / illumination_max: range of the random
    brightness gain; min_altitude_m: below this altitude frames are not used for learning.
    """

    image_px: int = 64
    fov_deg: float = 60.0
    noise_std: float = 6.0
    blur_max_px: float = 1.5
    illumination_min: float = 0.7
    illumination_max: float = 1.3
    min_altitude_m: float = 5.0

    def __post_init__(self) -> None:
        if not (8 <= self.image_px <= 1024):
            raise ValueError(f'image_px must be in [8, 1024], got {self.image_px}')
        if not (5.0 <= self.fov_deg <= 150.0):
            raise ValueError(f'fov_deg must be in [5, 150], got {self.fov_deg}')
        if not (0.0 <= self.noise_std <= 64.0):
            raise ValueError(f'noise_std must be in [0, 64], got {self.noise_std}')
        if not (0.0 <= self.blur_max_px <= 10.0):
            raise ValueError(f'blur_max_px must be in [0, 10], got {self.blur_max_px}')
        if not (0.05 <= self.illumination_min <= 4.0):
            raise ValueError(f'illumination_min must be in [0.05, 4], '
                             f'got {self.illumination_min}')
        if not (self.illumination_min <= self.illumination_max <= 4.0):
            raise ValueError(f'illumination_max must be in [illumination_min, 4], '
                             f'got {self.illumination_max}')
        if not (0.5 <= self.min_altitude_m <= 500.0):
            raise ValueError(f'min_altitude_m must be in [0.5, 500], got {self.min_altitude_m}')


def check_pose(east_m: float, north_m: float, altitude_m: float, yaw_rad: float) -> None:
    """Raise ValueError unless the camera pose is finite with a positive altitude (a NaN or
    infinite pose has no footprint: the caller decides what to do with it)."""
    values = {'east_m': east_m, 'north_m': north_m, 'altitude_m': altitude_m,
              'yaw_rad': yaw_rad}
    if not all(math.isfinite(value) for value in values.values()):
        raise ValueError(f'camera pose must be finite, got {values}')
    if not altitude_m > 0:
        raise ValueError(f'altitude_m must be > 0, got {altitude_m}')


def footprint_m(altitude_m: float, fov_deg: float) -> float:
    """Side of the ground square a nadir camera sees: 2 · altitude · tan(fov / 2), in metres."""
    if not (math.isfinite(altitude_m) and altitude_m > 0):
        raise ValueError(f'altitude_m must be finite and > 0, got {altitude_m}')
    if not (0.0 < fov_deg < 180.0):
        raise ValueError(f'fov_deg must be in (0, 180), got {fov_deg}')
    return 2.0 * altitude_m * math.tan(math.radians(fov_deg) / 2.0)


def world_texture(world: LandCoverMap) -> np.ndarray:
    """The world's ground texture (uint8 cells×cells×3 RGB, read-only, cached per map).

    The texture is a deterministic function of the map, so every renderer of one world (the
    drones' cameras and the held-out set) sees the same ground.
    """
    return _cached_texture(world)


@functools.lru_cache(maxsize=2)
def _cached_texture(world: LandCoverMap) -> np.ndarray:
    texture_seed = [world.seed, int(world.digest[:8], 16)]
    texture = synthesize_texture(world, texture_seed)
    texture.setflags(write=False)
    return texture


class AerialRenderer:
    """Renders the downward camera image of a pose over a land-cover map.

    The ground texture is precomputed once per world (see :func:`world_texture`); a frame is one
    ``cv2.warpAffine`` of the footprint (rotation by yaw, scale from altitude) followed by the
    nuisances: brightness gain (``illumination_min..max``), colour cast and saturation, a
    cloud-shadow edge on some frames, Gaussian blur (sigma up to ``blur_max_px``) and Gaussian
    sensor noise (``noise_std``). ``seed`` seeds the renderer's own nuisance stream, used when
    :meth:`render` gets no generator.
    """

    def __init__(self, world: LandCoverMap, camera: CameraConfig, seed: int = 0) -> None:
        self.world = world
        self.camera = camera
        self.texture = world_texture(world)
        self._rng = np.random.default_rng(seed)
        self._half_fov_tan = math.tan(math.radians(camera.fov_deg) / 2.0)

    def render_clean(self, east_m: float, north_m: float, altitude_m: float,
                     yaw_rad: float) -> np.ndarray:
        """The image without nuisances (uint8 image_px×image_px×3 RGB); ValueError for a
        non-finite pose or an altitude <= 0 (see :func:`check_pose`)."""
        check_pose(east_m, north_m, altitude_m, yaw_rad)
        size = self.camera.image_px
        res = self.world.resolution_m
        gsd = 2.0 * altitude_m * self._half_fov_tan / size  # metres per pixel
        cos, sin = math.cos(yaw_rad), math.sin(yaw_rad)
        # Pixel (c, r) centre: right = (c + 0.5 - size/2)·gsd, forward = (size/2 - r - 0.5)·gsd;
        # ground = pose + forward·(cos, sin) + right·(sin, -cos); cell = ground / res - 0.5.
        k = gsd / res
        half = size / 2.0 - 0.5
        matrix = np.array([
            [k * sin, -k * cos, east_m / res - 0.5 + k * (half * cos - half * sin)],
            [-k * cos, -k * sin, north_m / res - 0.5 + k * (half * sin + half * cos)],
        ], np.float64)
        return cv2.warpAffine(self.texture, matrix, (size, size),
                              flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=BORDER_RGB)

    def render(self, east_m: float, north_m: float, altitude_m: float, yaw_rad: float,
               rng: np.random.Generator | None = None) -> np.ndarray:
        """The camera frame at a pose: uint8 image_px×image_px×3 RGB with random nuisances
        (ValueError for a pose :func:`check_pose` refuses)."""
        rng = self._rng if rng is None else rng
        image = self.render_clean(east_m, north_m, altitude_m, yaw_rad).astype(np.float32)
        return self._apply_nuisance(image, rng)

    def _apply_nuisance(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        cam = self.camera
        size = cam.image_px
        draws = rng.random(8)
        gain = cam.illumination_min + (cam.illumination_max - cam.illumination_min) * draws[0]
        cast = 1.0 + COLOUR_CAST_SPAN * (rng.random(3) - 0.5)
        image *= (gain * cast).astype(np.float32)
        low_sat, high_sat = SATURATION_RANGE
        saturation = low_sat + (high_sat - low_sat) * draws[6]
        grey = image.mean(axis=2, keepdims=True)
        image = grey + np.float32(saturation) * (image - grey)
        if draws[1] < CLOUD_SHADOW_PROBABILITY:  # a soft shadow edge across the frame
            angle = 2 * math.pi * draws[2]
            ramp = (np.arange(size, dtype=np.float32) - size / 2) / size
            along = math.cos(angle) * ramp[None, :] + math.sin(angle) * ramp[:, None]
            edge = np.clip(0.5 + 3.0 * (along + 0.6 * (draws[3] - 0.5)), 0.0, 1.0)
            image *= (1.0 - (0.2 + 0.35 * draws[4]) * edge)[..., None]
        sigma = cam.blur_max_px * draws[5]
        if sigma > 0.3:
            image = cv2.GaussianBlur(image, (0, 0), sigma)
        if cam.noise_std > 0:
            image += rng.standard_normal(image.shape, dtype=np.float32) * np.float32(
                cam.noise_std)
        np.clip(image, 0.0, 255.0, out=image)
        return image.astype(np.uint8)
