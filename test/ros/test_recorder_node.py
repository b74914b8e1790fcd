"""The recorder node: real messages from a publisher recorded and read back; a recorder
stopped by SIGINT or SIGTERM writes the messages it was delivered and leaves a bag that
opens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import rclpy
from geometry_msgs.msg import PoseStamped
from mcap.reader import make_reader
from mcap.stream_reader import StreamReader
from mcap_ros2.decoder import DecoderFactory
from rclpy.executors import SingleThreadedExecutor
from rosbags.highlevel import AnyReader
from std_msgs.msg import Float64
from visualization_msgs.msg import Marker, MarkerArray

from fl_uav.fleet.recording import READY_LINE, BagWriter, TopicSelection
from fl_uav.ros import names
from fl_uav.ros.recorder_node import RecorderNode
from test.ros.rosutil import spin_until

TIMEOUT_S = 20.0
POSE_TOPIC = names.drone_topic(0, names.POSE_TOPIC)
ACCURACY_TOPIC = names.metric_topic('accuracy')


def _pose(x_m: float) -> PoseStamped:
    msg = PoseStamped()
    msg.header.frame_id = names.MAP_FRAME
    msg.pose.position.x = x_m
    msg.pose.orientation.w = 1.0
    return msg


def _markers() -> MarkerArray:
    marker = Marker()
    marker.header.frame_id = names.MAP_FRAME
    marker.ns = 'planned_paths'
    marker.id = 3
    marker.text = 'uav3'
    marker.color.r = 0.25
    return MarkerArray(markers=[marker])


def test_recorded_messages_read_back_equal_latched_ones_published_before_it_started(tmp_path):
    # Arrange: latched markers and metrics published before the recorder exists
    rclpy.init()
    publisher = rclpy.create_node('publisher')
    markers = publisher.create_publisher(MarkerArray, names.MARKERS_TOPIC, names.MARKERS_QOS)
    metrics = publisher.create_publisher(Float64, ACCURACY_TOPIC, names.METRICS_QOS)
    poses = publisher.create_publisher(PoseStamped, POSE_TOPIC, names.TELEMETRY_PUB_QOS)
    markers.publish(_markers())
    for value in (0.5, 0.75):
        metrics.publish(Float64(data=value))
    writer = BagWriter(tmp_path / 'bag')
    executor = SingleThreadedExecutor()
    try:
        recorder = RecorderNode(writer, TopicSelection(), discovery_period_s=0.1)
        executor.add_node(publisher)
        executor.add_node(recorder)
        # Act: poses once the recorder listens (a volatile topic has no backlog)
        assert spin_until(executor, lambda: poses.get_subscription_count() > 0, TIMEOUT_S)
        for x_m in (1.0, 2.0, 3.0):
            poses.publish(_pose(x_m))
        counts = {POSE_TOPIC: 3, names.MARKERS_TOPIC: 1, ACCURACY_TOPIC: 2}
        assert spin_until(executor, lambda: {t: r.messages for t, r in writer.topics.items()}
                          == counts, TIMEOUT_S), writer.topics
        summary = writer.close()
    finally:
        executor.shutdown()
        publisher.destroy_node()
        rclpy.try_shutdown()
    # Assert: rosbags on the bag directory, mcap_ros2 on its .mcap
    with AnyReader([tmp_path / 'bag']) as reader:
        read = {}
        for connection, _, raw in reader.messages():
            read.setdefault(connection.topic, []).append(
                reader.deserialize(raw, connection.msgtype))
        types = {c.topic: c.msgtype for c in reader.connections}
    assert types == {POSE_TOPIC: 'geometry_msgs/msg/PoseStamped',
                     names.MARKERS_TOPIC: 'visualization_msgs/msg/MarkerArray',
                     ACCURACY_TOPIC: 'std_msgs/msg/Float64'}
    assert [m.pose.position.x for m in read[POSE_TOPIC]] == [1.0, 2.0, 3.0]
    assert [m.data for m in read[ACCURACY_TOPIC]] == [0.5, 0.75]
    (array,) = read[names.MARKERS_TOPIC]
    assert [(m.ns, m.id, m.text, m.color.r) for m in array.markers] == [
        ('planned_paths', 3, 'uav3', 0.25)]
    with open(writer.mcap_path, 'rb') as stream:
        decoded = [(channel.topic, schema.name, msg) for schema, channel, _, msg in
                   make_reader(stream, decoder_factories=[DecoderFactory()])
                   .iter_decoded_messages()]
    assert {(t, s) for t, s, _ in decoded} == {
        (POSE_TOPIC, 'geometry_msgs/msg/PoseStamped'),
        (names.MARKERS_TOPIC, 'visualization_msgs/msg/MarkerArray'),
        (ACCURACY_TOPIC, 'std_msgs/msg/Float64')}
    assert [m.markers[0].text for t, _, m in decoded if t == names.MARKERS_TOPIC] == ['uav3']
    assert summary['messages'] == 6


@pytest.mark.parametrize('stop_signals', [[signal.SIGINT], [signal.SIGTERM]])
def test_a_signalled_recorder_writes_the_last_messages_and_closes_a_bag_that_opens(
        tmp_path, stop_signals):
    # Arrange: a latched metric, and the recorder as its own process (as fl-uav record runs)
    rclpy.init()
    publisher = rclpy.create_node('publisher')
    metrics = publisher.create_publisher(Float64, ACCURACY_TOPIC, names.METRICS_QOS)
    poses = publisher.create_publisher(PoseStamped, POSE_TOPIC, names.TELEMETRY_PUB_QOS)
    metrics.publish(Float64(data=0.625))
    bag = tmp_path / 'bag'
    log = tmp_path / 'recorder.log'
    with open(log, 'wb') as out:
        process = subprocess.Popen([sys.executable, '-m', 'fl_uav.cli', 'record', '--out',
                                    str(bag)], stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, 'PYTHONUNBUFFERED': '1'})
    executor = SingleThreadedExecutor()
    executor.add_node(publisher)
    try:
        # the message is on disk (flushed) once the .mcap holds more than its header
        assert spin_until(executor, lambda: _mcap_holds_a_message(bag)
                          and poses.get_subscription_count() > 0, TIMEOUT_S), log.read_text()
        assert READY_LINE in log.read_text()
        # Act: the signal right after the last poses (delivered, not yet written)
        for x_m in (1.0, 2.0, 3.0, 4.0, 5.0):
            poses.publish(_pose(x_m))
        for stop_signal in stop_signals:
            process.send_signal(stop_signal)
        code = process.wait(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        executor.shutdown()
        publisher.destroy_node()
        rclpy.try_shutdown()
    # Assert: exit 0, metadata, every message; the MCAP summary read by mcap, decoded by
    # mcap_ros2
    assert code == 0, log.read_text()
    assert (bag / 'metadata.yaml').is_file()
    with AnyReader([bag]) as reader:
        values = {c.topic: [] for c in reader.connections}
        for connection, _, raw in reader.messages():
            message = reader.deserialize(raw, connection.msgtype)
            values[connection.topic].append(
                message.data if connection.topic == ACCURACY_TOPIC else message.pose.position.x)
    assert values == {ACCURACY_TOPIC: [0.625], POSE_TOPIC: [1.0, 2.0, 3.0, 4.0, 5.0]}
    with open(bag / 'bag.mcap', 'rb') as stream:
        reader = make_reader(stream, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        decoded = [m for _, _, _, m in reader.iter_decoded_messages()]
    assert summary is not None and summary.statistics.message_count == 6
    assert len(decoded) == 6
    assert 'recorded 6 messages on 2 topics' in log.read_text()


def test_a_second_ctrl_c_while_the_bag_closes_does_not_cut_the_close_short(tmp_path):
    # Arrange: a Ctrl-C that lands inside the close (an impatient Ctrl-C Ctrl-C)
    import fl_uav.ros.recorder_node as recorder_node

    writer = BagWriter(tmp_path / 'bag')
    close = writer.close

    def close_under_a_ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)
        return close()

    writer.close = close_under_a_ctrl_c
    # Act
    summary = recorder_node.record(writer, TopicSelection(), duration_s=0.0,
                                   echo=lambda _: None)
    # Assert: closed; the bag opens
    assert summary['messages'] == 0
    assert (tmp_path / 'bag' / 'metadata.yaml').is_file()
    with AnyReader([tmp_path / 'bag']) as reader:
        assert reader.connections == []


def _mcap_holds_a_message(bag: Path) -> bool:
    """True once a flushed chunk with a message is in the bag's .mcap."""
    path = bag / f'{bag.name}.mcap'
    if not path.is_file():
        return False
    with open(path, 'rb') as stream:
        try:
            return any(type(r).__name__ == 'Message' for r in StreamReader(stream).records)
        except Exception:  # noqa: BLE001 - a file still being written ends mid-record
            return False


def test_a_recorder_whose_ros_does_not_start_still_closes_its_bag(tmp_path, monkeypatch):
    # Arrange: rclpy.init fails (e.g. a bad domain or a broken RMW) after the bag was opened
    import fl_uav.ros.recorder_node as recorder_node

    def failing_init(**_kwargs):
        raise RuntimeError('rmw failed')

    monkeypatch.setattr(recorder_node.rclpy, 'init', failing_init)
    writer = BagWriter(tmp_path / 'bag')
    # Act
    with pytest.raises(RuntimeError, match='rmw failed'):
        recorder_node.record(writer, TopicSelection(), duration_s=0.0, echo=lambda _: None)
    # Assert: the bag is closed (its metadata written), not left half open
    assert (tmp_path / 'bag' / 'metadata.yaml').is_file()
