"""Client algorithms: what a drone does with the received global model in one round (ROS-free).

One small class per paper's client procedure over :class:`ClientAlgorithm` (Flower-like): it
takes the model (a template it may overwrite), the received global weights, the drone's data, a
:class:`~fl_uav.learning.training.TrainConfig` (this round's learning rate included), a seed and
the per-drone knobs the Strategy sent, and returns a :class:`ClientResult`: the dense-shaped
model delta Δ = w_local − w_received (zeros where pruned), the steps taken that Δ covers (and
apart, any taken that it does not: 2CEOAFL's mask probe), the mean mini-batch loss, the
samples used, the compute spent in dense mini-batch SGD steps (what the netmodel's compute
time and energy are multiplied by) and the metrics the server strategy reads.

============  ==========================================================================
name          procedure
============  ==========================================================================
sgd           local SGD/Adam (``train_local``), optional FedProx proximal term (knob) and
              structured pruning (``structured_keep``)
2ceoafl       2CEOAFL §2.2 (b)-(c), eqs. (8), (10): ρ dense steps, global magnitude mask
              over δ, rewind, κ masked steps; Δ = −η̃ d (d the accumulated masked gradient);
              reports η̃ (``local_lr``) for the server's Π = −Δ/η̃ (eq. (13)), κ as
              ``steps`` and ρ as ``probe_steps``
feddpq        FedDPQ eqs. (5), (9), (10), (18): magnitude pruning with ratio ρ_u, gradient
              steps at the pruned point; Δ = −η Σ g(w̃)
osafl         OSAFL Algorithm 1 lines 2–9, eqs. (5)–(7): κ_u^t ~ U{min..max} plain local
              steps per drone per round; reports κ_u^t as ``steps``
scaffold      SCAFFOLD (Karimireddy et al. 2020) option II: local steps corrected by
              c − c_k; reports Δc_k (``scaffold_delta_c``); c_k is per-drone state
============  ==========================================================================

Keep one instance per drone: state (SCAFFOLD's c_k) lives in the instance and is
checkpointable with :meth:`ClientAlgorithm.state_dict` (flat ``{key: np.ndarray}``).
Every random choice derives from ``seed``, so (seed, round, drone) fixes the result.

Stopping early. Every client asks ``should_stop``
(:class:`~fl_uav.learning.training.StopCondition`: a newer round arrived, or the round's
deadline is near; the fleet's drone passes one, the engine none) before each local step, and
reports the steps it actually took that produced Δ as ``steps``: the rules that normalise by
local work (fednova's τ_k, osafl's κ_u, afacd) divide by those, so an update cut short stays
correct. Steps taken that Δ does not cover (2CEOAFL's ρ mask-probe steps, discarded at the
rewind) are ``probe_steps``; ``compute_dense_steps`` charges both.
The drone's deadline step plan (fl_uav.fleet.drone_agent.steps_that_fit) shortens only the
clients whose step count is the config's (:meth:`ClientAlgorithm.capped_steps`: sgd without a
planner's H, scaffold); the others keep their own count and only the stop cuts them.
After a stop for a newer round the caller drops the result and calls
:meth:`ClientAlgorithm.upload_lost` (SCAFFOLD's c_k as it was).
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from fl_uav.aggregation._common import LOCAL_LR_KEY, PROBE_STEPS_KEY, PRUNE_FRACTION_KEY
from fl_uav.aggregation.fedprox import PROXIMAL_MU_KNOB
from fl_uav.aggregation.scaffold import DELTA_C_KEY
from fl_uav.configschema import require_choice
from fl_uav.learning.choices import CLIENT_ALGORITHMS
from fl_uav.learning.pruning import (
    IndexMap,
    Mask,
    expand_update,
    feddpq_local_update,
    mask_density,
    pruned_training_model,
    structured_mask,
    two_ceoafl_compute_cost,
    two_ceoafl_local_update,
)
from fl_uav.learning.training import (
    NonFiniteLossError,
    ShouldStop,
    TrainConfig,
    proximal_anchor,
)
from fl_uav.learning.vectorized import (
    LocalUpdate,
    client_batches,
    epoch_steps,
    exact_steps_config,
    train_clients_sequential,
)
from fl_uav.learning.weights import Weights, get_weights, set_weights

#: Knob carrying SCAFFOLD's server control variate c ({name: array}) to the drone. In process
#: (the engine) it is the arrays themselves; on the wire it travels as prefixed tensors
#: (fl_uav.aggregation.scaffold.CONTROL_TENSOR_PREFIX).
SERVER_CONTROL_KNOB = 'scaffold_server_control'
# Per-drone resource knobs a planner sends (fl_uav.planning.resources): exactly this many local
# steps (LGC's H, eq. (13)), and this pruning ratio (FedDPQ's ρ_u) instead of the config's.
LOCAL_STEPS_KNOB = 'local_steps'
PRUNE_FRACTION_KNOB = 'prune_fraction'
# Metric PRUNE_FRACTION_KEY (the pruning ratio δ_u^t of 2CEOAFL or ρ_u of FedDPQ the drone
# used this round) lives in fl_uav.aggregation._common and is imported from here as well.
#: Metric: the fraction of weights the drone's pruned model kept (FedDPQ).
PRUNE_MASK_DENSITY_KEY = 'mask_density'


@dataclass(frozen=True)
class ClientResult:
    """One drone's round: the update and what it cost.

    delta: Δ = w_local − w_received per weight name, dense-shaped, zeros where pruned.
    steps: the local steps taken that produced ``delta`` (τ_k: what fednova, osafl and afacd
        divide Δ by; 2CEOAFL's κ' masked steps).
    compute_dense_steps: compute spent, in dense mini-batch SGD steps (a masked step with
        density 1 − δ counts 1 − δ: 2CEOAFL §1.8, FedDPQ eq. (36)), probe steps included.
    metrics: entries for the strategy (ClientUpdate.metrics), e.g. ``steps``.
    mask: the unstructured pruning mask (True = kept) when ``delta`` is zero outside it, so
        the upload may send the kept entries and the mask (2CEOAFL eq. (11)); else None.
    """

    delta: Weights
    steps: int
    mean_loss: float
    num_samples: int
    compute_dense_steps: float
    metrics: Mapping[str, Any] = field(default_factory=dict)
    mask: Mask | None = None
    #: Local steps taken that ``delta`` does not cover (2CEOAFL's ρ' dense steps that find
    #: the mask, discarded at the rewind); in ``compute_dense_steps`` and the step time.
    probe_steps: int = 0

    @property
    def steps_taken(self) -> int:
        """Every local step the round ran (``steps`` + ``probe_steps``): its wall time."""
        return self.steps + self.probe_steps


class ClientAlgorithm(ABC):
    """Base class of every client procedure (one instance per drone)."""

    name = 'client'
    #: True when :meth:`train` computes what the engine's vectorised trainer computes (plain
    #: local steps, :func:`local_steps_result`), so the engine may train all drones at once
    #: instead, each taking :meth:`vectorized_steps` steps.
    vectorizable = False

    @abstractmethod
    def train(self, model: nn.Module, global_weights: Weights, inputs: np.ndarray,
              labels: np.ndarray, config: TrainConfig, seed: int,
              knobs: Mapping[str, Any], should_stop: ShouldStop | None = None) -> ClientResult:
        """Run this round's local procedure from ``global_weights`` (``model`` is overwritten).

        ``should_stop`` is asked before every local step (with the steps taken so far); once
        it says stop, no further step starts and the result covers the steps taken (possibly
        none: a zero Δ). None = train the algorithm's full step count."""

    def capped_steps(self, num_samples: int, config: TrainConfig,
                     knobs: Mapping[str, Any]) -> int | None:
        """The local steps this round takes when nothing stops it, if they are ``config``'s
        (epochs over ``num_samples`` at ``batch_size``, at most ``max_steps``: a lower
        ``config.max_steps``, the drone's deadline cap, shortens them); None when the client's
        step count is its own (a planner's H, OSAFL's κ_u^t, 2CEOAFL's ρ + κ, FedDPQ's
        steps), which ``config.max_steps`` does not bound."""
        return None

    def vectorized_steps(self, seed: int) -> int | None:
        """For a ``vectorizable`` client: the exact step count of this (seed, round, drone)
        when it is not the config's (OSAFL's κ_u^t); None = the config's."""
        return None

    def upload_lost(self) -> None:  # noqa: B027 (optional hook)
        """The round's upload never reached the server (late): undo state changes, if any."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """Per-drone state as flat named arrays (stateless by default)."""
        return {}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:  # noqa: B027
        """Restore :meth:`state_dict`."""


def _delta(local: Weights, received: Weights) -> Weights:
    return {name: np.asarray(local[name], np.float32) - np.asarray(received[name], np.float32)
            for name in received}


def local_steps_result(update: LocalUpdate, start: Weights, num_samples: int,
                       keep: float = 1.0, index_map: IndexMap | None = None,
                       dense_shapes: Mapping[str, tuple[int, ...]] | None = None
                       ) -> ClientResult:
    """The result of plain local steps from ``start`` (the sgd and osafl clients, and the
    engine's vectorised trainer for them): Δ = trained − start, steps · keep dense steps (FedDPQ
    eq. (36) with ρ = 1 − keep). With the structured-pruning ``index_map`` Δ is expanded to
    ``dense_shapes`` and comes with the mask of the coordinates the small model covers, so the
    upload sends only those (masked upload as in 2CEOAFL eq. (11))."""
    delta, mask = _delta(update.weights, start), None
    if index_map is not None:
        delta = expand_update(delta, index_map, dense_shapes)
        mask = structured_mask(index_map, dense_shapes)
    steps = update.result.steps
    return ClientResult(delta=delta, steps=steps, mean_loss=update.result.mean_loss,
                        num_samples=num_samples, compute_dense_steps=steps * keep, mask=mask)


def _mean(losses: list[float]) -> float:
    """The mean mini-batch loss of the steps taken (NaN when none was)."""
    return float(np.mean(losses)) if losses else float('nan')


def _check_data(inputs: np.ndarray, labels: np.ndarray) -> None:
    if len(inputs) == 0 or len(inputs) != len(labels):
        raise ValueError(f'a client needs a non-empty matched data set, got {len(inputs)} '
                         f'inputs and {len(labels)} labels')


def _sub_rng(seed: int, stream: int) -> np.random.Generator:
    """An independent generator for one purpose (stream) of one (seed, round, drone) seed."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(stream)]))


