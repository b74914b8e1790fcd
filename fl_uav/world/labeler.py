"""Map-based labels: the land-cover class under a camera footprint.

A frame's label is the majority class of the land-cover raster inside the ground square the
camera sees (sampled on a regular grid of points, rotated with the yaw), or
:data:`~fl_uav.world.landcover.UNKNOWN` when unknown cells outweigh every class: such a frame is
not labelled (its caller drops it). In the simulator the
raster is the generated world; in the field the same labeler runs over a georeferenced
land-cover raster of the survey area loaded with :meth:`LandCoverMap.load`, and the drone's
estimated pose.
"""

from __future__ import annotations

import math

import numpy as np

from fl_uav.world.camera import check_pose, footprint_m
from fl_uav.world.landcover import UNKNOWN, LandCoverMap

_MAX_CELL_INDEX = 2.0 ** 62
"""Largest |cell index| a footprint point may have (beyond it, an int64 index overflows)."""


class MapLabeler:
    """Labels camera frames from a land-cover map and the pose they were taken at.

    The footprint is sampled on ``samples_per_side``² points (cell centres of a regular grid over
    the footprint square, same geometry as :class:`~fl_uav.world.camera.AerialRenderer`). Points
    outside the world are ignored; if the whole footprint is outside, the points are clamped to
    the nearest edge cells so that a valid class is always returned.
    """

    def __init__(self, world: LandCoverMap, fov_deg: float, samples_per_side: int = 16) -> None:
        if not (0.0 < fov_deg < 180.0):
            raise ValueError(f'fov_deg must be in (0, 180), got {fov_deg}')
        if not (1 <= samples_per_side <= 256):
            raise ValueError(f'samples_per_side must be in [1, 256], got {samples_per_side}')
        self.world = world
        self.fov_deg = float(fov_deg)
        steps = (np.arange(samples_per_side) + 0.5) / samples_per_side - 0.5
        forward, right = np.meshgrid(-steps, steps, indexing='ij')
        self._forward = forward.ravel()
        self._right = right.ravel()
        # A tiny centre bonus breaks ties in favour of the class nearest the image centre.
        self._weights = 1.0 + 1e-3 * (1.0 - np.hypot(self._forward, self._right))
        self._grid = world.class_grid
        self._cells = world.cells_per_side
        self._inv_res = 1.0 / world.resolution_m
        self._num_classes = world.num_classes

    def _sample(self, east_m: float, north_m: float, altitude_m: float,
                yaw_rad: float) -> tuple[np.ndarray, np.ndarray]:
        check_pose(east_m, north_m, altitude_m, yaw_rad)
        side = footprint_m(altitude_m, self.fov_deg)
        cos, sin = math.cos(yaw_rad), math.sin(yaw_rad)
        forward = self._forward * side
        right = self._right * side
        with np.errstate(over='ignore', invalid='ignore'):
            col_m = np.floor((east_m + forward * cos + right * sin) * self._inv_res)
            row_m = np.floor((north_m + forward * sin - right * cos) * self._inv_res)
        # A finite pose so far out that the cell index overflows has no footprint either.
        if not (np.all(np.abs(col_m) < _MAX_CELL_INDEX)
                and np.all(np.abs(row_m) < _MAX_CELL_INDEX)):
            raise ValueError(f'camera pose out of range: east {east_m} m, north {north_m} m, '
                             f'altitude {altitude_m} m')
        col, row = col_m.astype(np.intp), row_m.astype(np.intp)
        inside = (col >= 0) & (col < self._cells) & (row >= 0) & (row < self._cells)
        if inside.all():
            return self._grid[row, col], self._weights
        if inside.any():
            return self._grid[row[inside], col[inside]], self._weights[inside]
        np.clip(col, 0, self._cells - 1, out=col)
        np.clip(row, 0, self._cells - 1, out=row)
        return self._grid[row, col], self._weights

    def label(self, east_m: float, north_m: float, altitude_m: float,
              yaw_rad: float = 0.0) -> int:
        """Majority class id inside the footprint of a nadir camera at the pose, or
        :data:`~fl_uav.world.landcover.UNKNOWN` if unknown cells weigh at least as much as it.

        ValueError for a pose with no footprint (NaN or infinite values, altitude <= 0, a
        position too far out to index): there is no honest class for it, the caller decides.
        """
        classes, weights = self._sample(east_m, north_m, altitude_m, yaw_rad)
        counts = np.bincount(classes, weights, minlength=self._num_classes)
        best = int(np.argmax(counts[:self._num_classes]))
        if counts[UNKNOWN:].sum() >= counts[best]:    # empty unless the map has UNKNOWN cells
            return UNKNOWN
        return best

    def label_fractions(self, east_m: float, north_m: float, altitude_m: float,
                        yaw_rad: float = 0.0) -> np.ndarray:
        """Share of each class inside the footprint (float64, length num_classes; sums to 1 less
        the unknown share); ValueError as :meth:`label`."""
        classes, _ = self._sample(east_m, north_m, altitude_m, yaw_rad)
        counts = np.bincount(classes, minlength=self._num_classes).astype(np.float64)
        return counts[:self._num_classes] / counts.sum()
