"""The shipped Gazebo world (sim/worlds): its ground shows the land-cover map where the map is.

The texture is checked through the SDF as Gazebo reads it: the plane's size and pose give the
world point under each texture pixel (gz-common MeshManager::CreatePlane: u from west to east,
v = 0 at the north edge, see fl_uav.world.gz_world), and the pixel there must be the colour the
embedded camera renders at that point, over the class the drones' labeler reads there.
"""

from __future__ import annotations

import hashlib
import math
import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest

from fl_uav.cli import main
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet_run.launch_plan import merged_parameters
from fl_uav.world.camera import world_texture
from fl_uav.world.gz_world import (
    MAX_PNG_BYTES,
    WORLD_NAME,
    GroundPlacement,
    ground_image,
    pixel_of,
    png_bytes,
    read_png,
    world_sdf,
)
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import LandCoverMap

REPO = Path(__file__).resolve().parents[3]
WORLDS = REPO / 'sim' / 'worlds'
SDF = WORLDS / f'{WORLD_NAME}.sdf'
POINTS = 200


@pytest.fixture(scope='module')
def fleet() -> FleetConfig:
    return build_config(FleetConfig, merged_parameters([REPO / 'config' / 'fleet.yaml'], {}))


@pytest.fixture(scope='module')
def ground(default_world: LandCoverMap) -> dict:
    """The shipped SDF's ground (size, pose, texture file) and the texture as an array."""
    root = ElementTree.parse(SDF).getroot()
    (model,) = [m for m in root.iter('model') if m.get('name') == 'landcover_ground']
    (visual,) = model.iter('visual')
    size = [float(v) for v in visual.find('geometry/plane/size').text.split()]
    normal = [float(v) for v in visual.find('geometry/plane/normal').text.split()]
    pose = [float(v) for v in model.find('pose').text.split()]
    albedo = visual.find('material/pbr/metal/albedo_map').text
    png = SDF.parent / albedo   # gz-sim resolves a relative URI against the SDF's directory
    return {'size': size, 'normal': normal, 'pose': pose, 'png': png,
            'image': read_png(png)}


def _sample_points(size_m: float) -> np.ndarray:
    return np.random.default_rng(2024).uniform(0.0, size_m, (POINTS, 2))


