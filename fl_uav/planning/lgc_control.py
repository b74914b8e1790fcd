"""LGC's per-drone resource controller: DDPG over local steps and entries per channel (LGC §3).

Paper: Du, Feng, Xiang, Liu, "Toward Efficient Federated Learning in Multi-Channeled Mobile
Edge Network with Layered Gradient Compression" (LGC, arXiv 2109.08819; digest 002). Each drone
m runs its own agent that, every round t, picks the number of local SGD steps H_m^(t) and the
number of gradient entries D_{m,n}^(t) sent on each of its N channels (LGC eq. (13)), so as to
minimise the loss under per-drone resource budgets (LGC eqs. (9)-(10)).

What is implemented, and the choices where the paper is silent ([NOT IN PAPER] in the digest):

* **State** (LGC eqs. (11)-(12)): the consumption factors of the round for R = 2 resources,
  energy (J) and time (s): per local step E_comp,r and per entry and channel E_comm,r,n, each
  divided by its mean so the network sees O(1) numbers (the paper does not say whether the
  state is normalised). Dimension 2 (1 + N).
* **Action** (LGC eq. (13)): a ∈ [−1, 1]^(1+N) from a tanh actor, decoded as the digest
  suggests: H = 1 + round((a₀+1)/2 · (H_max − 1)), D_n = round((a_n+1)/2 · D_n^max), then
  scaled down so Σ D_n ≤ D_cap (eq. (10b)); H ≤ H_max is (10c).
* **Costs** (LGC eq. (15b), one summand of eq. (10a)): energy = H E_step (FedDPQ eq. (35),
  ``netmodel.compute``) + Σ_n D_n · 8 B · price_n (LGC Table 1 J/MB,
  ``netmodel.payload.lgc_comm_energy_j``) + hover power × round time (FedEx eq. (8),
  ``netmodel.flight``: a drone hovers while it trains and uploads); time = H T_step + max_n
  D_n · 64 bit / R_n(t) + model download (layers go out in parallel, one per channel). The
  rates R_n(t) are Rayleigh draws of each channel's link (FedDPQ eq. (14),
  ``netmodel.radio.RadioLink``), so channels differ in rate and price and the time factors
  change every round. LGC has no rate model at all.
* **Learning progress** (the loss the reward needs; LGC has no model of it): a surrogate in
  which the round shrinks the loss gap by the fraction
  κ (1 − e^(−H/h₀)) (1 − e^(−K/k₀)), K = Σ_n D_n: more local steps and more entries help with
  diminishing returns, as LGC Theorem 1 / Corollary 1 have H and the kept fraction γ ≈ K/D
  only in higher-order terms. In the engine, h₀ may come from measurement instead of a
  constant: :func:`fit_steps_scale` fits ℓ(h) = c − A (1 − e^(−h/h₀)) to the per-step
  mini-batch training losses the drones record within a round (fl_uav.planning.round_resources,
  ``resources.lgc_steps_scale: auto``). The fit's upper bound is LINEAR_STEPS_FACTOR · H_max:
  beyond it the surrogate is linear in H over 1..H_max to within 1/(2 · factor), so a larger
  h₀ only rescales every action's reward and leaves the controller's ranking of H unchanged.
* **Reward** (LGC eqs. (14)-(16)): U_r = δ / ϵ_r, loss change per unit resource. The paper's
  ratio U^(t+1)/U^(t) is sign-ambiguous and explodes on plateaus (digest §8); the digest's
  guard is used instead: r = Σ_r α_r · progress / (ϵ_r / ϵ_r^ref), progress = the fraction of
  the loss gap closed (≥ 0, so learning is rewarded), ϵ_r^ref the cost of the mid action at
  mean rates. Maximising progress per unit resource each round is what minimises the
  resource spent to reach a target loss when progress is a fraction of the gap.
* **DDPG** (LGC eqs. (17)-(18), Lillicrap et al. as the digest lists): actor and critic are
  two-hidden-layer ReLU MLPs (64 units; the critic takes the action at its input), Adam,
  critic loss (y − Q(s, a))² with y from the target networks (eq. (18)), actor ascends
  Q(s, π(s)), soft target updates τ, replay buffer, Ornstein–Uhlenbeck exploration noise that
  decays linearly to zero, and uniform random actions for a warm-up. The defaults are smaller
  and faster than Lillicrap's (γ = 0.9, lr 1e-3, τ = 0.01), because a drone sees one transition
  per round (digest §3.3 warns the reference defaults learn very slowly). torch runs on one
  thread while training.
* **Baselines.** LGC compares against FedAvg and "LGC without DRL": fixed local steps and the
  same allocation every round (:class:`FixedPolicy`). The paper has no heuristic controller;
  :class:`GreedyChannelPolicy` is ours: fixed H and total K, entries filled into the channels
  in increasing order of their current α-weighted normalised cost per entry, each up to its
  cap (cheapest link first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from fl_uav.learning.training import one_torch_thread
from fl_uav.netmodel.compute import CpuDevice
from fl_uav.netmodel.flight import FEDEX_HOVER_POWER_W
from fl_uav.netmodel.payload import (
    BYTES_PER_MB,
    LGC_BYTES_PER_ENTRY,
    LGC_CHANNEL_ENERGY_J_PER_MB,
    lgc_comm_energy_j,
)
from fl_uav.netmodel.radio import RadioLink
from fl_uav.streams import Stream, stream_seed

# Knob names in the per-drone dict (the keys the client side reads, see fl_uav.planning).
LOCAL_STEPS_KNOB = 'local_steps'
ENTRIES_KNOB = 'lgc_channel_entries'

RESOURCES = ('energy', 'time')


@dataclass(frozen=True)
class LgcChannel:
    """One uplink channel of a drone: its LGC Table 1 price and its radio link.

    energy_j_per_mb: LGC Table 1 mean (3G 1296, 4G 2851.2, 5G 7128 J/MB).
    max_entries: D_n^max, the most entries the channel carries in one round.
    link: the channel's FedDPQ-style radio link (rate from eq. (14) with Rayleigh fading).
    distance_m: the drone's distance to that channel's base station.
    """

    name: str
    energy_j_per_mb: float
    max_entries: int
    link: RadioLink = field(default_factory=RadioLink)
    distance_m: float = 200.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.energy_j_per_mb) and self.energy_j_per_mb >= 0):
            raise ValueError(f'channel {self.name!r}: energy_j_per_mb must be >= 0, got '
                             f'{self.energy_j_per_mb}')
        if isinstance(self.max_entries, bool) or not isinstance(self.max_entries, int) \
                or self.max_entries < 1:
            raise ValueError(f'channel {self.name!r}: max_entries must be an integer >= 1, got '
                             f'{self.max_entries!r}')
        if not (math.isfinite(self.distance_m) and self.distance_m > 0):
            raise ValueError(f'channel {self.name!r}: distance_m must be > 0, got '
                             f'{self.distance_m}')


def table1_channels(max_entries: int, distance_m: float = 200.0) -> tuple[LgcChannel, ...]:
    """LGC's three channels (3G, 4G, 5G; Table 1 prices) with rising bandwidth (1, 5, 20 MHz).

    The bandwidths are ours (LGC gives no rates): dearer channels are faster, so the
    controller trades energy against time.
    """
    return tuple(LgcChannel(name, LGC_CHANNEL_ENERGY_J_PER_MB[name], max_entries,
                            RadioLink(bandwidth_hz=bw), distance_m)
                 for name, bw in (('3g', 1e6), ('4g', 5e6), ('5g', 20e6)))


@dataclass(frozen=True)
class LgcEnvConfig:
    """One drone's LGC round: its model, channels, CPU, hover power, progress model, reward.

    model_dim: D (default LGC's CNN on MNIST with 10 outputs, 1,199,882 parameters).
    max_total_entries: the per-round cap of eq. (10b) (None = model_dim).
    max_local_steps: H of eq. (10c). batch_size: b (LGC: 64). cpu: FedDPQ's CPU model.
    hover_power_w: power drawn while the drone waits on the round (FedEx 20 W; 0 = none).
    download_s: time to receive the dense global model each round.
    progress_rate, steps_scale, entries_scale: κ, h₀ (steps), k₀ (entries) of the surrogate.
    steps_exponent: β; when set, the H-factor of the progress is (H / H_max)^β instead of
    (1 − e^(−H/h₀)) (fitted to measured curves by :func:`fit_steps_exponent`).
    initial_loss, min_loss, target_loss: the loss gap the episode closes.
    weights: α_energy, α_time of eq. (16). max_rounds: episode length cap.
    """

    channels: tuple[LgcChannel, ...] = field(default_factory=lambda: table1_channels(60_000))
    model_dim: int = 1_199_882
    max_total_entries: int | None = None
    max_local_steps: int = 10
    batch_size: int = 64
    cpu: CpuDevice = field(default_factory=lambda: CpuDevice(cpu_freq_hz=1.5e9))
    hover_power_w: float = FEDEX_HOVER_POWER_W
    download_s: float = 1.0
    progress_rate: float = 0.08
    steps_scale: float = 3.0
    steps_exponent: float | None = None
    entries_scale: float = 24_000.0
    initial_loss: float = 2.3
    min_loss: float = 0.1
    target_loss: float = 0.3
    weights: tuple[float, float] = (1.0, 0.1)
    max_rounds: int = 400

    def __post_init__(self) -> None:
        if not self.channels:
            raise ValueError('channels: a drone needs at least one channel')
        for name in ('model_dim', 'max_local_steps', 'batch_size', 'max_rounds'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'{name} must be an integer >= 1, got {value!r}')
        if self.max_total_entries is not None and not 1 <= self.max_total_entries \
                <= self.model_dim:
            raise ValueError(f'max_total_entries must be in [1, model_dim = {self.model_dim}], '
                             f'got {self.max_total_entries}')
        for name in ('progress_rate', 'steps_scale', 'entries_scale'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'{name} must be > 0, got {value}')
        if self.steps_exponent is not None and not (math.isfinite(self.steps_exponent)
                                                    and self.steps_exponent > 0):
            raise ValueError(f'steps_exponent must be > 0 or None, got {self.steps_exponent}')
        if not self.progress_rate < 1:
            raise ValueError(f'progress_rate must be < 1, got {self.progress_rate}')
        if not (self.hover_power_w >= 0 and self.download_s >= 0):
            raise ValueError('hover_power_w and download_s must be >= 0')
        if not self.initial_loss > self.target_loss > self.min_loss:
            raise ValueError(f'need initial_loss > target_loss > min_loss, got '
                             f'{self.initial_loss}, {self.target_loss}, {self.min_loss}')
        if len(self.weights) != len(RESOURCES) or any(not w >= 0 for w in self.weights) \
                or sum(self.weights) <= 0:
            raise ValueError(f'weights must be one value >= 0 per resource {RESOURCES} with a '
                             f'positive sum, got {self.weights}')

    @property
    def num_channels(self) -> int:
        return len(self.channels)

    @property
    def entry_cap(self) -> int:
        return self.model_dim if self.max_total_entries is None else self.max_total_entries

    @property
    def state_dim(self) -> int:
        return 2 * (1 + self.num_channels)

    @property
    def action_dim(self) -> int:
        return 1 + self.num_channels


@dataclass(frozen=True)
class LgcDecision:
    """One round's decision: H and D_n (LGC eq. (13))."""

    local_steps: int
    entries_per_channel: tuple[int, ...]

    @property
    def total_entries(self) -> int:
        return int(sum(self.entries_per_channel))

    def knobs(self) -> dict:
        return {LOCAL_STEPS_KNOB: int(self.local_steps),
                ENTRIES_KNOB: [int(k) for k in self.entries_per_channel]}


def decode_action(action: Sequence[float], config: LgcEnvConfig) -> LgcDecision:
    """a ∈ [−1, 1]^(1+N) → (H, D_n) with (10b) Σ D_n ≤ D_cap and (10c) 1 ≤ H ≤ H_max."""
    a = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
    if a.shape != (config.action_dim,) or not np.all(np.isfinite(a)):
        raise ValueError(f'action must hold {config.action_dim} finite numbers, got {action!r}')
    steps = 1 + int(round((a[0] + 1.0) / 2.0 * (config.max_local_steps - 1)))
    caps = np.array([c.max_entries for c in config.channels], np.float64)
    entries = np.rint((a[1:] + 1.0) / 2.0 * caps)
    total = entries.sum()
    if total > config.entry_cap:
        entries = np.floor(entries * config.entry_cap / total)
    return LgcDecision(steps, tuple(int(k) for k in entries))


def encode_decision(decision: LgcDecision, config: LgcEnvConfig) -> NDArray[np.float64]:
    """The action whose decoding is ``decision`` (inverse of :func:`decode_action`)."""
    a0 = 2.0 * (decision.local_steps - 1) / max(1, config.max_local_steps - 1) - 1.0
    caps = np.array([c.max_entries for c in config.channels], np.float64)
    rest = 2.0 * np.asarray(decision.entries_per_channel, np.float64) / caps - 1.0
    return np.clip(np.concatenate([[a0], rest]), -1.0, 1.0)


@dataclass(frozen=True)
class RoundCost:
    """What one round spent (LGC eq. (15b) per resource) and what it achieved."""

    energy_j: float
    time_s: float
    progress: float


class LgcEnv:
    """One drone's simulated LGC rounds (see the module docstring for the model)."""

    def __init__(self, config: LgcEnvConfig, seed: int = 0) -> None:
        self.config = config
        self.rng = np.random.default_rng(seed)
        c = config
        self.step_energy_j = float(c.cpu.train_energy_j(c.batch_size))   # FedDPQ eq. (35)
        self.step_time_s = float(c.cpu.train_time_s(c.batch_size))       # FedDPQ eq. (36)
        self.entry_bits = 8 * LGC_BYTES_PER_ENTRY
        self.prices_j_per_entry = np.array([ch.energy_j_per_mb for ch in c.channels]) \
            * LGC_BYTES_PER_ENTRY / BYTES_PER_MB
        self.mean_rate_bit_s = np.array([float(ch.link.rate_bit_s(ch.distance_m))
                                         for ch in c.channels])
        self.mean_factors = self._factors(self.mean_rate_bit_s)
        mid = decode_action(np.zeros(c.action_dim), c)
        ref = self.round_cost(mid, self.mean_rate_bit_s)
        self.reference_cost = np.array([ref.energy_j, ref.time_s])
        self.loss = c.initial_loss
        self.rates = self.mean_rate_bit_s
        self.round_index = 0

    # -- the model --------------------------------------------------------------------------
    def _factors(self, rates: NDArray[np.float64]) -> NDArray[np.float64]:
        """(E_comp,energy, E_comm,energy,n…, E_comp,time, E_comm,time,n…): LGC eq. (12)."""
        hover = self.config.hover_power_w
        comm_time = self.entry_bits / rates
        return np.concatenate([[self.step_energy_j + hover * self.step_time_s],
                               self.prices_j_per_entry + hover * comm_time,
                               [self.step_time_s], comm_time])

    def state(self) -> NDArray[np.float32]:
        """LGC eq. (11), each factor divided by its mean-rate value."""
        return (self._factors(self.rates) / self.mean_factors).astype(np.float32)

    def progress(self, decision: LgcDecision) -> float:
        """The fraction of the loss gap one round closes (surrogate; module docstring)."""
        c = self.config
        return c.progress_rate * self.steps_factor(decision.local_steps) \
            * (1.0 - math.exp(-decision.total_entries / c.entries_scale))

    def steps_factor(self, local_steps: int) -> float:
        """The H-factor of the progress: (1 − e^(−H/h₀)), or (H / H_max)^β when β is set."""
        c = self.config
        if c.steps_exponent is not None:
            return (local_steps / c.max_local_steps) ** c.steps_exponent
        return 1.0 - math.exp(-local_steps / c.steps_scale)

    def round_cost(self, decision: LgcDecision, rates: NDArray[np.float64]) -> RoundCost:
        """Energy and time of one round (LGC eq. (15b) with the per-channel costs)."""
        c = self.config
        d = np.asarray(decision.entries_per_channel, np.float64)
        comm_s = float(np.max(d * self.entry_bits / rates)) if d.size else 0.0
        time_s = decision.local_steps * self.step_time_s + comm_s + c.download_s
        energy_j = (decision.local_steps * self.step_energy_j
                    + lgc_comm_energy_j(d, [ch.energy_j_per_mb for ch in c.channels])
                    + c.hover_power_w * time_s)
        return RoundCost(energy_j, time_s, self.progress(decision))

    def reward(self, cost: RoundCost) -> float:
        """Σ_r α_r progress / (ϵ_r / ϵ_r^ref): LGC eqs. (14)-(16) with the digest's guard."""
        spent = np.array([cost.energy_j, cost.time_s]) / self.reference_cost
        return float(np.dot(self.config.weights, cost.progress / spent) * 100.0)

    # -- episode API ------------------------------------------------------------------------
    def _draw_rates(self) -> NDArray[np.float64]:
        return np.array([float(ch.link.sample_rate_bit_s(ch.distance_m, self.rng))
                         for ch in self.config.channels])

    def reset(self) -> NDArray[np.float32]:
        self.loss = self.config.initial_loss
        self.round_index = 0
        self.rates = self._draw_rates()
        return self.state()

    def step(self, decision: LgcDecision) -> tuple[NDArray[np.float32], float, bool, RoundCost]:
        """Run one round at the current rates; returns (next state, reward, done, cost)."""
        cost = self.round_cost(decision, self.rates)
        c = self.config
        self.loss = c.min_loss + (self.loss - c.min_loss) * (1.0 - cost.progress)
        self.round_index += 1
        done = self.loss <= c.target_loss or self.round_index >= c.max_rounds
        self.rates = self._draw_rates()
        return self.state(), self.reward(cost), done, cost


# -- h₀ from measured losses ----------------------------------------------------------------

#: The fit's cap on h₀ in units of H_max: (1 − e^(−H/h₀)) differs from H/h₀ by at most
#: H_max / (2 h₀) = 5 % over 1..H_max at h₀ = 10 H_max (see the module docstring).
LINEAR_STEPS_FACTOR = 10.0


@dataclass(frozen=True)
class StepsScaleFit:
    """h₀ of the progress surrogate (module docstring) fitted to a within-round loss curve.

    The model is ℓ(h) = c − A (1 − e^(−h/h₀)), ℓ(h) the mini-batch loss after h local steps:
    the loss drop after h steps is the fraction (1 − e^(−h/h₀)) of the drop A the round
    approaches, the H-factor of the surrogate's progress κ (1 − e^(−H/h₀)) (1 − e^(−K/k₀)).

    steps_scale: h₀ (local steps). initial_loss: c. drop: A (>= 0; 0 = the curve does not
    fall, so h₀ is not measurable and ``informative`` is False). rmse: residual of the fit.
    at_upper_bound: h₀ is the cap (no saturation within the window: progress at least linear
    in h there). num_steps: the curve's length; num_curves: how many drones' curves it averages.
    """

    steps_scale: float
    initial_loss: float
    drop: float
    rmse: float
    at_upper_bound: bool
    num_steps: int
    num_curves: int

    @property
    def informative(self) -> bool:
        return self.drop > 0.0

    def as_dict(self) -> dict:
        return {'steps_scale': self.steps_scale, 'initial_loss': self.initial_loss,
                'drop': self.drop, 'rmse': self.rmse, 'at_upper_bound': self.at_upper_bound,
                'num_steps': self.num_steps, 'num_curves': self.num_curves,
                'informative': self.informative}


def mean_loss_curve(curves: Sequence[Sequence[float]]) -> NDArray[np.float64]:
    """The mean over drones of ℓ(h) at each h, over the drones whose curve reaches h."""
    arrays = [np.asarray(c, np.float64) for c in curves if len(c)]
    if not arrays:
        raise ValueError('need at least one non-empty loss curve')
    if any(not np.all(np.isfinite(a)) or a.ndim != 1 for a in arrays):
        raise ValueError('loss curves must be 1-D sequences of finite losses')
    length = max(len(a) for a in arrays)
    return np.array([np.mean([a[h] for a in arrays if len(a) > h]) for h in range(length)])


def _fit_fixed_scale(steps: NDArray[np.float64], losses: NDArray[np.float64], scale: float
                     ) -> tuple[float, float, float]:
    """Least squares (c, A >= 0) of ℓ = c − A g, g = 1 − e^(−h/h₀), at a given h₀: (sse, c, A)."""
    g = -np.expm1(-steps / scale)
    g_c, y_c = g - g.mean(), losses - losses.mean()
    denom = float(np.dot(g_c, g_c))
    drop = max(0.0, -float(np.dot(g_c, y_c)) / denom) if denom > 0 else 0.0
    initial = float(losses.mean() + drop * g.mean())
    residual = losses - (initial - drop * g)
    return float(np.dot(residual, residual)), initial, drop


def fit_steps_scale(curves: Sequence[Sequence[float]], max_steps_scale: float,
                    min_steps_scale: float = 0.1, grid_points: int = 400) -> StepsScaleFit:
    """Least-squares h₀ of ℓ(h) = c − A (1 − e^(−h/h₀)) on the drones' mean loss curve.

    ``curves``: per drone, the mini-batch losses ℓ(0), ℓ(1), ... measured before each local
    step (ℓ(h) is the loss of the weights after h steps). Averaging over the fleet first is
    the same model with one shared h₀ (a mean of c_k − A_k g(h) is c̄ − Ā g(h)) and averages
    out the mini-batch noise that makes one drone's 10-20 steps a poor fit. For each h₀ on a
    log grid in [min_steps_scale, max_steps_scale] (c, A) is linear least squares; the best
    grid point is refined by golden-section search in log h₀. Deterministic.
    """
    if not 0 < min_steps_scale < max_steps_scale or not math.isfinite(max_steps_scale):
        raise ValueError(f'need 0 < min_steps_scale < max_steps_scale < inf, got '
                         f'{min_steps_scale}, {max_steps_scale}')
    losses = mean_loss_curve(curves)
    if losses.size < 3:
        raise ValueError(f'need a loss curve of at least 3 steps to fit h0, got {losses.size}')
    steps = np.arange(losses.size, dtype=np.float64)
    log_grid = np.linspace(math.log(min_steps_scale), math.log(max_steps_scale), grid_points)
    sse = np.array([_fit_fixed_scale(steps, losses, math.exp(x))[0] for x in log_grid])
    best = int(np.argmin(sse))
    log_scale = float(log_grid[best])
    if 0 < best < grid_points - 1:   # golden section on log h0 within the two grid cells
        lo, hi = float(log_grid[best - 1]), float(log_grid[best + 1])
        ratio = (math.sqrt(5.0) - 1.0) / 2.0
        for _ in range(60):
            a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
            if _fit_fixed_scale(steps, losses, math.exp(a))[0] \
                    <= _fit_fixed_scale(steps, losses, math.exp(b))[0]:
                hi = b
            else:
                lo = a
        if _fit_fixed_scale(steps, losses, math.exp((lo + hi) / 2))[0] <= sse[best]:
            log_scale = (lo + hi) / 2
    scale = float(math.exp(log_scale))
    err, initial, drop = _fit_fixed_scale(steps, losses, scale)
    return StepsScaleFit(scale, initial, drop, math.sqrt(err / losses.size),
                         best == grid_points - 1, int(losses.size),
                         len([c for c in curves if len(c)]))


#: Bounds of the fitted exponent β (:func:`fit_steps_exponent`): from strongly saturating
#: (the last of 20 steps adds ~1 % of the round's progress) to strongly accelerating.
MIN_STEPS_EXPONENT = 0.25
MAX_STEPS_EXPONENT = 2.0


@dataclass(frozen=True)
class StepsExponentFit:
    """β of the power-law progress model ℓ(0) − ℓ(h) = A h^β fitted to a measured curve.

    exponent: β (β < 1: diminishing returns in h, β = 1: linear, β > 1: accelerating).
    drop: A (>= 0; 0 = the curve does not fall, ``informative`` False). rmse: residual.
    at_bound: β is MIN_ or MAX_STEPS_EXPONENT. num_steps: the curve's length (h = 0..H).
    """

    exponent: float
    drop: float
    rmse: float
    at_bound: bool
    num_steps: int

    @property
    def informative(self) -> bool:
        return self.drop > 0.0

    def as_dict(self) -> dict:
        return {'exponent': self.exponent, 'drop': self.drop, 'rmse': self.rmse,
                'at_bound': self.at_bound, 'num_steps': self.num_steps,
                'informative': self.informative}


def fit_steps_exponent(losses: Sequence[float], min_exponent: float = MIN_STEPS_EXPONENT,
                       max_exponent: float = MAX_STEPS_EXPONENT, grid_points: int = 701
                       ) -> StepsExponentFit:
    """Least-squares β of ℓ(0) − ℓ(h) = A h^β (A >= 0) on a loss curve ℓ(0), ℓ(1), ...

    ℓ(h) is the loss after h local steps of the same model, so ℓ(0) is exact (no fit of the
    intercept): the drop is anchored at h = 0. For each β on a uniform grid in
    [min_exponent, max_exponent] A is linear least squares; the best grid point is returned
    (grid step 0.0025 by default). Deterministic.
    """
    curve = np.asarray(losses, np.float64)
    if curve.ndim != 1 or curve.size < 3 or not np.all(np.isfinite(curve)):
        raise ValueError(f'need a finite loss curve of at least 3 points, got {losses!r}')
    if not 0 < min_exponent < max_exponent or not math.isfinite(max_exponent):
        raise ValueError(f'need 0 < min_exponent < max_exponent < inf, got {min_exponent}, '
                         f'{max_exponent}')
    h = np.arange(1, curve.size, dtype=np.float64)
    drop = curve[0] - curve[1:]
    best = None
    for beta in np.linspace(min_exponent, max_exponent, grid_points):
        x = h ** beta
        amp = max(0.0, float(np.dot(x, drop)) / float(np.dot(x, x)))
        sse = float(np.sum((drop - amp * x) ** 2))
        if best is None or sse < best[0] - 1e-18:
            best = (sse, float(beta), amp)
    sse, beta, amp = best
    if amp == 0.0:   # no fall: every β fits equally badly; report the linear one
        beta = 1.0
    at_bound = math.isclose(beta, min_exponent) or math.isclose(beta, max_exponent)
    return StepsExponentFit(beta, amp, math.sqrt(sse / h.size), at_bound and amp > 0,
                            int(curve.size))


# -- policies -------------------------------------------------------------------------------

class FixedPolicy:
    """LGC without DRL (the paper's baseline): the same H and D_n every round."""

    name = 'fixed'

    def __init__(self, decision: LgcDecision) -> None:
        self.decision = decision

    def decide(self, env: LgcEnv, state: NDArray[np.float32]) -> LgcDecision:
        return self.decision


class GreedyChannelPolicy:
    """Heuristic (not in LGC): fixed H and K, cheapest channel first at the current costs.

    A channel's cost per entry is Σ_r α_r E_comm,r,n / ϵ_r^ref (the round's factors, LGC
    eq. (12)); entries fill channels in increasing cost order up to each D_n^max.
    """

    name = 'heuristic'

    def __init__(self, local_steps: int, total_entries: int) -> None:
        if local_steps < 1 or total_entries < 0:
            raise ValueError('local_steps must be >= 1 and total_entries >= 0')
        self.local_steps = int(local_steps)
        self.total_entries = int(total_entries)

    @staticmethod
    def allocate(total_entries: int, cost_per_entry: Sequence[float],
                 max_entries: Sequence[int]) -> tuple[int, ...]:
        """Fill the cheapest channels first (ties by channel order), each up to its cap."""
        cost = np.asarray(cost_per_entry, np.float64)
        caps = np.asarray(max_entries, np.int64)
        if cost.shape != caps.shape:
            raise ValueError('cost_per_entry and max_entries need one value per channel')
        left = int(total_entries)
        out = np.zeros(caps.shape, np.int64)
        for n in np.argsort(cost, kind='stable'):
            out[n] = min(left, int(caps[n]))
            left -= int(out[n])
        return tuple(int(k) for k in out)

    def decide(self, env: LgcEnv, state: NDArray[np.float32]) -> LgcDecision:
        c = env.config
        factors = np.asarray(state, np.float64) * env.mean_factors
        n = c.num_channels
        energy, time = factors[1:1 + n], factors[2 + n:]
        cost = c.weights[0] * energy / env.reference_cost[0] \
            + c.weights[1] * time / env.reference_cost[1]
        total = min(self.total_entries, c.entry_cap)
        return LgcDecision(min(self.local_steps, c.max_local_steps),
                           self.allocate(total, cost, [ch.max_entries for ch in c.channels]))


class RandomPolicy:
    """Uniform random actions (the reference a learning controller must beat)."""

    name = 'random'

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def decide(self, env: LgcEnv, state: NDArray[np.float32]) -> LgcDecision:
        return decode_action(self.rng.uniform(-1.0, 1.0, env.config.action_dim), env.config)


# -- DDPG -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class DdpgConfig:
    """DDPG hyper-parameters (LGC gives none; see the module docstring)."""

    hidden: int = 64
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    discount: float = 0.9
    soft_update: float = 0.01
    buffer_size: int = 10_000
    batch_size: int = 64
    warmup_steps: int = 200
    noise_theta: float = 0.15
    noise_sigma: float = 0.3
    train_steps: int = 1500

    def __post_init__(self) -> None:
        for name in ('hidden', 'buffer_size', 'batch_size', 'train_steps'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'ddpg.{name} must be an integer >= 1, got {value!r}')
        if not (0 <= self.discount < 1 and 0 < self.soft_update <= 1):
            raise ValueError('ddpg.discount must be in [0, 1) and soft_update in (0, 1]')
        if not (self.actor_lr > 0 and self.critic_lr > 0 and self.noise_sigma >= 0
                and self.noise_theta >= 0 and self.warmup_steps >= 0):
            raise ValueError('ddpg learning rates must be > 0, noise and warmup >= 0')


def _mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, outputs))


