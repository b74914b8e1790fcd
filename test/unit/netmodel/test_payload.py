"""Payload accounting: FedDPQ eq. (13), 2CEOAFL Sec. IV, LGC Table 1 and eq. (10a)."""

import numpy as np
import pytest

from fl_uav.netmodel.payload import (
    LGC_CHANNEL_ENERGY_J_PER_MB,
    feddpq_payload_bits,
    lgc_comm_energy_j,
    lgc_round_cost,
    two_ceoafl_expected_payload_bits,
    two_ceoafl_payload_bits,
)

RESNET18_PARAMS = 11_173_962  # CIFAR-style ResNet-18 (2CEOAFL digest Sec. 4)


@pytest.mark.parametrize(('bits', 'mbit'), [(6, 67.0), (8, 89.4), (16, 178.8)])
def test_feddpq_payload_matches_digest(bits, mbit):
    # FedDPQ digest Sec. 1.7: V delta = 67.0 / 89.4 / 178.8 Mbit
    assert feddpq_payload_bits(RESNET18_PARAMS, bits) / 1e6 == pytest.approx(mbit, abs=0.05)


def test_feddpq_payload_adds_overhead():
    np.testing.assert_allclose(feddpq_payload_bits(1000, np.array([6, 8]), 64), [6064, 8064])


@pytest.mark.parametrize(('delta', 'raw', 'mbit'), [
    (0.0, True, 379.9),  # AFL with the formula's sign bit and mask: 34 p
    (0.7, True, 121.8),
    (0.05, True, 361.5),
    (0.7, False, 21.2),
    (0.05, False, 43.0),
])
def test_two_ceoafl_payload_matches_digest(delta, raw, mbit):
    # 2CEOAFL digest Sec. 5 [DERIVED] payloads, s = 3 levels
    assert two_ceoafl_payload_bits(RESNET18_PARAMS, delta, raw) / 1e6 == pytest.approx(
        mbit, abs=0.05)


def test_two_ceoafl_expected_payload_mean_over_uniform_delta():
    # Arrange: delta ~ U[0.05, 0.7], raw with probability q = delta (2CEOAFL Sec. V)
    delta = np.linspace(0.05, 0.7, 20_001)
    # Act
    mean_bits = float(np.mean(two_ceoafl_expected_payload_bits(RESNET18_PARAMS, delta)))
    # Assert: digest Sec. 5, mixture mean ~ 98.9 Mbit
    assert mean_bits / 1e6 == pytest.approx(98.9, abs=0.1)


def test_two_ceoafl_expected_payload_with_explicit_probability():
    raw = two_ceoafl_payload_bits(100, 0.5, True)
    quant = two_ceoafl_payload_bits(100, 0.5, False)
    assert two_ceoafl_expected_payload_bits(100, 0.5, raw_prob=1.0) == pytest.approx(raw)
    assert two_ceoafl_expected_payload_bits(100, 0.5, raw_prob=0.0) == pytest.approx(quant)


@pytest.mark.parametrize(('channel', 'joules'), [('3g', 124.4), ('4g', 273.7), ('5g', 684.2)])
def test_lgc_channel_energy_matches_digest_example(channel, joules):
    # LGC digest Sec. 5: 11,998 entries x 8 B on one channel -> ~124 / 274 / 684 J
    e = lgc_comm_energy_j([11_998], LGC_CHANNEL_ENERGY_J_PER_MB[channel])
    assert e == pytest.approx(joules, abs=0.1)


def test_lgc_multichannel_energy_sums_channels():
    per_mb = [LGC_CHANNEL_ENERGY_J_PER_MB[c] for c in ('3g', '4g', '5g')]
    e = lgc_comm_energy_j([125_000, 0, 250_000], per_mb)  # 1 MB on 3G, 2 MB on 5G
    assert e == pytest.approx(1296.0 + 2 * 7128.0)


def test_lgc_round_cost_eq_10a_by_hand():
    # E_comp H + sum_n E_comm,n D_n = 2 * 5 + (10 * 0.1 + 20 * 0.3)
    assert lgc_round_cost(5, 2.0, [10, 20], [0.1, 0.3]) == pytest.approx(17.0)


@pytest.mark.parametrize(('call', 'name'), [
    (lambda: feddpq_payload_bits(0, 8), 'num_params'),
    (lambda: feddpq_payload_bits(10, 0), 'bits_per_element'),
    (lambda: feddpq_payload_bits(10, 8, -1), 'overhead_bits'),
    (lambda: two_ceoafl_payload_bits(10, 1.2, True), 'pruning_ratio'),
    (lambda: two_ceoafl_payload_bits(10, 0.2, False, levels=0), 'levels'),
    (lambda: two_ceoafl_expected_payload_bits(10, 0.2, raw_prob=2.0), 'raw_prob'),
    (lambda: lgc_comm_energy_j([1, 2], [1.0, 2.0, 3.0]), 'energy_j_per_mb'),
    (lambda: lgc_comm_energy_j([-1], 1.0), 'entries_per_channel'),
    (lambda: lgc_round_cost(-1, 1.0, [1], [1.0]), 'local_steps'),
    (lambda: lgc_round_cost(1, 1.0, [1, 2], [1.0, 2.0, 3.0]), 'comm_cost_per_entry'),
])
def test_functions_reject_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