def _draw_fraction(low: float, high: float, seed: int) -> float:
    """δ fixed at ``low`` or, when ``high`` > ``low``, uniform in [low, high] (2CEOAFL §4)."""
    if high <= low:
        return low
    return float(_sub_rng(seed, 1).uniform(low, high))


class SgdClient(ClientAlgorithm):
    """Local SGD / Adam as ``train_local`` (FedAvg's client), the engine's default.

    FedProx's proximal term μ/2·‖w − w^t‖² comes from the ``proximal_mu`` knob (FedProx eq. in
    fl_uav.aggregation.fedprox). ``structured_keep`` < 1: the drone trains this round's
    physically smaller model (filters of largest L1 norm in the received weights; FedDPQ
    eq. (9) with filter granularity) and the delta is expanded back to the dense shape, with
    the mask of the coordinates the small model covers (:func:`structured_mask`), so the upload
    sends only those (2CEOAFL eq. (11)'s masked upload); compute is steps · keep dense steps
    (FedDPQ eq. (36) with ρ = 1 − keep). A planner's ``local_steps`` knob (LGC's H, eq. (13))
    sets exactly that many steps; a stop (``should_stop``) may cut them, and ``steps`` reports
    the steps actually taken, not H.
    """

    name = 'sgd'
    vectorizable = True

    def __init__(self, structured_keep: float = 1.0) -> None:
        if not 0.0 < structured_keep <= 1.0:
            raise ValueError(f'structured_keep must be in (0, 1], got {structured_keep}')
        self.structured_keep = float(structured_keep)

    def train(self, model, global_weights, inputs, labels, config, seed, knobs,
              should_stop=None):
        _check_data(inputs, labels)
        mu = float(knobs.get(PROXIMAL_MU_KNOB, config.proximal_mu))
        config = dataclasses.replace(config, proximal_mu=mu)
        if knobs.get(LOCAL_STEPS_KNOB) is not None:   # a planner's H: exactly that many steps
            config = exact_steps_config(config, len(labels), int(knobs[LOCAL_STEPS_KNOB]))
        start, index_map = global_weights, None
        if self.structured_keep < 1.0:
            model, start, index_map = pruned_training_model(model, global_weights,
                                                            self.structured_keep)
        [update] = train_clients_sequential(model, start, [(inputs, labels)], config, [seed],
                                            should_stop=should_stop)
        return local_steps_result(update, start, len(labels), self.structured_keep, index_map,
                                  {n: np.shape(w) for n, w in global_weights.items()})

    def capped_steps(self, num_samples, config, knobs):
        """The config's epochs (max_steps) bound the steps, unless a planner's H sets them."""
        if knobs.get(LOCAL_STEPS_KNOB) is not None:
            return None
        return epoch_steps(config, num_samples)


