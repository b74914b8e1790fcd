"""Every ``fl-uav ...`` line in the shell blocks of the README, the command reference
(docs/cli.md) and the field guide runs as written:
its options parse with the CLI's own argparse, the files it names exist and the config keys it
sets are keys of its target with values they accept. A renamed option, config file or key
fails here instead of in a new user's first copy-paste."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from fl_uav.cli import DEFAULT_CONFIG, build_parser, sim_overrides
from fl_uav.config_reference import reference
from fl_uav.configschema import build_config, parse_override, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet_run.launch_plan import merged_parameters
from fl_uav.planning.plan_request import PlanConfig

REPO = Path(__file__).resolve().parents[2]
DOCS = ('README.md', 'docs/cli.md', 'docs/field_guide.md')
SHELL_BLOCKS = ('bash', 'sh', '')
PLACEHOLDERS = {'my.yaml': str(DEFAULT_CONFIG)}   # the README's "your own file" stands for one


def shell_blocks(text: str) -> list[str]:
    """The bodies of the fenced code blocks of a shell language (or none given)."""
    blocks, language, lines = [], None, []
    for line in text.splitlines():
        if not line.startswith('```'):
            lines.append(line)
        elif language is None:
            language, lines = line[3:].strip(), []
        else:
            if language in SHELL_BLOCKS:
                blocks.append('\n'.join(lines))
            language = None
    return blocks


def fl_uav_commands(text: str) -> list[list[str]]:
    """Each ``fl-uav`` command line's arguments (continuations joined, comments dropped, an
    optional ``[...]`` part taken as written inside the brackets)."""
    commands = []
    for block in shell_blocks(text):
        for line in re.sub(r'\\\n\s*', ' ', block).splitlines():
            words = shlex.split(re.sub(r'\[([^\]]*)\]', r'\1', line), comments=True)
            starts = [i for i, word in enumerate(words) if word.rsplit('/', 1)[-1] == 'fl-uav']
            if starts:
                commands.append([PLACEHOLDERS.get(w, w) for w in words[starts[0] + 1:]])
    return commands


DOC_COMMANDS = [pytest.param(doc, argv, id=f'{doc}: fl-uav {" ".join(argv)[:60]}')
                for doc in DOCS for argv in fl_uav_commands((REPO / doc).read_text())]


def check_config(argv: list[str]) -> None:
    """What the command reads before it runs: its config file(s) with its --set keys."""
    args = build_parser().parse_args(argv)
    if args.command == 'sim':
        build_config(FleetConfig, merged_parameters(args.config or [DEFAULT_CONFIG],
                                                    sim_overrides(args)))
    elif args.command in ('experiment', 'plan') and args.config is not None:
        flat = read_params_file(REPO / args.config)
        flat.update(dict(parse_override(text) for text in args.set))
        build_config(ExperimentConfig if args.command == 'experiment' else PlanConfig, flat)
    elif args.command == 'map':
        merged_parameters(args.config or [DEFAULT_CONFIG],
                          dict(parse_override(text) for text in args.set))
    elif args.command == 'keys':
        reference(args.target, args.section)


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    """The names of ``fl-uav``'s subcommands."""
    return {name for action in parser._actions
            if isinstance(action, argparse._SubParsersAction) for name in action.choices}


def test_the_docs_show_the_commands_a_new_user_runs_first():
    # Arrange
    commands = {doc: fl_uav_commands((REPO / doc).read_text()) for doc in DOCS}
    # Act
    shown = {doc: {argv[0] for argv in argvs} for doc, argvs in commands.items()}
    # Assert: the extraction finds them (a changed code-block style would skip every check),
    # and the command reference shows every subcommand the parser has
    assert {'sim', 'experiment', 'compare'} <= shown['README.md']
    assert shown['docs/cli.md'] == subcommands(build_parser())
    assert {'keygen', 'record'} <= shown['docs/field_guide.md']


def test_a_continued_line_with_an_optional_part_and_a_comment_is_one_command():
    # Arrange
    text = ('```bash\n.venv/bin/fl-uav sim --drones 2 \\\n    [--set a.b=1]   # note\n'
            'PYTHONPATH=x fl-uav keys fleet\n```\n```python\nfl-uav plan\n```\n')
    # Act
    commands = fl_uav_commands(text)
    # Assert
    assert commands == [['sim', '--drones', '2', '--set', 'a.b=1'], ['keys', 'fleet']]


@pytest.mark.parametrize(('doc', 'argv'), DOC_COMMANDS)
def test_each_documented_command_parses_and_its_files_and_keys_exist(doc, argv, monkeypatch):
    # Arrange: run from the repository root, as the docs do; examples/ for the plug-in line
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO / 'examples'))
    # Act / Assert: argparse exits on a bad option; a bad file or key raises ConfigError
    try:
        check_config(argv)
    except SystemExit as exc:
        pytest.fail(f'{doc}: fl-uav {shlex.join(argv)} does not parse (exit {exc.code})')
