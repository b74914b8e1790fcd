"""Camera frames as the drone receives them, decoded to uint8 H×W×3 RGB (no ROS).

Raw frames (sensor_msgs/Image's fields) in the 8-bit encodings of ROS's
sensor_msgs/image_encodings.hpp: mono8 (grey into all three channels), rgb8, bgr8, rgba8 and
bgra8 (alpha dropped), and YUV 4:2:2: ``uyvy`` and its deprecated name ``yuv422`` (bytes
U Y0 V Y1), ``yuyv`` and its deprecated name ``yuv422_yuy2`` (Y0 U Y1 V), what usb_cam and
v4l2_camera publish; converted as OpenCV's COLOR_YUV2RGB_UYVY / _YUYV do (BT.601, video
range). Rows may be padded (``step`` larger than the pixels need).

Compressed frames (sensor_msgs/CompressedImage) as image_transport's compressed plug-in writes
them: ``format`` is ``jpeg`` or ``png``, or ``<encoding>; jpeg compressed bgr8`` (``mono8``),
``<encoding>; png compressed bgr8`` (``bgra8``, ``bgr16``, or nothing for grey); the bytes are
decoded whatever their colour layout, grey and 16-bit included.

A frame that cannot be read raises :class:`ImageFormatError` whose ``reason`` is the drone's
count key: ``encoding`` (an encoding or compression not listed here), ``geometry`` (no pixels,
a row step shorter than a row, an odd width in YUV 4:2:2, a compressed image larger than
MAX_COMPRESSED_PIXELS), ``size`` (data not step × height bytes), ``decode`` (compressed bytes
that are no jpeg or png image).
"""

from __future__ import annotations

import struct

import cv2
import numpy as np

ENCODING, GEOMETRY, SIZE, DECODE = 'encoding', 'geometry', 'size', 'decode'

#: encoding -> (bytes per pixel, cv2 conversion to RGB; None: already RGB)
_RAW = {
    'mono8': (1, cv2.COLOR_GRAY2RGB),
    'rgb8': (3, None),
    'bgr8': (3, cv2.COLOR_BGR2RGB),
    'rgba8': (4, cv2.COLOR_RGBA2RGB),
    'bgra8': (4, cv2.COLOR_BGRA2RGB),
    'uyvy': (2, cv2.COLOR_YUV2RGB_UYVY),
    'yuv422': (2, cv2.COLOR_YUV2RGB_UYVY),
    'yuyv': (2, cv2.COLOR_YUV2RGB_YUYV),
    'yuv422_yuy2': (2, cv2.COLOR_YUV2RGB_YUYV),
}
RAW_ENCODINGS = tuple(_RAW)
COMPRESSED_FORMATS = ('jpeg', 'png')
_FORMAT_ALIASES = {'jpeg': 'jpeg', 'jpg': 'jpeg', 'png': 'png'}
#: A compressed frame may declare any size in a few bytes: larger ones are refused before
#: they are decoded (64 Mpx, 192 MB as RGB; a 4K camera has 8.3 Mpx).
MAX_COMPRESSED_PIXELS = 64 * 2 ** 20


