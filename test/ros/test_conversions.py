"""Message conversions (fl_uav.ros.conversions): messages only, no node."""

from __future__ import annotations

import math
import random

import cv2
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import BatteryState, CompressedImage

from fl_uav.fleet.drone_status import StatusReport
from fl_uav.fleet.heartbeat_auth import HeartbeatSigner, HeartbeatVerifier
from fl_uav.fleet.station_heartbeat import Heartbeat, StationPhase
from fl_uav.ros.conversions import (
    ImageFormatError,
    battery_to_msg,
    compressed_to_rgb,
    heartbeat_to_msg,
    image_to_rgb,
    msg_to_heartbeat,
    msg_to_heartbeat_fields,
    rgb_to_image,
    status_to_msg,
)

pytestmark = pytest.mark.ros
STAMP_S = 12.5
BEAT = Heartbeat('a1b2', 3, 10, StationPhase.PLANNING, 42.0, 1.0)


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
    (dict(encoding='bayer_rggb8'), 'encoding'),
    (dict(encoding=''), 'encoding'),
    (dict(encoding='yuyv'), 'geometry'),          # odd width 5
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


def test_a_compressed_image_is_read_and_garbage_is_named():
    # Arrange: a png of the test image, as image_transport's compressed plug-in writes it
    rgb, _ = _image()
    ok, png = cv2.imencode('.png', cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    msg = CompressedImage(format='rgb8; png compressed bgr8', data=png.tobytes())
    garbage = CompressedImage(format='jpeg', data=b'not a jpeg')
    # Act
    image = compressed_to_rgb(msg)
    with pytest.raises(ImageFormatError) as info:
        compressed_to_rgb(garbage)
    # Assert
    assert ok
    np.testing.assert_array_equal(image, rgb)
    assert info.value.reason == 'decode'


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


def test_a_heartbeat_survives_its_message():
    # Act
    msg = heartbeat_to_msg(BEAT, 1700000000.5)
    # Assert: one status an operator can read, and the same heartbeat back
    assert len(msg.status) == 1 and msg.header.stamp.sec == 1700000000
    assert msg.status[0].message == 'run a1b2 round 3/10: planning for 42 s'
    assert msg_to_heartbeat(msg) == BEAT


def test_a_signed_heartbeat_carries_its_pairs_as_signed_and_verifies_after_the_trip():
    # Arrange
    key = Ed25519PrivateKey.generate()
    values = HeartbeatSigner(key).sign(BEAT)
    verifier = HeartbeatVerifier(key.public_key(), require=True, max_age_s=15.0,
                                 max_skew_s=10.0)
    # Act
    msg = heartbeat_to_msg(BEAT, 1700000000.5, values)
    name, carried = msg_to_heartbeat_fields(msg)
    # Assert: the pairs in order, the same beat back, verified; unverified it reads too
    assert carried == values and name == msg.status[0].name
    assert verifier.open(name, carried) == BEAT
    assert msg_to_heartbeat(msg) == BEAT


@pytest.mark.parametrize('msg, message', [
    (DiagnosticArray(), r'heartbeat message with 0 statuses, not 1'),
    (status_to_msg(StatusReport('fl_uav: uav0', 'uav0', 0, 'round 1 waiting', ()), 0.0),
     r"status name 'fl_uav: uav0' is not"),
])
def test_another_message_on_the_topic_is_refused_naming_why(msg, message):
    with pytest.raises(ValueError, match=message):
        msg_to_heartbeat(msg)


def test_battery_state_has_nan_for_what_the_autopilot_does_not_measure():
    # Arrange: MAVLink gives the remaining fraction and the pack voltage, nothing else
    # Act
    msg = battery_to_msg(0.83, 15.99, STAMP_S)
    # Assert
    assert msg.percentage == pytest.approx(0.83) and msg.voltage == pytest.approx(15.99)
    for unmeasured in ('temperature', 'current', 'charge', 'capacity', 'design_capacity'):
        assert math.isnan(getattr(msg, unmeasured)), unmeasured
    assert msg.power_supply_status == BatteryState.POWER_SUPPLY_STATUS_UNKNOWN
    assert msg.present and (msg.header.stamp.sec, msg.header.stamp.nanosec) == (12, 500_000_000)


@pytest.mark.parametrize('fraction, percentage', [
    (1.2, 1.0), (-0.01, 0.0), (math.nan, math.nan), (math.inf, math.nan)])
def test_battery_percentage_stays_in_0_to_1_or_is_nan(fraction, percentage):
    # Arrange + Act
    msg = battery_to_msg(fraction, 16.0, STAMP_S)
    # Assert
    assert msg.percentage == pytest.approx(percentage, nan_ok=True)