class ReplayBuffer:
    """A ring buffer of (s, a, r, s', done) transitions, sampled uniformly."""

    def __init__(self, capacity: int, state_dim: int, action_dim: int) -> None:
        self.capacity = int(capacity)
        self.states = np.zeros((capacity, state_dim), np.float32)
        self.actions = np.zeros((capacity, action_dim), np.float32)
        self.rewards = np.zeros(capacity, np.float32)
        self.next_states = np.zeros((capacity, state_dim), np.float32)
        self.dones = np.zeros(capacity, np.float32)
        self.size = 0
        self._next = 0

    def add(self, state, action, reward: float, next_state, done: bool) -> None:
        i = self._next
        self.states[i], self.actions[i], self.rewards[i] = state, action, reward
        self.next_states[i], self.dones[i] = next_state, float(done)
        self._next = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, rng: np.random.Generator, batch: int) -> tuple[torch.Tensor, ...]:
        idx = rng.integers(0, self.size, batch)
        return tuple(torch.from_numpy(x[idx]) for x in (self.states, self.actions,
                                                         self.rewards, self.next_states,
                                                         self.dones))


class OrnsteinUhlenbeckNoise:
    """x ← x + θ(−x) + σ N(0, 1) per step (Lillicrap et al.'s exploration noise)."""

    def __init__(self, dim: int, theta: float, sigma: float, rng: np.random.Generator) -> None:
        self.theta, self.sigma, self.rng = theta, sigma, rng
        self.x = np.zeros(dim)

    def reset(self) -> None:
        self.x[:] = 0.0

    def sample(self, scale: float = 1.0) -> NDArray[np.float64]:
        self.x += -self.theta * self.x + self.sigma * self.rng.standard_normal(self.x.size)
        return scale * self.x


