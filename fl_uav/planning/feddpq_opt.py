"""FedDPQ resource decisions: packet-error target q (hence power), top-up Δ, pruning ρ, bits δ.

Paper: Hou et al., "Energy-Efficient Federated Learning for Edge Real-Time Vision via Joint
Data, Computation, and Communication Design" (FedDPQ, JSAC 2025; digest 001). The server
chooses, once before training, the knobs of every drone u that minimise the expected energy to
reach the convergence target ε (problem P2, FedDPQ eq. (41)):

    H(q, Δ, ρ, δ) = Ω · S · Σ_u τ_u (E_u,tr + E_u,cu) + Σ_u E_u,gen          FedDPQ eq. (39)
    Ω = ⌈(F(w⁰) − F*) / ((η/2 − 8Lη²) ε − Ψ)⌉                                FedDPQ eq. (31)

by block-coordinate descent over the blocks q → Δ → ρ → δ with Bayesian optimisation inside
each block (FedDPQ Algorithms 1 and 2), using optuna.

Model pieces and where they come from:

* Top-up (FedDPQ eqs. (1)-(3)): D_gen,u,c = max(⌈Δ_u D'_u⌉ − D_loc,u,c, 0), D'_u = max_c D_loc,u,c
  (the ceil rule of ``fl_uav.learning.topup``); τ_u = (D_loc,u + D_gen,u) / Σ (…).
* Energy: E_tr (eq. (35)-(36), ``netmodel.compute.training_energy_j``, b samples, factor 1 − ρ),
  E_gen (eq. (33)-(34), ``generation_energy_j``, paid once), E_cu = p_u δ̃_u / R_u(p_u)
  (eqs. (13), (14), (37), (38): ``netmodel.payload.feddpq_payload_bits``,
  ``netmodel.radio.ergodic_rate_rayleigh_bit_s``), total by ``compute.feddpq_total_energy_j``
  with the S draws per round the digest says eq. (39) omits (§1.7).
* Power from q (eq. (16) inverted, ``netmodel.radio.power_for_packet_error_w``).
* Ψ and Ω: FedDPQ Theorem 1 (eq. (29)) in its general per-drone-q form, which equals
  Corollary 2 (eqs. (31)-(32)) when every q_u is the same. The effective weights the paper
  defines by enumerating all U^S selections have a closed form because the S draws are i.i.d.:
  a draw is a success from drone u with probability τ_u (1 − q_u), so with q̄ = Σ τ_u q_u

      β̄_u = τ_u (1 − q_u) / (1 − q̄),   ᾱ_u = β̄_u / S̄(q̄),
      S̄(q) = (1 − q^S) / Σ_{k=1..S} (1/k) C(S,k) (1 − q)^k q^(S−k)            (ref. [24])

  (the number K of successful draws is Bin(S, 1 − q̄) and, given K, the senders are i.i.d. with
  P(u) = β̄_u). With q_u = q this gives β̄ = τ, ᾱ = τ / S̄, the paper's Corollary 1. Then

      Ψ = η χ² Σ τ_u Z_u² + 8Lη² (Σ ᾱ_u Z_u² + c_q Σ τ_u (q_u − q̄)² Z_u²) + 2Lη² σ² Σ ᾱ_u
          + η L² Γ² (Σ β̄_u² · Σ ρ_u + 4ηL Σ β̄_u ρ_u) + Lη² Σ ᾱ_u G_u / (4 (2^δ_u − 1)²)

  with χ² = Σ (β̄_u − τ_u)² / τ_u (the chi-square divergence the proof of Lemma 3 uses; the
  printed eq. (27) drops the 1/τ_u), c_q = Σ_{k=2..S} q_max^(S−k) C(S,k) / (1 − q_max^S) and
  G_u = Σ_v (ḡ'_{u,v} − g̲'_{u,v})² = V r² (r: the per-element gradient range, a constant).

Choices where the paper is silent (FedDPQ digest §8), all in :class:`ConvergenceConstants`:

* L, Γ², σ², Z_u², F(w⁰) − F*, ε and the gradient range are not given. The defaults are an
  assumed calibration (η = 10⁻³ from Table I, L = 1 so η < 1/(16L); F(w⁰) − F* = 2.3 ≈ ln 10,
  the cross-entropy of a 10-class model at start). They set the orders of magnitude so that at
  Table I's mid-box knobs the pruning floor, the outage-bias term and the heterogeneity term
  each take a visible share of the budget (η/2 − 8Lη²) ε and Ω lands in the hundreds to
  thousands, as in the paper's 5000-round runs. Replace them with estimates from a pilot run.
* Z_u² does not depend on Δ in the paper, which hides augmentation's benefit from the
  optimiser (digest §3, [AMBIG, important]). Here Z_u² = z_sq + z_label_scale · TV_u², TV_u the
  total-variation distance between drone u's mixed label distribution and the fleet's
  τ-weighted mix (the digest's suggestion). ``z_label_scale = 0`` is the paper's literal form.
* Ω above ``max_rounds`` (the paper's 5000-round cap) or a non-positive denominator means the
  target is not reached: the prediction says so (``reached = False``, energy at the cap, as
  the paper's saturated runs) and the optimiser's objective adds a penalty.
* Packet-error target infeasible for the fleet (digest §1.6): one common q needs
  p_u ∝ (I_u + B N0) d_u², so it exists within [p_min, p_max] (eqs. (40e), (40g)) only if that
  product spans at most p_max / p_min across the fleet. Otherwise (fallback ``'clip'``, the
  default) the q block searches a common *target* q, each drone transmits at
  clip(p_u(q), p_min, p_max) and has its own q_u = q_u(p_u): drones that would need more than
  p_max fail more often than q, drones that would need less than p_min less often. This is the
  first rule the digest lists; the "smallest feasible common q" does not exist when no common
  q does, and excluding drones would change the learning objective F (their data leave τ).
  The price of unequal q_u (β̄ ≠ τ) is not ignored: Ψ above is Theorem 1's, with its χ² and
  q-dispersion terms, so the optimiser weighs power control against that bias. ``'error'``
  raises :class:`FeddpqInfeasibleError` instead. The plan states the mode and the reason.
* BO per block: the q block (1-D, over log q) uses optuna's GP sampler, the paper's GP-BO
  (Matérn-5/2 kernel and log-EI in optuna, RBF and PI in the paper). The U-dimensional Δ, ρ, δ
  blocks use optuna's multivariate TPE sampler, because GP-BO in 20 dimensions costs about a
  second per trial here and the digest warns it scales poorly; both are Bayesian
  optimisation. Each block's initial design (the paper starts from one random point) is the
  incumbent, the box's low, middle and high corners and "top-k by energy share" designs (the
  k drones with the largest τ_u E_u at the high end, the rest low), so a block never returns
  worse than the incumbent and the BCD is monotone. Stop: relative change < ``tolerance`` or
  ``max_bcd_rounds``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fl_uav.configschema import require_choice
from fl_uav.learning.topup import topup_counts_per_device
from fl_uav.netmodel.compute import (
    FEDDPQ_ENERGY_COEFF,
    FEDDPQ_GEN_CYCLES_PER_SAMPLE,
    FEDDPQ_TRAIN_CYCLES_PER_SAMPLE,
    feddpq_total_energy_j,
    generation_energy_j,
    training_energy_j,
)
from fl_uav.netmodel.payload import feddpq_payload_bits
from fl_uav.netmodel.radio import (
    CHEN_WATERFALL_THRESHOLD,
    FEDDPQ_MAX_TX_POWER_W,
    FEDDPQ_MIN_TX_POWER_W,
    THERMAL_NOISE_PSD_W_HZ,
    ergodic_rate_rayleigh_bit_s,
    packet_error_prob_rayleigh,
    power_for_packet_error_w,
)

# Knob names in the per-drone dict (the config keys they drive, see fl_uav.resources).
TX_POWER_KNOB = 'tx_power_w'
TOPUP_KNOB = 'topup_factor'
PRUNE_KNOB = 'prune_fraction'
BITS_KNOB = 'range_bits'
Q_TARGET_KNOB = 'packet_error_target'
Q_KNOB = 'packet_error_prob'

FALLBACKS = ('clip', 'error')
#: optuna's samplers take seeds in [0, 2**32)
OPTUNA_SEED_MODULUS = 2 ** 32
_PENALTY = 10.0      # objective multiplier when the target is not reached within max_rounds


class FeddpqInfeasibleError(ValueError):
    """The inputs admit no plan: the message names what is infeasible and why."""


@dataclass(frozen=True)
class FeddpqBounds:
    """The decision box of FedDPQ eqs. (40b)-(40f); defaults from its Table I."""

    tx_power_min_w: float = FEDDPQ_MIN_TX_POWER_W
    tx_power_max_w: float = FEDDPQ_MAX_TX_POWER_W
    topup_min: float = 0.1
    topup_max: float = 0.4
    prune_min: float = 0.1
    prune_max: float = 0.3
    bits_min: int = 6
    bits_max: int = 16

    def __post_init__(self) -> None:
        pairs = (('tx_power_min_w', 'tx_power_max_w'), ('topup_min', 'topup_max'),
                 ('prune_min', 'prune_max'), ('bits_min', 'bits_max'))
        for low, high in pairs:
            lo, hi = getattr(self, low), getattr(self, high)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f'bounds: need finite {low} <= {high}, got {lo} and {hi}')
        if self.tx_power_min_w <= 0:
            raise ValueError(f'bounds: tx_power_min_w must be > 0, got {self.tx_power_min_w}')
        if not (0.0 < self.topup_min and self.topup_max <= 1.0):
            raise ValueError('bounds: topup factors must lie in (0, 1]')
        if not (0.0 <= self.prune_min and self.prune_max < 1.0):
            raise ValueError('bounds: prune fractions must lie in [0, 1)')
        if not (isinstance(self.bits_min, int) and isinstance(self.bits_max, int)
                and 1 <= self.bits_min):
            raise ValueError('bounds: bits_min and bits_max must be integers >= 1')


@dataclass(frozen=True)
class ConvergenceConstants:
    """The constants of FedDPQ Theorem 1 / Corollary 2 (eqs. (29)-(32)); all but η are [GAP].

    lr: η (Table I: 0.001). smoothness: L (eq. (19)); the theory needs η < 1/(16L).
    param_sq_bound: Γ² (eq. (23)). grad_var: σ² (eq. (21)). heterogeneity_sq: the base Z_u²
    (eq. (22)); heterogeneity_label_scale: Z_u² += scale · TV_u² (not in the paper, see the
    module docstring). grad_range_sq_per_param: r² with G_u = V r² (the quantiser's squared
    range per element). loss_gap: F(w⁰) − F*. target_sq_grad_norm: ε. max_rounds: the cap
    (the paper's 5000).
    """

    lr: float = 1e-3
    smoothness: float = 1.0
    param_sq_bound: float = 0.5
    grad_var: float = 10.0
    heterogeneity_sq: float = 1.0
    heterogeneity_label_scale: float = 400.0
    grad_range_sq_per_param: float = 0.04
    loss_gap: float = 2.3
    target_sq_grad_norm: float = 2.5
    max_rounds: int = 5000

    def __post_init__(self) -> None:
        for name in ('lr', 'smoothness', 'loss_gap', 'target_sq_grad_norm'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'convergence constants: {name} must be > 0, got {value}')
        for name in ('param_sq_bound', 'grad_var', 'heterogeneity_sq',
                     'heterogeneity_label_scale', 'grad_range_sq_per_param'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f'convergence constants: {name} must be >= 0, got {value}')
        if not self.lr < 1.0 / (16.0 * self.smoothness):
            raise ValueError(f'convergence constants: FedDPQ Theorem 1 needs lr < 1/(16 L) = '
                             f'{1.0 / (16.0 * self.smoothness):.4g}, got lr = {self.lr} with '
                             f'L = {self.smoothness}')
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) \
                or self.max_rounds < 1:
            raise ValueError(f'convergence constants: max_rounds must be an integer >= 1, got '
                             f'{self.max_rounds!r}')

    @property
    def budget(self) -> float:
        """(η/2 − 8Lη²) ε, the denominator of eq. (31) before Ψ is subtracted."""
        eta, lip = self.lr, self.smoothness
        return (eta / 2.0 - 8.0 * lip * eta ** 2) * self.target_sq_grad_norm


def _per_drone(value: ArrayLike, n: int, name: str) -> NDArray[np.float64]:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f'{name} must be a scalar or one value per drone ({n}), got shape '
                         f'{arr.shape}')
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f'{name} must be finite and > 0 for every drone')
    return arr


@dataclass(frozen=True, eq=False)
class FeddpqFleet:
    """What the FedDPQ optimiser needs to know about the fleet (SI units).

    drone_ids: one id per row. class_counts: D_loc,u,c (U x C, real samples per class).
    distance_m, interference_w, cpu_freq_hz: d_u, I_u, f_u (scalars broadcast to all drones).
    num_params: V. batch_size: b (one SGD step per round, eq. (5)). draws_per_round: S.
    overhead_bits: o of eq. (13); None means V + 64 (one sign bit per element and two float32
    range endpoints, digest §1.5). generator_makes_absent_classes: whether the top-up
    generator can make a class a drone has no sample of (True: the paper's diffusion model;
    False: label-preserving augmentation, which makes nothing for such a class, so the plan
    neither charges eqs. (33)-(34) for those samples nor counts them in the label mix).
    The rest are the radio and CPU constants of Table I.
    """

    drone_ids: tuple[int, ...]
    class_counts: NDArray[np.float64]
    distance_m: ArrayLike
    num_params: int
    interference_w: ArrayLike = 1.5e-8
    cpu_freq_hz: ArrayLike = 35e6
    batch_size: int = 32
    draws_per_round: int = 10
    overhead_bits: float | None = None
    bandwidth_hz: float = 1e6
    noise_psd_w_hz: float = THERMAL_NOISE_PSD_W_HZ
    waterfall_threshold: float = CHEN_WATERFALL_THRESHOLD
    energy_coeff: float = FEDDPQ_ENERGY_COEFF
    cpu_exponent: float = 3.0
    train_cycles_per_sample: float = FEDDPQ_TRAIN_CYCLES_PER_SAMPLE
    gen_cycles_per_sample: float = FEDDPQ_GEN_CYCLES_PER_SAMPLE
    generator_makes_absent_classes: bool = True

    def __post_init__(self) -> None:
        ids = tuple(int(d) for d in self.drone_ids)
        if not ids or len(set(ids)) != len(ids):
            raise ValueError('drone_ids must be non-empty and unique')
        counts = np.asarray(self.class_counts, dtype=np.float64)
        if counts.ndim != 2 or counts.shape[0] != len(ids) or counts.shape[1] < 1:
            raise ValueError(f'class_counts must be (drones x classes) = ({len(ids)} x C), got '
                             f'shape {counts.shape}')
        if not (np.all(np.isfinite(counts)) and np.all(counts >= 0)):
            raise ValueError('class_counts must be finite sample counts >= 0')
        empty = [ids[i] for i in np.flatnonzero(counts.sum(axis=1) <= 0)]
        if empty:
            raise ValueError(f'drones {empty} have no samples: FedDPQ eq. (1) tops classes up '
                             f'relative to the largest class, which is 0 for them')
        n = len(ids)
        object.__setattr__(self, 'drone_ids', ids)
        object.__setattr__(self, 'class_counts', counts)
        for name in ('distance_m', 'interference_w', 'cpu_freq_hz'):
            object.__setattr__(self, name, _per_drone(getattr(self, name), n, name))
        for name in ('num_params', 'batch_size', 'draws_per_round'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f'{name} must be an integer >= 1, got {value!r}')
        for name in ('bandwidth_hz', 'waterfall_threshold', 'energy_coeff', 'cpu_exponent',
                     'train_cycles_per_sample', 'gen_cycles_per_sample'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'{name} must be finite and > 0, got {value}')
        if not (math.isfinite(self.noise_psd_w_hz) and self.noise_psd_w_hz >= 0):
            raise ValueError(f'noise_psd_w_hz must be >= 0, got {self.noise_psd_w_hz}')
        if self.overhead_bits is not None and not self.overhead_bits >= 0:
            raise ValueError(f'overhead_bits must be >= 0, got {self.overhead_bits}')

    @property
    def size(self) -> int:
        return len(self.drone_ids)

    @property
    def payload_overhead_bits(self) -> float:
        """o of FedDPQ eq. (13)."""
        return float(self.num_params + 64) if self.overhead_bits is None \
            else float(self.overhead_bits)

    @property
    def noise_plus_interference_w(self) -> NDArray[np.float64]:
        """I_u + B N0 (the denominator of eqs. (14), (16))."""
        return np.asarray(self.interference_w) + self.bandwidth_hz * self.noise_psd_w_hz

    @property
    def mean_gain(self) -> NDArray[np.float64]:
        """E[h_u] = 1 / d_u² (FedDPQ eq. (15), E[ζ] = 1)."""
        return 1.0 / np.asarray(self.distance_m) ** 2

    def mean_snr(self, tx_power_w: ArrayLike) -> NDArray[np.float64]:
        return np.asarray(tx_power_w) * self.mean_gain / self.noise_plus_interference_w

    def packet_error(self, tx_power_w: ArrayLike) -> NDArray[np.float64]:
        """q_u(p_u), FedDPQ eq. (16) with the expectation over Rayleigh fading."""
        return np.asarray(packet_error_prob_rayleigh(self.mean_snr(tx_power_w),
                                                     self.waterfall_threshold), np.float64)

    def power_for(self, q: float) -> NDArray[np.float64]:
        """p_u(q) for every drone (eq. (16) inverted), not clipped."""
        return np.asarray(power_for_packet_error_w(q, self.mean_gain,
                                                   self.noise_plus_interference_w,
                                                   self.waterfall_threshold), np.float64)


@dataclass(frozen=True, eq=False)
class FeddpqKnobs:
    """Per-drone decisions (arrays in ``fleet.drone_ids`` order)."""

    tx_power_w: NDArray[np.float64]
    topup_factor: NDArray[np.float64]
    prune_fraction: NDArray[np.float64]
    bits: NDArray[np.int64]

    @staticmethod
    def uniform(fleet: FeddpqFleet, tx_power_w: float, topup_factor: float,
                prune_fraction: float, bits: int) -> FeddpqKnobs:
        """The same knobs for every drone (a fixed-knob baseline)."""
        n = fleet.size
        return FeddpqKnobs(np.full(n, float(tx_power_w)), np.full(n, float(topup_factor)),
                           np.full(n, float(prune_fraction)), np.full(n, int(bits), np.int64))


@dataclass(frozen=True, eq=False)
class FeddpqPrediction:
    """What the model predicts for one set of knobs.

    energy_j: H of eq. (39) (with S and Ω capped at max_rounds when not reached).
    rounds: Ω of eq. (31) (math.inf when the denominator is <= 0). reached: Ω <= max_rounds.
    """

    energy_j: float
    rounds: float
    reached: bool
    per_round_energy_j: float
    generation_energy_j: float
    error_floor: float
    psi: float
    selection_probs: NDArray[np.float64]
    packet_error: NDArray[np.float64]
    heterogeneity_sq: NDArray[np.float64]


def effective_receivers(q: float, draws: int) -> float:
    """S̄(q) = (1 − q^S) / Σ_{k=1..S} (1/k) C(S,k) (1 − q)^k q^(S−k) (FedDPQ Corollary 1)."""
    if not 0.0 <= q < 1.0:
        raise ValueError(f'q must be in [0, 1), got {q}')
    if q == 0.0:
        return float(draws)
    k = np.arange(1, draws + 1)
    log_binom = np.array([math.lgamma(draws + 1) - math.lgamma(i + 1) - math.lgamma(draws - i + 1)
                          for i in k])
    terms = np.exp(log_binom + k * math.log1p(-q) + (draws - k) * math.log(q)) / k
    return float((1.0 - q ** draws) / terms.sum())


def effective_weights(selection_probs: ArrayLike, packet_error: ArrayLike, draws: int
                      ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(β̄, ᾱ) of FedDPQ Lemma 3 / Theorem 1 in closed form for i.i.d. draws.

    β̄_u = E[Σ α g / Σ α | Σ α ≠ 0] and ᾱ_u = E[Σ α g / (Σ α)² | Σ α ≠ 0] as weights on g_u
    (appendix A.1, B.1): β̄_u = τ_u (1 − q_u) / (1 − q̄), ᾱ_u = β̄_u / S̄(q̄), q̄ = Σ τ_u q_u.
    """
    tau = np.asarray(selection_probs, np.float64)
    q = np.asarray(packet_error, np.float64)
    q_bar = float(tau @ q)
    beta = tau * (1.0 - q) / (1.0 - q_bar)
    return beta, beta / effective_receivers(q_bar, draws)


def _dispersion_coeff(q_max: float, draws: int) -> float:
    """Σ_{k=2..S} q_max^(S−k) C(S,k) / (1 − q_max^S), the q-dispersion weight of eq. (29)."""
    if draws < 2:
        return 0.0
    total = sum(q_max ** (draws - k) * math.comb(draws, k) for k in range(2, draws + 1))
    return total / (1.0 - q_max ** draws)


class FeddpqModel:
    """FedDPQ's energy (eq. (39)) and round count (eq. (31), via Theorem 1) for a fleet."""

    def __init__(self, fleet: FeddpqFleet,
                 constants: ConvergenceConstants | None = None) -> None:
        self.fleet = fleet
        self.constants = constants or ConvergenceConstants()
        counts = fleet.class_counts
        self._loc_total = counts.sum(axis=1)
        self._power_cache: tuple[bytes, NDArray[np.float64], NDArray[np.float64]] | None = None

    # -- FedDPQ eqs. (1)-(3) ---------------------------------------------------------------
    def generated_counts(self, topup_factor: NDArray[np.float64]) -> NDArray[np.float64]:
        """D_gen,u,c = max(⌈Δ_u D'_u⌉ − D_loc,u,c, 0) (FedDPQ eq. (1)): the engine's top-up
        rule itself (fl_uav.learning.topup), so the planner and the drones cannot drift; 0 for
        a class a drone lacks when the generator cannot make absent classes."""
        return topup_counts_per_device(self.fleet.class_counts, topup_factor,
                                       self.fleet.generator_makes_absent_classes)

    def _radio(self, tx_power_w: NDArray[np.float64]
               ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(q_u, R_u) at the given powers, cached on the power vector (eqs. (14), (16))."""
        key = np.asarray(tx_power_w, np.float64).tobytes()
        if self._power_cache is None or self._power_cache[0] != key:
            snr_u = self.fleet.mean_snr(tx_power_w)
            q_u = np.asarray(packet_error_prob_rayleigh(snr_u, self.fleet.waterfall_threshold))
            rate = np.asarray(ergodic_rate_rayleigh_bit_s(self.fleet.bandwidth_hz, snr_u))
            self._power_cache = (key, q_u, rate)
        return self._power_cache[1], self._power_cache[2]

    def predict(self, knobs: FeddpqKnobs) -> FeddpqPrediction:
        """Ω (eq. (31) with Theorem 1's Ψ) and H (eq. (39)) for ``knobs``."""
        f, c = self.fleet, self.constants
        n = f.size
        for name in ('tx_power_w', 'topup_factor', 'prune_fraction', 'bits'):
            if np.shape(getattr(knobs, name)) != (n,):
                raise ValueError(f'knobs.{name} must hold one value per drone ({n})')
        power = np.asarray(knobs.tx_power_w, np.float64)
        if not np.all(power > 0):
            raise ValueError('knobs.tx_power_w must be > 0 for every drone')
        rho = np.asarray(knobs.prune_fraction, np.float64)
        delta = np.asarray(knobs.topup_factor, np.float64)
        bits = np.asarray(knobs.bits, np.float64)
        if not (np.all(rho >= 0) and np.all(rho < 1) and np.all(delta >= 0)
                and np.all(bits >= 1)):
            raise ValueError('knobs: prune_fraction must be in [0, 1), topup_factor >= 0 and '
                             'bits >= 1')
        gen = self.generated_counts(delta)
        mixed = f.class_counts + gen
        total = mixed.sum(axis=1)
        tau = total / total.sum()
        q_u, rate = self._radio(power)

        # Energies: eqs. (33)-(38).
        e_tr = np.asarray(training_energy_j(f.batch_size, f.cpu_freq_hz, rho,
                                            f.train_cycles_per_sample, f.energy_coeff,
                                            f.cpu_exponent))
        payload = np.asarray(feddpq_payload_bits(f.num_params, bits, f.payload_overhead_bits))
        e_cu = power * payload / rate
        e_gen = np.asarray(generation_energy_j(gen.sum(axis=1), f.cpu_freq_hz,
                                               f.gen_cycles_per_sample, f.energy_coeff,
                                               f.cpu_exponent))

        # Heterogeneity Z_u²(Δ) (not in the paper; scale 0 = the paper's constant Z).
        dist = mixed / total[:, None]
        fleet_mix = tau @ dist
        tv = 0.5 * np.abs(dist - fleet_mix).sum(axis=1)
        z_sq = c.heterogeneity_sq + c.heterogeneity_label_scale * tv ** 2

        # Theorem 1 (eq. (29)) with closed-form β̄, ᾱ.
        s = f.draws_per_round
        q_bar = float(tau @ q_u)
        beta, alpha = effective_weights(tau, q_u, s)
        chi_sq = float(np.sum((beta - tau) ** 2 / tau))
        disp = _dispersion_coeff(float(q_u.max()), s) * float(tau @ ((q_u - q_bar) ** 2 * z_sq))
        eta, lip = c.lr, c.smoothness
        grad_range = f.num_params * c.grad_range_sq_per_param
        psi = (eta * chi_sq * float(tau @ z_sq)
               + 8.0 * lip * eta ** 2 * (float(alpha @ z_sq) + disp)
               + 2.0 * lip * eta ** 2 * c.grad_var * float(alpha.sum())
               + eta * lip ** 2 * c.param_sq_bound * (float(beta @ beta) * float(rho.sum())
                                                      + 4.0 * eta * lip * float(beta @ rho))
               + lip * eta ** 2 * float(alpha @ (grad_range / (4.0 * (2.0 ** bits - 1.0) ** 2))))
        den = c.budget - psi
        rounds = math.ceil(c.loss_gap / den) if den > 0 else math.inf
        reached = rounds <= c.max_rounds
        omega = rounds if reached else c.max_rounds
        per_round = float(s * (tau @ (e_tr + e_cu)))
        energy = feddpq_total_energy_j(omega, tau, e_tr, e_cu, e_gen, draws_per_round=s)
        floor = psi / (eta / 2.0 - 8.0 * lip * eta ** 2)
        return FeddpqPrediction(energy_j=energy, rounds=float(rounds), reached=reached,
                                per_round_energy_j=per_round, generation_energy_j=float(
                                    e_gen.sum()), error_floor=floor, psi=psi,
                                selection_probs=tau, packet_error=q_u, heterogeneity_sq=z_sq)

    def objective(self, knobs: FeddpqKnobs) -> float:
        """H, penalised when the target is not reached within max_rounds (optimiser use)."""
        pred = self.predict(knobs)
        if pred.reached:
            return pred.energy_j
        shortfall = pred.psi / self.constants.budget   # >= 1 when the target is unreachable
        return pred.energy_j * (_PENALTY + shortfall)


# -- the packet-error block and its feasibility -------------------------------------------------

@dataclass(frozen=True)
class PacketErrorRange:
    """Where the q block searches and how q maps to powers.

    mode: 'common_q' (FedDPQ eq. (40g) holds: every drone has q_u = q) or 'clipped_q' (the
    fallback: p_u = clip(p_u(q), p_min, p_max), per-drone q_u). reason: why the fallback.
    """

    q_low: float
    q_high: float
    mode: str
    reason: str = ''


def packet_error_range(fleet: FeddpqFleet, bounds: FeddpqBounds, fallback: str = 'clip'
                       ) -> PacketErrorRange:
    """The q interval of FedDPQ P2 under (40e) and (40g), or the documented fallback."""
    require_choice('fallback', fallback, FALLBACKS)
    q_at_max = fleet.packet_error(np.full(fleet.size, bounds.tx_power_max_w))
    q_at_min = fleet.packet_error(np.full(fleet.size, bounds.tx_power_min_w))
    common_low, common_high = float(q_at_max.max()), float(q_at_min.min())
    if common_low <= common_high:
        return PacketErrorRange(common_low, common_high, 'common_q')
    need = fleet.noise_plus_interference_w * np.asarray(fleet.distance_m) ** 2
    far, near = int(np.argmax(need)), int(np.argmin(need))
    ids, d = fleet.drone_ids, np.asarray(fleet.distance_m)
    reason = (f'no common packet-error target q meets p_min <= p_u(q) <= p_max for every drone '
              f'(FedDPQ (40e) with (40g)): p_u(q) is proportional to (I_u + B N0) d_u^2, which '
              f'spans a ratio of {need[far] / need[near]:.1f} across the fleet (drone '
              f'{ids[near]} at {d[near]:.0f} m to drone {ids[far]} at {d[far]:.0f} m), more '
              f'than p_max / p_min = {bounds.tx_power_max_w / bounds.tx_power_min_w:.1f}; '
              f'drone {ids[far]} cannot get below q = {common_low:.4g} even at p_max, drone '
              f'{ids[near]} stays below q = {common_high:.4g} even at p_min')
    if fallback == 'error':
        raise FeddpqInfeasibleError(reason)
    return PacketErrorRange(float(q_at_max.min()), float(q_at_min.max()), 'clipped_q',
                            reason + '; fallback: common target q with per-drone power '
                            'clipped to [p_min, p_max] and per-drone q_u (FedDPQ digest §1.6), '
                            'rounds from Theorem 1 with its chi-square and q-dispersion terms')


def powers_for_target(fleet: FeddpqFleet, bounds: FeddpqBounds, q: float
                      ) -> NDArray[np.float64]:
    """p_u = clip(p_u(q), p_min, p_max); in 'common_q' mode the clip is inactive (rounding)."""
    return np.clip(fleet.power_for(q), bounds.tx_power_min_w, bounds.tx_power_max_w)


# -- the optimiser ------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class FeddpqPlan:
    """The optimiser's answer: per-drone knobs, the prediction, and how it was reached."""

    fleet: FeddpqFleet
    knobs: FeddpqKnobs
    packet_error_target: float
    prediction: FeddpqPrediction
    mode: str
    fallback_reason: str
    history_j: tuple[float, ...] = field(default_factory=tuple)

    def knobs_by_drone(self) -> dict[int, dict]:
        """{drone id: {tx_power_w, topup_factor, prune_fraction, range_bits, ...}}."""
        k, q = self.knobs, self.prediction.packet_error
        return {d: {TX_POWER_KNOB: float(k.tx_power_w[i]),
                    TOPUP_KNOB: float(k.topup_factor[i]),
                    PRUNE_KNOB: float(k.prune_fraction[i]),
                    BITS_KNOB: int(k.bits[i]),
                    Q_TARGET_KNOB: float(self.packet_error_target),
                    Q_KNOB: float(q[i])}
                for i, d in enumerate(self.fleet.drone_ids)}


def _optuna():
    import optuna  # imported on use: optuna pulls in sqlalchemy & co.

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna


def _designs(low: float, high: float, incumbent: NDArray[np.float64],
             share_order: NDArray[np.int64], integer: bool) -> list[NDArray[np.float64]]:
    """The block's initial design: incumbent, low/mid/high corners and top-k-by-share designs."""
    n = incumbent.size
    mid = 0.5 * (low + high)
    designs = [incumbent, np.full(n, low), np.full(n, mid), np.full(n, high)]
    for frac in (0.25, 0.5, 0.75):
        top = share_order[:max(1, int(round(frac * n)))]
        for hi_value, lo_value in ((high, low), (low, high)):
            x = np.full(n, lo_value)
            x[top] = hi_value
            designs.append(x)
    if integer:
        designs = [np.rint(x) for x in designs]
    return designs


def optimise_feddpq(fleet: FeddpqFleet, constants: ConvergenceConstants | None = None,
                    bounds: FeddpqBounds | None = None, *, seed: int = 0,
                    fallback: str = 'clip', max_bcd_rounds: int = 3, q_trials: int = 10,
                    block_trials: int = 40, tolerance: float = 1e-3,
                    q_sampler: str = 'gp') -> FeddpqPlan:
    """FedDPQ Algorithm 2 (BCD over q → Δ → ρ → δ) with Bayesian optimisation per block.

    Deterministic given ``seed``. Raises :class:`FeddpqInfeasibleError` when a common q is
    infeasible and ``fallback='error'``, or when no knobs in the box reach the target ε within
    ``constants.max_rounds`` (the message gives the best error floor found).
    """
    constants = constants or ConvergenceConstants()
    bounds = bounds or FeddpqBounds()
    for name, value in (('max_bcd_rounds', max_bcd_rounds), ('q_trials', q_trials),
                        ('block_trials', block_trials)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f'{name} must be an integer >= 1, got {value!r}')
    require_choice('q_sampler', q_sampler, ('gp', 'tpe'))
    from fl_uav.learning.training import one_torch_thread  # torch: imported on use

    with one_torch_thread():   # optuna's GP sampler runs on torch; the machine is shared
        return _optimise(fleet, constants, bounds, seed, fallback, max_bcd_rounds, q_trials,
                         block_trials, tolerance, q_sampler)


def _optimise(fleet: FeddpqFleet, constants: ConvergenceConstants, bounds: FeddpqBounds,
              seed: int, fallback: str, max_bcd_rounds: int, q_trials: int, block_trials: int,
              tolerance: float, q_sampler: str) -> FeddpqPlan:
    optuna = _optuna()
    model = FeddpqModel(fleet, constants)
    q_range = packet_error_range(fleet, bounds, fallback)
    n = fleet.size

    q = math.sqrt(q_range.q_low * q_range.q_high)
    state = {
        'topup': np.full(n, 0.5 * (bounds.topup_min + bounds.topup_max)),
        'prune': np.full(n, 0.5 * (bounds.prune_min + bounds.prune_max)),
        'bits': np.full(n, float((bounds.bits_min + bounds.bits_max) // 2)),
    }

    def knobs_for(q_value: float, topup: NDArray, prune: NDArray, bits: NDArray) -> FeddpqKnobs:
        return FeddpqKnobs(powers_for_target(fleet, bounds, q_value), np.asarray(topup, float),
                           np.asarray(prune, float), np.rint(bits).astype(np.int64))

    def value(q_value: float, **over: NDArray) -> float:
        s = {**state, **over}
        return model.objective(knobs_for(q_value, s['topup'], s['prune'], s['bits']))

    def share_order() -> NDArray[np.int64]:
        pred = model.predict(knobs_for(q, state['topup'], state['prune'], state['bits']))
        e_tr = np.asarray(training_energy_j(fleet.batch_size, fleet.cpu_freq_hz, 0.0,
                                            fleet.train_cycles_per_sample, fleet.energy_coeff,
                                            fleet.cpu_exponent))
        return np.argsort(-(pred.selection_probs * e_tr), kind='stable')

    def run_q_block(block_seed: int) -> float:
        if q_range.q_high <= q_range.q_low:
            return q_range.q_low
        sampler = (optuna.samplers.GPSampler(seed=block_seed)
                   if q_sampler == 'gp' else optuna.samplers.TPESampler(seed=block_seed))
        study = optuna.create_study(sampler=sampler)
        for start in (q, q_range.q_low, q_range.q_high):
            study.enqueue_trial({'q': float(start)}, skip_if_exists=True)
        study.optimize(lambda t: value(t.suggest_float('q', q_range.q_low, q_range.q_high,
                                                       log=True)),
                       n_trials=q_trials + 3)
        return float(study.best_params['q'])

    def run_vector_block(key: str, low: float, high: float, integer: bool,
                         block_seed: int) -> NDArray[np.float64]:
        if high <= low:
            return np.full(n, float(low))
        names = [f'x{i}' for i in range(n)]
        sampler = optuna.samplers.TPESampler(seed=block_seed, multivariate=True,
                                             n_startup_trials=0)
        study = optuna.create_study(sampler=sampler)
        for design in _designs(low, high, state[key], share_order(), integer):
            params = {nm: (int(v) if integer else float(v)) for nm, v in zip(names, design)}
            study.enqueue_trial(params, skip_if_exists=True)

        def objective(trial) -> float:
            if integer:
                x = np.array([trial.suggest_int(nm, int(low), int(high)) for nm in names], float)
            else:
                x = np.array([trial.suggest_float(nm, low, high) for nm in names])
            return value(q, **{key: x})

        study.optimize(objective, n_trials=block_trials)
        best = study.best_params
        return np.array([best[nm] for nm in names], float)

    history = [value(q)]
    for r in range(max_bcd_rounds):
        q = run_q_block(_block_seed(seed, r, 1))
        state['topup'] = run_vector_block('topup', bounds.topup_min, bounds.topup_max, False,
                                          _block_seed(seed, r, 2))
        state['prune'] = run_vector_block('prune', bounds.prune_min, bounds.prune_max, False,
                                          _block_seed(seed, r, 3))
        state['bits'] = run_vector_block('bits', bounds.bits_min, bounds.bits_max, True,
                                         _block_seed(seed, r, 4))
        history.append(value(q))
        if abs(history[-1] - history[-2]) <= tolerance * abs(history[-2]):
            break

    knobs = knobs_for(q, state['topup'], state['prune'], state['bits'])
    prediction = model.predict(knobs)
    if not prediction.reached:
        limit = ('never (the denominator of eq. (31) is <= 0)' if math.isinf(prediction.rounds)
                 else f'only after {prediction.rounds:.0f} rounds')
        raise FeddpqInfeasibleError(
            f'target epsilon = {constants.target_sq_grad_norm} is not reachable within '
            f'max_rounds = {constants.max_rounds}: the best knobs found reach it {limit}; their '
            f'error floor Psi/(eta/2 - 8 L eta^2) = {prediction.error_floor:.4g} (FedDPQ eq. '
            f'(31)); raise epsilon or max_rounds, or narrow the pruning box')
    return FeddpqPlan(fleet=fleet, knobs=knobs, packet_error_target=float(q),
                      prediction=prediction, mode=q_range.mode,
                      fallback_reason=q_range.reason, history_j=tuple(history))


def _block_seed(seed: int, bcd_round: int, block: int) -> int:
    """The optuna sampler seed of one block (1 = q, 2-4 = top-up, pruning, bits) of one
    block-coordinate round: seed * 1000 + 10 * round + block, wrapped into optuna's
    [0, 2**32) so any world.seed works (unchanged for every seed below 4,294,967)."""
    return (seed * 1000 + 10 * bcd_round + block) % OPTUNA_SEED_MODULUS


def fixed_plan(fleet: FeddpqFleet, knobs: FeddpqKnobs,
               constants: ConvergenceConstants | None = None) -> FeddpqPrediction:
    """The prediction for fixed knobs (a baseline), by the same model as the optimiser."""
    return FeddpqModel(fleet, constants).predict(knobs)


def knobs_from_mapping(fleet: FeddpqFleet, by_drone: Mapping[int, Mapping[str, float]]
                       ) -> FeddpqKnobs:
    """Inverse of :meth:`FeddpqPlan.knobs_by_drone` (every drone must be present)."""
    missing = [d for d in fleet.drone_ids if d not in by_drone]
    if missing:
        raise ValueError(f'knobs missing for drones {missing}')
    rows: Sequence[Mapping[str, float]] = [by_drone[d] for d in fleet.drone_ids]
    return FeddpqKnobs(np.array([r[TX_POWER_KNOB] for r in rows], float),
                       np.array([r[TOPUP_KNOB] for r in rows], float),
                       np.array([r[PRUNE_KNOB] for r in rows], float),
                       np.array([r[BITS_KNOB] for r in rows], np.int64))
