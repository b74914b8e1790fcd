"""UAV propulsion power, tour time and energy, and the per-tour energy budget (FedEx).

======================================  ====================================================
name                                    equation
======================================  ====================================================
``ConstantPower``                       FedEx Sec. VII-A: ~30 W level flight, ~20 W hover
``FixedWing.flight_power_w``            FedEx eq. (7): P_SLF(V) = c1 V^3 + c2 / V
``RotaryWing.flight_power_w``           rotary-wing model of Zeng, Xu & Zhang 2019 (blade
                                        profile + induced + parasite); NOT in FedEx
``segment_lengths_m``, ``tour_length_m`` sum_ij D_ij z_ij of FedEx eq. (5)
``flight_time_s``                       FedEx eq. (5): T_SLF = tour length / V
``flight_energy_j``                     FedEx eq. (7): E_SLF = T_SLF P_SLF(V) (per segment)
``hover_energy_j``                      FedEx eq. (8): E_hover = t_hover p_hover
``tour_cost``                           FedEx eqs. (4), (5), (7), (8), (9)
``fedex_tour_cost``                     the same with FedEx's Sec. VII-A settings
``fits_energy_budget``                  FedEx eqs. (26)/(28): E_prop + E_trans <= E_budget
``max_tour_length_m``                   the budget solved for the tour length
======================================  ====================================================

Ambiguities resolved here (FedEx digest Sec. 1.4, 5.1 and 8):

* FedEx's propulsion model is the *fixed-wing* c1 V^3 + c2 / V of Zeng & Zhang 2017 (its
  ref. [24]); it cannot hover, so FedEx charges hovering with a separate constant p_hover
  (eq. (8)). FedEx gives no c1, c2: ``FixedWing`` requires them (``ZENG2017_C1``/``_C2`` are
  the values recalled from [24], unverified). FedEx's experiments instead use flat powers,
  ~30 W in flight and ~20 W hovering: that is ``ConstantPower``, the default of
  ``fedex_tour_cost``.
* The brief asked for "the rotary-wing model FedEx uses". FedEx does not use one. ``RotaryWing``
  is the standard rotary-wing model (Zeng, Xu & Zhang, IEEE TWC 18(4), 2019):
  P(V) = P0 (1 + 3 V^2 / U_tip^2) + Pi (sqrt(1 + V^4 / (4 v0^4)) - V^2 / (2 v0^2))^(1/2)
  + d0 rho s A V^3 / 2, with P0 = (delta / 8) rho s A Omega^3 R^3, Pi = (1 + k) W^1.5 /
  sqrt(2 rho A), v0 = sqrt(W / (2 rho A)), U_tip = Omega R. Its defaults are that paper's
  Table I (recalled, consistent with its quoted P0 = 79.86 W, Pi = 88.63 W, v0 = 4.03 m/s).
  P(0) = P0 + Pi is the hover power, so one model covers flight and hover.
* Acceleration, climb and turns are ignored (FedEx Sec. III-A): each leg is flown at constant
  speed in straight and level flight.
* FedEx hovers for T_trans at each of the R_k clients (eq. (8)) and transmits during that time
  (eq. (4)); ``tour_cost`` takes the total hover time and charges ``tx_power_w`` during all of
  it. The server stop, battery swap and the client's own upload cost nothing (FedEx eq. (9)).
* The budget is per round trip (battery swapped at the server), compared with <=.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fl_uav.netmodel._checks import (
    FloatOrArray,
    as_float_array,
    check_field_non_negative,
    check_field_positive,
    check_non_negative,
    check_positive,
    out,
)
from fl_uav.netmodel.radio import airtime_s

# FedEx Sec. VII-A settings.
FEDEX_SPEED_M_S = 10.0
FEDEX_FLIGHT_POWER_W = 30.0
FEDEX_HOVER_POWER_W = 20.0
FEDEX_ENERGY_BUDGET_J = 15e3  # 12 kJ in the Fig. 15-16 ablation
FEDEX_ALTITUDE_M = 1000.0
FEDEX_RATE_BIT_S = 50e6  # "transmission bandwidth of 50 Mbps", read as a rate
FEDEX_TX_POWER_W = 0.1  # 20 dBm
FEDEX_PAYLOAD_BITS = 100e6 * 8  # 100 MB model

# Zeng & Zhang 2017 (FedEx ref. [24]) fixed-wing constants, recalled, unverified.
ZENG2017_C1 = 9.26e-4
ZENG2017_C2 = 2250.0

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


class PropulsionModel(Protocol):
    """Power in straight-and-level flight at a speed, and power while hovering."""

    @property
    def hover_power_w(self) -> float: ...

    def flight_power_w(self, speed_m_s: ArrayLike) -> FloatOrArray: ...


def _golden_min(fn: Callable[[float], float], low: float, high: float) -> float:
    """Argmin of a unimodal function on [low, high] by golden-section search (to 1e-9 m/s)."""
    a, b = low, high
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = fn(c), fn(d)
    while b - a > 1e-9:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = fn(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = fn(d)
    return 0.5 * (a + b)


@dataclass(frozen=True)
class ConstantPower:
    """Speed-independent powers, as FedEx's experiments use (Sec. VII-A: ~30 W and ~20 W)."""

    level_flight_power_w: float = FEDEX_FLIGHT_POWER_W
    hover_power_w: float = FEDEX_HOVER_POWER_W

    def __post_init__(self) -> None:
        check_field_positive(self, 'level_flight_power_w')
        check_field_positive(self, 'hover_power_w')

    def flight_power_w(self, speed_m_s: ArrayLike) -> FloatOrArray:
        """The constant level-flight power, for any speed >= 0."""
        v = check_non_negative(speed_m_s, 'speed_m_s')
        return out(np.full(v.shape, self.level_flight_power_w))


