"""Model pruning for on-board training: magnitude masks, 2CEOAFL, FedDPQ and structured shrink.

Three families, all on named float32 weights (fl_uav.learning.weights) or small Sequential CNNs:

* Unstructured magnitude masks (``global_magnitude_mask``, ``layerwise_magnitude_mask``,
  ``apply_mask``). A mask maps every weight name to a bool array, True = kept. Only the
  *prunable* tensors can lose entries; by default these are the conv and linear weight
  matrices (names ending in ``weight`` with at least 2 dimensions). Biases, BatchNorm affine
  parameters and buffers (running statistics) are never pruned and get all-True masks: the
  2CEOAFL paper leaves this open (digest 000 §2.7, §7 "pruning scope") and its digest suggests
  not pruning BN or bias parameters. Pass ``include`` to change the rule.
* The per-round local procedures of two papers:
  - 2CEOAFL, Pervej et al., "Computation- and Communication-Efficient Online FL for
    Resource-Constrained Aerial Vehicles" (digest 000 §2.2, eqs. (8) and (10)):
    ``two_ceoafl_local_update``.
  - FedDPQ, "Energy-efficient FL for real-time vision" (digest 001 §1.4, eqs. (8) to (10)):
    ``feddpq_prune``, ``feddpq_local_gradient`` and ``feddpq_local_update``.
* Structured (filter / channel) pruning that physically shrinks the layers, so that local
  training really costs less wall time (the digests' pitfall: unstructured masks give no speed
  up in dense kernels, digest 000 §1.8 and digest 001 §1.4): ``shrink_model``,
  ``extract_weights``, ``expand_update``, ``structured_mask``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from numbers import Integral

import numpy as np
import torch
from torch import nn

from fl_uav.configschema import require_choice
from fl_uav.learning.training import NonFiniteLossError, ShouldStop, TrainConfig
from fl_uav.learning.weights import Weights, get_weights, set_weights

Mask = dict[str, np.ndarray]
IndexMap = dict[str, tuple[np.ndarray, ...]]
Include = Callable[[str, np.ndarray], bool] | Iterable[str] | None

IMPORTANCES = ('l1', 'l2')


# ------------------------------------------------------------------ unstructured masks ----
def is_prunable(name: str, array: np.ndarray) -> bool:
    """Default rule: conv and linear weight matrices (``*weight`` with >= 2 dims) are prunable.

    Biases (1-D), BatchNorm weights and biases (1-D) and buffers such as running statistics are
    not.
    """
    return name.split('.')[-1] == 'weight' and np.ndim(array) >= 2


def _check_fraction(value: float, parameter: str) -> float:
    value = float(value)
    if not (0.0 <= value < 1.0):
        raise ValueError(f'{parameter} must be in [0, 1), got {value}')
    return value


def _prunable_names(weights: Weights, include: Include) -> list[str]:
    if include is None:
        rule = is_prunable
    elif callable(include):
        rule = include
    else:
        chosen = set(include)
        unknown = chosen - set(weights)
        if unknown:
            raise ValueError(f'include names weights that do not exist: {sorted(unknown)}')
        return [name for name in weights if name in chosen]
    return [name for name in weights if rule(name, weights[name])]


def _mask_from_order(weights: Weights, names: list[str], fraction: float,
                     per_layer: bool) -> Mask:
    mask = {name: np.ones(np.shape(array), dtype=bool) for name, array in weights.items()}
    groups = [[name] for name in names] if per_layer else [names]
    for group in groups:
        if not group:
            continue
        magnitudes = np.concatenate(
            [np.abs(np.asarray(weights[name], dtype=np.float64)).ravel() for name in group])
        if not np.all(np.isfinite(magnitudes)):
            raise ValueError(f'weights contain NaN or infinite values in {group}')
        count = math.floor(fraction * magnitudes.size)
        if count == 0:
            continue
        # Stable sort: equal magnitudes are pruned in order of position (dict order, then
        # row-major index), so ties are broken deterministically and the count is exact.
        pruned = np.argsort(magnitudes, kind='stable')[:count]
        keep = np.ones(magnitudes.size, dtype=bool)
        keep[pruned] = False
        offset = 0
        for name in group:
            size = np.size(weights[name])
            mask[name] = keep[offset:offset + size].reshape(np.shape(weights[name]))
            offset += size
    return mask


def global_magnitude_mask(weights: Weights, fraction: float, include: Include = None) -> Mask:
    """Prune the ⌊fraction·p⌋ smallest-|w| entries ranked jointly over all prunable tensors.

    2CEOAFL's mask (digest 000 §2.2 (b), §7.1): m ← 1; m[indices of the ⌊δ·p⌋ smallest |v_i|]
    ← 0, with p the number of prunable entries. ``include`` is None (the default rule of
    ``is_prunable``), a predicate ``(name, array) -> bool`` or a collection of names. Returns a
    mask for every name in ``weights`` (True = kept; non-prunable tensors all True). Ties are
    broken by position, so exactly ⌊fraction·p⌋ entries are pruned.
    """
    fraction = _check_fraction(fraction, 'fraction')
    names = _prunable_names(weights, include)
    return _mask_from_order(weights, names, fraction, per_layer=False)


def layerwise_magnitude_mask(weights: Weights, fraction: float, include: Include = None) -> Mask:
    """Prune the ⌊fraction·n_l⌋ smallest-|w| entries of every prunable tensor l separately."""
    fraction = _check_fraction(fraction, 'fraction')
    names = _prunable_names(weights, include)
    return _mask_from_order(weights, names, fraction, per_layer=True)


def apply_mask(weights: Weights, mask: Mask) -> Weights:
    """w ⊙ m: a new dict with pruned entries set to 0; names absent from the mask are copied."""
    out = {}
    for name, array in weights.items():
        array = np.asarray(array)
        if name in mask:
            if np.shape(mask[name]) != array.shape:
                raise ValueError(f'mask {name!r}: shape {np.shape(mask[name])} != weight '
                                 f'{array.shape}')
            out[name] = np.where(mask[name], array, np.zeros((), array.dtype)).astype(array.dtype)
        else:
            out[name] = array.copy()
    return out


def mask_density(mask: Mask, include: Iterable[str] | None = None) -> float:
    """Fraction of kept entries over the named tensors (all tensors by default)."""
    names = list(mask) if include is None else list(include)
    total = sum(np.size(mask[name]) for name in names)
    kept = sum(int(np.count_nonzero(mask[name])) for name in names)
    return kept / total if total else 1.0


# ------------------------------------------------------------------ shared SGD machinery ----
class _BatchStream:
    """Mini-batches exactly as train_local draws them: a fresh permutation every epoch."""

    def __init__(self, inputs: np.ndarray, labels: np.ndarray, batch_size: int,
                 seed: int) -> None:
        self.x = torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float32))
        self.y = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self.order = np.empty(0, dtype=np.int64)
        self.start = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.start >= len(self.order):
            self.order = self.rng.permutation(len(self.x))
            self.start = 0
        idx = torch.from_numpy(self.order[self.start:self.start + self.batch_size])
        self.start += self.batch_size
        return self.x[idx], self.y[idx]


def _unpack_data(data: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    try:
        inputs, labels = data
    except (TypeError, ValueError) as exc:
        raise ValueError('data must be a pair (inputs N×C×H×W, labels N)') from exc
    if len(inputs) == 0 or len(inputs) != len(labels):
        raise ValueError(f'data must hold a non-empty matched pair, got {len(inputs)} inputs '
                         f'and {len(labels)} labels')
    return inputs, labels


def _loss_and_grad(model: nn.Module, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor,
                   step: int) -> float:
    """Fill every parameter's .grad with ∇loss on (x, y); return the loss value."""
    for p in model.parameters():
        p.grad = None
    loss = loss_fn(model(x), y)
    value = float(loss.detach())
    if not math.isfinite(value):
        raise NonFiniteLossError(f'loss became {value} at local step {step}')
    loss.backward()
    return value


