"""Message conversions (fl_uav.ros.conversions): messages only, no node."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fl_uav.ros.conversions import ImageFormatError, image_to_rgb, rgb_to_image

STAMP_S = 12.5


def _image(height: int = 4, width: int = 5):
    rgb = np.arange(height * width * 3, dtype=np.uint8).reshape(height, width, 3)
    return rgb, rgb_to_image(rgb, 'uav0/camera_optical', STAMP_S)


def test_rgb8_and_bgr8_images_are_read_back():
    # Arrange
    rgb, msg = _image()
    # Act
    same = image_to_rgb(msg)
    msg.encoding = 'bgr8'
    swapped = image_to_rgb(msg)
    # Assert
    np.testing.assert_array_equal(same, rgb)
    np.testing.assert_array_equal(swapped, rgb[:, :, ::-1])


@pytest.mark.parametrize(('change', 'reason'), [
    (dict(encoding='mono8'), 'encoding'),
    (dict(encoding=''), 'encoding'),
    (dict(height=0), 'geometry'),
    (dict(width=0), 'geometry'),
    (dict(step=3), 'geometry'),
    (dict(height=2**31), 'size'),
    (dict(width=2**20, step=3 * 2**20), 'size'),
    (dict(data=b''), 'size'),
    (dict(data=b'\x00' * 61), 'size'),
])
def test_an_unreadable_image_names_its_reason(change, reason):
    # Arrange
    _, msg = _image()
    for field, value in change.items():
        setattr(msg, field, value)
    # Act
    with pytest.raises(ImageFormatError) as info:
        image_to_rgb(msg)
    # Assert: the reason is the drone's count key (DroneAgent.camera_frames_rejected)
    assert info.value.reason == reason


def test_mutated_image_messages_are_images_or_named_rejections():
    # Arrange: seeded geometry and data lengths around the valid ones
    rng = random.Random(11)
    outcomes = []
    # Act
    for _ in range(300):
        _, msg = _image()
        msg.height = rng.choice([0, 1, 4, 5, 2**16, 2**32 - 1])
        msg.width = rng.choice([0, 1, 5, 6, 2**31])
        msg.step = rng.choice([0, 14, 15, 16, min(3 * msg.width, 2**32 - 1), 2**32 - 1])
        msg.data = bytes(rng.choice([0, 59, 60, 61, 64]))
        try:
            outcomes.append(image_to_rgb(msg).shape == (msg.height, msg.width, 3))
        except ImageFormatError as exc:
            outcomes.append(exc.reason in ('encoding', 'geometry', 'size'))
    # Assert: anything else would have raised out of the loop
    assert all(outcomes)
