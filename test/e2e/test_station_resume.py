"""End to end: the ground station node is SIGKILLed in round 3 of 6 (once while the drones
fly and train, once while it aggregates); `fl-uav sim` restarts it, it resumes from its
checkpoint and the run finishes: rounds 1..6, only round 3 opened twice, the same run id,
both drones in every round after the restart (fl_uav/fleet/station_checkpoint.py)."""

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

from test.e2e._slow_strategy import SLOW_AGGREGATE_S
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


@pytest.mark.parametrize('phase', ['training', 'aggregating'])
def test_a_killed_station_resumes_its_run_from_the_checkpoint(tmp_path, phase):
    # Arrange: 2 drones, 6 rounds; aggregating: round 3's aggregation takes 8 s
    out = tmp_path / 'run'
    extra = [f'aggregation.strategy={SLOW_FEDAVG}'] if phase == 'aggregating' else []
    cmd = _sim_command(out, 2, 6, '--timeout', '380', '--respawn-delay', '2',
                       *_OVERRIDES, *extra)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    station_log = out / 'logs' / 'ground_station.log'
    try:
        opened = _wait_for(station_log, 'round 3 open', proc, 240.0)
        if phase == 'training':      # the drones fly round 3's missions, then train
            _wait_for(out / 'logs' / 'uav1_drone.log', 'round 3: flying', proc, 30.0)
        else:                        # both updates in: the round closes, aggregating 8 s
            deadline = time.monotonic() + 60.0
            while (station_log.read_text().split('round 3 open')[-1].count('accepted') < 2
                   and time.monotonic() < deadline):
                time.sleep(0.1)      # polling the station's log, bounded by the deadline
            time.sleep(SLOW_AGGREGATE_S / 4)
        before_kill = station_log.read_text()
        run_id = re.search(r'ground station: run ([0-9a-f]+)', before_kill).group(1)
        (pid,) = [p for p in _processes_mentioning(str(out))
                  if '__node:=ground_station' in Path(f'/proc/{p}/cmdline').read_text()]
        # Act: SIGKILL the station node in round 3
        os.kill(pid, signal.SIGKILL)
        killed, killed_wall = time.monotonic(), time.time()
        back = _wait_for(station_log, 'resumed run', proc, 120.0)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    end = time.monotonic()
    # Assert: the kill landed in round 3 (in aggregation: before it closed)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert 'round 3 closed' not in before_kill and 'round 2 closed' in before_kill
    if phase == 'aggregating':
        assert before_kill.split('round 3 open')[-1].count('accepted') == 2, before_kill[-2000:]
    # Assert: the same run goes on from round 3; only round 3 is opened twice
    log = station_log.read_text()
    assert f'resumed run {run_id} from {out / "station_checkpoint.npz"} after round 2' in log
    assert [log.count(f'round {r} open') for r in range(1, 7)] == [1, 1, 2, 1, 1, 1]
    report = json.loads((out / 'ground_station.json').read_text())
    assert report['run_id'] == run_id and report['status'] == 'finished'
    assert [r['round_index'] for r in report['rounds']] == [1, 2, 3, 4, 5, 6]
    progress = [json.loads(line) for line in (out / 'progress.jsonl').read_text().splitlines()]
    assert [r['round_index'] for r in progress] == [1, 2, 3, 4, 5, 6]
    # Assert: both drones take part in every round after the restart, as before it
    summary = json.loads((out / 'summary.json').read_text())
    participants = [r['participants'] for r in summary['rounds']]
    assert participants == [[0, 1]] * 6, participants
    assert summary['status'] == 'finished'
    (death,) = summary['node_deaths']
    assert death['node'] == 'ground_station' and death['exit_code'] == -9
    assert death['round'] == 3 and death['resumed'] is True
    assert 'ground_station restarted, resuming from its checkpoint' in stdout
    for drone in (0, 1):
        drone_log = (out / 'logs' / f'uav{drone}_drone.log').read_text()
        assert f'round 3 of run {run_id} opened again' in drone_log
        assert 'starts (round' not in drone_log          # no new run: the same one
    assert summary['final_accuracy'] > summary['initial_accuracy']
    assert _processes_mentioning(str(out)) == []
    closed_at = {r['round_index']: r['closed_s'] for r in report['rounds']}
    print(f'\n{phase}: round 3 opened at {opened - start:.1f} s, station killed at '
          f'{killed - start:.1f} s; restarted {death["restarted_s"] - death["died_s"]:.1f} s '
          f'after `fl-uav sim` saw it die; resumed (its log line) {back - killed:.1f} s after '
          f'the kill; round 3 closed {closed_at[3] - killed_wall:.1f} s after the kill, round 6 '
          f'{closed_at[6] - killed_wall:.1f} s after; run over at {end - start:.1f} s; final '
          f'accuracy {summary["final_accuracy"]:.3f} (initial {summary["initial_accuracy"]:.3f})')
