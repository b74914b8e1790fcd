"""The ros2 command line against one running fleet, as README.md and docs/field_guide.md show it
(test/unit/test_doc_ros2_commands.py checks that every `ros2 ...` they show runs here or in
another test of test/launch, or is named there as not runnable): `ros2 topic list -t` against
docs/architecture.md's topic table, `ros2 topic echo` and `ros2 topic hz`, `ros2 param
describe` and `ros2 param set` (refused with fl_uav's reason), `ros2 pkg`, and `ros2 run` of a
ground client; and config/fl_uav.rviz as installed: every topic it displays is on the graph with
the display's message type."""

from __future__ import annotations

import re
import signal

import pytest
import yaml

from test.launch.conftest import fleet_config, fleet_ports
from test.monitoring import (
    documented_row,
    documented_topics,
    drone_index,
    rviz_topics,
    topic_pattern,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
NUM_DRONES = 2
# Topics of ROS 2 itself, not fl_uav's
ROS_TOPICS = {'/parameter_events', '/rosout'}
# documented topics this fleet does not publish: express mode's, a real camera's (the camera
# node's camera_info) and a compressed camera transport's
NOT_IN_THIS_FLEET = ('/express/', '/camera/camera_info', '/camera/image_raw/compressed')
# what `ros2 pkg executables fl_uav` lists: docs/field_guide.md's "Executables:"
EXECUTABLES = {'ground_station_node', 'drone_node', 'sim_camera_node', 'autopilot_sim_node',
               'ground_client_node', 'camera_node', 'fl-uav'}
COMMAND_TIMEOUT_S = 90.0


@pytest.fixture
def running_fleet(start, tmp_path):
    config = fleet_config(tmp_path / 'fleet.yaml', NUM_DRONES, fleet_ports(NUM_DRONES),
                          rounds__num_rounds=3)
    launch = start('launch', 'launch', 'fl_uav', 'fleet_sim.launch.py', 'num_drones:=2',
                   f'config:={config}', f'output_dir:={tmp_path / "run"}')
    launch.wait_for('round 1 closed', 240)
    return config


def _express_config(config, tmp_path):
    """The running fleet's config in express mode, for one ground client beside it."""
    doc = yaml.safe_load(config.read_text())
    params = doc['/**']['ros__parameters']
    params['mode'] = 'express'
    params['express']['num_uavs'] = NUM_DRONES
    params['aggregation']['strategy'] = 'fedex_sync'
    params['security']['insecure'] = True    # a client beside the fleet, without gc keys
    path = tmp_path / 'express.yaml'
    path.write_text(yaml.safe_dump(doc))
    return path


def _finished(handle) -> str:
    """A command's output (stdout and stderr) once it has ended with exit code 0."""
    code = handle.wait(COMMAND_TIMEOUT_S)
    assert code == 0, f'exit {code}:\n{handle.text[-3000:]}'
    return handle.text


def _stopped(handle, needle: str) -> str:
    """A command's output once ``needle`` appeared in it and a Ctrl-C stopped it."""
    handle.wait_for(needle, COMMAND_TIMEOUT_S)
    handle.signal_group(signal.SIGINT)
    handle.wait(30)
    return handle.text


def test_the_ros2_command_line_on_a_running_fleet(running_fleet, start, ament_prefix,
                                                   tmp_path):
    # Act: every command at once, each without the daemon (none is left behind); --spin-time
    # gives discovery time to see the fleet before a node is looked up; an echo is given the
    # type and the publisher's QoS (it would otherwise ask the graph before discovery)
    listed = start('list', 'topic', 'list', '-t', '--no-daemon', '--spin-time', '5')
    metrics = start('metrics', 'topic', 'echo', '--once', '--no-daemon', '--qos-durability',
                    'transient_local', '--qos-reliability', 'reliable', '/fl/metrics',
                    'diagnostic_msgs/msg/DiagnosticArray')
    model = start('model', 'topic', 'echo', '--once', '--no-daemon', '--qos-durability',
                  'transient_local', '--qos-reliability', 'reliable', '/fl/global_model',
                  'std_msgs/msg/UInt8MultiArray', '--field', 'layout')
    diagnostics = start('diagnostics', 'topic', 'echo', '--once', '--no-daemon', '/diagnostics',
                        'diagnostic_msgs/msg/DiagnosticArray')
    heartbeat = start('heartbeat', 'topic', 'echo', '--once', '--no-daemon',
                      '--qos-reliability', 'best_effort', '/fl/station_heartbeat',
                      'diagnostic_msgs/msg/DiagnosticArray')
    rosout = start('rosout', 'topic', 'echo', '--once', '--no-daemon', '--qos-durability',
                   'transient_local', '--qos-reliability', 'reliable', '/rosout',
                   'rcl_interfaces/msg/Log')
    rate = start('hz', 'topic', 'hz', '/uav0/pose', '--window', '5')
    described = start('describe', 'param', 'describe', '--no-daemon', '--spin-time', '5',
                      '/uav0/drone', 'flight.speed_m_s')
    refused = start('set', 'param', 'set', '--no-daemon', '--spin-time', '5', '/ground_station',
                    'rounds.num_rounds', '5')
    executables = start('executables', 'pkg', 'executables', 'fl_uav')
    prefix = start('prefix', 'pkg', 'prefix', 'fl_uav')
    client = start('client', 'run', 'fl_uav', 'ground_client_node', '--ros-args', '-r',
                   '__ns:=/gc0', '--params-file', str(_express_config(running_fleet, tmp_path)),
                   '-p', 'client_id:=0', '-p', f'output_dir:={tmp_path / "client"}')
    texts = {name: _finished(handle) for name, handle in [
        ('listed', listed), ('metrics', metrics), ('model', model),
        ('diagnostics', diagnostics), ('heartbeat', heartbeat), ('rosout', rosout),
        ('described', described), ('executables', executables), ('prefix', prefix)]}
    refused.wait(COMMAND_TIMEOUT_S)
    texts['refused'] = refused.text
    # (hz and the node run until a Ctrl-C: stopped once they have said what is checked)
    texts['rate'] = _stopped(rate, 'average rate:')
    texts['client'] = _stopped(client, 'ground client 0 at')
    # Assert: every fl_uav topic on the graph is in the table, with the table's type, and
    # every row of the table this fleet publishes is on the graph
    graph = dict(re.findall(r'^(\S+) \[(\S+)\]$', texts['listed'], re.M))
    table = documented_topics()
    for topic, kind in graph.items():
        if topic in ROS_TOPICS:
            continue
        row = documented_row(topic)
        assert row, f"{topic} [{kind}] is not in docs/architecture.md's topic table"
        assert table[row] == kind, f'{topic}: {kind} on the graph, {table[row]} in docs'
    expected = {name for name in table if not any(x in name for x in NOT_IN_THIS_FLEET)}
    missing = [name for name in expected
               if not any(topic_pattern(name).match(topic) for topic in graph)]
    assert not missing, f'documented but not on the graph: {missing}'
    # Assert: what the field guide says each command shows
    assert 'accuracy' in texts['metrics']
    assert 'data_offset:' in texts['model']    # --field layout: the frame's layout alone
    assert re.search(r"name: 'fl_uav: (uav\d+|ground_station)'", texts['diagnostics'])
    assert "name: 'fl_uav: ground_station heartbeat'" in texts['heartbeat']
    assert 'level:' in texts['rosout'] and 'msg:' in texts['rosout']
    hz = [float(v) for v in re.findall(r'average rate: ([\d.]+)', texts['rate'])]
    assert hz and hz[-1] > 2.0, texts['rate'][-2000:]
    assert 'Parameter name: flight.speed_m_s' in texts['described']
    assert 'Type: double' in texts['described']
    assert ('Setting parameter failed: rounds.num_rounds: fl_uav nodes read their parameters '
            'once') in texts['refused']
    assert set(re.findall(r'^fl_uav (\S+)$', texts['executables'], re.M)) == EXECUTABLES
    assert texts['prefix'].strip().splitlines()[-1] == str(ament_prefix)
    # Assert: the ground client started as `ros2 run` was told (namespace, parameters) and a
    # Ctrl-C stopped it cleanly
    assert client.process.returncode == 0, texts['client'][-3000:]
    assert '[gc0.ground_client]: ground client 0 at' in texts['client']
    assert (tmp_path / 'client' / 'ground_clients' / 'gc0.json').is_file()
    # Assert: every topic the installed rviz config displays is on the graph with the display's
    # type (drones beyond this fleet's two: a documented topic of that type)
    rviz = ament_prefix / 'share' / 'fl_uav' / 'config' / 'fl_uav.rviz'
    shown = rviz_topics(yaml.safe_load(rviz.read_text()))
    for topic, kind in shown.items():
        index = drone_index(topic)
        if index is not None and index >= NUM_DRONES:
            assert table.get(documented_row(topic) or '') == kind, topic
        else:
            assert graph.get(topic) == kind, f'rviz shows {topic} [{kind}]; graph: {graph}'
    assert {drone_index(topic) for topic in shown} >= {None, 0, 1}
