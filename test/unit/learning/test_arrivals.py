import numpy as np
import pytest

from fl_uav.learning.arrivals import (
    ClientStream,
    binomial_arrivals,
    draw_arrivals,
    osafl_arrival_slots,
)


def test_binomial_mean_is_e_times_p():
    # Arrange
    rng = np.random.default_rng(0)
    pools = np.full(4, 10**6)
    # Act
    draws = np.stack([binomial_arrivals(pools, [5, 5, 3, 0], [0.3, 0.8, 0.5, 0.9], rng)
                      for _ in range(4000)])
    # Assert: standard error of each mean is below 0.015
    np.testing.assert_allclose(draws.mean(axis=0), [1.5, 4.0, 1.5, 0.0], atol=0.06)
    assert draws.max(axis=0).tolist() == [5, 5, 3, 0]
    assert draws.dtype == np.int64


def test_binomial_capped_by_pool():
    rng = np.random.default_rng(1)
    draws = np.stack([binomial_arrivals([0, 1, 2], 5, 1.0, rng) for _ in range(20)])
    assert draws.tolist() == [[0, 1, 2]] * 20


def test_binomial_same_seed_same_draws():
    first = binomial_arrivals([9, 9, 9], 5, 0.5, np.random.default_rng(3))
    again = binomial_arrivals([9, 9, 9], 5, 0.5, np.random.default_rng(3))
    assert first.tolist() == again.tolist()


@pytest.mark.parametrize('pools, e, p, match', [
    ([1, 2], [1, 2, 3], 0.5, 'e must be'),
    ([1, 2], 2, [0.5], 'p must be'),
    ([1, 2], 2, 1.5, r'p must be in \[0, 1\]'),
    ([1, 2], -1, 0.5, 'e must be integers'),
    ([1, 2], 2.5, 0.5, 'e must be integers'),
    ([-1, 2], 2, 0.5, 'pool_sizes'),
])
def test_binomial_rejects_bad_arguments(pools, e, p, match):
    with pytest.raises(ValueError, match=match):
        binomial_arrivals(pools, e, p, np.random.default_rng(0))


def test_osafl_slots_follow_eq_31():
    # |D_all| − D = 1000 → 1000 // 200 = 5; 600 // 200 = 3; 10 // 200 = 0; negative → 0; cap 5
    slots = osafl_arrival_slots([1300, 900, 310, 200, 5000], [300, 300, 300, 300, 300], 200)
    assert slots.tolist() == [5, 3, 0, 0, 5]


def test_stream_stop_draws_each_sample_once_then_nothing():
    # Arrange
    partition = np.arange(100, 110)
    stream = ClientStream(partition, seed=0, when_exhausted='stop')
    # Act
    drawn = [stream.draw(4), stream.draw(4), stream.draw(4), stream.draw(4)]
    # Assert
    assert [len(d) for d in drawn] == [4, 4, 2, 0]
    assert sorted(np.concatenate(drawn).tolist()) == partition.tolist()
    assert stream.exhausted and stream.remaining == 0 and stream.available == 0
    assert stream.total_drawn == 10


def test_stream_wrap_starts_a_new_pass_without_repeating_within_a_draw():
    stream = ClientStream(np.arange(10), seed=5, when_exhausted='wrap')
    first = stream.draw(7)
    crossing = stream.draw(6)  # 3 from the first pass, 3 from the second
    assert len(np.unique(crossing)) == 6
    assert stream.passes_completed == 1 and not stream.exhausted
    assert stream.available == 10
    rest_of_pass = stream.draw(7)
    second_pass = np.concatenate([crossing[3:], rest_of_pass])
    assert sorted(second_pass.tolist()) == list(range(10))
    assert sorted(np.concatenate([first, crossing[:3]]).tolist()) == list(range(10))


def test_stream_is_deterministic_and_random_order():
    first = ClientStream(np.arange(50), seed=9).draw(50)
    again = ClientStream(np.arange(50), seed=9).draw(50)
    assert first.tolist() == again.tolist()
    assert first.tolist() != list(range(50))


def test_empty_stream():
    stream = ClientStream([], seed=0, when_exhausted='wrap')
    assert stream.exhausted and stream.draw(3).tolist() == []


def test_stream_rejects_unknown_policy():
    with pytest.raises(ValueError, match='when_exhausted'):
        ClientStream([1, 2], seed=0, when_exhausted='loop')


def test_draw_arrivals_never_exceeds_a_stopping_pool():
    # Arrange: 3 drones, OSAFL-style initial fill then 30 rounds of arrivals
    partitions = [np.arange(0, 40), np.arange(40, 50), np.arange(50, 300)]
    streams = [ClientStream(p, seed=i) for i, p in enumerate(partitions)]
    initial = [s.draw(8) for s in streams]
    rng = np.random.default_rng(0)
    # Act
    rounds = [draw_arrivals(streams, 5, [0.5, 0.9, 0.3], rng) for _ in range(30)]
    # Assert
    for client, partition in enumerate(partitions):
        got = np.concatenate([initial[client]] + [r[client] for r in rounds])
        assert len(np.unique(got)) == len(got)
        assert set(got.tolist()) <= set(partition.tolist())
    assert streams[1].exhausted
    assert sum(len(r[2]) for r in rounds) == pytest.approx(30 * 5 * 0.3, abs=15)
