"""Local training of many clients at once on one CPU: stacked parameters, one pass per step.

The experiment engine trains the local models of a whole simulated fleet every round. Running
K small models one after another spends much of its time in per-operator overhead (Python,
dispatch, autograd, optimizer bookkeeping) rather than arithmetic. Here the K parameter sets
are stacked along a leading client dimension, one step of every client is a single batched
forward and backward pass, and the optimizer update is one set of tensor operations.

Two backends compute that batched step:

- 'stacked' (used when the model allows it): the model is traced with ``torch.fx`` and
  replayed on k·B samples, with Linear as ``baddbmm`` and Conv2d as a grouped convolution
  (or, for convolutions with at most 16 values per output position such as a 1-channel
  input layer, an im2col ``baddbmm``, which oneDNN's grouped kernel is slow at); plain
  autograd gives every client's gradient at once because the clients' losses are summed.
  Supported: Linear and Conv2d (groups 1, zero padding) as the only layers with parameters,
  any parameter-free per-sample layers and functions (ReLU, pooling, Flatten, view, add...),
  no random layers (dropout). The first call for each input shape checks the replay against
  the model itself and falls back to 'vmap' if they differ (e.g. a layer that mixes samples).
- 'vmap': ``torch.func.vmap`` over ``grad_and_value`` of ``functional_call``; works for any
  model without buffers, but its batching rule for convolutions is slow on CPU, and its first
  use imports ``torch._dynamo`` (about 1.5 s).

What the result equals: for each client what ``train_local`` computes (same batches, same
mean-over-the-actual-batch loss, same SGD/momentum/weight-decay or Adam arithmetic), up to float
rounding (reductions are ordered differently: about 1e-6 relative after a few epochs).

Unequal clients:

- Clients run in order of decreasing step count, so at step t the clients still training are a
  prefix of the stack; finished clients are sliced off (never updated, never computed).
- Every batch is padded to ``batch_size`` with masked samples; a client's loss is the sum over
  its real samples divided by the real count, so a short last batch of an epoch is a plain mean.
- Clients are processed in chunks of at most ``max_clients_per_chunk`` to bound memory.

Batches come from one shared function (``client_batches``), so the sequential reference
(``train_clients_sequential``) uses identical batches; with the default shuffle
(``numpy_epoch_orders``) both reproduce ``train_local``'s own order.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.fx
from torch import nn
from torch.nn import functional

from fl_uav.configschema import require_choice
from fl_uav.learning.training import (
    NonFiniteLossError,
    ShouldStop,
    TrainConfig,
    TrainResult,
    add_proximal_gradient,
    proximal_anchor,
)
from fl_uav.learning.weights import Weights, get_weights, set_weights

ClientData = tuple[np.ndarray, np.ndarray]
ShuffleFn = Callable[[int, int, int], list[np.ndarray]]
BACKENDS = ('auto', 'stacked', 'vmap')

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
# Convolutions with at most this many input values per output position (C_in·kh·kw) use im2col.
IM2COL_MAX_PATCH = 16
# Largest |stacked - model| output difference accepted by the first-use check (relative to
# 1 + the largest output magnitude).
REPLAY_TOLERANCE = 1e-4


@dataclass(frozen=True)
class LocalUpdate:
    """One client's trained weights and what its training spent."""

    weights: Weights
    result: TrainResult


# ----------------------------------------------------------------------- batches ----
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


def epoch_steps(config: TrainConfig, num_samples: int) -> int:
    """The mini-batch steps ``config`` takes on ``num_samples`` samples when nothing stops it:
    ⌈num_samples / batch_size⌉ per epoch times ``local_epochs``, at most ``max_steps`` (when
    non-zero); as many as :func:`client_batches` lists, without drawing them."""
    steps = math.ceil(num_samples / config.batch_size) * config.local_epochs
    return min(steps, config.max_steps) if config.max_steps else steps


