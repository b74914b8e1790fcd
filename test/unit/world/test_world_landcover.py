"""Land-cover map generation, convention, validation and file round-trip."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fl_uav.world.landcover import (
    CLASS_NAMES,
    GRASS,
    MIN_CLASS_SHARE,
    ROAD,
    ROOF,
    SAND,
    UNKNOWN,
    WATER,
    WORLDCOVER_CLASS_MAP,
    ClassRegion,
    LandCoverMap,
    MapFileError,
    WorldConfig,
    generate_world,
    parse_class_map,
)

from .conftest import SMALL_CONFIG


def test_generation_is_deterministic_for_a_seed(small_world):
    # Arrange / Act
    again = generate_world(SMALL_CONFIG)

    # Assert
    assert np.array_equal(again.class_grid, small_world.class_grid)
    assert again.regions == small_world.regions
    assert again == small_world


def test_generation_differs_across_seeds(small_world):
    # Arrange
    other_config = dataclasses.replace(SMALL_CONFIG, seed=SMALL_CONFIG.seed + 1)

    # Act
    other = generate_world(other_config)

    # Assert
    differing = float(np.mean(other.class_grid != small_world.class_grid))
    assert differing > 0.3
    assert other != small_world


def test_default_world_has_every_class_with_a_meaningful_share(default_world):
    # Act
    shares = default_world.class_fractions()

    # Assert
    assert len(CLASS_NAMES) >= 6
    assert default_world.class_names == CLASS_NAMES
    assert shares.shape == (len(CLASS_NAMES),)
    assert shares.sum() == pytest.approx(1.0)
    assert shares.min() >= MIN_CLASS_SHARE, dict(zip(CLASS_NAMES, shares.round(3)))


def test_default_world_geometry(default_world):
    # Assert
    assert default_world.size_m == pytest.approx(1200.0)
    assert default_world.resolution_m == pytest.approx(0.5)
    assert default_world.class_grid.shape == (2400, 2400)
    assert default_world.class_grid.dtype == np.uint8
    assert len(default_world.regions) == WorldConfig().num_regions


def test_region_centres_carry_their_region_class(default_world):
    # Arrange
    natural = [r for r in default_world.regions if r.class_id != ROOF]
    villages = [r for r in default_world.regions if r.class_id == ROOF]

    # Act
    natural_hits = np.mean([default_world.class_at(*r.center_enu_m) == r.class_id
                            for r in natural])
    village_roof_shares = []
    for region in villages:
        east, north = region.center_enu_m
        col, row = int(east / 0.5), int(north / 0.5)
        window = default_world.class_grid[max(0, row - 40):row + 40, max(0, col - 40):col + 40]
        village_roof_shares.append(float(np.mean(window == ROOF)))

    # Assert: a village centre is a house, a yard or a street, and villages are mostly roofs
    assert natural_hits >= 0.8
    assert villages, 'the default world has villages'
    assert all(default_world.class_at(*r.center_enu_m) in (ROOF, ROAD, GRASS) for r in villages)
    assert np.mean(village_roof_shares) >= 0.3


def test_classes_cluster_in_space(default_world):
    # Arrange: pairs of cells 10 m apart (20 cells) versus random pairs
    grid = default_world.class_grid
    rng = np.random.default_rng(0)
    count = 20000
    rows = rng.integers(0, grid.shape[0] - 20, count)
    cols = rng.integers(0, grid.shape[1] - 20, count)
    other_rows = rng.integers(0, grid.shape[0], count)
    other_cols = rng.integers(0, grid.shape[1], count)

    # Act
    same_near = float(np.mean(grid[rows, cols] == grid[rows + 20, cols + 0]))
    same_near_east = float(np.mean(grid[rows, cols] == grid[rows, cols + 20]))
    same_random = float(np.mean(grid[rows, cols] == grid[other_rows, other_cols]))

    # Assert
    assert same_near > same_random + 0.4
    assert same_near_east > same_random + 0.4


def test_class_at_uses_row_north_col_east_convention():
    # Arrange: the southern row of cells is water, the rest sand; 1 m cells
    grid = np.full((10, 10), SAND, np.uint8)
    grid[0, :] = WATER
    grid[:, 9] = GRASS  # the eastern column
    world = LandCoverMap(grid, 1.0)

    # Act / Assert
    assert world.class_at(east_m=4.5, north_m=0.5) == WATER
    assert world.class_at(east_m=4.5, north_m=9.5) == SAND
    assert world.class_at(east_m=9.5, north_m=5.0) == GRASS
    assert world.class_at(east_m=0.0, north_m=5.0) == SAND


def test_class_at_outside_the_world_raises():
    # Arrange
    world = LandCoverMap(np.zeros((10, 10), np.uint8), 1.0)

    # Act / Assert
    with pytest.raises(ValueError, match='outside the world'):
        world.class_at(-0.1, 5.0)
    with pytest.raises(ValueError, match='outside the world'):
        world.class_at(5.0, 10.0)


def test_class_grid_is_read_only(small_world):
    # Act / Assert
    with pytest.raises(ValueError):
        small_world.class_grid[0, 0] = 0


@pytest.mark.parametrize('field, value', [
    ('seed', -1),
    ('size_m', 50.0),
    ('resolution_m', 0.0),
    ('num_regions', 2),
    ('region_radius_min_m', 1.0),
    ('region_radius_max_m', 10.0),
])
def test_world_config_validation_names_the_field(field, value):
    # Act / Assert
    with pytest.raises(ValueError, match=field):
        WorldConfig(**{field: value})


def test_world_config_rejects_too_many_cells():
    # Act / Assert
    with pytest.raises(ValueError, match='resolution_m'):
        WorldConfig(size_m=20000.0, resolution_m=0.1)


def test_save_load_round_trip(tmp_path, small_world):
    # Arrange
    path = tmp_path / 'map.npz'

    # Act
    small_world.save(path)
    loaded = LandCoverMap.load(path)

    # Assert
    assert np.array_equal(loaded.class_grid, small_world.class_grid)
    assert loaded.resolution_m == small_world.resolution_m
    assert loaded.class_names == small_world.class_names
    assert loaded.regions == small_world.regions
    assert loaded.seed == small_world.seed
    assert loaded == small_world


def test_save_writes_exactly_the_given_file_name(tmp_path):
    # Arrange
    world = LandCoverMap(np.zeros((4, 4), np.uint8), 1.0,
                         regions=(ClassRegion(0, (1.0, 2.0), (3.0, 1.5), 0.25),))
    path = tmp_path / 'raster.landcover'

    # Act
    world.save(path)

    # Assert
    assert path.is_file()
    assert LandCoverMap.load(path).regions == world.regions


def test_load_missing_file_names_it(tmp_path):
    # Arrange
    path = tmp_path / 'nowhere.npz'

    # Act / Assert
    with pytest.raises(FileNotFoundError, match='nowhere.npz'):
        LandCoverMap.load(path)


def test_load_corrupt_file_names_it(tmp_path):
    # Arrange
    path = tmp_path / 'corrupt.npz'
    path.write_bytes(b'this is not a zip archive')

    # Act / Assert
    with pytest.raises(MapFileError, match='corrupt.npz'):
        LandCoverMap.load(path)


def test_load_npz_without_map_fields_names_it(tmp_path):
    # Arrange
    path = tmp_path / 'other.npz'
    np.savez(path, something=np.arange(3))

    # Act / Assert
    with pytest.raises(MapFileError, match='other.npz'):
        LandCoverMap.load(path)


def test_map_rejects_classes_beyond_its_names():
    # Act / Assert
    with pytest.raises(ValueError, match='class names'):
        LandCoverMap(np.full((4, 4), 9, np.uint8), 1.0)


def test_map_holds_unknown_cells_and_counts_them_apart():
    # Arrange: a quarter unknown, the rest water
    grid = np.full((4, 4), WATER, np.uint8)
    grid[:2, :2] = UNKNOWN
    # Act
    land = LandCoverMap(grid, 1.0)
    # Assert
    assert land.class_at(0.5, 0.5) == UNKNOWN and land.class_at(3.5, 3.5) == WATER
    assert land.unknown_fraction() == 0.25
    assert land.class_fractions().shape == (len(CLASS_NAMES),)
    assert land.class_fractions()[WATER] == 0.75


def test_unknown_cells_survive_the_file_round_trip(tmp_path):
    grid = np.full((4, 4), ROAD, np.uint8)
    grid[3, :] = UNKNOWN
    LandCoverMap(grid, 1.0).save(tmp_path / 'area.npz')
    assert np.array_equal(LandCoverMap.load(tmp_path / 'area.npz').class_grid, grid)


def test_the_worldcover_class_map_maps_the_esa_codes():
    # Act
    classes = {code: CLASS_NAMES[c] for code, c in parse_class_map(WORLDCOVER_CLASS_MAP).items()}
    # Assert: snow and ice (70), moss and lichen (100) and nodata (0) stay unknown
    assert classes == {10: 'forest', 20: 'grass', 30: 'grass', 40: 'crop', 50: 'roof',
                       60: 'sand', 80: 'water', 90: 'grass', 95: 'forest'}
    assert WorldConfig().class_map == WORLDCOVER_CLASS_MAP
