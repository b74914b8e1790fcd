"""The config-key reference (fl_uav/config_reference.py, ``fl-uav keys``) and its committed
docs/config_reference.md."""

from collections import Counter
from pathlib import Path

import pytest

from fl_uav import config_reference
from fl_uav.aggregation import STRATEGY_NAMES
from fl_uav.cli import main
from fl_uav.config_reference import (
    EXTRA_CHOICES,
    REGENERATE_COMMAND,
    TARGET_NAMES,
    KeyInfo,
    docstring_entries,
    format_value,
    key_reference,
    reference_markdown,
    target,
)
from fl_uav.configschema import ConfigError, build_config, iter_leaves
from fl_uav.engine.config import DATASETS, ExperimentConfig
from fl_uav.fleet.config import FLEET_MODES, TRAJECTORY_PLANNERS, FleetConfig
from fl_uav.learning.buffer import BUFFER_POLICIES
from fl_uav.planning.config import PLANNERS

DOC = Path(__file__).resolve().parents[3] / 'docs' / 'config_reference.md'

# The sections a researcher or operator sets most; each of their keys must say what it means.
EVERYDAY_SECTIONS = ('learning', 'aggregation', 'data', 'rounds', 'flight', 'compression',
                     'resources', 'express', 'security', 'status', 'seed')


def _info(target_name: str, key: str) -> KeyInfo:
    return next(info for info in key_reference(target_name) if info.key == key)


def _key_lines(text: str) -> list[str]:
    """The ``key = default  (type)`` lines of ``fl-uav keys`` text output."""
    return [line for line in text.splitlines() if line and not line.startswith(('#', ' '))]


@pytest.mark.parametrize('name', TARGET_NAMES)
def test_every_leaf_of_a_target_appears_once_with_its_default(name, capsys):
    # Arrange
    leaves = [(key, default) for key, default, _, _ in iter_leaves(target(name).config_class())]
    # Act
    infos = key_reference(name)
    code = main(['keys', name])
    lines = _key_lines(capsys.readouterr().out)
    # Assert
    assert code == 0
    assert [(info.key, info.default) for info in infos] == leaves
    assert lines == [f'{key} = {format_value(default)}  ({config_reference.type_text(info)})'
                     for (key, default), info in zip(leaves, infos, strict=True)]
    assert max(Counter(line.split(' = ')[0] for line in lines).values()) == 1


def test_aggregation_strategy_lists_the_built_in_rules_and_takes_plug_ins():
    # Act
    info = _info('experiment', 'aggregation.strategy')
    # Assert
    assert info.default == 'fedavg' and info.type_name == 'string'
    assert info.choices == tuple(STRATEGY_NAMES) and 'fedavg' in info.choices
    assert info.plugin
    assert info.description.startswith('aggregation rule')


@pytest.mark.parametrize('name, key, choices', [
    ('fleet', 'mode', FLEET_MODES),
    ('fleet', 'trajectory.planner', TRAJECTORY_PLANNERS),    # require_choice in a loop
    ('fleet', 'buffer.policy', BUFFER_POLICIES),             # require_choice in a helper
    ('experiment', 'data.dataset', DATASETS),
    ('experiment', 'resources.planner', PLANNERS),
    ('experiment', 'resources.feddpq_fallback', ('clip', 'error')),   # a literal tuple
])
def test_choices_are_the_lists_the_validators_check(name, key, choices):
    # Act
    info = _info(name, key)
    # Assert
    assert info.choices == tuple(choices)
    assert not info.plugin


def test_open_keys_have_no_choices():
    # Act
    infos = {info.key: info for info in key_reference('fleet')}
    # Assert
    assert infos['flight.url_template'].choices == ()
    assert infos['learning.lr'].choices == () and infos['learning.lr'].type_name == 'number'
    assert infos['autopilot.home_positions_enu_m'].type_name == 'list of numbers'


@pytest.mark.parametrize('key', sorted(EXTRA_CHOICES))
def test_the_explicit_choices_are_values_the_config_accepts(key):
    # Arrange
    choices = EXTRA_CHOICES[key]
    # Act
    built = [build_config(ExperimentConfig, {key: value}) for value in choices]
    # Assert
    assert len(built) == len(choices)
    assert _info('experiment', key).choices == choices


def test_init_seed_says_it_is_independent_of_the_experiment_seed():
    # Act
    init_seed = _info('experiment', 'learning.init_seed')
    seed = _info('experiment', 'seed')
    # Assert
    assert init_seed.default == 0
    assert 'independent of' in init_seed.description and '`seed`' in init_seed.description
    assert 'not the initial model' in seed.description


