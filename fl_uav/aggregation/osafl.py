"""OSAFL (Pervej, Choi, Molisch, arXiv 2408.05886): online-score-aided aggregation."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from fl_uav.aggregation._common import apply_step, keep_model, weighted_sum, with_step_counts
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)
from fl_uav.configschema import require_choice

WEIGHTINGS = ('uniform', 'samples')


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """<a, b> / (||a|| ||b||), OSAFL eq. (11); 0 when either vector is zero (guard, §7.1.3)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def _delta_cosine(mean: Mapping[str, np.ndarray], delta: Mapping[str, np.ndarray], tau: int,
                  names: Sequence[str]) -> float:
    """cos(d^t, Δ_u/κ_u) over the whole model, tensor by tensor (eq. (11))."""
    dot = norm_a = norm_b = 0.0
    for n in names:
        a = mean[n].ravel()
        b = np.asarray(delta[n], np.float64).ravel() / tau
        dot += float(np.dot(a, b))
        norm_a += float(np.dot(a, a))
        norm_b += float(np.dot(b, b))
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    return float(np.clip(dot / math.sqrt(norm_a * norm_b), -1.0, 1.0))


class OnlineScore:
    """OSAFL Algorithm 2 (Get-Online-Score), per client, with the Υ = 1 fix.

    Each scored round t: λ_u ← λ_u + exp(λ̃_u) (eq. (12)). On a client's first scored round its
    score is initialised to exp(λ̃_u) (lines 2–8). On rounds with (t+1) mod Υ = 0 every client
    that reported gets Δ_u = λ_u / (number of terms in its window) (= λ_u / Υ under full
    participation, lines 10–16) and every accumulator is reset (line 17), including at t = 0,
    which is the Υ = 1 fix. Otherwise the previous Δ_u is kept (lines 18–21).
    ``t`` counts scored rounds from 0. Checkpoint is JSON-compatible.
    """

    def __init__(self, interval: int) -> None:
        if interval < 1:
            raise ValueError(f'score interval must be >= 1, got {interval}')
        self.interval = int(interval)
        self.t = 0
        self.accum: dict[int, float] = {}
        self.terms: dict[int, int] = {}
        self.score: dict[int, float] = {}

    def step(self, similarities: Mapping[int, float]) -> dict[int, float]:
        """Feed one round's cosines λ̃_u; return the scores Δ_u^t of those clients."""
        update_round = (self.t + 1) % self.interval == 0
        for client, cos in similarities.items():
            value = math.exp(cos)
            self.accum[client] = self.accum.get(client, 0.0) + value
            self.terms[client] = self.terms.get(client, 0) + 1
            if client not in self.score:
                self.score[client] = value
            if update_round:
                self.score[client] = self.accum[client] / self.terms[client]
        out = {client: self.score[client] for client in similarities}
        if update_round:
            self.accum.clear()
            self.terms.clear()
        self.t += 1
        return out

    def state_dict(self) -> dict:
        def pairs(d: Mapping[int, float]) -> list:
            return [[int(k), v] for k, v in sorted(d.items())]
        return {'t': self.t, 'accum': pairs(self.accum), 'terms': pairs(self.terms),
                'score': pairs(self.score)}

    def load_state_dict(self, state: Mapping) -> None:
        self.t = int(state['t'])
        self.accum = {int(k): float(v) for k, v in state['accum']}
        self.terms = {int(k): int(v) for k, v in state['terms']}
        self.score = {int(k): float(v) for k, v in state['score']}


