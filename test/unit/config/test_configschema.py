from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fl_uav.configschema import (
    ConfigError,
    build_config,
    default_flat,
    parse_override,
    read_params_file,
    to_flat,
)
from fl_uav.engine.config import ExperimentConfig
from fl_uav.fleet.config import DroneNodeParams, FleetConfig


@dataclass(frozen=True)
class _Inner:
    rate_hz: float = 2.0
    names: tuple[str, ...] = ('a',)

    def __post_init__(self):
        if self.rate_hz <= 0:
            raise ValueError(f'rate_hz must be > 0, got {self.rate_hz}')


@dataclass(frozen=True)
class _Root:
    count: int = 1
    inner: _Inner = field(default_factory=_Inner)


def test_build_from_dotted_keys_and_back():
    config = build_config(_Root, {'count': 3, 'inner.rate_hz': 5, 'inner.names': ['x', 'y']})
    assert config == _Root(3, _Inner(5.0, ('x', 'y')))
    assert to_flat(config) == {'count': 3, 'inner.rate_hz': 5.0, 'inner.names': ['x', 'y']}
    assert default_flat(_Root) == {'count': 1, 'inner.rate_hz': 2.0, 'inner.names': ('a',)}


def test_unknown_key_names_the_key_and_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"'inner\.rte_hz'.*inner\.rate_hz"):
        build_config(_Root, {'inner.rte_hz': 1.0})


def test_wrong_type_names_the_key():
    with pytest.raises(ConfigError, match="'count'.*integer"):
        build_config(_Root, {'count': 'many'})


def test_out_of_range_value_names_the_section_and_field():
    with pytest.raises(ConfigError, match='inner.*rate_hz'):
        build_config(_Root, {'inner.rate_hz': -1.0})


def test_ros_params_file_sections(tmp_path):
    path = tmp_path / 'p.yaml'
    path.write_text('/**:\n  ros__parameters:\n    count: 2\n    inner:\n      rate_hz: 4.0\n'
                    'node_a:\n  ros__parameters:\n    count: 7\n')
    assert read_params_file(path) == {'count': 2, 'inner.rate_hz': 4.0}
    assert read_params_file(path, 'node_a') == {'count': 7, 'inner.rate_hz': 4.0}


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match='does not exist'):
        read_params_file(tmp_path / 'nope.yaml')
    bad = tmp_path / 'bad.yaml'
    bad.write_text('/**:\n  count: 2\n')
    with pytest.raises(ConfigError, match='ros__parameters'):
        read_params_file(bad)


def test_parse_override():
    assert parse_override('learning.lr=0.02') == ('learning.lr', 0.02)
    with pytest.raises(ConfigError, match='key=value'):
        parse_override('learning.lr')


@pytest.mark.parametrize('text', ['name: x\nnum_rounds: 2\n', '/*:\n  ros__parameters:\n'
                                  '    count: 2\n', 'quick:\n  ros__parameters:\n    count: 2\n',
                                  ''])
def test_a_file_without_a_parameter_section_is_an_error_not_the_defaults(tmp_path, text):
    # Arrange: flat keys, a typo of /**, another node's section, an empty file
    path = tmp_path / 'p.yaml'
    path.write_text(text)
    # Act / Assert
    with pytest.raises(ConfigError, match=r"has no '/\*\*' section \(top-level keys: "):
        read_params_file(path)


def test_exponents_without_a_dot_are_numbers_in_files_and_overrides(tmp_path):
    # Arrange: YAML 1.1 reads 1e-3 as a string
    path = tmp_path / 'p.yaml'
    path.write_text('/**:\n  ros__parameters:\n    inner:\n      rate_hz: 5e2\n')
    # Act
    from_file = build_config(_Root, read_params_file(path))
    from_override = build_config(_Root, dict([parse_override('inner.rate_hz=1e-3')]))
    # Assert
    assert from_file.inner.rate_hz == 500.0
    assert from_override.inner.rate_hz == 0.001
    with pytest.raises(ConfigError, match="'inner.rate_hz': expected a number, got 'fast'"):
        build_config(_Root, {'inner.rate_hz': 'fast'})


def test_nan_is_refused_for_every_number_key_by_name():
    # Arrange: NaN would pass a range check written as `x < 0`
    flat = {'inner.rate_hz': float('nan')}
    # Act / Assert
    with pytest.raises(ConfigError, match="'inner.rate_hz': NaN is not a value"):
        build_config(_Root, flat)
    with pytest.raises(ConfigError, match="'inner.rate_hz': NaN"):
        build_config(_Root, dict([parse_override('inner.rate_hz=.nan')]))


