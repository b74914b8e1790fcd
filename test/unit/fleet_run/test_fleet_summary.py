"""fl-uav sim summary: per-drone buffer balance from the planner record, the plug-ins used."""

import json
import math
import os
import signal

import pytest

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.run_log import STATION_REPORT_FILE
from fl_uav.fleet_run.run import (
    _idle_warnings,
    _interrupts_ignored,
    buffer_balance,
    build_summary,
)


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


def test_a_signal_during_the_fleets_clean_up_is_ignored_and_the_handler_restored():
    # Arrange: SIGTERM raises, as under `fl-uav sim` (cli._terminate_as_interrupt)
    def interrupt(signum, frame):
        raise KeyboardInterrupt('SIGTERM')

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        # Act: a SIGTERM while the nodes are being stopped
        with _interrupts_ignored():
            os.kill(os.getpid(), signal.SIGTERM)
            cleaned_up = True
        restored = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    # Assert: the clean-up went on; afterwards SIGTERM raises again
    assert cleaned_up and restored is interrupt


def test_drones_whose_flight_failed_are_warned_about_in_the_summary(tmp_path):
    # Arrange: the station's progress of a 2-round run; drone 1's flight failed twice
    config = build_config(FleetConfig, {'num_drones': 2})
    rows = [{'round_index': r, 'accuracy': 0.1, 'loss': 2.3, 'participants': [0],
             'late_or_missing': [1], 'bytes_up': {}, 'bytes_down_per_drone': 0, 'rejected': {},
             'opened_s': 0.0, 'closed_s': 1.0, 'samples_collected': {},
             'flight_errors': {'1': f'plan rejected: outside_fence ({r})'}} for r in (1, 2)]
    (tmp_path / 'progress.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    _armed(tmp_path, 0, 1)
    # Act
    summary = build_summary(tmp_path, config, 'finished', 1.0, {}, 5)
    # Assert
    assert summary['warnings'] == [
        'drone 1: flight failed in 2 of 2 rounds (last: plan rejected: outside_fence (2))',
        'drone 0 collected no camera samples (no frames on its camera topic, or none it '
        'could label)',
        'drone 1 collected no camera samples (no frames on its camera topic, or none it '
        'could label)']
    assert summary['drones']['1']['flight_failures'] == 2


def _armed(run_dir, *vehicles: int) -> None:
    """The simulator's event log: each of ``vehicles`` armed."""
    (run_dir / 'autopilot_log.json').write_text(json.dumps(
        {'events': [{'vehicle': v, 'event': 'armed'} for v in vehicles]}))


def test_a_drone_that_never_armed_or_collected_nothing_is_named(tmp_path):
    # Arrange: 3 drones; drone 1 never armed (another client held its autopilot link),
    # drone 2 armed but collected nothing, drone 0 collected 40 samples
    config = build_config(FleetConfig, {'num_drones': 3})
    row = {'round_index': 1, 'accuracy': 0.5, 'loss': 1.0, 'participants': [0],
           'late_or_missing': [], 'bytes_up': {}, 'bytes_down_per_drone': 0, 'rejected': {},
           'opened_s': 0.0, 'closed_s': 60.0, 'samples_collected': {'0': 40, '2': 0},
           'waypoints_reached': {'0': 3, '2': 0}}
    (tmp_path / 'ground_station.json').write_text(json.dumps({'rounds': [row]}))
    _armed(tmp_path, 0, 2)
    # Act
    summary = build_summary(tmp_path, config, 'finished', 60.0, {}, 5)
    # Assert: each named once
    assert summary['warnings'] == [
        'drone 1 never armed: no flight, no samples (its node log says why: its autopilot '
        'link, or arming refused)',
        'drone 2 collected no camera samples (no frames on its camera topic, or none it could '
        'label)']


def test_express_drones_carry_no_camera_samples_and_are_not_warned_for_it():
    # Arrange: FedEx transporters (the ground clients train, not the UAVs' cameras)
    drones = {'0': {'armed': True, 'samples_collected': 0},
              '1': {'armed': False, 'samples_collected': 0}}
    # Act / Assert
    assert [w.split(':')[0] for w in _idle_warnings(drones, 'express')] == [
        'drone 1 never armed']


def test_drones_whose_updates_missed_rounds_and_late_updates_are_warned_about(tmp_path):
    # Arrange: 3 rounds; drone 0 missed round 2, drone 1 rounds 2 and 3 (late: 2 rejected)
    config = build_config(FleetConfig, {'num_drones': 2})
    late = {1: [], 2: [0, 1], 3: [1]}
    rows = [{'round_index': r, 'accuracy': 0.5, 'loss': 1.0,
             'participants': [d for d in (0, 1) if d not in late[r]], 'late_or_missing': late[r],
             'bytes_up': {}, 'bytes_down_per_drone': 0, 'rejected': {}, 'opened_s': 0.0,
             'closed_s': 60.0, 'samples_collected': {}} for r in (1, 2, 3)]
    (tmp_path / 'progress.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    (tmp_path / 'ground_station.json').write_text(json.dumps(
        {'rounds': rows, 'rejected_total': {'wrong_round': 2}}))
    # Act
    summary = build_summary(tmp_path, config, 'finished', 180.0, {}, 5)
    # Assert
    assert summary['warnings'][:2] == ['drone 0: no update in time in 1 of 3 rounds (2)',
                                       'drone 1: no update in time in 2 of 3 rounds (2, 3)']
    assert summary['warnings'][2].startswith('2 update(s) came after their round had closed')
    assert 'flight.train_reserve_s (20 s)' in summary['warnings'][2]
    assert 'rounds.deadline_s (60 s)' in summary['warnings'][2]


