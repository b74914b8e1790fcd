"""PNG plots of ``fl-uav plan``: trajectories over class regions, and FedEx tours.

matplotlib's Figure API with the Agg canvas (no pyplot: no GUI machinery, a faster import).
Axes are local ENU metres, east right and north up, equal scale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fl_uav.planning.coverage import Box, PlanWaypoint
from fl_uav.planning.display import (
    class_colour,
    region_ellipse_enu,
    tour_polyline_enu,
    uav_colour,
)
from fl_uav.planning.plan_request import RoutesOutcome, TrajectoryOutcome

TRAJECTORY_PNG = 'trajectory.png'
BALANCE_PNG = 'trajectory_balance.png'
ROUTES_PNG = 'routes.png'
# Line styles of the compared trajectories.
_METHOD_STYLE = {'2ceoafl': dict(color='#d62728', linewidth=2.0, marker='o', markersize=3,
                                 zorder=5),
                 'lawnmower': dict(color='0.25', linewidth=1.2, linestyle='--', zorder=4),
                 'random': dict(color='#9467bd', linewidth=1.0, linestyle=':', marker='.',
                                markersize=3, zorder=3)}


def _figure(width_in: float, height_in: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _fence_outline(ax, fence: Box) -> None:
    east_min, north_min, east_max, north_max = fence
    ax.plot([east_min, east_max, east_max, east_min, east_min],
            [north_min, north_min, north_max, north_max, north_min], color='k',
            linewidth=0.8, label='geofence')


def _path_enu(start_enu_m: tuple[float, float], waypoints: list[PlanWaypoint]) -> np.ndarray:
    return np.array([start_enu_m] + [(w.east_m, w.north_m) for w in waypoints])


def plot_trajectory(outcome: TrajectoryOutcome, out_dir: Path) -> list[Path]:
    """trajectory.png (class regions as 1-sigma ellipses, the 2CEOAFL path, the lawnmower and
    random baselines, the fence, the start) and trajectory_balance.png (Σ_t I ψ per class,
    2CEOAFL eq. (4)'s inner sums, per method)."""
    figures = outcome.figures['methods']
    names = outcome.world.class_names
    fig = _figure(7.5, 7.0)
    ax = fig.add_subplot(1, 1, 1)
    shown: set[int] = set()
    for region in outcome.regions:
        ring = region_ellipse_enu(region, n_std=1.0)
        colour = class_colour(region.class_id)
        label = names[region.class_id] if region.class_id not in shown else None
        shown.add(region.class_id)
        ax.fill(ring[:, 0], ring[:, 1], color=colour, alpha=0.35, linewidth=0, label=label)
        ax.plot(ring[:, 0], ring[:, 1], color=colour, linewidth=0.8)
    _fence_outline(ax, outcome.fence)
    for name, waypoints in (('random', outcome.baselines['random']),
                            ('lawnmower', outcome.baselines['lawnmower']),
                            ('2ceoafl', outcome.plan.waypoints)):
        path = _path_enu(outcome.start_enu_m, waypoints)
        ax.plot(path[:, 0], path[:, 1], label=f'{name} (eq. (4) = '
                f'{figures[name]["objective"]:.2f})', **_METHOD_STYLE[name])
    ax.plot(*outcome.start_enu_m, marker='*', color='k', markersize=12, linestyle='none',
            label='start', zorder=6)
    ax.set_aspect('equal')
    ax.set_xlabel('east (m)')
    ax.set_ylabel('north (m)')
    ax.set_title(f'2CEOAFL trajectory, T = {outcome.figures["num_rounds"]}, '
                 f'{len(outcome.regions)} class regions')
    ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    paths = [out_dir / TRAJECTORY_PNG, out_dir / BALANCE_PNG]
    fig.savefig(paths[0], bbox_inches='tight')

    fig = _figure(7.5, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    classes = np.arange(outcome.figures['num_classes'])
    width = 0.27
    for offset, name in zip((-width, 0.0, width), ('2ceoafl', 'lawnmower', 'random')):
        ax.bar(classes + offset, figures[name]['expected_class_samples'], width,
               color=_METHOD_STYLE[name]['color'],
               label=f'{name} (entropy {figures[name]["entropy_norm"]:.2f})')
    ax.set_xticks(classes)
    ax.set_xticklabels([names[c] for c in classes], rotation=30, fontsize=8)
    ax.set_ylabel('Σ_t I ψ (priority-weighted visits)')
    ax.set_title('per-class balance (2CEOAFL eq. (4) inner sums)')
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths[1], bbox_inches='tight')
    return paths


def plot_routes(outcome: RoutesOutcome, out_dir: Path) -> list[Path]:
    """routes.png: clients coloured by their UAV, each UAV's closed tour in its colour, the
    station; the legend gives each tour's round trip (FedEx eq. (9)) and energy (eqs. (4)-(8))."""
    problem, plan = outcome.problem, outcome.plan
    fig = _figure(8.0, 7.0)
    ax = fig.add_subplot(1, 1, 1)
    assignment = np.array(plan.assignment)
    for k, tour in enumerate(plan.tours):
        colour = uav_colour(k)
        line = tour_polyline_enu(problem.depot_m, problem.clients_m, tour)
        ax.plot(line[:, 0], line[:, 1], color=colour, linewidth=1.5,
                label=f'UAV {k}: {len(tour)} clients, {plan.round_trip_s[k]:.0f} s, '
                      f'{plan.energy_j[k] / 1e3:.2f} kJ')
        served = problem.clients_m[assignment == k]
        ax.scatter(served[:, 0], served[:, 1], color=colour, s=28, edgecolors='k',
                   linewidths=0.5, zorder=4)
    ax.plot(*problem.depot_m, marker='*', color='k', markersize=16, linestyle='none',
            label='station', zorder=5)
    ax.set_aspect('equal')
    ax.set_xlabel('east (m)')
    ax.set_ylabel('north (m)')
    unit = outcome.figures['cost_unit']
    ax.set_title(f'FedEx CARP, {plan.objective} ({outcome.figures["objective_equation"]}) = '
                 f'{plan.cost:.1f} {unit}; budget {problem.energy_budget_j / 1e3:.1f} kJ')
    ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    path = out_dir / ROUTES_PNG
    fig.savefig(path, bbox_inches='tight')
    return [path]
