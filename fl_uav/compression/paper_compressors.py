"""The papers' own upload schemes as compressors: 2CEOAFL's raw-or-quantized choice and LGC.

Both follow :class:`fl_uav.compression.compressor.Compressor` (frame bytes, reconstructed
delta). :class:`CeoaflCompressor` is stateless; :class:`LgcCompressor` keeps error memory, so
keep one instance per drone and checkpoint it with ``state_dict`` / ``load_state_dict``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fl_uav.aggregation._common import PRUNE_FRACTION_KEY
from fl_uav.compression.codec_v2 import (
    decode_lgc_parts,
    decode_v2,
    encode_lgc,
    encode_qsgd,
    encode_raw,
)
from fl_uav.compression.compressor import (
    Compressor,
    _flat_mask,
    check_lgc_entries,
)
from fl_uav.compression.lgc import LgcEncoder, decode
from fl_uav.compression.quantization import ceoafl_upload, flatten, unflatten


class CeoaflCompressor(Compressor):
    """2CEOAFL eq. (11): Π = d with probability q, QSGD Q(d) (eq. (12), one norm) otherwise.

    Only the kept entries of the drone's pruning ``mask`` are sent, plus the mask (digest 000
    §2.5): a raw frame (32 bits per kept entry) or a QSGD frame (1 + ⌈log2(s+1)⌉ bits per kept
    entry + one norm) of codec v2. q is the ``raw_probability`` passed per call, else the
    fixed ``raw_probability`` given here (0 = AFL-Quant, always quantize; 1 = AFL-Prune, always
    raw), else the paper's simulation choice q = δ_u^t: the drone's pruning ratio, read from
    ``metrics[PRUNE_FRACTION_KEY]`` (0 when absent), so the fleet and the engine just pass the
    client's metrics. The coin and the quantizer draw from ``rng``; E[decoded] = delta either
    way.
    """

    name = 'ceoafl'

    def __init__(self, levels: int, raw_probability: float | None = None) -> None:
        if levels < 1:
            raise ValueError(f'qsgd levels must be >= 1, got {levels}')
        if raw_probability is not None and not 0.0 <= raw_probability <= 1.0:
            raise ValueError(f'raw_probability must be in [0, 1], got {raw_probability}')
        self.levels, self.raw_probability = levels, raw_probability
        self.last_raw: bool | None = None

    def compress(self, delta, rng, *, round_index, sender, fingerprint, mask=None,
                 metadata=None, metrics=None, raw_probability: float | None = None):
        vector, layout = flatten(delta)
        flat_mask = _flat_mask(delta, mask)
        q = self.raw_probability if raw_probability is None else raw_probability
        if q is None:      # q = δ_u^t (2CEOAFL §4)
            q = float((metrics or {}).get(PRUNE_FRACTION_KEY, 0.0))
        upload = ceoafl_upload(vector, self.levels, q, rng, mask=flat_mask)
        self.last_raw = upload.raw
        common = {'round_index': round_index, 'sender': sender, 'fingerprint': fingerprint,
                  'mask': flat_mask, 'metadata': metadata}
        frame = (encode_raw(upload.values, **common) if upload.raw
                 else encode_qsgd(upload.quantized, **common))
        return frame, unflatten(decode_v2(frame).update.dense(), layout)


class LgcCompressor(Compressor):
    """LGC over radio channels (Du et al.; digest 002 §2.1–2.5, Algorithm 1 lines 8–11).

    u = e + Δ is split into layers of ``channel_entries`` = (k_1..k_C) entries by magnitude rank
    (eqs. (1)-(2)); layer c is one codec v2 LGC frame sent on channel c, which drops it with
    probability ``drop_probabilities[c]`` this round. The residual is formed from what arrived
    (e ← u − Σ received layers; ``LgcEncoder.acknowledge``, §2.5), so a dropped band is retried
    at the next round and Σ(received) + e stays equal to the accumulated updates. The returned
    bytes are the sent layer frames concatenated (each frame self-delimiting; all of them used
    airtime), the reconstructed delta is the sum of the received layers (eq. (2)).
    ``channel_entries`` may be changed between rounds (a controller's D_n, LGC eq. (13));
    ``last_frame_bytes`` holds the bytes sent on each channel by the last call.
    :meth:`upload_lost` (the whole upload missed the deadline) puts the received layers back
    into the residual; :meth:`upload_used` (the server summed only some of the sent layers, as
    the fleet's ground station reports) keeps exactly those acknowledged. The error memory is
    allocated on the first call (its size is the model's).
    """

    name = 'lgc'

    def __init__(self, channel_entries: Sequence[int],
                 drop_probabilities: Sequence[float] = ()) -> None:
        entries = tuple(int(k) for k in channel_entries)
        drops = tuple(float(p) for p in drop_probabilities) or (0.0,) * len(entries)
        if not entries or any(k < 0 for k in entries) or sum(entries) < 1:
            raise ValueError(f'lgc_channel_entries must be non-negative counts with a positive '
                             f'sum, got {list(entries)}')
        if len(drops) != len(entries):
            raise ValueError(f'lgc_drop_probabilities needs one value per channel '
                             f'({len(entries)}), got {len(drops)}')
        if any(not 0.0 <= p <= 1.0 for p in drops):
            raise ValueError(f'lgc_drop_probabilities must lie in [0, 1], got {list(drops)}')
        self.channel_entries, self.drop_probabilities = entries, np.asarray(drops)
        self.encoder: LgcEncoder | None = None
        self.last_received: list[int] = []
        self.last_frame_bytes: list[int] = []   # per channel, of the last compress
        self._before_ack: np.ndarray | None = None
        self._sent_layers: list = []

    def compress(self, delta, rng, *, round_index, sender, fingerprint, mask=None,
                 metadata=None, metrics=None):
        """``mask`` is implied (only the top-ranked indices travel); every layer frame carries
        ``metadata`` (codec v2 metadata section), so any layer that arrives brings it."""
        vector, layout = flatten(delta)
        check_lgc_entries(self.channel_entries, layout.dim)   # a planner may change them
        if self.encoder is None:
            self.encoder = LgcEncoder(layout.dim, self.channel_entries)
        accumulated = self.encoder.residual + vector.astype(np.float32)
        layers = self.encoder.encode(vector, self.channel_entries)
        try:
            frames = encode_lgc(layers, layout.dim, round_index=round_index, sender=sender,
                                fingerprint=fingerprint, metadata=metadata)
        except Exception:   # nothing left the drone: u stays whole in the residual, and the
            self.encoder.acknowledge([])   # next round can encode again
            raise
        dropped = rng.random(len(layers)) < self.drop_probabilities
        received = [layer.layer_id for layer, lost in zip(layers, dropped) if not lost]
        self.encoder.acknowledge(received)
        self._before_ack = accumulated
        self._sent_layers = layers
        self.last_received = received
        self.last_frame_bytes = [len(f) for f in frames]
        parts, bad = decode_lgc_parts([frames[c] for c in received])
        if bad:
            raise RuntimeError(f'LGC frames failed to decode: {bad}')
        dense = decode([part.layer for part in parts], layout.dim)
        return b''.join(frames), unflatten(dense, layout)

    def upload_lost(self) -> None:
        """Nothing of this round arrived: the residual is the whole u again."""
        self.upload_used(())

    def upload_used(self, layer_ids: Sequence[int]) -> None:
        """The server used exactly the layers ``layer_ids`` of the last upload: e ← u − Σ of
        those layers (ids not sent are ignored). Once per upload; later calls do nothing."""
        if self.encoder is None or self._before_ack is None:
            return
        used = {int(i) for i in layer_ids}
        residual = self._before_ack.copy()
        for layer in self._sent_layers:
            if layer.layer_id in used:
                residual[layer.indices] = 0.0
        self.encoder.load_state_dict({'residual': residual})
        self._before_ack = None
        self._sent_layers = []
        self.last_received = [c for c in self.last_received if c in used]

    def state_dict(self) -> dict[str, np.ndarray]:
        return {} if self.encoder is None else self.encoder.state_dict()

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        if 'residual' in state:
            residual = np.asarray(state['residual'], np.float32)
            self.encoder = LgcEncoder(residual.size, self.channel_entries)
            self.encoder.load_state_dict(state)
