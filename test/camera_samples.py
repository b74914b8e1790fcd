"""Camera frames with known pixel values in each encoding the drone reads, and the RGB each
must decode to (test/unit/fleet/test_camera_frames.py, test/ros/test_drone_camera.py)."""

from __future__ import annotations

import cv2
import numpy as np

YUV422_ENCODINGS = ('uyvy', 'yuv422', 'yuyv', 'yuv422_yuy2')

# 2 rows x 4 columns of distinct colours
RGB = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255], [10, 20, 30]],
                [[0, 0, 0], [255, 255, 255], [128, 64, 32], [1, 2, 3]]], np.uint8)
ALPHA = np.array([[0, 50, 100, 255], [7, 8, 9, 10]], np.uint8)[:, :, None]
GREY = np.array([[0, 17, 128, 255], [1, 2, 3, 250]], np.uint8)
# YUV 4:2:2: one (Y0, Y1, U, V) per pixel pair, Y0 != Y1 so that their order shows
YUV_PAIRS = np.array([[[16, 235, 128, 128], [81, 90, 90, 240]],
                      [[145, 150, 54, 34], [41, 60, 240, 110]]], np.uint8)


def bt601_rgb(pairs: np.ndarray) -> np.ndarray:
    """RGB of YUV 4:2:2 pairs by ITU-R BT.601 (video range), computed here independently."""
    y = pairs[:, :, :2].astype(float).reshape(pairs.shape[0], -1)     # Y0 Y1 per pair
    u = np.repeat(pairs[:, :, 2].astype(float), 2, axis=1) - 128.0
    v = np.repeat(pairs[:, :, 3].astype(float), 2, axis=1) - 128.0
    c = 1.164 * (y - 16.0)
    rgb = np.stack([c + 1.596 * v, c - 0.391 * u - 0.813 * v, c + 2.018 * u], axis=-1)
    return np.clip(np.rint(rgb), 0, 255)


def yuv_bytes(order: str) -> np.ndarray:
    """The pairs' bytes in a byte order ('uyvy' or 'yuyv'), one row of 2 x width bytes each."""
    y0, y1, u, v = (YUV_PAIRS[:, :, i] for i in range(4))
    planes = (u, y0, v, y1) if order == 'uyvy' else (y0, u, y1, v)
    return np.stack(planes, axis=-1).reshape(YUV_PAIRS.shape[0], -1)


def _rows(encoding: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows of bytes as the encoding carries them, height x width x bytes, the RGB
    expected)."""
    if encoding == 'mono8':
        return GREY[:, :, None], np.repeat(GREY[:, :, None], 3, axis=2)
    if encoding in YUV422_ENCODINGS:
        order = 'uyvy' if encoding in ('uyvy', 'yuv422') else 'yuyv'
        return yuv_bytes(order).reshape(2, 4, 2), bt601_rgb(YUV_PAIRS)
    pixels = {'rgb8': RGB, 'bgr8': RGB[:, :, ::-1],
              'rgba8': np.concatenate([RGB, ALPHA], axis=2),
              'bgra8': np.concatenate([RGB[:, :, ::-1], ALPHA], axis=2)}[encoding]
    return pixels, RGB


def raw_frame(encoding: str, padding: int = 0) -> tuple[dict, np.ndarray]:
    """raw_to_rgb's arguments for the test image in ``encoding`` (rows padded by ``padding``
    bytes of 0xAB), and the RGB expected."""
    pixels, expected = _rows(encoding)
    height, width = pixels.shape[:2]
    rows = pixels.reshape(height, -1)
    rows = np.concatenate([rows, np.full((height, padding), 0xAB, np.uint8)], axis=1)
    return dict(encoding=encoding, width=width, height=height, step=rows.shape[1],
                data=rows.tobytes()), expected


def encode(extension: str, pixels: np.ndarray) -> bytes:
    """cv2.imencode's bytes (BGR or BGRA pixels, or grey)."""
    ok, data = cv2.imencode(extension, pixels)
    assert ok
    return data.tobytes()


def smooth_rgb(height: int = 32, width: int = 48) -> np.ndarray:
    """Gradients, which jpeg keeps within a few levels (noise it does not)."""
    rows, cols = np.mgrid[0:height, 0:width]
    return np.stack([rows * 255 // (height - 1), cols * 255 // (width - 1),
                     np.full_like(rows, 90)], axis=-1).astype(np.uint8)
