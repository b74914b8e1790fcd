"""The drone's onboard data buffer: a storage cap and an eviction policy.

Policies (``BufferConfig.policy``):

* ``append_only``: 2CEOAFL eq. (7) appends every sensed sample and never forgets; the paper has no
  storage cap (digest 000 §1.6). With a cap, a full buffer refuses new samples.
* ``fifo``: OSAFL §II-A-1, each arrival evicts the oldest stored sample.
* ``trim_top_label``: OSAFL §II-A-1 (TrimTopLabel), each arrival evicts the oldest stored sample
  of the label that has the most stored samples, which reduces label skew.

Choices where OSAFL is silent (digest 004 §7.1 item 11):

* Evict, then insert: an arrival evicts one *stored* sample (label counts are taken over the
  stored samples, before the arrival is added), so the buffer size stays at the cap.
* Ties: when several labels share the top count, the oldest stored sample among those labels
  is evicted (FIFO among the tied labels), so no label index is favoured.
* A batch of arrivals is applied one sample at a time in arrival order; a sample that arrived
  earlier in the same batch is stored and can be evicted by a later one (OSAFL applies a
  round's arrivals at the round boundary; ``retained_positions`` does exactly that).
* Evictions happen only when the buffer is full; below the cap every arrival is stored.

``retained_positions`` is the one implementation of these rules. ``OnboardBuffer`` (images in a
preallocated store, used by the fleet's DroneAgent) and the experiment engine (per-drone index
arrays) both call it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fl_uav.configschema import require_choice

BUFFER_POLICIES = ('fifo', 'append_only', 'trim_top_label')


@dataclass(frozen=True)
class BufferConfig:
    """capacity_samples: storage cap in samples; policy: fifo | append_only | trim_top_label
    (see the module docstring: OSAFL §II-A-1 and 2CEOAFL eq. (7))."""

    capacity_samples: int = 600
    policy: str = 'fifo'

    def __post_init__(self) -> None:
        if self.capacity_samples < 1:
            raise ValueError(f'buffer.capacity_samples must be >= 1, got '
                             f'{self.capacity_samples}')
        check_policy(self.policy)


def check_policy(policy: str) -> None:
    """Raise ValueError naming ``buffer.policy`` and the choices if ``policy`` is unknown."""
    require_choice('buffer.policy', policy, BUFFER_POLICIES)


def retained_positions(stored_labels: np.ndarray, incoming_labels: np.ndarray,
                       capacity_samples: int, policy: str) -> np.ndarray:
    """Which samples remain after a batch of arrivals (OSAFL §II-A-1, 2CEOAFL eq. (7)).

    stored_labels: labels of the stored samples, oldest first (at most ``capacity_samples``).
    incoming_labels: labels of the arriving samples, in arrival order.
    Returns the positions, ascending (hence oldest first), of the samples kept in the
    concatenation ``[stored..., incoming...]``; at most ``capacity_samples`` of them.
    The rules (evict before insert, ties, one arrival at a time) are in the module docstring.
    """
    check_policy(policy)
    stored = np.asarray(stored_labels, np.int64).reshape(-1)
    incoming = np.asarray(incoming_labels, np.int64).reshape(-1)
    if capacity_samples < 1:
        raise ValueError(f'buffer.capacity_samples must be >= 1, got {capacity_samples}')
    if len(stored) > capacity_samples:
        raise ValueError(f'{len(stored)} stored samples exceed buffer.capacity_samples '
                         f'{capacity_samples}')
    total = len(stored) + len(incoming)
    if total <= capacity_samples:
        return np.arange(total, dtype=np.int64)
    if policy == 'append_only':      # a full buffer refuses: the first arrivals fill it
        return np.arange(capacity_samples, dtype=np.int64)
    if policy == 'fifo':             # each arrival evicts the oldest: the newest remain
        return np.arange(total - capacity_samples, total, dtype=np.int64)
    return _trim_top_label(np.concatenate([stored, incoming]), len(stored), capacity_samples)


def _trim_top_label(labels: np.ndarray, num_stored: int, capacity_samples: int) -> np.ndarray:
    """OSAFL TrimTopLabel over ``labels`` (arrival order), arrivals from ``num_stored`` on."""
    if np.any(labels < 0):
        raise ValueError('labels must be >= 0')
    alive = np.zeros(len(labels), bool)
    alive[:num_stored] = True
    counts = np.bincount(labels[:num_stored], minlength=int(labels.max()) + 1)
    size = num_stored
    for position in range(num_stored, len(labels)):
        if size == capacity_samples:
            top = counts == counts.max()
            victim = int(np.flatnonzero(alive[:position] & top[labels[:position]])[0])
            alive[victim] = False
            counts[labels[victim]] -= 1
            size -= 1
        alive[position] = True
        counts[labels[position]] += 1
        size += 1
    return np.flatnonzero(alive).astype(np.int64)


class OnboardBuffer:
    """Fixed-capacity store of uint8 samples with labels (preallocated, no growth).

    Samples live in slots; each slot remembers its arrival stamp, so the eviction rules of
    ``retained_positions`` (which need the arrival order) apply to the store unchanged.
    """

    def __init__(self, config: BufferConfig, sample_shape: tuple[int, ...]) -> None:
        self._config = config
        self._images = np.zeros((config.capacity_samples, *sample_shape), np.uint8)
        self._labels = np.zeros(config.capacity_samples, np.int64)
        self._stamps = np.zeros(config.capacity_samples, np.int64)
        self._size = 0
        self.total_offered = 0
        self.total_evicted = 0
        self.total_refused = 0

    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        """Storage cap in samples."""
        return self._config.capacity_samples

    def add(self, image: np.ndarray, label: int) -> bool:
        """Store one sample; returns False if the policy refused it (append_only, full)."""
        return self.extend(np.asarray(image)[None], np.asarray([label])) == 1

    def extend(self, images: np.ndarray, labels: np.ndarray) -> int:
        """Apply a batch of arrivals (oldest first) at once; returns how many are stored.

        Same result as adding them one by one (``retained_positions``).
        """
        labels = np.asarray(labels, np.int64).reshape(-1)
        if len(images) != len(labels):
            raise ValueError(f'{len(images)} images but {len(labels)} labels')
        order = self._arrival_order()
        keep = retained_positions(self._labels[order], labels, self.capacity,
                                  self._config.policy)
        kept = np.zeros(self._size + len(labels), bool)
        kept[keep] = True
        free_slots = np.concatenate([order[~kept[:self._size]],
                                     np.arange(self._size, self.capacity)])
        arrivals = np.flatnonzero(kept[self._size:])
        slots = free_slots[:len(arrivals)]
        self._images[slots] = images[arrivals]
        self._labels[slots] = labels[arrivals]
        next_stamp = int(self._stamps[:self._size].max()) + 1 if self._size else 0
        self._stamps[slots] = next_stamp + arrivals
        dropped = int(len(labels) + self._size - len(keep))
        self.total_offered += len(labels)
        if self._config.policy == 'append_only':
            self.total_refused += dropped
        else:
            self.total_evicted += dropped
        self._size = len(keep)
        return len(arrivals)

    def _arrival_order(self) -> np.ndarray:
        return np.argsort(self._stamps[:self._size], kind='stable')

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the stored (images, labels), oldest first."""
        order = self._arrival_order()
        return self._images[order], self._labels[order]

    def class_counts(self, num_classes: int) -> np.ndarray:
        """Samples per class currently stored."""
        return np.bincount(self._labels[:self._size], minlength=num_classes)