# ------------------------------------------------------------------ 2CEOAFL ----
def two_ceoafl_local_update(model: nn.Module, global_weights: Weights,
                            data: tuple[np.ndarray, np.ndarray], rho_steps: int,
                            kappa_steps: int, delta: float, train_config: TrainConfig,
                            seed: int, include: Include = None,
                            losses: list[float] | None = None,
                            should_stop: ShouldStop | None = None
                            ) -> tuple[Weights, Mask, tuple[int, int]]:
    """One ACV's local round of 2CEOAFL (Pervej et al.; digest 000 §2.2 (b)-(c), eqs. (8), (10)).

    1. Load the received dense weights w^t (w_u^{t,0}).
    2. ρ dense SGD steps, eq. (8): v ← v − η̃ g(v).
    3. Mask m from the magnitudes of the trained v = w^{t,ρ}: the ⌊δ·p⌋ smallest prunable
       entries are zeroed (``global_magnitude_mask``); the ρ-step weights are then discarded.
    4. Rewind to the *received* weights: w̄ = w^t ⊙ m (digest §7.1).
    5. κ masked SGD steps, eq. (10): g_τ ← g(w̄) ⊙ m; d ← d + g_τ; w̄ ← w̄ − η̃ g_τ.
    6. Return the accumulated masked gradient d = Σ_τ g_τ ⊙ m (digest §7.3: upload d, not the
       model and not the raw delta; d = (w̄^0 − w̄^κ)/η̃ for plain SGD). The server applies
       w ← w − η Σ_u α_u d_u to the dense model (eq. (13), §2.3).

    η̃ is ``train_config.lr`` and the mini-batch size ``train_config.batch_size``; batches are
    drawn as train_local draws them (a fresh seeded permutation per pass), one stream for both
    phases. Momentum and weight decay are not in the paper (§2.7). If configured, the weight
    decay term is added to the masked gradient (pruned entries are 0, so it is 0 there), the
    momentum buffer restarts at the rewind, and d accumulates the direction actually applied
    (the momentum buffer), masked, so pruned weights stay exactly 0 and w̄^κ = w̄^0 − η̃·d
    still holds. Use momentum=0 and weight_decay=0 for the paper's exact eq. (10).
    Only the 'sgd' optimizer is supported.

    Returns (d, m, (ρ', κ')): d is dense-shaped with zeros where m is False (buffers, if any,
    get zero updates); ρ' dense and κ' masked SGD steps were taken (ρ and κ unless stopped).
    The model is left holding w̄^κ'. With ρ = 0 and δ = 0 this is plain local SGD from w^t
    (κ steps of train_local). If ``losses`` is a list, the mini-batch loss of every step
    (ρ' + κ' values) is appended.

    ``should_stop`` (:class:`~fl_uav.learning.training.StopCondition`) is asked before each
    step with the steps of the current phase so far, so a deadline stop still leaves at least
    one dense step (the mask is from trained weights) and one masked step (d ≠ 0); once it
    trips in the ρ phase, the mask is taken from the weights reached. d stays Σ_τ g_τ ⊙ m over
    the κ' steps taken, which is what eq. (13)'s Π = d needs: the server scales by η, not by κ.
    """
    if isinstance(rho_steps, bool) or not isinstance(rho_steps, Integral) or rho_steps < 0:
        raise ValueError(f'rho_steps must be an int >= 0, got {rho_steps!r}')
    if isinstance(kappa_steps, bool) or not isinstance(kappa_steps, Integral) or kappa_steps < 1:
        raise ValueError(f'kappa_steps must be an int >= 1, got {kappa_steps!r}')
    rho_steps, kappa_steps = int(rho_steps), int(kappa_steps)
    delta = _check_fraction(delta, 'delta')
    if train_config.optimizer != 'sgd':
        raise ValueError(f'train_config.optimizer must be sgd for 2CEOAFL, got '
                         f'{train_config.optimizer!r}')
    inputs, labels = _unpack_data(data)
    stream = _BatchStream(inputs, labels, train_config.batch_size, seed)
    loss_fn = nn.CrossEntropyLoss()
    lr, momentum, decay = train_config.lr, train_config.momentum, train_config.weight_decay
    named = dict(model.named_parameters())
    model.train()

    def sgd(steps: int, masks: dict[str, torch.Tensor] | None, first_step: int,
            accumulate: dict[str, torch.Tensor] | None) -> int:
        """Up to ``steps`` SGD steps (fewer if ``should_stop`` trips); the steps taken."""
        buffers: dict[str, torch.Tensor] = {}
        for k in range(steps):
            if should_stop is not None and should_stop(k):
                return k
            x, y = stream.next()
            value = _loss_and_grad(model, loss_fn, x, y, first_step + k)
            if losses is not None:
                losses.append(value)
            with torch.no_grad():
                for name, p in named.items():
                    if not p.requires_grad:
                        continue
                    g = p.grad if p.grad is not None else torch.zeros_like(p)
                    if masks is not None:
                        g = g * masks[name]
                    if decay:
                        g = g + decay * p
                    if momentum:
                        if name in buffers:
                            buffers[name].mul_(momentum).add_(g)
                        else:
                            buffers[name] = g.clone()
                        g = buffers[name]
                    p.add_(g, alpha=-lr)
                    if accumulate is not None:
                        accumulate[name].add_(g)
        return steps

    # (1)-(2): dense steps from the received weights.
    set_weights(model, global_weights)
    rho_taken = sgd(rho_steps, None, 0, None)
    # (3): mask from the magnitudes of w^{t,ρ}.
    mask = global_magnitude_mask(get_weights(model), delta, include)
    # (4): rewind to the received weights, masked.
    set_weights(model, apply_mask(global_weights, mask))
    # (5): κ masked steps, accumulating d.
    masks = {name: torch.from_numpy(mask[name]).to(p.dtype) for name, p in named.items()}
    accumulated = {name: torch.zeros_like(p) for name, p in named.items()}
    kappa_taken = sgd(kappa_steps, masks, rho_taken, accumulated)
    update = {name: np.zeros(np.shape(array), np.float32) for name, array in
              global_weights.items()}
    for name, acc in accumulated.items():
        update[name] = (acc * masks[name]).numpy().astype(np.float32)
    return update, mask, (rho_taken, kappa_taken)


