"""FedDPQ's data top-up (eqs. (1)-(3)) and the default augmentation generator."""

import numpy as np
import pytest

from fl_uav.configschema import ConfigError, build_config
from fl_uav.engine.config import ExperimentConfig
from fl_uav.learning.buffer import BufferConfig, OnboardBuffer
from fl_uav.learning.topup import (
    AugmentationGenerator,
    Generator,
    build_generator,
    mixed_counts,
    top_up,
    topup_counts,
    topup_floor,
)


def test_counts_match_eqs_1_to_3_by_hand():
    # Prepare: digest 001's example, D_loc = (200, 50, 0, 10), Delta = 0.4 -> floor 80
    counts = np.array([200, 50, 0, 10])
    # Execute
    generated = topup_counts(counts, 0.4)
    # Assert: eq. (1) per class, eq. (2) mixed counts, eq. (3) total
    assert generated.tolist() == [0, 30, 80, 70]
    assert mixed_counts(counts, 0.4).tolist() == [200, 80, 80, 80]
    assert int(generated.sum()) == 180


def test_fractional_floor_rounds_up_so_eq_2_holds():
    # Delta * D' = 0.25 * 7 = 1.75: a class with 1 sample is below it (eq. (2)) and gets 1 more
    assert topup_floor([7, 1, 0], 0.25) == 2
    assert topup_counts([7, 1, 0], 0.25).tolist() == [0, 1, 2]
    # float noise: 0.1 * 30 = 3.0000000000000004 must give a floor of 3, not 4
    assert topup_counts([30, 3, 0], 0.1).tolist() == [0, 0, 3]


def test_no_data_means_nothing_to_generate():
    assert topup_counts(np.zeros(5, np.int64), 0.4).tolist() == [0] * 5


@pytest.mark.parametrize('factor', [0.0, -0.1, float('nan')])
def test_bad_factor_names_the_key(factor):
    with pytest.raises(ValueError, match='data.topup_factor'):
        topup_counts([3, 1], factor)


def _class_images(labels, shape=(6, 6, 3), dtype=np.uint8, scale=40):
    """Sample i of class c is the constant image (c + 1) * scale: its class is readable."""
    return np.stack([np.full(shape, (c + 1) * scale, dtype) for c in labels])


def test_augmentation_preserves_labels_shape_dtype_and_range():
    # Prepare: no jitter so a sample's value names its class; class 2 is absent
    labels = np.array([0, 0, 0, 0, 1, 3])
    images = _class_images(labels)
    generator = AugmentationGenerator(brightness_jitter=0.0, max_shift_fraction=0.2)
    # Execute
    result = top_up(images, labels, 4, 1.0, generator, np.random.default_rng(0))
    # Assert: eq. (1) asks (0, 3, 4, 3); class 2 cannot be made by augmentation
    assert result.requested_per_class.tolist() == [0, 3, 4, 3]
    assert result.generated_per_class.tolist() == [0, 3, 0, 3]
    assert result.generated_total == 6 and result.shortfall == 4
    assert result.images.shape == (6, 6, 6, 3) and result.images.dtype == np.uint8
    assert [int(im.max()) // 40 - 1 for im in result.images] == result.labels.tolist()
    assert np.all(result.images == result.images[:, :1, :1, :1])   # constant images stay so


def test_float_chw_samples_stay_in_range_with_brightness_jitter():
    rng = np.random.default_rng(1)
    images = rng.uniform(0.0, 1.0, (10, 1, 8, 8)).astype(np.float32)
    images[0, 0, 0, 0], images[1, 0, 0, 0] = 0.0, 1.0
    labels = np.array([0] * 8 + [1] * 2)
    generator = AugmentationGenerator(brightness_jitter=0.5, layout='chw')
    made, made_labels = generator.generate(images, labels, np.array([0, 6]),
                                           np.random.default_rng(2))
    assert made.shape == (6, 1, 8, 8) and made.dtype == np.float32
    assert made.min() >= 0.0 and made.max() <= 1.0
    assert made_labels.tolist() == [1] * 6


def test_dihedral_outputs_are_rotations_or_mirror_images_of_a_same_class_source():
    # Prepare: distinct random sources, no shift or jitter
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (3, 5, 5, 3), dtype=np.uint8)
    labels = np.array([0, 1, 1])
    generator = AugmentationGenerator('dihedral', max_shift_fraction=0.0, brightness_jitter=0.0)
    # Execute
    made, made_labels = generator.generate(images, labels, np.array([0, 12]),
                                           np.random.default_rng(4))
    # Assert
    orbit = [np.rot90(m, k, axes=(0, 1)) for src in images[1:] for m in (src, src[:, ::-1])
             for k in range(4)]
    assert made_labels.tolist() == [1] * 12
    assert all(any(np.array_equal(out, o) for o in orbit) for out in made)
    assert len({out.tobytes() for out in made}) > 2   # more than the identity is used


