"""Ground texture of a land-cover map: one RGB colour per map cell, procedurally painted.

Each class has a palette of plausible colours, picked by slowly varying noise or per object
(crop parcel, house), and a procedural texture: tree crowns with sun-side shading for forest,
row stripes with a per-parcel direction and spacing for crop, ripples, shallow shores and sun
glints for water, hip-roof shading and dark eaves for roofs, asphalt grain, markings and cars for
roads, dunes and tufts for sand. Houses and woods cast short shadows on their neighbours.

Palettes deliberately overlap (grass, crop and forest greens; sand, concrete roads and light
roofs; dark water, asphalt and forest shade) so that colour alone does not give the class away.
The texture uses the raster convention of :mod:`fl_uav.world.landcover` (row 0 = south).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

from fl_uav.world.landcover import CROP, FOREST, GRASS, ROAD, ROOF, SAND, WATER, LandCoverMap
from fl_uav.world.noise import blob_field, fractal_noise, value_noise

# Palettes in RGB 0..255, ordered so that neighbours in a ramp blend plausibly.
WATER_PALETTE = np.array([[26, 46, 60], [34, 62, 88], [46, 74, 70], [62, 84, 66],
                          [78, 82, 64], [96, 110, 116]], np.float32)
WATER_SHALLOW_RGB = np.array([96, 116, 96], np.float32)
FOREST_PALETTE = np.array([[34, 58, 34], [44, 72, 38], [56, 86, 42], [70, 92, 46],
                           [86, 96, 50], [96, 118, 56]], np.float32)
FOREST_SHADE_RGB = np.array([20, 32, 22], np.float32)
GRASS_PALETTE = np.array([[56, 88, 42], [70, 108, 48], [88, 124, 56], [108, 136, 62],
                          [130, 142, 74], [152, 146, 92]], np.float32)
CROP_PALETTE = np.array([[78, 116, 50], [104, 136, 62], [136, 146, 76], [172, 158, 98],
                         [186, 170, 120], [128, 104, 78], [98, 82, 64]], np.float32)
CROP_SOIL_PALETTE = np.array([[112, 92, 70], [90, 76, 60], [132, 112, 84]], np.float32)
ROOF_PALETTE = np.array([[150, 76, 58], [128, 66, 54], [84, 82, 86], [112, 110, 108],
                         [164, 160, 150], [116, 90, 72], [124, 134, 142], [178, 162, 138]],
                        np.float32)
ROAD_PALETTE = np.array([[70, 72, 74], [92, 92, 92], [116, 114, 110], [146, 142, 134],
                         [168, 162, 150], [150, 134, 108]], np.float32)
ROAD_MARKING_RGB = np.array([206, 204, 194], np.float32)
SAND_PALETTE = np.array([[140, 136, 124], [146, 128, 98], [176, 158, 120], [196, 178, 138],
                         [210, 194, 158]], np.float32)
SAND_TUFT_RGB = np.array([92, 100, 60], np.float32)
VEHICLE_PALETTE = np.array([[200, 200, 204], [30, 30, 34], [150, 30, 28], [40, 60, 120],
                            [120, 124, 128]], np.float32)

# Light comes from the south-west (grid axes: +col = east, +row = north).
_SUN_EN = np.array([-math.sqrt(0.5), -math.sqrt(0.5)], np.float32)


def synthesize_texture(world: LandCoverMap, seed: int | Sequence[int]) -> np.ndarray:
    """Paint the world: uint8 array (cells, cells, 3), RGB, same raster layout as the map.

    Deterministic for (map, seed); ``seed`` is anything ``np.random.default_rng`` accepts.
    """
    grid = world.class_grid
    res = world.resolution_m
    shape = grid.shape
    rng = np.random.default_rng(seed)

    def px(metres: float) -> float:
        return metres / res

    low = fractal_noise(shape, px(220.0), rng, octaves=2)
    mid = fractal_noise(shape, px(35.0), rng, octaves=3)
    fine = value_noise(shape, px(1.5), rng)
    speck = rng.random(shape, dtype=np.float32)
    fields = _Fields(grid, res, low, mid, fine, speck)

    rgb = np.zeros((grid.size, 3), np.float32)
    painters = {WATER: _paint_water, FOREST: _paint_forest, GRASS: _paint_grass,
                CROP: _paint_crop, ROOF: _paint_roof, ROAD: _paint_road, SAND: _paint_sand}
    flat_grid = grid.reshape(-1)
    for class_id, painter in painters.items():
        if class_id >= world.num_classes:
            continue
        index = np.flatnonzero(flat_grid == class_id)
        if len(index):
            rgb[index] = painter(fields, index, rng)
    extra = np.flatnonzero(flat_grid >= len(painters))
    if len(extra):  # maps with more classes than the painters know: neutral grey
        rgb[extra] = 128.0

    image = rgb.reshape(*shape, 3)
    _cast_shadows(image, grid, res)
    image *= (1.0 + 0.05 * low)[..., None]
    np.clip(image, 0.0, 255.0, out=image)
    return image.astype(np.uint8)


class _Fields:
    """Shared noise fields and per-index helpers for the class painters."""

    def __init__(self, grid: np.ndarray, res: float, low: np.ndarray, mid: np.ndarray,
                 fine: np.ndarray, speck: np.ndarray) -> None:
        self.grid = grid
        self.res = res
        self.low = low.reshape(-1)
        self.mid = mid.reshape(-1)
        self.fine = fine.reshape(-1)
        self.speck = speck.reshape(-1)
        self.cols = grid.shape[1]

    def coords_m(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(east_m, north_m) of the centres of the given flat cell indices."""
        rows, cols = np.divmod(index, self.cols)
        return ((cols + 0.5) * self.res).astype(np.float32), \
            ((rows + 0.5) * self.res).astype(np.float32)

    def distance_inside_m(self, class_id: int, index: np.ndarray) -> np.ndarray:
        """Distance in metres from each cell of the class to the nearest cell of another class."""
        mask = (self.grid == class_id).astype(np.uint8)
        dist = cv2.distanceTransform(mask, cv2.DIST_L2, 3)
        return dist.reshape(-1)[index] * np.float32(self.res)


