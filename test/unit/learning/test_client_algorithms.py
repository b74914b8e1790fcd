"""Client algorithms: each does what its paper says (2CEOAFL, FedDPQ, OSAFL, SCAFFOLD, SGD)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fl_uav.aggregation import ClientUpdate
from fl_uav.aggregation.fednova import FedNova
from fl_uav.aggregation.fedprox import PROXIMAL_MU_KNOB
from fl_uav.aggregation.scaffold import DELTA_C_KEY
from fl_uav.learning.client_algorithms import (
    CLIENT_ALGORITHMS,
    LOCAL_STEPS_KNOB,
    PROBE_STEPS_KEY,
    PRUNE_FRACTION_KEY,
    SERVER_CONTROL_KNOB,
    FedDpqClient,
    OsaflClient,
    ScaffoldClient,
    SgdClient,
    TwoCeoaflClient,
    build_client_algorithm,
)
from fl_uav.learning.models import build_model
from fl_uav.learning.pruning import feddpq_local_gradient, feddpq_prune, is_prunable
from fl_uav.learning.training import StopCondition, TrainConfig
from fl_uav.learning.weights import get_weights

CONFIG = TrainConfig(local_epochs=1, batch_size=8, lr=0.1, momentum=0.0)


def _model():
    return build_model('digits_cnn', 10, input_px=8, seed=0, in_channels=1)


def _data(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.random((n, 1, 8, 8), dtype=np.float32),
            rng.integers(0, 10, n).astype(np.int64))


def _train(client, seed: int = 3, knobs=None, config=CONFIG, data=None, should_stop=None):
    model = _model()
    received = get_weights(model)
    x, y = data if data is not None else _data()
    return received, client.train(model, received, x, y, config, seed, knobs or {},
                                  should_stop=should_stop)


def test_build_names_the_key_and_the_choices():
    with pytest.raises(ValueError, match='learning.client_algorithm') as err:
        build_client_algorithm('fedsgd')
    assert all(name in str(err.value) for name in CLIENT_ALGORITHMS)


def test_every_name_builds_its_class():
    assert [build_client_algorithm(n).name for n in CLIENT_ALGORITHMS] == list(CLIENT_ALGORITHMS)


def test_sgd_uses_the_proximal_knob():
    # Arrange
    _, plain = _train(SgdClient(), config=dataclasses.replace(CONFIG, local_epochs=3))
    # Act
    _, prox = _train(SgdClient(), knobs={PROXIMAL_MU_KNOB: 5.0},
                     config=dataclasses.replace(CONFIG, local_epochs=3))
    # Assert: the proximal term pulls the local model back towards the received one
    norm = lambda d: sum(float(np.sum(v ** 2)) for v in d.values())   # noqa: E731
    assert norm(prox.delta) < norm(plain.delta)
    assert plain.steps == prox.steps == 15 and plain.compute_dense_steps == 15


def test_2ceoafl_update_is_zero_outside_the_mask_and_costs_rho_plus_kappa_kept():
    # Arrange
    client = TwoCeoaflClient(rho_steps=1, kappa_steps=4, prune_fraction=0.4)
    # Act
    received, result = _train(client)
    # Assert
    prunable = [n for n in received if is_prunable(n, received[n])]
    total = sum(received[n].size for n in prunable)
    pruned = sum(int((~result.mask[n]).sum()) for n in prunable)
    assert pruned == int(0.4 * total)
    for name, delta in result.delta.items():
        assert np.all(delta[~result.mask[name]] == 0.0)
        assert delta.shape == received[name].shape
    assert np.count_nonzero(np.concatenate([d.ravel() for d in result.delta.values()])) > 0
    assert result.compute_dense_steps == pytest.approx(1 + 4 * (1 - 0.4))
    assert result.metrics[PRUNE_FRACTION_KEY] == 0.4


def test_2ceoafl_reports_as_steps_the_masked_steps_its_update_covers():
    # Arrange: ρ = 1 probe step (its weights discarded at the rewind), κ = 4 masked steps
    client = TwoCeoaflClient(rho_steps=1, kappa_steps=4, prune_fraction=0.4)
    # Act
    _, result = _train(client)
    # Assert: steps = κ (what FedNova's τ_k and OSAFL's κ_u divide Δ by); ρ apart, as a field
    # and on the wire (metrics), and still charged in the compute
    assert (result.steps, result.probe_steps, result.steps_taken) == (4, 1, 5)
    assert result.metrics[PROBE_STEPS_KEY] == 1
    assert result.compute_dense_steps == pytest.approx(1 + 4 * (1 - 0.4))


def test_fednova_weights_a_2ceoafl_update_by_its_masked_steps():
    # Arrange: two drones with κ = 4 and κ = 2 masked steps after ρ = 3 probe steps
    received, long = _train(TwoCeoaflClient(3, 4, 0.4), seed=3)
    _, short = _train(TwoCeoaflClient(3, 2, 0.4), seed=4)
    updates = [ClientUpdate(k, 1, r.delta, r.num_samples, {'steps': r.steps})
               for k, r in enumerate((long, short))]
    # Act
    result = FedNova().aggregate(1, received, updates)
    # Assert: τ = (4, 2), not (7, 5): w + τ_eff Σ p_k Δ_k / τ_k with p = (1/2, 1/2)
    tau_eff = 0.5 * 4 + 0.5 * 2
    for name, w in received.items():
        expected = w + tau_eff * (0.5 * long.delta[name] / 4 + 0.5 * short.delta[name] / 2)
        np.testing.assert_allclose(result.weights[name], expected, rtol=1e-5, atol=1e-6)
    assert result.metrics['tau_eff'] == pytest.approx(tau_eff)


@pytest.mark.parametrize('make, knobs, planned', [
    (SgdClient, {}, 15),                                    # 40 samples / 8 × 3 epochs
    (lambda: SgdClient(structured_keep=0.5), {}, 15),
    (SgdClient, {PROXIMAL_MU_KNOB: 0.5}, 15),
    (ScaffoldClient, {}, 15),
    (SgdClient, {LOCAL_STEPS_KNOB: 12}, None),              # a planner's H is kept
    (lambda: TwoCeoaflClient(1, 4), {}, None),
    (lambda: FedDpqClient(local_steps=4), {}, None),
    (lambda: OsaflClient(3, 3), {}, None),
])
def test_only_clients_whose_steps_are_the_configs_can_be_capped(make, knobs, planned):
    # Arrange
    config = dataclasses.replace(CONFIG, local_epochs=3)
    # Act
    capped = make().capped_steps(40, config, knobs)
    # Assert
    assert capped == planned
    if planned is not None:   # config.max_steps bounds them: the drone's cap works
        _, result = _train(make(), knobs=knobs, config=dataclasses.replace(config,
                                                                           max_steps=6))
        _, full = _train(make(), knobs=knobs, config=config)
        assert (result.steps, full.steps) == (6, planned)


def test_2ceoafl_draws_the_pruning_ratio_per_drone_and_round_in_range():
    client = TwoCeoaflClient(rho_steps=0, kappa_steps=1, prune_fraction=0.05,
                             prune_fraction_max=0.7)
    ratios = [_train(client, seed=s)[1].metrics[PRUNE_FRACTION_KEY] for s in range(6)]
    assert all(0.05 <= r <= 0.7 for r in ratios) and len(set(ratios)) == 6
    assert _train(client, seed=2)[1].metrics[PRUNE_FRACTION_KEY] == ratios[2]


def test_feddpq_one_step_is_minus_lr_times_the_gradient_at_the_pruned_point():
    # Arrange
    model = _model()
    received = get_weights(model)
    x, y = _data()
    gradient, mask = feddpq_local_gradient(_model(), received, (x, y), 0.3, batch_size=8,
                                           seed=5)
    # Act
    result = FedDpqClient(local_steps=1, prune_fraction=0.3).train(model, received, x, y,
                                                                   CONFIG, 5, {})
    # Assert
    for name in received:
        np.testing.assert_allclose(result.delta[name], -0.1 * gradient[name], rtol=1e-6,
                                   atol=1e-8)
    assert result.mask is None          # the upload is dense (FedDPQ eq. (13): V entries)
    assert result.compute_dense_steps == pytest.approx(0.7)


def test_feddpq_rejects_momentum():
    with pytest.raises(ValueError, match='momentum'):
        _train(FedDpqClient(), config=dataclasses.replace(CONFIG, momentum=0.9))


def test_osafl_step_counts_stay_in_range_vary_and_are_reported():
    # Arrange
    client = OsaflClient(min_steps=1, max_steps=15)
    # Act
    results = [_train(client, seed=s)[1] for s in range(12)]
    # Assert
    steps = [r.steps for r in results]
    assert all(1 <= s <= 15 for s in steps) and len(set(steps)) >= 4
    assert steps == [client.draw_steps(s) for s in range(12)]
    assert all(r.compute_dense_steps == r.steps for r in results)


def test_osafl_steps_can_exceed_one_pass_over_the_data():
    client = OsaflClient(min_steps=15, max_steps=15)
    _, result = _train(client, data=_data(16))      # 2 batches per pass
    assert result.steps == 15


def test_scaffold_with_zero_control_variates_equals_sgd():
    # Act
    _, sgd = _train(SgdClient())
    _, scaffold = _train(ScaffoldClient())
    # Assert
    for name in sgd.delta:
        np.testing.assert_array_equal(scaffold.delta[name], sgd.delta[name])


def test_scaffold_control_variate_update_is_option_two_and_corrects_the_next_round():
    # Arrange: one plain SGD step (40 samples, one batch of 40, no momentum)
    one_step = dataclasses.replace(CONFIG, batch_size=40, momentum=0.0, weight_decay=0.0)
    client = ScaffoldClient()
    received, first = _train(client, config=one_step)
    server = {n: np.full(np.shape(w), 0.01, np.float32) for n, w in received.items()}
    # c_k⁺ = c_k − c + (w − y)/(K η) with c_k = c = 0 in the first round
    for name in received:
        expected = -first.delta[name] / (first.steps * CONFIG.lr)
        np.testing.assert_allclose(first.metrics[DELTA_C_KEY][name], expected, rtol=1e-5,
                                   atol=1e-7)
    c_k = {n: v.copy() for n, v in first.metrics[DELTA_C_KEY].items()}   # c_k = 0 + Δc_k
    # Act
    _, second = _train(client, knobs={SERVER_CONTROL_KNOB: server}, config=one_step)
    _, plain = _train(ScaffoldClient(), config=one_step)
    # Assert: one step y = w − η (g + c − c_k), so Δ = Δ_plain − η (c − c_k) (SCAFFOLD Alg. 1)
    assert first.steps == second.steps == plain.steps == 1
    for name in received:
        np.testing.assert_allclose(second.delta[name],
                                   plain.delta[name] - CONFIG.lr * (server[name] - c_k[name]),
                                   rtol=1e-4, atol=1e-6)


def test_scaffold_state_round_trips_and_a_lost_upload_keeps_the_old_variate():
    # Arrange
    client = ScaffoldClient()
    _train(client)
    saved = client.state_dict()
    # Act
    restored = ScaffoldClient()
    restored.load_state_dict(saved)
    _train(client, seed=9)
    client.upload_lost()
    # Assert
    assert saved and all(k.startswith('c/') for k in saved)
    for key, value in saved.items():
        np.testing.assert_array_equal(restored.state_dict()[key], value)
        np.testing.assert_array_equal(client.state_dict()[key], value)


def test_feddpq_several_steps_keep_the_trained_model_pruned():
    # Arrange
    model = _model()
    received = get_weights(model)
    x, y = _data()
    # Act
    result = FedDpqClient(local_steps=3, prune_fraction=0.5).train(model, received, x, y,
                                                                   CONFIG, 1, {})
    # Assert: every step was taken at a pruned point, the update itself is not masked
    _, mask = feddpq_prune(received, 0.5)
    trained = get_weights(model)
    pruned = {n: ~mask[n] for n in received if (~mask[n]).any()}
    assert pruned
    assert all(np.all(trained[n][m] == 0.0) for n, m in pruned.items())
    assert sum(np.count_nonzero(result.delta[n][m]) for n, m in pruned.items()) > 0
    assert result.steps == 3 and result.compute_dense_steps == pytest.approx(1.5)


# ------------------------------------------------------------------ stopping early ----
# 40 samples in batches of 8, 3 epochs: 15 steps for the clients that run epochs.
STOP_CONFIG = dataclasses.replace(CONFIG, local_epochs=3)
# Every client that runs local steps: (client, knobs, its full step count, and the same
# client configured for exactly n steps: (client, knobs, config)).
STOPPABLE = {
    'sgd': (SgdClient, {}, 15, lambda n: (SgdClient(), {LOCAL_STEPS_KNOB: n}, STOP_CONFIG)),
    'fedprox': (SgdClient, {PROXIMAL_MU_KNOB: 0.5}, 15,
                lambda n: (SgdClient(), {PROXIMAL_MU_KNOB: 0.5, LOCAL_STEPS_KNOB: n},
                           STOP_CONFIG)),
    'sgd_lgc_h': (SgdClient, {LOCAL_STEPS_KNOB: 12}, 12,
                  lambda n: (SgdClient(), {LOCAL_STEPS_KNOB: n}, STOP_CONFIG)),
    'sgd_structured': (lambda: SgdClient(structured_keep=0.5), {}, 15,
                       lambda n: (SgdClient(structured_keep=0.5), {LOCAL_STEPS_KNOB: n},
                                  STOP_CONFIG)),
    '2ceoafl': (lambda: TwoCeoaflClient(rho_steps=2, kappa_steps=10), {}, 12,
                lambda n: (TwoCeoaflClient(rho_steps=2, kappa_steps=n - 2), {}, STOP_CONFIG)),
    'feddpq': (lambda: FedDpqClient(local_steps=12), {}, 12,
               lambda n: (FedDpqClient(local_steps=n), {}, STOP_CONFIG)),
    'osafl': (lambda: OsaflClient(min_steps=12, max_steps=12), {}, 12,
              lambda n: (OsaflClient(min_steps=n, max_steps=n), {}, STOP_CONFIG)),
    'scaffold': (ScaffoldClient, {}, 15,
                 lambda n: (ScaffoldClient(), {}, dataclasses.replace(STOP_CONFIG,
                                                                      max_steps=n))),
}


class _StopAfter:
    """A ``should_stop`` that lets ``n`` steps start, then says stop; records what it was
    asked (the steps done it was given)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.started = 0
        self.asked: list[int] = []

    def __call__(self, steps_done: int) -> bool:
        self.asked.append(steps_done)
        if self.started >= self.n:
            return True
        self.started += 1
        return False


