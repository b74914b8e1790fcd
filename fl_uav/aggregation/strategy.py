"""The Strategy interface: how the ground station turns drones' updates into a global model.

Small and Flower-like: a strategy configures a round (per-drone knobs) and aggregates the
updates that arrived. Variants override one method; cross-cutting concerns wrap a strategy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from fl_uav.aggregation.knobs import strategy_knob_problems
from fl_uav.plugins import raised_at

Weights = dict[str, np.ndarray]


def delta_norm(delta: Mapping[str, np.ndarray]) -> float:
    """||Δ||₂ over the whole model (all tensors in their order, float64)."""
    if not delta:
        return 0.0
    return float(np.linalg.norm(np.concatenate(
        [np.asarray(value, np.float64).ravel() for value in delta.values()])))


@dataclass(frozen=True)
class ClientUpdate:
    """One drone's validated update for a round: the model delta and what it cost."""

    sender: int
    round_index: int
    delta: Weights
    num_samples: int
    metrics: Mapping[str, Any] = field(default_factory=dict)

    @cached_property
    def norm(self) -> float:
        """||Δ||₂ (:func:`delta_norm`), computed once: the round's norm report and the median
        clipping both read it (an update with another delta is another ClientUpdate)."""
        return delta_norm(self.delta)


@dataclass(frozen=True)
class AggregateResult:
    """The new global weights and what the strategy reports about the round.

    ``used``: the senders whose updates the rule applied (sorted, once each; empty when
    ``empty``): the round's participants, as many as ``metrics['participants']`` counts. An
    update the rule skipped (no samples, no step count, another round, ...) is not in it.
    """

    weights: Weights
    empty: bool
    metrics: Mapping[str, Any] = field(default_factory=dict)
    used: tuple[int, ...] = ()


