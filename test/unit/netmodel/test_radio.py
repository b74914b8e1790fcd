"""Radio model: closed forms, the FedDPQ digest's numbers, monotonicity and validation."""

import math

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from fl_uav.netmodel import radio
from fl_uav.netmodel.radio import (
    RadioLink,
    airtime_s,
    dbm_to_w,
    ergodic_rate_rayleigh_bit_s,
    free_space_ref_gain,
    los_probability,
    packet_error_prob,
    packet_error_prob_rayleigh,
    path_gain,
    power_for_packet_error_w,
    rate_outage_prob_rayleigh,
    rayleigh_power_gain,
    sample_upload_success,
    shannon_rate_bit_s,
    snr,
    snr_for_packet_error,
    tx_energy_j,
    w_to_dbm,
)

EULER_GAMMA = 0.5772156649015329
HYPOTHESIS = settings(max_examples=50, deadline=None, derandomize=True)


def _e1_series(x: float) -> float:
    """Exponential integral E1(x) = -gamma - ln x - sum_k (-x)^k / (k k!), for x <= 2."""
    total, term = 0.0, 1.0
    for k in range(1, 80):
        term *= -x / k
        total += term / k
    return -EULER_GAMMA - math.log(x) - total


def _k1_series(x: float) -> float:
    """Modified Bessel K1(x) from its power series (DLMF 10.31.1, n = 1), for x <= 3."""
    y = x * x / 4.0
    i1_sum = psi_sum = 0.0
    harmonic = 0.0  # H_k
    term = 1.0  # y^k / (k! (k+1)!)
    for k in range(60):
        if k > 0:
            harmonic += 1.0 / k
            term *= y / (k * (k + 1))
        psi_k1 = -EULER_GAMMA + harmonic
        psi_k2 = psi_k1 + 1.0 / (k + 1)
        i1_sum += term
        psi_sum += (psi_k1 + psi_k2) * term
    i1 = x / 2.0 * i1_sum
    return 1.0 / x + math.log(x / 2.0) * i1 - x / 4.0 * psi_sum


def test_dbm_conversions_match_hand_values():
    # Arrange / Act
    noise_w = dbm_to_w(-174.0) * 1e6  # FedDPQ Table I: N0 = -174 dBm/Hz over B = 1 MHz
    # Assert: digest Sec. 1.7, B N0 = 3.98e-15 W
    assert noise_w == pytest.approx(3.981e-15, rel=1e-3)
    assert w_to_dbm(0.1) == pytest.approx(20.0)  # FedEx: 20 dBm = 0.1 W
    assert radio.noise_power_w(1e6) == pytest.approx(noise_w)


def test_path_gain_is_inverse_square_in_feddpq_and_free_space_at_carrier():
    # Arrange
    d = np.array([100.0, 200.0, 300.0])
    # Act
    g = path_gain(d)
    beta0 = free_space_ref_gain(2.4e9)
    # Assert: FedDPQ eq. (15) mean gain 1/d^2; Friis loss at 1 m, 2.4 GHz:
    # 20 log10(4 pi f / c) = 40.052 dB
    np.testing.assert_allclose(g, 1.0 / d ** 2)
    assert 10 * math.log10(beta0) == pytest.approx(-40.052, abs=1e-3)
    assert path_gain(10.0, ref_gain=1e-4, exponent=3.0) == pytest.approx(1e-7)


def test_shannon_rate_hand_values():
    # Arrange / Act / Assert: B log2(1 + snr), FedEx eq. (2)
    assert shannon_rate_bit_s(1e6, 3.0) == pytest.approx(2e6)
    assert shannon_rate_bit_s(1e6, 1.0) == pytest.approx(1e6)
    assert shannon_rate_bit_s(2e6, 0.0) == 0.0
    np.testing.assert_allclose(shannon_rate_bit_s(1e6, np.array([1.0, 3.0, 7.0])),
                               [1e6, 2e6, 3e6])


def test_snr_includes_interference_and_noise():
    # p h / (I + B N0): 0.1 * 1/200^2 / 1e-8 = 250 (FedDPQ digest Sec. 1.7)
    assert snr(0.1, 1.0 / 200 ** 2, 0.0, 1e-8) == pytest.approx(250.0)
    assert snr(0.1, 1.0 / 200 ** 2, 1e-8) == pytest.approx(250.0)


