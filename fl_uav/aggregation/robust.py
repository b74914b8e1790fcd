"""Robust options: per-delta norm clipping (a wrapper; a fixed bound or a multiple of the round's
median norm, the default), coordinate-wise median, trimmed mean, Krum and multi-Krum; what a
drone's sample count may weigh (:func:`cap_samples`) and the per-drone update norms the engine
and the station report (:func:`norm_report`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from fl_uav.aggregation._common import apply_step, flatten, keep_model, weighted_sum
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    delta_norm,
    senders,
)


def clip_delta(delta: Mapping[str, np.ndarray], max_norm: float,
               norm: float | None = None) -> tuple[Weights, float]:
    """Δ · min(1, C/||Δ||₂) over the whole model (all tensors); returns (clipped, ||Δ||₂).
    ``norm``: ||Δ||₂ if already known. A Δ within C is returned as it is (its arrays, not
    copies: Δ · 1 would be the same numbers)."""
    names = list(delta)
    norm = delta_norm(delta) if norm is None else norm
    if norm <= max_norm:
        return {n: delta[n] for n in names}, norm
    scale = max_norm / norm
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
"""aggregation.clip_norm: clip to aggregation.clip_factor × the median L2 norm of the round's
deltas (adaptive)."""
DEFAULT_CLIP_FACTOR = 2.0
"""aggregation.clip_factor's default: the bound is twice the round's median norm. Measured on
quick_digits (20 rounds, 3 seeds, docs/benchmarks/robustness.md): 1 × the median cost 2.3
points of clean accuracy (it cuts every honest update above the median, half of them), 2 ×
none, and a ×100 drone is then cut to twice an honest drone's norm."""
OUTLIER_FACTOR = 5.0
"""An update whose L2 norm exceeds this many times the round's median update norm is reported as
an outlier (engine: update_norms.csv and summary.json; station: the round record). Honest
drones of clean FedAvg runs on quick_digits (20 rounds, 3 seeds, 1,200 updates) reached 3.8 ×
the median late in a run, when the model has converged and a few drones' classes still move it
(docs/benchmarks/robustness.md); a ×100 update is flagged at any factor below 50."""


def median_norm(norms: Sequence[float]) -> float | None:
    """The median of the positive norms (an all-zero update says nothing of the scale: a FedEx
    UAV without clients uploads u_k = 0); None when there is none."""
    positive = [n for n in norms if n > 0.0]
    return float(np.median(positive)) if positive else None


@dataclasses.dataclass(frozen=True)
class NormReport:
    """One round's update norms: per sender ||Δ||₂ (as received, before any clipping), their
    median (None: no positive norm) and the senders above OUTLIER_FACTOR × the median."""

    norms: dict[int, float]
    median: float | None
    outliers: tuple[int, ...]

    def ratio(self, sender: int) -> float | None:
        """||Δ_sender|| / median (None without a median)."""
        return None if not self.median else self.norms[sender] / self.median


def norm_report(updates: Sequence[ClientUpdate],
                outlier_factor: float = OUTLIER_FACTOR) -> NormReport:
    """The round's per-drone update norms and outliers (every update given, with samples or
    not: what each drone sent)."""
    norms = {u.sender: u.norm for u in updates}
    median = median_norm(list(norms.values()))
    outliers = () if median is None else tuple(
        sorted(k for k, n in norms.items() if n > outlier_factor * median))
    return NormReport(norms, median, outliers)


def cap_samples(update: ClientUpdate, cap: int) -> ClientUpdate:
    """``update`` with its sample count (FedAvg's weight) at most ``cap``, what the drone can
    hold: a count above it is a lie or a bug, and would let one drone dictate the model
    (issue 26: a signed drone's num_samples of 2^53 made FedAvg apply its update alone)."""
    if update.num_samples <= cap:
        return update
    return dataclasses.replace(update, num_samples=max(0, int(cap)))


class NormClip(Strategy):
    """Wrap any strategy: clip each delta to ||Δ_k||₂ ≤ C before the inner rule sees it.

    Δ_k ← Δ_k · min(1, C/||Δ_k||₂) over the whole flattened model (norm bounding, Sun et al.
    2019, "Can you really backdoor FL?", §4). ``max_norm``: C, a number > 0, or
    ``'median'``: C is ``factor`` × the median of this round's positive ||Δ_k||₂ over the
    updates with samples (the ones a rule applies); the median is the γ = 0.5 quantile of the
    update norms that Andrew et al. 2021 ("Differentially private learning with adaptive
    clipping") track, here computed exactly each round. At most half of the deltas are larger
    than the median, so a minority of drones that scale theirs up are cut to ``factor`` times
    an honest drone's norm without a bound to tune; ``factor`` > 1 leaves the honest spread
    above the median alone (``factor`` 1: every delta above the median is cut).
    Knobs, metrics and state come from the inner strategy; ``metrics['clipped']`` counts
    clipped deltas, ``metrics['clip_norm']`` is the C used. Checkpoint: ``{'inner': ...}``
    in whatever format the inner strategy uses.
    """

    wraps_rule = True   # the contract's errors name the inner rule (strategy.rule_name)

    def __init__(self, inner: Strategy, max_norm: float | str, factor: float = 1.0) -> None:
        if max_norm != CLIP_NORM_MEDIAN and (isinstance(max_norm, str) or not max_norm > 0.0):
            raise ValueError(f'max_norm must be > 0 or {CLIP_NORM_MEDIAN!r}, got {max_norm!r}')
        if not (math.isfinite(factor) and factor >= 1.0):
            raise ValueError(f'factor must be a finite number >= 1, got {factor!r}')
        self.inner = inner
        self.max_norm = max_norm if max_norm == CLIP_NORM_MEDIAN else float(max_norm)
        self.factor = float(factor)
        self.name = f'{inner.name}+clip'

    def __getattr__(self, name: str):
        """The inner rule's attributes (server_lr, num_clients, ...) read through the wrapper,
        which clip_norm's default puts around every rule."""
        if name == 'inner':   # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def configure_round(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        return self.inner.configure_round(round_index, drone_ids)

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        bound = self.max_norm
        if bound == CLIP_NORM_MEDIAN:   # u.norm: computed once an update, cached
            median = median_norm([u.norm for u in updates if u.num_samples > 0])
            bound = math.inf if median is None else self.factor * median   # none: no clip
        clipped_updates, clipped = [], 0
        for u in updates:
            delta, norm = clip_delta(u.delta, bound, u.norm)
            clipped += norm > bound
            clipped_updates.append(dataclasses.replace(u, delta=delta))
        result = self.inner.aggregate(round_index, global_weights, clipped_updates)
        if not isinstance(result, AggregateResult):   # checked_aggregate names the breach
            return result
        metrics = {**result.metrics, 'clipped': clipped}
        if math.isfinite(bound):
            metrics['clip_norm'] = bound
        return dataclasses.replace(result, metrics=metrics)

    def state_dict(self) -> dict:
        return {'inner': self.inner.state_dict()}

    def load_state_dict(self, state: Mapping) -> None:
        self.inner.load_state_dict(state['inner'])


