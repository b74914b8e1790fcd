"""Land-cover maps: the ground truth of the synthetic aerial world.

The world is a square of ``size_m`` metres in a local ENU frame: ``east_m`` (x) and ``north_m``
(y) both run over ``[0, size_m)``, with the origin at the south-west corner.

Raster convention (used by every module of :mod:`fl_uav.world`): ``class_grid[row, col]`` is the
class of the cell covering ``east_m`` in ``[col * resolution_m, (col + 1) * resolution_m)`` and
``north_m`` in ``[row * resolution_m, (row + 1) * resolution_m)``. Row 0 is the SOUTH edge and the
row index grows to the north, so the array printed as an image is north-down (flip it with
``np.flipud`` for a north-up picture).

:func:`generate_world` builds a map procedurally: class regions (rotated, boundary-warped
ellipses or boxes) over a grass/crop background, villages of houses and streets, a river with
sandy banks, copses, and a road network of highways and local roads. In the field the same
:class:`LandCoverMap` is loaded from a georeferenced land-cover raster (:meth:`LandCoverMap.load`).
"""

from __future__ import annotations

import hashlib
import math
import os
import zipfile
from dataclasses import dataclass
from functools import cached_property

import cv2
import numpy as np

from fl_uav.world.noise import fractal_noise, meander, value_noise

CLASS_NAMES = ('water', 'forest', 'grass', 'crop', 'roof', 'road', 'sand')
"""Land-cover classes; a class id is an index into this tuple."""

WATER, FOREST, GRASS, CROP, ROOF, ROAD, SAND = range(len(CLASS_NAMES))

UNKNOWN = 255
"""Cell value (and label) of unknown land cover: a raster's nodata, a code the class map leaves
out, or ground outside the raster. A frame over it gets no label."""

WORLDCOVER_CLASS_MAP = ('10:forest', '20:grass', '30:grass', '40:crop', '50:roof', '60:sand',
                        '80:water', '90:grass', '95:forest')
"""ESA WorldCover 10 m codes to :data:`CLASS_NAMES` (docs/field_guide.md, Configure): tree cover,
shrubland, grassland, cropland, built-up, bare / sparse vegetation, permanent water, herbaceous
wetland, mangroves. Snow and ice (70), moss and lichen (100) and nodata (0) stay unknown."""

MIN_CLASS_SHARE = 0.04
"""Every class of a generated world covers at least this fraction of the map (best effort)."""

MAP_FILE_VERSION = 1
_MAX_CELLS_PER_SIDE = 8000
_MAX_ATTEMPTS = 6

# Relative number of class regions per class (a village is a roof region, a paved lot a road one).
_REGION_CLASS_WEIGHTS = {FOREST: 5.5, WATER: 4.0, ROOF: 6.5, SAND: 3.0, CROP: 2.5, ROAD: 3.0,
                         GRASS: 2.0}
# Man-made regions are boxy (superellipse exponent), natural ones elliptic.
_SHAPE_EXPONENT = {ROOF: 6.0, ROAD: 6.0}
_REGION_SCALE = {ROAD: 0.65}


class MapFileError(ValueError):
    """A land-cover map file is unreadable or not a map; the message names the file."""


