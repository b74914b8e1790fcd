"""fl-uav plan's trajectory request: its random draws, one stream per purpose."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import fl_uav.planning.plan_request as plan_request
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.plan_request import PlanConfig, TrajectoryRequest


class _Stop(Exception):
    """Ends the request once the draws are seen (no MILP is solved)."""


def test_fit_samples_fit_priorities_and_trajectory_draw_from_four_streams(monkeypatch):
    # Arrange: a two-class stand-in world; each step records the seed or samples it gets
    world = SimpleNamespace(size_m=100.0, num_classes=2, class_at=lambda e, n: int(e > 50.0))
    config = PlanConfig(seed=3, trajectory=replace(TrajectoryRequest(), regions='fitted'))
    seen = {}

    def fit(positions, labels, num_classes, components, seed):
        seen['positions'], seen['fit'] = positions, seed
        return []

    def priorities(num_rounds, num_classes, seed):
        seen['priorities'] = seed
        return np.ones((num_rounds, num_classes))

    def plan(regions, psi, start, constraints, seed):
        seen['trajectory'] = seed
        return SimpleNamespace(waypoints=[PlanWaypoint(*start, 30.0)])

    def stop(*args, **kwargs):
        raise _Stop

    monkeypatch.setattr(plan_request, 'generate_world', lambda world_config: world)
    monkeypatch.setattr(plan_request, 'fit_class_regions', fit)
    monkeypatch.setattr(plan_request, 'class_priorities', priorities)
    monkeypatch.setattr(plan_request, 'plan_trajectory_detailed', plan)
    monkeypatch.setattr(plan_request, 'lawnmower_baseline', stop)
    # Act
    with pytest.raises(_Stop):
        plan_request.plan_trajectory_request(config)
    # Assert: the fit's draws are not the samples' draws; three seeds for three purposes
    fit_draws = np.random.default_rng(seen['fit']).uniform(0.0, 100.0, seen['positions'].shape)
    assert not np.array_equal(fit_draws, seen['positions'])
    assert len({seen['fit'], seen['priorities'], seen['trajectory']}) == 3