class DdpgAgent:
    """Actor π(s|θ^π), critic Q(s, a|θ^Q), their target copies and a replay buffer (LGC §3.3)."""

    def __init__(self, state_dim: int, action_dim: int, config: DdpgConfig | None = None,
                 seed: int = 0) -> None:
        self.config = config or DdpgConfig()
        c = self.config
        self.rng = np.random.default_rng(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = nn.Sequential(_mlp(state_dim, c.hidden, action_dim), nn.Tanh())
            self.critic = _mlp(state_dim + action_dim, c.hidden, 1)
        self.actor_target = _copy(self.actor)
        self.critic_target = _copy(self.critic)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=c.actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=c.critic_lr)
        self.buffer = ReplayBuffer(c.buffer_size, state_dim, action_dim)
        self.noise = OrnsteinUhlenbeckNoise(action_dim, c.noise_theta, c.noise_sigma, self.rng)
        self.action_dim = action_dim

    def act(self, state: NDArray[np.float32], noise_scale: float = 0.0) -> NDArray[np.float64]:
        """π(s) (+ OU noise × ``noise_scale``), clipped to [−1, 1]."""
        with torch.no_grad():
            a = self.actor(torch.as_tensor(state, dtype=torch.float32)[None])[0].numpy()
        if noise_scale > 0:
            a = a + self.noise.sample(noise_scale)
        return np.clip(a.astype(np.float64), -1.0, 1.0)

    def update(self) -> float:
        """One critic and one actor step on a replay minibatch (eq. (18)); returns critic loss."""
        c = self.config
        s, a, r, s2, done = self.buffer.sample(self.rng, c.batch_size)
        with torch.no_grad():
            q_next = self.critic_target(torch.cat([s2, self.actor_target(s2)], 1))[:, 0]
            y = r + c.discount * (1.0 - done) * q_next
        q = self.critic(torch.cat([s, a], 1))[:, 0]
        critic_loss = torch.mean((y - q) ** 2)
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()
        actor_loss = -self.critic(torch.cat([s, self.actor(s)], 1)).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        _soft_update(self.actor_target, self.actor, c.soft_update)
        _soft_update(self.critic_target, self.critic, c.soft_update)
        return float(critic_loss.detach())