@dataclass(frozen=True)
class WorldConfig:
    """Parameters of a procedurally generated world.

    seed: generator seed (same seed, same world); size_m: side of the square world in metres
    (rounded to a whole number of cells); resolution_m: side of one map cell in metres;
    num_regions: number of class regions (lakes, woods, dune fields, villages, paved lots...);
    region_radius_min_m / region_radius_max_m: range of a region's larger semi-axis in metres.
    map_file: a land-cover raster of the real area used instead of the generated world ('' =
    generate from seed): an ``.npz`` in :meth:`LandCoverMap.save`'s layout (side and cell size
    equal to size_m and resolution_m, classes :data:`CLASS_NAMES`), or a GeoTIFF (any raster
    GDAL reads) in any CRS, placed at ``autopilot.origin_*`` and resampled to the world's cells
    (:mod:`fl_uav.world.raster`).
    class_map: how a GeoTIFF's codes become classes, ``'code:class'`` entries (default: ESA
    WorldCover, :data:`WORLDCOVER_CLASS_MAP`); codes it leaves out and nodata are unknown.
    """

    seed: int = 7
    size_m: float = 1200.0
    resolution_m: float = 0.5
    num_regions: int = 24
    region_radius_min_m: float = 60.0
    region_radius_max_m: float = 220.0
    map_file: str = ''
    class_map: tuple[str, ...] = WORLDCOVER_CLASS_MAP

    def __post_init__(self) -> None:
        parse_class_map(self.class_map)
        if not (0 <= self.seed < 2 ** 32):
            raise ValueError(f'seed must be in [0, 2**32), got {self.seed}')
        if not (100.0 <= self.size_m <= 20000.0):
            raise ValueError(f'size_m must be in [100, 20000], got {self.size_m}')
        if not (0.1 <= self.resolution_m <= 10.0):
            raise ValueError(f'resolution_m must be in [0.1, 10], got {self.resolution_m}')
        cells = self.size_m / self.resolution_m
        if not (64 <= cells <= _MAX_CELLS_PER_SIDE):
            raise ValueError(f'size_m / resolution_m must be in [64, {_MAX_CELLS_PER_SIDE}] '
                             f'cells per side, got {cells:.0f} (size_m={self.size_m}, '
                             f'resolution_m={self.resolution_m})')
        if not (8 <= self.num_regions <= 400):
            raise ValueError(f'num_regions must be in [8, 400], got {self.num_regions}')
        if not (5.0 <= self.region_radius_min_m <= self.size_m / 2):
            raise ValueError(f'region_radius_min_m must be in [5, size_m / 2], '
                             f'got {self.region_radius_min_m}')
        if not (self.region_radius_min_m <= self.region_radius_max_m <= self.size_m / 2):
            raise ValueError(f'region_radius_max_m must be in [region_radius_min_m, size_m / 2], '
                             f'got {self.region_radius_max_m}')

    @property
    def cells_per_side(self) -> int:
        """Number of map cells along each side."""
        return int(round(self.size_m / self.resolution_m))


def parse_class_map(entries: tuple[str, ...]) -> dict[int, int]:
    """``('10:forest', ...)`` -> {raster code: class id}; ValueError naming the bad entry."""
    codes: dict[int, int] = {}
    for entry in entries:
        code_text, colon, name = (part.strip() for part in str(entry).partition(':'))
        if not colon:
            raise ValueError(f"class_map entry {entry!r} is not 'code:class' (e.g. '10:forest')")
        try:
            code = int(code_text)
        except ValueError:
            raise ValueError(f'class_map entry {entry!r}: the code {code_text!r} is not an '
                             f'integer') from None
        if name not in CLASS_NAMES:
            raise ValueError(f'class_map entry {entry!r} names the unknown class {name!r}; '
                             f'classes: {", ".join(CLASS_NAMES)}')
        if code in codes:
            raise ValueError(f'class_map maps the code {code} twice (second: {entry!r})')
        codes[code] = CLASS_NAMES.index(name)
    return codes


@dataclass(frozen=True)
class ClassRegion:
    """One class region of a generated world.

    center_enu_m: (east_m, north_m) of the centre; extent_m: the two semi-axes in metres (along
    the region's own axis, then across it); angle_rad: the axis direction, counter-clockwise from
    east.
    """

    class_id: int
    center_enu_m: tuple[float, float]
    extent_m: tuple[float, float]
    angle_rad: float


