"""Robust options: per-delta norm clipping (a wrapper; a fixed bound or the round's median
norm), coordinate-wise median, trimmed mean."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from fl_uav.aggregation._common import apply_step, flatten, keep_model
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)


def delta_norm(delta: Mapping[str, np.ndarray]) -> float:
    """||Δ||₂ over the whole model (all tensors, float64)."""
    return float(np.linalg.norm(flatten(delta, list(delta))))


def clip_delta(delta: Mapping[str, np.ndarray], max_norm: float) -> tuple[Weights, float]:
    """Δ · min(1, C/||Δ||₂) over the whole model (all tensors); returns (clipped, ||Δ||₂)."""
    names = list(delta)
    norm = delta_norm(delta)
    scale = 1.0 if norm <= max_norm else max_norm / norm
    clipped = {n: (np.asarray(delta[n], np.float64) * scale).astype(np.asarray(delta[n]).dtype)
               for n in names}
    return clipped, norm


def coordinate_median(deltas: Sequence[Mapping[str, np.ndarray]],
                      names: Sequence[str]) -> dict[str, np.ndarray]:
    """Coordinate-wise median (Yin et al., ICML 2018, Def. 1) of the deltas (float64)."""
    return {n: np.median(np.stack([np.asarray(d[n], np.float64) for d in deltas]), axis=0)
            for n in names}


def trimmed_mean(deltas: Sequence[Mapping[str, np.ndarray]], names: Sequence[str],
                 beta: float) -> dict[str, np.ndarray]:
    """Coordinate-wise β-trimmed mean (Yin et al., ICML 2018, Def. 2).

    Per coordinate, drop the k = ⌊β m⌋ largest and k smallest of the m values and average the
    rest; β < 1/2 keeps at least one value.
    """
    m = len(deltas)
    k = int(math.floor(beta * m))
    out = {}
    for n in names:
        stacked = np.sort(np.stack([np.asarray(d[n], np.float64) for d in deltas]), axis=0)
        out[n] = stacked[k:m - k].mean(axis=0)
    return out


CLIP_NORM_MEDIAN = 'median'
"""aggregation.clip_norm: clip to the median L2 norm of the round's deltas (adaptive)."""


class NormClip(Strategy):
    """Wrap any strategy: clip each delta to ||Δ_k||₂ ≤ C before the inner rule sees it.

    Δ_k ← Δ_k · min(1, C/||Δ_k||₂) over the whole flattened model (norm bounding, Sun et al.
    2019, "Can you really backdoor FL?", §4). ``max_norm``: C, a number > 0, or
    ``'median'``: C is the median of this round's ||Δ_k||₂ over the updates with samples
    (the ones a rule applies), the γ = 0.5 quantile of the update norms that Andrew et al.
    2021 ("Differentially private learning with adaptive clipping") track, here computed
    exactly each round. At most half of the deltas are larger than it, so a minority of
    drones that scale theirs up are cut to an honest drone's norm without a bound to tune.
    Knobs, metrics and state come from the inner strategy; ``metrics['clipped']`` counts
    clipped deltas, ``metrics['clip_norm']`` is the C used. Checkpoint: ``{'inner': ...}``
    in whatever format the inner strategy uses.
    """

    def __init__(self, inner: Strategy, max_norm: float | str) -> None:
        if max_norm != CLIP_NORM_MEDIAN and (isinstance(max_norm, str) or not max_norm > 0.0):
            raise ValueError(f'max_norm must be > 0 or {CLIP_NORM_MEDIAN!r}, got {max_norm!r}')
        self.inner = inner
        self.max_norm = max_norm if max_norm == CLIP_NORM_MEDIAN else float(max_norm)
        self.name = f'{inner.name}+clip'

    def configure_round(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        return self.inner.configure_round(round_index, drone_ids)

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        bound = self.max_norm
        if bound == CLIP_NORM_MEDIAN:
            norms = [delta_norm(u.delta) for u in updates if u.num_samples > 0]
            bound = float(np.median(norms)) if norms else math.inf   # none usable: no clip
        clipped_updates, clipped = [], 0
        for u in updates:
            delta, norm = clip_delta(u.delta, bound)
            clipped += norm > bound
            clipped_updates.append(dataclasses.replace(u, delta=delta))
        result = self.inner.aggregate(round_index, global_weights, clipped_updates)
        metrics = {**result.metrics, 'clipped': clipped}
        if math.isfinite(bound):
            metrics['clip_norm'] = bound
        return dataclasses.replace(result, metrics=metrics)

    def state_dict(self) -> dict:
        return {'inner': self.inner.state_dict()}

    def load_state_dict(self, state: Mapping) -> None:
        self.inner.load_state_dict(state['inner'])


class _RobustMean(Strategy):
    """Shared shape of the robust location rules: w ← w + η_s · center({Δ_k})."""

    def __init__(self, server_lr: float = 1.0) -> None:
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        self.server_lr = float(server_lr)

    def _center(self, deltas: Sequence[Weights], names: Sequence[str]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable = [u for u in updates if u.num_samples > 0]
        if not usable:
            return keep_model(global_weights)
        center = self._center([u.delta for u in usable], list(global_weights))
        return AggregateResult(weights=apply_step(global_weights, center, self.server_lr),
                               empty=False, metrics={'participants': len(usable)},
                               used=senders(usable))


class CoordinateMedian(_RobustMean):
    """w ← w + η_s · median_k(Δ_k), coordinate-wise, unweighted (Yin et al. 2018, Def. 1).

    It replaces the weighted mean, so it stands alone rather than wrapping another rule.
    Stateless, so the checkpoint is ``{}``.
    """

    name = 'median'

    def _center(self, deltas: Sequence[Weights], names: Sequence[str]) -> dict[str, np.ndarray]:
        return coordinate_median(deltas, names)


class TrimmedMean(_RobustMean):
    """w ← w + η_s · trmean_β(Δ_k), coordinate-wise (Yin et al. 2018, Def. 2), β ∈ [0, 1/2).

    It replaces the weighted mean, so it stands alone rather than wrapping another rule.
    Stateless, so the checkpoint is ``{}``.
    """

    name = 'trimmed_mean'

    def __init__(self, beta: float = 0.1, server_lr: float = 1.0) -> None:
        super().__init__(server_lr=server_lr)
        if not 0.0 <= beta < 0.5:
            raise ValueError(f'beta must be in [0, 0.5), got {beta}')
        self.beta = float(beta)

    def _center(self, deltas: Sequence[Weights], names: Sequence[str]) -> dict[str, np.ndarray]:
        return trimmed_mean(deltas, names, self.beta)