def two_ceoafl_compute_cost(rho_steps: int, kappa_steps: int, delta: float) -> float:
    """Local compute in dense-step units, ρ + κ(1 − δ) (digest 000 §1.8, after ref. [24]).

    A model of the cost, not a measurement: unstructured masks give no wall-clock saving on
    dense kernels (§1.8 pitfall).
    """
    delta = _check_fraction(delta, 'delta')
    return rho_steps + kappa_steps * (1.0 - delta)


# ------------------------------------------------------------------ FedDPQ ----
def feddpq_prune(weights: Weights, ratio: float, scope: str = 'global',
                 include: Include = None) -> tuple[Weights, Mask]:
    """FedDPQ magnitude pruning with ratio ρ_u = V_u/V (digest 001 §1.4, eqs. (9), (10)).

    The importance of parameter v is approximated by |w_v| (eq. (9)); the V_u = ⌊ρ_u·V⌋
    least important prunable parameters are zeroed (eq. (10)), giving w̃_u^t. The paper does
    not say global or per-layer ranking ([AMBIG]); ``scope`` is 'global' (one ranking over all
    prunable tensors, the default) or 'layer'. Table I uses ρ ∈ [0.1, 0.3]; any ρ in [0, 1) is
    accepted. Returns (w̃, mask).
    """
    ratio = _check_fraction(ratio, 'ratio')
    if scope == 'global':
        mask = global_magnitude_mask(weights, ratio, include)
    elif scope == 'layer':
        mask = layerwise_magnitude_mask(weights, ratio, include)
    else:
        raise ValueError(f"scope must be 'global' or 'layer', got {scope!r}")
    return apply_mask(weights, mask), mask