def unwrapped(strategy: Strategy) -> Strategy:
    """The configured rule inside ``aggregation.clip_norm``'s NormClip wrapper (the rule
    itself when it is not clipped): what an ``isinstance`` check of the rule needs."""
    return strategy.inner if isinstance(strategy, NormClip) else strategy


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


DEFAULT_BYZANTINE_SHARE = 0.2
"""aggregation.byzantine_share's default: Krum assumes up to a fifth of the round's updates are
forged (2 of 10 drones)."""


def krum_byzantine(n: int, share: float) -> int:
    """f = ⌊share · n⌋ forged updates assumed among n, at most what Krum's condition
    n > 2f + 2 (Blanchard et al. 2017, Prop. 1) allows: ⌊(n − 3) / 2⌋ (0 below 3 updates)."""
    return max(0, min(int(math.floor(share * n)), (n - 3) // 2))


def krum_scores(deltas: Sequence[Mapping[str, np.ndarray]], names: Sequence[str],
                byzantine: int) -> np.ndarray:
    """Krum's score of each delta (Blanchard et al., NeurIPS 2017, §4): the sum of its squared
    L2 distances to its n − f − 2 nearest other deltas (at least 1, at most n − 1; a lone
    delta scores 0). Distances from the Gram matrix, in float64."""
    n = len(deltas)
    if n == 1:
        return np.zeros(1)
    x = np.stack([flatten(d, names) for d in deltas])
    sq = np.einsum('ij,ij->i', x, x)
    dist = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0)
    np.fill_diagonal(dist, np.inf)   # a delta is not its own neighbour
    k = min(max(1, n - byzantine - 2), n - 1)
    return np.sort(dist, axis=1)[:, :k].sum(axis=1)


class MultiKrum(Strategy):
    """w ← w + η_s · mean of the m deltas with the lowest Krum scores (multi-Krum, Blanchard et
    al. 2017, §5), unweighted as in the paper; m = 1 is Krum.

    Of the n updates with samples, f = :func:`krum_byzantine` (n, ``byzantine_share``) are
    assumed forged; a delta's score is the sum of its squared distances to its n − f − 2
    nearest others, so a delta far from the honest cluster (scaled up, or of another
    direction) scores high and is left out. ``selected``: m, 0 = n − f (every update but as
    many as may be forged). Ties go to the lower drone id. Stateless, so the checkpoint is
    ``{}``; ``metrics['byzantine']`` is the f used, ``used`` the senders averaged.
    """

    name = 'multi_krum'

    def __init__(self, byzantine_share: float = DEFAULT_BYZANTINE_SHARE, selected: int = 0,
                 server_lr: float = 1.0) -> None:
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        if not 0.0 <= byzantine_share < 0.5:
            raise ValueError(f'byzantine_share must be in [0, 0.5), got {byzantine_share}')
        if selected < 0:
            raise ValueError(f'selected must be >= 0 (0 = n - f), got {selected}')
        self.byzantine_share = float(byzantine_share)
        self.selected = int(selected)
        self.server_lr = float(server_lr)

    def _count(self, n: int, byzantine: int) -> int:
        return min(self.selected or n - byzantine, n)

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable = sorted((u for u in updates if u.num_samples > 0), key=lambda u: u.sender)
        if not usable:
            return keep_model(global_weights)
        names = list(global_weights)
        byzantine = krum_byzantine(len(usable), self.byzantine_share)
        scores = krum_scores([u.delta for u in usable], names, byzantine)
        order = np.argsort(scores, kind='stable')   # ties: the lower drone id first
        chosen = [usable[i] for i in order[:self._count(len(usable), byzantine)]]
        center = weighted_sum([u.delta for u in chosen], [1.0 / len(chosen)] * len(chosen),
                              names)
        return AggregateResult(weights=apply_step(global_weights, center, self.server_lr),
                               empty=False, used=senders(chosen),
                               metrics={'participants': len(chosen), 'byzantine': byzantine})


class Krum(MultiKrum):
    """w ← w + η_s · Δ_k* for the one delta with the lowest Krum score (Blanchard et al.
    2017, §4): multi-Krum with m = 1. See :class:`MultiKrum`."""

    name = 'krum'

    def __init__(self, byzantine_share: float = DEFAULT_BYZANTINE_SHARE,
                 server_lr: float = 1.0) -> None:
        super().__init__(byzantine_share=byzantine_share, selected=1, server_lr=server_lr)