class TwoCeoaflClient(ClientAlgorithm):
    """2CEOAFL's ACV round (Pervej et al.; digest 000 §2.2 (b)-(c), eqs. (8), (10)).

    ρ = ``rho_steps`` dense steps, a global magnitude mask pruning δ of the prunable weights,
    rewind to the received weights, κ = ``kappa_steps`` masked steps
    (:func:`~fl_uav.learning.pruning.two_ceoafl_local_update`). Δ = −η̃ d with d = Σ_τ g_τ ⊙ m,
    so Δ is zero outside the mask and the 2ceoafl strategy recovers Π_u = −Δ/η̃ (eq. (13)).
    δ is ``prune_fraction``, or uniform in [prune_fraction, prune_fraction_max] per drone and
    round when the maximum is larger (the paper's δ_u^t ~ U[0.05, 0.7], §4). Compute:
    ρ + κ(1 − δ) dense steps (§1.8, :func:`~fl_uav.learning.pruning.two_ceoafl_compute_cost`).
    The metrics carry δ (``prune_fraction``) and η̃ = ``config.lr`` (``local_lr``, this round's
    decayed rate), so the fleet's station and the engine divide by the rate the drone used.
    ``steps`` is κ, the masked steps Δ covers (what a rule that normalises by local work,
    fednova's τ_k or osafl's κ_u, must divide Δ by: the ρ dense steps' weights are discarded at
    the rewind, §2.2 (b), and the analysis' κ, eq. (19), counts the masked steps only); ρ is
    reported apart as ``probe_steps`` (field and metric) and charged in the compute.
    A stop (``should_stop``) cuts either phase (each keeps its first step under a deadline);
    ``steps``, ``probe_steps`` and the compute are then those of the κ' and ρ' steps taken,
    and Δ = −η̃ d with d over the κ' masked steps, which eq. (13) needs as it is (it divides
    by η̃, not by κ).
    """

    name = '2ceoafl'

    def __init__(self, rho_steps: int = 1, kappa_steps: int = 5, prune_fraction: float = 0.2,
                 prune_fraction_max: float = 0.0) -> None:
        if rho_steps < 0 or kappa_steps < 1:
            raise ValueError(f'rho_steps must be >= 0 and kappa_steps >= 1, got {rho_steps}, '
                             f'{kappa_steps}')
        _check_fraction_range(prune_fraction, prune_fraction_max)
        self.rho_steps, self.kappa_steps = int(rho_steps), int(kappa_steps)
        self.prune_fraction, self.prune_fraction_max = prune_fraction, prune_fraction_max

    def train(self, model, global_weights, inputs, labels, config, seed, knobs,
              should_stop=None):
        _check_data(inputs, labels)
        delta_fraction = _draw_fraction(self.prune_fraction, self.prune_fraction_max, seed)
        losses: list[float] = []
        d, mask, (rho_taken, kappa_taken) = two_ceoafl_local_update(
            model, global_weights, (inputs, labels), self.rho_steps, self.kappa_steps,
            delta_fraction, config, seed, losses=losses, should_stop=should_stop)
        delta = {name: (-config.lr * value).astype(np.float32) for name, value in d.items()}
        return ClientResult(
            delta=delta, steps=kappa_taken, mean_loss=_mean(losses),
            num_samples=len(labels),
            compute_dense_steps=two_ceoafl_compute_cost(rho_taken, kappa_taken, delta_fraction),
            metrics={PRUNE_FRACTION_KEY: delta_fraction, LOCAL_LR_KEY: config.lr,
                     PROBE_STEPS_KEY: rho_taken},
            mask=mask, probe_steps=rho_taken)


