"""The Gazebo world of a land-cover map: its ground texture (PNG) and SDF, for PX4 SITL.

The ground is the texture the embedded camera simulator renders from
(:func:`fl_uav.world.camera.world_texture`), so a Gazebo camera over class c sees class c and the
drones' map labeler (same map) labels its frames right.

Placement. The embedded simulator's ENU frame has its origin at the map's south-west corner
(:mod:`fl_uav.world.landcover`), and the SDF's ``<spherical_coordinates>`` put the same geographic
origin (``autopilot.origin_*``) at Gazebo's world origin, whose frame is ENU (x east, y north).
The ground is a plane of the world's size with its centre at (size/2, size/2), so its south-west
corner sits at the origin.

Orientation. Gazebo builds a ``<plane>`` with normal (0, 0, 1) as a mesh whose vertex x runs
along world +x and whose texture coordinates are ``u = x/size + 1/2`` and
``v = 1 - (y/size + 1/2)`` (gz-common ``MeshManager::CreatePlane``; the plane's axes come from
``Vector3::Perpendicular``, gz-math: (0,0,1) x (1,0,0) = (0,1,0) = the mesh's y, x = y cross z =
(1,0,0)). So v = 0, the image's first row, is the NORTH edge and u = 0, the first column, the
west edge: the PNG is the map's raster (row 0 = south) flipped upside down, north up.

Resolution. The map has 0.5 m cells (2400 x 2400 for 1.2 km); the PNG keeps every
``stride``-th cell (nearest, no blending, so each pixel is one cell's exact colour): the default
stride 2 gives 1 m per pixel, 1200 x 1200, about 2.6 MB for the default world.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import cv2
import numpy as np

from fl_uav.world.camera import world_texture
from fl_uav.world.landcover import LandCoverMap

WORLD_NAME = 'fl_uav_landcover'
"""Name of the default world (``<world name>``, and PX4_GZ_WORLD)."""

MODEL_NAME = 'landcover_ground'
TEXTURE_RELPATH = f'{MODEL_NAME}/materials/textures/landcover.png'
"""Where the texture lies relative to the world's SDF file (sim/worlds), and the URI the SDF
gives it: gz-sim resolves a relative URI against the directory of the SDF file it loaded
(gz-sim ``asFullPath``, used on ``albedo_map`` in Conversions.cc), so it needs no
GZ_SIM_RESOURCE_PATH entry, only the world loaded from its own file (``gz sim <path>.sdf``)."""

DEFAULT_STRIDE = 2
MAX_PNG_BYTES = 4_000_000


@dataclass(frozen=True)
class GroundPlacement:
    """Where the textured ground plane lies in Gazebo's world frame (ENU metres)."""

    size_m: float
    center_east_m: float
    center_north_m: float

    @classmethod
    def of(cls, world: LandCoverMap) -> GroundPlacement:
        half = world.size_m / 2.0
        return cls(world.size_m, half, half)


def ground_image(world: LandCoverMap, stride: int = DEFAULT_STRIDE) -> np.ndarray:
    """The ground texture as a north-up image (uint8 rows x cols x 3 RGB): pixel (r, c) is the
    texture cell at the centre-ish of the square ``stride`` cells wide it covers."""
    if stride < 1 or world.cells_per_side % stride:
        raise ValueError(f"stride must divide the map's {world.cells_per_side} cells per side, "
                         f'got {stride}')
    texture = world_texture(world)
    offset = stride // 2
    return np.ascontiguousarray(np.flipud(texture)[offset::stride, offset::stride])


def pixel_of(east_m: float, north_m: float, placement: GroundPlacement,
             shape: tuple[int, int]) -> tuple[int, int]:
    """(row, col) of the image pixel Gazebo draws at world point (east, north), by the plane's
    texture mapping (module docstring): u from west to east, v from north to south."""
    u = (east_m - placement.center_east_m) / placement.size_m + 0.5
    v = 1.0 - ((north_m - placement.center_north_m) / placement.size_m + 0.5)
    rows, cols = shape
    return (min(rows - 1, max(0, math.floor(v * rows))),
            min(cols - 1, max(0, math.floor(u * cols))))