def feddpq_local_gradient(model: nn.Module, global_weights: Weights,
                          data: tuple[np.ndarray, np.ndarray], ratio: float, batch_size: int,
                          seed: int, scope: str = 'global',
                          include: Include = None) -> tuple[Weights, Mask]:
    """FedDPQ's local step: g_u^t = ∇F_u(w̃_u^t, ξ_u^t) at the pruned point (digest 001 §1.4).

    The device prunes the received dense w^{t−1} to w̃_u^t (``feddpq_prune``) and computes one
    mini-batch gradient (size ``batch_size``, drawn with a seeded permutation) at w̃_u^t. One
    local step per round (eq. (5), FedSGD style). The gradient is returned dense-shaped and
    *not* masked: the paper's update is the gradient at the pruned point, applied to the dense
    global model (its pruning error ‖w^{t−1} − w̃_u^t‖² ≤ ρ_u Γ², Lemma 1). Multiply by the
    returned mask yourself for a sparse upload. Buffers get zero gradients. The model is left
    holding w̃_u^t.

    Computed as −Δ of :func:`feddpq_local_update` with one step at lr = 1 (Δ = −1 · g, so the
    negation gives g bit for bit), so the two cannot drift apart.
    """
    update, mask, _ = feddpq_local_update(model, global_weights, data, ratio, steps=1, lr=1.0,
                                          batch_size=batch_size, seed=seed, scope=scope,
                                          include=include)
    set_weights(model, apply_mask(global_weights, mask))   # back to w̃_u^t (not after the step)
    return {name: -delta for name, delta in update.items()}, mask


