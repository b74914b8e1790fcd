"""Helpers shared by the aggregation rules: metric keys, weighted sums, the no-update result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fl_uav.aggregation.strategy import AggregateResult, ClientUpdate, Weights

#: Number of local optimizer steps τ_k (κ_u^t) the drone took this round (an int >= 0) that
#: its update Δ covers: the steps the rules that normalise by local work (fednova, osafl,
#: afacd) divide Δ by. Drones report it as ``metadata['steps']`` (fl_uav.fleet.drone_agent).
STEPS_KEY = 'steps'
#: Local steps the drone took this round that its Δ does not cover (an int >= 0, absent = 0):
#: 2CEOAFL's ρ' dense steps that find the mask, discarded at the rewind (digest 000 §2.2 (b));
#: their compute is still charged (ρ + κ(1 − δ), §1.8).
PROBE_STEPS_KEY = 'probe_steps'
#: Per-class sample counts of the drone's training buffer (list of ints, one per class).
#: Drones already report it as ``metadata['class_counts']``.
CLASS_COUNTS_KEY = 'class_counts'
#: Local learning rate η̃ the drone used this round (float > 0), when a rule needs it.
LOCAL_LR_KEY = 'local_lr'
#: The pruning ratio δ_u^t (2CEOAFL) or ρ_u (FedDPQ) the drone used this round (float in
#: [0, 1)); 2CEOAFL's compressor also reads it (eq. (11) with q = δ_u^t).
PRUNE_FRACTION_KEY = 'prune_fraction'


def keep_model(global_weights: Weights, **metrics: Any) -> AggregateResult:
    """Nothing usable arrived: the model is unchanged and the result says ``empty``."""
    return AggregateResult(weights=dict(global_weights), empty=True,
                           metrics={'participants': 0, **metrics})


def weighted_sum(deltas: Sequence[Mapping[str, np.ndarray]], coeffs: Sequence[float],
                 names: Sequence[str]) -> dict[str, np.ndarray]:
    """Σ_k c_k Δ_k per named tensor, accumulated in float64, not normalised."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        acc = np.zeros(np.shape(deltas[0][name]), np.float64)
        for delta, c in zip(deltas, coeffs):
            acc += float(c) * np.asarray(delta[name], np.float64)
        out[name] = acc
    return out


def apply_step(global_weights: Weights, step: Mapping[str, np.ndarray],
               scale: float = 1.0) -> Weights:
    """w + scale · step, cast back to each tensor's dtype."""
    return {name: (np.asarray(w, np.float64) + scale * step[name]).astype(np.asarray(w).dtype)
            for name, w in global_weights.items()}


def step_count(update: ClientUpdate) -> int | None:
    """τ_k from ``metrics[STEPS_KEY]`` if it is a positive integer, else None."""
    value = update.metrics.get(STEPS_KEY)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        return None
    return int(value)


def with_step_counts(updates: Sequence[ClientUpdate]
                     ) -> tuple[list[tuple[ClientUpdate, int]], int]:
    """The updates that carry samples and a step count τ_k, paired with τ_k, and how many
    were skipped (the rules that normalise by local work: FedNova, AFA-CD, OSAFL)."""
    usable = [(u, step_count(u)) for u in updates if u.num_samples > 0]
    usable = [(u, tau) for u, tau in usable if tau is not None]
    return usable, len(updates) - len(usable)


def flatten(delta: Mapping[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """The whole-model vector of a delta (float64, in the given tensor order)."""
    if not names:
        return np.zeros(0, np.float64)
    return np.concatenate([np.asarray(delta[n], np.float64).ravel() for n in names])


def weights_to_state(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copy of named arrays for a checkpoint (numpy arrays, not JSON)."""
    return {name: np.array(value, copy=True) for name, value in weights.items()}
