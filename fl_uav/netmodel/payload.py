"""Upload sizes in bits and per-channel communication cost, as the papers count them.

======================================  ====================================================
function                                equation
======================================  ====================================================
``feddpq_payload_bits``                 FedDPQ eq. (13): V delta + o
``two_ceoafl_payload_bits``             2CEOAFL Sec. IV (payload s_u^t, raw / quantized)
``two_ceoafl_expected_payload_bits``    the same, averaged over the raw-vs-quantize coin
``lgc_comm_energy_j``                   LGC Table 1 (J/MB per channel) times the layer sizes
``lgc_round_cost``                      LGC eq. (10a), one round's summand
======================================  ====================================================

These are the papers' *accounting* conventions; the real serialized size comes from
``fl_uav.compression``. Ambiguities resolved here:

* FedDPQ eq. (13) counts V delta + o bits, o being "the sign and the endpoints"; V is the full
  model size (pruning does not shrink the upload in FedDPQ). The caller chooses o; counting one
  sign bit per element means o = V + 64 (digest Sec. 1.5).
* 2CEOAFL counts 1 + 32 bits per surviving raw entry, 1 + ceil(log2 s) per quantized entry,
  32 bits for the norm, and p bits for the mask; the formula is printed as an upper bound and is
  used as an equality. ceil(log2 s) under-counts the s + 1 QSGD levels; it is kept because the
  paper's numbers (Fig. 4) use it. The raw-send probability defaults to the paper's q = delta.
* LGC prices traffic in J per MB (Table 1) with no channel rate. MB is read as 10^6 bytes and
  one sparse entry as 8 bytes (4-byte value + 4-byte index; LGC digest Sec. 2.4); both are
  arguments. Table 1's s.d. (0.00033) is negligible and ignored. Eq. (10a) has no channel index
  on E_comm although Table 1 prices channels differently; ``lgc_round_cost`` takes one cost per
  channel (digest Sec. 3.1).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from fl_uav.netmodel._checks import (
    FloatOrArray,
    check_non_negative,
    check_positive,
    check_unit_interval,
    out,
)

FLOAT32_BITS = 32

# LGC Table 1: mean communication energy per channel type, J/MB.
LGC_CHANNEL_ENERGY_J_PER_MB = {
    '3g': 1296.0,
    '4g': 2.2 * 1296.0,
    '5g': 2.5 * 2.2 * 1296.0,
}
LGC_BYTES_PER_ENTRY = 8
BYTES_PER_MB = 1e6


def _check_count(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f'{name} must be an integer >= {minimum}, got {value!r}')
    return int(value)


def feddpq_payload_bits(num_params: int, bits_per_element: ArrayLike,
                        overhead_bits: float = 0.0) -> FloatOrArray:
    """FedDPQ eq. (13): delta~_u = V delta_u + o (Table I: delta in {6, ..., 16})."""
    v = _check_count(num_params, 'num_params', 1)
    delta = check_positive(bits_per_element, 'bits_per_element')
    o = float(check_non_negative(overhead_bits, 'overhead_bits'))
    return out(v * delta + o)


def two_ceoafl_payload_bits(num_params: int, pruning_ratio: ArrayLike, raw: bool,
                            levels: int = 3) -> FloatOrArray:
    """2CEOAFL Sec. IV payload of one upload.

    raw:        p (1 - delta)(1 + 32) + p
    quantized:  p (1 - delta)(1 + ceil(log2 s)) + 32 + p
    The trailing p is the binary mask. Paper setting: s = 3 levels, delta ~ U[0.05, 0.7].
    """
    p = _check_count(num_params, 'num_params', 1)
    delta = check_unit_interval(pruning_ratio, 'pruning_ratio', closed_high=True)
    s = _check_count(levels, 'levels', 1)
    kept = p * (1.0 - delta)
    if raw:
        return out(kept * (1 + FLOAT32_BITS) + p)
    return out(kept * (1 + math.ceil(math.log2(s))) + FLOAT32_BITS + p)


def two_ceoafl_expected_payload_bits(num_params: int, pruning_ratio: ArrayLike,
                                     raw_prob: ArrayLike | None = None,
                                     levels: int = 3) -> FloatOrArray:
    """Mean 2CEOAFL payload: q s_raw + (1 - q) s_quant, with q = delta by default (the paper)."""
    delta = check_unit_interval(pruning_ratio, 'pruning_ratio', closed_high=True)
    q = delta if raw_prob is None else check_unit_interval(raw_prob, 'raw_prob',
                                                            closed_high=True)
    raw = np.asarray(two_ceoafl_payload_bits(num_params, delta, True, levels))
    quant = np.asarray(two_ceoafl_payload_bits(num_params, delta, False, levels))
    return out(q * raw + (1.0 - q) * quant)


def lgc_comm_energy_j(entries_per_channel: ArrayLike, energy_j_per_mb: ArrayLike,
                      bytes_per_entry: float = LGC_BYTES_PER_ENTRY,
                      bytes_per_mb: float = BYTES_PER_MB) -> float:
    """Energy of one LGC upload: sum_n (D_n bytes_per_entry / bytes_per_mb) e_n.

    ``energy_j_per_mb`` per channel, e.g. ``LGC_CHANNEL_ENERGY_J_PER_MB['4g']`` (LGC Table 1).
    """
    d = check_non_negative(entries_per_channel, 'entries_per_channel')
    e = check_non_negative(energy_j_per_mb, 'energy_j_per_mb')
    size = float(check_positive(bytes_per_entry, 'bytes_per_entry'))
    mb = float(check_positive(bytes_per_mb, 'bytes_per_mb'))
    if d.ndim > 1 or e.ndim > 1 or (e.ndim == 1 and e.shape != d.shape):
        raise ValueError('energy_j_per_mb must be a scalar or one value per channel')
    return float(np.sum(d * size / mb * e))


def lgc_round_cost(local_steps: int, comp_cost_per_step: float, entries_per_channel: ArrayLike,
                   comm_cost_per_entry: ArrayLike) -> float:
    """LGC eq. (10a) summand: E_comp H + sum_n E_comm,n D_n, for one resource (energy or money).

    ``comm_cost_per_entry`` is per channel n (the paper drops the index n; digest Sec. 3.1).
    Sum this over rounds and compare with the budget B_{m,r}.
    """
    h = _check_count(local_steps, 'local_steps', 0)
    comp = float(check_non_negative(comp_cost_per_step, 'comp_cost_per_step'))
    d = check_non_negative(entries_per_channel, 'entries_per_channel')
    c = check_non_negative(comm_cost_per_entry, 'comm_cost_per_entry')
    if d.ndim > 1 or c.ndim > 1 or (c.ndim == 1 and c.shape != d.shape):
        raise ValueError('comm_cost_per_entry must be a scalar or one value per channel')
    return float(comp * h + np.sum(d * c))
