"""A slot-level reference simulator of FedEx-Sync / FedEx-Async, written from the digest's
pseudo-code (digest 003 Secs. 2.2, 2.3 and 8), independent of ``fl_uav.engine.express``.

Slot t = one local step of every client holding a model. Each transporter k flies tour
``tours[k]`` (client ids), visiting client ``tours[k][j]`` at slot t0 + ``offsets[k][j]``
(1 <= offset < Delta_k) and landing at t0 + Delta_k. A visit adds the client's CLU
m_i = eta * sum g (trained from the model delivered on the previous visit; 0 on the first)
to the running sum u_k, then hands the client the carried model and zeroes m_i. The server
subtracts (1/N) sum u_k (N = all clients) from the *current* model: Sync once per round of
Delta = max_k Delta_k slots (all depart together), Async on every landing, summing the u_k of
the transporters landing in the same slot, then handing the updated model to them.

Gradients are exact (``grad(i, x)``), so runs are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Grad = Callable[[int, np.ndarray], np.ndarray]


@dataclass
class Update:
    """One server update: its slot label, the transporters landing, the model after it."""

    slot: int
    uavs: list[int]
    x: np.ndarray


def _check(tours, offsets, deltas) -> None:
    for k, tour in enumerate(tours):
        if len(offsets[k]) != len(tour):
            raise ValueError(f'tour {k}: one offset per client')
        if any(not 1 <= o < deltas[k] for o in offsets[k]):
            raise ValueError(f'tour {k}: offsets must lie in [1, Delta_k)')


class _Clients:
    """Client state: local model x_i (None before the first delivery) and CLU m_i."""

    def __init__(self, n: int, dim: int, grad: Grad, eta: float) -> None:
        self.x: list[np.ndarray | None] = [None] * n
        self.m = np.zeros((n, dim))
        self.grad, self.eta = grad, eta

    def step(self) -> None:   # eqs. (10)-(11): one local SGD step per slot
        for i, xi in enumerate(self.x):
            if xi is not None:
                g = self.eta * self.grad(i, xi)
                self.x[i] = xi - g
                self.m[i] += g

    def visit(self, i: int, u: np.ndarray, carried: np.ndarray) -> None:
        u += self.m[i]               # eq. (12): upload the CLU into the running sum
        self.x[i] = carried.copy()   # download x^{t0}
        self.m[i] = 0.0


def run_sync(tours: Sequence[Sequence[int]], offsets: Sequence[Sequence[int]],
             deltas: Sequence[int], grad: Grad, x0: np.ndarray, eta: float,
             rounds: int) -> list[Update]:
    """FedEx-Sync (digest Sec. 2.2): ``rounds`` rounds of Delta = max_k Delta_k slots."""
    _check(tours, offsets, deltas)
    n = sum(len(t) for t in tours)
    big_delta = max(deltas)
    clients = _Clients(n, len(x0), grad, eta)
    x = np.array(x0, dtype=np.float64)
    out = []
    for r in range(rounds):
        t0 = r * big_delta
        carried = [x.copy() for _ in tours]
        u = [np.zeros_like(x) for _ in tours]
        for t in range(t0, t0 + big_delta):
            clients.step()
            for k, tour in enumerate(tours):
                for j, i in enumerate(tour):
                    if t == t0 + offsets[k][j]:
                        clients.visit(i, u[k], carried[k])
        x = x - sum(u) / n                    # eq. (13), at slot t0 + Delta
        out.append(Update(t0 + big_delta, list(range(len(tours))), x.copy()))
    return out


def run_async(tours: Sequence[Sequence[int]], offsets: Sequence[Sequence[int]],
              deltas: Sequence[int], grad: Grad, x0: np.ndarray, eta: float,
              slots: int) -> list[Update]:
    """FedEx-Async (digest Sec. 2.3): slots 0..``slots``, an update on every landing."""
    _check(tours, offsets, deltas)
    n = sum(len(t) for t in tours)
    clients = _Clients(n, len(x0), grad, eta)
    x = np.array(x0, dtype=np.float64)
    t0 = [0] * len(tours)
    carried = [x.copy() for _ in tours]
    u = [np.zeros_like(x) for _ in tours]
    out = []
    for t in range(slots + 1):
        clients.step()
        for k, tour in enumerate(tours):
            for j, i in enumerate(tour):
                if t == t0[k] + offsets[k][j]:
                    clients.visit(i, u[k], carried[k])
        landing = [k for k in range(len(tours)) if t == t0[k] + deltas[k]]
        if landing:
            x = x - sum(u[k] for k in landing) / n   # eqs. (14)-(15)
            for k in landing:                        # re-depart with the UPDATED model
                t0[k], carried[k], u[k] = t, x.copy(), np.zeros_like(x)
            out.append(Update(t, landing, x.copy()))
    return out


def model_at_slots(updates: Sequence[Update], x0: np.ndarray, slots: int) -> np.ndarray:
    """The global model as of each slot 0..``slots`` (after every update labelled <= t)."""
    xs = np.empty((slots + 1, len(x0)))
    x, j = np.asarray(x0, np.float64), 0
    for t in range(slots + 1):
        while j < len(updates) and updates[j].slot <= t:
            x = updates[j].x
            j += 1
        xs[t] = x
    return xs


def quadratic_grad(centers: np.ndarray, curvature: np.ndarray) -> Grad:
    """f_i(x) = 0.5 sum_d a_{id} (x_d - c_{id})^2; exact gradient."""
    centers, curvature = np.asarray(centers, float), np.asarray(curvature, float)
    return lambda i, x: curvature[i] * (x - centers[i])


def quadratic_optimum(centers: np.ndarray, curvature: np.ndarray) -> np.ndarray:
    """argmin of (1/N) sum_i f_i for the quadratic above."""
    return (curvature * centers).sum(0) / curvature.sum(0)
