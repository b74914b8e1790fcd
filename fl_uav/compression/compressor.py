"""Update compressors selected by config: the bytes a drone sends and what the station decodes.

One small class per method over :class:`Compressor`. ``compress`` turns a named delta into a
codec v2 frame (bit-exact: its length is the digests' formula plus the documented header) and
returns the delta the station reconstructs from that very frame, so a simulation charges the
real frame size and aggregates exactly what a receiver would. The fleet's drones and the
experiment engine call the same ``compress``. An optional pruning ``mask`` (2CEOAFL eq. (11):
only unpruned entries are sent, plus the mask) and ``metadata`` (the drone's counts, carried in
the frame's metadata section, docs/wire_format.md) travel in the same frame.

``compression.method`` is one of :data:`COMPRESSION_METHODS` or a plug-in
``package.module:Name`` (fl_uav.plugins): a :class:`Compressor` subclass, or a factory returning
one, built with the :data:`COMPRESSOR_PLUGIN_ARGUMENTS` its signature names. Its frames must be
ones the station decodes without knowing the method (see :class:`Compressor`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_uav.compression.codec import (
    FrameKind,
    decode_frame,
    encode_frame,
    encoded_size,
    float32_tensors,
)
from fl_uav.compression.codec_v2 import (
    VERSION_V2,
    FrameKindV2,
    decode_v2,
    encode_qsgd,
    encode_range,
)
from fl_uav.compression.errors import ShapeMismatch, UnknownKind
from fl_uav.compression.quantization import (
    flatten,
    layer_buckets,
    qsgd_quantize,
    range_quantize,
    unflatten,
)

Weights = dict[str, np.ndarray]
Mask = Mapping[str, np.ndarray]


class Compressor(ABC):
    """Encode a delta into a frame; report what the receiver decodes.

    The contract a plug-in (``compression.method: package.module:Name``) keeps too:

    * :meth:`compress` returns ONE wire frame the station decodes without knowing the method:
      a codec v1 UPDATE frame (:func:`fl_uav.compression.codec.encode_frame`) or a codec v2
      QSGD / range / raw frame (:func:`fl_uav.compression.codec_v2.encode_qsgd`,
      ``encode_range``, ``encode_raw``), with the ``round_index``, ``sender``, ``fingerprint``
      and ``metadata`` it was given; a byte format of one's own cannot be decoded by the
      station. The tensors are the delta's, in its order (v2: flattened with
      :func:`fl_uav.compression.quantization.flatten`).
    * The returned delta is what that frame decodes to (:func:`decode_update_frame`): the
      engine aggregates it without sending the frame, and checks a plug-in's every upload.
    * A method with per-drone state (error feedback) keeps it on the instance: the engine
      builds one instance per drone for plug-ins (and for lgc), a drone node has its own.
      :meth:`upload_lost` undoes the last call's effect on that state when the upload never
      arrived; :meth:`state_dict` / :meth:`load_state_dict` give and take it as flat named
      numpy arrays for the engine's checkpoint (``--resume``).
    * Randomness comes from ``rng`` only, so a run is reproducible and a resumed run equal
      to an uninterrupted one.
    """

    name = 'compressor'

    @abstractmethod
    def compress(self, delta: Mapping[str, np.ndarray], rng: np.random.Generator, *,
                 round_index: int, sender: int, fingerprint: bytes, mask: Mask | None = None,
                 metadata: Mapping[str, Any] | None = None,
                 metrics: Mapping[str, Any] | None = None) -> tuple[bytes, Weights]:
        """Return (frame bytes, reconstructed delta).

        ``mask`` (same names and shapes as ``delta``, True = sent): entries outside it are
        not sent and decode to zero. ``metadata``: a JSON object carried in the frame.
        ``metrics``: the client's report of this round (ClientResult.metrics), not sent; read
        by a method whose parameter follows the client (2CEOAFL eq. (11): q = δ_u^t).
        """

    def upload_lost(self) -> None:  # noqa: B027 (optional hook)
        """The last compressed upload never reached the server (stateful methods undo)."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """Per-drone state as flat named arrays (stateless methods: none)."""
        return {}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:  # noqa: B027
        """Restore :meth:`state_dict`."""


_VERSION_OFFSET = 4   # the version byte of v1 and v2 headers (after the 4-byte magic)
_V2_SINGLE_UPDATE_KINDS = (FrameKindV2.QSGD, FrameKindV2.RANGE, FrameKindV2.RAW)


@dataclass(frozen=True)
class DecodedUpdate:
    """What a receiver reads from one update frame: header fields, metadata, dense delta."""

    sender: int
    round_index: int
    delta: Weights
    metadata: Mapping[str, Any]


def decode_update_frame(frame: bytes, like: Mapping[str, np.ndarray],
                        fingerprint: bytes | None = None) -> DecodedUpdate:
    """Decode one update frame as the ground station does, whatever method made it: a codec
    v1 UPDATE frame holding the tensors of ``like`` (names and shapes), or a codec v2 QSGD,
    range or raw frame of as many entries, unflattened in ``like``'s order (float32).
    FrameError (its ``reason`` as the station's rejection counters) if it is neither.
    ``fingerprint``: the model's architecture fingerprint the frame must carry, if given."""
    if len(frame) > _VERSION_OFFSET and frame[_VERSION_OFFSET] == VERSION_V2:
        v2 = decode_v2(frame, expected_fingerprint=fingerprint)
        if v2.kind not in _V2_SINGLE_UPDATE_KINDS:
            raise UnknownKind(f'a v2 {v2.kind.name} frame is not a whole update (QSGD, RANGE '
                              f'or RAW)')
        vector, layout = flatten(like)
        if v2.update.dim != vector.size:
            raise ShapeMismatch(f'the frame holds {v2.update.dim} entries, the model '
                                f'{vector.size}')
        return DecodedUpdate(v2.sender, v2.round_index, unflatten(v2.update.dense(), layout),
                             v2.metadata)
    decoded = decode_frame(frame, expected_fingerprint=fingerprint,
                           expected_shapes={n: np.shape(v) for n, v in like.items()})
    if decoded.kind != FrameKind.UPDATE:
        raise UnknownKind(f'a v1 {decoded.kind.name} frame is not an update')
    return DecodedUpdate(decoded.sender, decoded.round_index,
                         float32_tensors(decoded.tensors), decoded.metadata)


def _flat_mask(delta: Mapping[str, np.ndarray], mask: Mask | None) -> np.ndarray | None:
    """The mask flattened in ``delta``'s order; None when absent or when it keeps everything."""
    if mask is None:
        return None
    if set(mask) != set(delta) or any(np.shape(mask[n]) != np.shape(v)
                                      for n, v in delta.items()):
        raise ValueError('mask must have the names and shapes of the delta')
    if not delta:
        return None
    flat = np.concatenate([np.asarray(mask[n], bool).ravel() for n in delta])
    return None if flat.all() else flat


def _kept_buckets(sizes: tuple[int, ...], flat_mask: np.ndarray | None) -> tuple[int, ...]:
    """Per-tensor bucket sizes over the kept entries (one norm / range per tensor)."""
    if flat_mask is None:
        return sizes
    kept = np.concatenate([[0], np.cumsum(flat_mask)])
    ends = np.cumsum(sizes)
    return tuple(int(kept[end] - kept[end - size]) for end, size in zip(ends, sizes))


class NoCompression(Compressor):
    """Dense float32 delta in a codec v1 UPDATE frame (zeros where ``mask`` is False)."""

    name = 'none'

    def compress(self, delta, rng, *, round_index, sender, fingerprint, mask=None,
                 metadata=None, metrics=None):
        flat_mask = _flat_mask(delta, mask)
        sent = {n: np.asarray(v, np.float32) for n, v in delta.items()}
        if flat_mask is not None:
            sent = {n: np.where(np.asarray(mask[n], bool), v, np.float32(0))
                    for n, v in sent.items()}
        frame = encode_frame(FrameKind.UPDATE, round_index, sender, fingerprint, sent,
                             metadata or {})
        return frame, sent

    @staticmethod
    def frame_size(delta: Mapping[str, np.ndarray],
                   metadata: Mapping[str, Any] | None = None) -> int:
        """``len(compress(delta, …)[0])`` without building the frame (no copy, no CRC): what
        a simulation charges for an unmasked dense upload."""
        return encoded_size({n: np.asarray(v, np.float32) for n, v in delta.items()},
                            metadata or {})


class QsgdCompressor(Compressor):
    """QSGD with ``levels`` (2CEOAFL Definition 1 / eq. (12)); one norm for the whole update
    (as 2CEOAFL) or one per tensor (``per_layer``)."""

    name = 'qsgd'

    def __init__(self, levels: int, per_layer: bool = False) -> None:
        if levels < 1:
            raise ValueError(f'qsgd levels must be >= 1, got {levels}')
        self.levels, self.per_layer = levels, per_layer

    def compress(self, delta, rng, *, round_index, sender, fingerprint, mask=None,
                 metadata=None, metrics=None):
        vector, layout = flatten(delta)
        flat_mask = _flat_mask(delta, mask)
        kept = vector if flat_mask is None else vector[flat_mask]
        buckets = _kept_buckets(layer_buckets(layout), flat_mask) if self.per_layer else None
        payload = qsgd_quantize(kept, self.levels, rng, buckets=buckets)
        frame = encode_qsgd(payload, round_index=round_index, sender=sender,
                            fingerprint=fingerprint, mask=flat_mask, metadata=metadata)
        return frame, unflatten(decode_v2(frame).update.dense(), layout)


class RangeCompressor(Compressor):
    """FedDPQ's stochastic range quantizer with ``bits`` bits (FedDPQ eqs. (11)-(13))."""

    name = 'range'

    def __init__(self, bits: int, per_layer: bool = False) -> None:
        if not 1 <= bits <= 16:
            raise ValueError(f'range bits must be in [1, 16], got {bits}')
        self.bits, self.per_layer = bits, per_layer

    def compress(self, delta, rng, *, round_index, sender, fingerprint, mask=None,
                 metadata=None, metrics=None):
        vector, layout = flatten(delta)
        flat_mask = _flat_mask(delta, mask)
        kept = vector if flat_mask is None else vector[flat_mask]
        buckets = _kept_buckets(layer_buckets(layout), flat_mask) if self.per_layer else None
        payload = range_quantize(kept, self.bits, rng, buckets=buckets)
        frame = encode_range(payload, round_index=round_index, sender=sender,
                             fingerprint=fingerprint, mask=flat_mask, metadata=metadata)
        return frame, unflatten(decode_v2(frame).update.dense(), layout)



def check_lgc_entries(channel_entries: tuple[int, ...], dim: int) -> None:
    """LGC's layers (k_1..k_C entries, LGC eqs. (1)-(2)) must fit in a model of ``dim``
    entries; the error names the config key."""
    total = sum(channel_entries)
    if total > dim:
        raise ValueError(f'compression.lgc_channel_entries sum to {total}, more than the model '
                         f'has entries ({dim})')
