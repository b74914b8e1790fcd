"""Every `ros2 ...` command README.md and docs/field_guide.md show (in code spans and code
blocks) is run by a test of test/launch against the real ros2 command line, or is named here as
not runnable, with the reason. The commands the tests run are read from their source (the
arguments of their ``start(name, *args)`` calls), so neither list can claim a run that does
not happen. A command is keyed by its verb and main arguments (``topic echo /uav<i>/pose``,
``launch fl_uav drone.launch.py``; options, ``name:=value`` arguments and everything after
``--ros-args`` left out; drone and client numbers as ``<i>`` and ``<j>``); a command shown is
run when a test runs one with its key or a longer one (``ros2 param set`` by ``ros2 param set
/ground_station rounds.num_rounds``)."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = ('README.md', 'docs/field_guide.md')
LAUNCH_TESTS = REPO / 'test' / 'launch'
# test/launch's helpers that start a ros2 command: {name: leading arguments that are not it}
STARTERS = {'start': 1}
# {key prefix: why no test here runs the commands it starts}
NOT_RUNNABLE = {
    ('bag',): 'rosbag2 (the `ros2 bag` verb, its storage plug-ins and C++ bindings) is in '
              'neither the PyPI ROS 2 wheels nor ../shared/ros2_tools; `fl-uav record` writes '
              'the bag instead (test/ros/test_recorder_node.py reads it back)',
}
# options that take a value (the value is no positional argument)
VALUE_OPTIONS = {'--field', '--qos-durability', '--qos-reliability', '--qos-depth',
                 '--qos-history', '--qos-profile', '--spin-time', '--window', '-w', '--filter',
                 '--truncate-length', '-l'}
# how many positional arguments of a verb make its key (0 for any other verb)
MAIN_ARGUMENTS = {'launch': 2, 'run': 2, 'topic echo': 1, 'topic hz': 1, 'topic info': 1,
                  'topic bw': 1, 'topic pub': 1, 'param describe': 2, 'param get': 2,
                  'param set': 2, 'param list': 1, 'pkg prefix': 1, 'pkg executables': 1,
                  'pkg xml': 1, 'node info': 1}
SINGLE_WORD_VERBS = {'launch', 'run'}
_ROS2 = re.compile(r'(?<![\w./-])(?:[\w./-]*/)?ros2 +(?=[a-z])')
_FENCE = re.compile(r'^[ \t]*```[^\n]*\n(.*?)^[ \t]*```', re.M | re.S)   # indented too (in a list)
_SPAN = re.compile(r'`([^`]+)`')


def _cut(text: str, ends: str, *, after_space: bool = False) -> str:
    """``text`` up to its first unquoted character of ``ends`` (one at the start or after a
    space only, with ``after_space``)."""
    quote = None
    for index, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in '\'"':
            quote = char
        elif char in ends and not (after_space and index and not text[index - 1].isspace()):
            return text[:index]
    return text


def shown_commands(markdown: str) -> list[list[str]]:
    """The words after ``ros2`` of every ros2 command in ``markdown``'s code blocks (continued
    lines joined, comments dropped) and code spans (a span may wrap a line)."""
    blocks = _FENCE.findall(markdown)
    pieces = [_cut(line, '#', after_space=True) for block in blocks
              for line in re.sub(r'\\\n\s*', ' ', block).splitlines()]
    pieces += [span.replace('\n', ' ') for span in _SPAN.findall(_FENCE.sub('', markdown))]
    commands = []
    for piece in pieces:
        for match in _ROS2.finditer(piece):
            text = _cut(piece[match.end():], ');|&')
            commands.append(shlex.split(re.sub(r'<(\w+)>', r'@\1@', text)))
    return [[re.sub(r'@(\w+)@', r'<\1>', word) for word in words] for words in commands]


def _placeholders(word: str) -> str:
    word = re.sub(r'^/uav(\d+|<\w+>)(?=/|$)', '/uav<i>', word)
    return re.sub(r'^/gc(\d+|<\w+>)(?=/|$)', '/gc<j>', word)


def command_key(words: list[str]) -> tuple[str, ...]:
    """A ros2 command's key: its verb and main arguments (see the module's docstring)."""
    if '--ros-args' in words:
        words = words[:words.index('--ros-args')]
    verb = words[:1] if words[:1] and words[0] in SINGLE_WORD_VERBS else words[:2]
    positionals, skip = [], False
    for word in words[len(verb):]:
        if skip:
            skip = False
        elif word.startswith('-'):
            skip = word in VALUE_OPTIONS
        elif ':=' not in word and word != '...':
            positionals.append(_placeholders(word))
    return (*verb, *positionals[:MAIN_ARGUMENTS.get(' '.join(verb), 0)])


def _literal(node: ast.expr) -> str | None:
    """A call argument as text: a string, an f-string with ``{}`` for its values, else
    None (not known before the test runs)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return ''.join(v.value if isinstance(v, ast.Constant) else '{}' for v in node.values)
    return None


