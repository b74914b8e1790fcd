"""Computation model: FedDPQ eqs. (33)-(36), (39) and 2CEOAFL's relative cost."""

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from fl_uav.netmodel.compute import (
    CpuDevice,
    compute_energy_j,
    compute_time_s,
    cpu_power_w,
    feddpq_total_energy_j,
    generation_energy_j,
    generation_time_s,
    round_latency_s,
    training_energy_j,
    training_time_s,
    two_ceoafl_local_cost,
)

HYPOTHESIS = settings(max_examples=50, deadline=None, derandomize=True)


@pytest.mark.parametrize(('freq_hz', 'power_w', 'train_j', 'train_s', 'gen_j', 'gen_s'), [
    (20e6, 0.100e-3, 1.350e-3, 13.5, 1.100e-3, 11.0),
    (35e6, 0.536e-3, 4.134e-3, 7.71, 3.369e-3, 6.29),
    (50e6, 1.563e-3, 8.438e-3, 5.40, 6.875e-3, 4.40),
])
def test_per_sample_costs_match_feddpq_digest_table(freq_hz, power_w, train_j, train_s,
                                                    gen_j, gen_s):
    # FedDPQ digest Sec. 1.7 [DERIVED] table from Table I (varrho 1.25e-26, gamma 3)
    assert cpu_power_w(freq_hz) == pytest.approx(power_w, rel=2e-3)
    assert training_energy_j(1, freq_hz) == pytest.approx(train_j, rel=1e-3)
    assert training_time_s(1, freq_hz) == pytest.approx(train_s, rel=1e-3)
    assert generation_energy_j(1, freq_hz) == pytest.approx(gen_j, rel=1e-3)
    assert generation_time_s(1, freq_hz) == pytest.approx(gen_s, rel=1e-3)


def test_training_round_matches_digest_example():
    # FedDPQ digest Sec. 1.7: b = 32, rho = 0.2, f = 35 MHz -> 0.106 J and 198 s per round
    assert training_energy_j(32, 35e6, 0.2) == pytest.approx(0.10584, rel=1e-4)
    assert training_time_s(32, 35e6, 0.2) == pytest.approx(197.49, rel=1e-4)


def test_energy_is_power_times_time_and_pruning_scales_by_one_minus_rho():
    # Arrange
    f = np.array([20e6, 50e6])
    # Act
    t = compute_time_s(64, 1e8, f, 0.25)
    e = compute_energy_j(64, 1e8, f, 0.25)
    # Assert: eq. (35) E = varrho f^gamma T, eq. (36) T = b c0 (1 - rho) / f
    np.testing.assert_allclose(e, cpu_power_w(f) * t)
    np.testing.assert_allclose(t, 64 * 1e8 * 0.75 / f)
    assert training_energy_j(10, 30e6, 0.3) == pytest.approx(0.7 * training_energy_j(10, 30e6))