def png_bytes(image: np.ndarray) -> bytes:
    """The image as PNG bytes; deterministic (no timestamp or text chunks)."""
    ok, encoded = cv2.imencode('.png', cv2.cvtColor(image, cv2.COLOR_RGB2BGR),
                               [cv2.IMWRITE_PNG_COMPRESSION, 9])
    if not ok:
        raise ValueError('OpenCV could not encode the texture as PNG')
    return encoded.tobytes()


def read_png(path: str | os.PathLike) -> np.ndarray:
    """A PNG file as an RGB uint8 array (rows x cols x 3)."""
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError(f'{path}: not a readable image')
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def world_sdf(placement: GroundPlacement, origin_lat_deg: float, origin_lon_deg: float,
              origin_alt_m: float, name: str = WORLD_NAME) -> str:
    """The SDF 1.9 world: physics, the geographic origin, a sun, and the textured ground."""
    size = f'{placement.size_m:g} {placement.size_m:g}'
    plane = (f'<plane>\n              <normal>0 0 1</normal>\n'
             f'              <size>{size}</size>\n            </plane>')
    return f"""<?xml version="1.0"?>
<!-- Generated by `fl-uav gz-world` (fl_uav/world/gz_world.py): edit that, not this file. -->
<sdf version="1.9">
  <world name="{name}">
    <physics name="4ms" type="ignored">
      <max_step_size>0.004</max_step_size>
      <real_time_factor>1.0</real_time_factor>
    </physics>
    <gravity>0 0 -9.8</gravity>
    <spherical_coordinates>
      <surface_model>EARTH_WGS84</surface_model>
      <world_frame_orientation>ENU</world_frame_orientation>
      <latitude_deg>{origin_lat_deg:.6f}</latitude_deg>
      <longitude_deg>{origin_lon_deg:.6f}</longitude_deg>
      <elevation>{origin_alt_m:.1f}</elevation>
    </spherical_coordinates>
    <light type="directional" name="sun">
      <cast_shadows>true</cast_shadows>
      <pose>0 0 100 0 0 0</pose>
      <diffuse>0.9 0.9 0.9 1</diffuse>
      <specular>0.2 0.2 0.2 1</specular>
      <direction>-0.5 0.1 -0.9</direction>
    </light>
    <!-- The land-cover ground: its south-west corner at the ENU origin (the map's), north up. -->
    <model name="{MODEL_NAME}">
      <static>true</static>
      <pose>{placement.center_east_m:g} {placement.center_north_m:g} 0 0 0 0</pose>
      <link name="ground">
        <collision name="collision">
          <geometry>
            {plane}
          </geometry>
        </collision>
        <visual name="visual">
          <cast_shadows>false</cast_shadows>
          <geometry>
            {plane}
          </geometry>
          <material>
            <ambient>1 1 1 1</ambient>
            <diffuse>1 1 1 1</diffuse>
            <specular>0 0 0 1</specular>
            <pbr>
              <metal>
                <albedo_map>{TEXTURE_RELPATH}</albedo_map>
                <roughness>1.0</roughness>
                <metalness>0.0</metalness>
              </metal>
            </pbr>
          </material>
        </visual>
      </link>
    </model>
  </world>
</sdf>
"""


def write_world(out_dir: str | os.PathLike, world: LandCoverMap, origin_lat_deg: float,
                origin_lon_deg: float, origin_alt_m: float,
                stride: int = DEFAULT_STRIDE, name: str = WORLD_NAME) -> tuple[Path, Path]:
    """Write ``<out_dir>/<name>.sdf`` and its ground texture; returns (sdf, png) paths."""
    out = Path(out_dir)
    image = ground_image(world, stride)
    data = png_bytes(image)
    png = out / TEXTURE_RELPATH
    png.parent.mkdir(parents=True, exist_ok=True)
    png.write_bytes(data)
    sdf = out / f'{name}.sdf'
    text = world_sdf(GroundPlacement.of(world), origin_lat_deg, origin_lon_deg, origin_alt_m,
                     name)
    ElementTree.fromstring(text)   # well-formed, or fail before writing it
    sdf.write_text(text)
    return sdf, png
