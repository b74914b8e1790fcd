"""LGC resource controller (fl_uav.planning.lgc_control): env, decoding, baselines, DDPG."""

import numpy as np
import pytest

from fl_uav.netmodel.compute import CpuDevice
from fl_uav.netmodel.radio import RadioLink
from fl_uav.planning.lgc_control import (
    DdpgConfig,
    DdpgPolicy,
    FixedPolicy,
    GreedyChannelPolicy,
    LgcChannel,
    LgcDecision,
    LgcEnv,
    LgcEnvConfig,
    RandomPolicy,
    decode_action,
    encode_decision,
    evaluate_policy,
    finetune_ddpg,
    fit_steps_exponent,
    fit_steps_scale,
    mean_loss_curve,
    table1_channels,
    train_ddpg,
)


def _tiny_config(**kw):
    channels = (LgcChannel('cheap_slow', 1000.0, 4000, RadioLink(bandwidth_hz=2e5)),
                LgcChannel('dear_fast', 4000.0, 4000, RadioLink(bandwidth_hz=5e6)))
    defaults = dict(channels=channels, model_dim=20_000, max_local_steps=6, batch_size=16,
                    cpu=CpuDevice(cpu_freq_hz=1e9), entries_scale=1500.0, max_rounds=60)
    return LgcEnvConfig(**{**defaults, **kw})


def test_round_cost_is_compute_plus_table1_comm_plus_hover():
    # Arrange: 1 GHz, varrho 1.25e-26, b = 16, c0 = 2.7e8 -> 54 J and 4.32 s per step.
    config = _tiny_config(download_s=0.5)
    env = LgcEnv(config)
    rates = np.array([1e6, 4e6])
    decision = LgcDecision(3, (1000, 2000))

    # Act
    cost = env.round_cost(decision, rates)

    # Assert: parallel layers -> comm time = max(1000*64/1e6, 2000*64/4e6) = 0.064 s.
    time_s = 3 * 4.32 + 0.064 + 0.5
    energy_j = 3 * 54.0 + (1000 * 8e-6 * 1000.0 + 2000 * 8e-6 * 4000.0) + 20.0 * time_s
    assert cost.time_s == pytest.approx(time_s)
    assert cost.energy_j == pytest.approx(energy_j)
    assert cost.progress == pytest.approx(
        0.08 * (1 - np.exp(-3 / 3.0)) * (1 - np.exp(-3000 / 1500.0)))
    assert env.reward(cost) > 0


def test_action_decoding_respects_the_caps_and_round_trips():
    config = _tiny_config(max_total_entries=5000)

    low = decode_action([-1, -1, -1], config)
    high = decode_action([1, 1, 1], config)
    mid = decode_action([0, 0, 0], config)

    assert low == LgcDecision(1, (0, 0))
    assert high.local_steps == 6 and high.total_entries <= 5000          # (10b), (10c)
    assert high.entries_per_channel == (2500, 2500)
    assert decode_action(encode_decision(mid, config), config) == mid
    with pytest.raises(ValueError, match='action must hold 3'):
        decode_action([0, 0], config)


def test_heuristic_fills_the_cheapest_channel_first():
    assert GreedyChannelPolicy.allocate(120, [3.0, 1.0, 2.0], [100, 50, 100]) == (0, 50, 70)
    assert GreedyChannelPolicy.allocate(500, [3.0, 1.0, 2.0], [100, 50, 100]) == (100, 50, 100)
    assert GreedyChannelPolicy.allocate(10, [1.0, 1.0], [100, 100]) == (10, 0)


def test_heuristic_on_table1_channels_uses_3g_then_4g_when_only_energy_counts():
    # Arrange: LGC Table 1 prices 3G < 4G < 5G; the time weight is 0 and hover is off.
    config = LgcEnvConfig(channels=table1_channels(30_000), weights=(1.0, 0.0),
                          hover_power_w=0.0)
    env = LgcEnv(config, seed=0)

    decision = GreedyChannelPolicy(4, 45_000).decide(env, env.reset())

    assert decision == LgcDecision(4, (30_000, 15_000, 0))


def test_ddpg_policy_beats_a_random_policy_after_short_training():
    # Arrange
    config = _tiny_config()
    ddpg = DdpgConfig(train_steps=500, warmup_steps=100, batch_size=32)

    # Act
    agent, log = train_ddpg(config, ddpg, seed=0, episode_rounds=25)
    learned = evaluate_policy(config, DdpgPolicy(agent), seed=11)
    random = evaluate_policy(config, RandomPolicy(seed=11), seed=11)

    # Assert
    assert learned.mean_reward > 1.2 * random.mean_reward
    assert np.mean(log.episode_returns[-3:]) > np.mean(log.episode_returns[:3])
    assert all(np.isfinite(log.critic_losses))