def chunk_plan(step_counts: Sequence[int], max_clients_per_chunk: int) -> list[list[int]]:
    """Which clients :meth:`VectorizedTrainer.train` stacks together, in which order: the
    clients sorted by decreasing step count (stable: ties keep their input order), cut into
    ceil(n / max_clients_per_chunk) chunks of equal size (±1). A chunk's arithmetic depends on
    its clients and their order, so whoever trains the same chunks (another thread, another
    process: fl_uav.engine.chunk_worker) gets bit-identical results."""
    order = sorted(range(len(step_counts)), key=lambda i: -step_counts[i])
    num_chunks = -(-len(order) // max_clients_per_chunk)
    bounds = [len(order) * i // num_chunks for i in range(num_chunks + 1)]
    return [order[lo:hi] for lo, hi in zip(bounds, bounds[1:])]


def client_step_count(config: TrainConfig, num_samples: int, steps: int | None = None) -> int:
    """The steps :meth:`VectorizedTrainer.train` gives a client of ``num_samples`` samples
    (``steps``: its exact count, as ``train(steps=...)``), without drawing its batches."""
    if steps is not None:
        config = exact_steps_config(config, num_samples, steps)
    return epoch_steps(config, num_samples)


def exact_steps_config(config: TrainConfig, num_samples: int, steps: int) -> TrainConfig:
    """``config`` changed so a client with ``num_samples`` samples takes exactly ``steps``
    mini-batch steps (passes over its data repeated as needed, the last one cut short)."""
    if steps < 1 or num_samples < 1:
        raise ValueError(f'steps and num_samples must be >= 1, got {steps}, {num_samples}')
    per_pass = math.ceil(num_samples / config.batch_size)
    return dataclasses.replace(config, max_steps=steps, local_epochs=math.ceil(steps / per_pass))


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


# --------------------------------------------------------------------- reference ----
def _train_on_batches(model: nn.Module, x_all: torch.Tensor, y_all: torch.Tensor,
                      batches: list[np.ndarray], config: TrainConfig,
                      should_stop: ShouldStop | None = None) -> TrainResult:
    """The plain loop of ``train_local``, over batches given in advance; ``should_stop`` is
    asked before each step and the result counts the steps taken (mean loss NaN if none)."""
    if not batches:
        return TrainResult(steps=0, samples_seen=0, mean_loss=float('nan'))
    if config.optimizer == 'adam':
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr,
                                     weight_decay=config.weight_decay)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                    weight_decay=config.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    anchor = proximal_anchor(model, config)
    model.train()
    seen, loss_sum, steps = 0, 0.0, 0
    for step, batch in enumerate(batches):
        if should_stop is not None and should_stop(step):
            break
        idx = torch.from_numpy(batch)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x_all[idx]), y_all[idx])
        value = float(loss.detach())
        if not math.isfinite(value):
            raise NonFiniteLossError(f'loss became {value} at local step {step}')
        loss.backward()
        add_proximal_gradient(model, anchor, config.proximal_mu)
        optimizer.step()
        seen += len(batch)
        loss_sum += value
        steps += 1
    return TrainResult(steps, seen, loss_sum / steps if steps else float('nan'))


def train_clients_sequential(model: nn.Module, global_weights: Weights,
                             client_data: Sequence[ClientData], config: TrainConfig,
                             seeds: Sequence[int],
                             shuffle: ShuffleFn = numpy_epoch_orders,
                             should_stop: ShouldStop | None = None) -> list[LocalUpdate]:
    """Reference: train each client in turn from ``global_weights`` with a plain loop.

    ``model`` is used as a template only (it is copied, never changed). ``should_stop``
    (:class:`~fl_uav.learning.training.StopCondition`) is asked before each client's every
    step, with that client's steps so far; each result counts the steps actually taken.
    """
    _check_inputs(client_data, seeds)
    worker = copy.deepcopy(model)
    updates = []
    for data, seed in zip(client_data, seeds):
        set_weights(worker, global_weights)
        x_all, y_all = _as_tensors(data)
        batches = client_batches(len(x_all), config, seed, shuffle)
        result = _train_on_batches(worker, x_all, y_all, batches, config, should_stop)
        updates.append(LocalUpdate(get_weights(worker), result))
    return updates


# ----------------------------------------------------------------- stacked replay ----
def _stacked_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    k: int) -> torch.Tensor:
    """Linear layer of k clients on (k·B, ..., in) samples with weights (k, out, in)."""
    lead = x.shape[:-1]
    rows = x.reshape(k, -1, x.shape[-1])
    if bias is None:
        out = torch.bmm(rows, weight.transpose(1, 2))
    else:
        out = torch.baddbmm(bias.unsqueeze(1), rows, weight.transpose(1, 2))
    return out.reshape(*lead, weight.shape[1])


