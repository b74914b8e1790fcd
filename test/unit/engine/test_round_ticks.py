"""Accuracy-vs-round plots mark whole rounds only (no tick at round 1.5)."""

from __future__ import annotations

import numpy as np

from fl_uav.engine.results import accuracy_figure

FIVE_ROUNDS = [{'round': r, 'accuracy': 0.1 * r, 'sim_time_s': 90.0 * r,
                'uplink_bytes': 1_000_000} for r in range(1, 6)]


def _ticks_in_view(ax) -> np.ndarray:
    low, high = ax.get_xlim()
    ticks = np.asarray(ax.get_xticks())
    return ticks[(ticks >= low) & (ticks <= high)]


def test_the_engines_accuracy_vs_round_plot_has_integer_ticks():
    # Arrange / Act: quick_digits' 5 rounds (matplotlib's default puts ticks at 1.5, 2.5, ...)
    fig = accuracy_figure([('quick_digits', FIVE_ROUNDS)], 'round', 'round')
    # Assert
    ticks = _ticks_in_view(fig.axes[0])
    assert len(ticks) >= 2 and np.all(ticks == np.round(ticks))


def test_the_fleets_accuracy_plot_has_integer_ticks(tmp_path, monkeypatch):
    # Arrange: fl-uav sim's summary, round 0 = the initial model; keep the figure it closes
    import matplotlib.pyplot as plt

    from fl_uav.fleet_run.run import plot_accuracy
    closed = []
    monkeypatch.setattr(plt, 'close', closed.append)
    summary = {'num_drones': 2, 'initial_accuracy': 0.1,
               'rounds': [{'round': r, 'accuracy': 0.1 * r} for r in range(1, 4)]}
    # Act
    plot_accuracy(summary, tmp_path / 'accuracy.png')
    # Assert
    ticks = _ticks_in_view(closed[0].axes[0])
    assert (tmp_path / 'accuracy.png').is_file()
    assert len(ticks) >= 2 and np.all(ticks == np.round(ticks))