@dataclass(frozen=True)
class FixedWing:
    """FedEx eq. (7) (Zeng & Zhang 2017): P_SLF(V) = c1 V^3 + c2 / V, plus a hover power (eq. 8).

    c1 (kg/m) and c2 (kg m^3 / s^4 in the paper's units, giving W) have no default: FedEx gives
    none. ``ZENG2017_C1``/``ZENG2017_C2`` are the values of FedEx's ref. [24] (unverified).
    """

    c1: float
    c2: float
    hover_power_w: float = FEDEX_HOVER_POWER_W

    def __post_init__(self) -> None:
        check_field_positive(self, 'c1')
        check_field_positive(self, 'c2')
        check_field_positive(self, 'hover_power_w')

    def flight_power_w(self, speed_m_s: ArrayLike) -> FloatOrArray:
        """c1 V^3 + c2 / V; V must be > 0 (a fixed wing cannot hover)."""
        v = check_positive(speed_m_s, 'speed_m_s')
        return out(self.c1 * v ** 3 + self.c2 / v)

    def min_power_speed_m_s(self) -> float:
        """dP/dV = 0: V = (c2 / (3 c1))^(1/4)."""
        return (self.c2 / (3.0 * self.c1)) ** 0.25

    def max_range_speed_m_s(self) -> float:
        """Minimum energy per metre P(V) / V: V = (c2 / c1)^(1/4)."""
        return (self.c2 / self.c1) ** 0.25


@dataclass(frozen=True)
class RotaryWing:
    """Rotary-wing propulsion power (Zeng, Xu & Zhang 2019); defaults from that paper's Table I.

    weight_n: aircraft weight W (20 N). air_density_kg_m3: rho (1.225).
    rotor_radius_m: R (0.4). rotor_disc_area_m2: A (0.503). blade_angular_velocity_rad_s:
    Omega (300). rotor_solidity: s (0.05). fuselage_drag_ratio: d0 (0.6).
    induced_power_correction: k (0.1). profile_drag_coeff: delta (0.012).
    """

    weight_n: float = 20.0
    air_density_kg_m3: float = 1.225
    rotor_radius_m: float = 0.4
    rotor_disc_area_m2: float = 0.503
    blade_angular_velocity_rad_s: float = 300.0
    rotor_solidity: float = 0.05
    fuselage_drag_ratio: float = 0.6
    induced_power_correction: float = 0.1
    profile_drag_coeff: float = 0.012

    def __post_init__(self) -> None:
        for name in ('weight_n', 'air_density_kg_m3', 'rotor_radius_m', 'rotor_disc_area_m2',
                     'blade_angular_velocity_rad_s', 'rotor_solidity', 'profile_drag_coeff'):
            check_field_positive(self, name)
        check_field_non_negative(self, 'fuselage_drag_ratio')
        check_field_non_negative(self, 'induced_power_correction')

    @property
    def blade_profile_power_w(self) -> float:
        """P0 = (delta / 8) rho s A Omega^3 R^3 (hover blade-profile power)."""
        return (self.profile_drag_coeff / 8.0 * self.air_density_kg_m3 * self.rotor_solidity
                * self.rotor_disc_area_m2 * self.tip_speed_m_s ** 3)

    @property
    def induced_power_w(self) -> float:
        """Pi = (1 + k) W^(3/2) / sqrt(2 rho A) (hover induced power)."""
        return ((1.0 + self.induced_power_correction) * self.weight_n ** 1.5
                / math.sqrt(2.0 * self.air_density_kg_m3 * self.rotor_disc_area_m2))

    @property
    def tip_speed_m_s(self) -> float:
        """U_tip = Omega R."""
        return self.blade_angular_velocity_rad_s * self.rotor_radius_m

    @property
    def mean_induced_velocity_m_s(self) -> float:
        """v0 = sqrt(W / (2 rho A)), the mean rotor induced velocity in hover."""
        return math.sqrt(self.weight_n / (2.0 * self.air_density_kg_m3 * self.rotor_disc_area_m2))

    @property
    def hover_power_w(self) -> float:
        """P(0) = P0 + Pi."""
        return self.blade_profile_power_w + self.induced_power_w

    def flight_power_w(self, speed_m_s: ArrayLike) -> FloatOrArray:
        """Blade profile + induced + parasite power at horizontal speed V >= 0."""
        v = check_non_negative(speed_m_s, 'speed_m_s')
        v0 = self.mean_induced_velocity_m_s
        x = v ** 2 / (2.0 * v0 ** 2)  # V^2 / (2 v0^2); the induced term is sqrt(1+x^2) - x
        induced_factor = np.sqrt(1.0 / (np.sqrt(1.0 + x * x) + x))  # same value, no cancellation
        blade = self.blade_profile_power_w * (1.0 + 3.0 * v ** 2 / self.tip_speed_m_s ** 2)
        parasite = (0.5 * self.fuselage_drag_ratio * self.air_density_kg_m3
                    * self.rotor_solidity * self.rotor_disc_area_m2 * v ** 3)
        return out(blade + self.induced_power_w * induced_factor + parasite)

    def min_power_speed_m_s(self) -> float:
        """The speed of least power (maximum endurance), by golden-section search."""
        return _golden_min(lambda v: float(self.flight_power_w(v)), 0.0, self.tip_speed_m_s)

    def max_range_speed_m_s(self) -> float:
        """The speed of least energy per metre, P(V) / V, by golden-section search."""
        return _golden_min(lambda v: float(self.flight_power_w(v)) / v, 1e-6,
                           self.tip_speed_m_s)


