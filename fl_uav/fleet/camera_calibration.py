"""A camera's intrinsics for sensor_msgs/CameraInfo (no ROS): a calibration file, or a pinhole
camera from its field of view.

The file is what ROS's camera_calibration writes and camera_calibration_parsers reads (YAML:
``image_width``, ``image_height``, ``camera_matrix``, ``distortion_model``,
``distortion_coefficients``, ``rectification_matrix``, ``projection_matrix``, each matrix as
``rows``, ``cols``, ``data``), named by a path or a ``file://`` URL as camera_info_manager
takes it. A calibration made at another size is scaled to the published frames (they are the
camera's frames resized, so the focal lengths and the principal point scale with them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

PLUMB_BOB = 'plumb_bob'
IDENTITY_3X3 = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)


@dataclass(frozen=True)
class CameraCalibration:
    """CameraInfo's fields: size in pixels, distortion model and coefficients ``d``, and the
    row-major matrices ``k`` (3x3), ``r`` (3x3), ``p`` (3x4)."""

    width: int
    height: int
    k: tuple[float, ...]
    d: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)
    r: tuple[float, ...] = IDENTITY_3X3
    p: tuple[float, ...] = ()
    distortion_model: str = PLUMB_BOB

    def __post_init__(self) -> None:
        if not self.p:
            k = self.k
            object.__setattr__(self, 'p', (k[0], k[1], k[2], 0.0, k[3], k[4], k[5], 0.0,
                                           k[6], k[7], k[8], 0.0))

    @classmethod
    def from_fov(cls, width: int, height: int, fov_deg: float) -> CameraCalibration:
        """An ideal pinhole camera: horizontal field of view ``fov_deg``, square pixels, the
        principal point in the middle, no distortion."""
        if not (width > 0 and height > 0 and 0.0 < fov_deg < 180.0):
            raise ValueError(f'need a positive size and a field of view in (0, 180) deg, got '
                             f'{width}x{height}, {fov_deg}')
        f = width / 2.0 / math.tan(math.radians(fov_deg) / 2.0)
        return cls(width, height, (f, 0.0, width / 2.0, 0.0, f, height / 2.0, 0.0, 0.0, 1.0))

    def scaled(self, width: int, height: int) -> CameraCalibration:
        """The same camera for frames resized to ``width`` x ``height``."""
        if (width, height) == (self.width, self.height):
            return self
        sx, sy = width / self.width, height / self.height
        k, p = list(self.k), list(self.p)
        k[0], k[1], k[2], k[4], k[5] = k[0] * sx, k[1] * sx, k[2] * sx, k[4] * sy, k[5] * sy
        for i in range(4):
            p[i] *= sx
            p[4 + i] *= sy
        return replace(self, width=width, height=height, k=tuple(k), p=tuple(p))


def calibration_path(url: str) -> Path:
    """The file a camera_info_url names: ``file:///abs/path`` or a plain path (``~``
    expanded); ValueError for another scheme (``package://`` needs ament: give the path)."""
    if url.startswith('file://'):
        return Path(url[len('file://'):]).expanduser()
    if '://' in url:
        raise ValueError(f"camera_info_url {url!r}: only 'file:///path' or a path is read "
                         f'(resolve package:// URLs to a path)')
    return Path(url).expanduser()


def _matrix(doc: dict, key: str, rows: int, cols: int | None, where: str) -> tuple[float, ...]:
    entry = doc.get(key)
    data = entry.get('data') if isinstance(entry, dict) else None
    if not isinstance(data, list) or not all(isinstance(v, int | float) and
                                             not isinstance(v, bool) for v in data):
        raise ValueError(f'{where}: {key}.data must be a list of numbers')
    if cols is not None and len(data) != rows * cols:
        raise ValueError(f'{where}: {key} must have {rows}x{cols} = {rows * cols} numbers, '
                         f'has {len(data)}')
    return tuple(float(v) for v in data)


def load_calibration(url: str) -> CameraCalibration:
    """The calibration in the file ``url`` names; ValueError naming camera_info_url, the file
    and the field for a missing file or a field that does not parse."""
    path = calibration_path(url)
    where = f'camera_info_url {str(path)!r}'
    try:
        doc: Any = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f'{where}: cannot read it ({exc.strerror or exc})') from None
    except yaml.YAMLError as exc:
        raise ValueError(f'{where}: not YAML ({exc})') from None
    if not isinstance(doc, dict):
        raise ValueError(f'{where}: not a camera_calibration_parsers YAML file (no mapping)')
    width, height = doc.get('image_width'), doc.get('image_height')
    if not (isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0):
        raise ValueError(f'{where}: image_width and image_height must be positive integers, '
                         f'got {width!r} and {height!r}')
    k = _matrix(doc, 'camera_matrix', 3, 3, where)
    d = (_matrix(doc, 'distortion_coefficients', 1, None, where)
         if 'distortion_coefficients' in doc else ())
    r = (_matrix(doc, 'rectification_matrix', 3, 3, where) if 'rectification_matrix' in doc
         else IDENTITY_3X3)
    p = _matrix(doc, 'projection_matrix', 3, 4, where) if 'projection_matrix' in doc else ()
    model = doc.get('distortion_model', PLUMB_BOB)
    if not isinstance(model, str) or not model:
        raise ValueError(f'{where}: distortion_model must be a name, got {model!r}')
    return CameraCalibration(width, height, k, d, r, p, model)
