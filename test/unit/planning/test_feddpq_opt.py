"""FedDPQ resource optimiser (fl_uav.planning.feddpq_opt): model, fallback, optimiser, errors."""

import math

import numpy as np
import pytest

from fl_uav.netmodel.radio import RadioLink
from fl_uav.planning.feddpq_opt import (
    BITS_KNOB,
    PRUNE_KNOB,
    TOPUP_KNOB,
    TX_POWER_KNOB,
    ConvergenceConstants,
    FeddpqBounds,
    FeddpqFleet,
    FeddpqInfeasibleError,
    FeddpqKnobs,
    FeddpqModel,
    _block_seed,
    effective_receivers,
    effective_weights,
    optimise_feddpq,
    packet_error_range,
)

FAST = dict(max_bcd_rounds=2, q_trials=4, block_trials=12, q_sampler='tpe')


def _fleet(distances, counts=None, **kw):
    n = len(distances)
    if counts is None:
        rng = np.random.default_rng(1)
        counts = np.array([rng.multinomial(60, p) for p in rng.dirichlet(np.full(5, 0.5), n)])
    return FeddpqFleet(tuple(range(10, 10 + n)), counts, distances, num_params=20_000,
                       cpu_freq_hz=1.5e9, batch_size=32, draws_per_round=4, **kw)


def test_energy_and_rounds_match_a_hand_computed_case():
    # Arrange: two drones at the same distance and power (one common q), S = 1 so S̄ = 1.
    link = RadioLink(bandwidth_hz=1e6, interference_w=1e-8)
    fleet = FeddpqFleet((0, 1), np.array([[4, 0], [2, 2]]), [100.0, 100.0], num_params=10,
                        interference_w=1e-8, cpu_freq_hz=1e9, batch_size=2, draws_per_round=1,
                        overhead_bits=5.0, energy_coeff=1e-27, train_cycles_per_sample=1e6,
                        gen_cycles_per_sample=1e6)
    constants = ConvergenceConstants(lr=0.01, smoothness=1.0, param_sq_bound=1.0, grad_var=1.0,
                                     heterogeneity_sq=1.0, heterogeneity_label_scale=0.0,
                                     grad_range_sq_per_param=0.3, loss_gap=1.0,
                                     target_sq_grad_norm=2.0)
    knobs = FeddpqKnobs(np.array([0.05, 0.05]), np.array([0.5, 0.5]), np.array([0.5, 0.0]),
                        np.array([2, 2]))

    # Act
    pred = FeddpqModel(fleet, constants).predict(knobs)

    # Assert: eq. (1): drone 0 tops class 1 up to ceil(0.5*4) = 2 -> tau = (6, 4) / 10.
    np.testing.assert_allclose(pred.selection_probs, [0.6, 0.4])
    # Psi = 8 L eta^2 Z^2 + 2 L eta^2 sigma^2 + eta L^2 Gamma^2 (sum tau^2 sum rho
    #       + 4 eta L sum tau rho) + L eta^2 V r^2 / (4 (2^2 - 1)^2)
    psi = 8e-4 + 2e-4 + 0.01 * (0.52 * 0.5 + 0.04 * 0.3) + 1e-4 * 3.0 / 36.0
    assert pred.psi == pytest.approx(psi, rel=1e-12)
    assert pred.rounds == math.ceil(1.0 / ((0.005 - 0.0008) * 2.0 - psi)) == 215
    # eq. (35): E_tr = 1e-27 * 1e18 * 2 * 1e6 * (1 - rho); eq. (33): 2 samples * 1e-3 J.
    e_tr = np.array([1e-3, 2e-3])
    e_cu = link.upload_energy_j(10 * 2 + 5.0, 100.0, 0.05)
    assert pred.generation_energy_j == pytest.approx(2e-3)
    assert pred.energy_j == pytest.approx(215 * (0.6 * (e_tr[0] + e_cu) + 0.4 * (e_tr[1] + e_cu))
                                          + 2e-3, rel=1e-12)
    assert pred.packet_error[0] == pytest.approx(link.packet_error_prob(100.0, 0.05))
    assert pred.reached


def test_effective_receivers_match_the_digest_table():
    assert effective_receivers(0.0, 10) == pytest.approx(10.0)
    assert effective_receivers(0.1, 10) == pytest.approx(8.887, abs=1e-3)
    assert effective_receivers(0.5, 10) == pytest.approx(4.365, abs=1e-3)