def test_total_energy_eq_39_by_hand():
    # Arrange: Omega = 10, tau = (0.25, 0.75)
    tau = [0.25, 0.75]
    # Act
    h = feddpq_total_energy_j(10, tau, [1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    h_s = feddpq_total_energy_j(10, tau, [1.0, 2.0], [3.0, 4.0], [5.0, 6.0], draws_per_round=10)
    # Assert: 10 (0.25*4 + 0.75*6) + 11 = 66; with S = 10 draws: 550 + 11
    assert h == pytest.approx(66.0)
    assert h_s == pytest.approx(561.0)
    assert feddpq_total_energy_j(3, [1.0], 2.0, 1.0) == pytest.approx(9.0)


def test_round_latency_is_the_slowest_participant():
    assert round_latency_s([10.0, 3.0, 7.0], [1.0, 9.0, 2.0]) == pytest.approx(12.0)


@pytest.mark.parametrize(('dense_steps', 'pruning_ratio', 'expected'), [
    (0, 0.0, 5.0),  # AFL / AFL-Quant: kappa dense steps
    (1, 0.375, 4.125),  # 2CEOAFL at the mean delta: 17.5 % saving (digest Sec. 1.8)
    (2, 0.375, 5.125),  # rho >= kappa delta: no saving
])
def test_two_ceoafl_relative_cost(dense_steps, pruning_ratio, expected):
    assert two_ceoafl_local_cost(1.0, pruning_ratio, dense_steps) == pytest.approx(expected)


def test_two_ceoafl_cost_scales_with_step_cost_and_vectorises():
    delta = np.array([0.05, 0.7])
    cost = two_ceoafl_local_cost(2.0, delta, 1, masked_steps=5)
    np.testing.assert_allclose(cost, 2.0 + 10.0 * (1 - delta))


def test_cpu_device_binds_table_one_defaults():
    dev = CpuDevice()
    assert dev.power_w == pytest.approx(cpu_power_w(35e6))
    assert dev.train_energy_j(32, 0.2) == pytest.approx(training_energy_j(32, 35e6, 0.2))
    assert dev.train_time_s(32) == pytest.approx(training_time_s(32, 35e6))
    assert dev.gen_energy_j(100) == pytest.approx(generation_energy_j(100, 35e6))
    assert dev.gen_time_s(100) == pytest.approx(generation_time_s(100, 35e6))


@HYPOTHESIS
@given(b=st.integers(1, 512), extra=st.integers(1, 512), rho=st.floats(0.0, 0.9),
       f=st.floats(1e6, 3e9))
def test_energy_grows_with_batch_and_shrinks_with_pruning(b, extra, rho, f):
    assert training_energy_j(b + extra, f, rho) > training_energy_j(b, f, rho)
    assert training_energy_j(b, f, min(rho + 0.05, 1.0)) < training_energy_j(b, f, rho)
    assert training_time_s(b, 2 * f, rho) < training_time_s(b, f, rho)
    assert training_energy_j(b, 2 * f, rho) > training_energy_j(b, f, rho)  # gamma = 3 > 1


@pytest.mark.parametrize(('kwargs', 'field'), [
    ({'cpu_freq_hz': 0.0}, 'cpu_freq_hz'),
    ({'energy_coeff': -1.0}, 'energy_coeff'),
    ({'exponent': 0.0}, 'exponent'),
    ({'train_cycles_per_sample': float('inf')}, 'train_cycles_per_sample'),
    ({'gen_cycles_per_sample': 0.0}, 'gen_cycles_per_sample'),
])
def test_cpu_device_rejects_bad_fields(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CpuDevice(**kwargs)


@pytest.mark.parametrize(('call', 'name'), [
    (lambda: training_time_s(32, 35e6, 1.5), 'pruning_ratio'),
    (lambda: training_time_s(-1, 35e6), 'num_samples'),
    (lambda: training_energy_j(32, 0.0), 'cpu_freq_hz'),
    (lambda: feddpq_total_energy_j(10, [0.5, 0.4], 1.0, 1.0), 'selection_probs'),
    (lambda: feddpq_total_energy_j(10, [0.5, 0.5], [1.0, 2.0, 3.0], 1.0), 'train_energy_j'),
    (lambda: feddpq_total_energy_j(10, [1.0], 1.0, 1.0, draws_per_round=0), 'draws_per_round'),
    (lambda: feddpq_total_energy_j(-1, [1.0], 1.0, 1.0), 'num_rounds'),
    (lambda: round_latency_s([], []), 'train_time_s'),
    (lambda: two_ceoafl_local_cost(1.0, 0.2, -1), 'dense_steps'),
    (lambda: two_ceoafl_local_cost(1.0, 0.2, 1, masked_steps=2.5), 'masked_steps'),
    (lambda: two_ceoafl_local_cost(1.0, -0.1, 1), 'pruning_ratio'),
])
def test_functions_reject_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
