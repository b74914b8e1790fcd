"""End to end: the ground station node is SIGKILLed twice in one run of 5 rounds, in round 2
while the drones fly and train, in round 4 while it aggregates; `fl-uav sim` restarts it each
time, it resumes from its checkpoint and the run finishes: rounds 1..5, only rounds 2 and 4
opened twice, the same run id, both drones in every round (fl_uav/fleet/station_checkpoint.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test.e2e._slow_strategy import SLOW_AGGREGATE_S, SLOW_ROUND
from test.e2e._slow_strategy import SPEC as SLOW_FEDAVG
from test.e2e.test_fleet_sim import REPO, _processes_mentioning, _sim_command

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]
_OVERRIDES = ['learning.model=tiny_cnn', 'rounds.eval_samples=300', 'coverage.box_m=80.0',
              'rounds.deadline_s=40.0', 'autopilot.time_factor=10.0']


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout_s: float) -> float:
    """Poll ``path`` until it holds ``text`` (bounded); the time.monotonic() it was seen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and text in path.read_text(errors='replace'):
            return time.monotonic()
        time.sleep(0.1)      # polling a node's log, bounded by the deadline
    raise AssertionError(f'{text!r} not in {path} after {timeout_s} s')


def _kill_station(out: Path) -> None:
    (pid,) = [p for p in _processes_mentioning(str(out))
              if '__node:=ground_station' in Path(f'/proc/{p}/cmdline').read_text()]
    os.kill(pid, signal.SIGKILL)


def test_a_station_killed_while_the_drones_train_and_while_it_aggregates_resumes_its_run(
        tmp_path):
    # Arrange: 2 drones, 5 rounds; round SLOW_ROUND's aggregation takes SLOW_AGGREGATE_S
    assert SLOW_ROUND == 4
    out = tmp_path / 'run'
    cmd = _sim_command(out, 2, 5, '--timeout', '380', '--respawn-delay', '2',
                       *_OVERRIDES, f'aggregation.strategy={SLOW_FEDAVG}')
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    station_log = out / 'logs' / 'ground_station.log'
    kills = {}
    try:
        # Act: SIGKILL the station while the drones fly round 2's missions, then train
        _wait_for(station_log, 'round 2 open', proc, 240.0)
        _wait_for(out / 'logs' / 'uav1_drone.log', 'round 2: flying', proc, 30.0)
        before_first = station_log.read_text()
        run_id = re.search(r'ground station: run ([0-9a-f]+)', before_first).group(1)
        _kill_station(out)
        kills['training'] = time.monotonic() - start
        _wait_for(station_log, 'resumed run', proc, 120.0)
        # Act: SIGKILL it again once round 4's two updates are in and it aggregates
        after_first = _wait_for(station_log, 'round 4 open', proc, 200.0)
        deadline = time.monotonic() + 60.0
        while (station_log.read_text().split('round 4 open')[-1].count('accepted') < 2
               and time.monotonic() < deadline):
            time.sleep(0.1)      # polling the station's log, bounded by the deadline
        time.sleep(SLOW_AGGREGATE_S / 4)
        before_second = station_log.read_text()
        _kill_station(out)
        kills['aggregating'] = time.monotonic() - start
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    end = time.monotonic()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    # Assert: the kills landed in round 2 (before it closed) and in round 4's aggregation
    assert 'round 2 closed' not in before_first and 'round 1 closed' in before_first
    assert 'round 4 closed' not in before_second and 'round 3 closed' in before_second
    assert before_second.split('round 4 open')[-1].count('accepted') == 2, before_second[-2000:]
    # Assert: the same run goes on each time; only rounds 2 and 4 are opened twice
    log = station_log.read_text()
    checkpoint = out / 'station_checkpoint.npz'
    assert f'resumed run {run_id} from {checkpoint} after round 1' in log
    assert f'resumed run {run_id} from {checkpoint} after round 3' in log
    assert [log.count(f'round {r} open') for r in range(1, 6)] == [1, 2, 1, 2, 1]
    report = json.loads((out / 'ground_station.json').read_text())
    assert report['run_id'] == run_id and report['status'] == 'finished'
    assert [r['round_index'] for r in report['rounds']] == [1, 2, 3, 4, 5]
    progress = [json.loads(line) for line in (out / 'progress.jsonl').read_text().splitlines()]
    assert [r['round_index'] for r in progress] == [1, 2, 3, 4, 5]
    # Assert: both drones take part in every round, after each restart as before it
    summary = json.loads((out / 'summary.json').read_text())
    participants = [r['participants'] for r in summary['rounds']]
    assert participants == [[0, 1]] * 5, participants
    assert summary['status'] == 'finished'
    deaths = summary['node_deaths']
    assert [(d['node'], d['exit_code'], d['round'], d['resumed']) for d in deaths] == [
        ('ground_station', -9, 2, True), ('ground_station', -9, 4, True)]
    assert stdout.count('ground_station restarted, resuming from its checkpoint') == 2
    for drone in (0, 1):
        drone_log = (out / 'logs' / f'uav{drone}_drone.log').read_text()
        assert f'round 2 of run {run_id} opened again' in drone_log
        assert f'round 4 of run {run_id} opened again' in drone_log
        assert 'starts (round' not in drone_log          # no new run: the same one
    assert summary['final_accuracy'] > summary['initial_accuracy']
    assert _processes_mentioning(str(out)) == []
    print(f'\nstation killed at {kills["training"]:.1f} s (round 2, training) and '
          f'{kills["aggregating"]:.1f} s (round 4, aggregating; round 4 opened at '
          f'{after_first - start:.1f} s); restarted '
          f'{[round(d["restarted_s"] - d["died_s"], 1) for d in deaths]} s after `fl-uav sim` '
          f'saw it die; run over at {end - start:.1f} s; final accuracy '
          f'{summary["final_accuracy"]:.3f} (initial {summary["initial_accuracy"]:.3f})')
