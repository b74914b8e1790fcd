"""Radio link model: path loss, Rayleigh fading, SNR, Shannon rate, packet error, airtime.

Equations (paper numbering):

======================================  ====================================================
function                                equation
======================================  ====================================================
``path_gain``                           FedDPQ eq. (15) h = zeta / d^2 (ref. gain 1, exp. 2);
                                        FedEx Sec. III-B h = beta_0 / H^2 (free space, d0 1 m)
``free_space_ref_gain``                 Friis: beta_0 = (c / (4 pi f d0))^2 (not in the seeds)
``rayleigh_power_gain``                 FedDPQ eq. (15): zeta ~ Exp(1), the Rayleigh power gain
``snr``                                 the argument of log2 in FedDPQ eq. (14) / FedEx eq. (2)
``shannon_rate_bit_s``                  FedEx eq. (2); FedDPQ eq. (14) for one fading draw
``ergodic_rate_rayleigh_bit_s``         FedDPQ eq. (14): B E_zeta[log2(1 + zeta snr_mean)]
``packet_error_prob``                   FedDPQ eq. (16) for one channel realisation
``packet_error_prob_rayleigh``          FedDPQ eq. (16) with the expectation over zeta
``snr_for_packet_error``                inverse of eq. (16) (FedDPQ digest Sec. 1.6, derived)
``power_for_packet_error_w``            p_u(q) = Upsilon (I + B N0) / (h_mean a*(q))
``sample_upload_success``               FedDPQ eq. (17): alpha ~ Bernoulli(1 - q)
``rate_outage_prob_rayleigh``           P(rate < R) under Rayleigh fading (textbook, extra)
``airtime_s``                           FedDPQ eq. (38) T = bits / R; FedEx eq. (3)
``tx_energy_j``                         FedDPQ eq. (37) E = p T; FedEx eq. (4) per transfer
``los_probability``,                    air-to-ground model (Al-Hourani et al. 2014); NOT used
``air_to_ground_path_loss_db``          by any seed paper, offered for UAV links (see below)
``RadioLink``                           all of the above bound to one link's parameters
======================================  ====================================================

Ambiguities resolved here (see also the FedDPQ digest Sec. 1.6 and 8):

* FedDPQ eq. (15) calls zeta "a Rayleigh fading coefficient" without saying amplitude or power.
  zeta is taken as the *power* gain, zeta ~ Exp(1) (mean 1), so the mean channel gain is 1 / d^2.
* FedDPQ eq. (15) has no path-loss constant and no carrier frequency: h = zeta / d^2. That is
  ``path_gain`` with ``ref_gain=1`` and ``exponent=2``, the ``RadioLink`` default. Giving
  ``carrier_hz`` instead switches to the free-space (Friis) reference gain at 1 m, which is the
  beta_0 of FedEx (FedEx gives no value for beta_0 or N0).
* The expectations in FedDPQ eqs. (14) and (16) are evaluated exactly over zeta ~ Exp(1) by a
  trapezoid rule after the substitution zeta = e^t (the integrand is smooth and decays doubly
  exponentially, so the rule converges geometrically; error far below 1e-12). In closed form
  they are E[log(1 + g zeta)] = e^(1/g) E1(1/g) and q = 1 - 2 sqrt(a) K1(2 sqrt(a)) with
  a = Upsilon / snr_mean; scipy is not available, the tests check both closed forms with
  independent series.
* The waterfall threshold Upsilon is not in FedDPQ's Table I. The default is Chen et al.'s
  m = 0.023 dB (FedDPQ ref. [20]), converted to linear: 10^(0.0023) = 1.0053. The digest
  recalled this value; it is unverified against [20].
* FedDPQ's interference I_u ~ U[1e-8, 2e-8] (Table I, units unstated, read as W). ``RadioLink``
  defaults to the midpoint 1.5e-8 W; with B N0 = 4e-15 W the link is interference-limited.
* FedEx's "transmission bandwidth of 50 Mbps" is a rate, not a bandwidth (beta_0 and N0 are not
  given), so FedEx users should call ``airtime_s`` with ``rate_bit_s=50e6`` directly.
* No seed paper uses an air-to-ground / LoS-probability model. ``los_probability`` and
  ``air_to_ground_path_loss_db`` implement the common Al-Hourani et al. (IEEE WCL 2014) sigmoid
  model for UAV use; they take the environment constants as required arguments (no defaults,
  because none of the seed papers gives them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fl_uav.configschema import require_choice
from fl_uav.netmodel._checks import (
    FloatOrArray,
    as_float_array,
    check_field_non_negative,
    check_field_positive,
    check_non_negative,
    check_positive,
    check_unit_interval,
    out,
)

SPEED_OF_LIGHT_M_S = 299_792_458.0
THERMAL_NOISE_PSD_DBM_HZ = -174.0
THERMAL_NOISE_PSD_W_HZ = 10.0 ** ((THERMAL_NOISE_PSD_DBM_HZ - 30.0) / 10.0)

# FedDPQ Table I.
FEDDPQ_BANDWIDTH_HZ = 1e6
FEDDPQ_MAX_TX_POWER_W = 0.1
FEDDPQ_MIN_TX_POWER_W = 0.01
FEDDPQ_INTERFERENCE_RANGE_W = (1e-8, 2e-8)
FEDDPQ_DISTANCE_RANGE_M = (100.0, 300.0)
# Chen et al. (FedDPQ ref. [20]) waterfall threshold 0.023 dB, in linear units.
CHEN_WATERFALL_THRESHOLD = 10.0 ** (0.023 / 10.0)

# Quadrature grid for E over zeta ~ Exp(1): zeta = e^t, t in [-80, 6.6], step 0.05 (beyond
# t = 6.6 the weight e^(t - e^t) underflows to 0, and keeping those points only risks inf * 0).
_T_GRID = np.arange(-80.0, 6.6, 0.05)
_ZETA_GRID = np.exp(_T_GRID)
_EXP1_WEIGHTS = 0.05 * np.exp(_T_GRID - _ZETA_GRID)
# Bisection bracket for ln(a) in the inverse of eq. (16).
_LN_A_LOW, _LN_A_HIGH, _BISECTION_STEPS = -60.0, 12.0, 80


def db_to_linear(value_db: ArrayLike) -> FloatOrArray:
    """10^(dB/10)."""
    return out(10.0 ** (as_float_array(value_db, 'value_db') / 10.0))


def linear_to_db(value: ArrayLike) -> FloatOrArray:
    """10 log10(value); value must be > 0."""
    return out(10.0 * np.log10(check_positive(value, 'value')))


def dbm_to_w(power_dbm: ArrayLike) -> FloatOrArray:
    """dBm to watts: 10^((dBm - 30) / 10). Also converts dBm/Hz to W/Hz."""
    return out(10.0 ** ((as_float_array(power_dbm, 'power_dbm') - 30.0) / 10.0))


def w_to_dbm(power_w: ArrayLike) -> FloatOrArray:
    """Watts to dBm."""
    return out(10.0 * np.log10(check_positive(power_w, 'power_w')) + 30.0)



def free_space_ref_gain(carrier_hz: float, ref_distance_m: float = 1.0) -> float:
    """Friis free-space power gain at ``ref_distance_m``: (c / (4 pi f d0))^2.

    This is the beta_0 of FedEx Sec. III-B ("channel power at d0 = 1 m"); FedEx gives no value.
    """
    f = float(check_positive(carrier_hz, 'carrier_hz'))
    d0 = float(check_positive(ref_distance_m, 'ref_distance_m'))
    return (SPEED_OF_LIGHT_M_S / (4.0 * math.pi * f * d0)) ** 2


def path_gain(distance_m: ArrayLike, ref_gain: float = 1.0, exponent: float = 2.0,
              ref_distance_m: float = 1.0) -> FloatOrArray:
    """Mean (large-scale) power gain ref_gain * (d / d0)^(-exponent).

    FedDPQ eq. (15) without the fading factor: 1 / d^2 (ref_gain 1, exponent 2).
    FedEx Sec. III-B: beta_0 / H^2 (ref_gain beta_0, exponent 2, d = altitude H).
    """
    d = check_positive(distance_m, 'distance_m')
    g0 = float(check_positive(ref_gain, 'ref_gain'))
    alpha = float(check_positive(exponent, 'exponent'))
    d0 = float(check_positive(ref_distance_m, 'ref_distance_m'))
    return out(g0 * (d / d0) ** (-alpha))


def rayleigh_power_gain(rng: np.random.Generator, size: int | tuple[int, ...] | None = None
                        ) -> FloatOrArray:
    """Rayleigh fading power gain zeta ~ Exp(1) (FedDPQ eq. (15)); deterministic given ``rng``."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f'rng must be a numpy.random.Generator, got {type(rng).__name__}')
    return out(rng.exponential(1.0, size))