def test_effective_weights_match_a_monte_carlo_of_eq_18():
    # Arrange: 3 drones, unequal q_u, S = 4 i.i.d. draws with P(u) = tau_u (FedDPQ eq. (7)).
    tau, q, draws = np.array([0.5, 0.3, 0.2]), np.array([0.05, 0.3, 0.6]), 4
    rng = np.random.default_rng(0)
    picks = rng.choice(3, size=(200_000, draws), p=tau)
    ok = rng.random(picks.shape) >= q[picks]
    count = ok.sum(axis=1)
    keep = count > 0
    hits = np.stack([((picks == u) & ok).sum(axis=1) for u in range(3)], axis=1)[keep]

    # Act
    beta, alpha = effective_weights(tau, q, draws)

    # Assert: E[sum alpha g / sum alpha] and E[sum alpha g / (sum alpha)^2] given >= 1 success.
    np.testing.assert_allclose(beta, (hits / count[keep, None]).mean(axis=0), atol=3e-3)
    np.testing.assert_allclose(alpha, (hits / count[keep, None] ** 2).mean(axis=0), atol=3e-3)
    assert beta.sum() == pytest.approx(1.0)


def test_common_q_is_used_when_the_fleet_admits_one():
    fleet = _fleet([200.0, 220.0, 240.0])

    q_range = packet_error_range(fleet, FeddpqBounds())
    plan = optimise_feddpq(fleet, seed=0, **{**FAST, 'q_sampler': 'gp'})   # GP-BO on q

    assert q_range.mode == 'common_q' and plan.mode == 'common_q'
    assert plan.fallback_reason == ''
    np.testing.assert_allclose(plan.prediction.packet_error, plan.packet_error_target,
                               rtol=1e-6)


def test_infeasible_common_q_falls_back_to_clipped_power_and_says_why():
    # Arrange: d^2 spans 100x, p_max / p_min = 10 -> no common q (FedDPQ (40e) + (40g)).
    fleet = _fleet([50.0, 150.0, 500.0])

    # Act
    plan = optimise_feddpq(fleet, seed=0, **FAST)

    # Assert
    assert plan.mode == 'clipped_q'
    assert 'no common packet-error target q' in plan.fallback_reason
    assert 'drone 10 at 50 m' in plan.fallback_reason
    assert 'drone 12 at 500 m' in plan.fallback_reason
    assert 'clipped' in plan.fallback_reason
    assert len(set(np.round(plan.prediction.packet_error, 9))) > 1   # per-drone q_u
    with pytest.raises(FeddpqInfeasibleError, match='p_max / p_min = 10.0'):
        optimise_feddpq(fleet, seed=0, fallback='error', **FAST)


def test_optimiser_beats_fixed_default_knobs_at_no_more_rounds():
    # Arrange: mid-box knobs at p_max (no power control) set the round budget.
    fleet = _fleet([60.0, 120.0, 200.0, 300.0, 450.0, 500.0])
    fixed = FeddpqKnobs.uniform(fleet, 0.1, 0.25, 0.2, 11)
    base = FeddpqModel(fleet).predict(fixed)
    constants = ConvergenceConstants(max_rounds=int(base.rounds))

    # Act
    plan = optimise_feddpq(fleet, constants, seed=3, **FAST)

    # Assert
    assert base.reached
    assert plan.prediction.rounds <= base.rounds
    assert plan.prediction.energy_j < 0.95 * base.energy_j
    assert plan.history_j[-1] <= plan.history_j[0]


def test_knobs_stay_in_the_box_and_are_deterministic():
    bounds = FeddpqBounds(topup_min=0.15, topup_max=0.3, prune_min=0.05, prune_max=0.25,
                          bits_min=7, bits_max=9)
    fleet = _fleet([80.0, 260.0, 400.0])

    plan = optimise_feddpq(fleet, bounds=bounds, seed=5, **FAST)
    again = optimise_feddpq(fleet, bounds=bounds, seed=5, **FAST)

    by_drone = plan.knobs_by_drone()
    assert sorted(by_drone) == [10, 11, 12]
    for k in by_drone.values():
        assert 0.01 <= k[TX_POWER_KNOB] <= 0.1
        assert 0.15 <= k[TOPUP_KNOB] <= 0.3
        assert 0.05 <= k[PRUNE_KNOB] <= 0.25
        assert isinstance(k[BITS_KNOB], int) and 7 <= k[BITS_KNOB] <= 9
    assert by_drone == again.knobs_by_drone()


