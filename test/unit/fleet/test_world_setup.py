"""world.map_file: a real area's land-cover raster in place of the generated world."""

import numpy as np
import pytest

from fl_uav.configschema import ConfigError
from fl_uav.fleet.world_setup import world_map
from fl_uav.world.landcover import CLASS_NAMES, LandCoverMap, WorldConfig

SMALL = {'size_m': 200.0, 'resolution_m': 2.0, 'num_regions': 8,
         'region_radius_min_m': 10.0, 'region_radius_max_m': 50.0}


def _area_file(tmp_path, cells=100, resolution_m=2.0, names=CLASS_NAMES):
    # A surveyed area: stripes of every class (not a generated world)
    grid = (np.arange(cells)[None, :] * len(names) // cells).repeat(cells, axis=0)
    path = tmp_path / 'area.npz'
    LandCoverMap(grid.astype(np.uint8), resolution_m, class_names=names).save(path)
    return path, grid


def test_the_map_file_replaces_the_generated_world(tmp_path):
    # Arrange
    path, grid = _area_file(tmp_path)
    # Act
    land = world_map(WorldConfig(**SMALL, map_file=str(path)))
    # Assert
    np.testing.assert_array_equal(land.class_grid, grid)
    assert not np.array_equal(world_map(WorldConfig(**SMALL)).class_grid, grid)


@pytest.mark.parametrize(('file_kwargs', 'words'), [
    ({'cells': 50}, 'world.size_m 200.0 in the config, 100.0 in the file'),
    ({'cells': 200, 'resolution_m': 1.0}, 'world.resolution_m 2.0 in the config, 1.0'),
    ({'names': tuple(f'c{i}' for i in range(len(CLASS_NAMES)))}, "classes ['c0'"),
])
def test_a_map_file_that_does_not_fit_the_config_is_named(tmp_path, file_kwargs, words):
    # Arrange
    path, _ = _area_file(tmp_path, **file_kwargs)
    # Act / Assert
    with pytest.raises(ConfigError, match='does not fit the fleet config') as error:
        world_map(WorldConfig(**SMALL, map_file=str(path)))
    assert words in str(error.value)


def test_a_missing_map_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r'world\.map_file: .*nowhere\.npz'):
        world_map(WorldConfig(**SMALL, map_file=str(tmp_path / 'nowhere.npz')))