def _matches(image: np.ndarray, placement: GroundPlacement, world: LandCoverMap,
             labeler: MapLabeler) -> tuple[int, int]:
    """Of the sampled world points: how many show, at the pixel Gazebo draws there, a colour the
    embedded camera renders within the pixel's square; and how many of those show it from a cell
    of the class the labeler reads at the point."""
    texture = world_texture(world)
    stride = world.cells_per_side // image.shape[0]
    colour_ok = class_ok = 0
    for east, north in _sample_points(world.size_m):
        row, col = pixel_of(east, north, placement, image.shape[:2])
        # the map cells of the pixel's square (row 0 = south, as sim_camera and the labeler)
        cell_row = int(north // world.resolution_m) // stride * stride
        cell_col = int(east // world.resolution_m) // stride * stride
        block = texture[cell_row:cell_row + stride, cell_col:cell_col + stride]
        same = (block == image[row, col]).all(axis=2)
        if same.any():
            colour_ok += 1
            classes = world.class_grid[cell_row:cell_row + stride,
                                       cell_col:cell_col + stride][same]
            # the labeler's class under a nadir camera 1 m over the point (one sample: the point)
            class_ok += int(labeler.label(east, north, 1.0) in classes)
    return colour_ok, class_ok


def test_the_shipped_ground_shows_the_map_where_the_labeler_reads_it(default_world, ground,
                                                                      fleet):
    # Arrange: the shipped SDF's plane (size, pose) and texture; the fleet's labeler
    assert ground['normal'] == [0.0, 0.0, 1.0]
    size_x, size_y = ground['size']
    east0, north0 = ground['pose'][0] - size_x / 2, ground['pose'][1] - size_y / 2
    placement = GroundPlacement(size_x, ground['pose'][0], ground['pose'][1])
    labeler = MapLabeler(default_world, fleet.camera.fov_deg, samples_per_side=1)
    # Act
    colour_ok, class_ok = _matches(ground['image'], placement, default_world, labeler)
    # Assert: the plane covers the world from the ENU origin; every point shows the camera's
    # colour, over the labeler's class but where a 1 m pixel keeps a 0.5 m cell of the class
    # next door (a class border inside the pixel: 1 of the 200 points here)
    assert (east0, north0, size_x, size_y) == (0.0, 0.0, default_world.size_m,
                                               default_world.size_m)
    assert ground['pose'][2:] == [0.0, 0.0, 0.0, 0.0]
    assert colour_ok == POINTS
    assert class_ok >= POINTS - 2


@pytest.mark.parametrize('wrong', ['flipped north-south', 'mirrored east-west',
                                   'shifted 5 m east', 'rotated 90 degrees'])
def test_a_texture_flipped_shifted_or_turned_fails_the_check(default_world, ground, fleet,
                                                             wrong):
    # Arrange: the shipped texture, placed wrongly
    image = ground['image']
    image = {'flipped north-south': np.flipud(image), 'mirrored east-west': np.fliplr(image),
             'shifted 5 m east': np.roll(image, 5, axis=1),
             'rotated 90 degrees': np.rot90(image)}[wrong]
    placement = GroundPlacement.of(default_world)
    labeler = MapLabeler(default_world, fleet.camera.fov_deg, samples_per_side=1)
    # Act
    colour_ok, _ = _matches(np.ascontiguousarray(image), placement, default_world, labeler)
    # Assert: most points show some other place's colour
    assert colour_ok < POINTS // 10


def test_the_shipped_world_is_what_the_command_writes_now(default_world, ground, fleet):
    # Arrange / Act: the texture and SDF regenerated from the fleet config (world.seed)
    image = ground_image(default_world)
    data = png_bytes(image)
    origin = fleet.autopilot
    text = world_sdf(GroundPlacement.of(default_world), origin.origin_lat_deg,
                     origin.origin_lon_deg, origin.origin_alt_amsl_m)
    # Assert: the same pixels, and byte for byte the shipped files (OpenCV's PNG encoder on
    # the pinned opencv-python-headless: another zlib may pack the same pixels differently)
    assert np.array_equal(image, ground['image'])
    assert hashlib.sha256(data).hexdigest() == hashlib.sha256(
        ground['png'].read_bytes()).hexdigest()
    assert text == SDF.read_text()
    assert len(data) <= MAX_PNG_BYTES
    assert ground['image'].shape == (1200, 1200, 3)   # 1 m per pixel


def test_the_sdf_origin_is_the_embedded_simulators(ground, fleet):
    root = ElementTree.parse(SDF).getroot()
    coords = root.find('world/spherical_coordinates')
    assert coords.find('world_frame_orientation').text == 'ENU'
    assert math.isclose(float(coords.find('latitude_deg').text),
                        fleet.autopilot.origin_lat_deg, abs_tol=1e-6)
    assert math.isclose(float(coords.find('longitude_deg').text),
                        fleet.autopilot.origin_lon_deg, abs_tol=1e-6)
    assert math.isclose(float(coords.find('elevation').text),
                        fleet.autopilot.origin_alt_amsl_m, abs_tol=0.05)
    assert root.get('version') == '1.9' and root.find('world').get('name') == WORLD_NAME


def _ign_sdf_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(['ign', 'sdf', '-k', str(path)], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.skipif(shutil.which('ign') is None,
                    reason='ign sdf (Debian: apt-get install ignition-tools libsdformat-dev)')
def test_ign_sdf_check_passes_the_shipped_world_and_fails_a_broken_one(tmp_path):
    # Arrange: a copy with a pose that is not six numbers
    broken = tmp_path / 'broken.sdf'
    broken.write_text(SDF.read_text().replace('<pose>600 600 0 0 0 0</pose>',
                                              '<pose>600 600 zero</pose>'))
    # Act
    shipped, wrong = _ign_sdf_check(SDF), _ign_sdf_check(broken)
    # Assert
    assert shipped.returncode == 0 and 'Valid.' in shipped.stdout, shipped.stderr
    assert wrong.returncode != 0


SMALL = ['--set', 'world.size_m=200.0', '--set', 'world.resolution_m=1.0',
         '--set', 'world.region_radius_min_m=20.0', '--set', 'world.region_radius_max_m=60.0',
         '--set', 'world.num_regions=8']


def test_the_command_writes_a_worlds_sdf_and_texture_at_its_size(tmp_path, capsys):
    # Act: a 200 m world at 1 m cells, one pixel per 2 x 2 cells
    code = main(['gz-world', '--out', str(tmp_path), *SMALL])
    # Assert: the plane spans the world from the origin; the texture is 100 x 100, 2 m/px
    root = ElementTree.parse(tmp_path / f'{WORLD_NAME}.sdf').getroot()
    model = root.find("world/model[@name='landcover_ground']")
    assert code == 0
    assert model.find('pose').text == '100 100 0 0 0 0'
    assert model.find('link/visual/geometry/plane/size').text == '200 200'
    image = read_png(tmp_path / model.find('link/visual/material/pbr/metal/albedo_map').text)
    assert image.shape == (100, 100, 3)
    assert '2 m per pixel' in capsys.readouterr().out


def test_the_command_refuses_a_stride_that_does_not_divide_the_map(tmp_path, capsys):
    code = main(['gz-world', '--out', str(tmp_path), '--stride', '3', *SMALL])
    assert code == 2
    assert "--stride 3: stride must divide the map's 200 cells" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
