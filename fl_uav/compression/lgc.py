"""Layered gradient compression (LGC) with error feedback (numpy, ROS-free).

LGC (Du et al., arXiv 2109.08819) eqs. (1)-(2): the flattened update u = e + Δ (error memory
plus model delta, Algorithm 1 line 8) is ranked once by magnitude over the whole model; layer
c holds the entries of rank K_{c−1}+1 … K_c (K_c = k_1 + … + k_c), i.e. the band
Top_{K_{c−1},K_c}(u), and is sent on channel c.  The layers are disjoint and their sum is
Top_{K_C}(u) (the corrected eq. (2)).  Slicing is by rank, not by threshold, so each layer has
exactly k_c entries and ties are broken by the lower flat index (digest 002 §2.1).

Error feedback (Algorithm 1 line 11) is computed from what the server **acknowledged**, not from
what was sent (digest 002 §2.5): e ← u − Σ(received layers).  A dropped layer's entries stay in
the residual and are retried at the next sync, so nothing is lost:
``residual_new + Σ received == update + residual_old`` exactly in float32.

Client: :class:`LgcEncoder` (``encode`` then ``acknowledge``).  Server: :func:`decode`.  Dicts of
named arrays go through :func:`fl_uav.compression.quantization.flatten` / ``unflatten`` first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    'INDEX_BITS',
    'VALUE_BITS',
    'Layer',
    'LgcEncoder',
    'decode',
    'layer_payload_bits',
    'layered_top_k',
    'top_k_indices',
]

INDEX_BITS = 32
"""Bits per sent index (int32 flat index; digest 002 §2.4)."""
VALUE_BITS = 32
"""Bits per sent value (float32; the paper does not quantize LGC values)."""


@dataclass(frozen=True, eq=False)
class Layer:
    """One LGC layer (LGC eq. (1) band), sent on channel ``layer_id``.

    ``indices`` (int32) are flat positions in rank order (largest magnitude first); ``values``
    (float32) are the entries of u there.  ``rank_lo`` is K_{c−1}, the number of entries ranked
    above this band.
    """

    layer_id: int
    rank_lo: int
    indices: np.ndarray
    values: np.ndarray

    @property
    def k(self) -> int:
        """Number of entries in this layer (k_c)."""
        return int(self.indices.size)

    @property
    def payload_bits(self) -> int:
        """Index + value bits, without frame header (:func:`layer_payload_bits`)."""
        return layer_payload_bits(self.k)


def layer_payload_bits(k: int) -> int:
    """Bits of one layer's body: k·(32-bit index + 32-bit value) (digest 002 §2.4, 8·k_c bytes)."""
    if k < 0:
        raise ValueError(f'k must be >= 0, got {k}')
    return int(k) * (INDEX_BITS + VALUE_BITS)


def _as_update(update: np.ndarray, dim: int | None = None) -> np.ndarray:
    array = np.asarray(update)
    if array.ndim != 1:
        raise ValueError(f'update must be a 1-D vector, got shape {array.shape}')
    if dim is not None and array.size != dim:
        raise ValueError(f'update must have {dim} entries, got {array.size}')
    if not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
        raise ValueError(f'update must be real-valued, got dtype {array.dtype}')
    array = array.astype(np.float32, copy=False)
    if not np.all(np.isfinite(array)):
        raise ValueError('update must be finite (contains NaN or infinity)')
    return array


def _check_ks(ks: Sequence[int], dim: int) -> tuple[int, ...]:
    values = tuple(ks)
    if not values:
        raise ValueError('ks must name at least one layer')
    for k in values:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
            raise ValueError(f'ks must be non-negative integers, got {k!r}')
    if sum(values) > dim:
        raise ValueError(f'ks must sum to at most the dimension {dim}, got {sum(values)}')
    return tuple(int(k) for k in values)


def top_k_indices(vector: np.ndarray, k: int) -> np.ndarray:
    """Flat indices of the k largest |vector_i|, ranked (largest first; ties: lower index first).

    This is the support of Top_k (LGC §2 / eq. (1)); O(d + k log k).
    """
    vector = np.asarray(vector)
    dim = vector.size
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k <= dim:
        raise ValueError(f'k must be an integer in [0, {dim}], got {k!r}')
    magnitude = np.abs(vector.ravel())
    if k == 0:
        return np.zeros(0, np.int32)
    if k == dim:
        candidates = np.arange(dim)
    else:
        threshold = np.partition(magnitude, dim - k)[dim - k]
        above = np.flatnonzero(magnitude > threshold)
        ties = np.flatnonzero(magnitude == threshold)[:k - above.size]
        candidates = np.concatenate([above, ties])
    order = np.lexsort((candidates, -magnitude[candidates]))
    return candidates[order].astype(np.int32)


def layered_top_k(vector: np.ndarray, ks: Sequence[int]) -> list[Layer]:
    """LGC_k(x), eqs. (1)-(2): layer c = Top_{K_{c−1},K_c}(x) by rank, c = 0..C−1.

    Layer ids are 0-based positions in ``ks``; a k_c of 0 gives an empty layer (unused channel).
    """
    vector = _as_update(vector)
    if vector.size >= 2**31:
        raise ValueError('update has too many entries for int32 indices')
    ks = _check_ks(ks, vector.size)
    ranked = top_k_indices(vector, sum(ks))
    layers = []
    start = 0
    for layer_id, k in enumerate(ks):
        indices = ranked[start:start + k].copy()
        layers.append(Layer(layer_id=layer_id, rank_lo=start, indices=indices,
                            values=vector[indices].astype(np.float32)))
        start += k
    return layers