def _copy(net: nn.Module) -> nn.Module:
    import copy

    clone = copy.deepcopy(net)
    for p in clone.parameters():
        p.requires_grad_(False)
    return clone


def _soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.mul_(1.0 - tau).add_(tau * s)


class DdpgPolicy:
    """A trained agent acting greedily (no exploration noise)."""

    name = 'ddpg'

    def __init__(self, agent: DdpgAgent) -> None:
        self.agent = agent

    def decide(self, env: LgcEnv, state: NDArray[np.float32]) -> LgcDecision:
        return decode_action(self.agent.act(state), env.config)


@dataclass(frozen=True)
class TrainingLog:
    """Per-episode returns and the critic losses of the updates (LGC Fig. 5's two curves)."""

    episode_returns: tuple[float, ...]
    critic_losses: tuple[float, ...]


def train_ddpg(config: LgcEnvConfig, ddpg: DdpgConfig | None = None, seed: int = 0,
               episode_rounds: int = 50) -> tuple[DdpgAgent, TrainingLog]:
    """Train one drone's agent online against :class:`LgcEnv` (one torch thread, seeded):
    the agent (init, exploration, minibatches) and the surrogate (fading) on two streams of
    ``seed``, so the agent's random actions are not the channel's draws."""
    ddpg = ddpg or DdpgConfig()
    if episode_rounds < 1:
        raise ValueError(f'episode_rounds must be >= 1, got {episode_rounds}')
    with one_torch_thread():
        agent = DdpgAgent(config.state_dim, config.action_dim, ddpg,
                          seed=stream_seed(seed, 0, Stream.DDPG_AGENT))
        log = _run_ddpg(agent, LgcEnv(config, seed=stream_seed(seed, 0, Stream.DDPG_ENV)),
                        ddpg.train_steps, ddpg.warmup_steps, episode_rounds)
    return agent, log


