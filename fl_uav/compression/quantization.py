"""Stochastic gradient quantizers and their payload-size formulas (numpy, ROS-free).

Implemented here:

* QSGD with ``s`` levels, 2CEOAFL Definition 1 / eq. (12) (after Alistarh et al.): one L2 norm
  for the whole update (as in 2CEOAFL) or one norm per bucket (per layer), see
  :func:`qsgd_quantize` / :func:`qsgd_dequantize`.
* 2CEOAFL's probabilistic upload, eq. (11): send the raw (masked) update with probability
  ``q`` (the paper's simulation uses q = δ, the pruning ratio) and the QSGD-quantized one
  otherwise, with the payload size of the formula under eq. (12), see :func:`ceoafl_upload`.
* FedDPQ's stochastic range quantizer with δ bits, FedDPQ eqs. (11)-(12): uniform level points
  b_j over the magnitude range [min|g|, max|g|], stochastic rounding of |g|, sign kept apart;
  payload FedDPQ eq. (13), see :func:`range_quantize` / :func:`range_dequantize`.

Everything works on flat float32 vectors; :func:`flatten` / :func:`unflatten` convert a
``dict[str, np.ndarray]`` (state-dict order) to and from one vector, and :func:`layer_buckets`
gives per-layer bucket sizes.  Inputs are cast to float32 first and must be finite.  Every
random choice is drawn from an explicit ``np.random.Generator``, so a seeded generator makes
the output deterministic.  Both quantizers are unbiased, E[Q(v)] = v.

Bit widths (digest 000 §2.4 pitfall): a QSGD level takes s + 1 values {0..s}, so an encoder
needs ⌈log2(s+1)⌉ bits (:func:`qsgd_level_bits`); the paper counts ⌈log2 s⌉
(:func:`paper_qsgd_level_bits`).  Formulas for both are given; ``*_bits`` fields named
``paper_bits`` follow the paper exactly, the others count what an encoder really emits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    'FLOAT_BITS',
    'CeoaflUpload',
    'FlatLayout',
    'QsgdPayload',
    'RangePayload',
    'ceoafl_decode',
    'ceoafl_payload_bits',
    'ceoafl_upload',
    'feddpq_payload_bits',
    'flatten',
    'layer_buckets',
    'paper_qsgd_level_bits',
    'qsgd_dequantize',
    'qsgd_level_bits',
    'qsgd_payload_bits',
    'qsgd_quantize',
    'qsgd_variance_bound',
    'range_dequantize',
    'range_payload_bits',
    'range_quantize',
    'range_variance_bound',
    'unflatten',
]

FLOAT_BITS = 32
"""Bits of one float32 (a norm, a range endpoint, or a raw value)."""

MAX_RANGE_BITS = 32
"""Largest δ accepted by :func:`range_quantize` (level indices are stored as uint32)."""


# --------------------------------------------------------------------------- flat vectors


@dataclass(frozen=True)
class FlatLayout:
    """Names and shapes of the tensors packed, in order, into one flat vector."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of entries of each tensor."""
        return tuple(math.prod(shape) for shape in self.shapes)

    @property
    def dim(self) -> int:
        """Total number of entries (length of the flat vector)."""
        return sum(self.sizes)


def flatten(weights: Mapping[str, np.ndarray]) -> tuple[np.ndarray, FlatLayout]:
    """Concatenate named arrays (in mapping order) into one float32 vector plus its layout."""
    names = tuple(weights)
    arrays = [np.asarray(weights[name]) for name in names]
    layout = FlatLayout(names=names, shapes=tuple(tuple(int(n) for n in a.shape) for a in arrays))
    if not arrays:
        return np.zeros(0, np.float32), layout
    vector = np.concatenate([a.astype(np.float32, copy=False).ravel() for a in arrays])
    return vector, layout


def unflatten(vector: np.ndarray, layout: FlatLayout) -> dict[str, np.ndarray]:
    """Split a flat vector back into named float32 arrays (copies) following ``layout``."""
    vector = np.asarray(vector)
    if vector.ndim != 1 or vector.size != layout.dim:
        raise ValueError(f'vector must be 1-D with {layout.dim} entries, got shape {vector.shape}')
    out: dict[str, np.ndarray] = {}
    start = 0
    for name, shape, size in zip(layout.names, layout.shapes, layout.sizes):
        out[name] = vector[start:start + size].astype(np.float32, copy=True).reshape(shape)
        start += size
    return out


