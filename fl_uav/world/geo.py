"""Geodetic <-> local ENU conversions around a fixed geographic origin.

The local frame is a tangent plane at the origin: east and north come from the WGS-84 radii of
curvature at the origin latitude (meridian radius for north, prime-vertical radius for east), and
up is the altitude difference to the origin (AMSL, metres). The east scale uses the mean of the
origin and point latitudes, which keeps horizontal distances within a few millimetres of the
ellipsoid over 2 km while staying exactly invertible in closed form.

All functions accept floats or numpy arrays (element-wise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

WGS84_SEMI_MAJOR_AXIS_M = 6378137.0
WGS84_FLATTENING = 1.0 / 298.257223563
WGS84_ECCENTRICITY_SQ = WGS84_FLATTENING * (2.0 - WGS84_FLATTENING)


@dataclass(frozen=True)
class GeoOrigin:
    """Geographic origin of a local ENU frame (defaults: PX4 SITL home, Zurich)."""

    lat_deg: float = 47.397742
    lon_deg: float = 8.545594
    alt_amsl_m: float = 488.0

    def __post_init__(self) -> None:
        if not -89.0 <= self.lat_deg <= 89.0:
            raise ValueError(f'lat_deg must be in [-89, 89], got {self.lat_deg}')
        if not -180.0 <= self.lon_deg <= 180.0:
            raise ValueError(f'lon_deg must be in [-180, 180], got {self.lon_deg}')
        if not math.isfinite(self.alt_amsl_m):
            raise ValueError(f'alt_amsl_m must be finite, got {self.alt_amsl_m}')


def radii_of_curvature_m(lat_deg: float) -> tuple[float, float]:
    """WGS-84 meridian and prime-vertical radii of curvature (metres) at a latitude."""
    sin_lat = math.sin(math.radians(lat_deg))
    denom = 1.0 - WGS84_ECCENTRICITY_SQ * sin_lat * sin_lat
    prime_vertical_m = WGS84_SEMI_MAJOR_AXIS_M / math.sqrt(denom)
    meridian_m = WGS84_SEMI_MAJOR_AXIS_M * (1.0 - WGS84_ECCENTRICITY_SQ) / denom ** 1.5
    return meridian_m, prime_vertical_m


def _scales(origin: GeoOrigin) -> tuple[float, float]:
    meridian_m, prime_vertical_m = radii_of_curvature_m(origin.lat_deg)
    return meridian_m + origin.alt_amsl_m, prime_vertical_m + origin.alt_amsl_m


def _wrap_lon_deg(lon_deg):
    return (np.asarray(lon_deg) + 180.0) % 360.0 - 180.0


def geodetic_to_enu(origin: GeoOrigin, lat_deg, lon_deg, alt_amsl_m):
    """Latitude, longitude (degrees) and AMSL altitude (m) to (east_m, north_m, up_m)."""
    north_scale_m, east_scale_m = _scales(origin)
    dlat_rad = np.radians(np.asarray(lat_deg, dtype=float) - origin.lat_deg)
    dlon_rad = np.radians(_wrap_lon_deg(np.asarray(lon_deg, dtype=float) - origin.lon_deg))
    mean_lat_rad = np.radians(0.5 * (np.asarray(lat_deg, dtype=float) + origin.lat_deg))
    north_m = dlat_rad * north_scale_m
    east_m = dlon_rad * east_scale_m * np.cos(mean_lat_rad)
    up_m = np.asarray(alt_amsl_m, dtype=float) - origin.alt_amsl_m
    return _out(east_m), _out(north_m), _out(up_m)


def enu_to_geodetic(origin: GeoOrigin, east_m, north_m, up_m):
    """Local (east_m, north_m, up_m) to (lat_deg, lon_deg, alt_amsl_m)."""
    north_scale_m, east_scale_m = _scales(origin)
    lat_deg = origin.lat_deg + np.degrees(np.asarray(north_m, dtype=float) / north_scale_m)
    mean_lat_rad = np.radians(0.5 * (lat_deg + origin.lat_deg))
    lon_deg = origin.lon_deg + np.degrees(
        np.asarray(east_m, dtype=float) / (east_scale_m * np.cos(mean_lat_rad)))
    alt_amsl_m = origin.alt_amsl_m + np.asarray(up_m, dtype=float)
    return _out(lat_deg), _out(_wrap_lon_deg(lon_deg)), _out(alt_amsl_m)


def enu_to_ned(east_m, north_m, up_m):
    """ENU (east, north, up) to NED (north, east, down)."""
    return north_m, east_m, -up_m


def ned_to_enu(north_m, east_m, down_m):
    """NED (north, east, down) to ENU (east, north, up)."""
    return east_m, north_m, -down_m


def wrap_angle_rad(angle_rad):
    """Wrap an angle to [-pi, pi)."""
    return _out((np.asarray(angle_rad, dtype=float) + math.pi) % (2.0 * math.pi) - math.pi)


def yaw_enu_to_ned(yaw_enu_rad):
    """ENU yaw (counter-clockwise from east) to NED yaw/heading (clockwise from north)."""
    return wrap_angle_rad(0.5 * math.pi - np.asarray(yaw_enu_rad, dtype=float))


def yaw_ned_to_enu(yaw_ned_rad):
    """NED yaw/heading (clockwise from north) to ENU yaw (counter-clockwise from east)."""
    return wrap_angle_rad(0.5 * math.pi - np.asarray(yaw_ned_rad, dtype=float))


def _out(value):
    """Return a Python float for 0-d results, the array otherwise."""
    arr = np.asarray(value)
    return float(arr) if arr.ndim == 0 else arr
