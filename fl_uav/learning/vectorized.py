"""Local training of many clients at once on one CPU: stacked parameters, vmap over clients.

The experiment engine trains the local models of a whole simulated fleet every round. Running
K tiny models one after another spends most of its time in per-operator overhead (Python,
dispatch, autograd, optimizer bookkeeping), not in arithmetic. Here the K parameter sets are
stacked along a leading client dimension and one step of every client is a single batched
forward and backward pass (``torch.func.vmap`` over ``grad_and_value`` of a
``functional_call``), followed by one optimizer update on a flat (K, P) parameter matrix.

What the result equals: for each client exactly what ``train_local`` computes (same batches,
same mean-over-the-actual-batch loss, same SGD/momentum/weight-decay or Adam arithmetic), up to
float rounding (reductions are ordered differently, about 1e-6 relative after a round).

How unequal clients are handled:

- Clients run in order of decreasing step count, so at step t the clients still training are a
  prefix of the stack; finished clients are sliced off (never updated, never computed).
- Every batch is padded to ``batch_size`` with masked samples; a client's loss is the sum over
  its real samples divided by the real count, so a short last batch of an epoch is a plain mean.
- Clients are processed in chunks of at most ``max_clients_per_chunk`` to bound memory.

Batches come from one shared function (``client_batches``) so a sequential reference
(``train_clients_sequential``) uses identical batches; with the default shuffle
(``numpy_epoch_orders``) both reproduce ``train_local``'s own order.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional

from fl_uav.learning.training import NonFiniteLossError, TrainConfig, TrainResult
from fl_uav.learning.weights import Weights, get_weights, set_weights

ClientData = tuple[np.ndarray, np.ndarray]
ShuffleFn = Callable[[int, int, int], list[np.ndarray]]

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass(frozen=True)
class LocalUpdate:
    """One client's trained weights and what its training spent."""

    weights: Weights
    result: TrainResult


def numpy_epoch_orders(num_samples: int, epochs: int, seed: int) -> list[np.ndarray]:
    """Visiting order of each epoch, drawn exactly as ``train_local`` draws it."""
    rng = np.random.default_rng(seed)
    return [rng.permutation(num_samples) for _ in range(epochs)]