class Strategy(ABC):
    """Base class of every aggregation rule, the built-ins' and a plug-in's
    (``aggregation.strategy: package.module:Name``, fl_uav.plugins).

    The contract:

    * The constructor takes keyword arguments out of
      :data:`fl_uav.aggregation.STRATEGY_PLUGIN_ARGUMENTS` (``server_lr``, ``num_clients``,
      ``seed``, ...): a plug-in gets the ones its signature names, with the config's values.
    * :meth:`aggregate` is the one method to write. It is called once per round (the engine's
      round, or the station's when the round closes) with the round index (1, 2, ...), the
      global weights (name -> float32 array) and the updates that arrived in time and passed
      the station's checks (possibly none). It returns the new weights (same names, shapes and
      dtype), ``empty=True`` when nothing was applied (then the weights are unchanged),
      ``used`` = the senders it applied, and ``metrics`` (JSON values; ``participants`` counts
      ``used``). It must not change the arrays it is given (the engine and the station pass
      read-only views). The engine and the station call it through :func:`checked_aggregate`:
      a result that breaks this, or an exception, stops the engine and makes the station keep
      its model for the round, naming the fault.
    * :meth:`configure_round` may send per-drone knobs with the round's model.
    * State kept between rounds (momentum, control variates, scores) must come out of
      :meth:`state_dict` and go back in with :meth:`load_state_dict`, or a resumed run
      (``fl-uav experiment --resume``) starts it over: the engine refuses to resume a plug-in
      whose attributes changed while its state_dict stayed empty. The state is a tree of
      dicts (str keys), lists, JSON scalars and numpy arrays (arrays go into checkpoint.npz,
      the rest into its JSON).
    * Randomness comes from the ``seed`` argument (an int; ``np.random.default_rng(seed)`` is
      fine: in the fleet it is ``stream_seed(world.seed, 0, Stream.STRATEGY)``, a stream no
      other part of the run draws from), so runs are reproducible.
    """

    name = 'strategy'

    def configure_round(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        """Per-drone knobs sent with the round's global model (none by default): drone id ->
        {knob: JSON value}; every drone in ``drone_ids`` has an entry."""
        return {drone: {} for drone in drone_ids}

    @abstractmethod
    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        """Combine the updates that arrived; with none, keep the model and say so."""

    def state_dict(self) -> dict:
        """Checkpointable strategy state (stateless by default): str-keyed dicts, lists, JSON
        scalars and numpy arrays."""
        return {}

    def load_state_dict(self, state: Mapping) -> None:  # noqa: B027 (optional hook)
        """Restore :meth:`state_dict` (arrays come back as numpy arrays, lists as lists)."""


def senders(updates: Sequence[ClientUpdate]) -> tuple[int, ...]:
    """The distinct senders of some updates, sorted (an :attr:`AggregateResult.used`)."""
    return tuple(sorted({u.sender for u in updates}))


def weighted_mean_delta(updates: Sequence[ClientUpdate], weights: Sequence[float]) -> Weights:
    """Σ_k w_k Δ_k / Σ_k w_k over the named tensors of the deltas (float64 accumulation)."""
    total = float(sum(weights))
    if total <= 0.0:
        raise ValueError('aggregation weights must sum to a positive number')
    names = updates[0].delta.keys()
    out: Weights = {}
    for name in names:
        acc = np.zeros(updates[0].delta[name].shape, np.float64)
        for update, w in zip(updates, weights):
            acc += (w / total) * update.delta[name]
        out[name] = acc.astype(np.float32)
    return out


def rule_name(strategy: Strategy) -> str:
    """The class the contract's errors name: the rule inside a wrapper whose class sets
    ``wraps_rule`` (NormClip, which ``aggregation.clip_norm`` puts around every rule by
    default), so a plug-in's fault names the plug-in."""
    if getattr(type(strategy), 'wraps_rule', False):
        return rule_name(strategy.inner)
    return type(strategy).__name__


class AggregationError(RuntimeError):
    """A strategy's :meth:`Strategy.aggregate` raised, or returned what the contract does not
    allow (not an AggregateResult; other names, shapes or dtypes; NaN or Inf). The message
    names the fault (a tensor, a shape, the exception and the file:line it came from)."""


def checked_aggregate(strategy: Strategy, round_index: int, global_weights: Weights,
                      updates: Sequence[ClientUpdate]) -> AggregateResult:
    """``strategy.aggregate(...)``, held to the contract: AggregationError if it raises or
    returns something else than an AggregateResult whose weights have the global weights'
    names, shapes and dtypes and are finite. The engine stops on it; the station keeps its
    model and records a warning. Either way the model never takes a broken result.

    The strategy gets read-only views of the global weights, so one that changes them in
    place (``w += step``: the model the station keeps if the result is refused) raises
    instead; a view it hands back unchanged comes back as the caller's array."""
    frozen = {name: _read_only(w) for name, w in global_weights.items()}
    try:
        result = strategy.aggregate(round_index, frozen, updates)
    except Exception as exc:   # the rule's own code (a plug-in's): say what and where
        hint = (' (aggregate must not change the global weights it is given: build new '
                'arrays)' if isinstance(exc, ValueError) and 'read-only' in str(exc) else '')
        raise AggregationError(f'{rule_name(strategy)}.aggregate raised '
                               f'{type(exc).__name__}: {exc}{raised_at(exc)}{hint}') from exc
    problem = result_problem(result, global_weights)
    if problem:
        raise AggregationError(f'{rule_name(strategy)}.aggregate returned {problem} '
                               f"(the new weights must have the global weights' names, "
                               f'shapes and dtypes, and be finite)')
    weights = {name: global_weights[name] if w is frozen[name] else w
               for name, w in result.weights.items()}
    return replace(result, weights=weights)


def checked_configure_round(strategy: Strategy, round_index: int,
                            drone_ids: Sequence[int]) -> dict[int, dict]:
    """``strategy.configure_round(...)``, held to the contract: AggregationError if it raises
    or returns something else than drone id -> dict of knobs, or a strategy knob that is
    malformed (fl_uav.aggregation.knobs: what a drone would reject) (the engine stops on it; the
    station sends the round without the strategy's knobs and records a warning)."""
    try:
        knobs = strategy.configure_round(round_index, drone_ids)
    except Exception as exc:   # the rule's own code (a plug-in's): say what and where
        raise AggregationError(f'{rule_name(strategy)}.configure_round raised '
                               f'{type(exc).__name__}: {exc}{raised_at(exc)}') from exc
    if not isinstance(knobs, Mapping) or not all(isinstance(v, Mapping)
                                                 for v in knobs.values()):
        raise AggregationError(f'{rule_name(strategy)}.configure_round returned '
                               f'{knobs!r:.80}, not drone id -> dict of knobs')
    for drone, drone_knobs in knobs.items():
        for knob, problem in strategy_knob_problems(drone_knobs).items():
            raise AggregationError(f'{rule_name(strategy)}.configure_round gave drone '
                                   f'{drone} the knob {knob} = {problem}')
    return {drone: dict(k) for drone, k in knobs.items()}


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def result_problem(result: Any, global_weights: Mapping[str, np.ndarray]) -> str:
    """What is wrong with an aggregate's result for these global weights ('' if nothing)."""
    if not isinstance(result, AggregateResult):
        return f'a {type(result).__name__}, not an AggregateResult'
    weights = result.weights
    if not isinstance(weights, Mapping):
        return f'weights of type {type(weights).__name__}, not a dict of arrays'
    missing = [n for n in global_weights if n not in weights]
    extra = [n for n in weights if n not in global_weights]
    if missing or extra:
        return f'weights missing {missing}, unexpected {extra}'
    for name, w in global_weights.items():
        new = weights[name]
        if not isinstance(new, np.ndarray):
            return f'tensor {name!r} as a {type(new).__name__}, not a numpy array'
        if new.shape != w.shape or new.dtype != w.dtype:
            return (f"tensor {name!r} with shape {new.shape} {new.dtype}, the model's is "
                    f'{w.shape} {w.dtype}')
        if not np.all(np.isfinite(new)):
            return f'tensor {name!r} with {int(np.sum(~np.isfinite(new)))} NaN or Inf entries'
    return ''


def state_arrays_out(state: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """A JSON-able copy of a state tree (:meth:`Strategy.state_dict`) whose numpy arrays move
    into ``arrays`` as npz entries named by their ``path`` (the engine's and the fleet
    station's checkpoints)."""
    if isinstance(state, np.ndarray):
        arrays[path] = state
        return {'__npz__': path}
    if isinstance(state, dict):
        return {key: state_arrays_out(value, f'{path}/{key}', arrays)
                for key, value in state.items()}
    if isinstance(state, list | tuple):
        return [state_arrays_out(value, f'{path}/{i}', arrays) for i, value in enumerate(state)]
    return state


def state_arrays_in(state: Any, archive: Any) -> Any:
    """Inverse of :func:`state_arrays_out`."""
    if isinstance(state, dict):
        if set(state) == {'__npz__'}:
            return np.array(archive[state['__npz__']])
        return {key: state_arrays_in(value, archive) for key, value in state.items()}
    if isinstance(state, list):
        return [state_arrays_in(value, archive) for value in state]
    return state