class FedDpqClient(ClientAlgorithm):
    """FedDPQ's device round (Hou et al.; digest 001 §1.4, eqs. (5), (9), (10), (18)).

    Magnitude pruning of the received model with ratio ρ_u (``prune_fraction``, or uniform in
    [prune_fraction, prune_fraction_max] per drone and round, or the planner's
    ``prune_fraction`` knob when sent: FedDPQ Algorithm 2's ρ_u), then ``local_steps`` SGD steps
    with every gradient taken at a pruned point (the paper: one step,
    :func:`~fl_uav.learning.pruning.feddpq_local_update`). Δ = −η Σ g(w̃), applied by the
    feddpq strategy to the dense model (eq. (18)). Compute: steps · (1 − ρ_u) dense steps
    (eq. (36)). Plain SGD, so ``config.momentum`` must be 0. The gradients at the pruned point
    are not masked, so the upload stays dense (eq. (13) counts all V entries): no ``mask``.
    A stop (``should_stop``) cuts the steps: Δ, ``steps`` and the compute are those of the
    steps taken (the paper's one step is always taken under a deadline).
    """

    name = 'feddpq'

    def __init__(self, local_steps: int = 1, prune_fraction: float = 0.2,
                 prune_fraction_max: float = 0.0) -> None:
        if local_steps < 1:
            raise ValueError(f'local_steps must be >= 1, got {local_steps}')
        _check_fraction_range(prune_fraction, prune_fraction_max)
        self.local_steps = int(local_steps)
        self.prune_fraction, self.prune_fraction_max = prune_fraction, prune_fraction_max

    def train(self, model, global_weights, inputs, labels, config, seed, knobs,
              should_stop=None):
        _check_data(inputs, labels)
        if config.momentum or config.weight_decay or config.optimizer != 'sgd':
            raise ValueError('feddpq runs plain SGD (FedDPQ eq. (5)): optimizer must be sgd '
                             'and momentum and weight_decay 0')
        ratio = (float(knobs[PRUNE_FRACTION_KNOB]) if knobs.get(PRUNE_FRACTION_KNOB) is not None
                 else _draw_fraction(self.prune_fraction, self.prune_fraction_max, seed))
        if not 0.0 <= ratio < 1.0:
            raise ValueError(f'knob {PRUNE_FRACTION_KNOB} must be in [0, 1), got {ratio}')
        delta, mask, losses = feddpq_local_update(model, global_weights, (inputs, labels), ratio,
                                                  self.local_steps, config.lr,
                                                  config.batch_size, seed,
                                                  should_stop=should_stop)
        steps = len(losses)     # one loss per step taken
        return ClientResult(delta=delta, steps=steps, mean_loss=_mean(losses),
                            num_samples=len(labels),
                            compute_dense_steps=steps * (1.0 - ratio),
                            metrics={PRUNE_FRACTION_KEY: ratio, PRUNE_MASK_DENSITY_KEY:
                                     mask_density(mask)})