def noise_power_w(bandwidth_hz: ArrayLike, noise_psd_w_hz: float = THERMAL_NOISE_PSD_W_HZ
                  ) -> FloatOrArray:
    """B N0, the thermal noise power in the band (FedDPQ eq. (14) denominator)."""
    b = check_positive(bandwidth_hz, 'bandwidth_hz')
    n0 = check_non_negative(noise_psd_w_hz, 'noise_psd_w_hz')
    return out(b * n0)


def snr(tx_power_w: ArrayLike, channel_gain: ArrayLike, noise_power_w: ArrayLike,
        interference_w: ArrayLike = 0.0) -> FloatOrArray:
    """Linear SINR p h / (I + B N0), the argument of log2 in FedDPQ eq. (14)."""
    p = check_non_negative(tx_power_w, 'tx_power_w')
    h = check_non_negative(channel_gain, 'channel_gain')
    n = check_non_negative(noise_power_w, 'noise_power_w')
    i = check_non_negative(interference_w, 'interference_w')
    denom = n + i
    if np.any(denom <= 0):
        raise ValueError('noise_power_w + interference_w must be > 0')
    return out(p * h / denom)


def shannon_rate_bit_s(bandwidth_hz: ArrayLike, snr_linear: ArrayLike) -> FloatOrArray:
    """B log2(1 + snr): FedEx eq. (2), and FedDPQ eq. (14) for one fading realisation."""
    b = check_positive(bandwidth_hz, 'bandwidth_hz')
    s = check_non_negative(snr_linear, 'snr_linear')
    return out(b * np.log1p(s) / math.log(2.0))


