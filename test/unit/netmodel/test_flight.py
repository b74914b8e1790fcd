"""Flight model: propulsion power curves, FedEx tour time/energy (eqs. 4-9) and the budget."""

import math

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from fl_uav.netmodel.flight import (
    FEDEX_ENERGY_BUDGET_J,
    ZENG2017_C1,
    ZENG2017_C2,
    ConstantPower,
    FixedWing,
    RotaryWing,
    fedex_tour_cost,
    fits_energy_budget,
    flight_energy_j,
    flight_time_s,
    hover_energy_j,
    max_tour_length_m,
    segment_lengths_m,
    tour_cost,
    tour_length_m,
)

HYPOTHESIS = settings(max_examples=50, deadline=None, derandomize=True)
SQUARE = np.array([[0.0, 0.0], [1000.0, 0.0], [1000.0, 1000.0], [0.0, 1000.0]])


def test_rotary_wing_hover_terms_by_hand():
    # Arrange: Zeng et al. 2019 Table I defaults
    r = RotaryWing()
    # Act / Assert: P0 = delta/8 rho s A (Omega R)^3, Pi = (1+k) W^1.5 / sqrt(2 rho A)
    assert r.blade_profile_power_w == pytest.approx(0.012 / 8 * 1.225 * 0.05 * 0.503 * 120 ** 3)
    assert r.blade_profile_power_w == pytest.approx(79.86, abs=0.01)
    assert r.induced_power_w == pytest.approx(1.1 * 20 ** 1.5 / math.sqrt(2 * 1.225 * 0.503))
    assert r.induced_power_w == pytest.approx(88.63, abs=0.01)
    assert r.mean_induced_velocity_m_s == pytest.approx(4.03, abs=0.01)
    assert r.tip_speed_m_s == pytest.approx(120.0)


def test_rotary_wing_power_at_zero_speed_is_hover_power():
    r = RotaryWing()
    assert r.flight_power_w(0.0) == pytest.approx(r.hover_power_w)
    assert r.hover_power_w == pytest.approx(r.blade_profile_power_w + r.induced_power_w)


def test_rotary_wing_power_curve_has_the_bathtub_shape():
    # Arrange
    r = RotaryWing()
    v_mp = r.min_power_speed_m_s()
    v_me = r.max_range_speed_m_s()
    speeds = np.linspace(0.0, 40.0, 401)
    # Act
    p = np.asarray(r.flight_power_w(speeds))
    # Assert: falls to a minimum at V_mp, then rises; V_mp < V_me (endurance vs range)
    before, after = speeds <= v_mp, speeds >= v_mp
    assert np.all(np.diff(p[before]) < 0) and np.all(np.diff(p[after]) > 0)
    assert r.mean_induced_velocity_m_s < v_mp < v_me < r.tip_speed_m_s
    assert float(r.flight_power_w(v_mp)) < r.hover_power_w
    assert v_mp == pytest.approx(10.2, abs=0.1) and v_me == pytest.approx(18.3, abs=0.1)
    per_m = p[1:] / speeds[1:]
    assert speeds[1:][np.argmin(per_m)] == pytest.approx(v_me, abs=0.1)


def test_rotary_wing_parasite_term_dominates_at_high_speed():
    r = RotaryWing()
    v = 60.0
    parasite = 0.5 * 0.6 * 1.225 * 0.05 * 0.503 * v ** 3
    blade = r.blade_profile_power_w * (1 + 3 * v ** 2 / 120 ** 2)
    assert float(r.flight_power_w(v)) == pytest.approx(parasite + blade, rel=0.02)


def test_fixed_wing_eq_7_and_closed_form_optimal_speeds():
    # Arrange
    fw = FixedWing(ZENG2017_C1, ZENG2017_C2)
    v_mp, v_me = fw.min_power_speed_m_s(), fw.max_range_speed_m_s()
    eps = 1e-4
    # Act / Assert: P = c1 V^3 + c2 / V; dP/dV = 0 at V_mp; d(P/V)/dV = 0 at V_me
    assert fw.flight_power_w(30.0) == pytest.approx(ZENG2017_C1 * 27000 + ZENG2017_C2 / 30)
    assert v_mp == pytest.approx(30.0, abs=0.01)
    slope = (fw.flight_power_w(v_mp + eps) - fw.flight_power_w(v_mp - eps)) / (2 * eps)
    assert abs(slope) < 1e-3
    per_m = [float(fw.flight_power_w(v)) / v for v in (v_me - 1, v_me, v_me + 1)]
    assert per_m[1] < per_m[0] and per_m[1] < per_m[2]