def finetune_ddpg(agent: DdpgAgent, config: LgcEnvConfig, train_steps: int, seed: int = 0,
                  warmup_steps: int | None = None, episode_rounds: int = 50) -> TrainingLog:
    """Continue training ``agent`` (its current networks and optimiser state) on a new
    surrogate ``config``: the replay buffer is emptied first (its rewards were computed with
    the old progress model), then ``warmup_steps`` uniform random actions (default: one
    minibatch) and OU noise decaying to zero, as in :func:`train_ddpg`. Seeded by ``seed``
    (the environment's fading draws and the agent's sampling, on two streams of it), so a
    replay gives the same agent."""
    if train_steps < 1 or episode_rounds < 1:
        raise ValueError(f'train_steps and episode_rounds must be >= 1, got {train_steps}, '
                         f'{episode_rounds}')
    warmup = agent.config.batch_size if warmup_steps is None else int(warmup_steps)
    agent.buffer.size = agent.buffer._next = 0
    agent.rng = np.random.default_rng(stream_seed(seed, 0, Stream.DDPG_AGENT))
    agent.noise.rng = agent.rng
    env = LgcEnv(config, seed=stream_seed(seed, 0, Stream.DDPG_ENV))
    with one_torch_thread():
        return _run_ddpg(agent, env, train_steps, warmup, episode_rounds)


