"""End to end: `fl-uav sim --mode express`, FedEx UAV express delivery in the embedded fleet.

Two UAVs and four ground clients (ground_client nodes), two FedEx-Sync rounds, real DDS between
processes and real MAVLink to the autopilot simulator. Checks, from the station's results, the
clients' own logs and the autopilot's log: both rounds completed; every client exchanged once
per round, only with the UAV CARP assigned it, and only at a distance (by the simulator's
ground-truth pose) within radio range; round 1 only delivers (FedEx's one-round lag) and
round 2 applies the CLUs, so the global model changes and its accuracy is reported; both UAVs
armed, flew every leg of their tours as missions and landed; every frame, the visit frames
too, was signed with the run's keys and verified; no process is left. A second
run checks FedEx-Async: a server update at each landing, only the landed UAV departing again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test.conftest import free_udp_port_block
from test.e2e.test_fleet_sim import _processes_mentioning

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]


def _run_express(tmp_path, rounds: int, *extra: str) -> tuple[dict, Path]:
    """`fl-uav sim --mode express --drones 2 --clients 4`; returns the summary, the run dir."""
    out = tmp_path / 'run'
    port_base = free_udp_port_block(2)
    overrides = ['learning.model=tiny_cnn', 'learning.optimizer=sgd', 'learning.lr=0.05',
                 'rounds.eval_samples=300', 'ground_clients.samples_per_client=120',
                 'ground_clients.max_local_steps=20', 'autopilot.time_factor=10.0',
                 'rounds.deadline_s=60.0', *extra]
    cmd = [sys.executable, '-m', 'fl_uav.cli', 'sim', '--mode', 'express', '--drones', '2',
           '--clients', '4', '--rounds', str(rounds), '--out', str(out), '--port-base',
           str(port_base), '--timeout', '240', '--domain-id', os.environ['ROS_DOMAIN_ID']]
    for item in overrides:
        cmd += ['--set', item]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / 'summary.json').read_text()), out


def test_express_round_with_two_uavs_and_four_ground_clients(tmp_path):
    # Prepare / Execute
    summary, out = _run_express(tmp_path, 2)
    # Assert: the run and the FedEx-Sync rounds
    assert summary['status'] == 'finished' and summary['mode'] == 'express'
    assert [r['round'] for r in summary['rounds']] == [1, 2]
    first, second = summary['rounds']
    # Both u_k are applied each round (round 1's are zero: FedEx's one-round lag), so both
    # UAVs take part in both, as many as the strategy reports
    assert first['participants'] == [0, 1] and second['participants'] == [0, 1]
    assert all(r['aggregation']['participants'] == len(r['participants'])
               for r in summary['rounds'])
    assert all(r['rejected'] == {} for r in summary['rounds'])
    # Round 1's u_k are zero (no CLU yet), round 2 applies eq. (13): the model moves
    assert first['model_change_l2'] == 0.0 and second['model_change_l2'] > 0.0
    assert isinstance(summary['final_accuracy'], float) and 0 <= summary['final_accuracy'] <= 1
    # Assert: every client exchanged once a round, with its assigned UAV only, in range
    express = summary['express']
    tours = express['plan']['tours']
    assigned = {c: k for k, tour in enumerate(tours) for c in tour}
    assert sorted(assigned) == [0, 1, 2, 3] and all(tours)
    for r in summary['rounds']:
        for uav, facts in r['express'].items():
            assert facts['exchanged'] == tours[int(uav)] and facts['missed'] == [], facts
    for client, log in express['clients'].items():
        exchanges = log['exchanges']
        assert [e['round_index'] for e in exchanges] == [1, 2], log
        assert all(e['accepted'] and e['uav'] == assigned[int(client)] for e in exchanges)
        assert all(e['distance_m'] <= express['radio_range_m'] for e in exchanges)
        assert exchanges[1]['clu_steps'] > 0 and log['refused'] == {} and log['rejected'] == {}
    assert express['range_pose'] == 'ground_truth'
    # Assert: signed end to end: the run's keys include every client's, signatures were
    # required, and no visit frame was rejected (above), so every one verified
    params = yaml.safe_load((out / 'params.yaml').read_text())['/**']['ros__parameters']
    assert params['security.require_signatures'] is True
    assert sorted(p.name for p in (out / 'keys').glob('gc*.key')) == [
        f'gc{j}.key' for j in range(4)]
    # Assert: both UAVs flew their tours (a mission per leg) and landed, from the autopilot
    for uav, tour in enumerate(tours):
        facts = summary['drones'][str(uav)]
        assert facts['armed'] and facts['took_off'] and facts['landed'], facts
        assert facts['missions_completed'] == 2 * (len(tour) + 1), facts
        assert facts['waypoints_reached'] == facts['waypoints_planned'] > 0, facts
    # Assert: nothing left behind
    assert all(code is not None for code in summary['exit_codes'].values())
    assert _processes_mentioning(str(out)) == []


def test_express_async_updates_at_each_landing(tmp_path):
    # Prepare / Execute: FedEx-Async (eqs. (14)-(15)), four server updates
    summary, out = _run_express(tmp_path, 4, 'express.mode=async')
    # Assert: every round is a landing; the landed UAV alone departs again
    assert summary['status'] == 'finished'
    rounds = summary['rounds']
    assert [r['round'] for r in rounds] == [1, 2, 3, 4]
    landed = [sorted(int(k) for k in r['express']) for r in rounds]
    assert all(landed) and sorted({k for group in landed for k in group}) == [0, 1], landed
    assert rounds[0]['model_change_l2'] == 0.0            # a first tour carries no CLU
    assert all(r['aggregation']['max_lag'] >= 0 for r in rounds)   # FedEx-Async's report
    assert any(r['model_change_l2'] > 0 for r in rounds[2:]), rounds
    tours = summary['express']['plan']['tours']
    assigned = {c: k for k, tour in enumerate(tours) for c in tour}
    for client, log in summary['express']['clients'].items():
        # A delivery heard while the UAV's pose still lagged (100 m/s at time factor 10) is
        # refused for range and retried (ground_clients.delivery_attempts): every visit ends
        # exchanged, only with the client's own UAV.
        visits = {(e['uav'], e['round_index']) for e in log['exchanges']}
        done = {(e['uav'], e['round_index']) for e in log['exchanges'] if e['accepted']}
        assert log['exchanges'] and visits == done, log
        assert all(e['uav'] == assigned[int(client)] for e in log['exchanges']), log
        assert all(e['accepted'] or e['reason'] in ('out_of_range', 'no_pose')
                   for e in log['exchanges']), log
    # Assert: both UAVs landed (a tour still out at the end is cut short), nothing left
    for uav in ('0', '1'):
        facts = summary['drones'][uav]
        assert facts['armed'] and facts['took_off'] and facts['landed'], facts
    assert all(code is not None for code in summary['exit_codes'].values())
    assert _processes_mentioning(str(out)) == []
