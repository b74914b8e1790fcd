"""The drone's onboard data buffer: a storage cap and an eviction policy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BUFFER_POLICIES = ('fifo', 'append_only')


@dataclass(frozen=True)
class BufferConfig:
    """capacity_samples: storage cap; policy: 'fifo' evicts the oldest, 'append_only' stops."""

    capacity_samples: int = 600
    policy: str = 'fifo'

    def __post_init__(self) -> None:
        if self.capacity_samples < 1:
            raise ValueError(f'capacity_samples must be >= 1, got {self.capacity_samples}')
        if self.policy not in BUFFER_POLICIES:
            raise ValueError(f'policy {self.policy!r} unknown; choices: '
                             f'{", ".join(BUFFER_POLICIES)}')


class OnboardBuffer:
    """Fixed-capacity ring of uint8 samples with labels (preallocated, no growth)."""

    def __init__(self, config: BufferConfig, sample_shape: tuple[int, ...]) -> None:
        self._config = config
        self._images = np.zeros((config.capacity_samples, *sample_shape), np.uint8)
        self._labels = np.zeros(config.capacity_samples, np.int64)
        self._size = 0
        self._next = 0
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
        """Store one sample; returns False if the policy refused it."""
        self.total_offered += 1
        if self._size == self.capacity:
            if self._config.policy == 'append_only':
                self.total_refused += 1
                return False
            self.total_evicted += 1
        else:
            self._size += 1
        self._images[self._next] = image
        self._labels[self._next] = label
        self._next = (self._next + 1) % self.capacity
        return True

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the stored (images, labels)."""
        return self._images[:self._size].copy(), self._labels[:self._size].copy()

    def class_counts(self, num_classes: int) -> np.ndarray:
        """Samples per class currently stored."""
        return np.bincount(self._labels[:self._size], minlength=num_classes)