def layer_buckets(layout: FlatLayout) -> tuple[int, ...]:
    """Per-layer bucket sizes (one bucket per tensor) for the bucketed quantizers."""
    return layout.sizes


# --------------------------------------------------------------------------- validation


def _as_update(update: np.ndarray, name: str = 'update') -> np.ndarray:
    array = np.asarray(update)
    if array.ndim != 1:
        raise ValueError(f'{name} must be a 1-D vector, got shape {array.shape}')
    if not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
        raise ValueError(f'{name} must be real-valued, got dtype {array.dtype}')
    array = array.astype(np.float32, copy=False)
    if not np.all(np.isfinite(array)):
        raise ValueError(f'{name} must be finite (contains NaN or infinity)')
    return array


def _check_rng(rng: np.random.Generator) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f'rng must be a numpy.random.Generator, got {type(rng).__name__}')


def _check_int(value: int, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f'{name} must be an integer, got {value!r}')
    if value < minimum:
        raise ValueError(f'{name} must be >= {minimum}, got {value}')
    return int(value)


def _bucket_sizes(dim: int, buckets: Sequence[int] | None) -> tuple[int, ...]:
    if buckets is None:
        return (dim,)
    sizes = tuple(_check_int(b, 'buckets', 0) for b in buckets)
    if sum(sizes) != dim:
        raise ValueError(f'buckets must sum to the update length {dim}, got {sum(sizes)}')
    return sizes


def _bucket_ids(sizes: tuple[int, ...]) -> np.ndarray:
    return np.repeat(np.arange(len(sizes)), sizes)


def _uint_dtype(max_value: int) -> type[np.unsignedinteger]:
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        if max_value <= np.iinfo(dtype).max:
            return dtype
    raise ValueError(f'level {max_value} does not fit in 64 bits')


# --------------------------------------------------------------------------- QSGD


@dataclass(frozen=True, eq=False)
class QsgdPayload:
    """Compact QSGD representation (2CEOAFL eq. (12)).

    Entry i decodes to ``norms[b(i)] * (-1 if negative[i] else 1) * levels[i] / s`` where b(i)
    is the bucket of entry i.  ``levels`` lie in {0, ..., s}.
    """

    s: int
    bucket_sizes: tuple[int, ...]
    norms: np.ndarray
    """float32, one L2 norm per bucket (one bucket = the global-norm variant)."""
    negative: np.ndarray
    """bool, one sign bit per entry."""
    levels: np.ndarray
    """unsigned integers in [0, s], one per entry."""

    @property
    def dim(self) -> int:
        """Length of the quantized vector."""
        return int(self.levels.size)

    @property
    def bits(self) -> int:
        """Exact bits: norms + signs + ⌈log2(s+1)⌉-bit levels (:func:`qsgd_payload_bits`)."""
        return qsgd_payload_bits(self.dim, self.s, num_buckets=len(self.bucket_sizes))


def qsgd_level_bits(s: int) -> int:
    """Bits an encoder needs for one QSGD level in {0..s}: ⌈log2(s+1)⌉ (digest 000 §2.4)."""
    s = _check_int(s, 's', 1)
    return (s).bit_length()


def paper_qsgd_level_bits(s: int) -> int:
    """Bits 2CEOAFL counts for one level: ⌈log2 s⌉ (payload formula under eq. (12)).

    This undercounts when s is not of the form 2^n - 1 (e.g. 1 bit for s = 2, which has 3
    levels); use it only to reproduce the paper's numbers.
    """
    s = _check_int(s, 's', 1)
    return (s - 1).bit_length()


def qsgd_variance_bound(dim: int, s: int) -> float:
    """QSGD variance constant q = min(d/s², √d/s): E‖Q(v) − v‖² ≤ q‖v‖² (2CEOAFL eq. (16)).

    For the bucketed variant use the largest bucket size as ``dim``.
    """
    dim = _check_int(dim, 'dim', 0)
    s = _check_int(s, 's', 1)
    return min(dim / s**2, math.sqrt(dim) / s)


def qsgd_payload_bits(dim: int, s: int, *, num_buckets: int = 1) -> int:
    """Bits of a dense QSGD payload: 32 per norm + d·(1 + ⌈log2(s+1)⌉).

    With one bucket this is the quantized branch of the 2CEOAFL payload formula (under
    eq. (12)) without the pruning mask and with the exact level width (digest 000 §2.4).
    """
    dim = _check_int(dim, 'dim', 0)
    num_buckets = _check_int(num_buckets, 'num_buckets', 1)
    return FLOAT_BITS * num_buckets + dim * (1 + qsgd_level_bits(s))