class LandCoverMap:
    """A land-cover raster: one class id per square cell, georeferenced in local ENU metres.

    ``class_grid`` is uint8 of shape (cells, cells); ``class_grid[row, col]`` covers
    ``east_m`` in ``[col, col + 1) * resolution_m`` and ``north_m`` in
    ``[row, row + 1) * resolution_m`` (row 0 is the south edge, see the module docstring).
    A cell holds a class id or :data:`UNKNOWN`. The grid is read-only; maps compare and hash by
    content.
    """

    def __init__(self, class_grid: np.ndarray, resolution_m: float,
                 regions: tuple[ClassRegion, ...] = (),
                 class_names: tuple[str, ...] = CLASS_NAMES, seed: int = 0) -> None:
        grid = np.array(class_grid, dtype=np.uint8, copy=True)
        if grid.ndim != 2 or grid.shape[0] != grid.shape[1] or grid.shape[0] < 1:
            raise ValueError(f'class_grid must be a square 2-D array, got shape {grid.shape}')
        if not resolution_m > 0:
            raise ValueError(f'resolution_m must be > 0, got {resolution_m}')
        if not 1 <= len(class_names) < UNKNOWN:
            raise ValueError(f'class_names must hold 1 to {UNKNOWN - 1} names, got '
                             f'{len(class_names)}')
        known = grid[grid != UNKNOWN]
        if known.size and int(known.max()) >= len(class_names):
            raise ValueError(f'class_grid holds class {int(known.max())} but only '
                             f'{len(class_names)} class names are given')
        grid.setflags(write=False)
        self.class_grid = grid
        self.resolution_m = float(resolution_m)
        self.regions = tuple(regions)
        self.class_names = tuple(class_names)
        self.seed = int(seed)

    @property
    def cells_per_side(self) -> int:
        """Number of cells along each side of the square map."""
        return self.class_grid.shape[0]

    @property
    def size_m(self) -> float:
        """Side of the square world in metres."""
        return self.cells_per_side * self.resolution_m

    @property
    def num_classes(self) -> int:
        """Number of land-cover classes."""
        return len(self.class_names)

    @cached_property
    def digest(self) -> str:
        """Content hash of the map (grid, resolution, class names, seed)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(self.class_grid.tobytes())
        h.update(repr((self.resolution_m, self.class_names, self.seed)).encode())
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LandCoverMap):
            return NotImplemented
        return self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return (f'LandCoverMap(size_m={self.size_m:g}, resolution_m={self.resolution_m:g}, '
                f'classes={len(self.class_names)}, regions={len(self.regions)})')

    def contains(self, east_m: float, north_m: float) -> bool:
        """True if the point lies inside the world."""
        return 0.0 <= east_m < self.size_m and 0.0 <= north_m < self.size_m

    def class_at(self, east_m: float, north_m: float) -> int:
        """Class id (or :data:`UNKNOWN`) of the cell containing a point; ValueError outside the
        world."""
        if not self.contains(east_m, north_m):
            raise ValueError(f'point (east_m={east_m}, north_m={north_m}) is outside the world '
                             f'[0, {self.size_m:g}) x [0, {self.size_m:g})')
        col = min(int(east_m / self.resolution_m), self.cells_per_side - 1)
        row = min(int(north_m / self.resolution_m), self.cells_per_side - 1)
        return int(self.class_grid[row, col])

    def class_fractions(self) -> np.ndarray:
        """Share of the map covered by each class (float64; sums to 1 less
        :meth:`unknown_fraction`)."""
        counts = np.bincount(self.class_grid.ravel(), minlength=self.num_classes)
        return counts[:self.num_classes].astype(np.float64) / self.class_grid.size

    def unknown_fraction(self) -> float:
        """Share of the map whose land cover is :data:`UNKNOWN`."""
        return float(np.count_nonzero(self.class_grid == UNKNOWN)) / self.class_grid.size

    def save(self, path: str | os.PathLike) -> None:
        """Write the map to ``path`` as a compressed ``.npz`` (exactly that file name)."""
        regions = np.array([[r.class_id, *r.center_enu_m, *r.extent_m, r.angle_rad]
                            for r in self.regions], np.float64).reshape(-1, 6)
        with open(path, 'wb') as stream:
            np.savez_compressed(
                stream, version=np.int64(MAP_FILE_VERSION), class_grid=self.class_grid,
                resolution_m=np.float64(self.resolution_m), seed=np.int64(self.seed),
                class_names=np.array(self.class_names, dtype=np.str_), regions=regions)

    @classmethod
    def load(cls, path: str | os.PathLike) -> LandCoverMap:
        """Read a map written by :meth:`save` (or any ``.npz`` land-cover raster in that layout).

        Raises FileNotFoundError if the file does not exist and :class:`MapFileError` if it is
        not a readable map; both messages name the file.
        """
        if not os.path.isfile(path):
            raise FileNotFoundError(f'land-cover map file not found: {os.fspath(path)!r}')
        try:
            with np.load(path, allow_pickle=False) as data:
                version = int(data['version'])
                if version != MAP_FILE_VERSION:
                    raise MapFileError(f'land-cover map file {os.fspath(path)!r} has format '
                                       f'version {version}, expected {MAP_FILE_VERSION}')
                grid = data['class_grid']
                resolution_m = float(data['resolution_m'])
                seed = int(data['seed'])
                class_names = tuple(str(n) for n in data['class_names'])
                region_rows = data['regions'].reshape(-1, 6)
        except MapFileError:
            raise
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise MapFileError(f'land-cover map file {os.fspath(path)!r} is not a readable map: '
                               f'{error}') from error
        regions = tuple(ClassRegion(int(r[0]), (float(r[1]), float(r[2])),
                                    (float(r[3]), float(r[4])), float(r[5]))
                        for r in region_rows)
        try:
            return cls(grid, resolution_m, regions, class_names, seed)
        except ValueError as error:
            raise MapFileError(f'land-cover map file {os.fspath(path)!r} holds an invalid map: '
                               f'{error}') from error


def generate_world(config: WorldConfig) -> LandCoverMap:
    """Generate the land-cover map of a world config (deterministic for ``config.seed``).

    Tries a few derived sub-seeds and keeps the first map in which every class covers at least
    :data:`MIN_CLASS_SHARE` of the area (or the most balanced one if none does).
    """
    best: tuple[float, np.ndarray, tuple[ClassRegion, ...]] | None = None
    for attempt in range(_MAX_ATTEMPTS):
        rng = np.random.default_rng([config.seed, attempt])
        grid, regions = _compose(config, rng)
        shares = np.bincount(grid.ravel(), minlength=len(CLASS_NAMES)) / grid.size
        worst = float(shares.min())
        if best is None or worst > best[0]:
            best = (worst, grid, regions)
        if worst >= MIN_CLASS_SHARE:
            break
    assert best is not None
    return LandCoverMap(best[1], config.resolution_m, best[2], CLASS_NAMES, config.seed)


# --------------------------------------------------------------------------------------------
# Generation internals. Coordinates in metres; cell (row, col) has its centre at
# ((col + 0.5) * res, (row + 0.5) * res).


def _compose(config: WorldConfig, rng: np.random.Generator) -> tuple[np.ndarray,
                                                                     tuple[ClassRegion, ...]]:
    cells = config.cells_per_side
    res = config.resolution_m
    shape = (cells, cells)
    size_m = cells * res

    grid = _background(shape, res, rng)
    regions = _draw_regions(config, rng)
    region_index, region_dist = _assign_regions(regions, shape, res, rng)

    inside = region_index >= 0
    region_class = np.array([r.class_id for r in regions], np.uint8)
    grid[inside] = region_class[region_index[inside]]
    for index, region in enumerate(regions):
        if region.class_id == ROOF:
            _lay_out_village(grid, region, index, region_index, region_dist, res, rng)
        elif region.class_id == WATER:
            _add_beach(grid, index, region_index, region_dist, rng)

    _add_copses(grid, ~inside, res, rng)
    _add_river(grid, size_m, res, rng)
    _add_roads(grid, regions, size_m, res, rng)
    return grid, regions


def _background(shape: tuple[int, int], res: float, rng: np.random.Generator) -> np.ndarray:
    """Grass/crop mosaic: farmland where a low-frequency noise field is high."""
    farmland = fractal_noise(shape, 260.0 / res, rng, octaves=3)
    grid = np.full(shape, GRASS, np.uint8)
    grid[farmland > 0.15] = CROP
    return grid


def _region_classes(count: int, rng: np.random.Generator) -> list[int]:
    """Class of each region: the weights split by largest remainder, in random order."""
    classes = list(_REGION_CLASS_WEIGHTS)
    weights = np.array([_REGION_CLASS_WEIGHTS[c] for c in classes])
    exact = weights / weights.sum() * count
    quota = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - quota))[:count - quota.sum()]:
        quota[i] += 1
    labels = [c for c, q in zip(classes, quota) for _ in range(q)]
    rng.shuffle(labels)
    return labels


def _draw_regions(config: WorldConfig, rng: np.random.Generator) -> tuple[ClassRegion, ...]:
    size_m = config.cells_per_side * config.resolution_m
    centres: list[np.ndarray] = []
    regions = []
    for class_id in _region_classes(config.num_regions, rng):
        # Best of a few candidates (farthest from the centres so far) spreads regions evenly.
        candidates = rng.uniform(0.04 * size_m, 0.96 * size_m, (8, 2))
        if centres:
            placed = np.array(centres)
            gaps = np.linalg.norm(candidates[:, None, :] - placed[None, :, :], axis=2).min(1)
            centre = candidates[int(np.argmax(gaps))]
        else:
            centre = candidates[0]
        centres.append(centre)
        major = rng.uniform(config.region_radius_min_m, config.region_radius_max_m)
        major *= _REGION_SCALE.get(class_id, 1.0)
        minor = major * rng.uniform(0.45, 1.0)
        regions.append(ClassRegion(class_id, (float(centre[0]), float(centre[1])),
                                   (float(major), float(minor)),
                                   float(rng.uniform(0.0, math.pi))))
    return tuple(regions)


def _assign_regions(regions: tuple[ClassRegion, ...], shape: tuple[int, int], res: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Nearest region by normalised (anisotropic) distance over domain-warped coordinates.

    Returns (region index or -1 for background, normalised distance to that region), where a
    cell belongs to a region if its normalised distance is below a noisy threshold near 1.
    """
    warp_e = 22.0 * value_noise(shape, 150.0 / res, rng)
    warp_e += 6.0 * value_noise(shape, 30.0 / res, rng)
    warp_n = 22.0 * value_noise(shape, 150.0 / res, rng)
    warp_n += 6.0 * value_noise(shape, 30.0 / res, rng)
    threshold = 1.0 + 0.12 * value_noise(shape, 40.0 / res, rng)
    np.clip(threshold, 0.75, 1.3, out=threshold)

    best = np.full(shape, np.inf, np.float32)
    index = np.full(shape, -1, np.int16)
    cells = shape[0]
    for i, region in enumerate(regions):
        east0, north0 = region.center_enu_m
        major, minor = region.extent_m
        half = 1.3 * major + 90.0  # largest threshold plus the largest warp
        c0, c1 = _span(east0 - half, east0 + half, res, cells)
        r0, r1 = _span(north0 - half, north0 + half, res, cells)
        if c0 >= c1 or r0 >= r1:
            continue
        east = (np.arange(c0, c1, dtype=np.float32) + 0.5) * res - east0
        north = (np.arange(r0, r1, dtype=np.float32) + 0.5) * res - north0
        de = east[None, :] + warp_e[r0:r1, c0:c1]
        dn = north[:, None] + warp_n[r0:r1, c0:c1]
        cos, sin = math.cos(region.angle_rad), math.sin(region.angle_rad)
        along = (de * cos + dn * sin) * np.float32(1.0 / major)
        across = (dn * cos - de * sin) * np.float32(1.0 / minor)
        exponent = _SHAPE_EXPONENT.get(region.class_id, 2.0)
        if exponent == 2.0:
            dist = np.sqrt(along * along + across * across)
        else:
            dist = (np.abs(along) ** exponent + np.abs(across) ** exponent) ** (1.0 / exponent)
        window_best = best[r0:r1, c0:c1]
        closer = dist < window_best
        window_best[closer] = dist[closer]
        index[r0:r1, c0:c1][closer] = i
    index[best > threshold] = -1
    return index, best