def _waypoints(waypoints_m: ArrayLike, closed: bool) -> NDArray[np.float64]:
    pts = as_float_array(waypoints_m, 'waypoints_m')
    if pts.ndim != 2 or pts.shape[0] < 1 or pts.shape[1] not in (2, 3):
        raise ValueError(f'waypoints_m must have shape (n >= 1, 2 or 3), got {pts.shape}')
    if not np.all(np.isfinite(pts)):
        raise ValueError('waypoints_m must be finite')
    return np.vstack([pts, pts[:1]]) if closed else pts


def segment_lengths_m(waypoints_m: ArrayLike, closed: bool = False) -> NDArray[np.float64]:
    """Leg lengths of a polyline in metres; ``closed`` adds the leg back to the start."""
    pts = _waypoints(waypoints_m, closed)
    return np.linalg.norm(np.diff(pts, axis=0), axis=1)


def tour_length_m(waypoints_m: ArrayLike, closed: bool = False) -> float:
    """sum_ij D_ij z_ij of FedEx eq. (5) for the tour through ``waypoints_m`` in order."""
    return float(segment_lengths_m(waypoints_m, closed).sum())


def _segment_speeds(speed_m_s: ArrayLike, count: int) -> NDArray[np.float64]:
    v = check_positive(speed_m_s, 'speed_m_s')
    if v.ndim == 0:
        return np.full(count, float(v))
    if v.shape != (count,):
        raise ValueError(f'speed_m_s must be a scalar or one speed per leg ({count}), '
                         f'got shape {v.shape}')
    return v


def flight_time_s(waypoints_m: ArrayLike, speed_m_s: ArrayLike, closed: bool = False) -> float:
    """FedEx eq. (5): T_SLF = sum of leg length / speed (one speed, or one per leg)."""
    lengths = segment_lengths_m(waypoints_m, closed)
    return float(np.sum(lengths / _segment_speeds(speed_m_s, lengths.size)))


def flight_energy_j(waypoints_m: ArrayLike, speed_m_s: ArrayLike, propulsion: PropulsionModel,
                    closed: bool = False) -> float:
    """FedEx eq. (7): E_SLF = sum over legs of (length / V) P(V)."""
    lengths = segment_lengths_m(waypoints_m, closed)
    v = _segment_speeds(speed_m_s, lengths.size)
    if lengths.size == 0:
        return 0.0
    return float(np.sum(lengths / v * np.asarray(propulsion.flight_power_w(v))))


def hover_energy_j(dwell_time_s: ArrayLike, propulsion: PropulsionModel) -> FloatOrArray:
    """FedEx eq. (8): E_hover = t_hover p_hover."""
    return out(check_non_negative(dwell_time_s, 'dwell_time_s') * propulsion.hover_power_w)


