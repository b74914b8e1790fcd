import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_uav.learning.partition import (
    by_folder,
    by_location,
    dirichlet,
    iid,
    label_shards,
    partition_stats,
)

BALANCED = np.repeat(np.arange(10), 300).astype(np.int64)
# Unequal class sizes like scikit-learn's digits (174–183 per class), in a shuffled order.
DIGITS_LIKE = np.random.default_rng(7).permutation(
    np.repeat(np.arange(10), [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]))
POSITIONS = np.random.default_rng(3).uniform(0.0, [400.0, 200.0], size=(3000, 2))
FOLDERS = np.random.default_rng(5).integers(0, 7, 3000)   # each sample's folder, 7 folders

PARTITIONERS = {
    'iid': lambda seed: iid(BALANCED, 7, seed),
    'dirichlet': lambda seed: dirichlet(BALANCED, 7, 0.3, seed),
    'label_shards': lambda seed: label_shards(DIGITS_LIKE, 13, 2, seed),
    'label_shards_straddling': lambda seed: label_shards(BALANCED, 3, 2, seed),
    'grid': lambda seed: by_location(POSITIONS, 7, seed, 'grid'),
    'kmeans': lambda seed: by_location(POSITIONS, 7, seed, 'kmeans'),
    'folders': lambda seed: by_folder(FOLDERS, 7),
}
SIZES = {'iid': 3000, 'dirichlet': 3000, 'label_shards': len(DIGITS_LIKE),
         'label_shards_straddling': 3000, 'grid': 3000, 'kmeans': 3000, 'folders': 3000}


@pytest.mark.parametrize('name', list(PARTITIONERS))
def test_partition_is_disjoint_complete_and_non_empty(name):
    # Act
    parts = PARTITIONERS[name](0)
    # Assert
    everything = np.concatenate(parts)
    assert all(p.dtype == np.int64 and len(p) > 0 for p in parts)
    assert all(np.all(np.diff(p) > 0) for p in parts)
    assert len(everything) == SIZES[name]
    assert np.array_equal(np.sort(everything), np.arange(SIZES[name]))


@pytest.mark.parametrize('name', list(PARTITIONERS))
def test_partition_is_deterministic_for_a_seed(name):
    first, again = PARTITIONERS[name](11), PARTITIONERS[name](11)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    if name not in ('grid', 'folders'):  # these splits do not depend on the seed
        other = PARTITIONERS[name](12)
        assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(p) for p in iid(np.zeros(103, np.int64), 10, 0)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 103


def test_dirichlet_large_alpha_approaches_iid():
    for seed in range(5):
        parts = dirichlet(BALANCED, 10, 1e4, seed)
        stats = partition_stats(BALANCED, parts, 10)
        iid_stats = partition_stats(BALANCED, iid(BALANCED, 10, seed), 10)
        assert stats.classes_per_client.min() == 10
        assert stats.mean_emd < 0.02 and stats.mean_emd < iid_stats.mean_emd
        assert np.all(np.abs(stats.samples_per_client - 300) <= 15)


def test_dirichlet_small_alpha_gives_few_classes_per_client():
    for seed in range(5):
        stats = partition_stats(BALANCED, dirichlet(BALANCED, 10, 0.05, seed), 10)
        assert stats.classes_per_client.mean() <= 5.0
        assert stats.mean_emd > 0.5


def test_dirichlet_repairs_to_min_size_when_retries_run_out():
    # Arrange: α this small leaves clients nearly empty in almost every draw
    labels = np.repeat(np.arange(5), 40).astype(np.int64)
    # Act
    parts = dirichlet(labels, 20, 0.01, seed=2, min_size=6, max_retries=1)
    # Assert
    assert min(len(p) for p in parts) >= 6
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(200))


@pytest.mark.parametrize('kwargs, match', [
    ({'alpha': 0.0}, 'alpha'),
    ({'alpha': 1.0, 'min_size': 0}, 'min_size'),
    ({'alpha': 1.0, 'min_size': 400}, 'min_size=400'),
])
def test_dirichlet_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dirichlet(BALANCED, 10, seed=0, **kwargs)