def test_training_is_deterministic_given_the_seed_and_depends_on_it():
    # Arrange
    config = _tiny_config()
    ddpg = DdpgConfig(hidden=16, train_steps=150, warmup_steps=50, batch_size=16)
    state = LgcEnv(config, seed=1).reset()

    # Act
    a, _ = train_ddpg(config, ddpg, seed=4)
    b, _ = train_ddpg(config, ddpg, seed=4)
    other, _ = train_ddpg(config, ddpg, seed=5)

    # Assert: same seed, same actor; another seed, another action; tanh actor inside (-1, 1)
    action = a.act(state)
    np.testing.assert_array_equal(action, b.act(state))
    assert np.max(np.abs(other.act(state) - action)) > 1e-3
    assert action.shape == (config.action_dim,) and np.all(np.abs(action) < 1.0)


def test_fixed_policy_repeats_its_decision_and_evaluation_reaches_the_target():
    # Arrange: the decision's progress fixes the rounds; its cost without the random comm time
    config = _tiny_config()
    decision = LgcDecision(3, (2000, 1000))
    env = LgcEnv(config)
    progress = env.progress(decision)
    rounds, loss = 0, config.initial_loss
    while loss > config.target_loss:
        loss = config.min_loss + (loss - config.min_loss) * (1.0 - progress)
        rounds += 1
    no_comm = env.round_cost(decision, np.full(2, np.inf))   # compute + download, comm energy
    fixed_j = no_comm.energy_j - config.hover_power_w * no_comm.time_s

    # Act
    result = evaluate_policy(config, FixedPolicy(decision), seed=2)

    # Assert: LGC eq. (15b) summed over the rounds; each round also spends comm time
    assert result.reached and result.rounds == rounds and 1 < rounds < config.max_rounds
    assert result.time_s > rounds * no_comm.time_s
    assert result.energy_j == pytest.approx(rounds * fixed_j
                                            + config.hover_power_w * result.time_s)


@pytest.mark.parametrize('kwargs, message', [
    (dict(channels=()), 'at least one channel'),
    (dict(max_local_steps=0), 'max_local_steps'),
    (dict(target_loss=5.0), 'initial_loss > target_loss'),
    (dict(weights=(0.0, 0.0)), 'weights'),
])
def test_bad_env_config_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _tiny_config(**kwargs)


def test_bad_channel_is_named():
    with pytest.raises(ValueError, match="channel 'x': max_entries"):
        LgcChannel('x', 1.0, 0)


# --- h0 from measured loss curves (resources.lgc_steps_scale: auto) ----------------------------

def _curves(steps_scale, num_steps=20, num_curves=20, noise=0.0, seed=0):
    """Per-drone losses ℓ(h) = c_k − A_k (1 − e^(−h/h0)) plus mini-batch-like noise."""
    rng = np.random.default_rng(seed)
    h = np.arange(num_steps)
    return [rng.uniform(2.2, 2.4) - rng.uniform(0.3, 1.0) * -np.expm1(-h / steps_scale)
            + noise * rng.standard_normal(num_steps) for _ in range(num_curves)]


@pytest.mark.parametrize('steps_scale, num_steps', [(5.0, 20), (200.0, 100)])
def test_fit_recovers_a_known_steps_scale_within_20_percent(steps_scale, num_steps):
    # Setup: 20 drones' noisy curves with a known h0. A curve much shorter than h0 cannot tell
    # h0 from a straight line (20 steps of h0 = 200 bend by 5 %), so h0 = 200 gets 100 steps.
    curves = _curves(steps_scale, num_steps=num_steps, noise=0.02)
    # Execute
    fit = fit_steps_scale(curves, max_steps_scale=1000.0)
    # Assert
    assert fit.steps_scale == pytest.approx(steps_scale, rel=0.2)
    assert fit.informative and not fit.at_upper_bound
    assert (fit.num_steps, fit.num_curves) == (num_steps, 20)


def test_fit_is_exact_on_noise_free_curves_and_deterministic():
    # Execute
    first = fit_steps_scale(_curves(12.0), max_steps_scale=200.0)
    second = fit_steps_scale(_curves(12.0), max_steps_scale=200.0)
    # Assert
    assert first == second
    assert first.steps_scale == pytest.approx(12.0, rel=1e-3) and first.rmse < 1e-6


def test_a_curve_without_saturation_fits_at_the_cap():
    # Setup: the loss falls linearly (and a little faster later): no diminishing returns
    h = np.arange(12)
    curve = 2.305 - 0.0004 * h - 0.00002 * h ** 2
    # Execute
    fit = fit_steps_scale([curve], max_steps_scale=200.0)
    # Assert
    assert fit.at_upper_bound and fit.steps_scale == pytest.approx(200.0)
    assert fit.informative


def test_a_loss_that_does_not_fall_is_not_informative():
    # Execute
    fit = fit_steps_scale([2.3 + 0.01 * np.arange(8)], max_steps_scale=200.0)
    # Assert
    assert fit.drop == 0.0 and not fit.informative