def test_fixed_wing_cannot_be_asked_for_zero_speed():
    with pytest.raises(ValueError, match='speed_m_s'):
        FixedWing(1e-3, 100.0).flight_power_w(0.0)


def test_fedex_constant_power_costs_three_joules_per_metre():
    # FedEx digest Sec. 5.1: 30 W at 10 m/s -> 3 J/m
    assert flight_energy_j([[0, 0], [1000, 0]], 10.0, ConstantPower()) == pytest.approx(3000.0)


def test_tour_length_open_and_closed():
    assert tour_length_m(SQUARE) == pytest.approx(3000.0)
    assert tour_length_m(SQUARE, closed=True) == pytest.approx(4000.0)
    np.testing.assert_allclose(segment_lengths_m([[0, 0, 0], [3, 4, 12]]), [13.0])
    assert tour_length_m([[5.0, 5.0]]) == 0.0


def test_tour_energy_is_sum_of_segment_energies_plus_hover():
    # Arrange: rotary wing, one speed per leg, 3-D waypoints
    r = RotaryWing()
    pts = np.array([[0, 0, 30], [120, 50, 30], [120, 300, 40], [-80, 10, 30]], float)
    speeds = np.array([5.0, 12.0, 20.0])
    # Act
    cost = tour_cost(pts, speeds, r, hover_time_s=[30.0, 45.0], tx_power_w=0.5)
    # Assert
    legs = [np.linalg.norm(b - a) for a, b in zip(pts[:-1], pts[1:])]
    flight = sum(d / v * float(r.flight_power_w(v)) for d, v in zip(legs, speeds))
    assert cost.flight_energy_j == pytest.approx(flight)
    assert cost.hover_energy_j == pytest.approx(75.0 * r.hover_power_w)
    assert cost.tx_energy_j == pytest.approx(37.5)
    assert cost.total_energy_j == pytest.approx(flight + 75.0 * (r.hover_power_w + 0.5))
    assert cost.flight_time_s == pytest.approx(sum(d / v for d, v in zip(legs, speeds)))
    assert cost.total_time_s == pytest.approx(cost.flight_time_s + 75.0)


def test_fedex_round_trip_by_hand():
    # Arrange: server at a corner, 3 clients at the other corners; FedEx Sec. VII-A defaults
    # Act
    cost = fedex_tour_cost(SQUARE)
    # Assert: eq. (5) 4000 m / 10 m/s; eq. (3) 16 s per client; eqs. (4), (7), (8):
    # 400 s * 30 W + 3 * 16 s * (20 W + 0.1 W); eq. (9) RTT = 400 + 48 s
    assert cost.length_m == pytest.approx(4000.0)
    assert cost.flight_time_s == pytest.approx(400.0)
    assert cost.hover_time_s == pytest.approx(48.0)
    assert cost.total_energy_j == pytest.approx(12000.0 + 3 * 321.6)
    assert cost.total_time_s == pytest.approx(448.0)
    assert cost.fits(FEDEX_ENERGY_BUDGET_J) and not cost.fits(12e3)


@pytest.mark.parametrize(('budget_j', 'clients', 'length_m'), [
    (15e3, 10, 3928.0), (12e3, 10, 2928.0), (15e3, 20, 2856.0)])
def test_max_tour_length_matches_fedex_digest(budget_j, clients, length_m):
    # FedEx digest Sec. 5.1: L_max = (E_budget - 321.6 R_k) / 3 m
    got = max_tour_length_m(budget_j, 10.0, ConstantPower(), clients * 16.0, 0.1)
    assert got == pytest.approx(length_m)


