"""Infeasible plan requests raise PlanInfeasibleError naming the cause, never a fallback plan."""

from __future__ import annotations

import pytest

from fl_uav.planning.coverage import (
    INFEASIBLE_CAUSES,
    CoverageConfig,
    PlanError,
    PlanInfeasibleError,
    coverage_plan,
)
from fl_uav.planning.routing import GibbsConfig, RoutingProblem, brute_force_plan, gibbs_plan
from fl_uav.planning.trajectory import (
    GaussianRegion,
    TrajectoryConstraints,
    class_priorities,
    plan_trajectory,
)

FENCE = (0.0, 0.0, 300.0, 300.0)
START = (150.0, 150.0)
REGIONS = [GaussianRegion(0, (60.0, 60.0), ((400.0, 0.0), (0.0, 400.0)), 0.5),
           GaussianRegion(1, (240.0, 240.0), ((400.0, 0.0), (0.0, 400.0)), 0.5)]


def _trajectory(regions=REGIONS, **kwargs) -> None:
    constraints = TrajectoryConstraints(**{'fence': FENCE, 'max_speed_m_s': 5.0,
                                           'round_time_s': 20.0, 'budget_m': 900.0, **kwargs})
    plan_trajectory(regions, class_priorities(4, 2, 0), START, constraints)


@pytest.mark.parametrize('request_kwargs, cause, words', [
    ({'fence': (0.0, 0.0, 80.0, 300.0)}, 'fence_smaller_than_step',
     'geofence 80.0 x 300.0 m is smaller than one step (100.0 m'),
    ({'budget_m': 60.0}, 'budget_below_step', 'battery budget 60.0 m is below one step'),
    ({'regions': []}, 'no_class_regions', 'no class regions'),
    ({'regions': [GaussianRegion(0, (900.0, 900.0), ((400.0, 0.0), (0.0, 400.0)), 1.0)]},
     'no_class_regions', 'none of the 1 class regions reaches into the geofence'),
    ({'altitude_m': 150.0}, 'altitude_outside_band', 'altitude 150.0 m outside the band'),
])
def test_infeasible_trajectory_requests_name_their_cause(request_kwargs, cause, words):
    # Arrange / Act
    with pytest.raises(PlanInfeasibleError) as caught:
        _trajectory(**request_kwargs)
    # Assert
    assert caught.value.cause == cause and words in str(caught.value)
    assert isinstance(caught.value, PlanError) and isinstance(caught.value, ValueError)


def test_a_malformed_trajectory_request_is_a_plain_plan_error():
    # Arrange / Act / Assert: bad arguments are not infeasibility
    with pytest.raises(PlanError) as caught:
        _trajectory(zeta=2.0)
    assert not isinstance(caught.value, PlanInfeasibleError)


FAR_REGION = [GaussianRegion(0, (900.0, 900.0), ((400.0, 0.0), (0.0, 400.0)), 1.0)]


@pytest.mark.parametrize('request_kwargs, words', [
    ({'zeta': -0.5}, 'zeta must be in (0, 1]'),
    ({'zeta': 0.0, 'regions': FAR_REGION}, 'zeta must be in (0, 1]'),
    ({'eps_tol': 0.0, 'regions': FAR_REGION}, 'eps_tol must be > 0'),
])
def test_a_bad_zeta_or_eps_tol_is_malformed_even_when_no_region_reaches_the_fence(
        request_kwargs, words):
    # Arrange / Act: ζ and ε are checked before the regions' reach (2CEOAFL eq. (3)) uses ζ
    with pytest.raises(PlanError) as caught:
        _trajectory(**request_kwargs)
    # Assert
    assert not isinstance(caught.value, PlanInfeasibleError)
    assert words in str(caught.value)


def test_a_budget_below_one_tour_names_its_cause():
    # Arrange: the nearest client ~100 m away needs 321.6 J hovering + 600 J flying > 800 J.
    clients = [(100.0, 0.0), (500.0, 0.0)]
    # Act
    with pytest.raises(PlanInfeasibleError) as caught:
        RoutingProblem((0.0, 0.0), clients, 2, energy_budget_j=800.0)
    # Assert
    assert caught.value.cause == 'budget_below_tour'
    assert 'energy budget 800 J is below one round trip to the nearest client' in str(
        caught.value)


def test_a_client_beyond_one_battery_names_its_cause():
    # Arrange / Act
    with pytest.raises(PlanInfeasibleError) as caught:
        RoutingProblem((0.0, 0.0), [(100.0, 0.0), (3000.0, 0.0)], 2, energy_budget_j=15e3)
    # Assert
    assert caught.value.cause == 'client_out_of_reach' and 'client 1' in str(caught.value)


@pytest.mark.parametrize('solve', [
    lambda p: brute_force_plan(p, 'sync'),
    lambda p: gibbs_plan(p, 'sync', config=GibbsConfig(n_sweeps=5, n_chains=2)),
])
def test_too_few_uavs_for_the_budget_raise_instead_of_returning_an_over_budget_plan(solve):
    # Arrange: every client fits alone, all six on one UAV do not.
    clients = [(100.0 + 20.0 * i, 0.0) for i in range(6)]   # solo <= 1522 J, all: 3130 J
    problem = RoutingProblem((0.0, 0.0), clients, 1, energy_budget_j=2500.0)
    # Act
    with pytest.raises(PlanInfeasibleError) as caught:
        solve(problem)
    # Assert
    assert caught.value.cause == 'no_feasible_plan' and 'within 2500 J' in str(caught.value)


def test_a_sector_narrower_than_a_leg_names_its_cause():
    # Arrange
    config = CoverageConfig(box_m=100, leg_spacing_m=50)
    # Act
    with pytest.raises(PlanInfeasibleError) as caught:
        coverage_plan(0, 100, 1, 200.0, config, seed=0)
    # Assert
    assert caught.value.cause == 'fence_smaller_than_step' and 'narrower' in str(caught.value)


def test_causes_are_a_closed_set():
    # Arrange / Act / Assert
    assert len(set(INFEASIBLE_CAUSES)) == len(INFEASIBLE_CAUSES)
    with pytest.raises(ValueError, match='unknown infeasibility cause'):
        PlanInfeasibleError('because', 'no')