def torch_epoch_orders(num_samples: int, epochs: int, seed: int) -> list[np.ndarray]:
    """Visiting order of each epoch from ``torch.randperm`` with one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randperm(num_samples, generator=generator).numpy() for _ in range(epochs)]


def client_batches(num_samples: int, config: TrainConfig, seed: int,
                   shuffle: ShuffleFn = numpy_epoch_orders) -> list[np.ndarray]:
    """Index arrays of the mini-batches one client trains on, in order.

    Each epoch is cut into consecutive slices of ``batch_size`` (the last may be shorter);
    ``config.max_steps`` (when non-zero) truncates the list.
    """
    if num_samples == 0:
        return []
    batches: list[np.ndarray] = []
    for order in shuffle(num_samples, config.local_epochs, seed):
        for start in range(0, num_samples, config.batch_size):
            batches.append(np.asarray(order[start:start + config.batch_size], dtype=np.int64))
            if config.max_steps and len(batches) >= config.max_steps:
                return batches
    return batches


def _as_tensors(data: ClientData) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, labels = data
    return (torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float32)),
            torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64)))


def _check_inputs(client_data: Sequence[ClientData], seeds: Sequence[int]) -> None:
    if len(client_data) != len(seeds):
        raise ValueError(f'{len(client_data)} clients but {len(seeds)} seeds')
    for i, (inputs, labels) in enumerate(client_data):
        if len(inputs) != len(labels):
            raise ValueError(f'client {i}: {len(inputs)} inputs but {len(labels)} labels')


def _train_on_batches(model: nn.Module, x_all: torch.Tensor, y_all: torch.Tensor,
                      batches: list[np.ndarray], config: TrainConfig) -> TrainResult:
    """The plain loop of ``train_local``, over batches given in advance."""
    if not batches:
        return TrainResult(steps=0, samples_seen=0, mean_loss=float('nan'))
    if config.optimizer == 'adam':
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr,
                                     weight_decay=config.weight_decay)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                    weight_decay=config.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    seen, loss_sum = 0, 0.0
    for step, batch in enumerate(batches):
        idx = torch.from_numpy(batch)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x_all[idx]), y_all[idx])
        value = float(loss.detach())
        if not math.isfinite(value):
            raise NonFiniteLossError(f'loss became {value} at local step {step}')
        loss.backward()
        optimizer.step()
        seen += len(batch)
        loss_sum += value
    return TrainResult(len(batches), seen, loss_sum / len(batches))


def train_clients_sequential(model: nn.Module, global_weights: Weights,
                             client_data: Sequence[ClientData], config: TrainConfig,
                             seeds: Sequence[int],
                             shuffle: ShuffleFn = numpy_epoch_orders) -> list[LocalUpdate]:
    """Reference: train each client in turn from ``global_weights`` with a plain loop.

    ``model`` is used as a template only (it is copied, never changed).
    """
    _check_inputs(client_data, seeds)
    worker = copy.deepcopy(model)
    updates = []
    for data, seed in zip(client_data, seeds):
        set_weights(worker, global_weights)
        x_all, y_all = _as_tensors(data)
        batches = client_batches(len(x_all), config, seed, shuffle)
        result = _train_on_batches(worker, x_all, y_all, batches, config)
        updates.append(LocalUpdate(get_weights(worker), result))
    return updates


class VectorizedTrainer:
    """Trains many clients of one architecture at once (see the module docstring).

    model: template whose architecture is used (copied; its weights are ignored). It must
        have no buffers (no batch norm): every state entry is a trained parameter.
    config: local training hyper-parameters, as for ``train_local``.
    max_clients_per_chunk: at most this many clients are stacked at a time. Memory per chunk
        is about (3 to 4) x clients x parameters x 4 bytes plus the activations of
        clients x batch_size samples.
    num_threads: torch intra-op threads while training (restored afterwards); None leaves
        the current setting.
    """

    def __init__(self, model: nn.Module, config: TrainConfig, max_clients_per_chunk: int = 128,
                 num_threads: int | None = 1) -> None:
        if max_clients_per_chunk < 1:
            raise ValueError(f'max_clients_per_chunk must be >= 1, got {max_clients_per_chunk}')
        if num_threads is not None and num_threads < 1:
            raise ValueError(f'num_threads must be >= 1 or None, got {num_threads}')
        buffers = [name for name, _ in model.named_buffers()]
        if buffers:
            raise ValueError(f'models with buffers are not supported: {buffers}')
        self._model = copy.deepcopy(model).train()
        for parameter in self._model.parameters():
            parameter.requires_grad_(False)
        self._names = [name for name, _ in self._model.named_parameters()]
        self._shapes = [tuple(p.shape) for _, p in self._model.named_parameters()]
        self._sizes = [math.prod(shape) for shape in self._shapes]
        self._offsets = np.cumsum([0, *self._sizes]).tolist()
        self.config = config
        self.max_clients_per_chunk = max_clients_per_chunk
        self.num_threads = num_threads
        self._step = vmap(grad_and_value(self._client_loss))

    @property
    def num_parameters(self) -> int:
        """Trainable values per client."""
        return self._offsets[-1]

    def _client_loss(self, params: dict[str, torch.Tensor], inputs: torch.Tensor,
                     labels: torch.Tensor, mask: torch.Tensor,
                     count: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over the real samples of one client's padded batch."""
        logits = functional_call(self._model, params, (inputs,))
        per_sample = functional.cross_entropy(logits, labels, reduction='none')
        return (per_sample * mask).sum() / count

    def train(self, global_weights: Weights, client_data: Sequence[ClientData],
              seeds: Sequence[int], shuffle: ShuffleFn = numpy_epoch_orders) -> list[LocalUpdate]:
        """Train every client from ``global_weights``; results are in the input order."""
        _check_inputs(client_data, seeds)
        missing = set(self._names) - set(global_weights)
        extra = set(global_weights) - set(self._names)
        if missing or extra:
            raise ValueError(f'weights do not match the model: missing {sorted(missing)}, '
                             f'unexpected {sorted(extra)}')
        flat_global = torch.cat([
            torch.from_numpy(np.asarray(global_weights[name], dtype=np.float32)).reshape(-1)
            for name in self._names])
        if flat_global.numel() != self.num_parameters:
            raise ValueError('weights do not match the model shapes')
        batches = [client_batches(len(data[0]), self.config, seed, shuffle)
                   for data, seed in zip(client_data, seeds)]
        # Longest first: at any step the clients still training are a prefix of the chunk.
        order = sorted(range(len(client_data)), key=lambda i: -len(batches[i]))
        updates: list[LocalUpdate | None] = [None] * len(client_data)
        previous_threads = torch.get_num_threads()
        if self.num_threads is not None and self.num_threads != previous_threads:
            torch.set_num_threads(self.num_threads)
        try:
            for start in range(0, len(order), self.max_clients_per_chunk):
                chunk = order[start:start + self.max_clients_per_chunk]
                chunk_updates = self._train_chunk(
                    flat_global, [client_data[i] for i in chunk], [batches[i] for i in chunk])
                for i, update in zip(chunk, chunk_updates):
                    updates[i] = update
        finally:
            if torch.get_num_threads() != previous_threads:
                torch.set_num_threads(previous_threads)
        return updates  # type: ignore[return-value]

    def _views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-parameter (k, *shape) views into a (k, P) matrix."""
        k = flat.shape[0]
        return {name: flat[:, lo:hi].view(k, *shape) for name, shape, lo, hi in
                zip(self._names, self._shapes, self._offsets, self._offsets[1:])}

    def _train_chunk(self, flat_global: torch.Tensor, client_data: list[ClientData],
                     batches: list[list[np.ndarray]]) -> list[LocalUpdate]:
        config = self.config
        num_clients, bs = len(client_data), config.batch_size
        steps = [len(b) for b in batches]
        max_steps = steps[0] if steps else 0
        # All samples of the chunk in one tensor, plus a zero pad row at the end.
        tensors = [_as_tensors(data) for data in client_data]
        sizes = [len(x) for x, _ in tensors]
        sample_shape = next((tuple(x.shape[1:]) for x, _ in tensors if len(x)), None)
        flat = flat_global.unsqueeze(0).repeat(num_clients, 1)
        if max_steps == 0 or sample_shape is None:
            return [LocalUpdate(self._to_weights(flat[i]), TrainResult(0, 0, float('nan')))
                    for i in range(num_clients)]
        x_all = torch.cat([x for x, _ in tensors] + [torch.zeros((1, *sample_shape))])
        y_all = torch.cat([y for _, y in tensors] + [torch.zeros(1, dtype=torch.int64)])
        pad = len(x_all) - 1
        offsets = np.cumsum([0, *sizes])
        index = np.full((max_steps, num_clients, bs), pad, dtype=np.int64)
        mask = np.zeros((max_steps, num_clients, bs), dtype=np.float32)
        counts = np.ones((max_steps, num_clients), dtype=np.float32)
        for c, client_batches_ in enumerate(batches):
            for t, batch in enumerate(client_batches_):
                index[t, c, :len(batch)] = batch + offsets[c]
                mask[t, c, :len(batch)] = 1.0
                counts[t, c] = len(batch)
        index_t, mask_t = torch.from_numpy(index), torch.from_numpy(mask)
        counts_t = torch.from_numpy(counts)
        active = [sum(1 for s in steps if s > t) for t in range(max_steps)]
        losses = torch.zeros((max_steps, num_clients))

        lr, wd = config.lr, config.weight_decay
        adam = config.optimizer == 'adam'
        momentum = 0.0 if adam else config.momentum
        buffer = torch.zeros_like(flat) if momentum > 0.0 else None
        if adam:
            exp_avg, exp_avg_sq = torch.zeros_like(flat), torch.zeros_like(flat)
        for t in range(max_steps):
            k = active[t]
            params = flat[:k]
            idx = index_t[t, :k]
            grads, loss = self._step(self._views(params), x_all[idx], y_all[idx],
                                     mask_t[t, :k], counts_t[t, :k])
            losses[t, :k] = loss
            grad = torch.cat([grads[name].reshape(k, -1) for name in self._names], dim=1)
            if wd:
                grad = grad.add(params, alpha=wd)
            if adam:
                step = t + 1
                exp_avg[:k].lerp_(grad, 1.0 - ADAM_BETAS[0])
                exp_avg_sq[:k].mul_(ADAM_BETAS[1]).addcmul_(grad, grad, value=1.0 - ADAM_BETAS[1])
                bias1 = 1.0 - ADAM_BETAS[0] ** step
                bias2_sqrt = math.sqrt(1.0 - ADAM_BETAS[1] ** step)
                denom = (exp_avg_sq[:k].sqrt() / bias2_sqrt).add_(ADAM_EPS)
                params.addcdiv_(exp_avg[:k], denom, value=-lr / bias1)
            elif buffer is not None:
                buffer[:k].mul_(momentum).add_(grad)
                params.add_(buffer[:k], alpha=-lr)
            else:
                params.add_(grad, alpha=-lr)

        self._raise_if_not_finite(losses, steps)
        loss_sums = losses.sum(dim=0).tolist()
        updates = []
        for c in range(num_clients):
            seen = int(sum(len(b) for b in batches[c]))
            mean_loss = loss_sums[c] / steps[c] if steps[c] else float('nan')
            updates.append(LocalUpdate(self._to_weights(flat[c]),
                                       TrainResult(steps[c], seen, mean_loss)))
        return updates

    @staticmethod
    def _raise_if_not_finite(losses: torch.Tensor, steps: list[int]) -> None:
        bad = ~torch.isfinite(losses)
        if not bool(bad.any()):
            return
        for t, c in bad.nonzero().tolist():
            if t < steps[c]:
                raise NonFiniteLossError(
                    f'loss became {float(losses[t, c])} at local step {t} (client {c} of chunk)')

    def _to_weights(self, flat_row: torch.Tensor) -> Weights:
        row = flat_row.numpy()
        return {name: row[lo:hi].reshape(shape).copy() for name, shape, lo, hi in
                zip(self._names, self._shapes, self._offsets, self._offsets[1:])}


def train_clients_vectorized(model: nn.Module, global_weights: Weights,
                             client_data: Sequence[ClientData], config: TrainConfig,
                             seeds: Sequence[int], max_clients_per_chunk: int = 128,
                             num_threads: int | None = 1,
                             shuffle: ShuffleFn = numpy_epoch_orders) -> list[Weights]:
    """Train every client from ``global_weights`` at once; one weights dict per client."""
    trainer = VectorizedTrainer(model, config, max_clients_per_chunk, num_threads)
    return [u.weights for u in trainer.train(global_weights, client_data, seeds, shuffle)]
