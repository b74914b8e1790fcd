"""Downward camera: footprint, image geometry, yaw convention, border and nuisances."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_uav.world.camera import (
    BORDER_RGB,
    AerialRenderer,
    CameraConfig,
    footprint_m,
    world_texture,
)
from fl_uav.world.landcover import SAND, WATER

CLEAN = CameraConfig(noise_std=0.0, blur_max_px=0.0, illumination_min=1.0,
                     illumination_max=1.0)


@pytest.mark.parametrize('altitude_m, fov_deg, expected_m', [
    (30.0, 60.0, 2.0 * 30.0 * math.tan(math.radians(30.0))),
    (10.0, 90.0, 20.0),
    (25.0, 60.0, 28.867513459481287),
])
def test_footprint_formula(altitude_m, fov_deg, expected_m):
    # Act / Assert
    assert footprint_m(altitude_m, fov_deg) == pytest.approx(expected_m)


def test_footprint_rejects_non_positive_altitude():
    # Act / Assert
    with pytest.raises(ValueError, match='altitude_m'):
        footprint_m(0.0, 60.0)


NAN, INF = float('nan'), float('inf')


@pytest.mark.parametrize('pose', [
    (NAN, 200.0, 30.0, 0.0), (200.0, INF, 30.0, 0.0), (200.0, 200.0, NAN, 0.0),
    (200.0, 200.0, 30.0, INF), (200.0, 200.0, 30.0, NAN),
])
def test_render_refuses_a_non_finite_pose_by_name(small_world, pose):
    # Arrange
    renderer = AerialRenderer(small_world, CameraConfig(), seed=0)

    # Act / Assert: a clear ValueError, not a silent frame or a math domain error
    with pytest.raises(ValueError, match='camera pose must be finite'):
        renderer.render(*pose, np.random.default_rng(0))


def test_footprint_refuses_a_nan_altitude():
    # Act / Assert
    with pytest.raises(ValueError, match='finite'):
        footprint_m(NAN, 60.0)


def test_render_shape_and_dtype(small_world):
    # Arrange
    renderer = AerialRenderer(small_world, CameraConfig(), seed=0)
    rng = np.random.default_rng(0)

    # Act
    image = renderer.render(200.0, 200.0, 30.0, 0.3, rng)

    # Assert
    assert image.shape == (64, 64, 3)
    assert image.dtype == np.uint8


def test_render_honours_image_px(small_world):
    # Arrange
    renderer = AerialRenderer(small_world, CameraConfig(image_px=40), seed=0)

    # Act
    image = renderer.render(200.0, 200.0, 30.0, 0.0, np.random.default_rng(0))

    # Assert
    assert image.shape == (40, 40, 3)


def test_texture_covers_the_map_and_is_deterministic(small_world):
    # Act
    texture = world_texture(small_world)

    # Assert
    cells = small_world.cells_per_side
    assert texture.shape == (cells, cells, 3)
    assert texture.dtype == np.uint8
    assert world_texture(small_world) is texture


def test_yaw_rotates_the_image(small_world):
    # Arrange
    renderer = AerialRenderer(small_world, CLEAN, seed=0)

    # Act
    base = renderer.render_clean(200.0, 200.0, 30.0, 0.0).astype(np.int16)
    turned = renderer.render_clean(200.0, 200.0, 30.0, 1.0).astype(np.int16)
    full_turn = renderer.render_clean(200.0, 200.0, 30.0, 2 * math.pi).astype(np.int16)
    half_turn = renderer.render_clean(200.0, 200.0, 30.0, math.pi).astype(np.int16)

    # Assert
    assert np.abs(base - turned).mean() > 5.0
    assert np.abs(base - full_turn).max() <= 1
    # Half a turn is the image rotated by 180° (up to the half-cell sampling offset).
    assert np.abs(base[2:-2, 2:-2] - half_turn[::-1, ::-1][2:-2, 2:-2]).mean() < 6.0


def test_yaw_convention_north_up_and_south_up(water_sand_map):
    # Arrange: water is west (east_m < 50), sand east; camera over the boundary
    renderer = AerialRenderer(water_sand_map, CLEAN, seed=0)

    # Act
    north_up = renderer.render_clean(50.0, 50.0, 20.0, math.pi / 2).mean(axis=2)
    south_up = renderer.render_clean(50.0, 50.0, 20.0, -math.pi / 2).mean(axis=2)
    east_up = renderer.render_clean(50.0, 50.0, 20.0, 0.0).mean(axis=2)

    # Assert: facing north, west (water, dark) is left; facing south it is right;
    # facing east, the sand is ahead (top of the image)
    assert north_up[:, :24].mean() + 40 < north_up[:, 40:].mean()
    assert south_up[:, 40:].mean() + 40 < south_up[:, :24].mean()
    assert east_up[40:, :].mean() + 40 < east_up[:24, :].mean()


def test_class_colours_differ_on_a_hand_built_map(water_sand_map):
    # Arrange
    texture = world_texture(water_sand_map).astype(np.float32)
    grid = water_sand_map.class_grid

    # Act
    water = texture[grid == WATER].mean(axis=0)
    sand = texture[grid == SAND].mean(axis=0)

    # Assert: water is darker and bluer than sand
    assert water.sum() < sand.sum()
    assert water[2] / water.sum() > sand[2] / sand.sum()


def test_outside_the_world_renders_the_border_colour(small_world):
    # Arrange
    renderer = AerialRenderer(small_world, CLEAN, seed=0)

    # Act
    outside = renderer.render_clean(-500.0, -500.0, 30.0, 0.4)
    straddling = renderer.render_clean(0.0, 200.0, 30.0, math.pi / 2)

    # Assert
    assert np.all(outside == np.array(BORDER_RGB, np.uint8))
    west_half = straddling[:, :28].reshape(-1, 3)
    assert np.all(west_half == np.array(BORDER_RGB, np.uint8))
    assert not np.all(straddling[:, 36:] == np.array(BORDER_RGB, np.uint8))


def test_altitude_scales_the_footprint(water_sand_map):
    # Arrange: over sand, 10 m east of the water edge
    renderer = AerialRenderer(water_sand_map, CLEAN, seed=0)

    # Act: at 10 m the footprint (11.5 m) is all sand; at 60 m (69 m) it reaches the water
    low = renderer.render_clean(60.0, 50.0, 10.0, math.pi / 2).mean(axis=2)
    high = renderer.render_clean(60.0, 50.0, 60.0, math.pi / 2).mean(axis=2)

    # Assert
    assert high[:, :8].mean() + 40 < high[:, -8:].mean()
    assert high[:, :8].mean() + 40 < low[:, :8].mean()


def test_nuisance_is_reproducible_for_a_generator_and_random_across_draws(small_world):
    # Arrange
    renderer = AerialRenderer(small_world, CameraConfig(), seed=0)

    # Act
    first = renderer.render(200.0, 200.0, 30.0, 0.0, np.random.default_rng(5))
    again = renderer.render(200.0, 200.0, 30.0, 0.0, np.random.default_rng(5))
    rng = np.random.default_rng(6)
    other = renderer.render(200.0, 200.0, 30.0, 0.0, rng)
    later = renderer.render(200.0, 200.0, 30.0, 0.0, rng)

    # Assert
    assert np.array_equal(first, again)
    assert not np.array_equal(other, later)


def test_render_without_generator_uses_the_renderer_seed(small_world):
    # Arrange
    a = AerialRenderer(small_world, CameraConfig(), seed=11)
    b = AerialRenderer(small_world, CameraConfig(), seed=11)

    # Act / Assert
    assert np.array_equal(a.render(100.0, 100.0, 25.0, 0.0), b.render(100.0, 100.0, 25.0, 0.0))


@pytest.mark.parametrize('field, value', [
    ('image_px', 4),
    ('fov_deg', 179.0),
    ('noise_std', -1.0),
    ('blur_max_px', 20.0),
    ('illumination_min', 0.0),
    ('illumination_max', 0.5),
    ('min_altitude_m', 0.0),
])
def test_camera_config_validation_names_the_field(field, value):
    # Act / Assert
    with pytest.raises(ValueError, match=field):
        CameraConfig(**{field: value})