@pytest.mark.parametrize('name', sorted(STOPPABLE))
def test_every_client_takes_no_step_once_should_stop_says_so(name):
    # Arrange
    make, knobs, full_steps, _ = STOPPABLE[name]
    stop = _StopAfter(4)
    # Act
    _, stopped = _train(make(), knobs=knobs, config=STOP_CONFIG, should_stop=stop)
    _, full = _train(make(), knobs=knobs, config=STOP_CONFIG)
    # Assert: 4 steps taken and reported; the 5th was refused; compute counts the steps taken
    assert (stopped.steps_taken, full.steps_taken) == (4, full_steps)
    assert stop.started == 4 and len(stop.asked) == 5
    assert 0 < stopped.compute_dense_steps < full.compute_dense_steps
    assert np.isfinite(stopped.mean_loss)


@pytest.mark.parametrize('name', sorted(STOPPABLE))
def test_an_update_cut_short_is_the_update_of_the_steps_taken(name):
    # Arrange
    make, knobs, _, exactly = STOPPABLE[name]
    short, short_knobs, short_config = exactly(5)
    # Act
    _, stopped = _train(make(), knobs=knobs, config=STOP_CONFIG, should_stop=_StopAfter(5))
    _, reference = _train(short, knobs=short_knobs, config=short_config)
    # Assert: what a client configured for 5 steps sends, step count and all
    assert stopped.steps_taken == reference.steps_taken == 5
    assert (stopped.steps, stopped.probe_steps) == (reference.steps, reference.probe_steps)
    assert stopped.compute_dense_steps == pytest.approx(reference.compute_dense_steps)
    for key, value in reference.delta.items():
        np.testing.assert_allclose(stopped.delta[key], value, rtol=1e-6, atol=1e-7)
    for key, value in reference.metrics.get(DELTA_C_KEY, {}).items():   # SCAFFOLD: K = 5
        np.testing.assert_allclose(stopped.metrics[DELTA_C_KEY][key], value, rtol=1e-5,
                                   atol=1e-7)


