"""ground_station over real rclpy/DDS: a round with bad input and a silent drone."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import rclpy
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import Log
from rclpy.qos import DurabilityPolicy
from std_msgs.msg import Float64, UInt8MultiArray
from visualization_msgs.msg import Marker, MarkerArray

from fl_uav.compression.codec import (
    GROUND_STATION_ID,
    DecodeLimits,
    FrameKind,
    decode_frame,
    encode_frame,
)
from fl_uav.compression.signing import sign_frame
from fl_uav.fleet.config import SecurityConfig
from fl_uav.fleet.heartbeat_auth import HeartbeatRefused, heartbeat_verifier
from fl_uav.fleet.keys import generate_fleet_keys, load_frame_auth
from fl_uav.fleet.run_log import STATION_REPORT_FILE, read_progress
from fl_uav.fleet.station_heartbeat import Heartbeat, StationPhase
from fl_uav.fleet_run.launch_plan import write_params_file
from fl_uav.ros import names
from fl_uav.ros.conversions import msg_to_heartbeat, msg_to_heartbeat_fields
from fl_uav.ros.ground_station_node import GroundStationNode
from fl_uav.ros.markers import PATH_NS, WORLD_REGION_NS
from test.conftest import tiny_fleet_overrides
from test.ros.rosutil import ROSOUT_QOS, node_with_probe, spin_until

pytestmark = pytest.mark.ros
PLANNER_BLOCK_TIMEOUT_S = 30.0   # a planner the test forgot to release ends anyway
AGGREGATION_BLOCK_TIMEOUT_S = 10.0   # likewise a blocked close (without the inbox it blocks
                                     # the executor, and the test, this long)


def _station(tmp_path, deadline_s: float, start_timeout_s: float, *parameters: str,
             num_rounds: int = 1):
    """A 2-drone station node (one round) with a probe (``parameters``: extra ``-p``
    values)."""
    overrides = {**tiny_fleet_overrides(2, 14540), 'rounds.num_rounds': num_rounds,
                 'rounds.deadline_s': deadline_s, 'rounds.first_round_extra_s': 0.0,
                 'rounds.start_timeout_s': start_timeout_s}
    params = write_params_file(overrides, tmp_path / 'params.yaml')
    args = ['--ros-args', '--params-file', str(params), '-p', f'output_dir:={tmp_path}']
    for parameter in parameters:
        args += ['-p', parameter]
    return node_with_probe(GroundStationNode, args)


@pytest.fixture
def station(tmp_path):
    with _station(tmp_path, 4.0, 0.5) as handles:
        yield handles


def _log_lines(node, probe) -> list[str]:
    """The node's lines on /rosout, as they come."""
    lines: list[str] = []
    probe.create_subscription(Log, '/rosout', lambda m: lines.append(m.msg)
                              if m.name == node.get_logger().name else None, ROSOUT_QOS)
    return lines