class ImageFormatError(ValueError):
    """A camera frame that cannot be read; ``reason`` is the drone's count key ('encoding',
    'geometry', 'size' or 'decode')."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def raw_to_rgb(encoding: str, width: int, height: int, step: int, data,
               is_bigendian: bool = False) -> np.ndarray:
    """A raw frame (sensor_msgs/Image's fields; ``data`` any bytes-like object) as a new
    uint8 height×width×3 RGB array. ``is_bigendian`` is ignored: every encoding here has
    one byte per channel."""
    del is_bigendian
    if encoding not in _RAW:
        raise ImageFormatError(ENCODING, f'unsupported image encoding {encoding!r} '
                                         f'({", ".join(RAW_ENCODINGS)})')
    pixel_bytes, conversion = _RAW[encoding]
    if width <= 0 or height <= 0 or step < width * pixel_bytes:
        raise ImageFormatError(GEOMETRY, f'bad image geometry {width}x{height} step {step} '
                                         f'({encoding}: {pixel_bytes} bytes a pixel)')
    if pixel_bytes == 2 and width % 2:
        raise ImageFormatError(GEOMETRY, f'odd width {width} in {encoding} (YUV 4:2:2 '
                                         f'carries pixels in pairs)')
    buffer = np.frombuffer(data, np.uint8)
    if buffer.size != step * height:
        raise ImageFormatError(SIZE, f'image data has {buffer.size} bytes, expected '
                                     f'{step * height} (step {step} x height {height})')
    rows = buffer.reshape(height, step)[:, :width * pixel_bytes]
    pixels = rows.reshape(height, width, pixel_bytes)
    if conversion is None:
        return pixels.copy()
    if pixel_bytes == 1:
        pixels = pixels[:, :, 0]
    return cv2.cvtColor(np.ascontiguousarray(pixels), conversion)


def compression_of(image_format: str) -> str:
    """'jpeg' or 'png' for a CompressedImage format string ('jpeg', 'png', 'rgb8; jpeg
    compressed bgr8', ...); ImageFormatError ('encoding') for any other."""
    head, sep, tail = image_format.partition(';')
    words = (tail if sep else head).split()
    compression = _FORMAT_ALIASES.get(words[0].lower()) if words else None
    if compression is None:
        raise ImageFormatError(ENCODING, f'unsupported compressed image format '
                                         f'{image_format!r} ({", ".join(COMPRESSED_FORMATS)})')
    return compression


def compressed_to_rgb(image_format: str, data) -> np.ndarray:
    """A compressed frame (sensor_msgs/CompressedImage's format and bytes) as a new uint8
    H×W×3 RGB array."""
    compression_of(image_format)
    buffer = np.frombuffer(data, np.uint8)
    size = _declared_size(buffer[:_HEADER_SCAN_BYTES].tobytes())
    if size is None:
        raise ImageFormatError(DECODE, f'{buffer.size} bytes of {image_format!r} are no jpeg '
                                       f'or png image')
    width, height = size
    if width * height > MAX_COMPRESSED_PIXELS:
        raise ImageFormatError(GEOMETRY, f'compressed image of {width}x{height} pixels, more '
                                         f'than {MAX_COMPRESSED_PIXELS} (MAX_COMPRESSED_PIXELS)')
    try:
        bgr = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
    except cv2.error:
        bgr = None
    if bgr is None or bgr.size == 0:
        raise ImageFormatError(DECODE, f'{buffer.size} bytes of {image_format!r} could not be '
                                       f'decoded')
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


# --- the size a jpeg or png declares, read before decoding ---------------------------------

_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
_JPEG_START = b'\xff\xd8'
_HEADER_SCAN_BYTES = 1 << 20    # a jpeg's frame header follows its tables (and any Exif)
# JPEG start-of-frame markers (baseline, progressive, lossless...): not DHT, JPG, DAC
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})   # TEM, RSTn, SOI: no length


def _declared_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from a png's IHDR or a jpeg's start-of-frame; None if ``head`` starts
    neither or is cut short."""
    if head.startswith(_PNG_SIGNATURE) and head[12:16] == b'IHDR' and len(head) >= 24:
        return struct.unpack('>II', head[16:24])
    if not head.startswith(_JPEG_START):
        return None
    i = 2
    while i + 4 <= len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if marker == 0xFF:          # fill byte
            i += 1
            continue
        if marker in _JPEG_STANDALONE:
            i += 2
            continue
        (length,) = struct.unpack('>H', head[i + 2:i + 4])
        if marker in _JPEG_SOF:
            if i + 9 > len(head):
                return None
            height, width = struct.unpack('>HH', head[i + 5:i + 9])
            return width, height
        if marker == 0xDA or length < 2:    # scan data before any frame header
            return None
        i += 2 + length
    return None
