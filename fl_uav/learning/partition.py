"""Split a labelled dataset among K clients (drones), deterministically for a seed.

Every partitioner returns ``list[np.ndarray]``: one sorted int64 array of sample indices per
client. The arrays are disjoint and, together, cover every sample. No client is empty.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

LOCATION_METHODS = ('grid', 'kmeans')


def _check_labels(labels: np.ndarray, k: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f'labels must be a 1-D integer array, got {labels.dtype} {labels.shape}')
    if len(labels) and labels.min() < 0:
        raise ValueError('labels must be >= 0')
    if k < 1:
        raise ValueError(f'k must be >= 1, got {k}')
    if k > len(labels):
        raise ValueError(f'cannot give {k} clients at least one sample each from {len(labels)}')
    return labels


def _finish(parts: list[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, np.int64)) for p in parts]


def iid(labels: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    """A uniformly random split into k parts whose sizes differ by at most one."""
    labels = _check_labels(labels, k)
    order = np.random.default_rng(seed).permutation(len(labels))
    return _finish(np.array_split(order, k))


def dirichlet(labels: np.ndarray, k: int, alpha: float, seed: int, min_size: int = 10,
              max_retries: int = 100) -> list[np.ndarray]:
    """Label-skewed split with per-class Dirichlet proportions (the common Hsu et al. recipe).

    For each class c, proportions q_c ~ Dir(alpha · 1_k) over the k clients are drawn and the
    class's shuffled samples are cut at ``floor(cumsum(q_c) · n_c)``. Small alpha gives each
    client few classes and very unequal sizes; alpha → ∞ tends to an IID split.

    The whole draw is repeated (up to ``max_retries`` times, with the same generator, so it
    stays deterministic) until every client holds at least ``min_size`` samples. If no draw
    succeeds, the last one is repaired: each short client receives random samples taken from
    the currently largest client until it reaches ``min_size``. Repair moves few samples but
    slightly softens the skew of the donors.
    """
    labels = _check_labels(labels, k)
    if not alpha > 0.0:
        raise ValueError(f'alpha must be > 0, got {alpha}')
    if min_size < 1:
        raise ValueError(f'min_size must be >= 1 (no client may be empty), got {min_size}')
    if min_size * k > len(labels):
        raise ValueError(f'min_size={min_size} × k={k} exceeds the {len(labels)} samples; '
                         f'lower min_size')
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    members = [np.flatnonzero(labels == c) for c in classes]
    for _ in range(max(1, max_retries)):
        draw = []   # (shuffled class, cuts): the clients' pieces, cut only when kept
        sizes = np.zeros(k, np.int64)
        for class_members in members:
            shuffled = rng.permutation(class_members)
            proportions = rng.dirichlet(np.full(k, float(alpha)))
            cuts = np.floor(np.cumsum(proportions)[:-1] * len(shuffled)).astype(np.int64)
            draw.append((shuffled, cuts))
            sizes += np.diff(cuts, prepend=0, append=len(shuffled))
        if sizes.min() >= min_size:
            return _finish(_merged(draw, k))
    return _finish(_repair_min_size(_merged(draw, k), min_size, rng))


def _merged(draw: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[np.ndarray]:
    """Each client's samples of a Dirichlet draw: its piece of every class, in class order."""
    bounds = [np.concatenate([[0], cuts, [len(shuffled)]]) for shuffled, cuts in draw]
    return [np.concatenate([shuffled[b[client]:b[client + 1]]
                            for (shuffled, _), b in zip(draw, bounds)]) for client in range(k)]