@pytest.mark.parametrize('name', ['fleet', 'experiment'])
def test_every_everyday_key_has_a_description(name):
    # Act
    missing = [info.key for info in key_reference(name)
               if info.section in EVERYDAY_SECTIONS and not info.description]
    # Assert
    assert missing == []


def test_section_keeps_only_that_sections_keys(capsys):
    # Arrange
    learning = [info.key for info in key_reference('experiment') if info.section == 'learning']
    # Act
    code = main(['keys', 'experiment', '--section', 'learning'])
    lines = _key_lines(capsys.readouterr().out)
    # Assert
    assert code == 0
    assert [line.split(' = ')[0] for line in lines] == learning
    assert 'learning.init_seed' in learning and len(learning) > 10


def test_markdown_section_is_a_table_of_that_section(capsys):
    # Act
    code = main(['keys', 'fleet', '--section', 'aggregation', '--markdown'])
    out = capsys.readouterr().out
    # Assert
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith('| `')]
    assert len(rows) == sum(1 for i in key_reference('fleet') if i.section == 'aggregation')
    assert rows[0].startswith("| `aggregation.strategy` | `'fedavg'` | string: fedavg \\| ")


def test_unknown_target_is_refused_naming_the_targets(capsys):
    # Act
    with pytest.raises(SystemExit) as stop:
        main(['keys', 'drone'])
    # Assert
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'drone'" in err and 'drone-node' in err
    with pytest.raises(ConfigError, match='targets: fleet, experiment, plan'):
        target('drone')


def test_unknown_section_is_a_config_error_naming_the_sections(capsys):
    # Act
    code = main(['keys', 'plan', '--section', 'learning'])
    # Assert
    assert code == 2
    err = capsys.readouterr().err
    assert "no section 'learning' here" in err and 'trajectory, routes' in err


def test_a_key_without_a_description_says_so(monkeypatch):
    # Arrange
    bare = KeyInfo('x.y', 1, 'integer', (), False, '', 'pkg.mod.Section')
    monkeypatch.setattr(config_reference, 'key_reference', lambda name: [bare])
    # Act
    text = config_reference.render_text('plan')
    markdown = config_reference.render_markdown('plan')
    # Assert
    assert 'x.y = 1  (integer)\n    (no description in the docstring of pkg.mod.Section)' in text
    assert '| `x.y` | `1` | integer | *(no description in the docstring of pkg.mod.Section)* |' \
        in markdown


def test_docstring_entries_reads_each_form_and_leaves_mentions_alone():
    # Arrange
    doc = """Intro mentioning lr in passing.

    a: first key; b, c_m and d (qualifier): shared text. e (its own parenthetical), f is
    the f thing. g < 1: conditional text (Sec. 2. More). h_*: group text, which h_two (named
    here) does not get.

    i_s: on its own line
        continued. Next sentence dropped.
    """
    names = ['lr', 'a', 'b', 'c_m', 'd', 'e', 'f', 'g', 'h_one', 'h_two', 'i_s', 'd.x']
    # Act
    entries = docstring_entries(doc, names)
    # Assert
    assert entries == {
        'a': 'first key', 'b': 'shared text.', 'c_m': 'shared text.',
        'd': 'qualifier: shared text.', 'e': 'its own parenthetical', 'f': 'the f thing.',
        'g': 'when < 1: conditional text (Sec. 2. More).',
        'h_one': 'group text, which h_two (named here) does not get.',
        'i_s': 'on its own line continued.'}


def test_a_keys_own_entry_beats_a_shared_one():
    # Arrange
    doc = 'p, q: shared meaning. q: its own meaning.'
    # Act
    entries = docstring_entries(doc, ['p', 'q'])
    # Assert
    assert entries == {'p': 'shared meaning.', 'q': 'its own meaning.'}


def test_committed_reference_is_current():
    # Act
    generated = reference_markdown()
    # Assert
    assert DOC.read_text() == generated, (
        f'docs/config_reference.md is out of date (a config key or its docstring changed): '
        f'regenerate it with `{REGENERATE_COMMAND}` (or `PYTHONPATH=. python -m fl_uav.cli '
        f'keys all --markdown > docs/config_reference.md`)')


def test_fleet_config_class_is_the_fleet_target():
    # Act / Assert: the CLI's target names point at the real classes
    assert target('fleet').config_class() is FleetConfig
    assert target('experiment').config_class() is ExperimentConfig
