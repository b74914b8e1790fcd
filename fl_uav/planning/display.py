"""Geometry and colours for showing plans: the PNG plots of ``fl-uav plan`` and rviz markers.

ROS-free and matplotlib-free; everything is in local ENU metres (east, north). The class
regions drawn are the Gaussian components of 2CEOAFL eq. (1) (ellipses at ``n_std`` standard
deviations along the eigenvectors of Λ); tours are FedEx's closed tours depot -> clients ->
depot (FedEx Sec. VI-A).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fl_uav.planning.trajectory_regions import GaussianRegion

# Land-cover class colours (RGB in 0..1), in fl_uav.world.landcover.CLASS_NAMES order.
CLASS_COLOURS_RGB = ((0.15, 0.35, 0.8), (0.1, 0.45, 0.15), (0.45, 0.75, 0.3), (0.85, 0.8, 0.3),
                     (0.7, 0.3, 0.25), (0.5, 0.5, 0.5), (0.9, 0.8, 0.6))
# One colour per UAV (RGB in 0..1), distinct for the first ten, then repeating.
UAV_COLOURS_RGB = ((0.12, 0.47, 0.71), (1.0, 0.5, 0.05), (0.17, 0.63, 0.17), (0.84, 0.15, 0.16),
                   (0.58, 0.4, 0.74), (0.55, 0.34, 0.29), (0.89, 0.47, 0.76), (0.5, 0.5, 0.5),
                   (0.74, 0.74, 0.13), (0.09, 0.75, 0.81))


def class_colour(class_id: int) -> tuple[float, float, float]:
    """Display colour of a land-cover class."""
    return CLASS_COLOURS_RGB[int(class_id) % len(CLASS_COLOURS_RGB)]


def uav_colour(uav: int) -> tuple[float, float, float]:
    """Display colour of UAV k (tours, and the clients it serves)."""
    return UAV_COLOURS_RGB[int(uav) % len(UAV_COLOURS_RGB)]


def region_axes_m(region: GaussianRegion, n_std: float = 1.0) -> tuple[float, float, float]:
    """(semi_major_m, semi_minor_m, angle_rad) of the n_std ellipse of a region's Λ (2CEOAFL
    eq. (1)); angle_rad is the major axis, counter-clockwise from east."""
    cov = np.asarray(region.covariance_m2, np.float64)
    values, vectors = np.linalg.eigh(0.5 * (cov + cov.T))
    values = np.maximum(values, 0.0)
    major = vectors[:, 1]
    return (float(n_std * math.sqrt(values[1])), float(n_std * math.sqrt(values[0])),
            float(math.atan2(major[1], major[0])))


def region_ellipse_enu(region: GaussianRegion, n_std: float = 1.0,
                       num_points: int = 48) -> np.ndarray:
    """(num_points, 2) east/north points of the region's n_std ellipse, closed (last = first)."""
    semi_major, semi_minor, angle = region_axes_m(region, n_std)
    t = np.linspace(0.0, 2.0 * math.pi, num_points)
    local = np.stack([semi_major * np.cos(t), semi_minor * np.sin(t)], axis=1)
    rotation = np.array([[math.cos(angle), -math.sin(angle)],
                         [math.sin(angle), math.cos(angle)]])
    return local @ rotation.T + np.asarray(region.center_enu_m, np.float64)


def tour_polyline_enu(depot_enu_m: Sequence[float], clients_enu_m: np.ndarray,
                      tour: Sequence[int]) -> np.ndarray:
    """(len(tour) + 2, 2) closed tour depot -> clients in visiting order -> depot (an empty
    tour is the depot twice)."""
    depot = np.asarray(depot_enu_m, np.float64).reshape(1, 2)
    clients = np.asarray(clients_enu_m, np.float64).reshape(-1, 2)
    return np.vstack([depot, clients[list(tour)], depot])
