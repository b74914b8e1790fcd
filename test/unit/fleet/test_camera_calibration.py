"""CameraInfo's intrinsics (fl_uav/fleet/camera_calibration.py): from a field of view, from a
camera_calibration_parsers YAML file, scaled to the published size."""

from __future__ import annotations

import math

import pytest

from fl_uav.fleet.camera_calibration import (
    IDENTITY_3X3,
    CameraCalibration,
    calibration_path,
    load_calibration,
)

# As ROS's camera_calibration writes it (a 640x480 camera).
CALIBRATION_YAML = """\
image_width: 640
image_height: 480
camera_name: narrow_stereo
camera_matrix:
  rows: 3
  cols: 3
  data: [500.0, 0.0, 320.5, 0.0, 502.0, 240.5, 0.0, 0.0, 1.0]
distortion_model: plumb_bob
distortion_coefficients:
  rows: 1
  cols: 5
  data: [-0.1, 0.01, 0.001, 0.0, 0.0]
rectification_matrix:
  rows: 3
  cols: 3
  data: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
projection_matrix:
  rows: 3
  cols: 4
  data: [490.0, 0.0, 321.0, 0.0, 0.0, 495.0, 241.0, 0.0, 0.0, 0.0, 1.0, 0.0]
"""


def test_a_pinhole_camera_from_its_field_of_view():
    # Act: 90 degrees across 640 px: the focal length is half the width
    cal = CameraCalibration.from_fov(640, 480, 90.0)
    # Assert
    assert cal.k == pytest.approx((320.0, 0, 320.0, 0, 320.0, 240.0, 0, 0, 1))
    assert cal.p == pytest.approx((320.0, 0, 320.0, 0, 0, 320.0, 240.0, 0, 0, 0, 1, 0))
    assert cal.d == (0.0,) * 5 and cal.r == IDENTITY_3X3 and cal.distortion_model == 'plumb_bob'
    assert CameraCalibration.from_fov(64, 64, 60.0).k[0] == pytest.approx(
        32 / math.tan(math.radians(30)))


def test_a_calibration_file_is_read_and_scaled_to_the_published_size(tmp_path):
    # Arrange
    path = tmp_path / 'camera.yaml'
    path.write_text(CALIBRATION_YAML)
    # Act
    cal = load_calibration(f'file://{path}')
    half = cal.scaled(320, 240)
    # Assert
    assert (cal.width, cal.height, cal.k[0], cal.k[5]) == (640, 480, 500.0, 240.5)
    assert cal.d == (-0.1, 0.01, 0.001, 0.0, 0.0) and cal.p[0] == 490.0
    assert (half.width, half.height) == (320, 240)
    assert half.k == pytest.approx((250.0, 0, 160.25, 0, 251.0, 120.25, 0, 0, 1))
    assert half.p == pytest.approx((245.0, 0, 160.5, 0, 0, 247.5, 120.5, 0, 0, 0, 1, 0))
    assert half.d == cal.d and cal.scaled(640, 480) is cal


@pytest.mark.parametrize(('text', 'match'), [
    (None, 'cannot read it'),
    ('image_width: 640\n', 'image_width and image_height must be positive integers'),
    ('[1, 2]', r'not a camera_calibration_parsers YAML file \(no mapping\)'),
    ('image_width: 640\nimage_height: 480\ncamera_matrix: {data: [1, 2, 3]}\n',
     r'camera_matrix must have 3x3 = 9 numbers, has 3'),
    ('image_width: 640\nimage_height: 480\ncamera_matrix: {data: [a, b]}\n',
     'camera_matrix.data must be a list of numbers'),
])
def test_a_bad_calibration_file_is_refused_naming_the_key_and_file(tmp_path, text, match):
    # Arrange
    path = tmp_path / 'camera.yaml'
    if text is not None:
        path.write_text(text)
    # Act / Assert
    with pytest.raises(ValueError, match=f"camera_info_url '{path}': {match}"):
        load_calibration(str(path))


def test_only_file_urls_and_paths_are_read(tmp_path):
    assert calibration_path('file:///etc/cam.yaml').as_posix() == '/etc/cam.yaml'
    assert calibration_path('/etc/cam.yaml').as_posix() == '/etc/cam.yaml'
    with pytest.raises(ValueError, match="camera_info_url 'package://.*only 'file:///path'"):
        calibration_path('package://my_cam/calib.yaml')
