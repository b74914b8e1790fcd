"""Imports point inward: only fl_uav/ros imports rclpy, only fl_uav/vehicle imports mavsdk."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / 'fl_uav'
RULES = {
    # module root -> packages allowed to import it
    'rclpy': {'ros'},
    'rcl_interfaces': {'ros'},
    'std_msgs': {'ros'}, 'sensor_msgs': {'ros'}, 'geometry_msgs': {'ros'}, 'nav_msgs': {'ros'},
    'visualization_msgs': {'ros'}, 'diagnostic_msgs': {'ros'}, 'builtin_interfaces': {'ros'},
    'mavsdk': {'vehicle'},
    'pymavlink': {'vehicle', 'sim'},
}
# Algorithm layers never import the layers above them.
LOWER = {'world', 'netmodel', 'learning', 'compression', 'aggregation', 'planning'}
UPPER = {'vehicle', 'fleet', 'sim', 'ros'}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _files():
    return sorted(PACKAGE.rglob('*.py'))


def test_there_are_files_to_check():
    assert len(_files()) > 20


@pytest.mark.parametrize('path', _files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_layering(path):
    rel = path.relative_to(PACKAGE)
    layer = rel.parts[0] if len(rel.parts) > 1 else ''
    for name in _imports(path):
        root = name.split('.')[0]
        if root in RULES:
            assert layer in RULES[root], f'{rel} imports {name}; only {RULES[root]} may'
        if root == 'fl_uav' and layer in LOWER:
            parts = name.split('.')
            assert len(parts) < 2 or parts[1] not in UPPER, f'{rel} imports upper layer {name}'
