"""Geodetic <-> ENU conversions: round trips, known scales and agreement with the ellipsoid."""

import math

import numpy as np
import pytest

from fl_uav.world.geo import (
    WGS84_ECCENTRICITY_SQ,
    WGS84_SEMI_MAJOR_AXIS_M,
    GeoOrigin,
    enu_to_geodetic,
    enu_to_ned,
    geodetic_to_enu,
    ned_to_enu,
    wrap_angle_rad,
    yaw_enu_to_ned,
    yaw_ned_to_enu,
)

ORIGIN = GeoOrigin()


def _ecef_m(lat_deg, lon_deg, alt_m):
    """Exact WGS-84 geodetic to ECEF, the reference the local frame is checked against."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    prime_vertical_m = WGS84_SEMI_MAJOR_AXIS_M / math.sqrt(
        1.0 - WGS84_ECCENTRICITY_SQ * math.sin(lat) ** 2)
    return np.array([
        (prime_vertical_m + alt_m) * math.cos(lat) * math.cos(lon),
        (prime_vertical_m + alt_m) * math.cos(lat) * math.sin(lon),
        (prime_vertical_m * (1.0 - WGS84_ECCENTRICITY_SQ) + alt_m) * math.sin(lat),
    ])


def test_default_origin_is_px4_sitl_home():
    assert (ORIGIN.lat_deg, ORIGIN.lon_deg, ORIGIN.alt_amsl_m) == (47.397742, 8.545594, 488.0)


def test_origin_maps_to_zero():
    # Execute
    east_m, north_m, up_m = geodetic_to_enu(ORIGIN, ORIGIN.lat_deg, ORIGIN.lon_deg,
                                            ORIGIN.alt_amsl_m)
    # Assert
    assert (east_m, north_m, up_m) == pytest.approx((0.0, 0.0, 0.0), abs=1e-9)


@pytest.mark.parametrize('enu_m', [(0.0, 0.0, 0.0), (1500.0, -800.0, 30.0),
                                   (-2000.0, 2000.0, -5.0), (0.01, 0.02, 120.0)])
def test_enu_round_trip(enu_m):
    # Execute
    lat_deg, lon_deg, alt_m = enu_to_geodetic(ORIGIN, *enu_m)
    back_m = geodetic_to_enu(ORIGIN, lat_deg, lon_deg, alt_m)
    # Assert
    assert back_m == pytest.approx(enu_m, abs=1e-6)


def test_geodetic_round_trip_vectorised():
    # Prepare
    rng = np.random.default_rng(0)
    lat_deg = ORIGIN.lat_deg + rng.uniform(-0.02, 0.02, 100)
    lon_deg = ORIGIN.lon_deg + rng.uniform(-0.03, 0.03, 100)
    alt_m = ORIGIN.alt_amsl_m + rng.uniform(-50, 150, 100)
    # Execute
    enu = geodetic_to_enu(ORIGIN, lat_deg, lon_deg, alt_m)
    back = enu_to_geodetic(ORIGIN, *enu)
    # Assert
    np.testing.assert_allclose(back[0], lat_deg, atol=1e-11)
    np.testing.assert_allclose(back[1], lon_deg, atol=1e-11)
    np.testing.assert_allclose(back[2], alt_m, atol=1e-9)


def test_one_degree_of_latitude_is_the_meridian_arc():
    # At 47.4 deg the meridian arc is about 111.18 km per degree.
    _, north_m, _ = geodetic_to_enu(GeoOrigin(47.4, 8.5, 0.0), 47.9, 8.5, 0.0)
    assert north_m == pytest.approx(111_180.0 * 0.5, rel=2e-4)


@pytest.mark.parametrize('bearing_deg', [0.0, 37.0, 90.0, 135.0, 200.0, 290.0])
def test_horizontal_distances_match_the_ellipsoid_to_a_centimetre_over_2_km(bearing_deg):
    # Prepare: a point 2 km away at the origin's altitude.
    east_m = 2000.0 * math.sin(math.radians(bearing_deg))
    north_m = 2000.0 * math.cos(math.radians(bearing_deg))
    lat_deg, lon_deg, alt_m = enu_to_geodetic(ORIGIN, east_m, north_m, 0.0)
    # Execute: the straight-line distance on the ellipsoid (chord ~ arc at 2 km: < 0.1 mm).
    chord_m = np.linalg.norm(_ecef_m(lat_deg, lon_deg, alt_m)
                             - _ecef_m(ORIGIN.lat_deg, ORIGIN.lon_deg, ORIGIN.alt_amsl_m))
    # Assert
    assert chord_m == pytest.approx(2000.0, abs=0.01)


def test_longitude_wraps_across_the_antimeridian():
    origin = GeoOrigin(0.0, 179.9999, 0.0)
    east_m, _, _ = geodetic_to_enu(origin, 0.0, -179.9999, 0.0)
    assert east_m == pytest.approx(22.26, abs=0.01)
    _, lon_deg, _ = enu_to_geodetic(origin, east_m, 0.0, 0.0)
    assert lon_deg == pytest.approx(-179.9999, abs=1e-9)


def test_enu_ned_swap_axes_and_flip_vertical():
    assert enu_to_ned(1.0, 2.0, 3.0) == (2.0, 1.0, -3.0)
    assert ned_to_enu(*enu_to_ned(1.0, 2.0, 3.0)) == (1.0, 2.0, 3.0)
    north, east, down = enu_to_ned(np.array([1.0]), np.array([2.0]), np.array([3.0]))
    assert (north[0], east[0], down[0]) == (2.0, 1.0, -3.0)


@pytest.mark.parametrize(('yaw_enu_deg', 'yaw_ned_deg'),
                         [(0.0, 90.0), (90.0, 0.0), (180.0, -90.0), (-90.0, -180.0)])
def test_yaw_conversions(yaw_enu_deg, yaw_ned_deg):
    assert math.degrees(yaw_enu_to_ned(math.radians(yaw_enu_deg))) == pytest.approx(yaw_ned_deg)
    assert math.degrees(yaw_ned_to_enu(math.radians(yaw_ned_deg))) == pytest.approx(
        math.degrees(wrap_angle_rad(math.radians(yaw_enu_deg))))


def test_origin_validates_latitude():
    with pytest.raises(ValueError, match='lat_deg'):
        GeoOrigin(lat_deg=95.0)
