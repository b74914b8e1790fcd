"""Land-cover maps from georeferenced rasters: a GeoTIFF (any raster GDAL reads) in any CRS,
resampled once to the world's ENU cells so that everything downstream sees a
:class:`~fl_uav.world.landcover.LandCoverMap`.

Placement (docs/field_guide.md, Configure): a world cell's centre, metres east and north of the
ENU origin, goes to WGS-84 latitude and longitude by :func:`fl_uav.world.geo.enu_to_geodetic`
(the frame the drones fly in), then to the raster's CRS by pyproj (datum shift included), then
to a pixel by the inverse of the raster's affine transform; the cell takes that pixel's code
(nearest neighbour), mapped to a class by ``world.class_map``. The raster's nodata (its mask),
codes the map leaves out and ground outside the raster are
:data:`~fl_uav.world.landcover.UNKNOWN`.

pyproj runs on control points every few cells only; pixel positions between them are bilinear,
with the step halved until the interpolation is within :data:`MAX_INTERPOLATION_ERROR_PX` of the
exact transform at the control cells' centres.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np
import rasterio
import rasterio.errors
import rasterio.windows
from pyproj import CRS, Transformer

from fl_uav.world.geo import GeoOrigin, enu_to_geodetic
from fl_uav.world.landcover import (
    CLASS_NAMES,
    UNKNOWN,
    LandCoverMap,
    MapFileError,
    WorldConfig,
    parse_class_map,
)

CONTROL_SPACING_M = 32.0
"""Largest spacing of the exactly transformed control points."""

MAX_INTERPOLATION_ERROR_PX = 0.01
"""Largest allowed error of the interpolated pixel position, in raster pixels."""

FENCE_EDGE_SAMPLES = 101
"""Points checked along each edge of the geofence box."""

_ROWS_PER_CHUNK = 256

Box = tuple[float, float, float, float]
"""(east_min_m, north_min_m, east_max_m, north_max_m) in the local ENU frame."""


@dataclass(frozen=True)
class RasterInfo:
    """What a raster file says about itself (``fl-uav map``).

    bounds: (left, bottom, right, top) in the raster's CRS; pixel_size: (x, y) in its units;
    lonlat_bounds: (west, south, east, north) in degrees (WGS 84).
    """

    path: str
    driver: str
    width: int
    height: int
    dtype: str
    nodata: float | None
    crs: str
    crs_units: str
    bounds: tuple[float, float, float, float]
    pixel_size: tuple[float, float]
    lonlat_bounds: tuple[float, float, float, float]


class GeoRaster:
    """An open land-cover raster placed against an ENU origin (a context manager).

    Raises FileNotFoundError, or :class:`MapFileError` naming the file for a file GDAL cannot
    read, a raster without a CRS, or one whose first band holds no integer codes.
    """

    def __init__(self, path: str | os.PathLike, origin: GeoOrigin) -> None:
        self.path = os.fspath(path)
        self.origin = origin
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f'land-cover map file not found: {self.path!r}')
        try:
            with warnings.catch_warnings():      # no CRS is said below, naming the file
                warnings.simplefilter('ignore', rasterio.errors.NotGeoreferencedWarning)
                self._src = rasterio.open(self.path)
        except rasterio.errors.RasterioError as error:
            raise MapFileError(f'land-cover raster {self.path!r} is not a readable raster '
                               f'(a GeoTIFF or another format GDAL reads): '
                               f'{error}') from error
        try:
            self._check()
        except MapFileError:
            self._src.close()
            raise
        self._crs = CRS.from_wkt(self._src.crs.to_wkt())
        self._to_raster = Transformer.from_crs('EPSG:4326', self._crs, always_xy=True)
        self._inverse = ~self._src.transform

    def _check(self) -> None:
        src = self._src
        if src.crs is None:
            raise MapFileError(f'land-cover raster {self.path!r} has no CRS, so its cells '
                               f'cannot be placed on the ground; give it one, e.g. '
                               f'gdal_edit.py -a_srs EPSG:32632 {self.path}')
        if not np.issubdtype(np.dtype(src.dtypes[0]), np.integer):
            raise MapFileError(f'land-cover raster {self.path!r} holds {src.dtypes[0]} values '
                               f'in band 1; land-cover codes are integers')

    def __enter__(self) -> GeoRaster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file."""
        self._src.close()

    def info(self) -> RasterInfo:
        """The raster's size, CRS, extent and pixel size."""
        src = self._src
        left, bottom, right, top = src.bounds
        corner_x = np.array([left, right, right, left, (left + right) / 2, (left + right) / 2])
        corner_y = np.array([bottom, bottom, top, top, bottom, top])
        lon, lat = Transformer.from_crs(self._crs, 'EPSG:4326', always_xy=True).transform(
            corner_x, corner_y)
        units = self._crs.axis_info[0].unit_name if self._crs.axis_info else 'unknown'
        return RasterInfo(
            self.path, src.driver, src.width, src.height, src.dtypes[0], src.nodata,
            _crs_name(self._crs), units, (left, bottom, right, top),
            (abs(src.transform.a), abs(src.transform.e)),
            (float(np.min(lon)), float(np.min(lat)), float(np.max(lon)), float(np.max(lat))))

    def pixel_at(self, east_m, north_m) -> tuple[np.ndarray, np.ndarray]:
        """Fractional (column, row) of the raster at ENU points (exact; NaN where the raster's
        CRS has no coordinates for the point)."""
        lat, lon, _ = enu_to_geodetic(self.origin, np.asarray(east_m, float),
                                      np.asarray(north_m, float), 0.0)
        x, y = self._to_raster.transform(np.asarray(lon), np.asarray(lat), errcheck=False)
        inv = self._inverse
        x, y = np.asarray(x, float), np.asarray(y, float)
        col = inv.a * x + inv.b * y + inv.c
        row = inv.d * x + inv.e * y + inv.f
        bad = ~(np.isfinite(col) & np.isfinite(row))
        col[bad] = np.nan
        row[bad] = np.nan
        return col, row

    def uncovered_point(self, box: Box) -> tuple[float, float] | None:
        """A point (east_m, north_m) on the box's boundary outside the raster, or None if the
        raster covers the box (its footprint is convex in pixel space: the boundary decides)."""
        east_min, north_min, east_max, north_max = box
        t = np.linspace(0.0, 1.0, FENCE_EDGE_SAMPLES)
        along_e = east_min + t * (east_max - east_min)
        along_n = north_min + t * (north_max - north_min)
        east = np.concatenate([along_e, np.full_like(t, east_max), along_e[::-1],
                               np.full_like(t, east_min)])
        north = np.concatenate([np.full_like(t, north_min), along_n, np.full_like(t, north_max),
                                along_n[::-1]])
        col, row = self.pixel_at(east, north)
        with np.errstate(invalid='ignore'):
            inside = ((col >= 0) & (col <= self._src.width) & (row >= 0)
                      & (row <= self._src.height))
        if inside.all():
            return None
        first = int(np.argmin(inside))
        return float(east[first]), float(north[first])

    def check_covers(self, box: Box) -> None:
        """MapFileError naming the file unless the raster covers the box (the geofence)."""
        point = self.uncovered_point(box)
        if point is None:
            return
        east_min, north_min, east_max, north_max = box
        lat, lon, _ = enu_to_geodetic(self.origin, point[0], point[1], 0.0)
        west, south, east, north = self.info().lonlat_bounds
        raise MapFileError(
            f'land-cover raster {self.path!r} does not cover the geofence (east '
            f'[{east_min:g}, {east_max:g}] m, north [{north_min:g}, {north_max:g}] m from the '
            f'origin lat {self.origin.lat_deg:.6f}, lon {self.origin.lon_deg:.6f}): its point '
            f'east {point[0]:.1f} m, north {point[1]:.1f} m (lat {lat:.6f}, lon {lon:.6f}) is '
            f'outside the raster, which spans lat [{south:.6f}, {north:.6f}], lon '
            f'[{west:.6f}, {east:.6f}]')

    def code_counts(self) -> tuple[Counter, int]:
        """(pixels per code over the whole raster, nodata pixels), read block by block."""
        counts: Counter = Counter()
        nodata = 0
        small = np.dtype(self._src.dtypes[0]) in (np.dtype(np.uint8), np.dtype(np.uint16))
        for _, window in self._src.block_windows(1):
            data = self._src.read(1, window=window)
            valid = self._src.read_masks(1, window=window) != 0
            nodata += int(valid.size - np.count_nonzero(valid))
            if small:                                   # bincount: no sort
                numbers = np.bincount(data[valid].ravel())
                codes = np.flatnonzero(numbers)
                numbers = numbers[codes]
            else:
                codes, numbers = np.unique(data[valid], return_counts=True)
            counts.update(dict(zip(codes.tolist(), numbers.tolist())))
        return counts, nodata

    def to_world(self, config: WorldConfig) -> LandCoverMap:
        """The world's land-cover map: every cell the class of the pixel under its centre."""
        class_of_code = parse_class_map(config.class_map)
        if not class_of_code:
            raise MapFileError(f'world.class_map is empty: no code of {self.path!r} would '
                               f'map to a class')
        cells, res = config.cells_per_side, config.resolution_m
        col_f, row_f = self._interpolator(cells, res)
        window, classes = self._classes_near(col_f.controls, row_f.controls, class_of_code)
        grid = np.full((cells, cells), UNKNOWN, np.uint8)
        height, width = classes.shape
        for r0 in range(0, cells, _ROWS_PER_CHUNK):
            rows = slice(r0, min(cells, r0 + _ROWS_PER_CHUNK))
            with np.errstate(invalid='ignore'):
                col = np.floor(col_f.rows(rows)) - window.col_off
                row = np.floor(row_f.rows(rows)) - window.row_off
                inside = (col >= 0) & (col < width) & (row >= 0) & (row < height)
            grid[rows][inside] = classes[row[inside].astype(np.intp), col[inside].astype(np.intp)]
        return LandCoverMap(grid, res, class_names=CLASS_NAMES, seed=config.seed)

    def _interpolator(self, cells: int, res: float) -> tuple[_Bilinear, _Bilinear]:
        step = max(1, min(cells - 1, int(CONTROL_SPACING_M / res)))
        while True:
            index = np.unique(np.append(np.arange(0, cells, step), cells - 1))
            centres_m = (index + 0.5) * res
            east, north = np.meshgrid(centres_m, centres_m)     # [row (north), col (east)]
            col, row = self.pixel_at(east, north)
            if step == 1:
                break
            mid_m = (index[:-1] + index[1:] + 1) / 2 * res
            mid_east, mid_north = np.meshgrid(mid_m, mid_m)
            exact_col, exact_row = self.pixel_at(mid_east, mid_north)
            with np.errstate(invalid='ignore'):
                error = np.nanmax(np.abs(np.stack([
                    exact_col - _quad_mean(col), exact_row - _quad_mean(row)])), initial=0.0)
            if error <= MAX_INTERPOLATION_ERROR_PX:
                break
            step = max(1, step // 2)
        return _Bilinear(index, col, cells), _Bilinear(index, row, cells)

    def _classes_near(self, col: np.ndarray, row: np.ndarray, class_of_code: dict[int, int]
                      ) -> tuple[rasterio.windows.Window, np.ndarray]:
        """The window of the raster under the world (a pixel of margin) and its classes."""
        src = self._src
        finite = np.isfinite(col) & np.isfinite(row)
        if not finite.any():
            return rasterio.windows.Window(0, 0, 0, 0), np.zeros((0, 0), np.uint8)
        c0 = int(np.clip(np.floor(col[finite].min()) - 1, 0, src.width))
        c1 = int(np.clip(np.floor(col[finite].max()) + 2, 0, src.width))
        r0 = int(np.clip(np.floor(row[finite].min()) - 1, 0, src.height))
        r1 = int(np.clip(np.floor(row[finite].max()) + 2, 0, src.height))
        window = rasterio.windows.Window(c0, r0, c1 - c0, r1 - r0)
        if c1 <= c0 or r1 <= r0:
            return window, np.zeros((0, 0), np.uint8)
        codes, index = np.unique(src.read(1, window=window), return_inverse=True)
        lookup = np.array([class_of_code.get(int(code), UNKNOWN) for code in codes], np.uint8)
        classes = lookup[index].reshape(window.height, window.width)
        classes[src.read_masks(1, window=window) == 0] = UNKNOWN
        return window, classes


class _Bilinear:
    """Values on a control grid (rows and columns at ``index``) interpolated to every cell."""

    def __init__(self, index: np.ndarray, controls: np.ndarray, cells: int) -> None:
        self.controls = controls
        cell = np.arange(cells)
        self._lower = np.clip(np.searchsorted(index, cell, side='right') - 1, 0, len(index) - 2)
        self._t = (cell - index[self._lower]) / (index[self._lower + 1] - index[self._lower])
        t = self._t
        self._by_col = controls[:, self._lower] * (1.0 - t) + controls[:, self._lower + 1] * t

    def rows(self, rows: slice) -> np.ndarray:
        """The interpolated values of the given grid rows (all columns)."""
        lower, t = self._lower[rows], self._t[rows][:, None]
        return self._by_col[lower] * (1.0 - t) + self._by_col[lower + 1] * t


def _quad_mean(values: np.ndarray) -> np.ndarray:
    return 0.25 * (values[:-1, :-1] + values[:-1, 1:] + values[1:, :-1] + values[1:, 1:])


def _crs_name(crs: CRS) -> str:
    authority = crs.to_authority()
    return f'{crs.name} ({":".join(authority)})' if authority else crs.name


def load_raster_world(config: WorldConfig, origin: GeoOrigin,
                      fence_box: Box | None = None) -> LandCoverMap:
    """``config.map_file`` (a georeferenced raster) as the world's map, placed at ``origin``.

    With ``fence_box``: MapFileError naming the file if the raster does not cover it, or if no
    cell inside it maps to a class (a class map for another product).
    """
    with GeoRaster(config.map_file, origin) as raster:
        if fence_box is not None:
            raster.check_covers(fence_box)
        world = raster.to_world(config)
        if fence_box is not None and not np.any(_cells_in(world, fence_box) != UNKNOWN):
            counts, _ = raster.code_counts()
            found = ', '.join(str(c) for c, _ in counts.most_common(12)) or 'none but nodata'
            raise MapFileError(
                f'no cell of land-cover raster {config.map_file!r} inside the geofence maps to '
                f'a class: world.class_map maps the codes '
                f'{", ".join(str(c) for c in parse_class_map(config.class_map))}, the raster '
                f'holds {found}')
    return world


def _cells_in(world: LandCoverMap, box: Box) -> np.ndarray:
    """The world's cells that the box (ENU m) overlaps."""
    east_min, north_min, east_max, north_max = box
    res, cells = world.resolution_m, world.cells_per_side
    c0, c1 = int(max(0, east_min // res)), int(min(cells, -(-east_max // res)))
    r0, r1 = int(max(0, north_min // res)), int(min(cells, -(-north_max // res)))
    return world.class_grid[r0:r1, c0:c1]


def raster_report(path: str | os.PathLike, world: WorldConfig, origin: GeoOrigin,
                  fence_box: Box) -> tuple[str, bool]:
    """``fl-uav map``'s account of a raster (size, CRS, extent, pixel size, code histogram,
    the world's classes inside the fence) and whether the fleet can use it: it covers the fence
    box and some cell inside maps to a class.

    Raises as :class:`GeoRaster` does for a file that cannot be placed at all.
    """
    class_of_code = parse_class_map(world.class_map)
    with GeoRaster(path, origin) as raster:
        info = raster.info()
        counts, nodata = raster.code_counts()
        try:
            raster.check_covers(fence_box)
            covered, verdict = True, 'inside the raster'
        except MapFileError as error:
            covered, verdict = False, f'NOT covered: {error}'
        land = raster.to_world(world)
    left, bottom, right, top = info.bounds
    west, south, east, north = info.lonlat_bounds
    total = info.width * info.height
    digits = 6 if info.crs_units.startswith('deg') else 2
    lines = [
        f'raster      {info.path} ({info.driver}, {info.width} x {info.height} px, '
        f'{info.dtype}, nodata {"none" if info.nodata is None else f"{info.nodata:g}"})',
        f'CRS         {info.crs}',
        f'extent      x [{left:.{digits}f}, {right:.{digits}f}], y [{bottom:.{digits}f}, '
        f'{top:.{digits}f}] {info.crs_units}',
        f'            lat [{south:.6f}, {north:.6f}], lon [{west:.6f}, {east:.6f}]',
        f'pixel size  {info.pixel_size[0]:.6g} x {info.pixel_size[1]:.6g} {info.crs_units}',
        f'codes       {total} px   (world.class_map: code -> class)',
    ]
    for code, pixels in sorted(counts.items()):
        name = (CLASS_NAMES[class_of_code[code]] if code in class_of_code
                else 'unknown (not in world.class_map)')
        lines.append(f'  {code:>8}  {pixels:>12}  {100 * pixels / total:5.1f} %  {name}')
    if nodata:
        lines.append(f'  {"nodata":>8}  {nodata:>12}  {100 * nodata / total:5.1f} %  unknown')
    east_min, north_min, east_max, north_max = fence_box
    lines += [
        f'world       {land.size_m:g} m square of {land.resolution_m:g} m cells, south-west '
        f'corner at lat {origin.lat_deg:.6f}, lon {origin.lon_deg:.6f} (autopilot.origin_*)',
        f'geofence    east [{east_min:g}, {east_max:g}] m, north [{north_min:g}, '
        f'{north_max:g}] m: {verdict}',
        f'in fence    {_fence_shares(land, fence_box)}',
    ]
    labelled = bool(np.any(_cells_in(land, fence_box) != UNKNOWN))
    if not labelled:
        lines.append('            no cell inside the fence maps to a class: the nodes refuse '
                     'this raster with this world.class_map')
    return '\n'.join(lines) + '\n', covered and labelled


def _fence_shares(world: LandCoverMap, box: Box) -> str:
    """The world's classes inside the box, largest first, unknown last."""
    inside = _cells_in(world, box)
    if not inside.size:
        return 'no cell of the world'
    counts = np.bincount(inside.ravel(), minlength=UNKNOWN + 1)
    shares = [(counts[c] / inside.size, name) for c, name in enumerate(world.class_names)
              if counts[c]]
    parts = [f'{name} {100 * share:.1f} %' for share, name in sorted(shares, reverse=True)]
    return ', '.join([*parts, f'unknown {100 * counts[UNKNOWN] / inside.size:.1f} %'])
