"""ground_station over real rclpy/DDS: a round with bad input and a silent drone."""

from __future__ import annotations

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from std_msgs.msg import UInt8MultiArray
from visualization_msgs.msg import MarkerArray

from fl_uav.compression.codec import FrameKind, decode_frame, encode_frame
from fl_uav.fleet.run_log import read_progress
from fl_uav.ros import names
from fl_uav.ros.ground_station_node import GroundStationNode
from fl_uav.sim.launch_plan import write_params_file
from test.conftest import tiny_fleet_overrides
from test.ros.rosutil import node_with_probe, spin_until

pytestmark = pytest.mark.ros


@pytest.fixture
def station(tmp_path):
    overrides = {**tiny_fleet_overrides(2, 14540), 'rounds.num_rounds': 1,
                 'rounds.deadline_s': 4.0, 'rounds.first_round_extra_s': 0.0,
                 'rounds.start_timeout_s': 0.5}
    params = write_params_file(overrides, tmp_path / 'params.yaml')
    args = ['--ros-args', '--params-file', str(params), '-p', f'output_dir:={tmp_path}']
    with node_with_probe(GroundStationNode, args) as handles:
        yield handles


def test_round_survives_bad_frames_and_closes_at_deadline(station, tmp_path):
    # Prepare
    node, probe, executor = station
    models, metrics, markers = [], [], []
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
    good = encode_frame(FrameKind.UPDATE, 1, 0, model.fingerprint, zero, {'num_samples': 10})
    bad_frames = [
        b'garbage that is not a frame',
        good[:len(good) // 2],
        encode_frame(FrameKind.UPDATE, 1, 0, model.fingerprint, nan, {'num_samples': 10}),
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
    namespaces = [m.ns for m in markers[0].markers]
    assert namespaces.count('plans') == 2 and namespaces.count('class_regions') > 0
    rows = read_progress(tmp_path)
    assert rows[0]['participants'] == [0] and rows[0]['late_or_missing'] == [1]
