import math

import numpy as np
import pytest

from fl_uav.aggregation.osafl import OSAFL, OnlineScore, cosine

from ._helpers import json_round_trip, model, update


def _trace(interval: int, cosines: list[float]) -> list[float]:
    scores = OnlineScore(interval)
    return [scores.step({0: c})[0] for c in cosines]


def test_score_trace_for_upsilon_three_matches_algorithm_2():
    # Arrange: e_K = exp(λ̃^K)
    cos = [0.1, -0.2, 0.3, 0.9, -0.5, 0.0, 0.4]
    e = [math.exp(c) for c in cos]
    # Act
    trace = _trace(3, cos)
    # Assert: digest §2.4 trace
    first, second = (e[0] + e[1] + e[2]) / 3, (e[3] + e[4] + e[5]) / 3
    assert trace == pytest.approx([e[0], e[0], first, first, first, second, second])


def test_upsilon_one_fix_gives_each_round_its_own_score():
    cos = [0.5, -0.5, 0.2]
    assert _trace(1, cos) == pytest.approx([math.exp(c) for c in cos])  # not e0 + e1


def test_late_joiner_is_initialised_and_averaged_over_its_own_terms():
    scores = OnlineScore(3)
    scores.step({0: 0.0})
    first = scores.step({0: 0.0, 1: 0.5})            # t = 1: drone 1 first seen
    last = scores.step({0: 0.0, 1: -0.5})            # t = 2: update round
    assert first[1] == pytest.approx(math.exp(0.5))
    assert last[1] == pytest.approx((math.exp(0.5) + math.exp(-0.5)) / 2)
    assert last[0] == pytest.approx(1.0)


def test_cosine_guards_zero_vectors():
    assert cosine(np.zeros(3), np.ones(3)) == 0.0
    assert cosine(np.array([1.0, 0.0]), np.array([2.0, 0.0])) == pytest.approx(1.0)


def test_osafl_score_weighted_step_on_a_hand_example():
    # Arrange: d = Δ/κ = (2,0)/1 and (0,4)/2 = (0,2); mean (1,1); both cosines 1/√2
    updates = [update(0, [2.0, 0.0], steps=1), update(1, [0.0, 4.0], steps=2)]
    # Act
    result = OSAFL(score_interval=3, server_lr=2.0).aggregate(1, model([0.0, 0.0]), updates)
    # Assert: w + η̃ Σ ½ e^{1/√2} d_u = 2 · e^{1/√2} · (1, 1); scores are not renormalised
    score = math.exp(1 / math.sqrt(2))
    np.testing.assert_allclose(result.weights['w'], [2 * score, 2 * score], rtol=1e-6)
    assert result.metrics['scores'] == pytest.approx({0: score, 1: score})



def test_exact_score_of_eq_29_shrinks_each_drone_by_its_local_steps():
    # Arrange: the hand example above with k0 = 2: ρ = κ/(κ + k0) = 1/3 (κ = 1), 1/2 (κ = 2)
    updates = [update(0, [2.0, 0.0], steps=1), update(1, [0.0, 4.0], steps=2)]
    strategy = OSAFL(score_interval=3, server_lr=2.0, shrink_steps=2.0)
    # Act
    result = strategy.aggregate(1, model([0.0, 0.0]), updates)
    # Assert: w + η̃ Σ ½ ρ_u e^{1/√2} d_u; the scores themselves (Algorithm 2) are unchanged
    score = math.exp(1 / math.sqrt(2))
    expected = [2 * 0.5 * score * 2 / 3, 2 * 0.5 * score * 2 / 2]
    np.testing.assert_allclose(result.weights['w'], expected, rtol=1e-6)
    assert result.metrics['scores'] == pytest.approx({0: score, 1: score})
    assert result.metrics['score_mass'] == pytest.approx(0.5 * score * (1 / 3 + 1 / 2))


@pytest.mark.parametrize('bad', [-1.0, math.nan, math.inf])
def test_exact_score_rejects_a_bad_shrink_constant(bad):
    with pytest.raises(ValueError, match='shrink_steps'):
        OSAFL(shrink_steps=bad)

def test_osafl_downweights_the_dissenting_drone():
    updates = [update(0, [1.0], steps=1), update(1, [1.0], steps=1), update(2, [-1.0], steps=1)]
    result = OSAFL(score_interval=1).aggregate(1, model([0.0]), updates)
    expected = (math.e + math.e - 1 / math.e) / 3
    np.testing.assert_allclose(result.weights['w'], [expected], rtol=1e-6)


def test_osafl_empty_round_keeps_model_and_scores():
    strategy = OSAFL()
    w = model([1.0])
    for updates in ([], [update(0, [1.0], steps=1, n=0)], [update(0, [1.0])]):
        result = strategy.aggregate(1, w, updates)
        assert result.empty
        np.testing.assert_array_equal(result.weights['w'], w['w'])
    assert strategy.scores.t == 0


def test_osafl_state_round_trips_through_json():
    # Arrange
    strategy = OSAFL(score_interval=3)
    strategy.aggregate(1, model([0.0, 0.0]), [update(0, [1.0, 0.0], steps=1),
                                              update(1, [0.0, 1.0], steps=1)])
    restored = OSAFL(score_interval=3)
    # Act
    restored.load_state_dict(json_round_trip(strategy.state_dict()))
    # Assert: both continue identically
    nxt = [update(0, [1.0, 1.0], steps=2), update(1, [1.0, -1.0], steps=1)]
    a = strategy.aggregate(2, model([0.0, 0.0]), nxt)
    b = restored.aggregate(2, model([0.0, 0.0]), nxt)
    np.testing.assert_array_equal(a.weights['w'], b.weights['w'])
    assert restored.state_dict() == strategy.state_dict()


def test_config_key_reaches_the_strategy_and_a_bad_value_names_the_key():
    from fl_uav.aggregation.config import AggregationConfig

    built = AggregationConfig(strategy='osafl', score_shrink_steps=4.0).build(num_clients=3)
    assert built.shrink_steps == 4.0
    with pytest.raises(ValueError, match='score_shrink_steps'):
        AggregationConfig(strategy='osafl', score_shrink_steps=-0.5)