def decode(layers: Iterable[Layer], dim: int) -> np.ndarray:
    """Server side of LGC eq. (2): the dense float32 sum of the received layers.

    The layers of one encode are disjoint, so a missing layer just leaves its band at zero.
    Duplicate layer ids or indices outside [0, dim) raise ValueError.
    """
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 0:
        raise ValueError(f'dim must be a non-negative integer, got {dim!r}')
    dense = np.zeros(int(dim), np.float32)
    seen: set[int] = set()
    for layer in layers:
        if layer.layer_id in seen:
            raise ValueError(f'layers contains layer id {layer.layer_id} twice')
        seen.add(layer.layer_id)
        indices = np.asarray(layer.indices)
        values = np.asarray(layer.values, np.float32)
        if indices.shape != values.shape or indices.ndim != 1:
            raise ValueError(f'layers[{layer.layer_id}]: indices and values differ in shape')
        if indices.size and (indices.min() < 0 or indices.max() >= dim):
            raise ValueError(f'layers[{layer.layer_id}]: index outside [0, {dim})')
        np.add.at(dense, indices.astype(np.int64), values)
    return dense


class LgcEncoder:
    """Client-side LGC state: error memory e and the last encode awaiting acknowledgement.

    Usage per sync (LGC Algorithm 1 lines 8-11)::

        layers = encoder.encode(delta)          # u = e + delta, split into layers
        ...send layer c on channel c...
        encoder.acknowledge(received_ids)       # e = u − Σ received layers

    ``ks`` is the default allocation (k_1..k_C); ``encode(update, ks=...)`` may override it per
    round (the paper's DRL picks it each round).
    """

    def __init__(self, dim: int, ks: Sequence[int]) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
            raise ValueError(f'dim must be a positive integer, got {dim!r}')
        if dim >= 2**31:
            raise ValueError('dim too large for int32 indices')
        self.dim = int(dim)
        self.ks = _check_ks(ks, self.dim)
        self._residual = np.zeros(self.dim, np.float32)
        self._pending_u: np.ndarray | None = None
        self._pending_layers: list[Layer] | None = None

    @property
    def residual(self) -> np.ndarray:
        """A copy of the error memory e (float32)."""
        return self._residual.copy()

    @property
    def awaiting_ack(self) -> bool:
        """True between :meth:`encode` and :meth:`acknowledge`."""
        return self._pending_layers is not None

    def encode(self, update: np.ndarray, ks: Sequence[int] | None = None) -> list[Layer]:
        """Form u = e + update (float32) and split it into layers (LGC eqs. (1)-(2)).

        The residual is not changed until :meth:`acknowledge`.  Raises RuntimeError if the
        previous encode has not been acknowledged (call ``acknowledge([])`` on a timeout).
        """
        if self.awaiting_ack:
            raise RuntimeError('the previous encode has not been acknowledged')
        vector = _as_update(update, self.dim)
        allocation = self.ks if ks is None else _check_ks(ks, self.dim)
        u = self._residual + vector
        if not np.all(np.isfinite(u)):
            raise ValueError('update overflows float32 when added to the residual')
        layers = layered_top_k(u, allocation)
        self._pending_u = u
        self._pending_layers = layers
        return layers

    def acknowledge(self, received_layer_ids: Iterable[int]) -> np.ndarray:
        """Set e ← u − Σ(received layers) (LGC Algorithm 1 line 11, on received; digest 002 §2.5).

        Entries of dropped layers stay in the residual.  Returns the new residual (a copy).
        """
        if not self.awaiting_ack:
            raise RuntimeError('nothing to acknowledge: call encode first')
        received = set()
        for layer_id in received_layer_ids:
            if not 0 <= layer_id < len(self._pending_layers):
                raise ValueError(f'received_layer_ids contains unknown layer id {layer_id!r}')
            received.add(int(layer_id))
        residual = self._pending_u
        for layer in self._pending_layers:
            if layer.layer_id in received:
                residual[layer.indices] = 0.0
        self._residual = residual
        self._pending_u = None
        self._pending_layers = None
        return self.residual

    def reset(self) -> None:
        """Clear the residual and any pending encode (e.g. when the model is re-initialised)."""
        self._residual = np.zeros(self.dim, np.float32)
        self._pending_u = None
        self._pending_layers = None

    def state_dict(self) -> dict[str, np.ndarray]:
        """Checkpoint: ``{'residual': e}`` (only valid between rounds, nothing awaiting ack)."""
        if self.awaiting_ack:
            raise RuntimeError('cannot checkpoint while an encode awaits acknowledgement')
        return {'residual': self.residual}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict` (any pending encode is discarded)."""
        residual = _as_update(state['residual'], self.dim)
        self._residual = residual.copy()
        self._pending_u = None
        self._pending_layers = None