def qsgd_quantize(update: np.ndarray, s: int, rng: np.random.Generator, *,
                  buckets: Sequence[int] | None = None) -> QsgdPayload:
    """QSGD with ``s`` levels, 2CEOAFL Definition 1 / eq. (12).

    For each bucket (default: the whole vector, one global norm as in 2CEOAFL) with norm
    ‖v‖₂ and each entry, r = |v_i|/‖v‖₂, l = ⌊s·r⌋ (clamped to s − 1 when r = 1), and the level
    is l + 1 with probability s·r − l, else l.  Hence E[Q(v)] = v and
    E‖Q(v) − v‖² ≤ min(d/s², √d/s)‖v‖².  ``buckets`` gives consecutive bucket sizes (e.g.
    :func:`layer_buckets`) for the per-layer variant.  A zero bucket quantizes to zeros.

    The norm is rounded to float32 (what the wire carries) before r is computed, so the decoder's
    expectation equals the float32 input.  Draws exactly ``len(update)`` uniforms from ``rng``.
    """
    vector = _as_update(update)
    s = _check_int(s, 's', 1)
    _check_rng(rng)
    sizes = _bucket_sizes(vector.size, buckets)
    ids = _bucket_ids(sizes)
    magnitude = np.abs(vector.astype(np.float64))
    norms64 = np.sqrt(np.bincount(ids, weights=magnitude**2, minlength=len(sizes)))
    if np.any(norms64 > np.finfo(np.float32).max):
        raise ValueError('update norm overflows float32 (the norm is sent as float32)')
    norms = norms64.astype(np.float32)
    per_entry = norms.astype(np.float64)[ids]
    with np.errstate(divide='ignore', invalid='ignore'):
        ratio = np.where(per_entry > 0.0, magnitude / per_entry, 0.0)
    scaled = np.clip(ratio, 0.0, 1.0) * s
    lower = np.minimum(np.floor(scaled), s - 1)
    rounded_up = rng.random(vector.size) < (scaled - lower)
    levels = (lower + rounded_up).astype(_uint_dtype(s))
    return QsgdPayload(s=s, bucket_sizes=sizes, norms=norms, negative=np.signbit(vector),
                       levels=levels)


def qsgd_dequantize(payload: QsgdPayload) -> np.ndarray:
    """Decode a :class:`QsgdPayload` to a float32 vector, ‖v‖ · sign_i · level_i / s (eq. (12))."""
    norms = np.asarray(payload.norms, np.float64)[_bucket_ids(payload.bucket_sizes)]
    sign = np.where(payload.negative, -1.0, 1.0)
    return (norms * sign * payload.levels.astype(np.float64) / payload.s).astype(np.float32)


# --------------------------------------------------------------------------- 2CEOAFL eq. (11)


def ceoafl_payload_bits(num_params: int, num_kept: int, *, raw: bool, s: int | None = None,
                        paper: bool = True, with_mask: bool = True) -> int:
    """Uplink payload of 2CEOAFL (formula under eq. (12); digest 000 §1.7 and §2.5).

    With p = ``num_params`` and p(1 − δ) = ``num_kept`` unmasked entries::

        raw:        p(1−δ)·(1 + 32) + p
        quantized:  p(1−δ)·(1 + ⌈log2 s⌉) + 32 + p

    The trailing ``+ p`` is the binary pruning mask (dropped when ``with_mask`` is false, e.g. an
    unpruned AFL/AFL-Quant upload).  ``paper=False`` uses the exact level width ⌈log2(s+1)⌉.
    """
    num_params = _check_int(num_params, 'num_params', 0)
    num_kept = _check_int(num_kept, 'num_kept', 0)
    if num_kept > num_params:
        raise ValueError(f'num_kept must be <= num_params ({num_params}), got {num_kept}')
    mask_bits = num_params if with_mask else 0
    if raw:
        return num_kept * (1 + FLOAT_BITS) + mask_bits
    if s is None:
        raise ValueError('s is required for the quantized payload')
    level_bits = paper_qsgd_level_bits(s) if paper else qsgd_level_bits(s)
    return num_kept * (1 + level_bits) + FLOAT_BITS + mask_bits


