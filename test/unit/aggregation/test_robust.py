import dataclasses

import numpy as np
import pytest

from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.osafl import OSAFL
from fl_uav.aggregation.robust import (
    CoordinateMedian,
    Krum,
    MultiKrum,
    NormClip,
    TrimmedMean,
    cap_samples,
    clip_delta,
    krum_byzantine,
    krum_scores,
    norm_report,
    unwrapped,
)
from fl_uav.aggregation.strategy import ClientUpdate

from ._helpers import json_round_trip, model, update

# five drones, one outlier in the first coordinate
OUTLIER = [update(0, [1.0, 5.0]), update(1, [2.0, 4.0]), update(2, [3.0, 3.0]),
           update(3, [4.0, 2.0]), update(4, [100.0, 1.0])]


def test_coordinate_median_ignores_the_outlier():
    result = CoordinateMedian().aggregate(1, model([0.0, 0.0]), OUTLIER)
    np.testing.assert_allclose(result.weights['w'], [3.0, 3.0])


def test_trimmed_mean_drops_the_extremes():
    # β = 0.2, m = 5 -> k = 1: first coordinate mean(2, 3, 4) = 3, second mean(2, 3, 4) = 3
    result = TrimmedMean(beta=0.2).aggregate(1, model([0.0, 0.0]), OUTLIER)
    np.testing.assert_allclose(result.weights['w'], [3.0, 3.0])
    # β = 0 is the plain mean
    plain = TrimmedMean(beta=0.0).aggregate(1, model([0.0, 0.0]), OUTLIER)
    np.testing.assert_allclose(plain.weights['w'], [22.0, 3.0])


def test_trimmed_mean_rejects_half_or_more():
    with pytest.raises(ValueError):
        TrimmedMean(beta=0.5)


def test_clip_delta_scales_to_the_bound_over_all_tensors():
    clipped, norm = clip_delta({'a': np.array([3.0]), 'b': np.array([4.0])}, 1.0)
    assert norm == pytest.approx(5.0)
    np.testing.assert_allclose([clipped['a'][0], clipped['b'][0]], [0.6, 0.8])
    same, _ = clip_delta({'a': np.array([0.3])}, 1.0)
    np.testing.assert_array_equal(same['a'], [0.3])


def test_an_updates_norm_is_over_all_its_tensors_and_follows_a_replaced_delta():
    # Arrange: Δ = (3 | 4) in two tensors, float32
    first = ClientUpdate(0, 1, {'a': np.array([3.0], np.float32),
                                'b': np.array([4.0], np.float32)}, 5)
    # Act: read twice (the second from its cache), then a copy with another delta
    norms = (first.norm, first.norm)
    second = dataclasses.replace(first, delta={'a': np.array([6.0, 8.0], np.float32)})
    # Assert
    assert norms == (5.0, 5.0)
    assert second.norm == 10.0
    assert ClientUpdate(1, 1, {}, 0).norm == 0.0


def test_norm_clip_wraps_fedavg():
    # Arrange: deltas (6, 8) (norm 10 -> clipped to (3, 4) at C = 5) and (1, 0)
    strategy = NormClip(FedAvg(), max_norm=5.0)
    updates = [update(0, [6.0, 8.0]), update(1, [1.0, 0.0])]
    # Act
    result = strategy.aggregate(1, model([0.0, 0.0]), updates)
    # Assert
    np.testing.assert_allclose(result.weights['w'], [2.0, 2.0])
    assert result.metrics['clipped'] == 1


def test_norm_clip_keeps_inner_metrics_knobs_and_state():
    inner = OSAFL(score_interval=2)
    strategy = NormClip(inner, max_norm=1.0)
    strategy.aggregate(1, model([0.0]), [update(0, [3.0], steps=1)])
    restored = NormClip(OSAFL(score_interval=2), max_norm=1.0)
    restored.load_state_dict(json_round_trip(strategy.state_dict()))
    assert restored.state_dict() == strategy.state_dict()
    assert strategy.configure_round(1, [0]) == {0: {}}


def test_robust_empty_rounds_keep_the_model():
    w = model([1.0, 2.0])
    for strategy in (CoordinateMedian(), TrimmedMean(0.1), NormClip(FedAvg(), 1.0)):
        for updates in ([], [update(0, [9.0, 9.0], n=0)]):
            result = strategy.aggregate(1, w, updates)
            assert result.empty
            np.testing.assert_array_equal(result.weights['w'], w['w'])


