"""Plot and marker geometry (fl_uav.planning.display)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.planning.display import region_ellipse_enu, tour_polyline_enu, uav_colour
from fl_uav.planning.trajectory_regions import GaussianRegion


def test_region_ellipse_lies_at_n_std_mahalanobis_distance_from_the_centre():
    # Arrange
    cov = np.array([[900.0, 300.0], [300.0, 400.0]])
    region = GaussianRegion(2, (50.0, -20.0), ((900.0, 300.0), (300.0, 400.0)), 1.0)
    # Act
    ring = region_ellipse_enu(region, n_std=2.0, num_points=40)
    # Assert
    diff = ring - np.array([50.0, -20.0])
    maha = np.sqrt(np.einsum('ni,ij,nj->n', diff, np.linalg.inv(cov), diff))
    assert ring.shape == (40, 2) and np.allclose(ring[0], ring[-1])
    assert maha == pytest.approx(np.full(40, 2.0))


def test_tour_polyline_is_closed_at_the_depot_in_visiting_order():
    # Arrange
    clients = np.array([[10.0, 0.0], [20.0, 5.0], [0.0, 30.0]])
    # Act
    line = tour_polyline_enu((1.0, 2.0), clients, [2, 0])
    # Assert
    assert line.tolist() == [[1.0, 2.0], [0.0, 30.0], [10.0, 0.0], [1.0, 2.0]]


def test_uav_colours_differ_for_the_first_ten_uavs():
    # Arrange / Act
    colours = {uav_colour(k) for k in range(10)}
    # Assert
    assert len(colours) == 10 and uav_colour(10) == uav_colour(0)
