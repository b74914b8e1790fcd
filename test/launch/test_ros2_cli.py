"""The ros2 command line against a running fleet, as docs/field_guide.md shows it: `ros2 topic
list -t` against docs/architecture.md's topic table, `ros2 topic echo --once`, `ros2 param
describe` and `ros2 param set` (refused with fl_uav's reason)."""

from __future__ import annotations

import re
import subprocess

import pytest

from test.launch.conftest import REPO, ROS2, fleet_config, fleet_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
ARCHITECTURE = REPO / 'docs' / 'architecture.md'
# Topics of ROS 2 itself, not fl_uav's
ROS_TOPICS = {'/parameter_events', '/rosout'}
EXPRESS_ONLY = ('/express/',)
# rows of the table whose topic appears only with a setting the test fleet does not use
NOT_IN_THIS_FLEET = {'/uav<i>/trajectory', '/uav<i>/trajectory/markers'}   # 2ceoafl planner


def documented_topics() -> dict[str, str]:
    """docs/architecture.md's topic table: {name pattern: type as ros2 prints it}."""
    rows = re.findall(r'^\| `(/[^`]+)` \| (\w+)/(\w+) \|', ARCHITECTURE.read_text(), re.M)
    return {name: f'{package}/msg/{message}' for name, package, message in rows}


def _pattern(name: str) -> re.Pattern[str]:
    text = re.escape(name).replace(re.escape('<i>'), r'\d+').replace(re.escape('<j>'), r'\d+')
    return re.compile(text.replace(re.escape('<key>'), r'[a-z_]+') + '$')


def _ros2(env, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    """A ros2 command without the daemon (none is left behind); its --spin-time gives
    discovery time to see the fleet before it looks up a node or topic."""
    return subprocess.run([str(ROS2), *args], env=env, capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO, check=False)


@pytest.fixture
def running_fleet(start, tmp_path):
    config = fleet_config(tmp_path / 'fleet.yaml', 2, fleet_ports(2),
                          rounds__num_rounds=3)
    launch = start('launch', 'launch', 'fl_uav', 'fleet_sim.launch.py', 'num_drones:=2',
                   f'config:={config}', f'output_dir:={tmp_path / "run"}')
    launch.wait_for('round 1 closed', 240)
    return launch


def test_the_ros2_command_line_on_a_running_fleet(running_fleet, launch_env):
    env = launch_env
    # Act
    listed = _ros2(env, 'topic', 'list', '-t', '--no-daemon', '--spin-time', '5')
    # (the type and the latched QoS given: without the ros2 daemon, echo would ask the graph
    # before discovery has seen the publisher)
    echoed = _ros2(env, 'topic', 'echo', '--once', '--no-daemon', '--qos-durability',
                   'transient_local', '--qos-reliability', 'reliable', '/fl/metrics',
                   'diagnostic_msgs/msg/DiagnosticArray')
    described = _ros2(env, 'param', 'describe', '--no-daemon', '--spin-time', '5',
                      '/uav0/drone', 'flight.speed_m_s')
    refused = _ros2(env, 'param', 'set', '--no-daemon', '--spin-time', '5', '/ground_station',
                    'rounds.num_rounds', '5')
    # Assert: every fl_uav topic on the graph is in the table, with the table's type, and
    # every row of the table this fleet publishes is on the graph
    assert listed.returncode == 0, listed.stderr
    graph = dict(re.findall(r'^(\S+) \[(\S+)\]$', listed.stdout, re.M))
    table = documented_topics()
    patterns = {name: _pattern(name) for name in table}
    for topic, kind in graph.items():
        if topic in ROS_TOPICS:
            continue
        rows = [name for name, p in patterns.items() if p.match(topic)]
        assert rows, f"{topic} [{kind}] is not in docs/architecture.md's topic table"
        assert table[rows[0]] == kind, f'{topic}: {kind} on the graph, {table[rows[0]]} in docs'
    expected = {name for name in table if not any(x in name for x in EXPRESS_ONLY)}
    missing = [name for name in expected - NOT_IN_THIS_FLEET
               if not any(patterns[name].match(topic) for topic in graph)]
    assert not missing, f'documented but not on the graph: {missing}'
    # Assert: the echo, the description, the refusal the field guide quotes
    assert echoed.returncode == 0 and 'accuracy' in echoed.stdout, echoed.stderr[-2000:]
    assert described.returncode == 0, described.stderr
    assert 'Parameter name: flight.speed_m_s' in described.stdout
    assert 'Type: double' in described.stdout
    assert ('Setting parameter failed: rounds.num_rounds: fl_uav nodes read their parameters '
            'once') in refused.stdout + refused.stderr
