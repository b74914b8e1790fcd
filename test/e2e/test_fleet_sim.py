"""End to end: `fl-uav sim` with real DDS between processes and real MAVLink over UDP.

Two drones, two rounds, a tiny model, structured pruning and compressed uploads (FedDPQ range
quantizer, codec v2 frames with a pruning mask and a metadata section). Checks, from the
autopilot's own log (telemetry ground truth) and from the station's results, that every drone
armed, took off, flew all its waypoints and landed, collected camera samples, that every upload
was a compressed frame far smaller than the dense update, that the model improved, and that no
process is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fl_uav.compression.codec import encoded_size
from fl_uav.learning.models import build_model
from fl_uav.learning.weights import get_weights
from fl_uav.world.landcover import CLASS_NAMES
from test.conftest import free_udp_port_block

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]
REPO = Path(__file__).resolve().parents[2]


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path('/proc').iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / 'cmdline').read_bytes().decode(errors='replace')
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def _sim_command(out: Path, drones: int, rounds: int, *extra: str) -> list[str]:
    """`fl-uav sim` on free ports and this test session's ROS_DOMAIN_ID; ``extra`` options
    (KEY=VALUE items become --set)."""
    cmd = [sys.executable, '-m', 'fl_uav.cli', 'sim', '--drones', str(drones), '--rounds',
           str(rounds), '--out', str(out), '--port-base', str(free_udp_port_block(drones)),
           '--domain-id', os.environ['ROS_DOMAIN_ID']]
    for item in extra:
        cmd += ['--set', item] if '=' in item else [item]
    return cmd


def test_two_drones_two_rounds_end_to_end(tmp_path):
    # Prepare
    out = tmp_path / 'run'
    overrides = ['learning.model=tiny_cnn', 'learning.lr=0.005', 'learning.local_epochs=3',
                 'rounds.eval_samples=300', 'coverage.box_m=80.0', 'rounds.deadline_s=90.0',
                 'autopilot.time_factor=10.0', 'learning.structured_keep=0.5',
                 'compression.method=range', 'compression.range_bits=4',
                 'compression.per_layer=true']
    dense_update_bytes = encoded_size(get_weights(build_model('tiny_cnn', len(CLASS_NAMES), 32)))
    cmd = _sim_command(out, 2, 2, '--timeout', '300', *overrides)
    # Execute
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=360)
    # Assert: the run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['status'] == 'finished'
    assert [r['round'] for r in summary['rounds']] == [1, 2]
    # Assert: every node signed with the run's own keys and required signatures (a frame
    # rejected as unsigned / signer / signature would show in 'rejected' below)
    params = yaml.safe_load((out / 'params.yaml').read_text())['/**']['ros__parameters']
    assert params['security.require_signatures'] is True
    assert (out / 'keys' / 'station.key').stat().st_mode & 0o777 == 0o600
    assert all(r['participants'] == [0, 1] for r in summary['rounds'])
    assert summary['final_accuracy'] > summary['initial_accuracy']
    assert all(r['bytes_up_total'] > 0 and r['bytes_down_per_drone'] > 0
               for r in summary['rounds'])
    assert all(r['rejected'] == {} for r in summary['rounds'])
    # Assert: compressed and pruned uploads, each far smaller than the dense float32 update
    uploads = [size for r in summary['rounds'] for size in r['bytes_up'].values()]
    assert len(uploads) == 4 and max(uploads) < dense_update_bytes / 8, (uploads,
                                                                          dense_update_bytes)
    assert all(isinstance(r['accuracy'], float) for r in summary['rounds'])
    assert (out / 'accuracy.png').stat().st_size > 1000
    assert 'round   2' in result.stdout
    # Assert: every drone flew, from the autopilot's log and the drones' mission progress
    for drone in ('0', '1'):
        facts = summary['drones'][drone]
        assert facts['armed'] and facts['took_off'] and facts['landed'], facts
        assert facts['missions_completed'] == 2, facts
        assert facts['waypoints_reached'] == facts['waypoints_planned'] > 0, facts
        assert facts['samples_collected'] > 20, facts
    # Assert: each drone's autopilot link was signed (config/fleet.yaml): the simulated
    # autopilots held the run's keys and took everything signed, rejecting nothing
    signing = json.loads((out / 'autopilot_log.json').read_text())['mavlink_signing']
    assert params['flight.mavlink_signing'] is True
    assert [(v['active'], v['rejected']) for v in signing] == [(True, {}), (True, {})]
    assert all(v['accepted_signed'] > 50 for v in signing), signing
    # Assert: nothing left behind
    assert all(code is not None for code in summary['exit_codes'].values())
    assert _processes_mentioning(str(out)) == []


def test_sigterm_stops_the_fleet_like_ctrl_c(tmp_path):
    # Arrange: a long run started as `timeout` or a job scheduler would, its nodes up
    out = tmp_path / 'run'
    cmd = _sim_command(out, 1, 50, '--timeout', '300', 'learning.model=tiny_cnn')
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)   # its nodes: one group
    try:
        # its nodes up: the station opened round 1 (a node still starting its interpreter
        # would die of the SIGINT inside Python's own start-up, not stop as a node does)
        station_log = out / 'logs' / 'ground_station.log'
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline and proc.poll() is None and 'round 1 open' not in (
                station_log.read_text() if station_log.exists() else ''):
            time.sleep(0.2)          # polling the station's log, bounded by the deadline
        started = _processes_mentioning(str(out))
        # Act
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):   # whatever failed: no node left over
            os.killpg(proc.pid, signal.SIGKILL)
    # Assert: an interrupted run's summary, no traceback, no node left running
    assert len(started) >= 3, started
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['status'] == 'interrupted' and proc.returncode == 1, stdout[-2000:]
    assert 'Traceback' not in stderr
    assert _processes_mentioning(str(out)) == []


def test_a_killed_drone_node_is_restarted_and_the_run_finishes(tmp_path):
    # Arrange: two drones, four rounds of 30 s at most; a dead drone comes back after 30 s,
    # so the round it dies in closes at its deadline without it
    out = tmp_path / 'run'
    cmd = _sim_command(out, 2, 4, '--timeout', '400', '--respawn-delay', '30',
                       'learning.model=tiny_cnn', 'rounds.eval_samples=300',
                       'coverage.box_m=80.0', 'rounds.deadline_s=30.0',
                       'autopilot.time_factor=10.0')
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        drone_log = out / 'logs' / 'uav1_drone.log'
        deadline = time.monotonic() + 180.0
        while time.monotonic() < deadline and proc.poll() is None and 'round 2: flying' not in (
                drone_log.read_text() if drone_log.exists() else ''):
            time.sleep(0.2)      # polling the drone's log, bounded by the deadline
        (pid,) = [p for p in _processes_mentioning(str(out))
                  if '__ns:=/uav1' in Path(f'/proc/{p}/cmdline').read_text()]
        # Act: SIGKILL drone 1's node in the air, in round 2
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=360)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    # Assert: restarted; round 2 closed without it; it took part again; the run finished
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert ('uav1/drone exited with code -9 in round 2: restarting it in 30 s (restart 1 of '
            'at most 5)') in stdout
    summary = json.loads((out / 'summary.json').read_text())
    participants = [r['participants'] for r in summary['rounds']]
    assert summary['status'] == 'finished'
    assert participants[1] == [0] and len(participants) == 4, participants
    (death,) = summary['node_deaths']
    assert death['node'] == 'uav1/drone' and death['exit_code'] == -9 and death['round'] == 2
    assert death['restarted_s'] - death['died_s'] >= 30.0
    back = next(r['round'] for r in summary['rounds'] if r['round'] > 2
                and 1 in r['participants'])
    assert f'uav1/drone died (exit code -9) at {death["died_s"]:.0f} s in round 2; restarted ' \
           f'at {death["restarted_s"]:.0f} s, took part again from round {back}' in stdout
    assert summary['drones']['1']['landed']
    assert _processes_mentioning(str(out)) == []