def _expect_exp1(values_on_grid: NDArray[np.float64]) -> NDArray[np.float64]:
    """E[f(zeta)], zeta ~ Exp(1), from f evaluated on ``_ZETA_GRID`` along the last axis."""
    return values_on_grid @ _EXP1_WEIGHTS


def ergodic_rate_rayleigh_bit_s(bandwidth_hz: ArrayLike, mean_snr: ArrayLike) -> FloatOrArray:
    """FedDPQ eq. (14): B E_zeta[log2(1 + zeta snr_mean)], zeta ~ Exp(1).

    Closed form B e^(1/g) E1(1/g) / ln 2 with g = snr_mean.
    """
    b = check_positive(bandwidth_hz, 'bandwidth_hz')
    g = check_non_negative(mean_snr, 'mean_snr')
    b, g = np.broadcast_arrays(b, g)
    nats = _expect_exp1(np.log1p(g[..., None] * _ZETA_GRID))
    return out(b * nats / math.log(2.0))


def packet_error_prob(snr_linear: ArrayLike, waterfall_threshold: float = CHEN_WATERFALL_THRESHOLD
                      ) -> FloatOrArray:
    """FedDPQ eq. (16) for one channel realisation: 1 - exp(-Upsilon / snr).

    Returns 1 for snr = 0.
    """
    s = check_non_negative(snr_linear, 'snr_linear')
    ups = float(check_positive(waterfall_threshold, 'waterfall_threshold'))
    with np.errstate(divide='ignore'):
        return out(-np.expm1(-ups / s))


