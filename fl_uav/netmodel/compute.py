"""On-board computation time and energy: FedDPQ's CPU model and 2CEOAFL's relative cost.

======================================  ====================================================
function                                equation
======================================  ====================================================
``cpu_power_w``                         FedDPQ eqs. (33), (35): the factor varrho f^gamma
``compute_time_s``                      FedDPQ eqs. (34), (36): n c0 (1 - rho) / f
``compute_energy_j``                    FedDPQ eqs. (33), (35): varrho f^gamma T
``training_time_s``                     FedDPQ eq. (36): T_tr = b c0_tr (1 - rho) / f
``training_energy_j``                   FedDPQ eq. (35): E_tr = varrho f^gamma T_tr
``generation_time_s``                   FedDPQ eq. (34): T_gen = D_gen c0_gen / f
``generation_energy_j``                 FedDPQ eq. (33): E_gen = varrho f^gamma T_gen
``feddpq_total_energy_j``               FedDPQ eq. (39): Omega sum tau (E_tr + E_cu) + sum E_gen
``round_latency_s``                     FedDPQ Sec. IV (no equation; digest Sec. 1.8 [GAP])
``two_ceoafl_local_cost``               2CEOAFL Sec. IV-B: rho c + kappa c (1 - delta)
``CpuDevice``                           FedDPQ eqs. (33)-(36) bound to one device (Table I)
======================================  ====================================================

Ambiguities resolved here:

* FedDPQ's cycle counts are per sample; one round is one SGD step on one mini-batch of b samples
  (eq. (5), (36)). b is not given by the paper; it is a required argument.
* Pruning scales compute by (1 - rho) (eq. (36)), i.e. the model assumes the sparse kernel
  really skips pruned weights. Quantization does not change compute in FedDPQ; it only shrinks
  the upload (eq. (13), see ``payload.feddpq_payload_bits``). Generation is not pruned.
* Eq. (39) weights per-device energy by the selection probability tau_u but has no factor for
  the S draws per round. ``feddpq_total_energy_j`` follows the paper (``draws_per_round=1``)
  and lets the caller pass S for the expected energy of S draws.
* FedDPQ's f_u ~ U[20, 50] MHz (Table I); ``CpuDevice`` defaults to the midpoint 35 MHz.
  These MHz clocks are a simulation artefact (digest Sec. 1.7): recalibrate for a real SoC
  (set ``energy_coeff`` / ``train_cycles_per_sample`` from measured J and s per sample).
* FedDPQ has no latency formula. ``round_latency_s`` is the natural synchronous one,
  max over participants of (T_tr + T_cu) (digest Sec. 1.8).
* 2CEOAFL gives only relative costs: a dense SGD step costs ``step_cost`` (time or energy),
  a masked step (1 - delta) of it. ``two_ceoafl_local_cost`` covers all four table rows:
  AFL/AFL-Quant (dense_steps=0, pruning_ratio=0) and 2CEOAFL/AFL-Prune. The paper gives no
  value for rho (dense mask-finding steps), so it has no default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fl_uav.netmodel._checks import (
    FloatOrArray,
    as_float_array,
    check_field_positive,
    check_non_negative,
    check_positive,
    check_unit_interval,
    out,
)

# FedDPQ Table I.
FEDDPQ_ENERGY_COEFF = 1.25e-26  # varrho
FEDDPQ_CPU_EXPONENT = 3.0  # gamma
FEDDPQ_TRAIN_CYCLES_PER_SAMPLE = 2.7e8  # c0_tr
FEDDPQ_GEN_CYCLES_PER_SAMPLE = 2.2e8  # c0_gen
FEDDPQ_CPU_FREQ_RANGE_HZ = (20e6, 50e6)  # f_u ~ U[20, 50] MHz
FEDDPQ_PRUNING_RATIO_RANGE = (0.1, 0.3)  # rho_min, rho_max

# 2CEOAFL Sec. V: kappa = 5 masked local steps per round.
TWO_CEOAFL_MASKED_STEPS = 5


def cpu_power_w(cpu_freq_hz: ArrayLike, energy_coeff: float = FEDDPQ_ENERGY_COEFF,
                exponent: float = FEDDPQ_CPU_EXPONENT) -> FloatOrArray:
    """CPU power varrho f^gamma (the factor in FedDPQ eqs. (33) and (35))."""
    f = check_positive(cpu_freq_hz, 'cpu_freq_hz')
    k = float(check_positive(energy_coeff, 'energy_coeff'))
    g = float(check_positive(exponent, 'exponent'))
    return out(k * f ** g)


def compute_time_s(num_samples: ArrayLike, cycles_per_sample: ArrayLike,
                   cpu_freq_hz: ArrayLike, pruning_ratio: ArrayLike = 0.0) -> FloatOrArray:
    """n c0 (1 - rho) / f: FedDPQ eq. (36) (training) and, with rho = 0, eq. (34) (generation)."""
    n = check_non_negative(num_samples, 'num_samples')
    c0 = check_positive(cycles_per_sample, 'cycles_per_sample')
    f = check_positive(cpu_freq_hz, 'cpu_freq_hz')
    rho = check_unit_interval(pruning_ratio, 'pruning_ratio', closed_high=True)
    return out(n * c0 * (1.0 - rho) / f)


def compute_energy_j(num_samples: ArrayLike, cycles_per_sample: ArrayLike,
                     cpu_freq_hz: ArrayLike, pruning_ratio: ArrayLike = 0.0,
                     energy_coeff: float = FEDDPQ_ENERGY_COEFF,
                     exponent: float = FEDDPQ_CPU_EXPONENT) -> FloatOrArray:
    """varrho f^gamma T = varrho f^(gamma-1) n c0 (1 - rho): FedDPQ eqs. (33), (35)."""
    t = as_float_array(compute_time_s(num_samples, cycles_per_sample, cpu_freq_hz,
                                      pruning_ratio), 'num_samples')
    return out(as_float_array(cpu_power_w(cpu_freq_hz, energy_coeff, exponent), 'cpu_freq_hz')
               * t)


def training_time_s(batch_size: ArrayLike, cpu_freq_hz: ArrayLike, pruning_ratio: ArrayLike = 0.0,
                    cycles_per_sample: ArrayLike = FEDDPQ_TRAIN_CYCLES_PER_SAMPLE
                    ) -> FloatOrArray:
    """FedDPQ eq. (36): T_u,tr = b c0_tr (1 - rho_u) / f_u, one SGD step on b samples."""
    return compute_time_s(batch_size, cycles_per_sample, cpu_freq_hz, pruning_ratio)


def training_energy_j(batch_size: ArrayLike, cpu_freq_hz: ArrayLike,
                      pruning_ratio: ArrayLike = 0.0,
                      cycles_per_sample: ArrayLike = FEDDPQ_TRAIN_CYCLES_PER_SAMPLE,
                      energy_coeff: float = FEDDPQ_ENERGY_COEFF,
                      exponent: float = FEDDPQ_CPU_EXPONENT) -> FloatOrArray:
    """FedDPQ eq. (35): E_u,tr = varrho f_u^gamma T_u,tr."""
    return compute_energy_j(batch_size, cycles_per_sample, cpu_freq_hz, pruning_ratio,
                            energy_coeff, exponent)


def generation_time_s(num_generated: ArrayLike, cpu_freq_hz: ArrayLike,
                      cycles_per_sample: ArrayLike = FEDDPQ_GEN_CYCLES_PER_SAMPLE
                      ) -> FloatOrArray:
    """FedDPQ eq. (34): T_u,gen = D_u^gen c0_gen / f_u (paid once, before training)."""
    return compute_time_s(num_generated, cycles_per_sample, cpu_freq_hz)


def generation_energy_j(num_generated: ArrayLike, cpu_freq_hz: ArrayLike,
                        cycles_per_sample: ArrayLike = FEDDPQ_GEN_CYCLES_PER_SAMPLE,
                        energy_coeff: float = FEDDPQ_ENERGY_COEFF,
                        exponent: float = FEDDPQ_CPU_EXPONENT) -> FloatOrArray:
    """FedDPQ eq. (33): E_u,gen = varrho f_u^gamma T_u,gen."""
    return compute_energy_j(num_generated, cycles_per_sample, cpu_freq_hz, 0.0,
                            energy_coeff, exponent)


def feddpq_total_energy_j(num_rounds: float, selection_probs: ArrayLike,
                          train_energy_j: ArrayLike, upload_energy_j: ArrayLike,
                          generation_energy_j: ArrayLike = 0.0,
                          draws_per_round: int = 1) -> float:
    """FedDPQ eq. (39): H = Omega sum_u tau_u (E_u,tr + E_u,cu) + sum_u E_u,gen.

    ``draws_per_round`` (S) multiplies the per-round term; the paper prints S = 1 (see the
    module docstring). ``selection_probs`` (tau) must sum to 1. Failed uploads still cost
    energy, as in the paper.
    """
    omega = float(check_non_negative(num_rounds, 'num_rounds'))
    if isinstance(draws_per_round, bool) or not isinstance(draws_per_round, int | np.integer) \
            or draws_per_round < 1:
        raise ValueError(f'draws_per_round must be an integer >= 1, got {draws_per_round!r}')
    tau = check_unit_interval(selection_probs, 'selection_probs', closed_high=True)
    if tau.ndim != 1 or tau.size == 0 or not np.isclose(tau.sum(), 1.0, rtol=0, atol=1e-9):
        raise ValueError('selection_probs must be a non-empty 1-D array summing to 1')
    e_tr = check_non_negative(train_energy_j, 'train_energy_j')
    e_cu = check_non_negative(upload_energy_j, 'upload_energy_j')
    e_gen = check_non_negative(generation_energy_j, 'generation_energy_j')
    try:
        per_round = np.broadcast_to(e_tr + e_cu, tau.shape)
        gen = np.broadcast_to(e_gen, tau.shape)
    except ValueError as exc:
        raise ValueError('train_energy_j, upload_energy_j and generation_energy_j must be '
                         'scalars or match selection_probs in length') from exc
    return float(omega * draws_per_round * np.dot(tau, per_round) + gen.sum())


def round_latency_s(train_time_s: ArrayLike, upload_time_s: ArrayLike) -> float:
    """Synchronous round time max_u (T_u,tr + T_u,cu) over the round's participants.

    FedDPQ has no latency equation (digest Sec. 1.8 [GAP]); this is its natural reading.
    """
    t = check_non_negative(train_time_s, 'train_time_s') \
        + check_non_negative(upload_time_s, 'upload_time_s')
    if t.size == 0:
        raise ValueError('train_time_s must hold at least one participant')
    return float(np.max(t))


def two_ceoafl_local_cost(step_cost: ArrayLike, pruning_ratio: ArrayLike, dense_steps: int,
                          masked_steps: int = TWO_CEOAFL_MASKED_STEPS) -> FloatOrArray:
    """2CEOAFL Sec. IV-B: local cost rho c + kappa c (1 - delta) of one round.

    ``step_cost`` c is the time (s) or energy (J) of one dense SGD step; ``dense_steps`` rho are
    the dense steps that find the mask, ``masked_steps`` kappa the masked steps (paper: 5), and
    ``pruning_ratio`` delta the pruned fraction. AFL / AFL-Quant: dense_steps=0, delta=0.
    Pruning saves compute only if rho < kappa delta (2CEOAFL digest Sec. 1.8).
    """
    c = check_non_negative(step_cost, 'step_cost')
    delta = check_unit_interval(pruning_ratio, 'pruning_ratio', closed_high=True)
    for name, value in (('dense_steps', dense_steps), ('masked_steps', masked_steps)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f'{name} must be an integer >= 0, got {value!r}')
    return out(dense_steps * c + masked_steps * c * (1.0 - delta))


@dataclass(frozen=True)
class CpuDevice:
    """FedDPQ's CPU device (eqs. (33)-(36)); defaults from its Table I.

    cpu_freq_hz: f_u (Table I: U[20, 50] MHz; default the midpoint 35 MHz).
    energy_coeff: varrho (1.25e-26). exponent: gamma (3).
    train_cycles_per_sample: c0_tr (2.7e8). gen_cycles_per_sample: c0_gen (2.2e8).
    """

    cpu_freq_hz: float = 35e6
    energy_coeff: float = FEDDPQ_ENERGY_COEFF
    exponent: float = FEDDPQ_CPU_EXPONENT
    train_cycles_per_sample: float = FEDDPQ_TRAIN_CYCLES_PER_SAMPLE
    gen_cycles_per_sample: float = FEDDPQ_GEN_CYCLES_PER_SAMPLE

    def __post_init__(self) -> None:
        for name in ('cpu_freq_hz', 'energy_coeff', 'exponent', 'train_cycles_per_sample',
                     'gen_cycles_per_sample'):
            check_field_positive(self, name)

    @property
    def power_w(self) -> float:
        """varrho f^gamma."""
        return self.energy_coeff * self.cpu_freq_hz ** self.exponent

    def train_time_s(self, batch_size: ArrayLike, pruning_ratio: ArrayLike = 0.0
                     ) -> FloatOrArray:
        """Eq. (36)."""
        return training_time_s(batch_size, self.cpu_freq_hz, pruning_ratio,
                               self.train_cycles_per_sample)

    def train_energy_j(self, batch_size: ArrayLike, pruning_ratio: ArrayLike = 0.0
                       ) -> FloatOrArray:
        """Eq. (35)."""
        return training_energy_j(batch_size, self.cpu_freq_hz, pruning_ratio,
                                 self.train_cycles_per_sample, self.energy_coeff, self.exponent)

    def gen_time_s(self, num_generated: ArrayLike) -> FloatOrArray:
        """Eq. (34)."""
        return generation_time_s(num_generated, self.cpu_freq_hz, self.gen_cycles_per_sample)

    def gen_energy_j(self, num_generated: ArrayLike) -> FloatOrArray:
        """Eq. (33)."""
        return generation_energy_j(num_generated, self.cpu_freq_hz, self.gen_cycles_per_sample,
                                   self.energy_coeff, self.exponent)