@pytest.mark.parametrize('labels, k, per_client', [
    (BALANCED, 10, 2), (BALANCED, 100, 2), (BALANCED, 5, 3), (BALANCED, 4, 10),
    (DIGITS_LIKE, 10, 2), (DIGITS_LIKE, 100, 2), (DIGITS_LIKE, 7, 3), (DIGITS_LIKE, 30, 1),
])
def test_label_shards_give_exactly_the_requested_classes(labels, k, per_client):
    for seed in range(3):
        parts = label_shards(labels, k, per_client, seed)
        stats = partition_stats(labels, parts, 10)
        assert stats.classes_per_client.tolist() == [per_client] * k
        assert sum(len(p) for p in parts) == len(labels)


def test_label_shards_cap_a_dominant_class_at_k_shards():
    # Arrange: class 0 holds 70 of 80 samples; 20 equal shards would give it 18 > k = 10
    labels = np.repeat(np.arange(3), (70, 5, 5)).astype(np.int64)
    # Act
    parts = label_shards(labels, 10, 2, seed=0)
    # Assert
    assert partition_stats(labels, parts, 3).classes_per_client.tolist() == [2] * 10


def test_label_shards_balanced_sizes_match_sort_and_cut():
    parts = label_shards(BALANCED, 10, 2, seed=0)
    assert [len(p) for p in parts] == [300] * 10


def test_label_shards_with_fewer_shards_than_classes_still_cover_everything():
    parts = label_shards(BALANCED, 2, 2, seed=0)
    stats = partition_stats(BALANCED, parts, 10)
    assert stats.samples_per_client.tolist() == [1500, 1500]
    assert stats.classes_per_client.sum() >= 10


def test_location_partition_groups_nearby_points():
    # Arrange: four tight blobs far apart
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [500.0, 0.0], [0.0, 500.0], [500.0, 500.0]])
    blob = np.repeat(np.arange(4), 50)
    positions = centres[blob] + rng.normal(0.0, 10.0, size=(200, 2))
    for method in ('grid', 'kmeans'):
        # Act
        parts = by_location(positions, 4, seed=1, method=method)
        # Assert: each client owns exactly one blob
        assert sorted(len(np.unique(blob[p])) for p in parts) == [1, 1, 1, 1], method
        assert sorted(int(blob[p[0]]) for p in parts) == [0, 1, 2, 3], method


@pytest.mark.parametrize('method', ['grid', 'kmeans'])
def test_location_clients_are_compact(method):
    parts = by_location(POSITIONS, 8, seed=0, method=method)
    spread = np.linalg.norm(POSITIONS - POSITIONS.mean(axis=0), axis=1).mean()
    for part in parts:
        points = POSITIONS[part]
        assert np.linalg.norm(points - points.mean(axis=0), axis=1).mean() < 0.5 * spread


def test_grid_regions_are_balanced():
    sizes = [len(p) for p in by_location(POSITIONS, 7, seed=0, method='grid')]
    assert max(sizes) - min(sizes) <= 1


def test_location_rejects_bad_input():
    with pytest.raises(ValueError, match='N×2'):
        by_location(np.zeros((5, 3)), 2, 0)
    with pytest.raises(ValueError, match='method'):
        by_location(POSITIONS, 2, 0, method='voronoi')
    with pytest.raises(ValueError, match='distinct'):
        by_location(np.zeros((5, 2)), 2, 0, method='kmeans')


def test_folder_partition_gives_client_c_exactly_folder_c():
    parts = by_folder(np.array([2, 0, 2, 1, 0], np.int64), 3)
    assert [p.tolist() for p in parts] == [[1, 4], [3], [0, 2]]


@pytest.mark.parametrize(('folders', 'k', 'match'), [
    ([0, 1, 1], 3, 'folder 2 holds no sample'),
    ([0, 3], 3, r'outside \[0, 3\)'),
    ([0, -1], 2, 'outside'),
    ([[0, 1]], 2, '1-D integer'),
    ([0.0, 1.0], 2, '1-D integer'),
    ([0], 0, 'k must be >= 1'),
])
def test_folder_partition_needs_one_non_empty_folder_per_client(folders, k, match):
    with pytest.raises(ValueError, match=match):
        by_folder(np.array(folders), k)