def _rayleigh_q_of_a(a: NDArray[np.float64]) -> NDArray[np.float64]:
    """E_zeta[1 - exp(-a / zeta)] for zeta ~ Exp(1); equals 1 - 2 sqrt(a) K1(2 sqrt(a))."""
    return _expect_exp1(-np.expm1(-a[..., None] / _ZETA_GRID))


def packet_error_prob_rayleigh(mean_snr: ArrayLike,
                               waterfall_threshold: float = CHEN_WATERFALL_THRESHOLD
                               ) -> FloatOrArray:
    """FedDPQ eq. (16): q = E_zeta[1 - exp(-Upsilon / (zeta snr_mean))], zeta ~ Exp(1).

    Closed form 1 - 2 sqrt(a) K1(2 sqrt(a)) with a = Upsilon / snr_mean (FedDPQ digest
    Sec. 1.6). Returns 1 for snr_mean = 0.
    """
    g = check_non_negative(mean_snr, 'mean_snr')
    ups = float(check_positive(waterfall_threshold, 'waterfall_threshold'))
    with np.errstate(divide='ignore'):
        a = ups / g
    q = np.where(np.isinf(a), 1.0, _rayleigh_q_of_a(np.where(np.isinf(a), 1.0, a)))
    return out(np.clip(q, 0.0, 1.0))


def _rayleigh_a_for_q(q: NDArray[np.float64]) -> NDArray[np.float64]:
    """Solve E_zeta[1 - exp(-a / zeta)] = q for a by bisection on ln a (q(a) is increasing)."""
    low = np.full(q.shape, _LN_A_LOW)
    high = np.full(q.shape, _LN_A_HIGH)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        too_high = _rayleigh_q_of_a(np.exp(mid)) > q
        high = np.where(too_high, mid, high)
        low = np.where(too_high, low, mid)
    return np.exp(0.5 * (low + high))


def snr_for_packet_error(q: ArrayLike, waterfall_threshold: float = CHEN_WATERFALL_THRESHOLD,
                         rayleigh: bool = True) -> FloatOrArray:
    """The (mean) SNR at which FedDPQ eq. (16) gives packet error probability ``q``.

    snr = Upsilon / a*(q). With Rayleigh fading a*(q) solves 1 - 2 sqrt(a) K1(2 sqrt(a)) = q
    (a*(0.05) = 1.151e-2, FedDPQ digest Sec. 1.6); with a fixed channel a*(q) = -ln(1 - q).
    Accurate (relative 1e-12) for q in [1e-20, 1 - 1e-12].
    """
    qa = check_unit_interval(q, 'q', closed_low=False)
    ups = float(check_positive(waterfall_threshold, 'waterfall_threshold'))
    a = _rayleigh_a_for_q(qa) if rayleigh else -np.log1p(-qa)
    return out(ups / a)


def power_for_packet_error_w(q: ArrayLike, mean_channel_gain: ArrayLike,
                             noise_plus_interference_w: ArrayLike,
                             waterfall_threshold: float = CHEN_WATERFALL_THRESHOLD,
                             rayleigh: bool = True) -> FloatOrArray:
    """Transmit power for a target packet error probability q (inverse of FedDPQ eq. (16)).

    p_u(q) = Upsilon (I_u + B N0) / (h_mean a*(q)); with FedDPQ eq. (15) h_mean = 1 / d_u^2.
    ``packet_error_prob_rayleigh(snr(p, h_mean, n))`` maps it back to q.
    """
    h = check_positive(mean_channel_gain, 'mean_channel_gain')
    n = check_positive(noise_plus_interference_w, 'noise_plus_interference_w')
    target_snr = as_float_array(snr_for_packet_error(q, waterfall_threshold, rayleigh), 'q')
    return out(target_snr * n / h)


