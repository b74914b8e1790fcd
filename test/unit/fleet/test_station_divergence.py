"""The ground station says when its global model diverged with a finite loss (fl-uav sim)."""

from __future__ import annotations

import json

import numpy as np

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.run_log import STATION_REPORT_FILE
from fl_uav.fleet_run.run import build_summary

# A global model scaled far off its initialisation: what learning.lr=10 left behind
# (`fl-uav sim --set learning.lr=10`: test loss 5.6e7, then 1.0e8, at chance).
WEIGHT_BLOW_UP = 30.0


def _station() -> GroundStation:
    config = build_config(FleetConfig, {'num_drones': 1, 'learning.model': 'tiny_cnn'})
    rng = np.random.default_rng(0)
    return GroundStation(config, rng.normal(0, 1, (40, 3, 32, 32)).astype(np.float32),
                         rng.integers(0, 7, 40))


def test_a_round_whose_test_loss_exploded_carries_a_warning_into_the_fleet_summary(tmp_path):
    # Arrange
    station = _station()
    station.weights = {n: (w * WEIGHT_BLOW_UP).astype(np.float32)
                       for n, w in station.weights.items()}
    station.open_round(0.0)
    # Act
    record = station.close_round(now_s=1.0)
    (tmp_path / STATION_REPORT_FILE).write_text(json.dumps({'rounds': [record.to_dict()]}))
    summary = build_summary(tmp_path, station.config, 'finished', 1.0, {}, 1)
    # Assert: finite, above 10 ln 7, said once in the round record and in summary.json (then
    # the summary's own line: the drone sent no update)
    assert np.isfinite(record.loss) and record.loss > 10 * np.log(7)
    assert len(record.warnings) == 1 and 'the global model has diverged' in record.warnings[0]
    assert [w for w in summary['warnings'] if 'diverged' in w] == record.warnings
    assert summary['warnings'][0] == record.warnings[0]


def test_a_sane_round_carries_no_warning():
    # Arrange
    station = _station()
    station.open_round(0.0)
    # Act
    record = station.close_round(now_s=1.0)
    # Assert
    assert record.warnings == [] and record.to_dict()['warnings'] == []
