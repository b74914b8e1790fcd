"""world.map_file as a GeoTIFF: a raster in any CRS placed in the local ENU frame and its codes
mapped to classes (fl_uav/world/raster.py, through fl_uav.fleet.world_setup.world_map)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from affine import Affine
from pyproj import Transformer

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.world_setup import world_map
from fl_uav.planning.geofence import Geofence
from fl_uav.world.geo import GeoOrigin, geodetic_to_enu
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import (
    CROP,
    FOREST,
    ROOF,
    UNKNOWN,
    WATER,
    WorldConfig,
)
from fl_uav.world.raster import GeoRaster

ORIGIN = GeoOrigin()          # PX4 SITL home, Zurich: UTM zone 32N
UTM_32N = 'EPSG:32632'
TO_UTM = Transformer.from_crs('EPSG:4326', UTM_32N, always_xy=True)
FROM_UTM = Transformer.from_crs(UTM_32N, 'EPSG:4326', always_xy=True)
X0, Y0 = TO_UTM.transform(ORIGIN.lon_deg, ORIGIN.lat_deg)   # the origin in UTM metres
WORLD = {'size_m': 400.0, 'resolution_m': 1.0, 'num_regions': 8,
         'region_radius_min_m': 10.0, 'region_radius_max_m': 50.0}
FENCE = Geofence(10.0, 10.0, 390.0, 390.0, 5.0, 120.0)


def pattern(dx_m, dy_m):
    """WorldCover codes at UTM offsets from the origin: four quadrants split at 200 m, a snow
    block (70, unmapped) in the tree quadrant and a nodata (0) strip across the north half."""
    dx_m, dy_m = np.asarray(dx_m), np.asarray(dy_m)
    codes = np.where(dy_m < 200.0, np.where(dx_m < 200.0, 10, 80),
                     np.where(dx_m < 200.0, 40, 50)).astype(np.uint8)
    codes[(dx_m >= 60) & (dx_m < 120) & (dy_m >= 60) & (dy_m < 120)] = 70
    codes[(dy_m >= 290) & (dy_m < 330)] = 0
    return codes


# (UTM offset east, north) from the origin -> the class world.class_map gives it
POINTS = [((30.0, 30.0), FOREST), ((150.0, 170.0), FOREST), ((90.0, 90.0), UNKNOWN),
          ((300.0, 100.0), WATER), ((380.0, 20.0), WATER), ((100.0, 250.0), CROP),
          ((300.0, 250.0), ROOF), ((350.0, 380.0), ROOF), ((100.0, 310.0), UNKNOWN),
          ((198.0, 100.0), FOREST), ((202.0, 100.0), WATER),      # 2 m either side of a
          ((100.0, 198.0), FOREST), ((100.0, 202.0), CROP)]       # class boundary


def write_raster(path, crs, span_m=(-100.0, 500.0), *, dtype='uint8', nodata=0):
    """The pattern over UTM offsets span_m x span_m: in UTM 32N with 5 m pixels, or in
    EPSG:4326 with ~1 m pixels (each pixel's code taken at its centre's UTM position)."""
    low, high = span_m
    if crs == UTM_32N:
        size_px, pixel = int((high - low) / 5.0), (5.0, 5.0)
        west, north = X0 + low, Y0 + high
        cols, rows = np.meshgrid(np.arange(size_px), np.arange(size_px))
        dx, dy = west + (cols + 0.5) * 5.0 - X0, north - (rows + 0.5) * 5.0 - Y0
        transform = north_up(west, north, *pixel)
    else:
        lon, lat = FROM_UTM.transform([X0 + low, X0 + high], [Y0 + low, Y0 + high])
        pixel = (0.000013, 0.000009)                            # ~1.0 m x 1.0 m
        west, north = lon[0] - 0.0002, lat[1] + 0.0002
        width = int((lon[1] + 0.0002 - west) / pixel[0])
        height = int((north - lat[0] + 0.0002) / pixel[1])
        cols, rows = np.meshgrid(np.arange(width), np.arange(height))
        x, y = TO_UTM.transform(west + (cols + 0.5) * pixel[0], north - (rows + 0.5) * pixel[1])
        dx, dy = np.asarray(x) - X0, np.asarray(y) - Y0
        transform = north_up(west, north, *pixel)
    codes = pattern(dx, dy).astype(dtype)
    with rasterio.open(path, 'w', driver='GTiff', width=codes.shape[1], height=codes.shape[0],
                       count=1, dtype=dtype, crs=crs, transform=transform, nodata=nodata) as out:
        out.write(codes, 1)
    return path


def north_up(west, north, x_size, y_size):
    """The affine transform of a north-up raster whose top-left corner is (west, north)."""
    return Affine(x_size, 0.0, west, 0.0, -y_size, north)


def enu_of(dx_m: float, dy_m: float) -> tuple[float, float]:
    """A UTM offset from the origin as ENU metres, through latitude and longitude."""
    lon, lat = FROM_UTM.transform(X0 + dx_m, Y0 + dy_m)
    east_m, north_m, _ = geodetic_to_enu(ORIGIN, lat, lon, ORIGIN.alt_amsl_m)
    return east_m, north_m


@pytest.fixture(scope='module', params=[UTM_32N, 'EPSG:4326'])
def raster_world(request, tmp_path_factory):
    path = write_raster(tmp_path_factory.mktemp('raster') / 'area.tif', request.param)
    return world_map(WorldConfig(**WORLD, map_file=str(path)), ORIGIN, FENCE)


def test_labels_at_known_lat_lon_match_the_raster(raster_world):
    # Act: each point's class from the world map at its ENU position
    got = [raster_world.class_at(*enu_of(*offset)) for offset, _ in POINTS]
    # Assert
    assert got == [expected for _, expected in POINTS]
    assert raster_world.size_m == 400.0 and raster_world.resolution_m == 1.0


def test_labels_at_known_drone_poses(raster_world):
    # Arrange: nadir camera, 60 degree field of view (35 m footprint at 30 m, 23 m at 20 m)
    labeler = MapLabeler(raster_world, fov_deg=60.0)
    poses = [((300.0, 100.0), 30.0, WATER), ((100.0, 250.0), 30.0, CROP),
             ((300.0, 250.0), 30.0, ROOF), ((40.0, 160.0), 30.0, FOREST),
             ((90.0, 90.0), 30.0, UNKNOWN),                  # over the unmapped snow block
             ((300.0, 310.0), 20.0, UNKNOWN)]                # over the nodata strip
    # Act
    got = [labeler.label(*enu_of(*offset), altitude_m, yaw_rad=0.7)
           for offset, altitude_m, _ in poses]
    # Assert
    assert got == [expected for _, _, expected in poses]


def test_the_unknown_share_is_the_nodata_strip_and_the_snow_block(raster_world):
    # 40 m of 400 m nodata, a 60 m x 60 m snow block, nothing outside the raster
    share = raster_world.unknown_fraction()
    assert share == pytest.approx((40 * 400 + 60 * 60) / 400 ** 2, abs=0.01)
    assert raster_world.class_fractions().sum() == pytest.approx(1.0 - share)


def test_a_raster_without_a_crs_is_refused_naming_the_file(tmp_path):
    # Arrange
    path = tmp_path / 'no_crs.tif'
    with rasterio.open(path, 'w', driver='GTiff', width=8, height=8, count=1, dtype='uint8',
                       transform=north_up(X0, Y0, 5.0, 5.0)) as out:
        out.write(np.full((8, 8), 10, np.uint8), 1)
    # Act / Assert
    with pytest.raises(ConfigError, match=r"world\.map_file: .*no_crs\.tif' has no CRS"):
        world_map(WorldConfig(**WORLD, map_file=str(path)), ORIGIN, FENCE)


def test_a_raster_that_does_not_cover_the_geofence_is_refused_naming_the_file(tmp_path):
    # Arrange: the raster ends 250 m east and north of the origin, the fence at 390 m
    path = write_raster(tmp_path / 'small.tif', UTM_32N, span_m=(-100.0, 250.0))
    # Act / Assert
    with pytest.raises(ConfigError, match=r"small\.tif' does not cover the geofence") as error:
        world_map(WorldConfig(**WORLD, map_file=str(path)), ORIGIN, FENCE)
    assert 'is outside the raster' in str(error.value)
    # the same raster is fine for a fence it covers
    small_fence = Geofence(10.0, 10.0, 200.0, 200.0, 5.0, 120.0)
    assert world_map(WorldConfig(**WORLD, map_file=str(path)), ORIGIN, small_fence)


def test_a_class_map_naming_an_unknown_class_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"'world'.*class_map entry '10:tree' names the "
                                          r"unknown class 'tree'; classes: water, forest"):
        build_config(FleetConfig, {'world.class_map': ['10:forest', '10:tree']})


@pytest.mark.parametrize(('entries', 'words'), [
    (['10'], "is not 'code:class'"), (['ten:forest'], "the code 'ten' is not an integer"),
    (['10:forest', '10:grass'], 'maps the code 10 twice')])
def test_a_malformed_class_map_is_refused_naming_the_key(entries, words):
    with pytest.raises(ConfigError, match='class_map') as error:
        build_config(FleetConfig, {'world.class_map': entries})
    assert words in str(error.value)


def test_a_class_map_for_another_product_is_refused_naming_the_file_and_key(tmp_path):
    # Arrange: codes 10..80 in the file, a map of CORINE-like codes
    path = write_raster(tmp_path / 'area.tif', UTM_32N)
    config = WorldConfig(**WORLD, map_file=str(path), class_map=('311:forest', '512:water'))
    # Act / Assert
    with pytest.raises(ConfigError, match=r"area\.tif' inside the geofence maps to a class: "
                                          r'world\.class_map maps the codes 311, 512'):
        world_map(config, ORIGIN, FENCE)


def test_a_raster_of_float_values_is_refused_naming_the_file(tmp_path):
    path = write_raster(tmp_path / 'float.tif', UTM_32N, dtype='float32')
    with pytest.raises(ConfigError, match=r"float\.tif' holds float32 values"):
        world_map(WorldConfig(**WORLD, map_file=str(path)), ORIGIN, FENCE)


def test_a_raster_needs_the_enu_origin(tmp_path):
    path = write_raster(tmp_path / 'area.tif', UTM_32N)
    with pytest.raises(ValueError, match='needs the ENU origin'):
        world_map(WorldConfig(**WORLD, map_file=str(path)))


def test_the_interpolated_placement_matches_the_exact_transform(tmp_path):
    # Arrange: a 0.5 m raster in a CRS far from conformal at this place (web mercator)
    path = tmp_path / 'mercator.tif'
    x, y = Transformer.from_crs('EPSG:4326', 'EPSG:3857', always_xy=True).transform(
        ORIGIN.lon_deg, ORIGIN.lat_deg)
    with rasterio.open(path, 'w', driver='GTiff', width=2000, height=2000, count=1,
                       dtype='uint16', crs='EPSG:3857',
                       transform=north_up(x - 100.0, y + 900.0, 0.5, 0.5)) as out:
        out.write(np.arange(2000 * 2000, dtype=np.uint32).reshape(2000, 2000).astype(np.uint16)
                  % 1000 + 1, 1)
    config = WorldConfig(**WORLD, map_file=str(path),
                         class_map=tuple(f'{c}:{"forest" if c % 2 else "water"}'
                                         for c in range(1, 1001)))
    rng = np.random.default_rng(0)
    cells = rng.integers(0, 400, (200, 2))
    # Act
    with GeoRaster(path, ORIGIN) as raster:
        world = raster.to_world(config)
        col, row = raster.pixel_at(cells[:, 1] + 0.5, cells[:, 0] + 0.5)
    # Assert: each cell took the code of the pixel under its centre (exact transform), unless
    # that centre is within 0.01 pixel of a pixel edge
    with rasterio.open(path) as src:
        codes = src.read(1)[np.floor(row).astype(int), np.floor(col).astype(int)]
    clear = np.minimum(np.abs(col - np.round(col)), np.abs(row - np.round(row))) > 0.01
    expected = np.where(codes % 2 == 1, FOREST, WATER)
    got = world.class_grid[cells[:, 0], cells[:, 1]]
    assert clear.sum() > 180
    np.testing.assert_array_equal(got[clear], expected[clear])
