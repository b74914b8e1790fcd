"""Local training and evaluation loops (plain SGD over an in-memory buffer)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

# The torch-free parts, re-exported here where they have always been imported from.
from fl_uav.learning.choices import OPTIMIZERS  # noqa: F401
from fl_uav.learning.train_config import TrainConfig


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss."""


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the block with torch on one thread, then restore the previous count.

    For the planners' small torch workloads (FedDPQ Sec. V's optuna GP sampler, LGC Sec. 3.3's
    DDPG agent) on a shared machine, where more threads only contend.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


#: :attr:`StopCondition.reason`: a newer round arrived (the station has closed this one and
#: would refuse its update): the round's work is dropped, nothing is sent.
STOP_SUPERSEDED = 'superseded'
#: :attr:`StopCondition.reason`: the stop instant before the round's deadline passed: what
#: was trained so far is the update, and it is sent.
STOP_DEADLINE = 'deadline'

#: What every local trainer asks before each local step: ``should_stop(steps_done)`` is True
#: when no further step may start (``steps_done``: the steps taken so far). None = never.
ShouldStop = Callable[[int], bool]


class StopCondition:
    """The one way a round's local training stops early (the fleet's drone; the engine's
    rounds have no deadline and pass none), a :data:`ShouldStop` that keeps its reason.

    Called before each local step with the steps taken so far; True means no further step
    starts, and :attr:`reason` says why:

    - STOP_SUPERSEDED: ``superseded()`` is true (a newer round arrived). Stops at once, even
      before the first step; the caller drops the work (and rolls back client state).
    - STOP_DEADLINE: ``clock()`` has reached ``stop_at_s`` (an instant of ``clock``, for the
      drone ``time.monotonic()``; None = no deadline) and at least one step was taken, so
      there is an update to send. The caller sends what was trained.

    A superseded round outranks a deadline that tripped earlier (its reason replaces it).

    Parameters
    ----------
    stop_at_s : float or None
        The instant (s, on ``clock``) after which no further local step starts.
    superseded : callable or None
        Says whether a newer round has arrived; asked before every step.
    clock : callable
        The time source (s), ``time.monotonic`` by default; tests pass a fake clock.
    """

    def __init__(self, stop_at_s: float | None = None,
                 superseded: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if stop_at_s is not None and not math.isfinite(stop_at_s):
            raise ValueError(f'stop_at_s must be a finite instant or None, got {stop_at_s}')
        self.stop_at_s = stop_at_s
        self._superseded = superseded
        self._clock = clock
        self.reason = ''

    def __call__(self, steps_done: int) -> bool:
        if self._superseded is not None and self._superseded():
            self.reason = STOP_SUPERSEDED
            return True
        if (self.stop_at_s is not None and steps_done > 0
                and self._clock() >= self.stop_at_s):
            self.reason = self.reason or STOP_DEADLINE
            return True
        return False


def proximal_anchor(model: nn.Module, config: TrainConfig) -> list[torch.Tensor] | None:
    """Copies of the received parameters when FedProx's proximal term is on, else None."""
    if not config.proximal_mu:
        return None
    return [p.detach().clone() for p in model.parameters()]


def add_proximal_gradient(model: nn.Module, anchor: list[torch.Tensor] | None,
                          mu: float) -> None:
    """FedProx: ∇(μ/2·‖w − w0‖²) = μ(w − w0), added to each parameter's gradient."""
    if anchor is None:
        return
    with torch.no_grad():
        for p, p0 in zip(model.parameters(), anchor):
            if p.grad is not None:
                p.grad.add_(p - p0, alpha=mu)


@dataclass(frozen=True)
class TrainResult:
    """What one local training run spent and achieved."""

    steps: int
    samples_seen: int
    mean_loss: float


def train_local(model: nn.Module, inputs: np.ndarray, labels: np.ndarray, config: TrainConfig,
                seed: int, should_stop: ShouldStop | None = None) -> TrainResult:
    """Run mini-batch SGD on (inputs float32 N×C×H×W, labels int64 N) in place.

    ``should_stop`` (:class:`StopCondition`) is asked before each step; the result counts the
    steps actually taken (mean loss NaN if none)."""
    if len(inputs) == 0:
        return TrainResult(steps=0, samples_seen=0, mean_loss=float('nan'))
    x_all = torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float32))
    y_all = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))
    if config.optimizer == 'adam':
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr,
                                     weight_decay=config.weight_decay)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                    weight_decay=config.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(seed)
    anchor = proximal_anchor(model, config)
    model.train()
    steps, seen, loss_sum = 0, 0, 0.0
    for _ in range(config.local_epochs):
        order = rng.permutation(len(x_all))
        for start in range(0, len(order), config.batch_size):
            if should_stop is not None and should_stop(steps):
                return TrainResult(steps, seen, loss_sum / steps if steps else float('nan'))
            idx = torch.from_numpy(order[start:start + config.batch_size])
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_all[idx]), y_all[idx])
            value = float(loss.detach())
            if not math.isfinite(value):
                raise NonFiniteLossError(f'loss became {value} at local step {steps}')
            loss.backward()
            add_proximal_gradient(model, anchor, config.proximal_mu)
            optimizer.step()
            steps += 1
            seen += len(idx)
            loss_sum += value
            if config.max_steps and steps >= config.max_steps:
                return TrainResult(steps, seen, loss_sum / steps)
    return TrainResult(steps, seen, loss_sum / max(steps, 1))


@torch.no_grad()
def evaluate(model: nn.Module, inputs: np.ndarray, labels: np.ndarray,
             batch_size: int = 500) -> tuple[float, float]:
    """Return (accuracy, mean cross-entropy loss) on a labelled set."""
    if len(inputs) == 0:
        raise ValueError('cannot evaluate on an empty set')
    model.eval()
    loss_fn = nn.CrossEntropyLoss(reduction='sum')
    correct, loss_sum = 0, 0.0
    for start in range(0, len(inputs), batch_size):
        x = torch.from_numpy(np.array(inputs[start:start + batch_size], np.float32))
        y = torch.from_numpy(np.array(labels[start:start + batch_size], np.int64))
        logits = model(x)
        loss_sum += float(loss_fn(logits, y))
        correct += int((logits.argmax(dim=1) == y).sum())
    return correct / len(inputs), loss_sum / len(inputs)