def _ramp(t: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """Piecewise-linear colour ramp: t in [0, 1] → RGB float32 (N×3)."""
    position = np.clip(t, 0.0, 1.0) * (len(palette) - 1)
    lower = np.minimum(position.astype(np.int32), len(palette) - 2)
    frac = (position - lower)[:, None]
    return palette[lower] * (1.0 - frac) + palette[lower + 1] * frac


def _mix(a: np.ndarray, b: np.ndarray, weight: np.ndarray) -> np.ndarray:
    weight = np.asarray(weight, np.float32)
    if weight.ndim == 1:
        weight = weight[:, None]
    return a * (1.0 - weight) + b * weight


def _paint_water(f: _Fields, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    colour = _ramp(0.5 + 0.3 * f.low[index] + 0.08 * f.mid[index], WATER_PALETTE)
    shallow = np.exp(-f.distance_inside_m(WATER, index) / 4.0)
    colour = _mix(colour, WATER_SHALLOW_RGB[None, :], 0.5 * shallow)
    east, north = f.coords_m(index)
    wind = rng.uniform(0.0, math.pi)
    phase = (east * math.cos(wind) + north * math.sin(wind)) * (2 * math.pi / 3.0)
    ripples = np.sin(phase + 2.5 * f.mid[index]) * (3.0 + 2.0 * np.abs(f.fine[index]))
    colour += ripples[:, None]
    glint = f.speck[index] > 0.996
    colour[glint] += 70.0
    return colour


def _paint_forest(f: _Fields, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    shape = f.grid.shape
    crowns = (blob_field(shape, 3.4 / f.res, 1.1 / f.res, rng)
              + 0.8 * blob_field(shape, 7.0 / f.res, 2.2 / f.res, rng))
    crowns /= np.float32(crowns.max() or 1.0)
    lit = _sun_shading(crowns, scale=6.0)
    canopy = np.clip(crowns.reshape(-1)[index] * 3.0, 0.0, 1.0)
    colour = _ramp(0.5 + 0.3 * f.low[index] + 0.15 * f.mid[index], FOREST_PALETTE)
    colour = _mix(FOREST_SHADE_RGB[None, :], colour, 0.35 + 0.65 * canopy)
    colour *= (1.0 + 0.35 * lit.reshape(-1)[index])[:, None]
    colour *= (1.0 + 0.05 * f.fine[index])[:, None]
    return colour


def _paint_grass(f: _Fields, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    colour = _ramp(0.5 + 0.28 * f.low[index] + 0.18 * f.mid[index], GRASS_PALETTE)
    clumps = value_noise(f.grid.shape, 3.0 / f.res, rng).reshape(-1)[index]
    colour *= (1.0 + 0.09 * clumps + 0.05 * f.fine[index]
               + 0.1 * (f.speck[index] - 0.5))[:, None]
    bushes = (blob_field(f.grid.shape, 16.0 / f.res, 1.4 / f.res, rng)
              + blob_field(f.grid.shape, 30.0 / f.res, 2.6 / f.res, rng))
    bushes = bushes.reshape(-1)[index]
    tree = np.clip((bushes - 0.25) * 4.0, 0.0, 1.0)
    return _mix(colour, FOREST_PALETTE[1][None, :] * 0.8, 0.85 * tree)


def _paint_crop(f: _Fields, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    east, north = f.coords_m(index)
    parcel, border = _parcels(east, north, pitch_m=85.0, rng=rng)
    count = int(parcel.max()) + 1
    base = CROP_PALETTE[rng.integers(0, len(CROP_PALETTE), count)]
    base = base * rng.uniform(0.9, 1.1, (count, 1)).astype(np.float32)
    soil = CROP_SOIL_PALETTE[rng.integers(0, len(CROP_SOIL_PALETTE), count)]
    angle = rng.uniform(0.0, math.pi, count).astype(np.float32)
    period_m = rng.uniform(4.0, 9.0, count).astype(np.float32)
    contrast = rng.uniform(0.3, 0.7, count).astype(np.float32)

    a = angle[parcel]
    stripes = 0.5 + 0.5 * np.sin((east * np.cos(a) + north * np.sin(a))
                                 * (2 * np.pi / period_m[parcel]))
    strength = contrast[parcel] * stripes
    colour = _mix(base[parcel], soil[parcel], strength) * (1.0 - 0.3 * strength)[:, None]
    colour *= (1.0 + 0.07 * f.mid[index] + 0.03 * f.fine[index])[:, None]
    track = np.clip(1.0 - border / 1.5, 0.0, 1.0)
    return _mix(colour, CROP_SOIL_PALETTE[0][None, :], 0.7 * track)


def _parcels(east: np.ndarray, north: np.ndarray, pitch_m: float,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Field parcels: Voronoi cells of a jittered lattice of seeds.

    Returns (parcel id, distance in metres to the parcel border) for each point.
    """
    span = int(math.ceil(max(float(east.max()), float(north.max())) / pitch_m)) + 3
    jitter = rng.uniform(0.1, 0.9, (span, span, 2)) * pitch_m
    lat_e = np.floor(east / pitch_m).astype(np.int64) + 1
    lat_n = np.floor(north / pitch_m).astype(np.int64) + 1
    best = np.full(east.shape, np.inf, np.float32)
    second = np.full(east.shape, np.inf, np.float32)
    parcel = np.zeros(east.shape, np.int64)
    for dn in (-1, 0, 1):
        for de in (-1, 0, 1):
            ce, cn = lat_e + de, lat_n + dn
            seed_e = (ce - 1) * pitch_m + jitter[cn, ce, 0]
            seed_n = (cn - 1) * pitch_m + jitter[cn, ce, 1]
            dist = np.hypot(east - seed_e, north - seed_n).astype(np.float32)
            closer = dist < best
            second = np.where(closer, best, np.minimum(second, dist))
            best = np.where(closer, dist, best)
            parcel = np.where(closer, cn * span + ce, parcel)
    # Half the gap between the two nearest seeds' distances ≈ distance to the bisector.
    border = 0.5 * (second - best)
    _, compact = np.unique(parcel, return_inverse=True)
    return compact.reshape(-1), border


def _paint_roof(f: _Fields, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    mask = (f.grid == ROOF).astype(np.uint8)
    count, houses = cv2.connectedComponents(mask, connectivity=4)
    house = houses.reshape(-1)[index]
    base = ROOF_PALETTE[rng.integers(0, len(ROOF_PALETTE), count)]
    base = base * rng.uniform(0.88, 1.12, (count, 1)).astype(np.float32)
    pitched = (rng.random(count) < 0.75).astype(np.float32)
    height = cv2.distanceTransform(mask, cv2.DIST_L2, 3)
    lit = _sun_shading(height, scale=1.0).reshape(-1)[index]
    colour = base[house] * (1.0 + 0.22 * np.clip(lit, -1.0, 1.0) * pitched[house])[:, None]
    eaves = np.clip(1.0 - height.reshape(-1)[index] * f.res / 0.8, 0.0, 1.0)
    colour *= (1.0 - 0.3 * eaves)[:, None]
    colour *= (1.0 + 0.06 * (f.speck[index] - 0.5) + 0.03 * f.fine[index])[:, None]
    return colour


def _paint_road(f: _Fields, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    colour = _ramp(0.45 + 0.32 * f.low[index] + 0.12 * f.mid[index], ROAD_PALETTE)
    colour += (26.0 * (f.speck[index] - 0.5) + 6.0 * f.fine[index])[:, None]
    # Dashed markings along the medial axis of wide enough roads.
    mask = (f.grid == ROAD).astype(np.uint8)
    dist = cv2.distanceTransform(mask, cv2.DIST_L2, 3)
    ridge = (dist >= cv2.dilate(dist, np.ones((3, 3), np.uint8)) - 1e-3).reshape(-1)[index]
    east, north = f.coords_m(index)
    dashes = np.floor((east + north) / 3.0).astype(np.int64) % 2 == 0
    wide = dist.reshape(-1)[index] * f.res > 2.5
    marking = ridge & wide & dashes
    colour[marking] = _mix(colour[marking], ROAD_MARKING_RGB[None, :], 0.8)
    # Cars: short rectangles of one colour.
    cars = np.zeros((*f.grid.shape, 3), np.uint8)
    road_cells = np.flatnonzero(mask.reshape(-1))
    count = int(len(road_cells) * f.res * f.res / 250.0)
    if count:
        pick = road_cells[rng.integers(0, len(road_cells), count)]
        paint = VEHICLE_PALETTE[rng.integers(0, len(VEHICLE_PALETTE), count)].astype(np.uint8)
        cars.reshape(-1, 3)[pick] = np.maximum(paint, 1)
        length, width = max(1, int(round(4.2 / f.res))), max(1, int(round(1.8 / f.res)))
        cars = cv2.dilate(cars, np.ones((width, length), np.uint8))
        car = cars.reshape(-1, 3)[index].astype(np.float32)
        has_car = car.max(axis=1) > 0
        colour[has_car] = car[has_car]
    return colour


def _paint_sand(f: _Fields, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    colour = _ramp(0.55 + 0.3 * f.low[index] + 0.15 * f.mid[index], SAND_PALETTE)
    east, north = f.coords_m(index)
    wind = rng.uniform(0.0, math.pi) + 0.4 * f.low[index]
    along = east * np.cos(wind) + north * np.sin(wind)
    phase = along * (2 * math.pi / 14.0) + 3.0 * f.mid[index]
    dunes = np.sin(phase) + 0.35 * np.sin(2.0 * phase)
    ripples = np.sin(along * (2 * math.pi / 1.4) + 4.0 * f.fine[index])
    colour *= (1.0 + 0.07 * dunes + 0.03 * ripples)[:, None]
    tufts = blob_field(f.grid.shape, 9.0 / f.res, 0.8 / f.res, rng).reshape(-1)[index]
    colour = _mix(colour, SAND_TUFT_RGB[None, :], np.clip((tufts - 0.3) * 2.5, 0.0, 0.8))
    return colour


def _sun_shading(height: np.ndarray, scale: float) -> np.ndarray:
    """Lambert-like shading of a height field: > 0 on slopes facing the sun, < 0 away."""
    grad_e = cv2.Sobel(height, cv2.CV_32F, 1, 0, ksize=3) * np.float32(0.125 * scale)
    grad_n = cv2.Sobel(height, cv2.CV_32F, 0, 1, ksize=3) * np.float32(0.125 * scale)
    return -(grad_e * _SUN_EN[0] + grad_n * _SUN_EN[1])


def _cast_shadows(image: np.ndarray, grid: np.ndarray, res: float) -> None:
    """Darken the ground just north-east of houses and woods (the sun is in the south-west)."""
    for class_id, length_m, strength in ((ROOF, 3.0, 0.45), (FOREST, 4.0, 0.4)):
        shift = max(1, int(round(length_m / res / math.sqrt(2.0))))
        caster = grid == class_id
        shadow = np.zeros_like(caster)
        shadow[shift:, shift:] = caster[:-shift, :-shift]
        shadow &= ~caster
        if class_id == ROOF:
            shadow &= grid != FOREST
        image[shadow] *= np.float32(1.0 - strength)