def test_max_tour_length_is_zero_when_hovering_alone_breaks_the_budget():
    assert max_tour_length_m(100.0, 10.0, ConstantPower(), hover_time_s=10.0) == 0.0


def test_budget_boundary_is_inclusive():
    assert fits_energy_budget(15e3, 15e3)
    assert not fits_energy_budget(15e3 + 1e-6, 15e3)
    np.testing.assert_array_equal(fits_energy_budget(np.array([1.0, 2.0]), 1.5), [True, False])


def test_hover_energy_eq_8():
    assert hover_energy_j(16.0, ConstantPower()) == pytest.approx(320.0)
    np.testing.assert_allclose(hover_energy_j(np.array([1.0, 2.0]), RotaryWing()),
                               [168.484, 336.968], atol=1e-3)


@HYPOTHESIS
@given(scale=st.floats(1.01, 10.0), v=st.floats(1.0, 30.0),
       model=st.sampled_from([ConstantPower(), RotaryWing(), FixedWing(1e-3, 100.0)]))
def test_energy_increases_with_distance(scale, v, model):
    pts = np.array([[0.0, 0.0], [300.0, 40.0], [310.0, 500.0]])
    assert flight_energy_j(pts * scale, v, model) > flight_energy_j(pts, v, model)
    assert flight_time_s(pts * scale, v) > flight_time_s(pts, v)


@HYPOTHESIS
@given(v=st.floats(0.5, 50.0), factor=st.floats(1.01, 5.0), hover=st.floats(0.0, 1e3),
       extra=st.floats(1.0, 1e3))
def test_time_falls_with_speed_and_energy_grows_with_hover(v, factor, hover, extra):
    r = RotaryWing()
    assert flight_time_s(SQUARE, v * factor) < flight_time_s(SQUARE, v)
    more = tour_cost(SQUARE, v, r, hover + extra).total_energy_j
    assert more > tour_cost(SQUARE, v, r, hover).total_energy_j


@pytest.mark.parametrize(('factory', 'field'), [
    (lambda: RotaryWing(weight_n=0.0), 'weight_n'),
    (lambda: RotaryWing(air_density_kg_m3=-1.0), 'air_density_kg_m3'),
    (lambda: RotaryWing(rotor_solidity=float('nan')), 'rotor_solidity'),
    (lambda: RotaryWing(fuselage_drag_ratio=-0.1), 'fuselage_drag_ratio'),
    (lambda: FixedWing(0.0, 1.0), 'c1'),
    (lambda: FixedWing(1.0, -1.0), 'c2'),
    (lambda: FixedWing(1.0, 1.0, hover_power_w=0.0), 'hover_power_w'),
    (lambda: ConstantPower(level_flight_power_w=0.0), 'level_flight_power_w'),
    (lambda: ConstantPower(hover_power_w=-20.0), 'hover_power_w'),
])
def test_models_reject_bad_fields(factory, field):
    with pytest.raises(ValueError, match=field):
        factory()


@pytest.mark.parametrize(('call', 'name'), [
    (lambda: tour_length_m([[0, 0, 0, 0]]), 'waypoints_m'),
    (lambda: tour_length_m([]), 'waypoints_m'),
    (lambda: tour_length_m([[0, 0], [float('inf'), 0]]), 'waypoints_m'),
    (lambda: flight_time_s(SQUARE, 0.0), 'speed_m_s'),
    (lambda: flight_time_s(SQUARE, [1.0, 2.0]), 'speed_m_s'),
    (lambda: tour_cost(SQUARE, 5.0, ConstantPower(), hover_time_s=-1.0), 'hover_time_s'),
    (lambda: tour_cost(SQUARE, 5.0, ConstantPower(), tx_power_w=-1.0), 'tx_power_w'),
    (lambda: hover_energy_j(-1.0, ConstantPower()), 'dwell_time_s'),
    (lambda: fits_energy_budget(1.0, -1.0), 'budget_j'),
    (lambda: RotaryWing().flight_power_w(-1.0), 'speed_m_s'),
    (lambda: max_tour_length_m(1e3, 0.0, ConstantPower()), 'speed_m_s'),
])
def test_functions_reject_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