def test_partition_stats_by_hand():
    # Arrange: pooled mix is 50/50; client 0 is pure class 0, client 1 is 1:3
    labels = np.array([0, 0, 0, 1, 1, 1], np.int64)
    parts = [np.array([0, 1]), np.array([2, 3, 4, 5])]
    # Act
    stats = partition_stats(labels, parts, num_classes=3)
    # Assert
    assert stats.samples_per_client.tolist() == [2, 4]
    assert stats.classes_per_client.tolist() == [1, 2]
    assert stats.class_counts.tolist() == [[2, 0, 0], [1, 3, 0]]
    np.testing.assert_allclose(stats.emd, [0.5, 0.25])
    np.testing.assert_allclose(stats.kl, [np.log(2.0), 0.25 * np.log(0.5) + 0.75 * np.log(1.5)])
    assert stats.summary()['samples_min'] == 2.0


@pytest.mark.parametrize('call', [lambda: iid(BALANCED, 0, 0),
                                  lambda: iid(BALANCED, 3001, 0),
                                  lambda: label_shards(BALANCED, 10, 0, 0),
                                  lambda: iid(np.zeros((2, 2), np.int64), 1, 0)])
def test_bad_k_or_labels_raise(call):
    with pytest.raises(ValueError):
        call()


@settings(max_examples=60, deadline=None)
@given(labels=st.lists(st.integers(0, 5), min_size=1, max_size=60),
       data=st.data())
def test_every_partitioner_is_a_partition(labels, data):
    # Arrange
    labels = np.array(labels, np.int64)
    k = data.draw(st.integers(1, len(labels)), label='k')
    seed = data.draw(st.integers(0, 2**31), label='seed')
    positions = np.random.default_rng(seed).normal(size=(len(labels), 2))
    parts_by_name = {
        'iid': iid(labels, k, seed),
        'dirichlet': dirichlet(labels, k, 0.1, seed, min_size=1, max_retries=2),
        'grid': by_location(positions, k, seed, 'grid'),
        'kmeans': by_location(positions, k, seed, 'kmeans'),
        'folders': by_folder(np.random.default_rng(seed).permutation(len(labels)) % k, k),
    }
    if 2 * k <= len(labels):
        parts_by_name['label_shards'] = label_shards(labels, k, 2, seed)
    for name, parts in parts_by_name.items():
        # Assert
        assert len(parts) == k, name
        assert all(len(p) > 0 for p in parts), name
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels))), name


def _dirichlet_reference(labels, k, alpha, seed, min_size=10, max_retries=100):
    """The split as first written (split every draw, repair with a linear donor search):
    dirichlet() must give exactly its parts, only faster (10,000 drones: 44 s -> seconds)."""
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for _ in range(max(1, max_retries)):
        parts = [[] for _ in range(k)]
        for class_members in members:
            shuffled = rng.permutation(class_members)
            proportions = rng.dirichlet(np.full(k, float(alpha)))
            cuts = np.floor(np.cumsum(proportions)[:-1] * len(shuffled)).astype(np.int64)
            for client, piece in enumerate(np.split(shuffled, cuts)):
                parts[client].append(piece)
        merged = [np.concatenate(p) for p in parts]
        if min(len(p) for p in merged) >= min_size:
            return [np.sort(p) for p in merged]
    merged = [rng.permutation(p) for p in merged]
    for short in sorted(range(k), key=lambda i: (len(merged[i]), i)):
        while len(merged[short]) < min_size:
            donor = max(range(k), key=lambda i: (len(merged[i]), -i))
            give = min(min_size - len(merged[short]), len(merged[donor]) - min_size)
            merged[short] = np.concatenate([merged[short], merged[donor][:give]])
            merged[donor] = merged[donor][give:]
    return [np.sort(p) for p in merged]


@pytest.mark.parametrize('k, alpha, min_size, retries', [
    (7, 0.3, 10, 100), (40, 0.5, 10, 100), (140, 0.1, 12, 3), (290, 0.5, 6, 2),
    (600, 0.5, 1, 20)])
def test_dirichlet_gives_the_parts_of_its_reference(k, alpha, min_size, retries):
    for labels in (BALANCED, DIGITS_LIKE):
        got = dirichlet(labels, k, alpha, 11, min_size=min_size, max_retries=retries)
        want = _dirichlet_reference(labels, k, alpha, 11, min_size, retries)
        assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))
