"""Online data arrivals: how many new samples each drone gets per round, and which ones.

The arrival model is the one of OSAFL (online-score-aided FL): between two rounds client k
has ``E_k`` arrival slots, each filled independently with probability ``p_k``, so it gets
``Binomial(E_k, p_k)`` new samples, drawn from its own pre-assigned partition. The caller
puts them into the drone's capped buffer (``fl_uav.learning.buffer``), which evicts as its
policy says, and applies them at the round boundary.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_uav.configschema import require_choice

EXHAUSTED_POLICIES = ('stop', 'wrap')

SeedLike = int | np.random.SeedSequence | np.random.Generator
"""Anything np.random.default_rng accepts as a seed."""


def _per_client(value, count: int, name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim == 0:
        return np.full(count, array)
    if array.shape != (count,):
        raise ValueError(f'{name} must be a scalar or have one entry per client ({count}), '
                         f'got shape {array.shape}')
    return array


def binomial_arrivals(pool_sizes: Sequence[int] | np.ndarray, e: int | Sequence[int],
                      p: float | Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """New samples per client this round: ``min(Binomial(E_k, p_k), pool_k)`` (int64, length K).

    pool_sizes: samples each client can still draw (arrivals never exceed it).
    e: arrival slots per round, a scalar for all clients or one per client (>= 0).
    p: success probability of a slot, a scalar or one per client, in [0, 1].
    One binomial draw is made per client, in client order, whatever the pool sizes are, so
    runs that share the generator's seed see the same draws (common random numbers).
    """
    pools = np.asarray(pool_sizes, np.int64).reshape(-1)
    slots = _per_client(e, len(pools), 'e')
    probabilities = _per_client(p, len(pools), 'p').astype(np.float64)
    if np.any(pools < 0):
        raise ValueError('pool_sizes must be >= 0')
    if not np.issubdtype(slots.dtype, np.integer) or np.any(slots < 0):
        raise ValueError(f'e must be integers >= 0, got {e}')
    if np.any(~np.isfinite(probabilities)) or np.any((probabilities < 0) | (probabilities > 1)):
        raise ValueError(f'p must be in [0, 1], got {p}')
    draws = rng.binomial(slots.astype(np.int64), probabilities)
    return np.minimum(np.asarray(draws, np.int64), pools)


def osafl_arrival_slots(partition_sizes: Sequence[int] | np.ndarray,
                        storage_sizes: int | Sequence[int], rounds: int,
                        max_slots: int = 5) -> np.ndarray:
    """OSAFL Eq. (31): ``E_k = min(floor((|D_k,all| − D_k) / T), max_slots)``, clamped at 0.

    partition_sizes: |D_k,all|, the size of each client's whole partition.
    storage_sizes: D_k, the samples the client stores (its initial dataset).
    With these slots a client's pool cannot run out over ``rounds`` rounds. A client whose
    partition is no larger than its storage gets 0 slots (the paper leaves this case open).
    """
    if rounds < 1:
        raise ValueError(f'rounds must be >= 1, got {rounds}')
    if max_slots < 0:
        raise ValueError(f'max_slots must be >= 0, got {max_slots}')
    totals = np.asarray(partition_sizes, np.int64).reshape(-1)
    storage = _per_client(storage_sizes, len(totals), 'storage_sizes').astype(np.int64)
    return np.clip((totals - storage) // rounds, 0, max_slots)


class ClientStream:
    """Draws a client's new samples from its partition, without replacement.

    Samples come in a random order fixed by ``seed``. When every sample has been drawn,
    ``when_exhausted`` decides: 'stop' returns nothing more; 'wrap' starts a new pass over the
    whole partition in a fresh random order, so samples recur. A wrapping draw never repeats
    a sample within one call unless it asks for more than the partition holds: the samples
    just taken from the end of a pass are moved to the end of the next pass.

    For OSAFL, fill the drone's buffer once with ``draw(storage_size)``, then feed it each
    round's arrivals (see draw_arrivals). ``passes_completed`` counts the wraps.
    """

    def __init__(self, indices: Sequence[int] | np.ndarray, seed: SeedLike,
                 when_exhausted: str = 'stop') -> None:
        require_choice('when_exhausted', when_exhausted, EXHAUSTED_POLICIES)
        self._indices = np.asarray(indices, np.int64).reshape(-1)
        self._rng = np.random.default_rng(seed)
        self._when_exhausted = when_exhausted
        self._order = self._rng.permutation(self._indices)
        self._next = 0
        self.passes_completed = 0
        self.total_drawn = 0

    def __len__(self) -> int:
        """Size of the whole partition."""
        return len(self._indices)

    @property
    def remaining(self) -> int:
        """Samples not yet drawn in the current pass."""
        return len(self._order) - self._next

    @property
    def available(self) -> int:
        """The most one draw returns: ``remaining`` for 'stop', the partition size for 'wrap'.

        Pass these as ``pool_sizes`` to binomial_arrivals.
        """
        if self._when_exhausted == 'wrap':
            return len(self._indices)
        return self.remaining

    @property
    def exhausted(self) -> bool:
        """True when a 'stop' stream has nothing left (a 'wrap' stream never is)."""
        if not len(self._indices):
            return True
        return self._when_exhausted == 'stop' and self.remaining == 0

    def draw(self, n: int) -> np.ndarray:
        """Up to ``n`` dataset indices (int64); fewer only for a 'stop' stream running out."""
        if n < 0:
            raise ValueError(f'n must be >= 0, got {n}')
        taken: list[np.ndarray] = []
        wanted = n
        while wanted > 0 and len(self._indices):
            if self.remaining == 0:
                if self._when_exhausted == 'stop':
                    break
                self._new_pass(np.concatenate(taken) if taken else np.empty(0, np.int64))
            chunk = self._order[self._next:self._next + wanted]
            self._next += len(chunk)
            taken.append(chunk)
            wanted -= len(chunk)
        result = np.concatenate(taken) if taken else np.empty(0, np.int64)
        self.total_drawn += len(result)
        return result

    def _new_pass(self, just_taken: np.ndarray) -> None:
        order = self._rng.permutation(self._indices)
        recent = np.isin(order, just_taken)
        self._order = np.concatenate([order[~recent], order[recent]])
        self._next = 0
        self.passes_completed += 1


def draw_arrivals(streams: Sequence[ClientStream], e: int | Sequence[int],
                  p: float | Sequence[float], rng: np.random.Generator) -> list[np.ndarray]:
    """One round of arrivals: binomial counts capped by each stream, then the samples drawn."""
    counts = binomial_arrivals([s.available for s in streams], e, p, rng)
    return [stream.draw(int(count)) for stream, count in zip(streams, counts)]
