import numpy as np
import pytest

from fl_uav.learning.buffer import BufferConfig, OnboardBuffer, retained_positions


def _img(value: int) -> np.ndarray:
    return np.full((2, 2, 3), value, np.uint8)


def _filled(policy: str, labels: list[int], capacity: int) -> OnboardBuffer:
    buffer = OnboardBuffer(BufferConfig(capacity_samples=capacity, policy=policy), (2, 2, 3))
    for i, label in enumerate(labels):
        buffer.add(_img(i), label)
    return buffer


def test_fifo_evicts_oldest_when_full():
    # Prepare
    buffer = OnboardBuffer(BufferConfig(capacity_samples=3, policy='fifo'), (2, 2, 3))
    # Execute
    for i in range(5):
        buffer.add(_img(i), label=i)
    images, labels = buffer.arrays()
    # Assert
    assert len(buffer) == 3
    assert labels.tolist() == [2, 3, 4]
    assert [int(im[0, 0, 0]) for im in images] == [2, 3, 4]
    assert buffer.total_evicted == 2 and buffer.total_offered == 5


def test_append_only_refuses_when_full():
    buffer = OnboardBuffer(BufferConfig(capacity_samples=2, policy='append_only'), (2, 2, 3))
    accepted = [buffer.add(_img(i), label=i) for i in range(4)]
    _, labels = buffer.arrays()
    assert accepted == [True, True, False, False]
    assert labels.tolist() == [0, 1]
    assert buffer.total_refused == 2


def test_trim_top_label_evicts_the_oldest_sample_of_the_top_label():
    # Prepare: stored labels (oldest first) 1 0 0 1 0; label 0 is the top label (3 samples)
    buffer = _filled('trim_top_label', [1, 0, 0, 1, 0], capacity=5)
    # Execute: one arrival of label 2
    accepted = buffer.add(_img(9), 2)
    images, labels = buffer.arrays()
    # Assert: the oldest label-0 sample (the 2nd stored, image 1) is gone, not the oldest (1)
    assert accepted
    assert labels.tolist() == [1, 0, 1, 0, 2]
    assert [int(im[0, 0, 0]) for im in images] == [0, 2, 3, 4, 9]
    assert buffer.total_evicted == 1


def test_trim_top_label_breaks_ties_by_age():
    # labels 1 and 0 both have 2 samples; the oldest of them (position 0, label 1) goes
    keep = retained_positions([1, 0, 0, 1], [3], capacity_samples=4, policy='trim_top_label')
    assert keep.tolist() == [1, 2, 3, 4]


def test_trim_top_label_applies_a_batch_one_arrival_at_a_time():
    # stored 0 0 0 1 (positions 0-3, cap 4); arrivals 1 1 1 (positions 4-6):
    # 4: label 0 tops (3) -> evict 0; 5: tie 2-2 -> the oldest of both labels, 1;
    # 6: label 1 tops (3) -> its oldest, 3. Left: 2 4 5 6.
    keep = retained_positions([0, 0, 0, 1], [1, 1, 1], 4, 'trim_top_label')
    assert keep.tolist() == [2, 4, 5, 6]


def test_fifo_and_append_only_positions():
    assert retained_positions([5, 6], [7, 8, 9], 3, 'fifo').tolist() == [2, 3, 4]
    assert retained_positions([5, 6], [7, 8, 9], 3, 'append_only').tolist() == [0, 1, 2]
    assert retained_positions([5], [7], 3, 'trim_top_label').tolist() == [0, 1]


@pytest.mark.parametrize('policy', ['fifo', 'append_only', 'trim_top_label'])
def test_extend_equals_adding_one_by_one(policy):
    # Prepare
    labels = np.random.default_rng(3).integers(0, 4, 40)
    one_by_one = _filled(policy, labels.tolist(), capacity=7)
    batched = OnboardBuffer(BufferConfig(capacity_samples=7, policy=policy), (2, 2, 3))
    # Execute
    batched.extend(np.stack([_img(i) for i in range(10)]), labels[:10])
    batched.extend(np.stack([_img(i) for i in range(10, 40)]), labels[10:])
    # Assert
    for a, b in zip(one_by_one.arrays(), batched.arrays()):
        np.testing.assert_array_equal(a, b)
    assert (one_by_one.total_evicted, one_by_one.total_refused) == (
        batched.total_evicted, batched.total_refused)


def test_buffer_keeps_what_the_shared_rule_keeps():
    # The engine's buffers apply retained_positions to index arrays; the onboard buffer must
    # hold exactly the samples the same call selects.
    labels = np.random.default_rng(5).integers(0, 3, 25)
    buffer = _filled('trim_top_label', labels.tolist(), capacity=6)
    stored = np.arange(0)
    for i in range(25):   # the engine's way: positions into [stored, incoming]
        merged = np.concatenate([stored, [i]])
        stored = merged[retained_positions(labels[stored], labels[[i]], 6, 'trim_top_label')]
    images, kept_labels = buffer.arrays()
    assert [int(im[0, 0, 0]) for im in images] == stored.tolist()
    assert kept_labels.tolist() == labels[stored].tolist()


def test_class_counts():
    buffer = OnboardBuffer(BufferConfig(capacity_samples=10), (2, 2, 3))
    for label in (0, 2, 2, 5):
        buffer.add(_img(0), label)
    assert buffer.class_counts(6).tolist() == [1, 0, 2, 0, 0, 1]


@pytest.mark.parametrize('kwargs, key', [({'capacity_samples': 0}, 'buffer.capacity_samples'),
                                         ({'policy': 'lifo'}, 'buffer.policy')])
def test_bad_config_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        BufferConfig(**kwargs)


def test_unknown_policy_lists_the_choices():
    with pytest.raises(ValueError, match='fifo, append_only, trim_top_label'):
        retained_positions([0], [1], 1, 'random')


def test_overfull_stored_labels_are_rejected():
    with pytest.raises(ValueError, match='exceed'):
        retained_positions([0, 1, 2], [1], 2, 'fifo')