@pytest.mark.parametrize('mean_snr', [0.5, 1.0, 10.0, 250.0, 1e4])
def test_ergodic_rate_matches_exponential_integral_closed_form(mean_snr):
    # Arrange: E[ln(1 + g zeta)] = e^(1/g) E1(1/g) for zeta ~ Exp(1)
    expected = 1e6 * math.exp(1 / mean_snr) * _e1_series(1 / mean_snr) / math.log(2)
    # Act
    rate = ergodic_rate_rayleigh_bit_s(1e6, mean_snr)
    # Assert
    assert rate == pytest.approx(expected, rel=1e-10)


def test_ergodic_rate_matches_digest_example_and_jensen():
    # FedDPQ digest Sec. 1.7: mean SNR 250 at B = 1 MHz gives E[R] ~ 7.2 Mbit/s
    rate = ergodic_rate_rayleigh_bit_s(1e6, 250.0)
    assert rate == pytest.approx(7.167e6, rel=1e-3)
    assert rate < shannon_rate_bit_s(1e6, 250.0)  # Jensen: fading costs rate


def test_ergodic_rate_agrees_with_seeded_monte_carlo():
    # Arrange
    rng = np.random.default_rng(7)
    zeta = rayleigh_power_gain(rng, 200_000)
    # Act
    mc = float(np.mean(shannon_rate_bit_s(1e6, 30.0 * zeta)))
    # Assert
    assert ergodic_rate_rayleigh_bit_s(1e6, 30.0) == pytest.approx(mc, rel=5e-3)


def test_rayleigh_draws_are_deterministic_given_the_generator():
    a = rayleigh_power_gain(np.random.default_rng(3), 1000)
    b = rayleigh_power_gain(np.random.default_rng(3), 1000)
    np.testing.assert_array_equal(a, b)
    assert np.all(a >= 0) and float(np.mean(a)) == pytest.approx(1.0, abs=0.1)
    assert isinstance(rayleigh_power_gain(np.random.default_rng(3)), float)


@pytest.mark.parametrize('a', [1e-4, 1.588e-3, 0.0289, 0.5, 2.0])
def test_rayleigh_packet_error_matches_bessel_closed_form(a):
    # Arrange: q = 1 - 2 sqrt(a) K1(2 sqrt(a)) with a = Upsilon / snr_mean (digest Sec. 1.6)
    x = 2 * math.sqrt(a)
    expected = 1 - x * _k1_series(x)
    # Act
    q = packet_error_prob_rayleigh(1.0 / a, waterfall_threshold=1.0)
    # Assert
    assert q == pytest.approx(expected, rel=1e-9, abs=1e-13)


@pytest.mark.parametrize(('q', 'a_star'), [(0.01, 1.588e-3), (0.05, 1.151e-2), (0.1, 2.890e-2),
                                           (0.2, 7.861e-2)])
def test_inverse_packet_error_matches_digest_table(q, a_star):
    # FedDPQ digest Sec. 1.6: a*(q) values for Rayleigh fading
    a = 1.0 / snr_for_packet_error(q, waterfall_threshold=1.0)
    assert a == pytest.approx(a_star, rel=1e-3)


def test_fixed_channel_inverse_is_minus_log():
    # 1 - exp(-a) = q  =>  a = -ln(1 - q)
    snr_needed = snr_for_packet_error(0.1, waterfall_threshold=2.0, rayleigh=False)
    assert snr_needed == pytest.approx(2.0 / -math.log(0.9))
    assert packet_error_prob(snr_needed, 2.0) == pytest.approx(0.1)


@HYPOTHESIS
@given(q=st.floats(1e-6, 0.99), rayleigh=st.booleans(),
       distance_m=st.floats(10.0, 1000.0), interference_w=st.floats(0.0, 1e-7))
def test_power_for_target_q_round_trips(q, rayleigh, distance_m, interference_w):
    # Arrange
    h = path_gain(distance_m)
    n = radio.noise_power_w(1e6) + interference_w
    # Act
    p = power_for_packet_error_w(q, h, n, rayleigh=rayleigh)
    g = snr(p, h, n)
    back = packet_error_prob_rayleigh(g) if rayleigh else packet_error_prob(g)
    # Assert
    assert back == pytest.approx(q, rel=1e-8)