class OSAFL(Strategy):
    """w^{t+1} = w^t − η̃ η Σ_u α_u Δ_u^t d_u^t = w^t + η̃ Σ_u α_u Δ_u^t Δw_u / κ_u.

    OSAFL eq. (8) with d_u = −Δw_u / (η κ_u) (eq. (7); κ_u = ``metrics[STEPS_KEY]``), the
    unweighted mean direction d^t = (1/m) Σ_u d_u (eq. (10)), the whole-model cosine λ̃_u
    (eq. (11)) and the scores Δ_u of Algorithm 2 (:class:`OnlineScore`, with the Υ = 1 fix).
    Scores are not renormalised (§7.1.5). Cosines are scale-free, so η is not needed.
    α_u: ``'uniform'`` = 1/m, ``'samples'`` = n_u / Σ n over the m updates that arrived (the
    paper has full participation; scoring over received drones only is our extension, §7.1.10).
    Updates without κ_u, or with ``num_samples == 0``, are skipped. Checkpoint: JSON-compatible.

    ``shrink_steps`` = k₀ > 0 uses the exact minimiser of the per-round problem, eq. (29), in
    place of its approximation Δ_u ≈ λ_u (eq. (30)): with γ_u = 0 (complementary slackness,
    digest 004 §2.5) and ψ = 0, Δ_u = ρ_u λ_u with ρ_u = C_1 / (2βηη̃σ²α_u² + C_1) and
    C_1 = 8β²η²(σ² + 3κε²) α_u κ_u, i.e. ρ_u = κ_u / (κ_u + k₀) with
    k₀ = η̃σ²α_u / (4βη(σ² + 3κε²)), from (28) as printed (κ·κ_u where differentiating (25)
    gives κ_u², digest §2.5). The paper never estimates β, σ, ε, so k₀ is one tuned constant,
    exact under the paper's full participation with uniform α_u = 1/U; with drop-outs α_u and
    η change round to round and a fixed k₀ is an approximation, and ψ > 0 would shift ρ_u to
    (κ_u + a)/(κ_u + a + k₀). ρ_u grows with κ_u: a drone that took few local steps sends a
    noisier average gradient and weighs less. k₀ = 0 (default) is the paper's implemented
    rule, ρ_u = 1.
    """

    name = 'osafl'

    def __init__(self, score_interval: int = 3, server_lr: float = 1.0,
                 weighting: str = 'uniform', shrink_steps: float = 0.0) -> None:
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        if not (math.isfinite(shrink_steps) and shrink_steps >= 0.0):
            raise ValueError(f'shrink_steps must be a finite number >= 0, got {shrink_steps}')
        self.shrink_steps = float(shrink_steps)
        require_choice('weighting', weighting, WEIGHTINGS)
        self.server_lr = float(server_lr)
        self.weighting = weighting
        self.scores = OnlineScore(score_interval)

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        usable, skipped = with_step_counts(updates)
        if not usable:
            return keep_model(global_weights, skipped=skipped)
        names = list(global_weights)
        m = len(usable)
        # d^t (eq. (10)) as a running sum, then per-drone cosines, without stacking m vectors
        mean = weighted_sum([u.delta for u, _ in usable], [1.0 / (m * tau) for _, tau in usable],
                            names)
        cosines = {u.sender: _delta_cosine(mean, u.delta, tau, names) for u, tau in usable}
        scores = self.scores.step(cosines)
        if self.weighting == 'uniform':
            alpha = [1.0 / len(usable)] * len(usable)
        else:
            total = float(sum(u.num_samples for u, _ in usable))
            alpha = [u.num_samples / total for u, _ in usable]
        coeffs = [a * self.shrink(tau) * scores[u.sender] for a, (u, tau) in zip(alpha, usable)]
        step = weighted_sum([u.delta for u, _ in usable],
                            [c / tau for c, (_, tau) in zip(coeffs, usable)], names)
        new = apply_step(global_weights, step, self.server_lr)
        return AggregateResult(weights=new, empty=False,
                               used=senders([u for u, _ in usable]),
                               metrics={'participants': len(usable), 'skipped': skipped,
                                        'scores': dict(scores), 'cosines': cosines,
                                        'score_mass': float(sum(coeffs))})

    def shrink(self, steps: int) -> float:
        """ρ_u of eq. (29) for a drone that took κ_u = ``steps`` local steps (1 when k₀ = 0)."""
        return steps / (steps + self.shrink_steps)

    def state_dict(self) -> dict:
        return {'scores': self.scores.state_dict()}

    def load_state_dict(self, state: Mapping) -> None:
        self.scores.load_state_dict(state['scores'])
