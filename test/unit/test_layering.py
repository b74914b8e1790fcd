"""Imports point inward: only fl_uav/ros imports rclpy, only fl_uav/vehicle imports mavsdk;
the nodes that train nothing and the configuration modules load neither torch nor scipy."""

import ast
import json
import os
import subprocess
import sys
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


# Nodes that train nothing, and the configuration every node reads: none may load torch or
# scipy (each costs seconds of CPU and hundreds of MB in each of the ~9 processes `fl-uav sim`
# starts at once on 2 cores). Imported in a fresh interpreter, since this one has them loaded.
LIGHT_MODULES = (
    'fl_uav.ros.autopilot_sim_node', 'fl_uav.ros.sim_camera_node', 'fl_uav.ros.recorder_node',
    'fl_uav.configschema',
    *sorted(f'fl_uav.{p.parent.name}.config' for p in PACKAGE.glob('*/config.py')),
)
HEAVY_ROOTS = ('torch', 'scipy')
# Runs in the child: records, for the first import of each heavy root, the chain of modules
# whose top level was executing (importer first), then prints them as JSON.
_IMPORT_SPY = """
import importlib, json, sys, traceback
heavy, chains = set(sys.argv[1].split(',')), {}
class Spy:
    def find_spec(self, name, path=None, target=None):
        root = name.split('.')[0]
        if root in heavy and root not in chains:
            frames = [f for f, _ in traceback.walk_stack(None) if f.f_code.co_name == '<module>']
            chains[root] = [f.f_globals.get('__name__') for f in reversed(frames)][1:] + [name]
        return None
sys.meta_path.insert(0, Spy())
for module in sys.argv[2:]:
    importlib.import_module(module)
chains.update({m: ['(loaded, chain not seen)'] for m in heavy - chains.keys()
               if m in {n.split('.')[0] for n in sys.modules}})
print(json.dumps(chains))
"""


def test_light_nodes_and_configs_import_neither_torch_nor_scipy():
    # Prepare
    env = {**os.environ,
           'PYTHONPATH': os.pathsep.join([str(PACKAGE.parent),
                                          os.environ.get('PYTHONPATH', '')])}
    # Execute
    done = subprocess.run(
        [sys.executable, '-c', _IMPORT_SPY, ','.join(HEAVY_ROOTS), *LIGHT_MODULES],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    # Assert
    assert done.returncode == 0, done.stderr
    chains = json.loads(done.stdout.strip().splitlines()[-1])
    assert not chains, 'heavy imports: ' + '; '.join(
        ' -> '.join(chain) for chain in chains.values())