def feddpq_local_update(model: nn.Module, global_weights: Weights,
                        data: tuple[np.ndarray, np.ndarray], ratio: float, steps: int,
                        lr: float, batch_size: int, seed: int, scope: str = 'global',
                        include: Include = None, should_stop: ShouldStop | None = None
                        ) -> tuple[Weights, Mask, list[float]]:
    """FedDPQ's local update over ``steps`` SGD steps at pruned points (digest 001 §1.4, §8.1).

    The paper takes one step per round: Δ_u = −η g_u^t with g_u^t = ∇F_u(w̃_u^t, ξ_u^t) at the
    magnitude-pruned w̃_u^t (eqs. (5), (9), (10), (18)); with ``steps`` = 1 this returns exactly
    −lr · :func:`feddpq_local_gradient` (same seed, same mini-batch). For ``steps`` > 1 (our
    extension, for a fair comparison with multi-step clients) every gradient is again taken at
    a pruned point: w̃^{τ+1} = m ⊙ (w̃^τ − η g(w̃^τ)), so the model trained stays the pruned one
    (FedDPQ eq. (36)'s (1 − ρ) compute), and Δ = −η Σ_τ g(w̃^τ) keeps the unmasked gradients
    as eq. (18) does. Plain SGD (no momentum, no weight decay: eq. (5)). Mini-batches are drawn
    as ``two_ceoafl_local_update`` draws them. Returns (Δ dense-shaped, mask, step losses).
    ``should_stop`` (:class:`~fl_uav.learning.training.StopCondition`) is asked before each
    step; Δ = −η Σ_τ g(w̃^τ) is then over the steps taken, one loss each (none: Δ = 0).
    """
    if isinstance(steps, bool) or not isinstance(steps, Integral) or steps < 1:
        raise ValueError(f'steps must be an int >= 1, got {steps!r}')
    if not lr > 0.0:
        raise ValueError(f'lr must be > 0, got {lr}')
    if batch_size < 1:
        raise ValueError(f'batch_size must be >= 1, got {batch_size}')
    inputs, labels = _unpack_data(data)
    pruned, mask = feddpq_prune(global_weights, ratio, scope, include)
    set_weights(model, pruned)
    model.train()
    stream = _BatchStream(inputs, labels, batch_size, seed)
    loss_fn = nn.CrossEntropyLoss()
    named = dict(model.named_parameters())
    masks = {name: torch.from_numpy(mask[name]).to(p.dtype) for name, p in named.items()}
    accumulated = {name: torch.zeros_like(p) for name, p in named.items()}
    losses = []
    for step in range(int(steps)):
        if should_stop is not None and should_stop(step):
            break
        x, y = stream.next()
        losses.append(_loss_and_grad(model, loss_fn, x, y, step))
        with torch.no_grad():
            for name, p in named.items():
                if p.grad is None:
                    continue
                accumulated[name].add_(p.grad)
                p.sub_(lr * p.grad).mul_(masks[name])
    update = {name: np.zeros(np.shape(array), np.float32) for name, array in
              global_weights.items()}
    for name, acc in accumulated.items():
        update[name] = (-lr * acc).numpy().astype(np.float32)
    return update, mask, losses


