import numpy as np
import pytest

from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.osafl import OSAFL
from fl_uav.aggregation.robust import (
    CoordinateMedian,
    NormClip,
    TrimmedMean,
    clip_delta,
)

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
