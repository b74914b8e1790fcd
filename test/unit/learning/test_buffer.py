import numpy as np
import pytest

from fl_uav.learning.buffer import BufferConfig, OnboardBuffer


def _img(value: int) -> np.ndarray:
    return np.full((2, 2, 3), value, np.uint8)


def test_fifo_evicts_oldest_when_full():
    # Prepare
    buffer = OnboardBuffer(BufferConfig(capacity_samples=3, policy='fifo'), (2, 2, 3))
    # Execute
    for i in range(5):
        buffer.add(_img(i), label=i)
    images, labels = buffer.arrays()
    # Assert
    assert len(buffer) == 3
    assert sorted(labels.tolist()) == [2, 3, 4]
    assert sorted(int(im[0, 0, 0]) for im in images) == [2, 3, 4]
    assert buffer.total_evicted == 2 and buffer.total_offered == 5


def test_append_only_refuses_when_full():
    buffer = OnboardBuffer(BufferConfig(capacity_samples=2, policy='append_only'), (2, 2, 3))
    accepted = [buffer.add(_img(i), label=i) for i in range(4)]
    _, labels = buffer.arrays()
    assert accepted == [True, True, False, False]
    assert labels.tolist() == [0, 1]
    assert buffer.total_refused == 2


def test_class_counts():
    buffer = OnboardBuffer(BufferConfig(capacity_samples=10), (2, 2, 3))
    for label in (0, 2, 2, 5):
        buffer.add(_img(0), label)
    assert buffer.class_counts(6).tolist() == [1, 0, 2, 0, 0, 1]


@pytest.mark.parametrize('kwargs, field', [({'capacity_samples': 0}, 'capacity_samples'),
                                           ({'policy': 'lifo'}, 'policy')])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        BufferConfig(**kwargs)
