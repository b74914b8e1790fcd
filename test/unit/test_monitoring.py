"""What a user opens to watch a fleet, checked without ROS: config/fl_uav.rviz (rviz2's display
config) shows docs/architecture.md's topics with their types in Fixed Frame `map`, reads the
latched ones Transient Local, and has each drone of config/fleet.yaml's fleet in its marker
colour; the field guide's rqt_plot lines plot fields the documented topics have.
test/launch/test_ros2_cli.py checks the installed config against a running fleet."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from fl_uav.planning.display import uav_colour
from test.monitoring import (
    REPO,
    RVIZ_CONFIG,
    RVIZ_DISPLAY_TYPES,
    RVIZ_TOPICLESS,
    documented_qos,
    documented_row,
    documented_topics,
    drone_index,
    rviz_displays,
    rviz_topics,
)

FIELD_GUIDE = REPO / 'docs' / 'field_guide.md'
# each drone's displays: its pose, the station's plan, its 2CEOAFL trajectory and markers
DRONE_TOPICS = ('pose', 'plan', 'trajectory', 'trajectory/markers')


def _config() -> dict:
    return yaml.safe_load(RVIZ_CONFIG.read_text())


def _rviz_colour(rgb: tuple[float, float, float]) -> str:
    return '; '.join(str(round(c * 255)) for c in rgb)


def test_the_rviz_config_shows_documented_topics_with_their_types_in_frame_map():
    # Arrange
    config = _config()
    table = documented_topics()
    # Act
    classes = {display['Class'] for display in rviz_displays(config)}
    shown = rviz_topics(config)
    # Assert: no tf tree, so the frame every pose, path and marker is in
    assert config['Visualization Manager']['Global Options']['Fixed Frame'] == 'map'
    assert classes <= set(RVIZ_DISPLAY_TYPES) | RVIZ_TOPICLESS, classes
    for topic, kind in shown.items():
        row = documented_row(topic)
        assert row, f"{topic} is not in docs/architecture.md's topic table"
        assert table[row] == kind, f'{topic}: the display reads {kind}, the table has {table[row]}'
    assert '/fl/markers' in shown


def test_the_rviz_config_reads_latched_topics_transient_local_with_the_publishers_qos():
    # Arrange
    qos = documented_qos()
    # Act
    displays = [d for d in rviz_displays(_config()) if d['Class'] not in RVIZ_TOPICLESS]
    # Assert: a volatile reader would miss what was published before rviz started; a
    # reliable one gets nothing from a best-effort publisher
    for display in displays:
        topic = display['Topic']
        published = qos[documented_row(topic['Value'])]
        if 'transient_local' in published:
            assert topic['Durability Policy'] == 'Transient Local', topic
            assert topic['Reliability Policy'] == 'Reliable', topic
        else:
            assert topic['Durability Policy'] == 'Volatile', topic
        if published.startswith('best_effort'):
            assert topic['Reliability Policy'] == 'Best Effort', topic


def test_each_drone_of_the_default_fleet_has_its_displays_in_its_marker_colour():
    # Arrange
    fleet = yaml.safe_load((REPO / 'config' / 'fleet.yaml').read_text())
    num_drones = fleet['/**']['ros__parameters']['num_drones']
    displays = [d for d in rviz_displays(_config()) if d['Class'] not in RVIZ_TOPICLESS]
    # Act
    by_topic = {display['Topic']['Value']: display for display in displays}
    # Assert: one display per drone topic of uav0..uav<N-1>, in the colour of its markers
    drones = {t for t in by_topic if drone_index(t) is not None}
    assert drones == {f'/uav{i}/{name}' for i in range(num_drones) for name in DRONE_TOPICS}
    for topic in drones:
        if 'Color' in by_topic[topic]:
            assert by_topic[topic]['Color'] == _rviz_colour(uav_colour(drone_index(topic))), topic


def _rqt_plot_arguments(markdown: str) -> list[str]:
    """The arguments of every rqt_plot command in ``markdown``'s code spans and blocks."""
    blocks = re.findall(r'^```[^\n]*\n(.*?)^```', markdown, re.M | re.S)
    lines = [line for block in blocks for line in re.sub(r'\\\n\s*', ' ', block).splitlines()
             if line.startswith('rqt_plot ')]
    lines += re.findall(r'`(rqt_plot [^`]+)`', markdown)
    return [arg for line in lines for arg in shlex.split(line, comments=True)[1:]]


def test_the_field_guides_rqt_plot_lines_plot_fields_of_documented_topics():
    # Arrange
    table = documented_topics()
    arguments = _rqt_plot_arguments(FIELD_GUIDE.read_text())
    # Act / Assert: each argument is a documented topic and a numeric field of its type
    assert len(arguments) >= 4, arguments
    for argument in arguments:
        topic, field = argument.rsplit('/', 1)
        row = documented_row(topic)
        assert row, f'rqt_plot {argument}: {topic} is not in the topic table'
        package, _, message = table[row].split('/')
        types = getattr(pytest.importorskip(f'{package}.msg'), message)
        types = types.get_fields_and_field_types()
        assert types.get(field) in ('double', 'float'), f'rqt_plot {argument}: {types}'