def test_unreachable_target_names_epsilon_and_the_floor():
    fleet = _fleet([100.0, 120.0])
    constants = ConvergenceConstants(target_sq_grad_norm=0.05)

    with pytest.raises(FeddpqInfeasibleError, match='target epsilon = 0.05 is not reachable'):
        optimise_feddpq(fleet, constants, seed=0, **FAST)


@pytest.mark.parametrize('kwargs, message', [
    (dict(lr=0.1, smoothness=1.0), r'lr < 1/\(16 L\)'),
    (dict(max_rounds=0), 'max_rounds'),
    (dict(grad_var=-1.0), 'grad_var'),
])
def test_bad_constants_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ConvergenceConstants(**kwargs)


def test_bad_fleet_inputs_are_named():
    with pytest.raises(ValueError, match='class_counts must be'):
        FeddpqFleet((0, 1), np.ones((3, 2)), [100.0, 100.0], num_params=10)
    with pytest.raises(ValueError, match=r'drones \[1\] have no samples'):
        FeddpqFleet((0, 1), np.array([[1, 2], [0, 0]]), [100.0, 100.0], num_params=10)
    with pytest.raises(ValueError, match='distance_m'):
        FeddpqFleet((0, 1), np.ones((2, 2)), [100.0, -1.0], num_params=10)
    with pytest.raises(ValueError, match="fallback 'drop' unknown; choices: clip, error"):
        packet_error_range(_fleet([100.0]), FeddpqBounds(), fallback='drop')


def test_planned_top_up_counts_are_the_engines_rule_on_float_noise_cases():
    # Arrange: Δ·D' that float arithmetic lands just above an integer (0.1·30, 0.3·10, 0.7·10)
    from fl_uav.learning.topup import topup_counts
    counts = np.array([[30, 0, 2], [10, 4, 3], [10, 7, 6], [5, 5, 1]])
    factors = np.array([0.1, 0.3, 0.7, 0.25])
    model = FeddpqModel(_fleet([100.0] * 4, counts))
    # Act
    planned = model.generated_counts(factors)
    # Assert: FedDPQ eq. (1) row by row as the drones compute it
    expected = [topup_counts(row, factor) for row, factor in zip(counts, factors)]
    assert np.array_equal(planned, np.array(expected, np.float64))
    assert planned[0].tolist() == [0.0, 3.0, 1.0] and planned[2].tolist() == [0.0, 0.0, 1.0]


def test_plan_counts_only_what_a_label_preserving_generator_can_make():
    # Arrange: drone 0 lacks class 1; the engine's default generator is an augmentation
    from fl_uav.learning.topup import AugmentationGenerator
    counts = np.array([[30, 0, 2], [10, 4, 3]])
    factors = np.array([0.1, 0.3])
    generator = AugmentationGenerator(layout='chw')
    images = np.zeros((32, 1, 4, 4), np.float32)
    labels = np.array([0] * 30 + [2] * 2)
    paper = FeddpqModel(_fleet([100.0] * 2, counts))
    augment = FeddpqModel(_fleet([100.0] * 2, counts, generator_makes_absent_classes=
                                 generator.makes_absent_classes))
    knobs = FeddpqKnobs(np.full(2, 0.05), factors, np.full(2, 0.4), np.full(2, 8))
    # Act
    planned = augment.generated_counts(factors)
    made_x, made_y = generator.generate(images, labels, planned[0].astype(np.int64),
                                        np.random.default_rng(0))
    # Assert: the absent class gets nothing in the plan, exactly as the generator delivers,
    # and the plan no longer charges eq. (33)-(34) for samples that are never made
    assert planned.tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert paper.generated_counts(factors)[0].tolist() == [0.0, 3.0, 1.0]
    assert np.bincount(made_y, minlength=3).tolist() == planned[0].tolist()
    assert augment.predict(knobs).generation_energy_j < paper.predict(knobs).generation_energy_j


def test_any_world_seed_plans_and_small_seeds_keep_their_sampler_seeds():
    # Arrange: world.seed may be up to 2**32 - 1; optuna samplers take seeds below 2**32
    fleet = _fleet([80.0, 260.0])
    # Act
    plan = optimise_feddpq(fleet, seed=2 ** 32 - 1, max_bcd_rounds=1, q_trials=3,
                           block_trials=8, q_sampler='tpe')
    # Assert: a plan, and the seeds the measured figures used are kept
    assert sorted(plan.knobs_by_drone()) == [10, 11]
    assert _block_seed(5, 2, 3) == 5 * 1000 + 10 * 2 + 3
    assert all(0 <= _block_seed(2 ** 32 - 1, r, b) < 2 ** 32 for r in range(3) for b in (1, 4))
