"""The engine's FedEx runtime against an independent slot-level reference (digest 003 Secs.
2.2-2.3, 8), on quadratic clients with exact gradients: the same global model at every update.

Covers heterogeneous Delta_k (3 / 5 / 7 slots), transporters landing in the same slot (one eq.
(15) update), the empty first delivery, the one-tour lag, continuous training between visits
(Delta steps in Sync even on short tours, Delta_k in Async) and the updated model handed to the
departing transporter in Async.
"""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.aggregation.fedex import FedExAsync, FedExSync
from fl_uav.engine.express import ExpressRuntime
from fl_uav.planning.express import ExpressConfig
from fl_uav.planning.routing import RoutePlan
from test.unit.engine import _fedex_reference as ref

SLOT_S = 60.0
ETA = 0.15
# 4 transporters: Delta_k 3, 5, 7, 5 slots. UAVs 1 and 3 always land together; at slot 15 UAVs
# 0, 1 and 3 land together; at slot 35 UAVs 1, 2 and 3.
TOURS = [[0, 5, 2], [1, 7, 3, 9], [4, 6], [8, 10, 11]]
DELTAS = [3, 5, 7, 5]
# Visit offsets within each tour (1 <= o < Delta_k); the engine never sees them.
OFFSETS = [[1, 1, 2], [1, 2, 3, 4], [2, 6], [1, 3, 4]]


def _problem():
    rng = np.random.default_rng(3)
    n, dim = sum(map(len, TOURS)), 3
    centers = rng.normal(size=(n, dim)) + 2.0
    curvature = rng.uniform(0.3, 1.5, size=(n, dim))
    return ref.quadratic_grad(centers, curvature), np.zeros(dim)


def _engine(mode: str, grad, x0: np.ndarray, n_updates: int, deltas=tuple(DELTAS)):
    """(slot, UAVs landing, model after the update) of the engine's first updates."""
    plan = RoutePlan(mode, tuple(map(tuple, TOURS)), (0.0,) * len(TOURS),
                     tuple(d * SLOT_S for d in deltas), (1.0,) * len(TOURS), 0.0)
    runtime = ExpressRuntime(ExpressConfig(mode=mode, step_time_s=SLOT_S), plan,
                             {'w': np.array(x0, np.float64)})
    n = sum(map(len, TOURS))
    strategy = FedExSync(n) if mode == 'sync' else FedExAsync(n)

    def train(base, clients, steps, seeds):   # plain GD with exact gradients
        deltas = []
        for i, s in zip(clients, steps, strict=True):
            x = base['w'].copy()
            for _ in range(s):
                x = x - ETA * grad(i, x)
            deltas.append({'w': x - base['w']})
        return deltas, [0.0] * len(clients)

    weights, out = {'w': np.array(x0, np.float64)}, []
    for _ in range(n_updates):
        step = runtime.advance(weights, train, strategy)
        weights = step.weights
        out.append((step.time_s / SLOT_S, sorted(step.uavs), weights['w'].copy()))
    return out


def _assert_same(reference, engine):
    assert len(reference) == len(engine)
    for r, (slot, uavs, x) in zip(reference, engine, strict=True):
        assert (slot, uavs) == (r.slot, sorted(r.uavs))
        np.testing.assert_allclose(x, r.x, rtol=1e-12, atol=1e-12)


def test_sync_matches_the_reference_with_unequal_tours():
    grad, x0 = _problem()
    reference = ref.run_sync(TOURS, OFFSETS, DELTAS, grad, x0, ETA, rounds=12)
    # Round Delta = 7: no change until 2 Delta (the first tour only delivers models).
    assert [u.slot for u in reference[:3]] == [7, 14, 21]
    np.testing.assert_array_equal(reference[0].x, x0)
    assert not np.allclose(reference[1].x, x0)
    _assert_same(reference, _engine('sync', grad, x0, len(reference)))


def test_async_matches_the_reference_with_unequal_tours_and_shared_landing_slots():
    grad, x0 = _problem()
    reference = ref.run_async(TOURS, OFFSETS, DELTAS, grad, x0, ETA, slots=70)
    groups = [(u.slot, sorted(u.uavs)) for u in reference]
    assert groups[:6] == [(3, [0]), (5, [1, 3]), (6, [0]), (7, [2]), (9, [0]), (10, [1, 3])]
    assert (15, [0, 1, 3]) in groups and (35, [1, 2, 3]) in groups
    # A UAV's first landing is an empty update (u_k = 0): x0 until slot 6 = 2 Delta_0, and
    # UAV 2's first landing (slot 7) leaves slot 6's model as it is.
    np.testing.assert_array_equal(reference[1].x, x0)
    assert not np.allclose(reference[2].x, x0)
    np.testing.assert_array_equal(reference[3].x, reference[2].x)
    _assert_same(reference, _engine('async', grad, x0, len(reference)))


def test_reference_visit_offsets_do_not_change_the_global_model():
    # Digest Sec. 1.6, the aligned view: only the revisit interval matters. This is why the
    # engine, which has no visit offsets, can match the reference.
    grad, x0 = _problem()
    other = [[d - 1] * len(t) for t, d in zip(TOURS, DELTAS)]
    for run, kw in ((ref.run_sync, {'rounds': 6}), (ref.run_async, {'slots': 40})):
        a = run(TOURS, OFFSETS, DELTAS, grad, x0, ETA, **kw)
        b = run(TOURS, other, DELTAS, grad, x0, ETA, **kw)
        for ua, ub in zip(a, b, strict=True):
            np.testing.assert_allclose(ua.x, ub.x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('delta', [4, 9])
def test_reference_async_with_equal_tours_is_sync(delta):
    grad, x0 = _problem()
    deltas = [delta] * len(TOURS)
    offsets = [[1 + j % (delta - 1) for j in range(len(t))] for t in TOURS]
    sync = ref.run_sync(TOURS, offsets, deltas, grad, x0, ETA, rounds=8)
    asyn = ref.run_async(TOURS, offsets, deltas, grad, x0, ETA, slots=8 * delta)
    assert [u.slot for u in sync] == [u.slot for u in asyn]
    for us, ua in zip(sync, asyn, strict=True):
        np.testing.assert_allclose(us.x, ua.x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('deltas', [[4, 6, 6, 9], [9, 9, 9, 9]])
@pytest.mark.parametrize('mode', ['sync', 'async'])
def test_engine_matches_the_reference_on_the_other_tour_sets_docs_cite(mode, deltas):
    # docs/benchmarks/fedex.md (session 7) cites engine = reference on these too
    grad, x0 = _problem()
    offsets = [[1 + j % (d - 1) for j in range(len(t))] for t, d in zip(TOURS, deltas)]
    reference = (ref.run_sync(TOURS, offsets, deltas, grad, x0, ETA, rounds=10)
                 if mode == 'sync' else ref.run_async(TOURS, offsets, deltas, grad, x0, ETA,
                                                      slots=60))
    _assert_same(reference, _engine(mode, grad, x0, len(reference), deltas))
