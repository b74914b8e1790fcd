"""End to end: a drone of the embedded fleet plans its own 2CEOAFL trajectory onboard and flies
it as MAVLink missions (`fl-uav sim`, real DDS between processes, real MAVLink over UDP).

One drone, three rounds, ``trajectory.planner: 2ceoafl`` with the default modes (regions map,
priorities paper, sampling sweep): round 1 is the survey (the station's sweep); at round 2 the
drone fits its class regions (2CEOAFL eq. (1)) to its land-cover raster and plans q_2..q_3
(eqs. (2)-(5)), a plan of more than one round that round 3 follows without planning again (each
round's flight takes ~20 s, so a fourth round would add time and no check). Checks,
from the autopilot's own event log (ground truth: where the simulated vehicle was when it
reached each mission item), that rounds 2-3 flew missions through the drone's q_t and its
region sweep, that the drone landed, that no planning fell back, and that no process is left.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test.conftest import free_udp_port_block
from test.e2e.test_fleet_sim import _processes_mentioning

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]
NUM_ROUNDS = 3
TOLERANCE_M = 3.0       # mission acceptance radius is 1 m; altitude window 1 m in the sim


def _missions(events: list[dict]) -> list[list[list[float]]]:
    """Positions (ENU m) where the vehicle reached items, one list per uploaded mission."""
    missions: list[list[list[float]]] = []
    for event in events:
        if event['event'] == 'mission_uploaded':
            missions.append([])
        elif event['event'] == 'mission_item_reached' and missions:
            missions[-1].append(event['position_enu_m'])
    return missions


def _near(a: list[float], b: list[float]) -> bool:
    return math.hypot(a[0] - b[0], a[1] - b[1]) <= TOLERANCE_M and abs(a[2] - b[2]) <= TOLERANCE_M


def _flown_in_order(reached: list[list[float]], planned: list[list[float]]) -> bool:
    """Every planned waypoint was reached, in order (MAVSDK adds non-position items)."""
    index = 0
    for position in reached:
        if index < len(planned) and _near(position, planned[index]):
            index += 1
    return index == len(planned)


def test_a_drone_flies_its_own_2ceoafl_plan_as_missions(tmp_path):
    # Prepare
    out = tmp_path / 'run'
    port_base = free_udp_port_block(1)
    overrides = ['learning.model=tiny_cnn', 'learning.local_epochs=1', 'rounds.eval_samples=200',
                 'autopilot.time_factor=10.0', 'trajectory.planner=2ceoafl',
                 'trajectory.survey_rounds=1']
    cmd = [sys.executable, '-m', 'fl_uav.cli', 'sim', '--drones', '1', '--rounds',
           str(NUM_ROUNDS), '--out', str(out), '--port-base', str(port_base), '--timeout',
           '200', '--domain-id', os.environ['ROS_DOMAIN_ID']]
    for item in overrides:
        cmd += ['--set', item]
    # Execute
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=260)
    # Assert: the run finished every round
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['status'] == 'finished'
    assert [r['round'] for r in summary['rounds']] == list(range(1, NUM_ROUNDS + 1))
    facts = summary['drones']['0']
    assert facts['mission_sources'] == {'survey': 1, '2ceoafl': NUM_ROUNDS - 1}, facts
    assert facts['plan_fallbacks'] == {}, facts
    # Assert: the drone's own plan (its record), fitted to its raster, one plan
    record = json.loads((out / 'trajectory_uav0.json').read_text())
    plan = record['plan']
    assert record['plans_made'] == 1 and record['regions_source'] == 'map'
    assert plan['first_round'] == 2 and len(plan['waypoints_enu_m']) == NUM_ROUNDS - 1
    assert len(plan['regions']) >= 1
    rounds = {r['round']: r for r in record['rounds']}
    for t in range(2, NUM_ROUNDS + 1):
        assert rounds[t]['target_enu_m'] == plan['waypoints_enu_m'][t - 2]
        assert rounds[t]['mission_enu_m'][0] == rounds[t]['target_enu_m']
        assert rounds[t]['class_id'] >= 0 and rounds[t]['sample_m'] > 100.0   # a sweep
    # Assert: the autopilot (ground truth) flew one mission per round; in rounds 2.. it reached
    # q_t first, then every point of the region sweep, in order
    log = json.loads((out / 'autopilot_log.json').read_text())
    events = [e for e in log['events'] if e['vehicle'] == 0]
    missions = _missions(events)
    assert len(missions) == NUM_ROUNDS, [len(m) for m in missions]
    assert _flown_in_order(missions[0], rounds[1]['mission_enu_m'])
    for t in range(2, NUM_ROUNDS + 1):
        reached = missions[t - 1]
        assert _near(reached[0], rounds[t]['target_enu_m']), (t, reached[0], rounds[t])
        assert _flown_in_order(reached, rounds[t]['mission_enu_m']), (t, reached)
    kinds = [e['event'] for e in events]
    assert kinds.count('mission_complete') == NUM_ROUNDS
    last_mission_done = max(i for i, kind in enumerate(kinds) if kind == 'mission_complete')
    assert 'landed' in kinds[last_mission_done:]          # landed after its last mission
    assert facts['landed'] and facts['waypoints_reached'] == facts['waypoints_planned'] > 0
    # Assert: nothing left behind
    assert all(code is not None for code in summary['exit_codes'].values())
    assert _processes_mentioning(str(out)) == []
