"""Figure: the world's task, central SmallCnn vs colour baselines; in docs/benchmarks/fleet.md.

Centralised accuracy of the project CNN on the synthetic aerial world.

Trains the small CNN on frames rendered uniformly over the whole world (the upper bound a
federated fleet can approach) and reports held-out accuracy, per-class accuracy and two trivial
colour baselines (nearest class-mean colour; softmax regression on per-image colour statistics).

    .venv/bin/python bench/central_accuracy.py                 # Adam 1e-3, 8000 samples, 10 epochs
    .venv/bin/python bench/central_accuracy.py --optimizer sgd --lr 0.02   # SGD, momentum 0.9
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fl_uav.world.camera import AerialRenderer, CameraConfig  # noqa: E402
from fl_uav.world.dataset import (  # noqa: E402
    HELDOUT_MARGIN_M,
    heldout_set,
    render_dataset,
    sample_poses,
    to_model_input,
)
from fl_uav.world.labeler import MapLabeler  # noqa: E402
from fl_uav.world.landcover import CLASS_NAMES, WorldConfig, generate_world  # noqa: E402


class SmallCnn(nn.Module):
    """The project's model: three conv blocks, then 64·4·4 → 128 → classes (3×32×32 input)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def train_cnn(inputs: np.ndarray, labels: np.ndarray, args: argparse.Namespace,
              test_inputs: np.ndarray, test_labels: np.ndarray) -> nn.Module:
    """Mini-batch training of the CNN; prints the loss and held-out accuracy per epoch."""
    torch.manual_seed(args.seed)
    model = SmallCnn(len(CLASS_NAMES))
    if args.optimizer == 'sgd':
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    x_all, y_all = torch.from_numpy(inputs), torch.from_numpy(labels)
    rng = np.random.default_rng(args.seed)
    for epoch in range(args.epochs):
        model.train()
        order = torch.from_numpy(rng.permutation(len(x_all)))
        total, batches = 0.0, 0
        for start in range(0, len(order), args.batch_size):
            idx = order[start:start + args.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_all[idx]), y_all[idx])
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            batches += 1
        accuracy = float((predict(model, test_inputs) == test_labels).mean())
        print(f'  epoch {epoch + 1:2d}/{args.epochs}  train loss {total / batches:.3f}  '
              f'held-out accuracy {100 * accuracy:.1f} %')
    return model


def predict(model: nn.Module, inputs: np.ndarray) -> np.ndarray:
    """Predicted class ids."""
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(inputs)).argmax(1).numpy()


def colour_features(images: np.ndarray) -> np.ndarray:
    """Per-image mean and standard deviation of R, G, B (N×6, 0..1 units)."""
    pixels = images.reshape(len(images), -1, 3).astype(np.float32) / 255.0
    return np.concatenate([pixels.mean(1), pixels.std(1)], axis=1)


def nearest_mean_colour(train_x: np.ndarray, train_y: np.ndarray,
                        test_x: np.ndarray) -> np.ndarray:
    """Nearest class centroid of the mean image colour."""
    centroids = np.stack([train_x[train_y == c, :3].mean(0) if np.any(train_y == c)
                          else np.full(3, np.inf) for c in range(len(CLASS_NAMES))])
    dist = np.linalg.norm(test_x[:, None, :3] - centroids[None], axis=2)
    return dist.argmin(1)


def softmax_regression(train_x: np.ndarray, train_y: np.ndarray,
                       test_x: np.ndarray) -> np.ndarray:
    """Multinomial logistic regression on colour statistics (standardised, full batch)."""
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    x = torch.from_numpy(((train_x - mean) / std).astype(np.float32))
    y = torch.from_numpy(train_y)
    torch.manual_seed(0)
    model = nn.Linear(x.shape[1], len(CLASS_NAMES))
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=300)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        test = torch.from_numpy(((test_x - mean) / std).astype(np.float32))
        return model(test).argmax(1).numpy()


def per_class_report(labels: np.ndarray, predicted: np.ndarray) -> str:
    """One line per class: support and accuracy (recall)."""
    lines = []
    for c, name in enumerate(CLASS_NAMES):
        mask = labels == c
        acc = float((predicted[mask] == c).mean()) if mask.any() else float('nan')
        lines.append(f'  {name:7s} n={int(mask.sum()):4d}  acc={100 * acc:5.1f} %')
    return '\n'.join(lines)