def test_shift_only_generator_never_flips():
    # an asymmetric digit-like image: a flip or a rotation would move the bright corner
    image = np.zeros((8, 8), np.float32)
    image[0, 0] = 1.0
    generator = build_generator('augment_shift', 'chw')
    made, _ = generator.generate(image[None], np.array([0]), np.array([20]),
                                 np.random.default_rng(5))
    rows, cols = np.nonzero(made.max(axis=0) > 0.5)
    assert made.shape == (20, 8, 8)
    assert rows.max() <= 1 and cols.max() <= 1   # the corner moved by a shift of <= 1 px only


def test_augmentation_is_deterministic_per_seed():
    labels = np.array([0, 0, 1, 2, 2, 2])
    images = np.random.default_rng(6).integers(0, 256, (6, 6, 6, 3), dtype=np.uint8)
    generator = build_generator('augment_dihedral')
    a = top_up(images, labels, 3, 1.0, generator, np.random.default_rng(7))
    b = top_up(images, labels, 3, 1.0, generator, np.random.default_rng(7))
    c = top_up(images, labels, 3, 1.0, generator, np.random.default_rng(8))
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, c.images)


def test_works_on_an_onboard_buffers_arrays():
    buffer = OnboardBuffer(BufferConfig(capacity_samples=8), (4, 4, 3))
    for label in (0, 0, 0, 0, 1):
        buffer.add(np.full((4, 4, 3), 50 * (label + 1), np.uint8), label)
    result = top_up(*buffer.arrays(), 2, 0.5, build_generator('augment_dihedral'),
                    np.random.default_rng(0))
    assert result.labels.tolist() == [1]
    assert result.images.shape == (1, 4, 4, 3)


class _CountingGenerator:
    """A stand-in for a generative model: makes every requested class, even absent ones."""

    def generate(self, images, labels, counts_per_class, rng):
        made_labels = np.repeat(np.arange(len(counts_per_class)), counts_per_class)
        return np.zeros((len(made_labels), *images.shape[1:]), images.dtype), made_labels


def test_a_generative_model_plugs_in_and_fills_absent_classes():
    generator = _CountingGenerator()
    result = top_up(np.zeros((3, 2, 2), np.uint8), np.array([0, 0, 0]), 3, 0.4, generator,
                    np.random.default_rng(0))
    assert isinstance(generator, Generator)
    assert result.generated_per_class.tolist() == [0, 2, 2] and result.shortfall == 0


def test_a_generator_that_overshoots_eq_1_is_rejected():
    class TooMany:
        def generate(self, images, labels, counts_per_class, rng):
            return images, labels

    with pytest.raises(ValueError, match='eq. \\(1\\)'):
        top_up(np.zeros((2, 2, 2), np.uint8), np.array([0, 1]), 2, 0.5, TooMany(),
               np.random.default_rng(0))


def test_auto_generator_follows_the_dataset():
    assert build_generator('auto', dataset='world').transforms == 'dihedral'
    assert build_generator('auto', dataset='fashion_mnist').transforms == 'hflip'
    assert build_generator('auto', dataset='digits').transforms == 'none'


@pytest.mark.parametrize('key, value', [('data.topup_factor', 0.0),
                                        ('data.topup_factor', 1.5),
                                        ('data.topup_generator', 'diffusion'),
                                        ('buffer.policy', 'lru')])
def test_config_errors_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace('.', '\\.')):
        build_config(ExperimentConfig, {key: value})


def test_unknown_generator_lists_the_choices():
    with pytest.raises(ValueError, match='augment_dihedral'):
        build_generator('gan')
