"""Build the world objects a role needs from the fleet config (cached per process)."""

from __future__ import annotations

import functools

from fl_uav.world.camera import CameraConfig
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import CLASS_NAMES, LandCoverMap, WorldConfig, generate_world


@functools.lru_cache(maxsize=4)
def world_map(config: WorldConfig) -> LandCoverMap:
    """The land-cover map of a world config (deterministic, generated once per process)."""
    return generate_world(config)


def map_labeler(world: WorldConfig, camera: CameraConfig) -> MapLabeler:
    """The labeler a drone runs onboard over its land-cover raster."""
    return MapLabeler(world_map(world), camera.fov_deg)


NUM_CLASSES = len(CLASS_NAMES)