def test_radio_link_reproduces_feddpq_digest_uniform_q_example():
    # FedDPQ digest Sec. 1.7: q = 0.05, Upsilon = 0.023 dB, B = 1 MHz
    near = RadioLink(interference_w=1.2e-8)
    far = RadioLink(interference_w=1.8e-8)
    # Act
    p_near = near.power_for_packet_error_w(0.05, 150.0)
    p_far = far.power_for_packet_error_w(0.05, 250.0)
    # Assert: p = 0.024 W and 0.098 W, E[R] = 5.69 Mbit/s, E_cu(delta = 8) = 0.37 J and 1.54 J
    assert p_near == pytest.approx(0.0236, abs=5e-4)
    assert p_far == pytest.approx(0.0982, abs=5e-4)
    assert near.packet_error_prob(150.0, p_near) == pytest.approx(0.05)
    assert near.rate_bit_s(150.0, p_near) == pytest.approx(5.69e6, rel=2e-3)
    assert far.rate_bit_s(250.0, p_far) == pytest.approx(near.rate_bit_s(150.0, p_near))
    bits = 8 * 11_173_962
    assert near.upload_energy_j(bits, 150.0, p_near) == pytest.approx(0.37, abs=0.01)
    assert far.upload_energy_j(bits, 250.0, p_far) == pytest.approx(1.54, abs=0.01)


def test_radio_link_defaults_are_feddpq_table_one():
    link = RadioLink()
    assert link.bandwidth_hz == 1e6 and link.tx_power_w == 0.1
    assert link.noise_power_w == pytest.approx(3.981e-15, rel=1e-3)
    assert link.mean_snr(200.0) == pytest.approx(0.1 / 200 ** 2 / (1.5e-8 + link.noise_power_w))
    assert link.ref_gain_linear == 1.0


def test_radio_link_without_fading_uses_shannon_and_fixed_channel_error():
    link = RadioLink(fading='none', interference_w=1e-8)
    g = link.mean_snr(200.0)
    assert link.rate_bit_s(200.0) == pytest.approx(shannon_rate_bit_s(1e6, g))
    assert link.packet_error_prob(200.0) == pytest.approx(packet_error_prob(g))
    rng = np.random.default_rng(0)
    assert link.sample_rate_bit_s(200.0, rng) == pytest.approx(link.rate_bit_s(200.0))


def test_sampled_rate_is_deterministic_per_seed():
    link = RadioLink()
    d = np.array([100.0, 200.0, 300.0])
    a = link.sample_rate_bit_s(d, np.random.default_rng(11))
    b = link.sample_rate_bit_s(d, np.random.default_rng(11))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (3,)


def test_carrier_frequency_sets_free_space_reference_gain():
    link = RadioLink(carrier_hz=2.4e9)
    assert link.ref_gain_linear == pytest.approx(free_space_ref_gain(2.4e9))
    assert link.mean_gain(100.0) == pytest.approx(free_space_ref_gain(2.4e9) / 1e4)


def test_airtime_and_tx_energy_fedex_numbers():
    # FedEx digest Sec. 5.1: 100 MB at 50 Mbit/s is 16 s, at 0.1 W is 1.6 J
    t = airtime_s(100e6 * 8, 50e6)
    assert t == pytest.approx(16.0)
    assert tx_energy_j(0.1, t) == pytest.approx(1.6)


def test_upload_success_is_deterministic_and_has_rate_one_minus_q():
    a = sample_upload_success(np.random.default_rng(5), 0.2, size=20_000)
    b = sample_upload_success(np.random.default_rng(5), 0.2, size=20_000)
    np.testing.assert_array_equal(a, b)
    assert float(np.mean(a)) == pytest.approx(0.8, abs=0.01)
    per_device = sample_upload_success(np.random.default_rng(5), np.array([0.0, 1.0]))
    np.testing.assert_array_equal(per_device, [True, False])


def test_rate_outage_is_one_half_at_the_median_fade():
    # P(zeta < (2^r - 1)/g) = 1/2 when (2^r - 1)/g = ln 2
    g = 10.0
    r = math.log2(1 + g * math.log(2))
    assert rate_outage_prob_rayleigh(g, r) == pytest.approx(0.5)
    assert rate_outage_prob_rayleigh(0.0, 0.0) == 0.0


