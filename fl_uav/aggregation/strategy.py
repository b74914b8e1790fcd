"""The Strategy interface: how the ground station turns drones' updates into a global model.

Small and Flower-like: a strategy configures a round (per-drone knobs) and aggregates the
updates that arrived. Variants override one method; cross-cutting concerns wrap a strategy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Weights = dict[str, np.ndarray]


@dataclass(frozen=True)
class ClientUpdate:
    """One drone's validated update for a round: the model delta and what it cost."""

    sender: int
    round_index: int
    delta: Weights
    num_samples: int
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AggregateResult:
    """The new global weights and what the strategy reports about the round.

    ``used``: the senders whose updates the rule applied (sorted, once each; empty when
    ``empty``): the round's participants, as many as ``metrics['participants']`` counts. An
    update the rule skipped (no samples, no step count, another round, ...) is not in it.
    """

    weights: Weights
    empty: bool
    metrics: Mapping[str, Any] = field(default_factory=dict)
    used: tuple[int, ...] = ()


class Strategy(ABC):
    """Base class of every aggregation rule."""

    name = 'strategy'

    def configure_round(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        """Per-drone knobs sent with the round's global model (none by default)."""
        return {drone: {} for drone in drone_ids}

    @abstractmethod
    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        """Combine the updates that arrived; with none, keep the model and say so."""

    def state_dict(self) -> dict:
        """Checkpointable strategy state (stateless by default)."""
        return {}

    def load_state_dict(self, state: Mapping) -> None:  # noqa: B027 (optional hook)
        """Restore :meth:`state_dict`."""


def senders(updates: Sequence[ClientUpdate]) -> tuple[int, ...]:
    """The distinct senders of some updates, sorted (an :attr:`AggregateResult.used`)."""
    return tuple(sorted({u.sender for u in updates}))


def weighted_mean_delta(updates: Sequence[ClientUpdate], weights: Sequence[float]) -> Weights:
    """Σ_k w_k Δ_k / Σ_k w_k over the named tensors of the deltas (float64 accumulation)."""
    total = float(sum(weights))
    if total <= 0.0:
        raise ValueError('aggregation weights must sum to a positive number')
    names = updates[0].delta.keys()
    out: Weights = {}
    for name in names:
        acc = np.zeros(updates[0].delta[name].shape, np.float64)
        for update, w in zip(updates, weights):
            acc += (w / total) * update.delta[name]
        out[name] = acc.astype(np.float32)
    return out
