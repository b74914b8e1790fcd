"""Map labeler: majority class under the footprint."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import FOREST, SAND, UNKNOWN, WATER, LandCoverMap


@pytest.mark.parametrize('east_m, expected', [
    (20.0, WATER),   # footprint 23 m wide, all water
    (80.0, SAND),    # all sand
    (44.0, WATER),   # footprint 32.5..55.5: 76 % water
    (55.0, SAND),    # footprint 43.5..66.5: 72 % sand
])
def test_label_is_the_majority_class(water_sand_map, east_m, expected):
    # Arrange
    labeler = MapLabeler(water_sand_map, fov_deg=60.0)

    # Act
    label = labeler.label(east_m, 50.0, 20.0, 0.0)

    # Assert
    assert label == expected


def test_label_fractions_split_at_the_boundary(water_sand_map):
    # Arrange
    labeler = MapLabeler(water_sand_map, fov_deg=60.0)

    # Act: footprint 23.1 m centred 5 m east of the water edge
    fractions = labeler.label_fractions(55.0, 50.0, 20.0, 0.0)

    # Assert
    assert fractions.shape == (water_sand_map.num_classes,)
    assert fractions.sum() == pytest.approx(1.0)
    assert fractions[WATER] == pytest.approx(0.5 - 5.0 / footprint_side(20.0), abs=0.05)
    assert fractions[SAND] == pytest.approx(0.5 + 5.0 / footprint_side(20.0), abs=0.05)


def footprint_side(altitude_m: float) -> float:
    return 2.0 * altitude_m * math.tan(math.radians(30.0))


def test_label_follows_yaw_on_a_strip():
    # Arrange: a 10 m wide north-south forest strip across a water map (1 m cells)
    grid = np.full((100, 100), WATER, np.uint8)
    grid[:, 45:55] = FOREST
    world = LandCoverMap(grid, 1.0)
    labeler = MapLabeler(world, fov_deg=60.0, samples_per_side=64)
    side = footprint_side(15.0)
    half_diagonal = side / math.sqrt(2.0)

    # Act: rotated by 45° the square footprint is a diamond, more of it on the strip
    straight = labeler.label_fractions(50.0, 50.0, 15.0, 0.0)
    diagonal = labeler.label_fractions(50.0, 50.0, 15.0, math.pi / 4)

    # Assert
    assert straight[FOREST] == pytest.approx(10.0 / side, abs=0.03)
    assert diagonal[FOREST] == pytest.approx(1.0 - (1.0 - 5.0 / half_diagonal) ** 2, abs=0.03)


def test_footprint_outside_the_world_still_gets_a_valid_label(water_sand_map):
    # Arrange
    labeler = MapLabeler(water_sand_map, fov_deg=60.0)

    # Act
    partly = labeler.label_fractions(99.0, 50.0, 20.0, 0.0)
    far_east = labeler.label(500.0, 50.0, 20.0, 0.0)
    far_west = labeler.label(-500.0, 50.0, 20.0, 0.0)

    # Assert: points outside are ignored; a footprint wholly outside takes the nearest edge
    assert partly[SAND] == pytest.approx(1.0)
    assert far_east == SAND
    assert far_west == WATER


def test_labeler_agrees_with_the_class_at_the_centre_on_a_generated_world(default_world):
    # Arrange
    labeler = MapLabeler(default_world, fov_deg=60.0)
    rng = np.random.default_rng(0)
    points = rng.uniform(50.0, 1150.0, (300, 2))

    # Act
    agree = np.mean([labeler.label(e, n, 5.0) == default_world.class_at(e, n)
                     for e, n in points])

    # Assert: at 5 m the footprint is 5.8 m, so the centre class mostly wins
    assert agree > 0.9


def test_labeler_validates_fov(water_sand_map):
    # Act / Assert
    with pytest.raises(ValueError, match='fov_deg'):
        MapLabeler(water_sand_map, fov_deg=0.0)


@pytest.mark.parametrize('pose', [
    (math.nan, 50.0, 20.0, 0.0), (50.0, math.inf, 20.0, 0.0), (50.0, 50.0, math.nan, 0.0),
    (50.0, 50.0, 20.0, math.inf),
])
def test_label_refuses_a_non_finite_pose(water_sand_map, pose):
    # Arrange
    labeler = MapLabeler(water_sand_map, fov_deg=60.0)

    # Act / Assert: no class is honest for it (it used to be a silent class id)
    with pytest.raises(ValueError, match='camera pose must be finite'):
        labeler.label(*pose)
    with pytest.raises(ValueError, match='camera pose must be finite'):
        labeler.label_fractions(*pose)


def test_label_refuses_a_position_too_far_out_to_index(water_sand_map):
    # Arrange
    labeler = MapLabeler(water_sand_map, fov_deg=60.0)

    # Act / Assert: finite, but its cell index would overflow an int64
    with pytest.raises(ValueError, match='out of range'):
        labeler.label(1e300, 50.0, 20.0, 0.0)


@pytest.mark.parametrize('east_m, expected', [
    (20.0, UNKNOWN),   # footprint all unknown
    (44.0, UNKNOWN),   # 76 % unknown
    (55.0, SAND),      # 28 % unknown, 72 % sand
    (80.0, SAND),
])
def test_a_footprint_mostly_over_unknown_cells_gets_no_label(east_m, expected):
    # Arrange: unknown west of 50 m (a raster's nodata), sand east of it
    grid = np.full((200, 200), SAND, np.uint8)
    grid[:, :100] = UNKNOWN
    labeler = MapLabeler(LandCoverMap(grid, 0.5), fov_deg=60.0)
    # Act
    label = labeler.label(east_m, 50.0, 20.0, 0.0)
    fractions = labeler.label_fractions(east_m, 50.0, 20.0, 0.0)
    # Assert
    assert label == expected
    assert fractions.shape == (7,) and fractions[SAND] == pytest.approx(fractions.sum())
