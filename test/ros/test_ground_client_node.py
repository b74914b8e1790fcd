"""ground_client over real rclpy/DDS: answers a UAV in range, refuses one out of range (by the
simulator's ground-truth pose, whatever the UAV claims), survives garbage, logs every visit."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from std_msgs.msg import UInt8MultiArray

from fl_uav.compression.codec import DecodeLimits
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.express_exchange import decode_clu, encode_delivery
from fl_uav.fleet.express_routes import express_layout
from fl_uav.fleet.ground_client import GroundClient
from fl_uav.fleet_run.launch_plan import write_params_file
from fl_uav.learning.models import build_model
from fl_uav.learning.weights import architecture_fingerprint, get_weights, weight_shapes
from fl_uav.ros import names
from fl_uav.ros.ground_client_node import GroundClientNode
from fl_uav.world.landcover import CLASS_NAMES
from test.ros.rosutil import node_with_probe, spin_until
from test.unit.fleet.test_express_fleet import EXPRESS

pytestmark = pytest.mark.ros


WARM_UP_HELD_S = 30.0     # a held warm-up gives up after this, so a failing test cannot hang


def _client_args(tmp_path):
    params = write_params_file({**EXPRESS, 'ground_clients.samples_per_client': 16,
                                'security.insecure': True}, tmp_path / 'params.yaml')
    return ['--ros-args', '-r', '__ns:=/gc1', '--params-file', str(params),
            '-p', 'client_id:=1', '-p', f'output_dir:={tmp_path}']


@pytest.fixture
def client_node(tmp_path):
    with node_with_probe(GroundClientNode, _client_args(tmp_path)) as handles:
        yield handles


def _pose(east, north, up):
    msg = PoseStamped()
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = east, north, up
    return msg


def test_in_range_answered_out_of_range_refused_garbage_survived(client_node, tmp_path):
    # Prepare
    node, probe, executor = client_node
    config = build_config(FleetConfig, EXPRESS)
    east, north = express_layout(config).clients_enu_m[1]
    weights = get_weights(build_model('tiny_cnn', len(CLASS_NAMES), 32))
    fingerprint, shapes = architecture_fingerprint(weights), weight_shapes(weights)
    truth = probe.create_publisher(PoseStamped, names.drone_topic(0, 'ground_truth/pose'),
                                   names.TELEMETRY_QOS)
    claimed = probe.create_publisher(PoseStamped, names.drone_topic(0, names.POSE_TOPIC),
                                     names.TELEMETRY_QOS)
    deliveries = probe.create_publisher(UInt8MultiArray, names.ground_client_topic(
        1, names.EXPRESS_MODEL_TOPIC), names.EXPRESS_QOS)
    clus = []
    probe.create_subscription(UInt8MultiArray, names.drone_topic(0, names.EXPRESS_CLU_TOPIC),
                              lambda m: clus.append(bytes(m.data)), names.EXPRESS_QOS)
    assert spin_until(executor, lambda: deliveries.get_subscription_count() > 0
                      and truth.get_subscription_count() > 0, 10.0)

    def deliver(round_index, data=None):
        msg = UInt8MultiArray()
        msg.data = data if data is not None else encode_delivery(
            0, round_index, 1, fingerprint, weights, 2)
        deliveries.publish(msg)

    # Execute + Assert: the UAV claims to hover above the client, the truth is 100 m away
    claimed.publish(_pose(east, north, 30.0))
    truth.publish(_pose(east + 100.0, north, 30.0))
    assert spin_until(executor, lambda: 0 in node.client._poses, 5.0)
    deliver(1)
    assert spin_until(executor, lambda: node.client.refused['out_of_range'] == 1, 5.0)
    # Garbage: counted, the node carries on
    deliver(1, b'\x01\x02garbage')
    assert spin_until(executor, lambda: node.client.rejected['bad_magic'] == 1, 5.0)
    # In range by the truth: answered with a zero CLU (nothing trained yet), then trains
    truth.publish(_pose(east + 3.0, north, 30.0))
    assert spin_until(executor, lambda: node.client._poses[0][0][0] == east + 3.0, 5.0)
    deliver(2)
    assert spin_until(executor, lambda: clus, 10.0), 'no CLU answered'
    clu = decode_clu(clus[0], DecodeLimits(), fingerprint, shapes, 0, 2, 1)
    assert clu.steps == 0 and all(not np.any(v) for v in clu.delta.values())
    assert clu.distance_m == pytest.approx(np.hypot(3.0, 30.0), abs=0.01)
    # The next visit, once the client has trained (a visit during training would stop it
    # and take the steps so far), carries a CLU trained from round 2's model
    assert spin_until(executor, lambda: node.client._steps == 2, 20.0)
    heard_s = node.client._poses[0][1]
    truth.publish(_pose(east + 3.0, north, 30.0))      # still hovering: a fresh pose
    assert spin_until(executor, lambda: node.client._poses[0][1] > heard_s, 5.0)
    deliver(3)
    assert spin_until(executor, lambda: len(clus) == 2, 20.0)
    second = decode_clu(clus[1], DecodeLimits(), fingerprint, shapes, 0, 3, 1)
    assert second.steps == 2 and second.metadata['base_round'] == 2
    assert any(np.any(v) for v in second.delta.values())
    log_path = tmp_path / 'ground_clients' / 'gc1.json'
    assert spin_until(executor, lambda: len(json.loads(log_path.read_text())['exchanges']) == 3,
                      5.0)
    log = json.loads(log_path.read_text())
    assert [(e['round_index'], e['reason']) for e in log['exchanges']] == [
        (1, 'out_of_range'), (2, 'exchanged'), (3, 'exchanged')]
    assert log['rejected'] == {'bad_magic': 1}


def test_a_visit_during_the_warm_up_is_answered_without_waiting_for_it(tmp_path, monkeypatch):
    # Arrange: a warm-up that lasts until released (a fleet's processes starting together
    # made the real one take ~5 s, the whole hover: the UAV left unanswered)
    release, warming = threading.Event(), threading.Event()

    def held_warm_up(self):
        warming.set()
        release.wait(WARM_UP_HELD_S)

    monkeypatch.setattr(GroundClient, 'warm_up', held_warm_up)
    config = build_config(FleetConfig, EXPRESS)
    east, north = express_layout(config).clients_enu_m[1]
    weights = get_weights(build_model('tiny_cnn', len(CLASS_NAMES), 32))
    try:
        with node_with_probe(GroundClientNode, _client_args(tmp_path)) as (node, probe,
                                                                           executor):
            truth = probe.create_publisher(
                PoseStamped, names.drone_topic(0, 'ground_truth/pose'), names.TELEMETRY_QOS)
            deliveries = probe.create_publisher(UInt8MultiArray, names.ground_client_topic(
                1, names.EXPRESS_MODEL_TOPIC), names.EXPRESS_QOS)
            clus = []
            probe.create_subscription(
                UInt8MultiArray, names.drone_topic(0, names.EXPRESS_CLU_TOPIC),
                lambda m: clus.append(bytes(m.data)), names.EXPRESS_QOS)
            assert spin_until(executor, lambda: deliveries.get_subscription_count() > 0
                              and truth.get_subscription_count() > 0, 10.0)
            assert warming.wait(10.0), 'the warm-up never started'
            truth.publish(_pose(east, north, 30.0))
            assert spin_until(executor, lambda: 0 in node.client._poses, 5.0)
            msg = UInt8MultiArray()
            msg.data = encode_delivery(0, 1, 1, architecture_fingerprint(weights), weights, 2)
            # Act
            deliveries.publish(msg)
            # Assert: answered while the warm-up is still running
            assert spin_until(executor, lambda: clus, 10.0), 'the visit waited for the warm-up'
            assert not release.is_set()
    finally:
        release.set()