def run_commands(sources: list[str]) -> set[tuple[str, ...]]:
    """The keys of the ros2 commands the test sources start (``STARTERS`` calls)."""
    keys = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in STARTERS):
                args = []
                for arg in node.args[STARTERS[node.func.id]:]:
                    if isinstance(arg, ast.Starred):
                        break
                    args.append(_literal(arg) or '<unknown>')
                keys.add(command_key(args))
    return keys


def unaccounted(shown: list[tuple[str, ...]], run: set[tuple[str, ...]],
                not_runnable: dict[tuple[str, ...], str]) -> list[tuple[str, ...]]:
    """The commands shown that no test runs and ``not_runnable`` does not name."""
    return [key for key in shown
            if not any(r[:len(key)] == key for r in run)
            and not any(key[:len(n)] == n for n in not_runnable)]


def _shown_in_docs() -> list[tuple[str, ...]]:
    return sorted({command_key(words) for doc in DOCS
                   for words in shown_commands((REPO / doc).read_text())})


def _run_by_launch_tests() -> set[tuple[str, ...]]:
    return run_commands([path.read_text() for path in sorted(LAUNCH_TESTS.glob('test_*.py'))])


def test_every_ros2_command_the_docs_show_is_run_by_a_launch_test_or_named_not_runnable():
    # Arrange
    shown, run = _shown_in_docs(), _run_by_launch_tests()
    # Act
    missing = unaccounted(shown, run, NOT_RUNNABLE)
    # Assert: the extraction finds the commands (a changed doc style would find none), every
    # one is accounted for, and no not-runnable entry is stale or also run
    assert {('launch', 'fl_uav', 'fleet_sim.launch.py'), ('topic', 'hz', '/uav<i>/pose'),
            ('param', 'describe', '/uav<i>/drone', 'flight.speed_m_s')} <= set(shown)
    assert not missing, (f'ros2 commands in {DOCS} that no test in test/launch runs: '
                         f'{[" ".join(k) for k in missing]}; run them (test_ros2_cli.py) or '
                         f'say in NOT_RUNNABLE why they cannot be')
    for prefix in NOT_RUNNABLE:
        assert any(key[:len(prefix)] == prefix for key in shown), f'stale: {prefix}'
        assert not any(key[:len(prefix)] == prefix for key in run), f'run after all: {prefix}'


def test_the_launch_tests_run_commands_are_read_from_their_start_calls():
    # Arrange
    source = '\n'.join([
        "start('launch', 'launch', 'fl_uav', 'drone.launch.py', f'drone_id:={i}', *extra)",
        "start(f'x{i}', 'topic', 'echo', '--once', '--qos-durability', 'transient_local',",
        "      '/uav1/plan', 'nav_msgs/msg/Path', '--field', 'poses')",
        "start('client', 'run', 'fl_uav', 'ground_client_node', '--ros-args', '-r',",
        "      '__ns:=/gc0', '--params-file', str(path))",
        "other('topic', 'list')",
    ])
    # Act
    keys = run_commands([source])
    # Assert
    assert keys == {('launch', 'fl_uav', 'drone.launch.py'),
                    ('topic', 'echo', '/uav<i>/plan'), ('run', 'fl_uav', 'ground_client_node')}
    assert _run_by_launch_tests() >= {('topic', 'list'), ('pkg', 'prefix', 'fl_uav')}


def test_the_commands_of_a_doc_are_found_in_spans_and_blocks_and_keyed():
    # Arrange: a span that wraps a line, one inside $(...), a continued block line, a comment
    doc = ('Check `ros2 topic hz /uav<N>/pose` and `ros2 param\ndescribe /uav3/drone a.b`;\n'
           'open `rviz2 -d $(ros2 pkg prefix fl_uav)/share/x.rviz` or `ros2 launch`.\n'
           '```bash\n.venv/bin/ros2 launch fl_uav drone.launch.py drone_id:=0 \\\n'
           '    config:=d.yaml   # on drone i: ros2 bag record -a\n'
           "ros2 bag record -s mcap -o run -x '/fl/(a|b)|.*/c'\n```\n"
           'Not commands: `mcap_ros2.reader`, profile `ros2`, `fl-uav record`.\n')
    # Act
    keys = [command_key(words) for words in shown_commands(doc)]
    # Assert
    assert sorted(keys) == sorted([
        ('launch', 'fl_uav', 'drone.launch.py'), ('bag', 'record'),
        ('topic', 'hz', '/uav<i>/pose'), ('param', 'describe', '/uav<i>/drone', 'a.b'),
        ('pkg', 'prefix', 'fl_uav'), ('launch',)])


@pytest.mark.parametrize('command', [
    'ros2 topic echo /fl/new_topic',
    'ros2 node list',
    'ros2 launch fl_uav other.launch.py',
])
def test_a_new_command_in_a_doc_that_no_test_runs_fails_the_check(command):
    # Arrange: a synthetic doc beside commands the tests do run
    doc = f'Watch with `ros2 topic echo /fl/metrics` and `{command}`; record: `ros2 bag info D`.'
    shown = [command_key(words) for words in shown_commands(doc)]
    # Act
    missing = unaccounted(shown, _run_by_launch_tests(), NOT_RUNNABLE)
    # Assert: the new one alone
    assert missing == [command_key(shlex.split(command)[1:])]
