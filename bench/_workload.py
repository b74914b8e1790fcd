"""No figure of its own: the workload of docs/benchmarks/engine.md's Flower yardstick.

Data, split, label shards, model and per-(round, client) shuffle seeds of
shared/docs/reference/flower_baseline.md §2, in one place so that the yardstick's driver
(vectorized_training.py) and the Flower apps it runs in bench/.venv-flower (flower_app.py) both
import it and neither imports the other. Imports only the standard library at load time: numpy,
scikit-learn and torch are imported inside the functions, so it loads in either venv.
"""

from __future__ import annotations

SEED = 0
TRAIN_PER_CLASS = 150
BATCH_SIZE = 16
LR = 0.05


def load_split():
    """Stratified digits split: 150 per class for training (1500, class-sorted), 297 test."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(SEED)
    train, test = [], []
    for cls in range(10):
        members = rng.permutation(np.flatnonzero(labels == cls))
        train.append(members[:TRAIN_PER_CLASS])
        test.append(members[TRAIN_PER_CLASS:])
    train_idx = np.concatenate(train)
    test_idx = np.sort(np.concatenate(test))
    return images[train_idx], labels[train_idx], images[test_idx], labels[test_idx]


def label_shards(train_labels, num_clients: int):
    """2N single-class shards, 2 per client, seeded swaps until each client has 2 classes."""
    import numpy as np

    if num_clients % 5:
        raise ValueError('the number of clients must be divisible by 5')
    shards, shard_class = [], []
    for cls in range(10):
        block = np.flatnonzero(train_labels == cls)
        for shard in np.array_split(block, 2 * num_clients // 10):
            shards.append(shard)
            shard_class.append(cls)
    shard_class = np.array(shard_class)
    rng = np.random.default_rng(SEED + 1)
    pairs = rng.permutation(len(shards)).reshape(num_clients, 2)
    for _ in range(100_000):
        clashing = np.flatnonzero(shard_class[pairs[:, 0]] == shard_class[pairs[:, 1]])
        if len(clashing) == 0:
            break
        a = clashing[0]
        b = int(rng.integers(num_clients))
        j = int(rng.integers(2))
        if a == b:
            continue
        if (shard_class[pairs[b, j]] != shard_class[pairs[a, 0]]
                and shard_class[pairs[a, 1]] != shard_class[pairs[b, 1 - j]]):
            pairs[a, 1], pairs[b, j] = pairs[b, j], pairs[a, 1]
    else:
        raise RuntimeError('shard repair did not converge')
    parts = [np.concatenate([shards[p] for p in pair]) for pair in pairs]
    assert all(len(np.unique(train_labels[p])) == 2 for p in parts)
    return parts


def make_model():
    """The yardstick CNN with the reference's initial weights."""
    import torch
    from torch import nn

    class DigitsCnn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2), nn.Flatten(),
                nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
                nn.Linear(64, 10))

        def forward(self, x):
            return self.net(x)

    torch.manual_seed(SEED)
    return DigitsCnn()


def shuffle_seed(server_round: int, client: int) -> int:
    """The reference's per-(round, client) shuffle seed."""
    return SEED * 1_000_003 + server_round * 10_007 + client