def test_a_run_the_station_ended_as_failed_is_failed_in_the_summary_with_its_error(tmp_path):
    # Arrange: the nodes all exited, the station's report says it ended the run as failed
    config = build_config(FleetConfig, {'num_drones': 1})
    error = 'the run stopped as failed after round 3: the aggregation failed in 3 rounds'
    (tmp_path / STATION_REPORT_FILE).write_text(json.dumps(
        {'status': 'failed', 'error': error, 'rounds': [], 'initial_accuracy': 0.1}))
    # Act
    summary = build_summary(tmp_path, config, 'finished', 1.0, {}, 5)
    # Assert: `fl-uav sim` exits 1 on it (cli._sim) and says why
    assert summary['status'] == 'failed' and summary['error'] == error


def test_a_finished_run_has_no_error_in_the_summary(tmp_path):
    # Arrange
    config = build_config(FleetConfig, {'num_drones': 1})
    (tmp_path / STATION_REPORT_FILE).write_text(json.dumps({'status': 'finished', 'rounds': []}))
    # Act
    summary = build_summary(tmp_path, config, 'finished', 1.0, {}, 5)
    # Assert
    assert summary['status'] == 'finished' and 'error' not in summary


def test_a_station_death_is_told_with_its_resume_and_the_rounds_after():
    from fl_uav.fleet_run.run import _death_warnings
    rounds = [{'round_index': r, 'participants': [0, 1]} for r in range(1, 7)]
    lines = _death_warnings([
        {'node': 'ground_station', 'exit_code': -9, 'died_s': 33.3, 'round': 3,
         'restarted_s': 35.0, 'resumed': True},
        {'node': 'ground_station', 'exit_code': 1, 'died_s': 5.0, 'round': 7,
         'restarted_s': 6.0}], rounds)
    assert lines == ['ground_station died (exit code -9) at 33 s in round 3; restarted at '
                     '35 s, resumed from its checkpoint, rounds 3..6 closed after',
                     'ground_station died (exit code 1) at 5 s in round 7; restarted at 6 s, '
                     'a new run (no checkpoint), no round closed after']