def test_median_norm_clip_cuts_the_large_deltas_to_the_rounds_median_norm():
    # Arrange: norms 1, 2, 3, 300 -> median 2.5; the first two are left alone
    strategy = NormClip(FedAvg(), max_norm='median')
    updates = [update(0, [1.0, 0.0]), update(1, [0.0, 2.0]), update(2, [3.0, 0.0]),
               update(3, [0.0, -300.0])]
    # Act
    result = strategy.aggregate(1, model([0.0, 0.0]), updates)
    # Assert: mean of (1, 0), (0, 2), (2.5, 0), (0, -2.5)
    np.testing.assert_allclose(result.weights['w'], [3.5 / 4, -0.5 / 4], rtol=1e-6)
    assert result.metrics['clipped'] == 2 and result.metrics['clip_norm'] == 2.5


def test_median_norm_clip_ignores_updates_without_samples_for_the_bound():
    strategy = NormClip(FedAvg(), max_norm='median')
    updates = [update(0, [4.0]), update(1, [0.0], n=0), update(2, [0.0], n=0)]
    result = strategy.aggregate(1, model([0.0]), updates)
    np.testing.assert_allclose(result.weights['w'], [4.0])
    assert result.metrics['clip_norm'] == 4.0
    empty = strategy.aggregate(1, model([0.0]), [])
    assert empty.empty and 'clip_norm' not in empty.metrics


@pytest.mark.parametrize('bad', [0.0, -1.0, 'mean'])
def test_norm_clip_refuses_a_bound_that_is_not_positive_or_median(bad):
    with pytest.raises(ValueError, match="max_norm must be > 0 or 'median'"):
        NormClip(FedAvg(), bad)


# --- issue 26 item 6: adaptive clipping by default, Krum, sample caps, norm reports ----------

def test_adaptive_clipping_cuts_a_x100_update_to_the_factor_times_the_median_norm():
    # Arrange: four honest deltas of norm 1, 1, 1.2, 1.4 and one 100 × (norm 100)
    strategy = NormClip(FedAvg(), max_norm='median', factor=2.0)
    honest = [update(0, [1.0, 0.0]), update(1, [0.0, 1.0]), update(2, [1.2, 0.0]),
              update(3, [0.0, 1.4])]
    forged = update(4, [100.0, 0.0])
    # Act
    result = strategy.aggregate(1, model([0.0, 0.0]), [*honest, forged])
    # Assert: median norm 1.2 -> C = 2.4; only the forgery is cut, to (2.4, 0)
    assert result.metrics['clip_norm'] == pytest.approx(2.4)
    assert result.metrics['clipped'] == 1
    np.testing.assert_allclose(result.weights['w'], [(1.0 + 1.2 + 2.4) / 5, 2.4 / 5],
                               rtol=1e-6)


def test_the_config_default_is_fedavg_clipped_to_twice_the_median_norm():
    from fl_uav.aggregation.config import AggregationConfig

    built = AggregationConfig().build(num_clients=4)
    assert isinstance(built, NormClip) and isinstance(built.inner, FedAvg)
    assert (built.max_norm, built.factor) == ('median', 2.0)
    assert built.server_lr == 1.0                     # the inner rule's, through the wrapper
    assert unwrapped(built) is built.inner
    assert not isinstance(AggregationConfig(clip_norm=0.0).build(num_clients=4), NormClip)


@pytest.mark.parametrize('keys, message', [
    ({'clip_factor': 0.5}, 'clip_factor must be a finite number >= 1'),
    ({'clip_norm': 0.0, 'clip_factor': 3.0}, 'clip_factor 3 has no effect with clip_norm 0.0'),
    ({'byzantine_share': 0.5}, r'byzantine_share in \[0, 0.5\)'),
    ({'krum_selected': -1}, 'krum_selected >= 0'),
])
def test_bad_robust_keys_are_refused(keys, message):
    from fl_uav.aggregation.config import AggregationConfig

    with pytest.raises(ValueError, match=message):
        AggregationConfig(**keys)


# an honest cluster around (1, 1) and two forgeries: one far off, one scaled up
CLUSTER = [update(0, [1.0, 1.0]), update(1, [1.1, 0.9]), update(2, [0.9, 1.1]),
           update(3, [1.0, 1.2]), update(4, [1.2, 1.0]), update(5, [0.8, 1.0]),
           update(6, [-20.0, 30.0]), update(7, [100.0, 100.0])]


