"""`fl-uav plan CONFIG --out DIR`: plots and figures for trajectories and routes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_uav.cli import main

REPO = Path(__file__).resolve().parents[3]
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'
SMALL_WORLD = ['world.size_m=400.0', 'world.resolution_m=2.0', 'world.num_regions=10',
               'world.region_radius_min_m=30.0', 'world.region_radius_max_m=80.0']
SMALL_TRAJECTORY = ['trajectory.num_rounds=6', 'trajectory.start_east_m=200.0',
                    'trajectory.start_north_m=200.0', 'trajectory.max_speed_m_s=4.0',
                    'trajectory.budget_m=400.0', 'trajectory.max_iterations=2',
                    'trajectory.time_limit_s=2.0']
SMALL_ROUTES = ['routes.num_clients=8', 'routes.num_uavs=2', 'routes.area_east_m=800.0',
                'routes.area_north_m=800.0', 'routes.depot_east_m=400.0',
                'routes.depot_north_m=400.0', 'routes.n_sweeps=5', 'routes.n_chains=2']


def _run(config: str, out: Path, overrides: list[str]) -> int:
    sets = [arg for item in overrides for arg in ('--set', item)]
    return main(['plan', str(REPO / 'config' / 'plans' / config), '--out', str(out), *sets])


def _is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5000


def test_trajectory_plan_writes_plots_and_the_objective_of_each_method(tmp_path, capsys):
    # Arrange
    out = tmp_path / 'traj'
    # Act
    code = _run('trajectory_world.yaml', out, SMALL_WORLD + SMALL_TRAJECTORY)
    # Assert
    assert code == 0
    assert _is_png(out / 'trajectory.png') and _is_png(out / 'trajectory_balance.png')
    figures = json.loads((out / 'trajectory.json').read_text())
    assert set(figures['methods']) == {'2ceoafl', 'lawnmower', 'random'}
    for method in figures['methods'].values():
        assert len(method['waypoints_enu_m']) == 6
        assert len(method['expected_class_samples']) == figures['num_classes'] == 7
        assert {'objective', 'entropy_norm', 'min_over_max', 'classes_visited',
                'path_m'} <= set(method)
    # The SCA starts from the same seeded random walk, so it never scores below it.
    assert (figures['methods']['2ceoafl']['objective']
            >= figures['methods']['random']['objective'] - 1e-9)
    assert figures['methods']['2ceoafl']['path_m'] <= 400.0 + 1e-6
    assert str(out / 'trajectory.json') in capsys.readouterr().out


def test_routes_plan_writes_the_tours_their_times_energies_and_the_objective(tmp_path):
    # Arrange
    out = tmp_path / 'routes'
    # Act
    code = _run('routes_fedex.yaml', out, SMALL_ROUTES + ['routes.objective=async'])
    # Assert
    assert code == 0 and _is_png(out / 'routes.png')
    figures = json.loads((out / 'routes.json').read_text())
    assert figures['objective'] == 'async' and figures['cost_unit'] == 's^2'
    uavs = figures['uavs']
    assert len(uavs) == 2
    assert sorted(c for u in uavs for c in u['clients']) == list(range(8))
    assert all(u['within_budget'] and u['energy_j'] <= 15000.0 for u in uavs)
    # eq. (27): sum_k R_k Delta_k^2
    expected = sum(len(u['clients']) * u['round_trip_s'] ** 2 for u in uavs)
    assert figures['cost'] == pytest.approx(expected)
    assert [figures['assignment'][c] for c in uavs[1]['clients']] == [1] * len(uavs[1]['clients'])


def test_routes_plan_places_clients_and_plans_as_the_express_runtime_does(tmp_path):
    # Arrange: the same FedEx setting (Sec. VII-A blocks, seed 3) in both front ends
    from fl_uav.planning.express import ExpressConfig, place_clients, plan_routes
    express = ExpressConfig(num_uavs=2, area_east_m=800.0, area_north_m=800.0,
                            placement_seed=3, gibbs_sweeps=5, gibbs_chains=2, mode='sync')
    clients, _ = place_clients(express, 8)
    _, expected = plan_routes(express, clients, seed=3)
    out = tmp_path / 'routes'
    # Act
    code = _run('routes_fedex.yaml', out, SMALL_ROUTES + ['seed=3', 'routes.objective=sync'])
    # Assert: the same client positions, tours and cost
    figures = json.loads((out / 'routes.json').read_text())
    assert code == 0
    assert figures['clients_enu_m'] == clients.tolist()
    assert [tuple(u['clients']) for u in figures['uavs']] == list(expected.tours)
    assert figures['cost'] == pytest.approx(expected.cost)


@pytest.mark.parametrize('config, overrides, words', [
    ('trajectory_world.yaml', ['trajectory.num_round=5'], "unknown config key "
                                                           "'trajectory.num_round'"),
    ('routes_fedex.yaml', ['routes.objective=fastest'], "'routes': objective 'fastest'"),
    ('routes_fedex.yaml', ['routes.num_uavs=two'], "'routes.num_uavs': expected an integer"),
    ('routes_fedex.yaml', ['kind=tour'], "kind 'tour' unknown"),
])
def test_a_bad_config_stops_with_the_key_named(tmp_path, capsys, config, overrides, words):
    # Arrange / Act
    code = _run(config, tmp_path / 'out', overrides)
    # Assert
    assert code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('config, overrides, cause', [
    ('routes_fedex.yaml', SMALL_ROUTES + ['routes.energy_budget_j=200.0'], 'budget_below_tour'),
    ('trajectory_world.yaml', SMALL_WORLD + SMALL_TRAJECTORY + ['trajectory.margin_m=170.0'],
     'fence_smaller_than_step'),
])
def test_an_infeasible_request_exits_with_its_cause_and_writes_nothing(tmp_path, capsys,
                                                                      config, overrides, cause):
    # Arrange / Act
    code = _run(config, tmp_path / 'out', overrides)
    # Assert
    err = capsys.readouterr().err
    assert code == 1 and f'infeasible plan: {cause}: ' in err and err.count(cause) == 1
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('config, overrides, words', [
    ('routes_fedex.yaml', ['routes.speed_m_s=0.0'], 'speed_m_s must be finite and > 0'),
    ('routes_fedex.yaml', ['routes.speed_m_s=.nan'], "'routes.speed_m_s': NaN is not a value"),
    ('routes_fedex.yaml', ['routes.energy_budget_j=-5.0'], 'energy_budget_j must be finite'),
    ('routes_fedex.yaml', ['routes.energy_budget_j=.inf'], 'energy_budget_j must be finite'),
    ('routes_fedex.yaml', ['routes.hover_time_per_client_s=-1.0'],
     'hover_time_per_client_s must be finite and >= 0'),
    ('routes_fedex.yaml', ['routes.depot_east_m=.nan'], "'routes.depot_east_m': NaN is not a"),
    ('routes_fedex.yaml', ['routes.area_east_m=.inf'], 'area_east_m must be finite'),
    ('trajectory_world.yaml', ['trajectory.zeta=2.0'], 'zeta must be in (0, 1]'),
    ('trajectory_world.yaml', ['trajectory.zeta=.nan'], "'trajectory.zeta': NaN is not a"),
    ('trajectory_world.yaml', ['trajectory.altitude_m=.nan'], "'trajectory.altitude_m': NaN"),
    ('trajectory_world.yaml', ['trajectory.min_altitude_m=.nan'],
     "'trajectory.min_altitude_m': NaN is not a value"),
    ('trajectory_world.yaml', ['trajectory.start_east_m=.inf'], 'start_east_m must be finite'),
    ('trajectory_world.yaml', ['trajectory.margin_m=.inf'], 'margin_m must be finite'),
])
def test_a_bad_number_stops_as_a_config_error_naming_the_key(tmp_path, capsys, config,
                                                              overrides, words):
    # Arrange / Act
    code = _run(config, tmp_path / 'out', overrides)
    # Assert: exit 2 with the key named, no traceback, nothing written
    err = capsys.readouterr().err
    assert code == 2 and words in err and 'config error' in err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('config', ['routes_fedex.yaml', 'trajectory_world.yaml'])
def test_an_out_path_that_cannot_be_a_directory_stops_before_planning(tmp_path, capsys,
                                                                       config):
    # Arrange: --out is a file, or under one
    afile = tmp_path / 'afile'
    afile.write_text('')
    for out in (afile, afile / 'sub'):
        # Act
        code = _run(config, out, [])
        # Assert: a config error naming --out, no traceback, the file untouched
        err = capsys.readouterr().err
        assert code == 2 and '--out' in err and 'Traceback' not in err
    assert afile.read_text() == ''