def _run_ddpg(agent: DdpgAgent, env: LgcEnv, train_steps: int, warmup_steps: int,
              episode_rounds: int) -> TrainingLog:
    """The interaction loop shared by :func:`train_ddpg` and :func:`finetune_ddpg`."""
    config, ddpg = env.config, agent.config
    returns, losses = [], []
    state, ret, rounds = env.reset(), 0.0, 0
    agent.noise.reset()
    for step in range(train_steps):
        if step < warmup_steps:
            action = agent.rng.uniform(-1.0, 1.0, config.action_dim)
        else:
            decay = 1.0 - (step - warmup_steps) / max(1, train_steps - warmup_steps)
            action = agent.act(state, noise_scale=decay)
        next_state, reward, done, _ = env.step(decode_action(action, config))
        rounds += 1
        truncated = rounds >= episode_rounds
        agent.buffer.add(state, action, reward, next_state, done)
        ret += reward
        if agent.buffer.size >= ddpg.batch_size and step >= warmup_steps // 2:
            losses.append(agent.update())
        if done or truncated:
            returns.append(ret)
            state, ret, rounds = env.reset(), 0.0, 0
            agent.noise.reset()
        else:
            state = next_state
    return TrainingLog(tuple(returns), tuple(losses))


@dataclass(frozen=True)
class PolicyEvaluation:
    """A policy run from the initial loss until the target loss (or max_rounds)."""

    energy_j: float
    time_s: float
    rounds: int
    reached: bool
    mean_reward: float


def evaluate_policy(config: LgcEnvConfig, policy, seed: int = 0) -> PolicyEvaluation:
    """Energy and time to reach ``config.target_loss`` (the same fading draws for one seed)."""
    env = LgcEnv(config, seed=seed)
    state = env.reset()
    energy = time = reward_sum = 0.0
    rounds, done = 0, False
    with one_torch_thread():
        while not done:
            state, reward, done, cost = env.step(policy.decide(env, state))
            energy += cost.energy_j
            time += cost.time_s
            reward_sum += reward
            rounds += 1
    return PolicyEvaluation(energy, time, rounds, env.loss <= config.target_loss,
                            reward_sum / rounds)
