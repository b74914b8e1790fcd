"""The FedEx visit on the wire: a UAV hovering over a client delivers the model it carries and
collects the client's cumulative local update (CLU), both as codec v1 frames.

* delivery (UAV k -> client j, topic ``/gc<j>/express/model``): GLOBAL_MODEL, round r,
  sender k, the carried global model x^{t0}; metadata ``client`` (j) and ``local_steps``
  (the local SGD steps to run from it before the next visit, FedEx eq. (10)), and the
  station's ``run_id`` and ``run_started_ms`` from the round's frame (the client keeps a
  round gate per UAV, fl_uav/fleet/round_gate.py, so a replayed delivery of an earlier round
  or run is refused).
* CLU (client j -> UAV k, topic ``/uav<k>/express/clu``): UPDATE, round r, sender j, the
  CLU in the Delta = x_i - x_base sign (FedEx eq. (11) with the sign of the digest Sec. 8.2:
  the station adds it), metadata ``uav`` (k), ``steps``, ``num_samples``, ``train_loss``,
  ``base_round`` (round of the model it was trained from; absent before the first training)
  and ``distance_m`` (the client's range check, for the logs).

Both frames travel in the signed envelope (wire version 4) when the sender has keys
(``security.keys_dir``): the UAV signs its delivery as drone k with ``drone<k>.key``, the
client its CLU as client j with ``gc<j>.key`` (the envelope's signer is the frame's sender,
as everywhere). Each side passes its :class:`~fl_uav.compression.signing.FrameAuth` to
encode (seal) and decode (open): the client's holds the drones' public keys
(``keys.load_ground_client_auth``), the UAV's the clients' (``keys.visit_auth``). Without
one the frames are plain v1 and signed ones are refused (``signer``).

Decoding checks everything (the envelope: ``unsigned`` when signatures are required,
``signer``, ``signature``, ``stale``; the codec's own checks, then kind, addressee, round,
metadata) and raises :class:`ExchangeRejected` with a counter reason; the callers count and
go on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_uav.compression.codec import (
    DecodeLimits,
    FrameError,
    FrameKind,
    decode_frame,
    encode_frame,
    float32_tensors,
)
from fl_uav.compression.signing import FrameAuth
from fl_uav.fleet.messages import (
    run_metadata,
    run_of,
)
from fl_uav.learning.weights import Weights
from fl_uav.values import is_finite_number


class ExchangeRejected(ValueError):
    """A delivery or CLU frame that cannot be used; ``reason`` is the counter's key."""

    def __init__(self, reason: str, detail: str = '') -> None:
        super().__init__(f'{reason}: {detail}' if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Delivery:
    """A decoded delivery: who brought which model, and how many steps to train from it."""

    uav: int
    round_index: int
    weights: Weights
    local_steps: int
    run_id: str | None = None            # the station's run (None: an older UAV)
    run_started_ms: int | None = None


@dataclass(frozen=True)
class Clu:
    """A decoded CLU: the client's accumulated local update and what it cost."""

    client: int
    round_index: int
    delta: Weights
    steps: int
    num_samples: int
    train_loss: float | None
    distance_m: float
    metadata: dict[str, Any] = field(default_factory=dict)


PLAIN = FrameAuth()
"""No keys: plain frames out, plain frames in (a signed one is refused as ``signer``)."""


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _float32(tensors: dict[str, np.ndarray]) -> Weights:
    """The frame's tensors in the models' float32 (``nonfinite`` beyond its range)."""
    try:
        return float32_tensors(tensors)
    except FrameError as exc:
        raise ExchangeRejected(exc.reason, str(exc)) from None


def _decode(data: bytes, limits: DecodeLimits, fingerprint: bytes,
            shapes: dict[str, tuple[int, ...]], kind: FrameKind, auth: FrameAuth):
    try:
        frame = decode_frame(auth.open(data, limits), limits,
                             expected_fingerprint=fingerprint, expected_shapes=shapes)
    except FrameError as exc:
        raise ExchangeRejected(exc.reason, str(exc)) from None
    if frame.kind != kind:
        raise ExchangeRejected('wrong_kind', f'{frame.kind.name}, expected {kind.name}')
    return frame


def encode_delivery(uav: int, round_index: int, client: int, fingerprint: bytes,
                    weights: Weights, local_steps: int, auth: FrameAuth = PLAIN,
                    run_id: str | None = None, run_started_ms: int | None = None) -> bytes:
    """The model frame UAV ``uav`` hands to ``client`` at a visit, sealed with ``auth``
    (UAV ``uav``'s own key: signed as sender ``uav``), with the station's run when known."""
    return auth.seal(encode_frame(FrameKind.GLOBAL_MODEL, round_index, uav, fingerprint,
                                  weights, {'client': client, 'local_steps': local_steps,
                                            **run_metadata(run_id, run_started_ms)}))


def decode_delivery(data: bytes, limits: DecodeLimits, fingerprint: bytes,
                    shapes: dict[str, tuple[int, ...]], client: int,
                    num_uavs: int, auth: FrameAuth = PLAIN) -> Delivery:
    """Check a delivery addressed to ``client`` from one of the ``num_uavs`` UAVs, opened
    with ``auth`` (the client's: the UAVs' public keys)."""
    frame = _decode(data, limits, fingerprint, shapes, FrameKind.GLOBAL_MODEL, auth)
    if not 0 <= frame.sender < num_uavs:
        raise ExchangeRejected('unknown_sender', f'sender {frame.sender}')
    if frame.metadata.get('client') != client:
        raise ExchangeRejected('wrong_client', f'addressed to {frame.metadata.get("client")}')
    steps = frame.metadata.get('local_steps')
    if not _is_count(steps) or steps < 1:
        raise ExchangeRejected('metadata', f'local_steps {steps!r}')
    try:
        run_id, started_ms = run_of(frame.metadata)
    except ValueError as exc:
        raise ExchangeRejected('metadata', str(exc)) from None
    weights = _float32(frame.tensors)
    return Delivery(frame.sender, frame.round_index, weights, steps, run_id, started_ms)


def encode_clu(client: int, uav: int, round_index: int, fingerprint: bytes, delta: Weights,
               metadata: dict[str, Any], auth: FrameAuth = PLAIN) -> bytes:
    """The CLU frame ``client`` hands to ``uav`` (metadata as in the module docstring),
    sealed with ``auth`` (client ``client``'s own key: signed as sender ``client``)."""
    return auth.seal(encode_frame(FrameKind.UPDATE, round_index, client, fingerprint, delta,
                                  {**metadata, 'uav': uav}))


def decode_clu(data: bytes, limits: DecodeLimits, fingerprint: bytes,
               shapes: dict[str, tuple[int, ...]], uav: int, round_index: int,
               client: int, auth: FrameAuth = PLAIN) -> Clu:
    """Check that a CLU frame answers UAV ``uav``'s round-``round_index`` visit of
    ``client``, opened with ``auth`` (the UAV's visit identity: the clients' public keys)."""
    frame = _decode(data, limits, fingerprint, shapes, FrameKind.UPDATE, auth)
    meta = frame.metadata
    if meta.get('uav') != uav:
        raise ExchangeRejected('wrong_uav', f'for UAV {meta.get("uav")!r}')
    if frame.sender != client:
        raise ExchangeRejected('wrong_client', f'from client {frame.sender}, expected {client}')
    if frame.round_index != round_index:
        raise ExchangeRejected('wrong_round', f'round {frame.round_index}, expected '
                               f'{round_index}')
    steps, samples = meta.get('steps'), meta.get('num_samples')
    loss, distance = meta.get('train_loss'), meta.get('distance_m')
    if not (_is_count(steps) and _is_count(samples)
            and (loss is None or is_finite_number(loss)) and is_finite_number(distance)):
        raise ExchangeRejected('metadata', f'{meta!r}')
    delta = _float32(frame.tensors)
    return Clu(client, frame.round_index, delta, steps, samples,
               None if loss is None else float(loss), float(distance), dict(meta))