def test_fednova_normalises_a_stopped_osafl_update_by_the_steps_it_took():
    # Arrange: two drones draw κ = 12; one is stopped after 3 steps
    received, full = _train(OsaflClient(12, 12), config=STOP_CONFIG, seed=3)
    _, stopped = _train(OsaflClient(12, 12), config=STOP_CONFIG, seed=4,
                        should_stop=_StopAfter(3))
    updates = [ClientUpdate(k, 1, r.delta, r.num_samples, {'steps': r.steps})
               for k, r in enumerate((full, stopped))]
    # Act
    result = FedNova().aggregate(1, received, updates)
    # Assert: FedNova with τ = (12, 3), p = (1/2, 1/2): w + τ_eff Σ p_k Δ_k / τ_k
    tau_eff = 0.5 * 12 + 0.5 * 3
    for name, w in received.items():
        expected = w + tau_eff * (0.5 * full.delta[name] / 12 + 0.5 * stopped.delta[name] / 3)
        np.testing.assert_allclose(result.weights[name], expected, rtol=1e-5, atol=1e-6)
    assert result.metrics['tau_eff'] == pytest.approx(tau_eff)


@pytest.mark.parametrize('name', sorted(STOPPABLE))
def test_a_round_superseded_before_the_first_step_trains_nothing(name):
    # Arrange: a newer round arrived before the first step
    make, knobs, _, _ = STOPPABLE[name]
    client = make()
    stop = StopCondition(superseded=lambda: True)
    # Act
    _, result = _train(client, knobs=knobs, config=STOP_CONFIG, should_stop=stop)
    client.upload_lost()      # what the drone does with a superseded round's work
    # Assert: no step, a zero update, the client's state as before (SCAFFOLD: c_k unset)
    assert (result.steps, result.compute_dense_steps, stop.reason) == (0, 0.0, 'superseded')
    assert np.isnan(result.mean_loss)
    assert all(not np.any(value) for value in result.delta.values())
    assert client.state_dict() == {}


def test_a_scaffold_round_superseded_mid_training_keeps_c_k_after_upload_lost():
    # Arrange: a first round sets c_k; the second is stopped after 2 steps by a newer round
    client = ScaffoldClient()
    _train(client, config=STOP_CONFIG)
    control = {k: v.copy() for k, v in client.state_dict().items()}
    newer = _StopAfter(2)
    stop = StopCondition(superseded=lambda: newer(0))
    # Act
    _, result = _train(client, config=STOP_CONFIG, seed=4, should_stop=stop)
    client.upload_lost()
    # Assert
    assert result.steps == 2 and stop.reason == 'superseded'
    for key, value in control.items():
        np.testing.assert_array_equal(client.state_dict()[key], value)