def test_mean_curve_averages_the_drones_that_reach_each_step():
    # Execute
    mean = mean_loss_curve([[3.0, 2.0, 1.0], [1.0, 0.0], []])
    # Assert
    assert mean.tolist() == [2.0, 1.0, 1.0]


@pytest.mark.parametrize('curves, kwargs, message', [
    ([[2.3, 2.2]], {}, 'at least 3 steps'),
    ([], {}, 'at least one non-empty'),
    ([[2.3, float('nan'), 2.1]], {}, 'finite'),
    ([[2.3, 2.2, 2.1]], {'min_steps_scale': 0.0}, 'min_steps_scale'),
])
def test_bad_fit_inputs_are_named(curves, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fit_steps_scale(curves, max_steps_scale=100.0, **kwargs)


# --- power-law progress (resources.lgc_steps_scale: online) ------------------------------------

@pytest.mark.parametrize('beta', [0.5, 1.0, 1.3])
def test_exponent_fit_recovers_a_known_power_law(beta):
    # Setup: ℓ(h) = 2.3 − 0.01 h^β over h = 0..11 (the probe's mid decision)
    curve = 2.3 - 0.01 * np.arange(12) ** beta
    # Execute
    fit = fit_steps_exponent(curve)
    # Assert
    assert fit.exponent == pytest.approx(beta, abs=0.003)
    assert fit.drop == pytest.approx(0.01, rel=0.02) and fit.informative
    assert not fit.at_bound and fit.num_steps == 12


def test_exponent_fit_of_a_rising_curve_is_not_informative_and_bounds_are_flagged():
    # Execute
    rising = fit_steps_exponent([2.3, 2.31, 2.32, 2.33])
    steep = fit_steps_exponent(2.3 - 0.001 * np.arange(12) ** 3.0)
    # Assert
    assert not rising.informative and rising.drop == 0.0
    assert steep.at_bound and steep.exponent == pytest.approx(2.0)
    with pytest.raises(ValueError, match='3 points'):
        fit_steps_exponent([2.3, 2.2])


def test_power_law_progress_replaces_the_exponential_h_factor():
    # Setup
    env = LgcEnv(_tiny_config(steps_exponent=0.5))
    exp_env = LgcEnv(_tiny_config())
    # Assert: (H / H_max)^β, 1 at H_max; the default keeps (1 − e^(−H/h0))
    assert env.steps_factor(6) == pytest.approx(1.0)
    assert env.steps_factor(3) == pytest.approx(0.5 ** 0.5)
    assert exp_env.steps_factor(3) == pytest.approx(-np.expm1(-3 / 3.0))
    with pytest.raises(ValueError, match='steps_exponent'):
        _tiny_config(steps_exponent=0.0)


def test_finetune_continues_the_agent_and_is_seeded():
    # Setup: an agent trained where few steps pay (β = 0.25), then the curve turns convex.
    # Small networks and few steps (as in the determinism test): what is checked is that the
    # fine-tuning starts from the agent and is seeded, not how well either agent has learnt.
    ddpg = DdpgConfig(hidden=16, train_steps=150, warmup_steps=50, batch_size=16)
    concave, convex = _tiny_config(steps_exponent=0.25), _tiny_config(steps_exponent=2.0)
    agents = [train_ddpg(concave, ddpg, seed=3)[0] for _ in range(2)]
    first = [p.detach().clone() for p in agents[0].actor.parameters()]
    # Execute
    logs = [finetune_ddpg(a, convex, train_steps=100, seed=7) for a in agents]
    # Assert: the networks were updated from their weights; the same seed, the same agent
    assert len(logs[0].critic_losses) > 0
    assert any(not bool((p == q).all()) for p, q in zip(first, agents[0].actor.parameters()))
    assert all(bool((p == q).all()) for p, q in zip(agents[0].actor.parameters(),
                                                     agents[1].actor.parameters()))
    assert logs[0].critic_losses == logs[1].critic_losses


def _fresh_state(rng: np.random.Generator) -> int:
    """The bit generator's position: two generators on one stream have equal states."""
    return int(rng.bit_generator.state['state']['state'])


@pytest.mark.parametrize('run', ['train', 'finetune'])
def test_the_agents_exploration_and_the_surrogates_fading_are_two_streams(monkeypatch, run):
    import fl_uav.planning.lgc_control as lgc_control

    # Arrange: the agent and surrogate _run_ddpg is handed, before either draws
    config = _tiny_config()
    ddpg = DdpgConfig(hidden=8, train_steps=1, warmup_steps=1, batch_size=4)
    agent, _ = train_ddpg(config, ddpg, seed=3)
    seen = []
    monkeypatch.setattr(lgc_control, '_run_ddpg', lambda agent, env, *rest: seen.append(
        (_fresh_state(agent.rng), _fresh_state(env.rng))))
    # Act
    if run == 'train':
        train_ddpg(config, ddpg, seed=3)
    else:
        finetune_ddpg(agent, config, train_steps=1, seed=3)
    # Assert
    [(agent_stream, env_stream)] = seen
    assert agent_stream != env_stream