@dataclass(frozen=True, eq=False)
class CeoaflUpload:
    """One 2CEOAFL upload Π (eq. (11)): either the raw kept entries or their QSGD payload."""

    raw: bool
    """True when the raw update was chosen (probability q)."""
    dim: int
    mask: np.ndarray | None
    """bool mask of kept entries (None: no pruning, no mask on the wire)."""
    values: np.ndarray | None
    """float32 raw kept entries (raw branch only)."""
    quantized: QsgdPayload | None
    """QSGD payload of the kept entries, one global norm (quantized branch only)."""
    bits: int
    """Exact bits: ⌈log2(s+1)⌉-bit levels; mask bits only when a mask is sent."""
    paper_bits: int
    """Bits by the paper's formula (⌈log2 s⌉-bit levels, always + p mask bits)."""


def ceoafl_upload(update: np.ndarray, s: int, raw_probability: float,
                  rng: np.random.Generator, *, mask: np.ndarray | None = None) -> CeoaflUpload:
    """2CEOAFL eq. (11): Π = d with probability q, Q(d) (eq. (12), one norm) otherwise.

    ``raw_probability`` is q_u^t, the probability of sending the **raw** update; the paper's
    simulation sets it to the pruning ratio δ_u^t (so heavily pruned, hence small, updates go
    raw).  Only entries where ``mask`` is true are sent (masked entries must be zero, as the
    masked gradient is); E[decode(Π)] = d either way.  The coin is drawn first (one uniform,
    raw iff u < q), then the quantizer's draws.
    """
    vector = _as_update(update)
    s = _check_int(s, 's', 1)
    _check_rng(rng)
    q = float(raw_probability)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f'raw_probability must be in [0, 1], got {raw_probability}')
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != vector.shape:
            raise ValueError(f'mask must be a bool array of shape {vector.shape}')
        if np.any(vector[~mask] != 0):
            raise ValueError('mask must cover every non-zero entry of update')
        kept = vector[mask]
    else:
        kept = vector
    num_params, num_kept = vector.size, kept.size
    raw = bool(rng.random() < q)
    paper_bits = ceoafl_payload_bits(num_params, num_kept, raw=raw, s=s)
    bits = ceoafl_payload_bits(num_params, num_kept, raw=raw, s=s, paper=False,
                               with_mask=mask is not None)
    if raw:
        return CeoaflUpload(raw=True, dim=num_params, mask=mask, values=kept.copy(),
                            quantized=None, bits=bits, paper_bits=paper_bits)
    payload = qsgd_quantize(kept, s, rng)
    return CeoaflUpload(raw=False, dim=num_params, mask=mask, values=None, quantized=payload,
                        bits=bits, paper_bits=paper_bits)


def ceoafl_decode(upload: CeoaflUpload) -> np.ndarray:
    """Server side of eq. (11)/(12): the dense float32 Π, zero at pruned positions."""
    kept = upload.values if upload.raw else qsgd_dequantize(upload.quantized)
    if upload.mask is None:
        return np.array(kept, np.float32)
    dense = np.zeros(upload.dim, np.float32)
    dense[upload.mask] = kept
    return dense


# --------------------------------------------------------------------------- FedDPQ eqs. (11)-(13)


@dataclass(frozen=True, eq=False)
class RangePayload:
    """Compact FedDPQ range-quantizer representation (FedDPQ eqs. (11)-(12)).

    Entry i of bucket b decodes to ``±(low[b] + index[i]·(high[b] − low[b])/(2^δ − 1))``.
    """

    bits: int
    """δ: bits per level index (2^δ level points)."""
    bucket_sizes: tuple[int, ...]
    low: np.ndarray
    """float32 min |g| per bucket."""
    high: np.ndarray
    """float32 max |g| per bucket."""
    negative: np.ndarray
    """bool, one sign bit per entry."""
    index: np.ndarray
    """unsigned level indices in [0, 2^δ − 1]."""

    @property
    def dim(self) -> int:
        """Length of the quantized vector."""
        return int(self.index.size)

    @property
    def payload_bits(self) -> int:
        """Bits with sign bits and float32 endpoints counted (:func:`range_payload_bits`)."""
        return range_payload_bits(self.dim, self.bits, num_buckets=len(self.bucket_sizes))


def feddpq_payload_bits(dim: int, bits: int, overhead: int) -> int:
    """FedDPQ eq. (13): δ̃ = V·δ + o, with ``overhead`` o the sign and endpoint bits.

    The paper leaves o unspecified; :func:`range_payload_bits` fixes it.
    """
    dim = _check_int(dim, 'dim', 0)
    bits = _check_int(bits, 'bits', 1)
    overhead = _check_int(overhead, 'overhead', 0)
    return dim * bits + overhead