def _span(low_m: float, high_m: float, res: float, cells: int) -> tuple[int, int]:
    return max(0, int(low_m / res)), min(cells, int(math.ceil(high_m / res)))


def _lay_out_village(grid: np.ndarray, region: ClassRegion, index: int, region_index: np.ndarray,
                     region_dist: np.ndarray, res: float, rng: np.random.Generator) -> None:
    """Blocks of a few rows of houses (roof) with yards (grass) between, streets (road) between
    blocks, laid out on the region's axes; houses thin out towards the village edge."""
    rows, cols = np.nonzero(region_index == index)
    if len(rows) == 0:
        return
    house_u = rng.uniform(10.0, 18.0)
    gap_u = rng.uniform(2.0, 3.5)
    house_v = rng.uniform(9.0, 13.0)
    yard_v = rng.uniform(2.0, 4.0)
    street_v = rng.uniform(5.0, 7.0)
    rows_per_block = int(rng.integers(2, 5))
    pitch_v = house_v + yard_v
    period_v = rows_per_block * pitch_v - yard_v + street_v
    pitch_u = house_u + gap_u
    salt = int(rng.integers(1, 2 ** 20))

    east0, north0 = region.center_enu_m
    de = (cols + 0.5) * res - east0
    dn = (rows + 0.5) * res - north0
    cos, sin = math.cos(region.angle_rad), math.sin(region.angle_rad)
    u = de * cos + dn * sin + 1000.0 * pitch_u  # positive offsets keep floor() well-behaved
    v = dn * cos - de * sin + 1000.0 * period_v

    lot_u = np.floor(u / pitch_u).astype(np.int64)
    fu = u - lot_u * pitch_u
    block = np.floor(v / period_v).astype(np.int64)
    fv = v - block * period_v
    street = fv >= period_v - street_v
    house_row = np.minimum(np.floor(fv / pitch_v).astype(np.int64), rows_per_block - 1)
    fr = fv - house_row * pitch_v
    lot_v = rows_per_block * block + house_row

    hashed = _hash01(lot_u, lot_v, salt)
    shrink = 0.85 + 0.15 * _hash01(lot_v, lot_u, salt + 1)
    presence = np.clip(1.4 - 0.7 * region_dist[rows, cols], 0.3, 0.97)
    house = (~street & (fu < house_u * shrink) & (fr < house_v * shrink) & (hashed < presence))

    values = np.full(len(rows), GRASS, np.uint8)
    values[street] = ROAD
    values[house] = ROOF
    grid[rows, cols] = values


