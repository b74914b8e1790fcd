"""Pose sampling, rendered datasets, the held-out set and the model input transform."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.world.camera import AerialRenderer, CameraConfig
from fl_uav.world.dataset import (
    MODEL_INPUT_MEAN,
    MODEL_INPUT_STD,
    heldout_set,
    render_dataset,
    sample_poses,
    to_model_input,
)
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import SAND, UNKNOWN, LandCoverMap


def test_sample_poses_in_world_and_altitude_band(small_world):
    # Arrange
    rng = np.random.default_rng(0)

    # Act
    poses = sample_poses(small_world, 500, rng, altitude_range_m=(25.0, 35.0))

    # Assert
    assert poses.shape == (500, 4)
    assert poses.dtype == np.float64
    assert np.all((poses[:, :2] >= 0.0) & (poses[:, :2] < small_world.size_m))
    assert np.all((poses[:, 2] >= 25.0) & (poses[:, 2] <= 35.0))
    assert np.all(np.abs(poses[:, 3]) <= np.pi)


def test_sample_poses_in_a_region(small_world):
    # Arrange
    region = (100.0, 50.0, 150.0, 80.0)

    # Act
    poses = sample_poses(small_world, 300, np.random.default_rng(1), region=region)

    # Assert
    assert np.all((poses[:, 0] >= 100.0) & (poses[:, 0] <= 150.0))
    assert np.all((poses[:, 1] >= 50.0) & (poses[:, 1] <= 80.0))


def test_sample_poses_rejects_a_region_outside_the_world(small_world):
    # Act / Assert
    with pytest.raises(ValueError, match='region'):
        sample_poses(small_world, 10, np.random.default_rng(0), region=(500.0, 0.0, 600.0, 10.0))


def test_render_dataset_shapes_and_labels(small_world):
    # Arrange
    camera = CameraConfig()
    renderer = AerialRenderer(small_world, camera, seed=0)
    labeler = MapLabeler(small_world, camera.fov_deg)
    rng = np.random.default_rng(2)
    poses = sample_poses(small_world, 40, rng)

    # Act
    images, labels = render_dataset(small_world, renderer, labeler, poses, rng)

    # Assert
    assert images.shape == (40, 64, 64, 3)
    assert images.dtype == np.uint8
    assert labels.shape == (40,)
    assert labels.dtype == np.int64
    assert np.all((labels >= 0) & (labels < small_world.num_classes))
    expected = [labeler.label(*pose) for pose in poses]
    assert labels.tolist() == expected


def test_heldout_set_is_fixed_cached_and_read_only(small_world):
    # Arrange
    camera = CameraConfig()

    # Act
    images, labels = heldout_set(small_world, camera, n=60, seed=4)
    again_images, again_labels = heldout_set(small_world, camera, n=60, seed=4)
    other_images, _ = heldout_set(small_world, camera, n=60, seed=5)

    # Assert
    assert images.shape == (60, 64, 64, 3)
    assert labels.shape == (60,)
    assert again_images is images and again_labels is labels
    assert not images.flags.writeable
    assert not np.array_equal(images, other_images)


def test_heldout_set_is_deterministic_across_cache_clears(small_world):
    # Arrange
    from fl_uav.world import dataset
    camera = CameraConfig()
    first_images, first_labels = heldout_set(small_world, camera, n=30, seed=9)
    first_images, first_labels = first_images.copy(), first_labels.copy()
    dataset._heldout_cached.cache_clear()

    # Act
    images, labels = heldout_set(small_world, camera, n=30, seed=9)

    # Assert
    assert np.array_equal(images, first_images)
    assert np.array_equal(labels, first_labels)


def test_heldout_set_of_the_default_world_has_several_classes(default_world):
    # Act
    _, labels = heldout_set(default_world, CameraConfig(), n=200, seed=12345)

    # Assert
    assert len(np.unique(labels)) >= 6


def test_heldout_set_leaves_out_frames_over_unknown_land_cover():
    # Arrange: 200 m world, unknown land cover (a raster's nodata) west of 100 m, sand east
    grid = np.full((200, 200), SAND, np.uint8)
    grid[:, :100] = UNKNOWN
    world = LandCoverMap(grid, 1.0)
    camera = CameraConfig(image_px=32)
    # Act
    images, labels = heldout_set(world, camera, n=40, seed=3)
    # Assert: about half the poses are over the unknown half; the rest are sand
    assert 8 <= len(labels) <= 32 and len(images) == len(labels)
    assert set(labels.tolist()) == {SAND}


def test_to_model_input_shape_dtype_and_normalisation():
    # Arrange
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 64, 64, 3), dtype=np.uint8)
    grey = np.full((1, 64, 64, 3), 255, np.uint8)

    # Act
    inputs = to_model_input(images, input_px=32)
    white = to_model_input(grey, input_px=16)

    # Assert
    assert inputs.shape == (5, 3, 32, 32)
    assert inputs.dtype == np.float32
    assert inputs.flags.c_contiguous
    assert white.shape == (1, 3, 16, 16)
    np.testing.assert_allclose(white[0, :, 0, 0], (1.0 - MODEL_INPUT_MEAN) / MODEL_INPUT_STD,
                               rtol=1e-5)


def test_to_model_input_accepts_frames_already_at_input_size():
    # Arrange: the drone buffers 32 px frames
    images = np.full((3, 32, 32, 3), 128, np.uint8)

    # Act
    inputs = to_model_input(images, input_px=32)

    # Assert
    assert inputs.shape == (3, 3, 32, 32)
    np.testing.assert_allclose(inputs[:, 0], (128 / 255 - MODEL_INPUT_MEAN[0])
                               / MODEL_INPUT_STD[0], rtol=1e-5)


def test_to_model_input_rejects_wrong_shape():
    # Act / Assert
    with pytest.raises(ValueError, match='N×H×W×3'):
        to_model_input(np.zeros((32, 32, 3), np.uint8))
