"""Build the world objects a role needs from the fleet config (cached per process)."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from fl_uav.configschema import ConfigError
from fl_uav.planning.geofence import Geofence
from fl_uav.world.camera import CameraConfig
from fl_uav.world.geo import GeoOrigin
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import (
    CLASS_NAMES,
    LandCoverMap,
    MapFileError,
    WorldConfig,
    generate_world,
)

if TYPE_CHECKING:
    from fl_uav.fleet.config import FleetConfig


@functools.lru_cache(maxsize=4)
def world_map(config: WorldConfig, origin: GeoOrigin | None = None,
              fence: Geofence | None = None) -> LandCoverMap:
    """The land-cover map of a world config, once per process: ``world.map_file`` if set (a
    real area's raster; ConfigError naming the key and file if it does not fit the config), else
    the generated one. A georeferenced raster (not ``.npz``) needs the ENU ``origin``, and is
    checked to cover ``fence`` when one is given."""
    if not config.map_file:
        return generate_world(config)
    if not config.map_file.lower().endswith('.npz'):
        return _raster_world(config, origin, fence)
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


def _raster_world(config: WorldConfig, origin: GeoOrigin | None,
                  fence: Geofence | None) -> LandCoverMap:
    if origin is None:
        raise ValueError(f'world.map_file {config.map_file!r} is a georeferenced raster: '
                         f'placing it needs the ENU origin (autopilot.origin_*)')
    from fl_uav.world.raster import load_raster_world  # rasterio only where a raster is used

    try:
        return load_raster_world(config, origin, None if fence is None else fence.box)
    except (OSError, MapFileError) as exc:
        raise ConfigError(f'world.map_file: {exc}') from exc


def fleet_world(config: FleetConfig) -> LandCoverMap:
    """:func:`world_map` of the fleet config: placed at ``autopilot.origin_*``, checked against
    the drones' geofence."""
    return world_map(config.world, config.autopilot.origin, config.geofence_enu())


def map_labeler(world: WorldConfig, camera: CameraConfig, origin: GeoOrigin | None = None,
                fence: Geofence | None = None) -> MapLabeler:
    """The labeler a drone runs onboard over its land-cover raster (origin and fence as
    :func:`world_map` takes them)."""
    return MapLabeler(world_map(world, origin, fence), camera.fov_deg)


NUM_CLASSES = len(CLASS_NAMES)