def _conv_geometry(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _to_grouped(x: torch.Tensor, k: int) -> torch.Tensor:
    """(k·B, C, H, W) samples of k clients -> (B, k·C, H, W), channels-last: client c's
    channels are the c-th group, the layout of a grouped convolution (groups = k)."""
    n, channels, height, width = x.shape
    return (x.permute(0, 2, 3, 1).reshape(k, n // k, height, width, channels)
            .permute(1, 2, 3, 0, 4).reshape(n // k, height, width, k * channels)
            .permute(0, 3, 1, 2))


def _to_stacked(x: torch.Tensor, k: int) -> torch.Tensor:
    """Inverse of :func:`_to_grouped`: (k·B, C, H, W) logical, stored channels-last."""
    per_client, grouped_channels, height, width = x.shape
    channels = grouped_channels // k
    return (x.permute(0, 2, 3, 1).reshape(per_client, height, width, k, channels)
            .permute(3, 0, 1, 2, 4).reshape(k * per_client, height, width, channels)
            .permute(0, 3, 1, 2))


@dataclass(frozen=True)
class _Grouped:
    """A (B, k·C, H, W) activation in the grouped layout of :func:`_to_grouped`.

    Between two convolutions, per-element layers and per-channel pooling work on it as they
    are, so the samples are regrouped only where a layer needs them per client (Flatten,
    Linear, the output), not around every convolution.
    """

    data: torch.Tensor
    k: int

    def stacked(self) -> torch.Tensor:
        return _to_stacked(self.data, self.k)


def _stacked_conv2d(x: torch.Tensor | _Grouped, weight: torch.Tensor,
                    bias: torch.Tensor | None, k: int,
                    conv: nn.Conv2d) -> torch.Tensor | _Grouped:
    """Conv2d of k clients on (k·B, C, H, W) samples with weights (k, C_out, C, kh, kw).

    The result is either grouped (:class:`_Grouped`) or logically (k·B, C_out, H', W') and
    stored channels-last.
    """
    out_channels, channels, kh, kw = weight.shape[1:]
    if channels * kh * kw > IM2COL_MAX_PATCH:
        # One grouped convolution (group c = client c) on channels-last data: oneDNN's
        # channels-last kernels, and the pooling after them, are several times faster here.
        grouped = x.data if isinstance(x, _Grouped) else _to_grouped(x, k)
        out = functional.conv2d(
            grouped, weight.reshape(k * out_channels, channels, kh, kw),
            None if bias is None else bias.reshape(-1),
            conv.stride, conv.padding, conv.dilation, groups=k)
        return _Grouped(out, k)
    if isinstance(x, _Grouped):
        x = x.stacked()
    n, _, height, width = x.shape
    (sh, sw), (ph, pw), (dh, dw) = conv.stride, conv.padding, conv.dilation
    out_h = _conv_geometry(height, kh, sh, ph, dh)
    out_w = _conv_geometry(width, kw, sw, pw, dw)
    padded = functional.pad(x.permute(0, 2, 3, 1), (0, 0, pw, pw, ph, ph))
    columns = torch.cat([
        padded[:, i * dh:i * dh + (out_h - 1) * sh + 1:sh, j * dw:j * dw + (out_w - 1) * sw + 1:sw]
        for i in range(kh) for j in range(kw)], dim=3)
    patch = kh * kw * channels
    kernel = weight.permute(0, 3, 4, 2, 1).reshape(k, patch, out_channels)
    rows = columns.reshape(k, -1, patch)
    if bias is None:
        out = torch.bmm(rows, kernel)
    else:
        out = torch.baddbmm(bias.unsqueeze(1), rows, kernel)
    # Channels-last memory, logical NCHW: what the model's following layers expect.
    return out.reshape(n, out_h, out_w, out_channels).permute(0, 3, 1, 2)


# Parameter-free layers that act on each (sample, channel) plane on its own, so they run on a
# grouped activation unchanged (every other layer gets the activation regrouped per client).
_PER_CHANNEL_LAYERS = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Sigmoid,
                       nn.Tanh, nn.Hardtanh, nn.Identity, nn.MaxPool2d, nn.AvgPool2d,
                       nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)


def _per_channel(module: nn.Module) -> bool:
    """A layer that runs on a grouped activation as it is (pooling without indices)."""
    return (isinstance(module, _PER_CHANNEL_LAYERS)
            and not getattr(module, 'return_indices', False))


def _grouped_conv(module: nn.Module) -> bool:
    """A convolution the stacked replay runs as one grouped convolution (not im2col)."""
    return (isinstance(module, nn.Conv2d)
            and module.in_channels * math.prod(module.kernel_size) > IM2COL_MAX_PATCH)


class _StackedProgram:
    """Replays a traced model on the samples of k clients, each with its own parameters.

    A value stays grouped (:class:`_Grouped`) only when every one of its users takes it
    grouped (a grouped convolution, or a per-channel layer with that value as its only
    input), so every other user sees one per-client tensor, shared as in the model itself
    (in-place operations on it then act as they do in the model).
    """

    def __init__(self, graph: torch.fx.Graph, modules: dict[str, nn.Module]) -> None:
        self._nodes = list(graph.nodes)
        self._modules = modules

        def takes_grouped(user: torch.fx.Node) -> bool:
            if user.op != 'call_module' or len(user.args) != 1 or user.kwargs:
                return False
            module = modules[user.target]
            return _grouped_conv(module) or _per_channel(module)

        self._keep_grouped = {node: bool(node.users) and all(map(takes_grouped, node.users))
                              for node in self._nodes}

    @classmethod
    def build(cls, model: nn.Module) -> _StackedProgram | None:
        """The program for ``model``, or None when the model has an unsupported part."""
        try:
            traced = torch.fx.symbolic_trace(model)
        except Exception:  # any tracing failure means: use vmap
            return None
        modules = dict(traced.named_modules())
        placeholders = 0
        for node in traced.graph.nodes:
            if node.op == 'get_attr':
                return None
            if node.op == 'placeholder':
                placeholders += 1
            if node.op != 'call_module':
                continue
            module = modules[node.target]
            if not any(True for _ in module.parameters()):
                continue
            if isinstance(module, nn.Linear):
                continue
            if (isinstance(module, nn.Conv2d) and module.groups == 1
                    and module.padding_mode == 'zeros' and not isinstance(module.padding, str)):
                continue
            return None
        return cls(traced.graph, modules) if placeholders == 1 else None

    def __call__(self, params: dict[str, torch.Tensor], x: torch.Tensor, k: int) -> torch.Tensor:
        """Outputs for x of shape (k·B, ...) with params of shape (k, ...)."""
        env: dict[torch.fx.Node, object] = {}

        def value(arg):
            return torch.fx.node.map_arg(arg, lambda n: env[n])

        for node in self._nodes:
            if node.op == 'placeholder':
                env[node] = x
            elif node.op == 'output':
                return value(node.args[0])
            elif node.op == 'call_module':
                module = self._modules[node.target]
                args = value(node.args)
                if isinstance(module, nn.Linear):
                    env[node] = _stacked_linear(args[0], params[f'{node.target}.weight'],
                                                params.get(f'{node.target}.bias'), k)
                elif isinstance(module, nn.Conv2d):
                    env[node] = _stacked_conv2d(args[0], params[f'{node.target}.weight'],
                                                params.get(f'{node.target}.bias'), k, module)
                elif isinstance(args[0], _Grouped):   # a per-channel layer (see __init__)
                    env[node] = _Grouped(module(args[0].data), k)
                else:
                    env[node] = module(*args, **value(node.kwargs))
            elif node.op == 'call_function':
                env[node] = node.target(*value(node.args), **value(node.kwargs))
            elif node.op == 'call_method':
                self_arg, *args = value(node.args)
                env[node] = getattr(self_arg, node.target)(*args, **value(node.kwargs))
            result = env[node]
            if isinstance(result, _Grouped) and not self._keep_grouped[node]:
                env[node] = result.stacked()   # once, shared by every user
        raise RuntimeError('traced graph has no output')


# ------------------------------------------------------------------------ trainer ----
class VectorizedTrainer:
    """Trains many clients of one architecture at once (see the module docstring).

    model: template whose architecture is used (copied; its weights are ignored). It must
        have no buffers (no batch norm): every state entry is a trained parameter.
    config: local training hyper-parameters, as for ``train_local``.
    max_clients_per_chunk: at most this many clients are stacked at a time (the clients are
        split into equal chunks). Memory per chunk is about (2 to 4) x clients x parameters x
        4 bytes plus the activations of clients x batch_size samples. Small chunks also keep
        the activations in cache: 16 to 32 was fastest for the 8x8 digits CNN (bench/).
    num_threads: torch intra-op threads while training (restored afterwards); None leaves
        the current setting.
    backend: 'auto' (stacked when the model allows it, else vmap), 'stacked' or 'vmap'.
    workers: threads that train chunks at the same time (torch runs each operation with the
        GIL released, so chunks overlap on several cores; each thread uses ``num_threads``
        intra-op threads). A chunk's arithmetic does not depend on the thread that runs it:
        results are bit-identical for any ``workers``. Memory grows by a chunk per worker.
        The stacked backend only: torch.func's vmap is not thread-safe, so 'vmap' runs its
        chunks one after another.
    """

    def __init__(self, model: nn.Module, config: TrainConfig, max_clients_per_chunk: int = 32,
                 num_threads: int | None = 1, backend: str = 'auto', workers: int = 1) -> None:
        if max_clients_per_chunk < 1:
            raise ValueError(f'max_clients_per_chunk must be >= 1, got {max_clients_per_chunk}')
        if workers < 1:
            raise ValueError(f'workers must be >= 1, got {workers}')
        self.workers = workers
        if num_threads is not None and num_threads < 1:
            raise ValueError(f'num_threads must be >= 1 or None, got {num_threads}')
        require_choice('backend', backend, BACKENDS)
        buffers = [name for name, _ in model.named_buffers()]
        if buffers:
            raise ValueError(f'models with buffers are not supported: {buffers}')
        self._model = copy.deepcopy(model).train()
        for parameter in self._model.parameters():
            parameter.requires_grad_(False)
        self._names = [name for name, _ in self._model.named_parameters()]
        self._shapes = {name: tuple(p.shape) for name, p in self._model.named_parameters()}
        self.config = config
        self.max_clients_per_chunk = max_clients_per_chunk
        self.num_threads = num_threads
        self._program = _StackedProgram.build(self._model) if backend != 'vmap' else None
        if backend == 'stacked' and self._program is None:
            raise ValueError('this model cannot use the stacked backend (see the module doc)')
        self._backend = 'stacked' if self._program is not None else 'vmap'
        self._checked_shapes: set[tuple[int, ...]] = set()
        self._forced = backend == 'stacked'
        self._vmap_step = None
        self.last_mean_trace: list[Weights] = []   # see train(trace_weights=...)

    @property
    def backend(self) -> str:
        """'stacked' or 'vmap': how the batched step is computed."""
        return self._backend

    # -- one batched step: per-client gradients (k, ...) and losses (k,) --
    @staticmethod
    def _masked_loss(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor,
                     count: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over the real samples; labels and mask are (..., B)."""
        per_sample = functional.cross_entropy(logits, labels.reshape(-1), reduction='none')
        return (per_sample.reshape(labels.shape) * mask).sum(-1) / count

    def _stacked_step(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                      mask: torch.Tensor, count: torch.Tensor):
        k, batch = y.shape
        leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
        with torch.enable_grad():
            logits = self._program(leaves, x.reshape(k * batch, *x.shape[2:]), k)
            losses = self._masked_loss(logits, y, mask, count)
            grads = torch.autograd.grad(losses.sum(), list(leaves.values()))
        return dict(zip(leaves, grads)), losses.detach()

    def _client_loss(self, params: dict[str, torch.Tensor], inputs: torch.Tensor,
                     labels: torch.Tensor, mask: torch.Tensor,
                     count: torch.Tensor) -> torch.Tensor:
        from torch.func import functional_call

        logits = functional_call(self._model, params, (inputs,))
        return self._masked_loss(logits, labels, mask, count)

    def _step(self, params, x, y, mask, count):
        if self._backend == 'stacked':
            return self._stacked_step(params, x, y, mask, count)
        if self._vmap_step is None:
            from torch.func import grad_and_value, vmap

            self._vmap_step = vmap(grad_and_value(self._client_loss))
        return self._vmap_step(params, x, y, mask, count)

    def _check_replay(self, sample_shape: tuple[int, ...], global_params: dict) -> None:
        """First use for a sample shape: the stacked replay must reproduce the model."""
        if self._backend != 'stacked' or sample_shape in self._checked_shapes:
            return
        generator = torch.Generator().manual_seed(0)
        x = torch.randn((2, 3, *sample_shape), generator=generator)   # signed, as real data
        params = {name: torch.stack([p, 0.5 * p]) for name, p in global_params.items()}
        with torch.no_grad():
            try:
                stacked = self._program(params, x.reshape(6, *sample_shape), 2).reshape(2, 3, -1)
            except Exception as exc:  # a layer the replay cannot run: vmap (or say why)
                if self._forced:
                    raise ValueError(f'stacked replay failed on this model: {exc!r}') from exc
                self._backend = 'vmap'
                self._checked_shapes.add(sample_shape)
                return
            expected = []
            for c in range(2):
                one = {name: p[c] for name, p in params.items()}
                expected.append(torch.func.functional_call(self._model, one, (x[c],)))
            reference = torch.stack(expected).reshape(2, 3, -1)
            error = float((stacked - reference).abs().max())
            scale = 1.0 + float(reference.abs().max())
        if not error <= REPLAY_TOLERANCE * scale:
            if self._forced:
                raise ValueError(f'stacked replay differs from the model by {error}')
            self._backend = 'vmap'
        self._checked_shapes.add(sample_shape)

    # -- training --
    def train(self, global_weights: Weights, client_data: Sequence[ClientData],
              seeds: Sequence[int], shuffle: ShuffleFn = numpy_epoch_orders,
              steps: Sequence[int] | None = None,
              trace_weights: Sequence[float] | None = None,
              trace_clients: bool = False) -> list[LocalUpdate]:
        """Train every client from ``global_weights``; results are in the input order.

        ``steps`` (optional, one per client): client i takes exactly steps[i] steps
        (:func:`exact_steps_config`, e.g. OSAFL's random κ_u^t) instead of the config's.
        The returned weights are numpy views into one buffer per chunk (no copies).
        ``trace_weights`` (optional, one per client): also record in ``self.last_mean_trace``
        the weighted mean of the clients' weights after t = 0, 1, ..., max steps (a client that
        stopped counts with its final weights): the model a FedAvg of the fleet would give had
        every client stopped after t steps (used to measure progress against local steps).
        ``trace_clients``: also keep in ``self.last_client_trace[i]`` client i's own weights
        after t = 0, 1, ..., its steps (numpy views; the caller applies its own aggregation,
        e.g. LGC's compressed one). Costs (steps + 1) copies of the chunk's weights.
        """
        _check_inputs(client_data, seeds)
        if trace_weights is not None and len(trace_weights) != len(client_data):
            raise ValueError(f'{len(client_data)} clients but {len(trace_weights)} trace '
                             f'weights')
        self.last_mean_trace = []
        self.last_client_trace: list[list[dict[str, np.ndarray]]] = []
        missing = set(self._names) - set(global_weights)
        extra = set(global_weights) - set(self._names)
        if missing or extra:
            raise ValueError(f'weights do not match the model: missing {sorted(missing)}, '
                             f'unexpected {sorted(extra)}')
        global_params = {}
        for name in self._names:
            array = np.asarray(global_weights[name], dtype=np.float32)
            if array.shape != self._shapes[name]:
                raise ValueError(f'weight {name!r}: shape {array.shape} != model '
                                 f'{self._shapes[name]}')
            global_params[name] = torch.from_numpy(array)
        if steps is not None and len(steps) != len(client_data):
            raise ValueError(f'{len(client_data)} clients but {len(steps)} step counts')
        configs = ([self.config] * len(client_data) if steps is None else
                   [exact_steps_config(self.config, len(data[0]), k)
                    for data, k in zip(client_data, steps)])
        batches = [client_batches(len(data[0]), config, seed, shuffle)
                   for data, seed, config in zip(client_data, seeds, configs)]
        updates: list[LocalUpdate | None] = [None] * len(client_data)
        previous_threads = torch.get_num_threads()
        if self.num_threads is not None and self.num_threads != previous_threads:
            torch.set_num_threads(self.num_threads)
        try:
            # Longest first: at any step the clients still training are a prefix of the chunk.
            chunks = chunk_plan([len(b) for b in batches], self.max_clients_per_chunk)
            # Per-chunk trace buffers, filled in place (also from worker threads).
            chunk_traces: list[list[dict[str, torch.Tensor]] | None] = [
                [] if trace_weights is not None else None for _ in chunks]
            chunk_snapshots: list[list[dict[str, torch.Tensor]] | None] = [
                [] if trace_clients else None for _ in chunks]

            def train_chunk(k: int) -> list[LocalUpdate]:
                chunk = chunks[k]
                weights = (None if trace_weights is None else
                           torch.tensor([float(trace_weights[i]) for i in chunk]))
                return self._train_chunk(global_params, [client_data[i] for i in chunk],
                                         [batches[i] for i in chunk], weights,
                                         chunk_traces[k], chunk_snapshots[k])

            parallel = self.workers > 1 and len(chunks) > 1
            if parallel:
                self._prepare(global_params, client_data)   # first-use state, before threads
            if parallel and self._backend == 'stacked':
                with ThreadPoolExecutor(min(self.workers, len(chunks)),
                                        thread_name_prefix='chunk') as pool:
                    results = list(pool.map(train_chunk, range(len(chunks))))
            else:
                results = map(train_chunk, range(len(chunks)))
            for chunk, chunk_updates in zip(chunks, results):
                for i, update in zip(chunk, chunk_updates):
                    updates[i] = update
        finally:
            if torch.get_num_threads() != previous_threads:
                torch.set_num_threads(previous_threads)
        if trace_weights is not None:
            traces = [t for t in chunk_traces if t is not None]
            total = float(sum(float(w) for w in trace_weights))
            length = max(len(t) for t in traces)
            self.last_mean_trace = [
                {name: (sum(t[min(step, len(t) - 1)][name] for t in traces) / total).numpy()
                 for name in self._names} for step in range(length)]
        if trace_clients:
            by_client: dict[int, list[dict[str, np.ndarray]]] = {}
            for chunk, snaps in zip(chunks, chunk_snapshots):
                for j, i in enumerate(chunk):
                    by_client[i] = [{name: snap[name][j].numpy() for name in self._names}
                                    for snap in snaps[:len(batches[i]) + 1]]
            self.last_client_trace = [by_client[i] for i in range(len(client_data))]
        return updates  # type: ignore[return-value]

    def _prepare(self, global_params: dict[str, torch.Tensor],
                 client_data: Sequence[ClientData]) -> None:
        """The first-use replay check, made once before worker threads start."""
        shapes = [tuple(np.shape(x)[1:]) for x, _ in client_data if len(x)]
        if shapes:
            self._check_replay(shapes[0], global_params)

    def _train_chunk(self, global_params: dict[str, torch.Tensor],
                     client_data: list[ClientData], batches: list[list[np.ndarray]],
                     trace_weights: torch.Tensor | None = None,
                     trace: list[dict[str, torch.Tensor]] | None = None,
                     snapshots: list[dict[str, torch.Tensor]] | None = None
                     ) -> list[LocalUpdate]:
        """Train one chunk; with ``trace_weights`` append Σ_c w_c params_c after each step
        t = 0..max to ``trace``, with ``snapshots`` a copy of every client's params (see
        :meth:`train`)."""

        def record() -> None:
            if snapshots is not None:
                snapshots.append({name: p.detach().clone() for name, p in params.items()})
            if trace is not None:
                trace.append({name: torch.tensordot(trace_weights, p, dims=1)
                              for name, p in params.items()})

        config = self.config
        num_clients, bs = len(client_data), config.batch_size
        steps = [len(b) for b in batches]
        max_steps = steps[0] if steps else 0
        params = {name: p.unsqueeze(0).repeat(num_clients, *([1] * p.dim()))
                  for name, p in global_params.items()}
        record()
        if max_steps == 0:
            return self._updates(params, batches, steps, torch.zeros((0, num_clients)))
        tensors = [_as_tensors(data) for data in client_data]
        sample_shape = next(tuple(x.shape[1:]) for x, _ in tensors if len(x))
        self._check_replay(sample_shape, global_params)
        # All samples of the chunk in one tensor, plus a zero pad row at the end.
        x_all = torch.cat([x for x, _ in tensors] + [torch.zeros((1, *sample_shape))])
        y_all = torch.cat([y for _, y in tensors] + [torch.zeros(1, dtype=torch.int64)])
        offsets = np.cumsum([0] + [len(x) for x, _ in tensors])
        index = np.full((max_steps, num_clients, bs), len(x_all) - 1, dtype=np.int64)
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
        buffers = {n: torch.zeros_like(p) for n, p in params.items()} if momentum > 0 else None
        if adam:
            exp_avg = {n: torch.zeros_like(p) for n, p in params.items()}
            exp_avg_sq = {n: torch.zeros_like(p) for n, p in params.items()}
        for t in range(max_steps):
            k = active[t]
            current = {name: p[:k] for name, p in params.items()}
            idx = index_t[t, :k]
            grads, loss = self._step(current, x_all[idx], y_all[idx], mask_t[t, :k],
                                     counts_t[t, :k])
            losses[t, :k] = loss
            with torch.no_grad():
                for name, p in current.items():
                    grad = grads[name]
                    if config.proximal_mu:   # FedProx: + μ(w − w_received)
                        grad = grad.add(p - global_params[name], alpha=config.proximal_mu)
                    if wd:
                        grad = grad.add(p, alpha=wd)
                    if adam:
                        self._adam_update(p, grad, exp_avg[name][:k], exp_avg_sq[name][:k],
                                          t + 1)
                    elif buffers is not None:
                        buffer = buffers[name][:k]
                        buffer.mul_(momentum).add_(grad)
                        p.add_(buffer, alpha=-lr)
                    else:
                        p.add_(grad, alpha=-lr)
            record()
        return self._updates(params, batches, steps, losses)

    def _adam_update(self, p: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor,
                     exp_avg_sq: torch.Tensor, step: int) -> None:
        """``torch.optim.Adam`` (L2 weight decay already in grad), all active clients at once."""
        beta1, beta2 = ADAM_BETAS
        exp_avg.lerp_(grad, 1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        bias1 = 1.0 - beta1 ** step
        bias2_sqrt = math.sqrt(1.0 - beta2 ** step)
        denom = (exp_avg_sq.sqrt() / bias2_sqrt).add_(ADAM_EPS)
        p.addcdiv_(exp_avg, denom, value=-self.config.lr / bias1)

    def _updates(self, params: dict[str, torch.Tensor], batches: list[list[np.ndarray]],
                 steps: list[int], losses: torch.Tensor) -> list[LocalUpdate]:
        bad = ~torch.isfinite(losses)
        if bool(bad.any()):
            for t, c in bad.nonzero().tolist():
                if t < steps[c]:
                    raise NonFiniteLossError(f'loss became {float(losses[t, c])} at local step '
                                             f'{t} (client {c} of its chunk)')
        loss_sums = losses.sum(dim=0).tolist()
        arrays = {name: p.numpy() for name, p in params.items()}
        updates = []
        for c, client_batches_ in enumerate(batches):
            seen = sum(len(b) for b in client_batches_)
            mean_loss = loss_sums[c] / steps[c] if steps[c] else float('nan')
            updates.append(LocalUpdate({name: a[c] for name, a in arrays.items()},
                                       TrainResult(steps[c], seen, mean_loss)))
        return updates


def first_diverging_client(trainer: VectorizedTrainer, start: Weights, clients: Sequence[int],
                           client_data: Sequence[ClientData], seeds: Sequence[int],
                           steps: Sequence[int] | None) -> int | None:
    """Replay a round that raised NonFiniteLossError one client at a time: the first of
    ``clients`` whose loss diverges alone (same trainer, start weights, seeds and per-client
    step counts, e.g. OSAFL's κ_u^t), else None."""
    for i, (client, data, seed) in enumerate(zip(clients, client_data, seeds)):
        try:
            trainer.train(start, [data], [seed], steps=None if steps is None else [steps[i]])
        except NonFiniteLossError:
            return client
    return None


def train_clients_vectorized(model: nn.Module, global_weights: Weights,
                             client_data: Sequence[ClientData], config: TrainConfig,
                             seeds: Sequence[int], max_clients_per_chunk: int = 32,
                             num_threads: int | None = 1,
                             shuffle: ShuffleFn = numpy_epoch_orders) -> list[Weights]:
    """Train every client from ``global_weights`` at once; one weights dict per client."""
    trainer = VectorizedTrainer(model, config, max_clients_per_chunk, num_threads)
    return [u.weights for u in trainer.train(global_weights, client_data, seeds, shuffle)]