def confusion(labels: np.ndarray, predicted: np.ndarray) -> str:
    """Confusion matrix, rows = true class, columns = predicted class."""
    k = len(CLASS_NAMES)
    matrix = np.zeros((k, k), np.int64)
    np.add.at(matrix, (labels, predicted), 1)
    header = '          ' + ' '.join(f'{n[:5]:>5s}' for n in CLASS_NAMES)
    rows = [f'  {CLASS_NAMES[i]:7s} ' + ' '.join(f'{v:5d}' for v in matrix[i]) for i in range(k)]
    return '\n'.join([header, *rows])


def main() -> None:
    """Run the benchmark and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--world-seed', type=int, default=7)
    parser.add_argument('--train-samples', type=int, default=8000)
    parser.add_argument('--heldout-samples', type=int, default=1000)
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--optimizer', choices=('sgd', 'adam'), default='adam')
    parser.add_argument('--lr', type=float, default=None,
                        help='default 0.05 for sgd (momentum 0.9), 1e-3 for adam')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    if args.lr is None:
        args.lr = 0.05 if args.optimizer == 'sgd' else 1e-3
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    t0 = time.perf_counter()
    world = generate_world(WorldConfig(seed=args.world_seed))
    t_world = time.perf_counter() - t0
    camera = CameraConfig()
    t0 = time.perf_counter()
    renderer = AerialRenderer(world, camera, seed=args.seed + 1)
    t_texture = time.perf_counter() - t0
    labeler = MapLabeler(world, camera.fov_deg)

    rng = np.random.default_rng(args.seed + 1000)
    margin = HELDOUT_MARGIN_M
    poses = sample_poses(world, args.train_samples, rng,
                         region=(margin, margin, world.size_m - margin, world.size_m - margin))
    t0 = time.perf_counter()
    train_images, train_labels = render_dataset(world, renderer, labeler, poses, rng)
    t_render = time.perf_counter() - t0
    test_images, test_labels = heldout_set(world, camera, n=args.heldout_samples)

    print(f'world {world}: generated in {t_world:.2f} s, texture in {t_texture:.2f} s')
    print(f'rendered {len(train_images)} training frames in {t_render:.2f} s '
          f'({1000 * t_render / max(1, len(train_images)):.3f} ms per frame incl. labelling)')
    shares = world.class_fractions()
    print('map shares:      ' + '  '.join(f'{n} {100 * s:.1f}%' for n, s in
                                          zip(CLASS_NAMES, shares)))
    for name, labels in (('train', train_labels), ('held-out', test_labels)):
        counts = np.bincount(labels, minlength=len(CLASS_NAMES)) / len(labels)
        print(f'{name + " labels:":17s}' + '  '.join(f'{n} {100 * s:.1f}%' for n, s in
                                                    zip(CLASS_NAMES, counts)))

    train_x, test_x = to_model_input(train_images), to_model_input(test_images)
    print(f'training SmallCnn ({args.optimizer}, lr {args.lr}, batch {args.batch_size}, '
          f'{args.epochs} epochs, {args.threads} threads)')
    t0 = time.perf_counter()
    model = train_cnn(train_x, train_labels, args, test_x, test_labels)
    t_train = time.perf_counter() - t0
    predicted = predict(model, test_x)
    accuracy = float((predicted == test_labels).mean())

    train_f, test_f = colour_features(train_images), colour_features(test_images)
    nearest = float((nearest_mean_colour(train_f, train_labels, test_f) == test_labels).mean())
    logistic = float((softmax_regression(train_f, train_labels, test_f) == test_labels).mean())
    majority = float((test_labels == np.bincount(train_labels).argmax()).mean())

    print(f'\nheld-out accuracy (n={len(test_labels)}):')
    print(f'  SmallCnn                               {100 * accuracy:5.1f} %  '
          f'(trained in {t_train:.1f} s)')
    print(f'  baseline: nearest class-mean colour    {100 * nearest:5.1f} %')
    print(f'  baseline: softmax on RGB mean + std    {100 * logistic:5.1f} %')
    print(f'  baseline: majority class               {100 * majority:5.1f} %')
    print('per-class accuracy (SmallCnn):')
    print(per_class_report(test_labels, predicted))
    print('confusion (rows true, columns predicted):')
    print(confusion(test_labels, predicted))
    print(f'\ntotal {time.perf_counter() - started:.1f} s')
    print('command: ' + shlex.join([os.path.relpath(sys.executable), *sys.argv]))


if __name__ == '__main__':
    main()