def test_los_probability_shape():
    # At theta = a the sigmoid is 1 / (1 + a); it increases with elevation
    assert los_probability(9.61, 9.61, 0.16) == pytest.approx(1 / 10.61)
    p = np.asarray(los_probability(np.linspace(0, 90, 10), 9.61, 0.16))
    assert np.all(np.diff(p) > 0) and p[-1] > 0.99
    loss = radio.air_to_ground_path_loss_db(0.0, 100.0, 2e9, 9.61, 0.16, 1.0, 20.0)
    assert loss == pytest.approx(20 * math.log10(4 * math.pi * 2e9 * 100 / 299_792_458) + 1.0,
                                 abs=0.01)


@HYPOTHESIS
@given(p1=st.floats(1e-4, 1.0), factor=st.floats(1.01, 100.0), d=st.floats(10.0, 2000.0))
def test_rate_increases_and_packet_error_decreases_with_power(p1, factor, d):
    # Arrange
    link = RadioLink()
    p2 = p1 * factor
    # Act / Assert
    assert link.rate_bit_s(d, p2) > link.rate_bit_s(d, p1)
    assert link.packet_error_prob(d, p2) < link.packet_error_prob(d, p1)
    fixed = RadioLink(fading='none')
    assert fixed.rate_bit_s(d, p2) > fixed.rate_bit_s(d, p1)
    assert fixed.packet_error_prob(d, p2) < fixed.packet_error_prob(d, p1)


@HYPOTHESIS
@given(d1=st.floats(10.0, 1000.0), factor=st.floats(1.01, 10.0))
def test_rate_decreases_and_airtime_grows_with_distance(d1, factor):
    link = RadioLink()
    d2 = d1 * factor
    assert link.rate_bit_s(d2) < link.rate_bit_s(d1)
    assert link.airtime_s(1e6, d2) > link.airtime_s(1e6, d1)


@pytest.mark.parametrize(('kwargs', 'field'), [
    ({'bandwidth_hz': 0.0}, 'bandwidth_hz'),
    ({'tx_power_w': -1.0}, 'tx_power_w'),
    ({'noise_psd_w_hz': -1e-21}, 'noise_psd_w_hz'),
    ({'interference_w': float('nan')}, 'interference_w'),
    ({'path_loss_exponent': 0.0}, 'path_loss_exponent'),
    ({'waterfall_threshold': 0.0}, 'waterfall_threshold'),
    ({'ref_gain': -1.0}, 'ref_gain'),
    ({'carrier_hz': 0.0}, 'carrier_hz'),
    ({'ref_gain': 1e-4, 'carrier_hz': 2.4e9}, 'carrier_hz'),
    ({'fading': 'rician'}, 'fading'),
    ({'noise_psd_w_hz': 0.0, 'interference_w': 0.0}, 'interference_w'),
])
def test_radio_link_rejects_bad_fields(kwargs, field):
    with pytest.raises(ValueError, match=field):
        RadioLink(**kwargs)


@pytest.mark.parametrize(('call', 'name'), [
    (lambda: path_gain(0.0), 'distance_m'),
    (lambda: path_gain(-5.0), 'distance_m'),
    (lambda: shannon_rate_bit_s(-1.0, 1.0), 'bandwidth_hz'),
    (lambda: shannon_rate_bit_s(1e6, -1.0), 'snr_linear'),
    (lambda: snr_for_packet_error(1.0), 'q'),
    (lambda: snr_for_packet_error(0.0), 'q'),
    (lambda: power_for_packet_error_w(0.1, 0.0, 1e-8), 'mean_channel_gain'),
    (lambda: airtime_s(1e6, 0.0), 'rate_bit_s'),
    (lambda: airtime_s(-1.0, 1e6), 'payload_bits'),
    (lambda: rayleigh_power_gain(np.random.RandomState(0)), 'rng'),
    (lambda: sample_upload_success(np.random.default_rng(0), 1.5), 'q'),
    (lambda: los_probability(95.0, 9.61, 0.16), 'elevation_deg'),
    (lambda: RadioLink().rate_bit_s(np.array([100.0, -1.0])), 'distance_m'),
])
def test_functions_reject_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