class OsaflClient(ClientAlgorithm):
    """OSAFL's client (Pervej, Choi, Molisch; digest 004 §2.1, Algorithm 1, eqs. (5)–(7)).

    κ_u^t is drawn uniformly from {min_steps, …, max_steps} per drone and round (the paper:
    U{1..15}, §1.3) and the drone takes exactly κ_u^t local steps of ``train_local`` (fresh
    seeded permutations, passes repeated as needed). It reports ``steps`` = κ_u^t, from which
    the osafl strategy forms d_u = −Δ/(η κ_u) (eq. (7)); fednova and afacd read it too. A stop
    (``should_stop``) cuts the steps; ``steps`` is then the κ' actually taken, so d_u stays the
    mean step of the update sent.
    Mini-batches are those of the sgd client with the same seed (common random numbers).
    The engine's vectorised trainer computes the same (``VectorizedTrainer.train(steps=...)``).
    """

    name = 'osafl'
    vectorizable = True

    def __init__(self, min_steps: int = 1, max_steps: int = 15) -> None:
        if not 1 <= min_steps <= max_steps:
            raise ValueError(f'need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}')
        self.min_steps, self.max_steps = int(min_steps), int(max_steps)

    def draw_steps(self, seed: int) -> int:
        """κ_u^t for this (seed, round, drone)."""
        return int(_sub_rng(seed, 2).integers(self.min_steps, self.max_steps + 1))

    def vectorized_steps(self, seed: int) -> int:
        """κ_u^t: the vectorised trainer takes exactly these steps (Algorithm 1 line 4)."""
        return self.draw_steps(seed)

    def train(self, model, global_weights, inputs, labels, config, seed, knobs,
              should_stop=None):
        _check_data(inputs, labels)
        config = dataclasses.replace(
            exact_steps_config(config, len(labels), self.draw_steps(seed)),
            proximal_mu=float(knobs.get(PROXIMAL_MU_KNOB, config.proximal_mu)))
        [update] = train_clients_sequential(model, global_weights, [(inputs, labels)], config,
                                            [seed], should_stop=should_stop)
        return local_steps_result(update, global_weights, len(labels))


