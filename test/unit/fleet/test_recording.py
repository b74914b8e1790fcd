"""Recording (ROS-free): topic selection, QoS adaptation, schemas, the bag and its read-back."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from mcap.stream_reader import StreamReader
from mcap_ros2.decoder import DecoderFactory
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

from fl_uav.fleet.recording import (
    LATCHED_DEPTH,
    BagWriter,
    QosOffer,
    RecordingError,
    SchemaStore,
    StopSignals,
    TopicSelection,
    check_new_bag,
    nothing_recorded,
    read_bag_summary,
    subscription_qos,
)

FLOAT64 = 'std_msgs/msg/Float64'
TYPESTORE = get_typestore(Stores.ROS2_KILTED)


def _float64(value: float) -> bytes:
    return bytes(TYPESTORE.serialize_cdr(TYPESTORE.types[FLOAT64](data=value), FLOAT64))


@pytest.mark.parametrize(('topic', 'msgtype', 'recorded'), [
    ('/uav0/pose', 'geometry_msgs/msg/PoseStamped', True),
    ('/uav12/plan', 'nav_msgs/msg/Path', True),
    ('/uav1/trajectory/markers', 'visualization_msgs/msg/MarkerArray', True),
    ('/fl/markers', 'visualization_msgs/msg/MarkerArray', True),
    ('/fl/metrics/accuracy', FLOAT64, True),
    ('/fl/station_heartbeat', 'diagnostic_msgs/msg/DiagnosticArray', True),
    ('/diagnostics', 'diagnostic_msgs/msg/DiagnosticArray', True),
    ('/fl/global_model', 'std_msgs/msg/UInt8MultiArray', False),
    ('/fl/updates', 'std_msgs/msg/UInt8MultiArray', False),
    ('/gc3/express/model', 'std_msgs/msg/UInt8MultiArray', False),
    ('/uav0/express/clu', 'std_msgs/msg/UInt8MultiArray', False),
    ('/uav0/camera/image_raw', 'sensor_msgs/msg/Image', False),
    ('/uav0/camera/other', 'sensor_msgs/msg/Image', False),   # an image under any name
    ('/rosout', 'rcl_interfaces/msg/Log', False),
    ('/parameter_events', 'rcl_interfaces/msg/ParameterEvent', False),
    ('/fl/global_model_info', FLOAT64, True),                  # whole names, not prefixes
])
def test_default_selection_is_the_fleets_topics_without_the_bulky_ones(topic, msgtype,
                                                                       recorded):
    # Arrange
    selection = TopicSelection()
    # Act / Assert
    assert selection.selects(topic, msgtype) is recorded


def test_all_topics_and_exclude_patterns():
    # Arrange
    everything = TopicSelection(record_all=True)
    no_poses = TopicSelection(record_all=True, exclude=r'.*/pose')
    # Act / Assert
    assert everything.selects('/fl/global_model', 'std_msgs/msg/UInt8MultiArray')
    assert everything.selects('/rosout', 'rcl_interfaces/msg/Log')
    assert not no_poses.selects('/uav0/pose', 'geometry_msgs/msg/PoseStamped')
    assert no_poses.selects('/uav0/ground_truth/pose_rate', FLOAT64)


def test_topics_pattern_records_what_it_names_bulky_ones_too():
    # Arrange
    selection = TopicSelection(topics=r'/fl/global_model|/uav\d+/pose', exclude=r'/uav1/.*')
    # Act / Assert
    assert selection.selects('/fl/global_model', 'std_msgs/msg/UInt8MultiArray')
    assert selection.selects('/uav0/pose', 'geometry_msgs/msg/PoseStamped')
    assert not selection.selects('/uav1/pose', 'geometry_msgs/msg/PoseStamped')
    assert not selection.selects('/fl/markers', 'visualization_msgs/msg/MarkerArray')


@pytest.mark.parametrize('kwargs', [{'topics': '/uav[0-9'}, {'exclude': '(unclosed'},
                                    {'topics': '/fl/.*', 'record_all': True}])
def test_bad_selection_is_a_clear_error(kwargs):
    # Act / Assert
    with pytest.raises(RecordingError, match='--topics|--exclude|--all'):
        TopicSelection(**kwargs)


def test_subscription_qos_matches_every_publisher_and_holds_the_latched_backlog():
    # Arrange
    latched = QosOffer(reliable=True, transient_local=True, depth=0)    # remote: depth unknown
    volatile = QosOffer(reliable=True, transient_local=False, depth=5)
    best_effort = QosOffer(reliable=False, transient_local=False, depth=1)
    # Act
    markers = subscription_qos([latched])
    mixed = subscription_qos([latched, volatile])
    heartbeat = subscription_qos([best_effort, volatile])
    many = subscription_qos([QosOffer(True, True, 80), QosOffer(True, True, 80)])
    # Assert
    assert markers == QosOffer(reliable=True, transient_local=True, depth=LATCHED_DEPTH)
    assert (mixed.reliable, mixed.transient_local) == (True, False)
    assert (heartbeat.reliable, heartbeat.transient_local) == (False, False)
    assert many.depth == 160
    with pytest.raises(RecordingError, match='no publisher'):
        subscription_qos([])


@pytest.mark.parametrize('msgtype', ['geometry_msgs/msg/PoseStamped', FLOAT64,
                                     'visualization_msgs/msg/MarkerArray', 'nav_msgs/msg/Path',
                                     'sensor_msgs/msg/BatteryState',
                                     'diagnostic_msgs/msg/DiagnosticArray'])
def test_schema_of_every_fleet_type_is_the_full_definition(msgtype):
    # Act
    text, rihs01 = SchemaStore(share_dirs=[]).definition(msgtype)
    # Assert
    assert rihs01.startswith('RIHS01_')
    if msgtype != FLOAT64:     # nested types follow, each after a separator line and its name
        assert '\nMSG: std_msgs/Header\n' in text


def test_schema_of_a_type_the_typestore_lacks_comes_from_the_packages_msg_files(tmp_path):
    # Arrange: a package with a message using another of its own and a standard one
    msg_dir = tmp_path / 'share' / 'fleet_msgs' / 'msg'
    msg_dir.mkdir(parents=True)
    (msg_dir / 'Reading.msg').write_text('float64 value_m\n')
    (msg_dir / 'Survey.msg').write_text('std_msgs/Header header\nReading[] readings\n')
    store = SchemaStore(share_dirs=[tmp_path / 'share'])
    # Act
    text, rihs01 = store.definition('fleet_msgs/msg/Survey')
    # Assert
    assert text.startswith('std_msgs/Header header\nfleet_msgs/Reading[] readings\n')
    assert '\nMSG: std_msgs/Header\n' in text
    assert 'MSG: fleet_msgs/Reading\nfloat64 value_m' in text
    assert rihs01.startswith('RIHS01_')


def test_unknown_type_is_an_error_naming_it_and_where_it_was_looked_for(tmp_path):
    # Act / Assert
    with pytest.raises(RecordingError, match=r'no definition of nope_msgs/msg/Thing .*'
                                             r'nope_msgs/msg/Thing\.msg'):
        SchemaStore(share_dirs=[tmp_path]).definition('nope_msgs/msg/Thing')


def test_bag_round_trip_with_offered_qos_and_summary(tmp_path):
    # Arrange
    writer = BagWriter(tmp_path / 'bag')
    writer.add_topic('/fl/metrics/accuracy', FLOAT64, [QosOffer(True, True, 50)])
    # Act
    for i, value in enumerate((0.25, 0.5, 0.75)):
        writer.write('/fl/metrics/accuracy', _float64(value), 1_000 + i)
    summary = writer.close()
    # Assert
    with AnyReader([tmp_path / 'bag']) as reader:
        values = [reader.deserialize(raw, c.msgtype).data for c, _, raw in reader.messages()]
        (connection,) = reader.connections
    assert values == [0.25, 0.5, 0.75]
    qos = connection.ext.offered_qos_profiles[0]
    assert (qos.durability.name, qos.reliability.name, qos.depth) == (
        'TRANSIENT_LOCAL', 'RELIABLE', 50)
    assert summary['topics'] == {'/fl/metrics/accuracy': {'type': FLOAT64, 'messages': 3}}
    assert summary == read_bag_summary(tmp_path / 'bag')
    assert (tmp_path / 'bag' / 'metadata.yaml').is_file()


def test_flushed_messages_survive_a_writer_that_never_closes(tmp_path):
    # Arrange: a copy of the file as a killed recorder leaves it (no summary, no metadata)
    writer = BagWriter(tmp_path / 'bag')
    writer.add_topic('/fl/metrics/loss', FLOAT64, [QosOffer(True, True, 50)])
    writer.write('/fl/metrics/loss', _float64(1.5), 10)
    writer.write('/fl/metrics/loss', _float64(0.5), 20)
    # Act
    writer.flush()
    killed = tmp_path / 'killed.mcap'
    shutil.copy(writer.mcap_path, killed)
    writer.close()
    # Assert: mcap's stream reader decodes every flushed message before the missing summary
    decoder = DecoderFactory().decoder_for('cdr', _schema_of(killed))
    values = [decoder(m.data).data for m in _stream_records(killed) if _is_message(m)]
    assert values == [1.5, 0.5]


def test_existing_or_unwritable_output_is_refused_before_anything_is_written(tmp_path):
    # Arrange
    (tmp_path / 'bag').mkdir()
    # Act / Assert
    with pytest.raises(RecordingError, match='exists already'):
        BagWriter(tmp_path / 'bag')
    with pytest.raises(RecordingError, match='no writable directory'):
        BagWriter(tmp_path / 'missing' / 'bag')
    assert sorted(p.name for p in tmp_path.iterdir()) == ['bag']


def test_a_bag_directory_that_holds_files_is_refused_naming_them_and_left_as_it_was(
        tmp_path):
    # Arrange: an earlier recording
    earlier = BagWriter(tmp_path / 'bag')
    earlier.add_topic('/fl/metrics/round', FLOAT64, [QosOffer(True, True, 50)])
    earlier.write('/fl/metrics/round', _float64(1.0), 5)
    earlier.close()
    before = {p.name: p.read_bytes() for p in (tmp_path / 'bag').iterdir()}
    # Act
    with pytest.raises(RecordingError) as refused:
        BagWriter(tmp_path / 'bag')
    # Assert
    assert 'holds 2 file(s) already (bag.mcap, metadata.yaml)' in str(refused.value)
    assert 'never over another' in str(refused.value)
    assert {p.name: p.read_bytes() for p in (tmp_path / 'bag').iterdir()} == before


def test_a_bag_in_a_directory_this_user_cannot_write_is_refused(tmp_path, monkeypatch):
    # Arrange: tests may run as root, for whom every directory is writable
    locked = tmp_path / 'locked'
    locked.mkdir()
    monkeypatch.setattr(os, 'access', lambda path, mode: Path(path) != locked)
    # Act / Assert
    with pytest.raises(RecordingError, match=f'{locked} is no writable directory'):
        check_new_bag(locked / 'bag')
    assert list(locked.iterdir()) == []


def test_nothing_recorded_names_the_selection_and_the_topics_it_missed():
    # Arrange
    selection = TopicSelection(topics='/uav[0-9]+/poses', exclude='/fl/.*')
    seen = ['/rosout', '/parameter_events', '/uav0/pose', '/fl/markers']
    # Act
    reason = nothing_recorded(selection, seen, 42)
    # Assert
    assert reason == ("--topics '/uav[0-9]+/poses' --exclude '/fl/.*' matched none of the "
                      'topics seen (/fl/markers, /uav0/pose)')


def test_nothing_recorded_without_a_fleet_names_the_domain():
    # Act
    reason = nothing_recorded(TopicSelection(), ['/rosout', '/parameter_events'], 42)
    # Assert
    assert "no topic but ROS's own appeared on ROS_DOMAIN_ID=42" in reason


def test_stop_signals_turn_sigint_and_sigterm_into_a_request_and_restore_the_handlers():
    # Arrange
    previous = signal.getsignal(signal.SIGTERM)
    # Act
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)      # handled at the next bytecode
        requested_after_one = stop.requested, stop.hurried
        os.kill(os.getpid(), signal.SIGINT)       # a second one: hurry
        requested_after_two = stop.requested, stop.hurried
    # Assert
    assert requested_after_one == (True, False)
    assert requested_after_two == (True, True)
    assert stop.received == ['SIGTERM', 'SIGINT']
    assert signal.getsignal(signal.SIGTERM) is previous


def test_unknown_type_registers_nothing_and_the_bag_stays_usable(tmp_path):
    # Arrange
    writer = BagWriter(tmp_path / 'bag', SchemaStore(share_dirs=[]))
    # Act
    with pytest.raises(RecordingError, match='nope_msgs/msg/Thing'):
        writer.add_topic('/fl/thing', 'nope_msgs/msg/Thing', [QosOffer(True, False, 5)])
    writer.add_topic('/fl/metrics/round', FLOAT64, [QosOffer(True, True, 50)])
    writer.write('/fl/metrics/round', _float64(1.0), 5)
    summary = writer.close()
    # Assert
    assert summary['topics'] == {'/fl/metrics/round': {'type': FLOAT64, 'messages': 1}}


def _stream_records(path: Path) -> list:
    records = []
    with open(path, 'rb') as stream:
        try:
            for record in StreamReader(stream).records:
                records.append(record)
        except Exception:  # noqa: BLE001 - the truncated end is what is being tested
            pass
    return records


def _is_message(record) -> bool:
    return type(record).__name__ == 'Message'


def _schema_of(path: Path):
    return next(r for r in _stream_records(path) if type(r).__name__ == 'Schema')
