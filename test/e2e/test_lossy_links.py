"""End to end over a lossy, slow link: the station in one network namespace, the drones (with
their simulated autopilot and camera) in another, joined by a veth pair shaped on both ends'
egress to 20 Mbit/s (tc tbf) and 20 % random packet loss (nftables); DDS crosses it by unicast
(ROS_STATIC_PEERS). The same fleet and seed run once over a lossless link of the same kind.
The lossy run must complete every round with every drone, no update missing at its round's
close, and end within ACCURACY_TOLERANCE of the lossless run. And a link down for 30 s in the
middle of a round, while the drones upload: longer than the DDS participant lease (20 s), so
the drones and the station lose each other; the round's updates must still arrive once the
link is back (a volatile update writer lost them all). Skips, saying why, without root, ip,
tc, nft or namespaces.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fl_uav.fleet_run.netns import (
    LinkShape,
    Outage,
    fleet_run_over_link,
    unavailable_reason,
)
from test.conftest import free_udp_port_block

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
REPO = Path(__file__).resolve().parents[2]
#: |lossy - lossless| final accuracy, 2 drones x 3 rounds of tiny_cnn. Measured (2026-11-29):
#: lossless 0.433, 0.423, 0.460, 0.397; lossy 0.430, 0.407, 0.410, 0.413: every update arrives,
#: but the drones' buffers differ with the rounds' timing (the lossy rounds last longer and
#: the drones record more, less balanced samples), and after 3 rounds accuracy still climbs
#: ~5 points a round. A coarse check: a run that lost round 2's every update still ended at
#: 0.430 (the participants assertion catches that), one that learned nothing stays near 0.1.
ACCURACY_TOLERANCE = 0.08
OVERRIDES = {'num_drones': 2, 'rounds.num_rounds': 3, 'learning.model': 'tiny_cnn',
             'learning.lr': 0.005, 'rounds.eval_samples': 300, 'coverage.box_m': 80.0,
             'rounds.deadline_s': 60.0, 'autopilot.time_factor': 10.0}


@pytest.fixture
def link_tag():
    """A tag for this test's namespaces; whatever happens, none is left behind."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    tag = f'fll{os.getpid() % 100000}t'
    yield tag
    listed = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    for ns in (f'{tag}g', f'{tag}a'):
        if ns in listed.split():
            subprocess.run(['ip', 'netns', 'del', ns], check=False)


def _run(tmp_path: Path, name: str, shape: LinkShape, tag: str, outage: Outage | None = None,
         num_rounds: int = 3) -> dict:
    port = free_udp_port_block(2)
    overrides = {**OVERRIDES, 'rounds.num_rounds': num_rounds, 'flight.port_base': port,
                 'autopilot.remote_base_port': port, 'autopilot.bind_base_port': port + 1000}
    lines: list[str] = []
    report = fleet_run_over_link([REPO / 'config' / 'fleet.yaml'], overrides, tmp_path / name,
                                 shape, tag, outage=outage,
                                 domain_id=int(os.environ['ROS_DOMAIN_ID']),
                                 timeout_s=240.0, echo=lines.append)
    report['echo'] = lines
    return report


def test_twenty_percent_loss_at_20_mbit_completes_like_lossless(tmp_path, link_tag,
                                                              monkeypatch):
    # Arrange: the nodes import this checkout (python -m from the working directory)
    monkeypatch.chdir(REPO)
    # Act
    lossless = _run(tmp_path, 'lossless', LinkShape(), link_tag)
    lossy = _run(tmp_path, 'lossy', LinkShape(loss_pct=20.0, rate_mbit=20.0), link_tag)
    # Assert: both runs complete every round with both drones, nothing late
    for report in (lossless, lossy):
        assert report['status'] == 'finished', report['echo'][-30:]
        assert report['rounds_completed'] == 3, report
        assert report['participants'] == [2, 2, 2], report
        assert report['missing_at_close'] == 0 and report['late_arrivals'] == 0, report
        # DDS really crossed the link: more bytes on it than the payload
        assert report['wire_bytes'] > report['payload_bytes'] > 0, report
    # Assert: the lossy link was lossy (each side dropped packets), the lossless one not
    assert all(lossy['counters'][side]['lost_packets'] > 0 for side in ('air', 'ground'))
    assert lossless['dropped_bytes'] == 0
    # Assert: the model learned as much
    assert lossy['final_accuracy'] > lossy['initial_accuracy']
    assert abs(lossy['final_accuracy'] - lossless['final_accuracy']) <= ACCURACY_TOLERANCE, (
        lossy['final_accuracy'], lossless['final_accuracy'])
    # Assert: no namespace of this test is left
    listed = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    assert link_tag not in listed


def test_updates_sent_while_the_link_is_down_arrive_when_it_is_back(tmp_path, link_tag,
                                                                   monkeypatch):
    # Arrange: the link goes down 5 s into round 2 of 2 (the drones fly ~10 s, then upload)
    # for 30 s; the round's deadline is 60 s after it opened
    monkeypatch.chdir(REPO)
    outage = Outage(round_index=2, after_s=5.0, duration_s=30.0)
    # Act
    report = _run(tmp_path, 'outage', LinkShape(), link_tag, outage, num_rounds=2)
    # Assert: the outage happened, in round 2, and dropped traffic
    assert report['outage']['ended_s'] - report['outage']['began_s'] >= 29.0, report['outage']
    assert all(report['counters'][side]['outage_packets'] > 0 for side in ('air', 'ground'))
    # Assert: every round closed with both drones' updates, round 2's too
    assert report['status'] == 'finished', report['echo'][-30:]
    assert report['participants'] == [2, 2], report['echo'][-30:]
    assert report['missing_at_close'] == 0, report