class ScaffoldClient(ClientAlgorithm):
    """SCAFFOLD's client, option II (Karimireddy et al. 2020, Alg. 1; OSAFL digest §6.6).

    y ← y − η (g_k(y) − c_k + c) over the round's local steps (the mini-batches and optimizer of
    ``train_local``; the correction c − c_k is added to every gradient), then
    c_k⁺ = c_k − c + (w^t − y)/(K η) with K the steps taken, and the drone reports
    Δc_k = c_k⁺ − c_k as ``metrics['scaffold_delta_c']`` for fl_uav.aggregation.scaffold.
    c comes from the ``scaffold_server_control`` knob (zeros without it); c_k starts at 0 and is
    this instance's state. With c = c_k = 0 the update equals the sgd client's exactly.
    Entries of the weights that are not parameters (buffers) get zero control variates.
    A stop (``should_stop``) cuts the steps and K is the steps taken; with none taken (a newer
    round before the first step) c_k is left as it was.
    """

    name = 'scaffold'

    def __init__(self) -> None:
        self.control: Weights | None = None
        self._previous: Weights | None = None

    def train(self, model, global_weights, inputs, labels, config, seed, knobs,
              should_stop=None):
        _check_data(inputs, labels)
        zeros = {n: np.zeros(np.shape(w), np.float32) for n, w in global_weights.items()}
        server = knobs.get(SERVER_CONTROL_KNOB) or zeros
        local = self.control if self.control is not None else zeros
        set_weights(model, global_weights)
        named = dict(model.named_parameters())
        correction = {n: torch.from_numpy(np.asarray(server[n], np.float32)
                                          - np.asarray(local[n], np.float32))
                      for n in named}
        x_all = torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float32))
        y_all = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))
        batches = client_batches(len(labels), config, seed)
        if config.optimizer == 'adam':
            optimizer = torch.optim.Adam(model.parameters(), lr=config.lr,
                                         weight_decay=config.weight_decay)
        else:
            optimizer = torch.optim.SGD(model.parameters(), lr=config.lr,
                                        momentum=config.momentum,
                                        weight_decay=config.weight_decay)
        anchor = proximal_anchor(model, config)
        anchors = dict(zip(named, anchor)) if anchor is not None else {}
        loss_fn = nn.CrossEntropyLoss()
        model.train()
        loss_sum, steps = 0.0, 0
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
            with torch.no_grad():
                for name, p in named.items():
                    if p.grad is not None:
                        p.grad.add_(correction[name])
                        if name in anchors:   # FedProx's term, if configured
                            p.grad.add_(p - anchors[name], alpha=config.proximal_mu)
            optimizer.step()
            loss_sum += value
            steps += 1
        local_weights = get_weights(model)
        delta = _delta(local_weights, global_weights)
        if steps == 0:   # stopped before the first step: no K to divide by, c_k unchanged
            self._previous = self.control
            return ClientResult(delta=delta, steps=0, mean_loss=float('nan'),
                                num_samples=len(labels), compute_dense_steps=0.0,
                                metrics={DELTA_C_KEY: {n: np.zeros_like(v)
                                                       for n, v in zeros.items()}})
        scale = 1.0 / (steps * config.lr)
        new_control, delta_c = {}, {}
        for name in global_weights:
            if name in named:    # c_k⁺ = c_k − c + (w^t − y)/(K η)
                new_control[name] = (np.asarray(local[name], np.float32)
                                     - np.asarray(server[name], np.float32)
                                     - scale * delta[name]).astype(np.float32)
            else:
                new_control[name] = np.zeros(np.shape(global_weights[name]), np.float32)
            delta_c[name] = new_control[name] - np.asarray(local[name], np.float32)
        self._previous, self.control = self.control, new_control
        return ClientResult(delta=delta, steps=steps, mean_loss=loss_sum / steps,
                            num_samples=len(labels), compute_dense_steps=float(steps),
                            metrics={DELTA_C_KEY: delta_c})

    def capped_steps(self, num_samples, config, knobs):
        """The config's epochs (max_steps) bound the steps."""
        return epoch_steps(config, num_samples)

    def upload_lost(self) -> None:
        """The server never added Δc_k: keep c_k as it was, so c = mean_k c_k still holds."""
        self.control = self._previous

    def state_dict(self) -> dict[str, np.ndarray]:
        if self.control is None:
            return {}
        return {f'c/{name}': value.copy() for name, value in self.control.items()}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        control = {key[2:]: np.array(value, np.float32) for key, value in state.items()
                   if key.startswith('c/')}
        self.control = control or None
        self._previous = None