# ------------------------------------------------------------------ structured pruning ----
_PASSIVE = (nn.ReLU, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d,
            nn.Flatten, nn.Dropout, nn.Identity)


def _layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, module) of a Sequential CNN's layers, in execution order.

    Accepted: an nn.Sequential, or a model whose only children are ``features`` and
    ``classifier`` Sequentials applied in that order (SmallCnn, TinyCnn, DigitsCnn).
    """
    if isinstance(model, nn.Sequential):
        parts = [('', model)]
    else:
        children = dict(model.named_children())
        if set(children) != {'features', 'classifier'} or not all(
                isinstance(c, nn.Sequential) for c in children.values()):
            raise ValueError('model must be an nn.Sequential or have exactly the Sequential '
                             f'children features and classifier; got {sorted(children)}')
        parts = [('features.', children['features']), ('classifier.', children['classifier'])]
    layers = []
    for prefix, seq in parts:
        for name, module in seq.named_children():
            if not isinstance(module, (nn.Conv2d, nn.Linear, *_PASSIVE)):
                raise ValueError(f'model has an unsupported layer {prefix}{name} '
                                 f'({type(module).__name__}); supported: Conv2d, Linear, '
                                 'ReLU, pooling, Flatten, Dropout')
            if isinstance(module, nn.Conv2d) and module.groups != 1:
                raise ValueError(f'model has a grouped conv {prefix}{name}; not supported')
            layers.append((prefix + name, module))
    return layers


def _ranked_keep(scores: np.ndarray, keep: int) -> np.ndarray:
    """Indices of the ``keep`` largest scores, ties to the lower index, sorted ascending."""
    order = np.argsort(-scores, kind='stable')
    return np.sort(order[:keep]).astype(np.int64)


def _keep_count(total: int, keep_fraction: float) -> int:
    """keep_fraction·total rounded half up, at least 1."""
    return max(1, min(total, math.floor(keep_fraction * total + 0.5)))


def structured_index_map(model: nn.Module, keep_fraction: float, importance: str = 'l1',
                         prune_hidden: bool = False) -> IndexMap:
    """Which filters, channels and features survive (see ``shrink_model``), from the weights."""
    if not (0.0 < float(keep_fraction) <= 1.0):
        raise ValueError(f'keep_fraction must be in (0, 1], got {keep_fraction}')
    require_choice('importance', importance, IMPORTANCES)
    layers = _layers(model)
    weighted = [(n, m) for n, m in layers if isinstance(m, (nn.Conv2d, nn.Linear))]
    if not any(isinstance(m, nn.Conv2d) for _, m in weighted):
        raise ValueError('model has no Conv2d layer to prune')
    last_linear = max(i for i, (_, m) in enumerate(weighted) if isinstance(m, nn.Linear)) \
        if any(isinstance(m, nn.Linear) for _, m in weighted) else None
    index_map: IndexMap = {}
    kept_in: np.ndarray | None = None     # surviving outputs of the previous weighted layer
    spatial = 1                            # features per channel after Flatten
    prev_out = None
    for position, (name, module) in enumerate(weighted):
        weight = module.weight.detach().cpu().numpy()
        if isinstance(module, nn.Conv2d):
            if not (prev_out is None or isinstance(weighted[position - 1][1], nn.Conv2d)):
                raise ValueError(f'model has a Conv2d {name} after a Linear layer; unsupported')
            in_idx = np.arange(module.in_channels) if kept_in is None else kept_in
            prunable_out = True
        else:
            if prev_out is not None and isinstance(weighted[position - 1][1], nn.Conv2d):
                if module.in_features % prev_out:
                    raise ValueError(f'model: {name} has {module.in_features} inputs, not a '
                                     f'multiple of the {prev_out} channels before it')
                spatial = module.in_features // prev_out
                in_idx = (kept_in[:, None] * spatial + np.arange(spatial)[None, :]).ravel()
            else:
                in_idx = np.arange(module.in_features) if kept_in is None else kept_in
            prunable_out = prune_hidden and position != last_linear
        out_total = weight.shape[0]
        if prunable_out and position != len(weighted) - 1:
            flat = np.abs(weight.reshape(out_total, -1).astype(np.float64))
            scores = flat.sum(axis=1) if importance == 'l1' else np.sqrt((flat ** 2).sum(axis=1))
            out_idx = _ranked_keep(scores, _keep_count(out_total, keep_fraction))
        else:
            out_idx = np.arange(out_total, dtype=np.int64)
        rest = [np.arange(s, dtype=np.int64) for s in weight.shape[2:]]
        index_map[f'{name}.weight'] = (out_idx, np.asarray(in_idx, np.int64), *rest)
        if module.bias is not None:
            index_map[f'{name}.bias'] = (out_idx,)
        kept_in, prev_out = out_idx, out_total
    return index_map


def shrink_model(model: nn.Module, keep_fraction: float, importance: str = 'l1',
                 prune_hidden: bool = False) -> tuple[nn.Module, IndexMap]:
    """Filter pruning that physically shrinks a Sequential CNN; returns (small_model, index_map).

    Every Conv2d keeps its ⌊keep_fraction·C_out + ½⌋ (at least 1) output filters of largest
    importance (the L1 or L2 norm of the filter's weights, ties to the lower index; cf. the
    "filters" option of FedDPQ's magnitude importance, digest 001 §1.4, eq. (9)), and the next
    conv keeps the matching input channels. The first Linear after Flatten keeps the matching
    input features (channel-major: channel c owns features c·S … c·S + S − 1). With
    ``prune_hidden`` the hidden Linear layers' output units are pruned the same way (and the
    next Linear's inputs); the output layer is never pruned. Only channels and units are
    removed; kernel sizes and spatial sizes are unchanged. Supported: an nn.Sequential or a
    model with ``features`` and ``classifier`` Sequentials holding Conv2d (groups = 1), Linear,
    ReLU, pooling, Flatten, Dropout; anything else (e.g. BatchNorm) raises ValueError.

    ``index_map`` maps every parameter name (the same in both models) to one index array per
    dimension: small[name] = dense[name][np.ix_(*index_map[name])]. Compute the update of the
    small model and bring it back with ``expand_update``. A forward pass of the small model
    equals the dense model with the pruned filters (and their biases) zeroed.
    """
    index_map = structured_index_map(model, keep_fraction, importance, prune_hidden)
    small = copy.deepcopy(model)
    for name, module in _layers(small):
        if not isinstance(module, (nn.Conv2d, nn.Linear)):
            continue
        idx = index_map[f'{name}.weight']
        bias = module.bias is not None
        if isinstance(module, nn.Conv2d):
            new = nn.Conv2d(len(idx[1]), len(idx[0]), module.kernel_size, module.stride,
                            module.padding, module.dilation, 1, bias, module.padding_mode)
        else:
            new = nn.Linear(len(idx[1]), len(idx[0]), bias)
        parent_name, _, child = name.rpartition('.')
        parent = small.get_submodule(parent_name) if parent_name else small
        setattr(parent, child, new)
    dense = get_weights(model)
    set_weights(small, {**dense, **extract_weights(dense, index_map)})
    return small, index_map


def extract_weights(dense_weights: Weights, index_map: IndexMap) -> Weights:
    """The small model's weights cut from dense ones (e.g. this round's global model)."""
    out = {}
    for name, array in dense_weights.items():
        if name in index_map:
            idx = index_map[name]
            if len(idx) != np.ndim(array) or any(
                    len(i) and i.max() >= s for i, s in zip(idx, np.shape(array))):
                raise ValueError(f'index_map {name!r} does not fit the weight shape '
                                 f'{np.shape(array)}')
            out[name] = np.asarray(array)[np.ix_(*idx)].astype(np.float32)
        else:
            out[name] = np.asarray(array, np.float32).copy()
    return out


def expand_update(small_update: Weights, index_map: IndexMap,
                  dense_shapes: dict[str, tuple[int, ...]]) -> Weights:
    """Place a small model's update at its dense indices, zeros where pruned.

    The dense analogue of 2CEOAFL's upload (digest 000 §2.3): pruned coordinates get no
    contribution from this client; the server adds the result to the dense global model.
    Names in ``dense_shapes`` but not in ``small_update`` get all-zero updates.
    """
    out = {}
    for name, shape in dense_shapes.items():
        dense = np.zeros(tuple(shape), np.float32)
        if name in small_update:
            value = np.asarray(small_update[name], np.float32)
            if name in index_map:
                idx = index_map[name]
                expected = tuple(len(i) for i in idx)
                if value.shape != expected:
                    raise ValueError(f'small_update {name!r}: shape {value.shape} != index map '
                                     f'{expected}')
                dense[np.ix_(*idx)] = value
            elif value.shape == tuple(shape):
                dense[...] = value
            else:
                raise ValueError(f'small_update {name!r}: shape {value.shape} != dense '
                                 f'{tuple(shape)} and the name is not in index_map')
        out[name] = dense
    unknown = set(small_update) - set(dense_shapes)
    if unknown:
        raise ValueError(f'small_update has names not in dense_shapes: {sorted(unknown)}')
    return out


def structured_mask(index_map: IndexMap, dense_shapes: dict[str, tuple[int, ...]]) -> Mask:
    """Bool mask of the dense coordinates the small model covers (True = kept)."""
    ones = {name: np.ones(tuple(len(i) for i in idx), np.float32)
            for name, idx in index_map.items()}
    expanded = expand_update(ones, index_map, dense_shapes)
    return {name: (expanded[name] != 0) if name in index_map else np.ones(shape, bool)
            for name, shape in ((n, tuple(s)) for n, s in dense_shapes.items())}


def pruned_training_model(model: nn.Module, global_weights: Weights, keep_fraction: float
                          ) -> tuple[nn.Module, Weights, IndexMap]:
    """This round's small model (filters chosen on the received weights) and its weights."""
    set_weights(model, global_weights)
    small, index_map = shrink_model(model, keep_fraction)
    small_weights = extract_weights(global_weights, index_map)
    set_weights(small, small_weights)
    return small, small_weights, index_map