def test_round_survives_bad_frames_and_closes_at_deadline(station, tmp_path):
    # Prepare
    node, probe, executor = station
    models, metrics, markers = [], [], []
    lines = _log_lines(node, probe)
    probe.create_subscription(MarkerArray, names.MARKERS_TOPIC, markers.append,
                              names.MARKERS_QOS)
    probe.create_subscription(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC,
                              lambda m: models.append(decode_frame(bytes(m.data))),
                              names.GLOBAL_MODEL_QOS)
    probe.create_subscription(DiagnosticArray, names.METRICS_TOPIC, metrics.append,
                              names.METRICS_QOS)
    updates = probe.create_publisher(UInt8MultiArray, names.UPDATES_TOPIC, names.UPDATES_QOS)
    assert spin_until(executor, lambda: models, 20.0), 'no global model published'
    model = models[0]
    assert spin_until(executor, lambda: updates.get_subscription_count() > 0, 10.0)
    zero = {n: np.zeros_like(t) for n, t in model.tensors.items()}
    nan = {n: np.full_like(t, np.nan) for n, t in model.tensors.items()}
    wide = {n: np.full(t.shape, 1e300) for n, t in model.tensors.items()}   # inf in float32
    good = encode_frame(FrameKind.UPDATE, 1, 0, model.fingerprint, zero, {'num_samples': 10})
    bad_frames = [
        b'garbage that is not a frame',
        good[:len(good) // 2],
        encode_frame(FrameKind.UPDATE, 1, 0, model.fingerprint, nan, {'num_samples': 10}),
        encode_frame(FrameKind.UPDATE, 1, 1, model.fingerprint, wide, {'num_samples': 10}),
        encode_frame(FrameKind.UPDATE, 1, 7, model.fingerprint, zero, {'num_samples': 10}),
        encode_frame(FrameKind.UPDATE, 5, 0, model.fingerprint, zero, {'num_samples': 10}),
    ]
    # Execute
    for data in [*bad_frames, good]:
        msg = UInt8MultiArray()
        msg.data = data
        updates.publish(msg)
    closed = spin_until(executor, lambda: metrics, 20.0)
    finished = spin_until(executor, lambda: any(m.kind == FrameKind.CONTROL for m in models),
                          10.0)
    # Assert
    assert model.round_index == 1 and model.kind == FrameKind.GLOBAL_MODEL
    assert len(model.metadata['knobs']) == 2 and model.metadata['knobs']['0']['plan']
    assert closed, 'round never closed although the deadline passed'
    values = {kv.key: kv.value for kv in metrics[0].status[0].values}
    assert values['participants'] == '1' and values['late'] == '1'
    rejected = node.station.rejected_total
    assert {'bad_magic', 'truncated', 'nonfinite', 'unknown_sender', 'wrong_round'} <= set(
        rejected), rejected
    assert finished
    assert markers, 'no rviz markers'
    # the picture of the round replaces the last one whole, each drone in its own colour
    assert markers[0].markers[0].action == Marker.DELETEALL
    namespaces = [m.ns for m in markers[0].markers]
    assert namespaces.count(PATH_NS) == 2 and namespaces.count(WORLD_REGION_NS) > 0
    rows = read_progress(tmp_path)
    assert rows[0]['participants'] == [0] and rows[0]['late_or_missing'] == [1]
    assert rows[0]['flight_errors'] == {}
    report_file = tmp_path / STATION_REPORT_FILE
    assert spin_until(executor, report_file.exists, 10.0)
    assert json.loads(report_file.read_text())['flight_failures'] == {'0': 0, '1': 0}
    # the log names the drone that was late or missing
    closing = 'round 1 closed: accuracy'
    assert spin_until(executor, lambda: any(line.startswith(closing) for line in lines), 5.0)
    line = next(line for line in lines if line.startswith(closing))
    assert line.endswith('participants [0], late or missing [1]'), line
    # a viewer started after the round closed still gets its metrics (latched)
    assert names.METRICS_QOS.durability == DurabilityPolicy.TRANSIENT_LOCAL
    late: list = []
    probe.create_subscription(DiagnosticArray, names.METRICS_TOPIC, late.append,
                              names.METRICS_QOS)
    assert spin_until(executor, lambda: late, 10.0), 'a late viewer got no metrics'
    assert {kv.key: kv.value for kv in late[0].status[0].values}['round'] == '1'
    # ... and each number alone, as a plot subscribes (rqt_plot, Foxglove's Plot)
    accuracy: list = []
    probe.create_subscription(Float64, names.metric_topic('accuracy'), accuracy.append,
                              names.METRICS_QOS)
    assert spin_until(executor, lambda: accuracy, 10.0), 'no /fl/metrics/accuracy'
    assert accuracy[0].data == pytest.approx(node.station.records[0].accuracy)
    # the station's own status on /diagnostics: no drone node here, so an error, then where
    statuses: list = []
    probe.create_subscription(DiagnosticArray, names.DIAGNOSTICS_TOPIC,
                              lambda m: statuses.extend(m.status), names.DIAGNOSTICS_QOS)
    assert spin_until(executor, lambda: statuses, 10.0), 'no station status on /diagnostics'
    assert statuses[-1].name == 'fl_uav: ground_station'
    assert statuses[-1].message.endswith('round 1/1: finished'), statuses[-1].message
    counted = {kv.key: kv.value for kv in statuses[-1].values}['frames_rejected']
    assert 'nonfinite=2' in counted and all(
        f'{reason}=' in counted for reason in ('bad_magic', 'truncated', 'unknown_sender',
                                               'wrong_round')), counted


def test_the_heartbeat_goes_on_while_the_worker_plans(tmp_path):
    # Arrange: two 1 s rounds, no drone, a beat every 0.2 s; the resource planner after
    # round 1 blocks until released (lgc_ddpg takes minutes for a large fleet)
    with _station(tmp_path, 1.0, 0.2, 'status.heartbeat_period_s:=0.2',
                  num_rounds=2) as (node, probe, executor):
        beats: list[Heartbeat] = []
        probe.create_subscription(DiagnosticArray, names.STATION_HEARTBEAT_TOPIC,
                                  lambda m: beats.append(msg_to_heartbeat(m)),
                                  names.STATION_HEARTBEAT_QOS)
        release = threading.Event()
        node.station.plan_pending = lambda: release.wait(PLANNER_BLOCK_TIMEOUT_S)

        def planning_beats() -> list[Heartbeat]:
            return [b for b in beats if b.phase == StationPhase.PLANNING]

        # Act
        planned = spin_until(executor, lambda: len(planning_beats()) >= 5, 20.0)
        release.set()
        reopened = spin_until(executor, lambda: any(
            b.phase == StationPhase.ROUND_OPEN and b.round_index == 2 for b in beats), 10.0)
        finished = spin_until(executor, lambda: bool(beats)
                              and beats[-1].phase == StationPhase.FINISHED, 10.0)
        # Assert: beats while it planned, the phase age growing; then round 2, then finished
        assert planned, [b.describe() for b in beats]
        ages = [b.phase_age_s for b in planning_beats()]
        assert ages == sorted(ages) and ages[-1] >= ages[0] + 0.5, ages
        assert {(b.run_id, b.round_index, b.num_rounds) for b in planning_beats()} == {
            (node.station.run_id, 1, 2)}
        assert reopened and finished, [b.describe() for b in beats]


def test_an_update_arriving_while_the_worker_aggregates_does_not_stop_the_beats(tmp_path):
    # Arrange: one 1 s round, no drone, a beat every 0.2 s; closing the round (the worker
    # holds the station's lock) blocks until released, as a long aggregation would
    with _station(tmp_path, 1.0, 0.2, 'status.heartbeat_period_s:=0.2') as (node, probe,
                                                                            executor):
        beats: list[Heartbeat] = []
        probe.create_subscription(DiagnosticArray, names.STATION_HEARTBEAT_TOPIC,
                                  lambda m: beats.append(msg_to_heartbeat(m)),
                                  names.STATION_HEARTBEAT_QOS)
        updates = probe.create_publisher(UInt8MultiArray, names.UPDATES_TOPIC,
                                         names.UPDATES_QOS)
        aggregating, release = threading.Event(), threading.Event()
        close_round = node.station.close_round

        def blocked_close_round(now_s: float):
            aggregating.set()
            release.wait(AGGREGATION_BLOCK_TIMEOUT_S)
            return close_round(now_s)

        node.station.close_round = blocked_close_round
        assert spin_until(executor, lambda: updates.get_subscription_count() > 0, 10.0)
        assert spin_until(executor, aggregating.is_set, 20.0), 'the round never closed'
        # Act: an update arrives while the worker aggregates
        sent_at = len(beats)
        msg = UInt8MultiArray()
        msg.data = b'an update frame that came during the aggregation'
        updates.publish(msg)
        beating = spin_until(executor, lambda: len(
            [b for b in beats[sent_at:] if b.phase == StationPhase.AGGREGATING]) >= 5, 5.0)
        release.set()
        taken = spin_until(executor, lambda: sum(node.station.rejected_total.values()) == 1,
                           10.0)
        # Assert: the beats went on through the blocked close; the update was not lost (it
        # is checked and counted once the close ends: garbage, so rejected)
        assert beating, [b.describe() for b in beats[sent_at:]]
        assert taken, dict(node.station.rejected_total)
        assert len(node._inbox) == 0


def test_a_round_is_logged_closed_before_the_next_one_opens(tmp_path):
    # Arrange: two 1 s rounds, no drone; the timer ticks while the closed round is being
    # reported (as the executor's timer may, while the aggregation thread writes)
    with _station(tmp_path, 1.0, 0.2, num_rounds=2) as (node, probe, executor):
        lines = _log_lines(node, probe)
        append_round = node.log.append_round

        def append_while_the_timer_ticks(row: dict) -> None:
            node._tick()
            append_round(row)

        node.log.append_round = append_while_the_timer_ticks
        # Act
        both = spin_until(executor, lambda: all(
            any(line.startswith(start) for line in lines)
            for start in ('round 1 closed', 'round 2 open')), 20.0)
        # Assert
        assert both, lines
        closed_at = next(i for i, line in enumerate(lines) if line.startswith('round 1 closed'))
        opened_at = next(i for i, line in enumerate(lines) if line.startswith('round 2 open'))
        assert closed_at < opened_at, lines


@pytest.fixture
def waiting_station(tmp_path):
    """A 2-drone station that would wait a minute for its drones, and exits when done."""
    with _station(tmp_path, 60.0, 60.0, 'exit_on_finish:=true') as handles:
        yield handles


def _listen_to_models(node, models: list) -> None:
    node.create_subscription(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC,
                             lambda m: models.append(decode_frame(bytes(m.data))),
                             names.GLOBAL_MODEL_QOS)


def test_viewers_are_not_drones_round_one_waits_for_the_drones_nodes(waiting_station):
    # Prepare: two viewers in the root namespace (ros2 topic echo, a Foxglove bridge) and a
    # node named like a drone outside the fleet's namespaces
    node, probe, executor = waiting_station
    seen = []
    for _ in range(2):
        _listen_to_models(probe, seen)
    stranger = rclpy.create_node(names.DRONE_NODE_NAME, namespace=names.drone_namespace(7))
    _listen_to_models(stranger, seen)
    executor.add_node(stranger)
    drones = [rclpy.create_node(names.DRONE_NODE_NAME, namespace=names.drone_namespace(d))
              for d in (0, 1)]
    models = {d: [] for d in (0, 1)}
    # Execute: the viewers are discovered (the station's publisher matches all three)...
    viewers_seen = spin_until(executor, lambda: node.count_subscribers(
        names.GLOBAL_MODEL_TOPIC) >= 3, 10.0)
    opened_for_viewers = spin_until(executor, lambda: node.station.round_open, 3.0)
    # ...then the two drones' nodes subscribe
    for d, drone in enumerate(drones):
        _listen_to_models(drone, models[d])
        executor.add_node(drone)
    opened = spin_until(executor, lambda: node.station.round_open, 20.0)
    delivered = spin_until(executor, lambda: all(models.values()), 10.0)
    # Assert
    assert viewers_seen, 'the viewers were never discovered'
    assert not opened_for_viewers, 'round 1 opened with viewers and no drone'
    assert opened, 'round 1 did not open once both drones subscribed'
    assert delivered and all(m[0].round_index == 1 for m in models.values())
    for extra in (stranger, *drones):
        executor.remove_node(extra)
        extra.destroy_node()


def test_station_exits_when_the_drones_leave_although_a_viewer_stays(waiting_station):
    # Prepare: both drones listen, and a viewer
    node, probe, executor = waiting_station
    _listen_to_models(probe, [])
    updates = probe.create_publisher(UInt8MultiArray, names.UPDATES_TOPIC, names.UPDATES_QOS)
    drones = [rclpy.create_node(names.DRONE_NODE_NAME, namespace=names.drone_namespace(d))
              for d in (0, 1)]
    models = []
    for drone in drones:
        _listen_to_models(drone, models)
        executor.add_node(drone)
    assert spin_until(executor, lambda: models, 20.0), 'round 1 never reached the drones'
    model = models[0]
    zero = {n: np.zeros_like(t) for n, t in model.tensors.items()}
    for d in (0, 1):   # both answer: the only round closes and the finish goes out
        msg = UInt8MultiArray()
        msg.data = encode_frame(FrameKind.UPDATE, 1, d, model.fingerprint, zero,
                                {'num_samples': 10})
        updates.publish(msg)
    assert spin_until(executor, lambda: any(m.kind == FrameKind.CONTROL for m in models),
                      20.0), 'no finish'
    # Execute: the drones' nodes go away (they land and exit), the viewer stays
    for drone in drones:
        executor.remove_node(drone)
        drone.destroy_node()
    done = spin_until(executor, node.done.is_set, 10.0)
    # Assert: not after the 60 s finish_linger_s: a viewer does not keep the station up
    assert done, 'the station waited for a viewer as if it were a drone'


@pytest.fixture
def signed_station(tmp_path):
    """A 2-drone station with keys that requires signed updates (one round, 4 s)."""
    keys = tmp_path / 'keys'
    generate_fleet_keys(keys, 2)
    overrides = {**tiny_fleet_overrides(2, 14540), 'rounds.num_rounds': 1,
                 'rounds.deadline_s': 4.0, 'rounds.first_round_extra_s': 0.0,
                 'rounds.start_timeout_s': 0.5, 'security.keys_dir': str(keys),
                 'security.require_signatures': True}
    params = write_params_file(overrides, tmp_path / 'params.yaml')
    args = ['--ros-args', '--params-file', str(params), '-p', f'output_dir:={tmp_path}']
    with node_with_probe(GroundStationNode, args) as handles:
        yield (*handles, keys)


def test_signed_station_counts_forged_updates_by_reason_and_keeps_going(signed_station):
    # Prepare
    node, probe, executor, keys = signed_station
    raw = []
    probe.create_subscription(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC,
                              lambda m: raw.append(bytes(m.data)), names.GLOBAL_MODEL_QOS)
    updates = probe.create_publisher(UInt8MultiArray, names.UPDATES_TOPIC, names.UPDATES_QOS)
    assert spin_until(executor, lambda: raw, 20.0), 'no global model published'
    assert spin_until(executor, lambda: updates.get_subscription_count() > 0, 10.0)
    drone0 = load_frame_auth(SecurityConfig(str(keys)), 0, [GROUND_STATION_ID])
    model = decode_frame(drone0.open(raw[0], DecodeLimits()))    # verified with station.pub
    zero = {n: np.zeros_like(t) for n, t in model.tensors.items()}
    update = encode_frame(FrameKind.UPDATE, 1, 0, model.fingerprint, zero, {'num_samples': 10})
    frames = [update,                                                      # unsigned
              sign_frame(update, 0, Ed25519PrivateKey.generate()),          # forged
              drone0.seal(update)]                                         # good
    # Execute
    for data in frames:
        msg = UInt8MultiArray()
        msg.data = data
        updates.publish(msg)
    closed = spin_until(executor, lambda: not node.station.round_open
                        and node.station.records, 20.0)
    # Assert
    assert closed, 'round never closed'
    assert dict(node.station.rejected_total) == {'unsigned': 1, 'signature': 1}
    assert node.station.records[0].participants == [0]


def test_a_station_with_keys_signs_its_heartbeats_and_a_drone_takes_them(signed_station):
    # Prepare: drone 0's identity (station.pub), requiring signatures
    node, probe, executor, keys = signed_station
    security = SecurityConfig(str(keys), require_signatures=True)
    verifier = heartbeat_verifier(load_frame_auth(security, 0, [GROUND_STATION_ID]), security)
    carried: list = []
    probe.create_subscription(DiagnosticArray, names.STATION_HEARTBEAT_TOPIC,
                              lambda m: carried.append(msg_to_heartbeat_fields(m)),
                              names.STATION_HEARTBEAT_QOS)
    # Execute
    assert spin_until(executor, lambda: len(carried) >= 3, 10.0), 'no heartbeats'
    beats = [verifier.open(name, values) for name, values in carried]
    # Assert: every beat verifies, one boot, counters rising; the same beat again is a replay
    assert {b.run_id for b in beats} == {node.station.run_id}
    boots = {dict(values)['boot'] for _, values in carried}
    counters = [int(dict(values)['counter']) for _, values in carried]
    assert len(boots) == 1 and counters == sorted(set(counters)), counters
    with pytest.raises(HeartbeatRefused, match='not after the last taken'):
        verifier.open(*carried[-1])
    assert dict(verifier.refused) == {'replayed': 1}
