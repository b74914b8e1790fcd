"""Imports point one way: down docs/architecture.md's layer order, with no circle (fl_uav
and bench/); only fl_uav/ros imports rclpy, only fl_uav/vehicle imports mavsdk, only
fl_uav/engine/ray_backend.py imports ray; the nodes
that train nothing and the configuration modules load neither torch nor scipy."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / 'fl_uav'
ARCHITECTURE = PACKAGE.parent / 'docs' / 'architecture.md'
LAYERS_HEADING = '## Layers'
RULES = {
    # module root -> packages allowed to import it
    'rclpy': {'ros'},
    'rcl_interfaces': {'ros'},
    'std_msgs': {'ros'}, 'sensor_msgs': {'ros'}, 'geometry_msgs': {'ros'}, 'nav_msgs': {'ros'},
    'visualization_msgs': {'ros'}, 'diagnostic_msgs': {'ros'}, 'builtin_interfaces': {'ros'},
    'mavsdk': {'vehicle'},
    'pymavlink': {'vehicle', 'autopilot_sim'},
    # Ray, the optional dependency of engine.backend ray: one module, imported on demand
    'ray': {'engine/ray_backend.py'},
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f'{node.module}.{a.name}' for a in node.names]
    return names


def _files():
    return sorted(PACKAGE.rglob('*.py'))


def test_there_are_files_to_check():
    assert len(_files()) > 20


@pytest.mark.parametrize('path', _files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_third_party_boundaries(path):
    rel = path.relative_to(PACKAGE)
    layer = rel.parts[0] if len(rel.parts) > 1 else ''
    for name in _imports(path):
        root = name.split('.')[0]
        if root in RULES:   # a rule names packages of fl_uav (a layer) or single files
            allowed = layer in RULES[root] or rel.as_posix() in RULES[root]
            assert allowed, f'{rel} imports {name}; only {RULES[root]} may'


# ----------------------------------------------------------------------- the layer order

def documented_layers(architecture_md: Path = ARCHITECTURE) -> list[set[str]]:
    """The layer order of docs/architecture.md's "Layers" block, top first: one set of
    units (a package ``name/`` or a top-level module ``name.py``) per line."""
    text = architecture_md.read_text()
    block = text.split(LAYERS_HEADING, 1)[1].split('```', 2)[1]
    layers = []
    for line in block.strip().splitlines():
        units = line.split('  ')[0].split(',')   # "name/", or "a.py, b.py" for the base row
        layers.append({u.strip().removesuffix('/').removesuffix('.py') for u in units})
    return layers


def _unit(module: str) -> str:
    """fl_uav.<unit>[.<...>] -> <unit> (a package or a top-level module of fl_uav)."""
    return module.split('.')[1]


def _resolve(name: str, package: Path) -> str | None:
    """The fl_uav module an imported name lands in (a submodule, else its package), or None."""
    parts = name.split('.')
    if parts[0] != package.name:
        return None
    for n in range(len(parts), 1, -1):
        path = package.parent.joinpath(*parts[:n])
        if path.with_suffix('.py').is_file() or (path / '__init__.py').is_file():
            return '.'.join(parts[:n])
    return None


def _module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix('')
    parts = rel.parts[:-1] if rel.name == '__init__' else rel.parts
    return '.'.join(parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (every import: top level, in functions,
    under TYPE_CHECKING; ``from p import m`` counts m when m is a module)."""
    graph = {}
    for path in sorted(package.rglob('*.py')):
        module = _module_name(path, package)
        targets = {_resolve(n, package) for n in _imports(path)} - {None, module}
        graph[module] = {t for t in targets if not module.startswith(t + '.')}
    return graph   # a module importing its own parent package's __init__ is not a circle


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward_imports(graph: dict[str, set[str]], layers: list[set[str]]) -> list[str]:
    """Imports from a unit to a unit in a higher layer (or one the order does not list)."""
    rank = {unit: i for i, row in enumerate(layers) for unit in row}   # 0 = top
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            src, dst = _unit(module), _unit(target)
            if src == dst:
                continue
            if src not in rank or dst not in rank:
                bad.append(f'{module} -> {target}: {src if src not in rank else dst} is not '
                           f'in the layer order of {ARCHITECTURE.name}')
            elif rank[dst] < rank[src]:
                bad.append(f'{module} -> {target}: {dst} is above {src}')
    return bad


def test_no_import_circle_inside_fl_uav():
    found = circles(import_graph(PACKAGE))
    assert not found, 'import circles: ' + '; '.join(' <-> '.join(c) for c in found)


def test_every_unit_of_fl_uav_is_in_the_documented_order():
    listed = set().union(*documented_layers())
    units = {p.name for p in PACKAGE.iterdir() if (p / '__init__.py').is_file()}
    units |= {p.stem for p in PACKAGE.glob('*.py') if p.stem != '__init__'}
    assert units == listed, (f'not in docs/architecture.md: {sorted(units - listed)}; '
                             f'listed but absent: {sorted(listed - units)}')


def test_no_import_runs_up_the_documented_layer_order():
    bad = upward_imports(import_graph(PACKAGE), documented_layers())
    assert not bad, 'imports against the layer order:\n' + '\n'.join(bad)


def test_bench_scripts_import_no_circle():
    bench = PACKAGE.parent / 'bench'
    stems = {p.stem for p in bench.glob('*.py')}
    graph = {p.stem: {n.split('.')[0] for n in _imports(p)} & stems - {p.stem}
             for p in bench.glob('*.py')}
    found = circles(graph)
    assert not found, 'bench/ import circles: ' + '; '.join(' <-> '.join(c) for c in found)


def _write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / 'fl_uav'
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_the_checks_find_a_circle_and_an_upward_import(tmp_path):
    # Arrange: low imports high (upward), and high <-> mid through a function-local import
    package = _write_package(tmp_path, {
        '__init__.py': '', 'high/__init__.py': '', 'mid/__init__.py': '',
        'low/__init__.py': '',
        'high/a.py': 'from fl_uav.mid import b\n',
        'mid/b.py': 'def f():\n    from fl_uav.high.a import x\n',
        'low/c.py': 'import fl_uav.high.a\n',
    })
    layers = [{'high'}, {'mid'}, {'low'}]
    # Act
    graph = import_graph(package)
    # Assert
    assert circles(graph) == [['fl_uav.high.a', 'fl_uav.mid.b']]
    assert upward_imports(graph, layers) == [
        'fl_uav.low.c -> fl_uav.high.a: high is above low',
        'fl_uav.mid.b -> fl_uav.high.a: high is above mid']


def test_the_documented_order_is_read_top_first():
    layers = documented_layers()
    assert 'cli' in layers[0] and 'world' in layers[-2] and 'configschema' in layers[-1]


# Nodes that train nothing, and the configuration every node reads: none may load torch or
# scipy (each costs seconds of CPU and hundreds of MB in each of the ~9 processes `fl-uav sim`
# starts at once on 2 cores). Imported in a fresh interpreter, since this one has them loaded.
LIGHT_MODULES = (
    'fl_uav.ros.autopilot_sim_node', 'fl_uav.ros.sim_camera_node', 'fl_uav.ros.recorder_node',
    'fl_uav.ros.camera_node', 'fl_uav.configschema',
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
