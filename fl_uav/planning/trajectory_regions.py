"""Class regions and class priorities for data-aware trajectories (2CEOAFL eqs. (1)-(2)).

2CEOAFL eq. (1) models where each class is found as a spatial Gaussian mixture estimated from the
drone's geo-tagged samples; eq. (3) then uses only the centre μ_c and a scale λ_c of each
component. Here a class may own several components (``components_per_class``), each a
:class:`GaussianRegion`. λ is read as a standard deviation in metres (the paper compares it with
a distance; see the 2CEOAFL digest §1.6 "Units"): ``radius_m = sqrt(trace(Λ) / 2)``, the RMS
standard deviation of the component.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_uav.world.landcover import ClassRegion


@dataclass(frozen=True)
class GaussianRegion:
    """One spatial mixture component of a class (2CEOAFL eq. (1)).

    center_enu_m: mean μ (east_m, north_m); covariance_m2: 2x2 covariance Λ in m²;
    weight: mixture weight Π (share of all samples); class_id: the class c.
    """

    class_id: int
    center_enu_m: tuple[float, float]
    covariance_m2: tuple[tuple[float, float], tuple[float, float]]
    weight: float

    @property
    def radius_m(self) -> float:
        """λ of 2CEOAFL eq. (3) as a distance: the RMS standard deviation sqrt(trace(Λ) / 2)."""
        return math.sqrt(max(0.0, (self.covariance_m2[0][0] + self.covariance_m2[1][1]) / 2.0))


def regions_from_landcover(regions: tuple[ClassRegion, ...] | list[ClassRegion]
                           ) -> list[GaussianRegion]:
    """Moment-matched Gaussians of a generated world's class regions.

    A uniform ellipse with semi-axes (a, b) has covariance R diag(a²/4, b²/4) Rᵀ; the weight is
    the region's share of the total ellipse area.
    """
    areas = np.array([math.pi * r.extent_m[0] * r.extent_m[1] for r in regions], np.float64)
    total = float(areas.sum()) if len(areas) else 1.0
    out = []
    for region, area in zip(regions, areas):
        cos, sin = math.cos(region.angle_rad), math.sin(region.angle_rad)
        rot = np.array([[cos, -sin], [sin, cos]])
        cov = rot @ np.diag([region.extent_m[0] ** 2 / 4.0, region.extent_m[1] ** 2 / 4.0]) @ rot.T
        out.append(GaussianRegion(int(region.class_id),
                                  (float(region.center_enu_m[0]), float(region.center_enu_m[1])),
                                  _as_pair(cov), float(area / total)))
    return out


def fit_class_regions(positions_enu_m: np.ndarray, labels: np.ndarray, num_classes: int,
                      components_per_class: int = 1, seed: int = 0, max_iterations: int = 200,
                      min_std_m: float = 1.0) -> list[GaussianRegion]:
    """Fit 2CEOAFL eq. (1) from geo-tagged samples: an EM Gaussian mixture per class.

    positions_enu_m: (N, 2) sample positions; labels: (N,) class ids in [0, num_classes).
    Each class with samples gets min(components_per_class, its sample count) components,
    initialised by k-means++ (seeded) and refined by EM; covariances are floored at min_std_m²
    on the diagonal. Weights Π are the components' shares of all N samples, so they sum to 1.
    Classes without samples get no region. Deterministic for a seed.
    """
    positions = np.asarray(positions_enu_m, np.float64).reshape(-1, 2)
    labels = np.asarray(labels).reshape(-1)
    if len(positions) != len(labels):
        raise ValueError(f'{len(positions)} positions but {len(labels)} labels')
    if num_classes < 1 or components_per_class < 1:
        raise ValueError('num_classes and components_per_class must be >= 1')
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f'labels must be in [0, {num_classes})')
    rng = np.random.default_rng(seed)
    total = len(positions)
    regions = []
    for class_id in range(num_classes):
        points = positions[labels == class_id]
        if len(points) == 0:
            continue
        k = min(components_per_class, len(points))
        means, covs, weights = _gmm_em(points, k, rng, max_iterations, min_std_m ** 2)
        for mean, cov, weight in zip(means, covs, weights):
            regions.append(GaussianRegion(class_id, (float(mean[0]), float(mean[1])),
                                          _as_pair(cov), float(weight * len(points) / total)))
    return regions


def _as_pair(cov: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    return ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1])))


def _kmeans_pp(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    centres = [points[rng.integers(len(points))]]
    for _ in range(1, k):
        d2 = np.min(((points[:, None, :] - np.array(centres)[None]) ** 2).sum(2), axis=1)
        total = d2.sum()
        index = rng.choice(len(points), p=d2 / total) if total > 0 else rng.integers(len(points))
        centres.append(points[index])
    return np.array(centres)


def _gmm_em(points: np.ndarray, k: int, rng: np.random.Generator, max_iterations: int,
            min_var_m2: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plain EM for a full-covariance 2-D Gaussian mixture (standard Gaussian density)."""
    n = len(points)
    floor = min_var_m2 * np.eye(2)
    if k == 1:
        cov = np.cov(points.T, bias=True).reshape(2, 2) if n > 1 else np.zeros((2, 2))
        return points.mean(0, keepdims=True), (cov + floor)[None], np.ones(1)
    means = _kmeans_pp(points, k, rng)
    spread = np.cov(points.T, bias=True).reshape(2, 2) + floor
    covs = np.repeat(spread[None], k, axis=0)
    weights = np.full(k, 1.0 / k)
    previous = -np.inf
    for _ in range(max_iterations):
        log_p = np.empty((n, k))
        for j in range(k):
            diff = points - means[j]
            inv = np.linalg.inv(covs[j])
            maha = np.einsum('ni,ij,nj->n', diff, inv, diff)
            log_p[:, j] = (math.log(weights[j]) - 0.5 * maha - math.log(2.0 * math.pi)
                           - 0.5 * math.log(np.linalg.det(covs[j])))
        top = log_p.max(1, keepdims=True)
        log_norm = top[:, 0] + np.log(np.exp(log_p - top).sum(1))
        resp = np.exp(log_p - log_norm[:, None])
        likelihood = float(log_norm.sum())
        counts = resp.sum(0) + 1e-12
        weights = np.maximum(counts / n, 1e-12)
        means = (resp.T @ points) / counts[:, None]
        for j in range(k):
            diff = points - means[j]
            covs[j] = (resp[:, j, None] * diff).T @ diff / counts[j] + floor
        if likelihood - previous <= 1e-9 * n:
            break
        previous = likelihood
    order = np.lexsort((means[:, 1], means[:, 0]))  # stable output order
    return means[order], covs[order], weights[order]


def class_priorities(num_rounds: int, num_classes: int, seed: int) -> np.ndarray:
    """Time-varying class priorities ψ (T x C), 2CEOAFL eq. (2).

    ψ_t = softmax(M z(t)) with the digest's reading of the garbled basis (K = 3):
    z(t) = [sin(2πt/T), cos(5πt/T), sin(5πt/T)], t = 0..T-1, and M ~ N(0, 1) (C x K, seeded).
    """
    if num_rounds < 1 or num_classes < 1:
        raise ValueError('num_rounds and num_classes must be >= 1')
    t = np.arange(num_rounds, dtype=np.float64)
    basis = np.stack([np.sin(2 * np.pi * t / num_rounds), np.cos(5 * np.pi * t / num_rounds),
                      np.sin(5 * np.pi * t / num_rounds)], axis=1)
    mixing = np.random.default_rng(seed).standard_normal((num_classes, 3))
    scores = basis @ mixing.T
    scores -= scores.max(1, keepdims=True)
    psi = np.exp(scores)
    return psi / psi.sum(1, keepdims=True)