def test_a_misspelt_key_gets_a_suggestion():
    with pytest.raises(ConfigError, match=r"'cont' \(did you mean 'count'\?\)"):
        build_config(_Root, {'cont': 2})


def test_a_config_for_another_command_is_named_as_such_not_listed_key_by_key():
    # Arrange: a plan config's keys given to the experiment schema
    from fl_uav.configschema import read_params_file
    repo = Path(__file__).resolve().parents[3]
    flat = read_params_file(repo / 'config' / 'plans' / 'routes_fedex.yaml')
    # Act / Assert
    with pytest.raises(ConfigError, match='is this config for another command') as err:
        build_config(ExperimentConfig, flat)
    assert "'kind'" in str(err.value) and len(str(err.value)) < 400


@pytest.mark.parametrize('given, meant', [
    ('learning.learning_rate', 'learning.lr'), ('learning.epochs', 'learning.local_epochs'),
    ('rounds', 'num_rounds'), ('num_clients', 'num_drones')])
def test_another_tools_name_for_a_key_suggests_ours(given, meant):
    # Arrange: the experiment config (where these keys live)
    # Act / Assert
    with pytest.raises(ConfigError, match=rf"'{given}' \(did you mean '{meant}'\?\)"):
        build_config(ExperimentConfig, {given: 1})


def test_a_path_key_starting_with_a_tilde_is_the_home_directory(monkeypatch, tmp_path):
    # Arrange: as `-p output_dir:=~/fl_runs` arrives (the shell does not expand it after :=)
    monkeypatch.setenv('HOME', str(tmp_path))
    # Act
    own = build_config(DroneNodeParams, {'output_dir': '~/fl_runs'})
    fleet = build_config(FleetConfig, {'security.keys_dir': '~/keys'})
    # Assert
    assert own.output_dir == str(tmp_path / 'fl_runs')
    assert fleet.security.keys_dir == str(tmp_path / 'keys')


@pytest.mark.parametrize('line, key, kind', [("count: '10'", 'count', 'an integer'),
                                             ("inner:\n      rate_hz: '0.1'", 'inner.rate_hz',
                                              'a number')])
def test_a_quoted_number_is_refused_alike_for_integer_and_float_keys(tmp_path, line, key, kind):
    # Arrange: quoted, it is a string to ROS 2 too (rcl_yaml_param_parser)
    path = tmp_path / 'p.yaml'
    path.write_text(f'/**:\n  ros__parameters:\n    {line}\n')
    flat = read_params_file(path)
    # Act / Assert
    with pytest.raises(ConfigError, match=rf"'{key}': expected {kind}, got '[0-9.]+' "
                                          r'\(a string: write it unquoted\)'):
        build_config(_Root, flat)


def test_a_quoted_number_in_an_override_is_refused_and_unquoted_read_as_a_number():
    # Arrange
    quoted = dict([parse_override("inner.rate_hz='0.5'")])
    plain = dict([parse_override('inner.rate_hz=0.5')])
    # Act / Assert
    with pytest.raises(ConfigError, match="'inner.rate_hz': expected a number, got '0.5'"):
        build_config(_Root, quoted)
    assert build_config(_Root, plain).inner.rate_hz == 0.5


def test_a_missing_config_file_names_the_close_ones_beside_it(tmp_path):
    # Arrange: a typo of quick_digits.yaml
    for name in ('quick_digits.yaml', 'fedex_sync_fmnist.yaml'):
        (tmp_path / name).write_text('/**:\n  ros__parameters:\n    seed: 0\n')
    # Act
    with pytest.raises(ConfigError) as missing:
        read_params_file(tmp_path / 'quick_digit.yaml')
    # Assert
    assert 'does not exist' in str(missing.value)
    assert f'did you mean {tmp_path / "quick_digits.yaml"}?' in str(missing.value)


def test_a_missing_config_file_with_nothing_close_lists_the_directorys_yaml_files(tmp_path):
    # Arrange
    (tmp_path / 'routes_fedex.yaml').write_text('/**:\n  ros__parameters:\n    seed: 0\n')
    # Act
    with pytest.raises(ConfigError) as missing:
        read_params_file(tmp_path / 'trajectory.yaml')
    # Assert
    assert str(missing.value).endswith(f'; {tmp_path} holds routes_fedex.yaml')