def test_krum_scores_sum_the_squared_distances_to_the_n_minus_f_minus_2_nearest():
    # three points on a line at 0, 1, 3: with f = 0 each sums its n - 2 = 1 nearest
    deltas = [{'w': np.array([x])} for x in (0.0, 1.0, 3.0)]
    np.testing.assert_allclose(krum_scores(deltas, ['w'], 0), [1.0, 1.0, 4.0])
    assert krum_byzantine(10, 0.2) == 2 and krum_byzantine(5, 0.4) == 1
    assert krum_byzantine(2, 0.4) == 0


def test_krum_picks_an_update_of_the_honest_cluster():
    # Arrange: n = 8, byzantine_share 0.25 -> f = 2, each scores its 4 nearest
    strategy = Krum(byzantine_share=0.25)
    # Act
    result = strategy.aggregate(1, model([0.0, 0.0]), CLUSTER)
    # Assert: drone 0 sits at the cluster's centre
    assert result.used == (0,) and result.metrics['byzantine'] == 2
    np.testing.assert_allclose(result.weights['w'], [1.0, 1.0])


def test_multi_krum_averages_the_m_best_and_leaves_the_forgeries_out():
    # Arrange / Act: m = 0 -> n - f = 6; m = 3 -> the three best
    every = MultiKrum(byzantine_share=0.25).aggregate(1, model([0.0, 0.0]), CLUSTER)
    three = MultiKrum(byzantine_share=0.25, selected=3).aggregate(1, model([0.0, 0.0]),
                                                                   CLUSTER)
    # Assert
    assert every.used == (0, 1, 2, 3, 4, 5) and every.metrics['participants'] == 6
    np.testing.assert_allclose(every.weights['w'], [1.0, 1.0333333], rtol=1e-5)
    assert len(three.used) == 3 and set(three.used) <= {0, 1, 2, 3, 4, 5}
    assert 0 in three.used


def test_krum_with_one_or_two_updates_and_without_samples():
    one = Krum().aggregate(1, model([0.0]), [update(3, [2.0])])
    assert one.used == (3,)
    np.testing.assert_allclose(one.weights['w'], [2.0])
    two = Krum().aggregate(1, model([0.0]), [update(5, [1.0]), update(4, [3.0])])
    assert two.used == (4,)                      # a tie goes to the lower drone id
    none = MultiKrum().aggregate(1, model([0.0]), [update(0, [9.0], n=0)])
    assert none.empty


def test_cap_samples_keeps_a_count_within_the_cap_and_cuts_one_above():
    honest = update(0, [1.0], n=500)
    assert cap_samples(honest, 600) is honest
    assert cap_samples(update(0, [1.0], n=2 ** 53), 600).num_samples == 600


def test_a_2_53_claim_weighs_no_more_than_its_cap_in_fedavg():
    # Arrange: drone 0 claims 2^53 samples for a delta of 10; drone 1 holds 600, delta 0
    claims = [update(0, [10.0], n=2 ** 53), update(1, [0.0], n=600)]
    # Act
    raw = FedAvg().aggregate(1, model([0.0]), claims)
    capped = FedAvg().aggregate(1, model([0.0]), [cap_samples(u, 600) for u in claims])
    # Assert: uncapped it dictates the model; capped it weighs what drone 1 does
    np.testing.assert_allclose(raw.weights['w'], [10.0])
    np.testing.assert_allclose(capped.weights['w'], [5.0])


def test_norm_report_flags_the_updates_over_five_times_the_median():
    # norms 1, 2, 3, 13 and a zero update (no scale: left out of the median) -> median 2.5
    report = norm_report([update(0, [1.0]), update(1, [2.0]), update(2, [3.0]),
                          update(3, [-13.0]), update(4, [0.0], n=0)])
    assert report.norms == {0: 1.0, 1: 2.0, 2: 3.0, 3: 13.0, 4: 0.0}
    assert report.median == 2.5 and report.outliers == (3,)   # 13 > 5 × 2.5
    assert report.ratio(3) == pytest.approx(5.2)
    assert norm_report([update(0, [1.0]), update(1, [2.0]), update(2, [9.0])]).outliers == ()
