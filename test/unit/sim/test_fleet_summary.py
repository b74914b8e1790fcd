"""fl-uav sim summary: per-drone buffer balance from the planner record, the plug-ins used."""

import math

import pytest

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.sim.fleet_run import buffer_balance, build_summary


def test_buffer_balance_is_the_normalised_entropy_of_the_class_counts():
    # Arrange: two of four classes, alike
    counts = [5, 0, 5, 0]
    # Act
    balance = buffer_balance(counts)
    # Assert: entropy log 2 over the maximum log 4
    assert balance['buffer_class_counts'] == counts
    assert balance['buffer_entropy_norm'] == pytest.approx(math.log(2) / math.log(4), abs=1e-4)
    assert buffer_balance([3, 3, 3])['buffer_entropy_norm'] == pytest.approx(1.0)
    assert buffer_balance([7, 0, 0])['buffer_entropy_norm'] == pytest.approx(0.0)


def test_buffer_balance_without_a_record_is_none():
    assert buffer_balance(None) == {'buffer_class_counts': None, 'buffer_entropy_norm': None}
    assert buffer_balance([]) == {'buffer_class_counts': None, 'buffer_entropy_norm': None}


def test_the_fleet_summary_records_the_plug_in_specs_and_their_source(tmp_path):
    # Arrange: a run directory with nothing in it yet (no rounds)
    config = build_config(FleetConfig, {
        'num_drones': 1, 'aggregation.strategy': 'test.unit._plugins:RecordingFedAvg'})
    # Act
    summary = build_summary(tmp_path, config, 'failed', 1.0, {}, 5)
    # Assert
    assert summary['strategy'] == 'test.unit._plugins:RecordingFedAvg'
    assert summary['compression_method'] == 'none'
    source = summary['plugins']['aggregation.strategy']
    assert source['module_file'].endswith('_plugins.py') and len(source['module_sha256']) == 64
    assert list(summary['plugins']) == ['aggregation.strategy']