def _check_fraction_range(low: float, high: float) -> None:
    if not 0.0 <= low < 1.0:
        raise ValueError(f'prune_fraction must be in [0, 1), got {low}')
    if high and not low <= high < 1.0:
        raise ValueError(f'prune_fraction_max must be 0 (fixed δ) or in [prune_fraction, 1), '
                         f'got {high}')


def build_client_algorithm(name: str, *, structured_keep: float = 1.0, rho_steps: int = 1,
                           kappa_steps: int = 5, prune_fraction: float = 0.2,
                           prune_fraction_max: float = 0.0, min_local_steps: int = 1,
                           max_local_steps: int = 15) -> ClientAlgorithm:
    """One drone's client algorithm by config name (``learning.client_algorithm``).

    kappa_steps is 2CEOAFL's κ for '2ceoafl' and the steps per round for 'feddpq'.
    """
    builders = {
        'sgd': lambda: SgdClient(structured_keep),
        '2ceoafl': lambda: TwoCeoaflClient(rho_steps, kappa_steps, prune_fraction,
                                           prune_fraction_max),
        'feddpq': lambda: FedDpqClient(kappa_steps, prune_fraction, prune_fraction_max),
        'osafl': lambda: OsaflClient(min_local_steps, max_local_steps),
        'scaffold': lambda: ScaffoldClient(),
    }
    require_choice('learning.client_algorithm', name, CLIENT_ALGORITHMS)
    return builders[name]()
