"""FedDisco (Ye et al., ICML 2023): discrepancy-aware aggregation weights."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_uav.aggregation._common import CLASS_COUNTS_KEY, apply_step, keep_model, weighted_sum
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)
from fl_uav.configschema import require_choice

MEASURES = ('kl', 'l1', 'l2')


class FedDisco(Strategy):
    """p_k = ReLU(n_k − a·δ_k + b) / Σ_j ReLU(n_j − a·δ_j + b);  w ← w + η_s Σ_k p_k Δ_k.

    FedDisco weights as described in the OSAFL digest §6.5: n_k = |D_k| / Σ_j |D_j| over the
    updates that arrived, δ_k = dist(local label distribution, target distribution) from
    ``metrics[CLASS_COUNTS_KEY]`` (the drone's current buffer histogram). Defaults a = 0.5,
    b = 0.1 and ``measure='kl'`` as in the official code; in KL mode δ_k = KL(local ‖ target) and
    the δ's are divided by their sum over the round's clients. ``target`` defaults to uniform.
    If every ReLU term is 0 the weights fall back to n_k. Updates without a valid histogram,
    or with ``num_samples == 0``, are skipped. Stateless, so the checkpoint is ``{}``.
    """

    name = 'feddisco'

    def __init__(self, a: float = 0.5, b: float = 0.1, measure: str = 'kl',
                 target: Sequence[float] | None = None, server_lr: float = 1.0) -> None:
        require_choice('measure', measure, MEASURES)
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        if target is not None:
            t = np.asarray(target, np.float64)
            if t.ndim != 1 or np.any(t <= 0.0):
                raise ValueError('target must be a 1-D distribution with positive entries')
            target = t / t.sum()
        self.a, self.b, self.measure = float(a), float(b), measure
        self.target = target
        self.server_lr = float(server_lr)

    def discrepancies(self, histograms: Sequence[np.ndarray]) -> np.ndarray:
        """δ_k for each normalised label histogram (KL values normalised by their sum)."""
        num_classes = len(histograms[0])
        target = (self.target if self.target is not None
                  else np.full(num_classes, 1.0 / num_classes))
        out = []
        for q in histograms:
            if self.measure == 'kl':
                mask = q > 0.0
                out.append(float(np.sum(q[mask] * np.log(q[mask] / target[mask]))))
            elif self.measure == 'l1':
                out.append(float(np.abs(q - target).sum()))
            else:
                out.append(float(np.sqrt(((q - target) ** 2).sum())))
        delta = np.asarray(out)
        if self.measure == 'kl' and delta.sum() > 0.0:
            delta = delta / delta.sum()
        return delta

    def weights_for(self, sizes: Sequence[float], histograms: Sequence[np.ndarray]) -> np.ndarray:
        """The aggregation weights p_k (sum to 1)."""
        n = np.asarray(sizes, np.float64)
        n = n / n.sum()
        raw = np.maximum(n - self.a * self.discrepancies(histograms) + self.b, 0.0)
        return raw / raw.sum() if raw.sum() > 0.0 else n

    def _histogram(self, update: ClientUpdate) -> np.ndarray | None:
        counts = update.metrics.get(CLASS_COUNTS_KEY)
        if counts is None:
            return None
        h = np.asarray(counts, np.float64)
        if h.ndim != 1 or h.size == 0 or np.any(h < 0.0) or h.sum() <= 0.0:
            return None
        if self.target is not None and h.size != self.target.size:
            return None
        return h / h.sum()

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        pairs = [(u, self._histogram(u)) for u in updates if u.num_samples > 0]
        pairs = [(u, h) for u, h in pairs if h is not None]
        if pairs:
            size = pairs[0][1].size
            pairs = [(u, h) for u, h in pairs if h.size == size]
        skipped = len(updates) - len(pairs)
        if not pairs:
            return keep_model(global_weights, skipped=skipped)
        p = self.weights_for([u.num_samples for u, _ in pairs], [h for _, h in pairs])
        mean = weighted_sum([u.delta for u, _ in pairs], p, list(global_weights))
        new = apply_step(global_weights, mean, self.server_lr)
        return AggregateResult(weights=new, empty=False,
                               used=senders([u for u, _ in pairs]),
                               metrics={'participants': len(pairs), 'skipped': skipped,
                                        'weights': {u.sender: float(pk)
                                                    for (u, _), pk in zip(pairs, p)}})