def range_payload_bits(dim: int, bits: int, *, num_buckets: int = 1) -> int:
    """FedDPQ eq. (13) with o = V sign bits + two float32 endpoints per bucket (digest 001 §1.5).

    = V·(δ + 1) + 64·(number of ranges).
    """
    num_buckets = _check_int(num_buckets, 'num_buckets', 1)
    return feddpq_payload_bits(dim, bits, dim + 2 * FLOAT_BITS * num_buckets)


def range_variance_bound(high_minus_low: np.ndarray | float, bits: int,
                         sizes: Sequence[int] | int = 1) -> float:
    """FedDPQ eq. (26): E‖Q(g) − g‖² ≤ Σ_v (ḡ_v − g̲_v)² / (4(2^δ − 1)²).

    ``high_minus_low`` holds the range width of each bucket and ``sizes`` the bucket sizes (each
    entry of a bucket shares its range).
    """
    bits = _check_int(bits, 'bits', 1)
    width = np.atleast_1d(np.asarray(high_minus_low, np.float64))
    counts = np.atleast_1d(np.asarray(sizes, np.float64))
    return float(np.sum(counts * width**2) / (4.0 * (2**bits - 1) ** 2))


def range_quantize(update: np.ndarray, bits: int, rng: np.random.Generator, *,
                   buckets: Sequence[int] | None = None) -> RangePayload:
    """FedDPQ stochastic range quantizer with δ = ``bits`` bits, FedDPQ eqs. (11)-(12).

    Per bucket (default: the whole vector; ``buckets`` as in :func:`qsgd_quantize`) the magnitude
    range [g̲, ḡ] = [min|g|, max|g|] carries 2^δ level points b_j = g̲ + j(ḡ − g̲)/(2^δ − 1)
    (eq. (11), so 2^δ − 1 intervals).  For |g| ∈ [b_j, b_{j+1}) the magnitude rounds up to b_{j+1}
    with probability (|g| − b_j)/(b_{j+1} − b_j) and down to b_j otherwise (eq. (12)); the sign is
    sent apart.  Unbiased, E[Q(g)] = g (eq. (25)), with the variance bound of eq. (26).  The
    endpoints are exact float32 values of the input.  Draws ``len(update)`` uniforms.
    """
    vector = _as_update(update)
    bits = _check_int(bits, 'bits', 1)
    if bits > MAX_RANGE_BITS:
        raise ValueError(f'bits must be <= {MAX_RANGE_BITS}, got {bits}')
    _check_rng(rng)
    sizes = _bucket_sizes(vector.size, buckets)
    ids = _bucket_ids(sizes)
    magnitude = np.abs(vector)
    low = np.zeros(len(sizes), np.float32)
    high = np.zeros(len(sizes), np.float32)
    start = 0
    for b, size in enumerate(sizes):
        if size:
            low[b] = magnitude[start:start + size].min()
            high[b] = magnitude[start:start + size].max()
        start += size
    intervals = 2**bits - 1
    low64 = low.astype(np.float64)[ids]
    step = (high.astype(np.float64) - low.astype(np.float64))[ids] / intervals
    with np.errstate(divide='ignore', invalid='ignore'):
        position = np.where(step > 0.0, (magnitude.astype(np.float64) - low64) / step, 0.0)
    position = np.clip(position, 0.0, float(intervals))
    lower = np.minimum(np.floor(position), intervals - 1)
    rounded_up = rng.random(vector.size) < (position - lower)
    index = (lower + rounded_up).astype(_uint_dtype(intervals))
    return RangePayload(bits=bits, bucket_sizes=sizes, low=low, high=high,
                        negative=np.signbit(vector), index=index)


def range_dequantize(payload: RangePayload) -> np.ndarray:
    """Decode a :class:`RangePayload` to float32: ±b_index (FedDPQ eqs. (11)-(12))."""
    ids = _bucket_ids(payload.bucket_sizes)
    low = payload.low.astype(np.float64)[ids]
    step = (payload.high.astype(np.float64) - payload.low.astype(np.float64))[ids]
    step = step / (2**payload.bits - 1)
    magnitude = low + payload.index.astype(np.float64) * step
    return np.where(payload.negative, -magnitude, magnitude).astype(np.float32)