def sample_upload_success(rng: np.random.Generator, q: ArrayLike,
                          size: int | tuple[int, ...] | None = None) -> NDArray[np.bool_]:
    """FedDPQ eq. (17): alpha = 1 with probability 1 - q, else 0; deterministic given ``rng``."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f'rng must be a numpy.random.Generator, got {type(rng).__name__}')
    qa = check_unit_interval(q, 'q', closed_high=True)
    shape = np.shape(qa) if size is None else size
    return rng.random(shape) >= qa


def rate_outage_prob_rayleigh(mean_snr: ArrayLike, spectral_efficiency_bit_s_hz: ArrayLike
                              ) -> FloatOrArray:
    """P(log2(1 + zeta snr_mean) < r) = 1 - exp(-(2^r - 1) / snr_mean), zeta ~ Exp(1).

    The textbook capacity-outage probability; not in the seed papers. Returns 1 when
    snr_mean = 0 and r > 0.
    """
    g = check_non_negative(mean_snr, 'mean_snr')
    r = check_non_negative(spectral_efficiency_bit_s_hz, 'spectral_efficiency_bit_s_hz')
    with np.errstate(divide='ignore', invalid='ignore'):
        ratio = np.expm1(r * math.log(2.0)) / g
    ratio = np.where(np.isnan(ratio), 0.0, ratio)  # 0 / 0: no rate needed, never in outage
    return out(-np.expm1(-ratio))


def airtime_s(payload_bits: ArrayLike, rate_bit_s: ArrayLike) -> FloatOrArray:
    """T = payload / rate: FedDPQ eq. (38), FedEx eq. (3)."""
    bits = check_non_negative(payload_bits, 'payload_bits')
    rate = check_positive(rate_bit_s, 'rate_bit_s')
    return out(bits / rate)


def tx_energy_j(tx_power_w: ArrayLike, airtime_s: ArrayLike) -> FloatOrArray:
    """E = p T: FedDPQ eq. (37); FedEx eq. (4) per transfer (times R_k transfers per tour)."""
    p = check_non_negative(tx_power_w, 'tx_power_w')
    t = check_non_negative(airtime_s, 'airtime_s')
    return out(p * t)


def los_probability(elevation_deg: ArrayLike, env_a: float, env_b: float) -> FloatOrArray:
    """P_LoS = 1 / (1 + a exp(-b (theta - a))), theta the elevation angle in degrees.

    Al-Hourani et al. 2014 air-to-ground model; not used by any seed paper. ``env_a`` and
    ``env_b`` are the environment's S-curve constants (no defaults on purpose).
    """
    theta = as_float_array(elevation_deg, 'elevation_deg')
    if np.any((theta < 0) | (theta > 90)):
        raise ValueError('elevation_deg must be in [0, 90]')
    a = float(check_positive(env_a, 'env_a'))
    b = float(check_positive(env_b, 'env_b'))
    return out(1.0 / (1.0 + a * np.exp(-b * (theta - a))))


def air_to_ground_path_loss_db(horizontal_m: ArrayLike, altitude_m: ArrayLike, carrier_hz: float,
                               env_a: float, env_b: float, excess_los_db: float,
                               excess_nlos_db: float) -> FloatOrArray:
    """Mean air-to-ground path loss: FSPL(d) + P_LoS eta_LoS + (1 - P_LoS) eta_NLoS, in dB.

    Al-Hourani et al. 2014; not used by any seed paper. d is the 3-D distance, the elevation
    angle is atan(altitude / horizontal). Convert to a gain with ``db_to_linear(-loss_db)``.
    """
    r = check_non_negative(horizontal_m, 'horizontal_m')
    h = check_positive(altitude_m, 'altitude_m')
    f = float(check_positive(carrier_hz, 'carrier_hz'))
    eta_los = float(check_non_negative(excess_los_db, 'excess_los_db'))
    eta_nlos = float(check_non_negative(excess_nlos_db, 'excess_nlos_db'))
    d = np.hypot(r, h)
    fspl_db = 20.0 * np.log10(4.0 * math.pi * f * d / SPEED_OF_LIGHT_M_S)
    p_los = np.asarray(los_probability(np.degrees(np.arctan2(h, r)), env_a, env_b))
    return out(fspl_db + p_los * eta_los + (1.0 - p_los) * eta_nlos)


FADING_MODELS = ('rayleigh', 'none')


@dataclass(frozen=True)
class RadioLink:
    """One uplink with FedDPQ's model (eqs. (14)-(17), (37)-(38)); defaults from its Table I.

    bandwidth_hz: B_u^UL (Table I: 1 MHz).
    tx_power_w: p_u (Table I: p_max = 0.1 W; p_min = 0.01 W).
    noise_psd_w_hz: N0 (Table I: -174 dBm/Hz).
    interference_w: I_u (Table I: U[1e-8, 2e-8]; default the midpoint 1.5e-8 W).
    path_loss_exponent, ref_distance_m: mean gain ref_gain (d / d0)^-exponent (eq. (15): 2, 1 m).
    ref_gain: linear gain at d0; None means 1 (eq. (15)), or free space if carrier_hz is set.
    carrier_hz: if set, the reference gain is Friis free space at d0. Do not set both.
    waterfall_threshold: Upsilon of eq. (16) (not in Table I; default Chen et al.'s 0.023 dB).
    fading: 'rayleigh' (expectations of eqs. (14), (16) over zeta ~ Exp(1)) or 'none'.
    """

    bandwidth_hz: float = FEDDPQ_BANDWIDTH_HZ
    tx_power_w: float = FEDDPQ_MAX_TX_POWER_W
    noise_psd_w_hz: float = THERMAL_NOISE_PSD_W_HZ
    interference_w: float = 1.5e-8
    path_loss_exponent: float = 2.0
    ref_distance_m: float = 1.0
    ref_gain: float | None = None
    carrier_hz: float | None = None
    waterfall_threshold: float = CHEN_WATERFALL_THRESHOLD
    fading: str = 'rayleigh'

    def __post_init__(self) -> None:
        for name in ('bandwidth_hz', 'tx_power_w', 'path_loss_exponent', 'ref_distance_m',
                     'waterfall_threshold'):
            check_field_positive(self, name)
        for name in ('noise_psd_w_hz', 'interference_w'):
            check_field_non_negative(self, name)
        if self.noise_psd_w_hz + self.interference_w <= 0:
            raise ValueError('noise_psd_w_hz and interference_w must not both be 0')
        if self.ref_gain is not None:
            check_field_positive(self, 'ref_gain')
        if self.carrier_hz is not None:
            check_field_positive(self, 'carrier_hz')
        if self.ref_gain is not None and self.carrier_hz is not None:
            raise ValueError('set at most one of ref_gain and carrier_hz')
        require_choice('fading', self.fading, FADING_MODELS)

    @property
    def ref_gain_linear(self) -> float:
        """beta_0: ``ref_gain``, else free space at ``carrier_hz``, else 1 (FedDPQ eq. (15))."""
        if self.ref_gain is not None:
            return self.ref_gain
        if self.carrier_hz is not None:
            return free_space_ref_gain(self.carrier_hz, self.ref_distance_m)
        return 1.0

    @property
    def noise_power_w(self) -> float:
        """B N0."""
        return self.bandwidth_hz * self.noise_psd_w_hz

    @property
    def noise_plus_interference_w(self) -> float:
        """I_u + B N0, the denominator of eqs. (14) and (16)."""
        return self.interference_w + self.noise_power_w

    def with_power(self, tx_power_w: float) -> RadioLink:
        """A copy with another transmit power."""
        return replace(self, tx_power_w=tx_power_w)

    def mean_gain(self, distance_m: ArrayLike) -> FloatOrArray:
        """Large-scale gain E[h] = beta_0 (d / d0)^-exponent (eq. (15) with E[zeta] = 1)."""
        return path_gain(distance_m, self.ref_gain_linear, self.path_loss_exponent,
                         self.ref_distance_m)

    def mean_snr(self, distance_m: ArrayLike, tx_power_w: ArrayLike | None = None
                 ) -> FloatOrArray:
        """p E[h] / (I + B N0)."""
        p = self.tx_power_w if tx_power_w is None else tx_power_w
        return snr(p, self.mean_gain(distance_m), self.noise_power_w, self.interference_w)

    def rate_bit_s(self, distance_m: ArrayLike, tx_power_w: ArrayLike | None = None
                   ) -> FloatOrArray:
        """R_u(p_u) of eq. (14): ergodic under 'rayleigh', B log2(1 + snr) under 'none'."""
        g = self.mean_snr(distance_m, tx_power_w)
        if self.fading == 'rayleigh':
            return ergodic_rate_rayleigh_bit_s(self.bandwidth_hz, g)
        return shannon_rate_bit_s(self.bandwidth_hz, g)

    def sample_rate_bit_s(self, distance_m: ArrayLike, rng: np.random.Generator,
                          tx_power_w: ArrayLike | None = None) -> FloatOrArray:
        """One fading draw of B log2(1 + zeta snr_mean) (zeta = 1 under 'none')."""
        g = as_float_array(self.mean_snr(distance_m, tx_power_w), 'distance_m')
        zeta = 1.0 if self.fading == 'none' else rayleigh_power_gain(rng, g.shape or None)
        return shannon_rate_bit_s(self.bandwidth_hz, g * zeta)

    def packet_error_prob(self, distance_m: ArrayLike, tx_power_w: ArrayLike | None = None
                          ) -> FloatOrArray:
        """q_u(p_u) of eq. (16) (expectation over zeta under 'rayleigh')."""
        g = self.mean_snr(distance_m, tx_power_w)
        if self.fading == 'rayleigh':
            return packet_error_prob_rayleigh(g, self.waterfall_threshold)
        return packet_error_prob(g, self.waterfall_threshold)

    def power_for_packet_error_w(self, q: ArrayLike, distance_m: ArrayLike) -> FloatOrArray:
        """p_u(q): the transmit power that makes eq. (16) equal q at ``distance_m``.

        Not clipped to [p_min, p_max]: FedDPQ's uniform q is often infeasible inside
        [0.01, 0.1] W (FedDPQ digest Sec. 1.6); the caller decides what to do.
        """
        return power_for_packet_error_w(q, self.mean_gain(distance_m),
                                        self.noise_plus_interference_w,
                                        self.waterfall_threshold, self.fading == 'rayleigh')

    def airtime_s(self, payload_bits: ArrayLike, distance_m: ArrayLike,
                  tx_power_w: ArrayLike | None = None) -> FloatOrArray:
        """T_u,cu = payload / R_u(p_u), eq. (38)."""
        return airtime_s(payload_bits, self.rate_bit_s(distance_m, tx_power_w))

    def upload_energy_j(self, payload_bits: ArrayLike, distance_m: ArrayLike,
                        tx_power_w: ArrayLike | None = None) -> FloatOrArray:
        """E_u,cu = p_u T_u,cu, eq. (37)."""
        p = self.tx_power_w if tx_power_w is None else tx_power_w
        return tx_energy_j(p, self.airtime_s(payload_bits, distance_m, tx_power_w))
