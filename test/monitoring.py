"""What a user watches a fleet with, as the tests read it (no ROS): docs/architecture.md's
topic table and the displays of config/fl_uav.rviz (rviz2's YAML display config)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / 'docs' / 'architecture.md'
RVIZ_CONFIG = REPO / 'config' / 'fl_uav.rviz'
_ROW = re.compile(r'^\| `(/[^`]+)` \| (\w+)/(\w+) \| ([^|]*) \|', re.M)
# rviz_default_plugins' display classes (ros2/rviz rviz_default_plugins/plugins_description.xml)
# and the message type each one subscribes to, as `ros2 topic list -t` prints it
RVIZ_DISPLAY_TYPES = {
    'rviz_default_plugins/Pose': 'geometry_msgs/msg/PoseStamped',
    'rviz_default_plugins/Path': 'nav_msgs/msg/Path',
    'rviz_default_plugins/MarkerArray': 'visualization_msgs/msg/MarkerArray',
    'rviz_default_plugins/Marker': 'visualization_msgs/msg/Marker',
    'rviz_default_plugins/Image': 'sensor_msgs/msg/Image',
}
RVIZ_GROUP = 'rviz_common/Group'
RVIZ_TOPICLESS = {'rviz_default_plugins/Grid', RVIZ_GROUP}


def documented_topics() -> dict[str, str]:
    """docs/architecture.md's topic table: {name pattern: type as ros2 prints it}."""
    return {name: f'{package}/msg/{message}'
            for name, package, message, _ in _ROW.findall(ARCHITECTURE.read_text())}


def documented_qos() -> dict[str, str]:
    """docs/architecture.md's topic table: {name pattern: its QoS column}."""
    return {name: qos.strip() for name, _, _, qos in _ROW.findall(ARCHITECTURE.read_text())}


def topic_pattern(name: str) -> re.Pattern[str]:
    """The topics a row of the table stands for (``<i>``, ``<j>``: a number; ``<key>``: a
    metric's name)."""
    text = re.escape(name).replace(re.escape('<i>'), r'\d+').replace(re.escape('<j>'), r'\d+')
    return re.compile(text.replace(re.escape('<key>'), r'[a-z_]+') + '$')


def documented_row(topic: str) -> str | None:
    """The table's row (its name pattern) that ``topic`` is an instance of, or None."""
    return next((name for name in documented_topics() if topic_pattern(name).match(topic)), None)


def rviz_displays(config: dict) -> Iterator[dict]:
    """Every display of an rviz config, those inside groups included (the groups not)."""
    def walk(displays: list[dict]) -> Iterator[dict]:
        for display in displays:
            if display['Class'] == RVIZ_GROUP:
                yield from walk(display.get('Displays') or [])
            else:
                yield display
    yield from walk(config['Visualization Manager']['Displays'])


def rviz_topics(config: dict) -> dict[str, str]:
    """{topic: message type} of every display of an rviz config that subscribes to one."""
    return {display['Topic']['Value']: RVIZ_DISPLAY_TYPES[display['Class']]
            for display in rviz_displays(config) if display['Class'] not in RVIZ_TOPICLESS}


def drone_index(topic: str) -> int | None:
    """i of a /uav<i>/... topic (None for the others)."""
    match = re.match(r'/uav(\d+)/', topic)
    return int(match.group(1)) if match else None