def _hash01(a: np.ndarray, b: np.ndarray, salt: int) -> np.ndarray:
    """Deterministic pseudo-random value in [0, 1) per integer pair (vectorised)."""
    x = (a * 73856093) ^ (b * 19349663) ^ (salt * 83492791)
    x = (x ^ (x >> 13)) * 1274126177
    x = x ^ (x >> 16)
    return (x & 0xFFFF).astype(np.float64) / 65536.0


def _add_beach(grid: np.ndarray, index: int, region_index: np.ndarray, region_dist: np.ndarray,
               rng: np.random.Generator) -> None:
    """Sand shore on the outer part of some lakes."""
    width = rng.choice([0.0, 0.12, 0.2, 0.28])
    if width <= 0:
        return
    shore = (region_index == index) & (region_dist > 1.0 - width)
    grid[shore] = SAND


def _add_copses(grid: np.ndarray, background: np.ndarray, res: float,
                rng: np.random.Generator) -> None:
    """Small woods and tree lines on the background."""
    cells = grid.shape[0]
    size_m = cells * res
    layer = np.zeros_like(grid)
    for _ in range(int(size_m * size_m / 40000.0)):
        centre = rng.uniform(0, cells, 2)
        axes = rng.uniform(8.0, 30.0, 2) / res
        cv2.ellipse(layer, (int(centre[0]), int(centre[1])), (int(axes[0]), int(axes[1])),
                    float(rng.uniform(0, 180)), 0, 360, 1, thickness=-1)
    grid[(layer > 0) & background] = FOREST


