"""Camera frames decoded to RGB (fl_uav.fleet.camera_frames): each encoding with known pixel
values, padded rows, and every way a frame can be unreadable."""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np
import pytest

from fl_uav.fleet.camera_frames import (
    COMPRESSED_FORMATS,
    MAX_COMPRESSED_PIXELS,
    RAW_ENCODINGS,
    ImageFormatError,
    compressed_to_rgb,
    raw_to_rgb,
)
from test.camera_samples import (
    ALPHA,
    GREY,
    RGB,
    YUV422_ENCODINGS,
    encode,
    raw_frame,
    smooth_rgb,
)


def test_the_encodings_are_ros_names():
    # sensor_msgs/image_encodings.hpp: UYVY "uyvy", YUV422 "yuv422" (deprecated), YUYV "yuyv",
    # YUV422_YUY2 "yuv422_yuy2" (deprecated)
    assert set(RAW_ENCODINGS) == {'mono8', 'rgb8', 'bgr8', 'rgba8', 'bgra8', 'uyvy', 'yuv422',
                                  'yuyv', 'yuv422_yuy2'}
    assert COMPRESSED_FORMATS == ('jpeg', 'png')


@pytest.mark.parametrize('padding', [0, 3])
@pytest.mark.parametrize('encoding', RAW_ENCODINGS)
def test_each_encoding_decodes_to_its_rgb_pixels(encoding, padding):
    # Arrange
    frame, expected = raw_frame(encoding, padding)
    # Act
    rgb = raw_to_rgb(**frame)
    # Assert: exact, except YUV within 1 of BT.601 (OpenCV's fixed-point rounding)
    assert rgb.dtype == np.uint8 and rgb.shape == (2, 4, 3)
    tolerance = 1 if encoding in YUV422_ENCODINGS else 0
    np.testing.assert_allclose(rgb, expected, atol=tolerance)


def test_yuv_colours_are_those_of_bt601_video_range():
    # Arrange: black, white, red, green, blue as a 4:2:2 camera sends them (U Y V Y)
    pairs = {'black': (16, 128, 128), 'white': (235, 128, 128), 'red': (81, 90, 240),
             'green': (145, 54, 34), 'blue': (41, 240, 110)}
    data = b''.join(bytes([u, y, v, y]) for y, u, v in pairs.values())
    # Act
    rgb = raw_to_rgb('uyvy', 2 * len(pairs), 1, 4 * len(pairs), data)
    # Assert
    got = dict(zip(pairs, rgb[0, ::2].tolist()))
    assert got['black'] == [0, 0, 0] and got['white'] == [255, 255, 255]
    for name, channel in (('red', 0), ('green', 1), ('blue', 2)):
        assert got[name][channel] >= 254 and max(np.delete(got[name], channel)) <= 1


def test_the_image_is_a_copy_not_a_view_of_the_message():
    # Arrange
    frame, _ = raw_frame('rgb8')
    data = bytearray(frame['data'])
    # Act
    rgb = raw_to_rgb(**{**frame, 'data': data})
    data[:] = bytes(len(data))
    # Assert
    np.testing.assert_array_equal(rgb, RGB)


@pytest.mark.parametrize(('change', 'reason', 'words'), [
    (dict(encoding='bayer_rggb8'), 'encoding', "'bayer_rggb8' (mono8, rgb8, bgr8"),
    (dict(encoding='mono16'), 'encoding', 'yuv422_yuy2)'),
    (dict(width=0), 'geometry', 'geometry 0x2'),
    (dict(height=0), 'geometry', 'geometry 4x0'),
    (dict(step=11), 'geometry', 'step 11 (rgb8: 3 bytes a pixel)'),
    (dict(data=b'\x00' * 23), 'size', 'image data has 23 bytes, expected 24'),
    (dict(data=b'\x00' * 25), 'size', 'expected 24'),
    (dict(height=2 ** 31), 'size', 'expected'),
])
def test_an_unreadable_raw_frame_names_its_reason(change, reason, words):
    # Arrange
    frame, _ = raw_frame('rgb8')
    # Act
    with pytest.raises(ImageFormatError) as info:
        raw_to_rgb(**{**frame, **change})
    # Assert
    assert info.value.reason == reason and words in str(info.value)


@pytest.mark.parametrize('encoding', YUV422_ENCODINGS)
def test_an_odd_width_in_yuv422_is_a_geometry_error(encoding):
    with pytest.raises(ImageFormatError, match='odd width 3') as info:
        raw_to_rgb(encoding, 3, 1, 8, bytes(8))
    assert info.value.reason == 'geometry'


# --- compressed --------------------------------------------------------------------------

@pytest.mark.parametrize('image_format', ['png', 'rgb8; png compressed bgr8',
                                          'bgr8; png compressed bgr8'])
