"""Top-k sparsification with error feedback (Stich, Cordonnier and Jaggi, 2018) as an fl_uav
compressor plug-in: a sparse codec v2 raw frame, the stations decode it as any other.

    PYTHONPATH=examples fl-uav experiment config/experiments/quick_digits.yaml \\
        --set compression.method=topk_ef:TopKErrorFeedback --out runs/topk

In the fleet the drones run it onboard (``fl-uav sim --set compression.method=...`` with
examples/ on PYTHONPATH). Another fraction: a factory, e.g. ``def topk_1pc(): return
TopKErrorFeedback(fraction=0.01)``, named as ``topk_ef:topk_1pc``.
"""

from __future__ import annotations

import numpy as np

from fl_uav.compression.codec_v2 import decode_v2, encode_raw
from fl_uav.compression.compressor import Compressor
from fl_uav.compression.lgc import top_k_indices
from fl_uav.compression.quantization import flatten, unflatten


class TopKErrorFeedback(Compressor):
    """u = e + Δ (flattened in the model's tensor order); send the k = ⌈fraction·d⌉ entries of u
    largest in magnitude as float32 values plus a d-bit mask; e ← u − sent."""

    name = 'topk_ef'

    def __init__(self, fraction: float = 0.1) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f'fraction must be in (0, 1], got {fraction}')
        self.fraction = float(fraction)
        self.residual = np.zeros(0, np.float32)   # e, one per drone (an instance per drone)
        self._owed = self.residual                # u of the last call: all owed if lost

    def compress(self, delta, rng, *, round_index, sender, fingerprint, mask=None,
                 metadata=None, metrics=None):
        vector, layout = flatten(delta)
        u = vector + (self.residual if self.residual.size == vector.size else 0.0)
        if mask is not None:   # a pruned drone: entries outside the mask are neither sent
            u = u * flatten(mask)[0].astype(np.float32)      # nor owed
        keep = np.zeros(u.size, bool)
        keep[top_k_indices(u, max(1, int(np.ceil(self.fraction * u.size))))] = True
        self._owed, self.residual = u, np.where(keep, 0.0, u).astype(np.float32)
        frame = encode_raw(u[keep].astype(np.float32), round_index=round_index, sender=sender,
                           fingerprint=fingerprint, mask=keep, metadata=metadata)
        return frame, unflatten(decode_v2(frame).update.dense(), layout)   # what is decoded

    def upload_lost(self) -> None:
        self.residual = self._owed   # nothing arrived: all of u is owed

    def state_dict(self) -> dict[str, np.ndarray]:
        return {'residual': self.residual}

    def load_state_dict(self, state) -> None:
        self.residual = np.asarray(state['residual'], np.float32)
