"""SCAFFOLD (Karimireddy et al., ICML 2020): server step plus the server control variate c."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fl_uav.aggregation._common import apply_step, keep_model, weighted_sum, weights_to_state
from fl_uav.aggregation.strategy import (
    AggregateResult,
    ClientUpdate,
    Strategy,
    Weights,
    senders,
)

#: Metric key of a drone's control-variate change Δc_k = c_k⁺ − c_k: a mapping from tensor name
#: to an array (or nested list) of that tensor's shape (SCAFFOLD option II, OSAFL digest §6.6).
DELTA_C_KEY = 'scaffold_delta_c'
#: Knob sent to every drone: the server learning rate η_g (informative; the drones need c,
#: which is model-sized and is exposed by :meth:`Scaffold.server_control` for the transport).
SERVER_LR_KNOB = 'scaffold_server_lr'
#: Suggested frame tensor-name prefixes when c and Δc travel as extra tensors (model-sized
#: arrays do not fit the 64 KiB JSON metadata): ``'scaffold_c/<name>'`` down, ``'scaffold_dc/'``
#: up. :func:`with_prefix` and :func:`split_prefixed` convert.
CONTROL_TENSOR_PREFIX = 'scaffold_c/'
DELTA_C_TENSOR_PREFIX = 'scaffold_dc/'


def with_prefix(weights: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """{prefix + name: array}."""
    return {prefix + name: value for name, value in weights.items()}


def split_prefixed(tensors: Mapping[str, np.ndarray],
                   prefix: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(tensors without the prefix, {name: array} of the prefixed ones with it stripped)."""
    plain = {n: v for n, v in tensors.items() if not n.startswith(prefix)}
    extra = {n[len(prefix):]: v for n, v in tensors.items() if n.startswith(prefix)}
    return plain, extra


class Scaffold(Strategy):
    """w ← w + η_g · (1/|S|) Σ_{k∈S} Δy_k ;  c ← c + (1/N) Σ_{k∈S} Δc_k.

    SCAFFOLD server update, Alg. 1 (OSAFL digest §6.6). ``num_clients`` is N, the whole fleet.
    Drones run y ← y − η(g_k(y) − c_k + c) and report ``metrics[DELTA_C_KEY]`` (option II:
    c_k⁺ = c_k − c + (w^t − y)/(τ_k η)). An update without Δc, or with ``num_samples == 0``, is
    skipped (``metrics['skipped']``). c starts at 0 (created from the first model seen).
    Checkpoint: ``{'c': {name: np.ndarray}}`` (numpy arrays, not JSON).
    """

    name = 'scaffold'

    def __init__(self, num_clients: int, server_lr: float = 1.0) -> None:
        if not server_lr > 0.0:
            raise ValueError(f'server_lr must be > 0, got {server_lr}')
        if num_clients < 1:
            raise ValueError(f'num_clients must be >= 1, got {num_clients}')
        self.server_lr = float(server_lr)
        self.num_clients = int(num_clients)
        self.control: dict[str, np.ndarray] | None = None

    def configure_round(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        return {drone: {SERVER_LR_KNOB: self.server_lr} for drone in drone_ids}

    def server_control(self, global_weights: Weights) -> Weights:
        """The server control variate c to ship with the global model (zeros before round 1)."""
        self._ensure_control(global_weights)
        return {name: value.astype(np.float32) for name, value in self.control.items()}

    def _ensure_control(self, global_weights: Weights) -> None:
        if self.control is None:
            self.control = {name: np.zeros(np.shape(w), np.float64)
                            for name, w in global_weights.items()}

    def aggregate(self, round_index: int, global_weights: Weights,
                  updates: Sequence[ClientUpdate]) -> AggregateResult:
        self._ensure_control(global_weights)
        usable = [u for u in updates if u.num_samples > 0 and _has_delta_c(u, global_weights)]
        skipped = len(updates) - len(usable)
        if not usable:
            return keep_model(global_weights, skipped=skipped)
        names = list(global_weights)
        m = len(usable)
        mean_dy = weighted_sum([u.delta for u in usable], [1.0 / m] * m, names)
        sum_dc = weighted_sum([u.metrics[DELTA_C_KEY] for u in usable], [1.0] * m, names)
        for name in names:
            self.control[name] = self.control[name] + sum_dc[name] / self.num_clients
        new = apply_step(global_weights, mean_dy, self.server_lr)
        return AggregateResult(weights=new, empty=False,
                               used=senders(usable),
                               metrics={'participants': m, 'skipped': skipped})

    def state_dict(self) -> dict:
        return {'c': weights_to_state(self.control) if self.control is not None else None}

    def load_state_dict(self, state: Mapping) -> None:
        c = state.get('c')
        self.control = None if c is None else {n: np.array(v, np.float64) for n, v in c.items()}


def _has_delta_c(update: ClientUpdate, global_weights: Weights) -> bool:
    delta_c = update.metrics.get(DELTA_C_KEY)
    return isinstance(delta_c, Mapping) and all(
        name in delta_c and np.shape(delta_c[name]) == np.shape(w)
        for name, w in global_weights.items())
