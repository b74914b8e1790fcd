"""A closed round's numbers for plots (fl_uav.fleet.round_metrics)."""

from __future__ import annotations

import math

from fl_uav.fleet.ground_station import RoundRecord
from fl_uav.fleet.round_metrics import ROUND_METRIC_KEYS, metrics_text, round_metrics


def _record(accuracy: float = 0.27216, loss: float = 3.42981) -> RoundRecord:
    return RoundRecord(
        round_index=3, accuracy=accuracy, loss=loss, participants=[0, 2], late_or_missing=[1],
        bytes_down_per_drone=624_361, bytes_up={0: 600_000, 2: 647_154}, train_loss={},
        samples={}, samples_collected={}, waypoints_reached={}, waypoints_planned={},
        rejected={'bad_magic': 2, 'stale': 1}, opened_s=0.0, closed_s=20.0,
        aggregate_seconds=0.5, empty=False)


def test_every_number_of_a_round_is_a_plottable_float():
    # Arrange
    record = _record()
    # Act
    values = round_metrics(record)
    # Assert
    assert tuple(values) == ROUND_METRIC_KEYS
    assert all(type(v) is float for v in values.values())
    assert values == {'round': 3.0, 'accuracy': 0.27216, 'loss': 3.42981, 'participants': 2.0,
                      'late': 1.0, 'rejected': 3.0, 'bytes_up': 1_247_154.0,
                      'bytes_down_per_drone': 624_361.0}


def test_the_text_shows_counts_whole_and_the_rest_rounded():
    # Arrange
    values = round_metrics(_record(accuracy=math.nan))
    # Act
    text = metrics_text(values)
    # Assert
    assert text['round'] == '3' and text['bytes_up'] == '1247154'
    assert text['loss'] == '3.4298' and text['accuracy'] == 'nan'
