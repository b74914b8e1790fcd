"""Build the world objects a role needs from the fleet config (cached per process)."""

from __future__ import annotations

import functools
import math

from fl_uav.configschema import ConfigError
from fl_uav.world.camera import CameraConfig
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import (
    CLASS_NAMES,
    LandCoverMap,
    MapFileError,
    WorldConfig,
    generate_world,
)


@functools.lru_cache(maxsize=4)
def world_map(config: WorldConfig) -> LandCoverMap:
    """The land-cover map of a world config, once per process: ``world.map_file`` if set (a
    real area's raster; MapFileError if it does not fit the config), else the generated one."""
    if not config.map_file:
        return generate_world(config)
    try:
        land = LandCoverMap.load(config.map_file)
    except (OSError, MapFileError) as exc:   # a node stops on it as on any bad config key
        raise ConfigError(f'world.map_file: {exc}') from exc
    misfits = [f'{key} {ours} in the config, {theirs} in the file' for key, ours, theirs in (
        ('world.size_m', config.size_m, land.size_m),
        ('world.resolution_m', config.resolution_m, land.resolution_m))
        if not math.isclose(ours, theirs, rel_tol=1e-9)]
    if land.class_names != CLASS_NAMES:
        misfits.append(f'classes {list(land.class_names)} in the file, the fleet model has '
                       f'{list(CLASS_NAMES)}')
    if misfits:
        raise ConfigError(f'world.map_file {config.map_file!r} does not fit the fleet '
                          f'config: {"; ".join(misfits)}')
    return land


def map_labeler(world: WorldConfig, camera: CameraConfig) -> MapLabeler:
    """The labeler a drone runs onboard over its land-cover raster."""
    return MapLabeler(world_map(world), camera.fov_deg)


NUM_CLASSES = len(CLASS_NAMES)