def test_a_png_decodes_to_its_exact_rgb(image_format):
    # Arrange: as compressed_image_transport writes it (cv::imencode of the bgr8 image)
    rgb = smooth_rgb()
    data = encode('.png', cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    # Act / Assert
    np.testing.assert_array_equal(compressed_to_rgb(image_format, data), rgb)


@pytest.mark.parametrize('image_format', ['jpeg', 'jpg', 'rgb8; jpeg compressed bgr8',
                                          'yuv422; jpeg compressed bgr8'])
def test_a_jpeg_decodes_to_its_rgb_within_a_few_levels(image_format):
    # Arrange
    rgb = smooth_rgb()
    data = encode('.jpg', cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    # Act
    got = compressed_to_rgb(image_format, data)
    # Assert: the right channels (a swap would be off by ~100 levels), jpeg's loss small
    assert got.shape == rgb.shape and got.dtype == np.uint8
    assert np.abs(got.astype(int) - rgb).mean() < 2.0
    assert np.abs(got.astype(int) - rgb).max() <= 12


@pytest.mark.parametrize(('image_format', 'pixels'), [
    ('mono8; jpeg compressed mono8', GREY),
    ('mono8; png compressed ', GREY),
    ('bgra8; png compressed bgra8', np.concatenate([RGB[:, :, ::-1], ALPHA], axis=2)),
])
def test_grey_and_alpha_compressed_frames_decode_to_rgb(image_format, pixels):
    # Arrange
    extension = '.jpg' if 'jpeg' in image_format else '.png'
    expected = (np.repeat(GREY[:, :, None], 3, axis=2) if pixels.ndim == 2 else RGB)
    # Act
    got = compressed_to_rgb(image_format, encode(extension, pixels))
    # Assert
    tolerance = 3 if extension == '.jpg' else 0
    np.testing.assert_allclose(got, expected, atol=tolerance)


def test_a_16_bit_png_decodes_to_8_bit_rgb():
    # Arrange: 'bgr16' (a 16-bit colour image through the png plug-in)
    bgr16 = RGB[:, :, ::-1].astype(np.uint16) * 257
    # Act
    got = compressed_to_rgb('rgb16; png compressed bgr16', encode('.png', bgr16))
    # Assert
    np.testing.assert_array_equal(got, RGB)


PNG_OF_RGB = encode('.png', RGB[:, :, ::-1])


@pytest.mark.parametrize(('image_format', 'data', 'reason'), [
    ('jpeg', b'not a jpeg at all', 'decode'),
    ('png', b'', 'decode'),
    ('png', b'\x89PNG\r\n\x1a\n', 'decode'),                      # cut after its signature
    ('jpeg', b'\xff\xd8\xff\xe0\x00\x10JFIF\x00' + bytes(50), 'decode'),   # no frame header
    ('jpeg', PNG_OF_RGB, None),                                    # the bytes decide
    ('tiff', PNG_OF_RGB, 'encoding'),
    ('16UC1; compressedDepth png', PNG_OF_RGB, 'encoding'),
    ('', PNG_OF_RGB, 'encoding'),
], ids=['garbage', 'empty', 'cut', 'no-frame-header', 'png-called-jpeg', 'tiff',
        'compressedDepth', 'no-format'])
def test_an_unreadable_compressed_frame_names_its_reason(image_format, data, reason):
    # Act / Assert
    if reason is None:
        np.testing.assert_array_equal(compressed_to_rgb(image_format, data), RGB)
        return
    with pytest.raises(ImageFormatError) as info:
        compressed_to_rgb(image_format, data)
    assert info.value.reason == reason
    if reason == 'encoding':
        assert f'{image_format!r} (jpeg, png)' in str(info.value)


def test_a_garbled_png_body_is_a_decode_error():
    # Arrange: a valid header, then the image data corrupted
    data = bytearray(encode('.png', smooth_rgb()))
    data[40:] = bytes(len(data) - 40)
    # Act / Assert
    with pytest.raises(ImageFormatError) as info:
        compressed_to_rgb('png', bytes(data))
    assert info.value.reason == 'decode'


def _png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
    chunk = b'IHDR' + ihdr
    return (b'\x89PNG\r\n\x1a\n' + struct.pack('>I', len(ihdr)) + chunk
            + struct.pack('>I', zlib.crc32(chunk)))


def test_a_compressed_frame_declaring_a_huge_size_is_refused_before_decoding():
    # Arrange: 25 bytes that would ask for 30 GB
    data = _png_header(100_000, 100_000) + bytes(16)
    # Act / Assert
    with pytest.raises(ImageFormatError, match='100000x100000 pixels') as info:
        compressed_to_rgb('png', data)
    assert info.value.reason == 'geometry' and 100_000 ** 2 > MAX_COMPRESSED_PIXELS
