from dataclasses import dataclass, field

import pytest

from fl_uav.configschema import (
    ConfigError,
    build_config,
    default_flat,
    parse_override,
    read_params_file,
    to_flat,
)


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
