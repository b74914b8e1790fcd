"""Shared fixtures for the synthetic-world tests (worlds are built once per session)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.world.landcover import SAND, WATER, LandCoverMap, WorldConfig, generate_world

SMALL_CONFIG = WorldConfig(seed=3, size_m=400.0, resolution_m=1.0, num_regions=10,
                           region_radius_min_m=30.0, region_radius_max_m=90.0)


@pytest.fixture(scope='session')
def default_world() -> LandCoverMap:
    """The default 1200 m world at 0.5 m."""
    return generate_world(WorldConfig())


@pytest.fixture(scope='session')
def small_world() -> LandCoverMap:
    """A fast 400 m world at 1 m."""
    return generate_world(SMALL_CONFIG)


def half_water_half_sand(cells: int = 200, resolution_m: float = 0.5) -> LandCoverMap:
    """Hand-built map: water west of the middle, sand east of it."""
    grid = np.full((cells, cells), SAND, np.uint8)
    grid[:, :cells // 2] = WATER
    return LandCoverMap(grid, resolution_m, seed=1)


@pytest.fixture(scope='session')
def water_sand_map() -> LandCoverMap:
    """100 m × 100 m at 0.5 m: water for east < 50 m, sand for east >= 50 m."""
    return half_water_half_sand()