def _add_river(grid: np.ndarray, size_m: float, res: float, rng: np.random.Generator) -> None:
    """One meandering river from edge to edge with sandy banks."""
    start, end = _edge_to_edge(size_m, rng)
    path = meander(start, end, step_m=90.0, wiggle_m=45.0, rng=rng)
    width_m = rng.uniform(16.0, 28.0)
    bank_m = rng.uniform(4.0, 9.0)
    points = [np.round(path / res).astype(np.int32)]
    cv2.polylines(grid, points, False, SAND, thickness=max(1, int((width_m + 2 * bank_m) / res)))
    cv2.polylines(grid, points, False, WATER, thickness=max(1, int(width_m / res)))


def _add_roads(grid: np.ndarray, regions: tuple[ClassRegion, ...], size_m: float, res: float,
               rng: np.random.Generator) -> None:
    """Highways crossing the map and local roads linking villages and lots to the network."""
    for _ in range(max(1, int(round(size_m / 700.0)))):
        start, end = _edge_to_edge(size_m, rng)
        path = meander(start, end, step_m=150.0, wiggle_m=25.0, rng=rng)
        width_m = rng.uniform(16.0, 24.0)
        cv2.polylines(grid, [np.round(path / res).astype(np.int32)], False, ROAD,
                      thickness=max(1, int(width_m / res)))
    hubs = [np.array(r.center_enu_m) for r in regions if r.class_id in (ROOF, ROAD)]
    for i, hub in enumerate(hubs):
        others = [h for j, h in enumerate(hubs) if j != i]
        if others:
            target = min(others, key=lambda h: float(np.hypot(*(h - hub))))
        else:
            target = np.array([hub[0], 0.0])
        edge = _nearest_edge_point(hub, size_m)
        for goal in (target, edge):
            path = meander(hub, goal, step_m=60.0, wiggle_m=10.0, rng=rng)
            width_m = rng.uniform(6.0, 10.0)
            cv2.polylines(grid, [np.round(path / res).astype(np.int32)], False, ROAD,
                          thickness=max(1, int(width_m / res)))


def _edge_to_edge(size_m: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    a, b = rng.uniform(0.15 * size_m, 0.85 * size_m, 2)
    if rng.random() < 0.5:
        return np.array([-10.0, a]), np.array([size_m + 10.0, b])
    return np.array([a, -10.0]), np.array([b, size_m + 10.0])


def _nearest_edge_point(point: np.ndarray, size_m: float) -> np.ndarray:
    east, north = float(point[0]), float(point[1])
    options = [np.array([-10.0, north]), np.array([size_m + 10.0, north]),
               np.array([east, -10.0]), np.array([east, size_m + 10.0])]
    return min(options, key=lambda p: float(np.hypot(*(p - point))))