def _repair_min_size(parts: list[np.ndarray], min_size: int,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Fill each short client (shortest first) from the currently largest one (lowest index
    among equals) until it holds ``min_size`` samples; the largest is kept in a heap of
    (-size, index) whose stale entries are dropped when they surface."""
    parts = [rng.permutation(p) for p in parts]
    heap = [(-len(p), i) for i, p in enumerate(parts)]
    heapq.heapify(heap)

    def largest() -> int:
        while -heap[0][0] != len(parts[heap[0][1]]):
            heapq.heappop(heap)   # a size that has changed since it was pushed
        return heap[0][1]

    for short in sorted(range(len(parts)), key=lambda i: (len(parts[i]), i)):
        while len(parts[short]) < min_size:
            donor = largest()
            give = min(min_size - len(parts[short]), len(parts[donor]) - min_size)
            parts[short] = np.concatenate([parts[short], parts[donor][:give]])
            parts[donor] = parts[donor][give:]
            heapq.heappush(heap, (-len(parts[donor]), donor))
            heapq.heappush(heap, (-len(parts[short]), short))
    return parts


def label_shards(labels: np.ndarray, k: int, shards_per_client: int,
                 seed: int) -> list[np.ndarray]:
    """Pathological non-IID split: each client gets ``shards_per_client`` single-class shards.

    The recipe of McMahan et al. (and the Flower baseline): order the samples by label, cut
    ``k · shards_per_client`` shards, deal them out at random, then fix duplicates by seeded
    swaps so that every client holds exactly ``shards_per_client`` distinct classes.

    Shards are cut inside classes, so each holds one class: every class gets at least one
    shard, and the rest go one at a time to the class whose shards are currently largest,
    with at most k shards per class. For balanced classes whose size is a multiple of the
    shard size this is exactly the sort-and-cut recipe. Every client holds exactly
    ``shards_per_client`` distinct classes whenever that is possible, i.e. when
    ``sum_c min(n_c, k) >= k · shards_per_client``; otherwise (one class dominating the
    data) some clients hold a class twice.

    When ``k · shards_per_client`` is smaller than the number of classes, single-class shards
    cannot cover the data; the label-sorted order is then cut into equal contiguous shards
    (which straddle classes) as in the original recipe, and clients hold more classes.
    """
    labels = _check_labels(labels, k)
    if shards_per_client < 1:
        raise ValueError(f'shards_per_client must be >= 1, got {shards_per_client}')
    num_shards = k * shards_per_client
    if num_shards > len(labels):
        raise ValueError(f'{num_shards} shards need at least {num_shards} samples, '
                         f'got {len(labels)}')
    rng = np.random.default_rng(seed)
    # Shuffle first so the order inside a class is random, then sort stably by label.
    shuffled = rng.permutation(len(labels))
    by_label = shuffled[np.argsort(labels[shuffled], kind='stable')]
    classes, counts = np.unique(labels, return_counts=True)
    if num_shards < len(classes):
        shards = np.array_split(by_label, num_shards)
        order = rng.permutation(num_shards)
        return _finish([np.concatenate([shards[s] for s in order[c::k]]) for c in range(k)])
    shards_per_class = _shards_per_class(counts, num_shards, k)
    shards: list[np.ndarray] = []
    shard_class: list[int] = []
    starts = np.concatenate([[0], np.cumsum(counts)])
    for c, n_shards in enumerate(shards_per_class):
        class_order = by_label[starts[c]:starts[c + 1]]
        shards += np.array_split(class_order, n_shards)
        shard_class += [c] * int(n_shards)
    owners = _assign_shards(np.array(shard_class), k, shards_per_client, rng)
    return _finish([np.concatenate([shards[s] for s in owner]) for owner in owners])


def _shards_per_class(counts: np.ndarray, num_shards: int, k: int) -> np.ndarray:
    """One shard per class, the rest one by one to the class with the largest shards.

    A class takes at most k shards (more would force a client to hold two shards of it)
    unless the classes cannot absorb num_shards that way; then the cap is dropped.
    """
    for cap in (np.minimum(counts, k), counts):
        if int(cap.sum()) < num_shards:
            continue
        per_class = np.ones(len(counts), np.int64)
        heap = [(-float(counts[c]), c) for c in range(len(counts)) if cap[c] > 1]
        heapq.heapify(heap)
        for _ in range(num_shards - len(counts)):
            _, c = heapq.heappop(heap)
            per_class[c] += 1
            if per_class[c] < cap[c]:
                heapq.heappush(heap, (-counts[c] / per_class[c], c))
        return per_class
    raise AssertionError('unreachable: the caller ensures num_shards <= len(labels)')


def _assign_shards(shard_class: np.ndarray, k: int, per_client: int,
                   rng: np.random.Generator) -> list[list[int]]:
    """Deal shards at random, then swap until no client holds two shards of one class."""
    order = rng.permutation(len(shard_class))
    owners = [list(order[c * per_client:(c + 1) * per_client]) for c in range(k)]
    for _ in range(10 * len(shard_class)):
        duplicate = _find_duplicate(owners, shard_class)
        if duplicate is None:
            return owners
        if not _swap_out(owners, shard_class, *duplicate, rng):
            break
    if _find_duplicate(owners, shard_class) is None:
        return owners
    # Fallback that is duplicate-free whenever no class has more than k shards: group shards
    # by class (classes in random order) and deal them round robin.
    class_order = rng.permutation(int(shard_class.max()) + 1)
    rank = np.empty_like(class_order)
    rank[class_order] = np.arange(len(class_order))
    grouped = sorted(range(len(shard_class)), key=lambda s: (rank[shard_class[s]], s))
    clients = rng.permutation(k)
    owners = [[] for _ in range(k)]
    for position, shard in enumerate(grouped):
        owners[clients[position % k]].append(shard)
    return owners


def _find_duplicate(owners: list[list[int]], shard_class: np.ndarray) -> tuple[int, int] | None:
    for client, shards in enumerate(owners):
        seen: set[int] = set()
        for slot, shard in enumerate(shards):
            if shard_class[shard] in seen:
                return client, slot
            seen.add(int(shard_class[shard]))
    return None


def _swap_out(owners: list[list[int]], shard_class: np.ndarray, client: int, slot: int,
              rng: np.random.Generator) -> bool:
    """Swap owners[client][slot] with a shard of another client so neither has a duplicate."""
    moving = owners[client][slot]
    keep = {int(shard_class[s]) for i, s in enumerate(owners[client]) if i != slot}
    for other in rng.permutation(len(owners)):
        if other == client:
            continue
        for other_slot in rng.permutation(len(owners[other])):
            candidate = owners[other][other_slot]
            rest = {int(shard_class[s]) for i, s in enumerate(owners[other]) if i != other_slot}
            if int(shard_class[candidate]) not in keep and int(shard_class[moving]) not in rest:
                owners[client][slot], owners[other][other_slot] = candidate, moving
                return True
    return False


def by_location(positions_enu_m: np.ndarray, k: int, seed: int,
                method: str = 'grid', max_iter: int = 100) -> list[np.ndarray]:
    """Split samples by where they were captured, so each client owns a region of the world.

    positions_enu_m: float N×2 (east, north) in metres.

    * 'grid': balanced rectangular regions. The area is cut into ``cols`` vertical strips
      (cols ≈ sqrt(k · width / height)) holding equal sample counts, and each strip into
      rows by north; client sizes differ by at most one. Clients run west to east, then
      south to north inside a strip. Cuts are by rank, so tied coordinates may fall on
      either side. The seed is unused.
    * 'kmeans': Lloyd's k-means with k-means++ seeding; client = cluster, ordered as the
      seeding picked them. Sizes follow the density of the data. Needs at least k distinct
      positions.
    """
    positions = np.asarray(positions_enu_m, np.float64)
    if positions.ndim != 2 or positions.shape[1] != 2:
        raise ValueError(f'positions_enu_m must be N×2, got shape {positions.shape}')
    if not np.all(np.isfinite(positions)):
        raise ValueError('positions_enu_m must be finite')
    if k < 1 or k > len(positions):
        raise ValueError(f'k must be in [1, {len(positions)}], got {k}')
    if method == 'grid':
        return _finish(_grid_regions(positions, k))
    if method == 'kmeans':
        return _finish(_kmeans_regions(positions, k, np.random.default_rng(seed), max_iter))
    raise ValueError(f'method {method!r} unknown; choices: {", ".join(LOCATION_METHODS)}')


def _grid_regions(positions: np.ndarray, k: int) -> list[np.ndarray]:
    span = np.ptp(positions, axis=0)
    width, height = max(float(span[0]), 1e-9), max(float(span[1]), 1e-9)
    cols = int(np.clip(round(math.sqrt(k * width / height)), 1, k))
    rows_per_col = [len(r) for r in np.array_split(np.arange(k), cols)]
    client_sizes = [len(p) for p in np.array_split(np.arange(len(positions)), k)]
    index = np.arange(len(positions))
    by_east = index[np.lexsort((index, positions[:, 1], positions[:, 0]))]
    parts: list[np.ndarray] = []
    start, client = 0, 0
    for rows in rows_per_col:
        sizes = client_sizes[client:client + rows]
        client += rows
        strip = by_east[start:start + sum(sizes)]
        start += sum(sizes)
        strip = strip[np.lexsort((strip, positions[strip, 0], positions[strip, 1]))]
        parts += np.split(strip, np.cumsum(sizes)[:-1])
    return parts


def _kmeans_regions(positions: np.ndarray, k: int, rng: np.random.Generator,
                    max_iter: int) -> list[np.ndarray]:
    if len(np.unique(positions, axis=0)) < k:
        raise ValueError(f'k-means needs at least k={k} distinct positions')
    centres = _kmeans_plus_plus(positions, k, rng)
    assignment = np.full(len(positions), -1)
    rows = np.arange(len(positions))
    for _ in range(max(1, max_iter)):
        distances = _squared_distances(positions, centres)
        new_assignment = distances.argmin(axis=1)
        counts = np.bincount(new_assignment, minlength=k)
        gap = distances[rows, new_assignment]
        for empty in np.flatnonzero(counts == 0):
            # Reseed an empty cluster at the farthest point of a cluster that can spare one.
            movable = np.where(counts[new_assignment] >= 2, gap, -1.0)
            farthest = int(movable.argmax())
            counts[new_assignment[farthest]] -= 1
            new_assignment[farthest], counts[empty], gap[farthest] = empty, 1, 0.0
        if np.array_equal(new_assignment, assignment):
            break
        assignment = new_assignment
        centres[:, 0] = np.bincount(assignment, positions[:, 0], k) / counts
        centres[:, 1] = np.bincount(assignment, positions[:, 1], k) / counts
    return [np.flatnonzero(assignment == c) for c in range(k)]


def _kmeans_plus_plus(positions: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    centres = np.empty((k, 2))
    centres[0] = positions[rng.integers(len(positions))]
    nearest = ((positions - centres[0]) ** 2).sum(axis=1)
    for c in range(1, k):
        total = nearest.sum()
        pick = rng.choice(len(positions), p=nearest / total) if total > 0 \
            else rng.integers(len(positions))
        centres[c] = positions[pick]
        nearest = np.minimum(nearest, ((positions - centres[c]) ** 2).sum(axis=1))
    return centres


def _squared_distances(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """N×k squared distances, without building an N×k×2 array."""
    cross = points @ centres.T
    squared = (points ** 2).sum(axis=1)[:, None] - 2.0 * cross + (centres ** 2).sum(axis=1)
    return np.maximum(squared, 0.0)


def by_folder(folders: np.ndarray, k: int) -> list[np.ndarray]:
    """Client c gets the samples of folder c (the data came split: a survey per drone).

    folders: each sample's folder index; every index in [0, k) must occur and no other.
    """
    folders = np.asarray(folders)
    if folders.ndim != 1 or not np.issubdtype(folders.dtype, np.integer):
        raise ValueError(f'folders must be a 1-D integer array, got {folders.dtype} '
                         f'{folders.shape}')
    if k < 1:
        raise ValueError(f'k must be >= 1, got {k}')
    if len(folders) and (folders.min() < 0 or folders.max() >= k):
        raise ValueError(f'folder indices span [{folders.min()}, {folders.max()}], outside '
                         f'[0, {k}) for k={k} clients')
    counts = np.bincount(folders, minlength=k)
    if (counts == 0).any():
        raise ValueError(f'folder {int(np.flatnonzero(counts == 0)[0])} holds no sample: '
                         f'k={k} clients need {k} non-empty folders')
    return _finish([np.flatnonzero(folders == c) for c in range(k)])


@dataclass(frozen=True, eq=False)
class PartitionStats:
    """How a partition spreads samples and classes over clients.

    samples_per_client, classes_per_client: int64 arrays of length k.
    class_counts: int64 k×num_classes matrix.
    emd: per-client earth mover's distance between the client's label distribution and the
        pooled one. With a 0/1 ground distance between classes this is the total variation
        distance, 0.5 · L1, in [0, 1] (0 = same mix as the pool).
    kl: per-client KL(client || pooled) in nats (0 = same mix); empty clients get 0.
    """

    samples_per_client: np.ndarray
    classes_per_client: np.ndarray
    class_counts: np.ndarray
    emd: np.ndarray
    kl: np.ndarray

    @property
    def mean_emd(self) -> float:
        """Heterogeneity score: mean EMD over clients."""
        return float(self.emd.mean()) if len(self.emd) else 0.0

    @property
    def mean_kl(self) -> float:
        """Mean KL divergence over clients."""
        return float(self.kl.mean()) if len(self.kl) else 0.0

    def summary(self) -> dict[str, float]:
        """Scalar figures for logs."""
        return {
            'clients': float(len(self.samples_per_client)),
            'samples_min': float(self.samples_per_client.min()) if len(self.emd) else 0.0,
            'samples_max': float(self.samples_per_client.max()) if len(self.emd) else 0.0,
            'classes_mean': float(self.classes_per_client.mean()) if len(self.emd) else 0.0,
            'emd_mean': self.mean_emd,
            'kl_mean': self.mean_kl,
        }


def partition_stats(labels: np.ndarray, parts: list[np.ndarray],
                    num_classes: int) -> PartitionStats:
    """Samples and classes per client and the label-skew scores of a partition.

    The pooled distribution is the label mix of all samples the parts hold.
    """
    labels = np.asarray(labels)
    counts = np.zeros((len(parts), num_classes), np.int64)
    for client, part in enumerate(parts):
        counts[client] = np.bincount(labels[np.asarray(part, np.int64)], minlength=num_classes)
    sizes = counts.sum(axis=1)
    pooled = counts.sum(axis=0) / max(int(counts.sum()), 1)
    local = counts / np.maximum(sizes, 1)[:, None]
    emd = 0.5 * np.abs(local - pooled[None, :]).sum(axis=1)
    with np.errstate(divide='ignore', invalid='ignore'):
        terms = np.where(local > 0, local * np.log(local / pooled[None, :]), 0.0)
    kl = terms.sum(axis=1)
    emd[sizes == 0] = 0.0
    return PartitionStats(sizes, (counts > 0).sum(axis=1).astype(np.int64), counts, emd, kl)