def fits_energy_budget(energy_j: ArrayLike, budget_j: ArrayLike = FEDEX_ENERGY_BUDGET_J
                       ) -> bool | NDArray[np.bool_]:
    """FedEx eqs. (26)/(28): E_prop + E_trans <= E_budget (15 kJ in Sec. VII-A)."""
    e = check_non_negative(energy_j, 'energy_j')
    b = check_non_negative(budget_j, 'budget_j')
    fits = e <= b
    return bool(fits) if fits.ndim == 0 else fits


@dataclass(frozen=True)
class TourCost:
    """Time and energy of one round trip (FedEx eqs. (4), (5), (7), (8), (9))."""

    length_m: float
    flight_time_s: float
    hover_time_s: float
    flight_energy_j: float
    hover_energy_j: float
    tx_energy_j: float

    @property
    def total_time_s(self) -> float:
        """FedEx eq. (9): Delta_k = hover (transmission) time + T_SLF."""
        return self.flight_time_s + self.hover_time_s

    @property
    def propulsion_energy_j(self) -> float:
        """E_prop = E_hover + E_SLF."""
        return self.flight_energy_j + self.hover_energy_j

    @property
    def total_energy_j(self) -> float:
        """E_prop + E_trans, the left side of FedEx eq. (26)."""
        return self.propulsion_energy_j + self.tx_energy_j

    def fits(self, budget_j: float = FEDEX_ENERGY_BUDGET_J) -> bool:
        """FedEx eq. (26) for this tour."""
        return bool(fits_energy_budget(self.total_energy_j, budget_j))


def tour_cost(waypoints_m: ArrayLike, speed_m_s: ArrayLike, propulsion: PropulsionModel,
              hover_time_s: ArrayLike = 0.0, tx_power_w: float = 0.0,
              closed: bool = False) -> TourCost:
    """Time and energy of flying ``waypoints_m`` in order and hovering ``hover_time_s``.

    ``hover_time_s`` is a total or one dwell per stop (summed); the radio transmits at
    ``tx_power_w`` during all hover time (FedEx eq. (4): E_trans = p R_k T_trans).
    """
    lengths = segment_lengths_m(waypoints_m, closed)
    hover = float(np.sum(check_non_negative(hover_time_s, 'hover_time_s')))
    p_tx = float(check_non_negative(tx_power_w, 'tx_power_w'))
    return TourCost(
        length_m=float(lengths.sum()),
        flight_time_s=flight_time_s(waypoints_m, speed_m_s, closed),
        hover_time_s=hover,
        flight_energy_j=flight_energy_j(waypoints_m, speed_m_s, propulsion, closed),
        hover_energy_j=float(hover_energy_j(hover, propulsion)),
        tx_energy_j=p_tx * hover,
    )


def fedex_tour_cost(waypoints_m: ArrayLike, speed_m_s: float = FEDEX_SPEED_M_S,
                    propulsion: PropulsionModel | None = None,
                    payload_bits: float = FEDEX_PAYLOAD_BITS,
                    rate_bit_s: float = FEDEX_RATE_BIT_S,
                    tx_power_w: float = FEDEX_TX_POWER_W) -> TourCost:
    """A FedEx round trip: server ``waypoints_m[0]`` -> clients in order -> back to the server.

    Hovers T_trans = payload / rate (eq. (3)) over each of the R_k = len - 1 clients.
    Defaults are FedEx Sec. VII-A: 10 m/s, 30 W / 20 W, 100 MB at 50 Mbit/s, 0.1 W.
    """
    pts = _waypoints(waypoints_m, closed=False)
    t_trans = float(airtime_s(payload_bits, rate_bit_s))
    model = ConstantPower() if propulsion is None else propulsion
    return tour_cost(pts, speed_m_s, model, (pts.shape[0] - 1) * t_trans, tx_power_w,
                     closed=True)


def max_tour_length_m(budget_j: float, speed_m_s: float, propulsion: PropulsionModel,
                      hover_time_s: float = 0.0, tx_power_w: float = 0.0) -> float:
    """Longest tour at constant ``speed_m_s`` that meets FedEx eq. (26); 0 if none does.

    L_max = (E_budget - t_hover (p_hover + p_tx)) V / P(V) (FedEx digest Sec. 5.1).
    """
    budget = float(check_non_negative(budget_j, 'budget_j'))
    v = float(check_positive(speed_m_s, 'speed_m_s'))
    hover = float(check_non_negative(hover_time_s, 'hover_time_s'))
    p_tx = float(check_non_negative(tx_power_w, 'tx_power_w'))
    left = budget - hover * (propulsion.hover_power_w + p_tx)
    return max(0.0, left * v / float(propulsion.flight_power_w(v)))
