"""Config values ``package.module:Name`` load plug-ins; bad ones fail naming key, value, fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl_uav.cli import main as cli_main
from fl_uav.configschema import ConfigError, build_config
from fl_uav.engine.config import ExperimentConfig
from fl_uav.fleet.config import FleetConfig
from fl_uav.plugins import is_plugin_spec, split_spec
from test.unit._plugins import SPEC

REPO = Path(__file__).resolve().parents[3]
QUICK = REPO / 'config' / 'experiments' / 'quick_digits.yaml'


@pytest.mark.parametrize('key', ['aggregation.strategy', 'compression.method',
                                 'data.topup_generator'])
def test_a_module_that_does_not_import_is_named_with_the_key(key):
    # Act
    with pytest.raises(ConfigError) as caught:
        build_config(ExperimentConfig, {key: 'no_such_package.algo:Thing'})
    # Assert
    message = str(caught.value)
    assert message.startswith(f"{key} 'no_such_package.algo:Thing': cannot import module "
                              f"'no_such_package.algo'")
    assert 'PYTHONPATH' in message


def test_a_missing_attribute_names_the_module_and_what_it_defines():
    with pytest.raises(ConfigError, match=r"aggregation\.strategy 'test\.unit\._plugins:"
                                          r"RecordingFedavg': module 'test\.unit\._plugins' "
                                          r"\(.*_plugins\.py\) has no attribute "
                                          r"'RecordingFedavg' \(did you mean 'RecordingFedAvg'"
                                          r"\?\); its classes and functions: .*NeedsAlpha"):
        build_config(ExperimentConfig, {'aggregation.strategy': SPEC + 'RecordingFedavg'})


@pytest.mark.parametrize(('key', 'name', 'problem'), [
    ('aggregation.strategy', 'NotAStrategy',
     r'NotAStrategy is not a fl_uav\.aggregation\.strategy\.Strategy \(a plug-in for '
     r'aggregation\.strategy must subclass it\)'),
    ('aggregation.strategy', 'TopFractionWithMemory', r'is not a fl_uav\.aggregation'),
    ('compression.method', 'RecordingFedAvg',
     r'is not a fl_uav\.compression\.compressor\.Compressor'),
    ('data.topup_generator', 'RecordingFedAvg',
     r'is not a fl_uav\.learning\.topup\.Generator \(a plug-in for data\.topup_generator '
     r'must have the method\(s\) generate\)'),
    ('aggregation.strategy', 'NoAggregate', r'does not implement aggregate'),
    ('aggregation.strategy', 'NOT_CALLABLE', r'is a int, neither a class nor a factory'),
    ('aggregation.strategy', 'NeedsAlpha',
     r'requires alpha, which aggregation\.strategy does not provide; it provides server_lr, '
     r'num_clients'),
    ('aggregation.strategy', 'AggregateWithoutRound',
     r'AggregateWithoutRound\.aggregate\(self, updates\) cannot take the call Strategy\.'
     r'aggregate\(self, round_index, global_weights, updates\) describes \(too many '
     r'positional arguments\)'),
    ('compression.method', 'CompressWithoutKeywords',
     r'CompressWithoutKeywords\.compress\(self, delta, rng\) cannot take the call '
     r'Compressor\.compress\(self, delta, rng, \*, round_index, sender, fingerprint, '
     r"mask=None, metadata=None, metrics=None\) describes \(got an unexpected keyword "
     r"argument 'round_index'\)"),
])
def test_an_object_of_the_wrong_kind_is_refused_at_config_time(key, name, problem):
    with pytest.raises(ConfigError, match=rf"{key.replace('.', '[.]')} '{SPEC}{name}': .*"
                                          + problem):
        build_config(ExperimentConfig, {key: SPEC + name})


def test_a_factory_that_returns_the_wrong_kind_is_refused_when_built():
    # Arrange: the factory itself is callable, so the config accepts it
    config = build_config(ExperimentConfig, {'aggregation.strategy': SPEC + 'returns_a_dict'})
    # Act / Assert
    with pytest.raises(ConfigError, match=r'returns_a_dict returned a builtins\.dict, not a '
                                          r'fl_uav\.aggregation\.strategy\.Strategy'):
        config.aggregation.build(num_clients=3)


def test_a_constructor_that_fails_is_named_with_its_arguments_and_where_it_raised():
    config = build_config(ExperimentConfig, {'aggregation.strategy': SPEC + 'FailsToBuild',
                                             'aggregation.server_lr': 0.5})
    with pytest.raises(ConfigError, match=r'FailsToBuild\(server_lr=0\.5\) failed: '
                                          r'FileNotFoundError: weights/fedavg_prior\.npz \(at '
                                          r'.*_plugins\.py:\d+\)'):
        config.aggregation.build(num_clients=2)


@pytest.mark.parametrize('value', ['test.unit._plugins:', ':RecordingFedAvg',
                                   'test.unit._plugins:a:b', 'test-unit:Thing'])
def test_a_malformed_spec_says_how_a_plug_in_is_written(value):
    with pytest.raises(ConfigError, match=r"'package\.module:ClassName'"):
        build_config(ExperimentConfig, {'aggregation.strategy': value})


def test_a_dotted_name_without_the_colon_is_an_unknown_name_pointed_at_the_colon():
    with pytest.raises(ConfigError, match=r"strategy 'examples\.fedavgm\.FedAvgM' unknown; "
                                          r"choices: fedavg, .*multi_krum, or a plug-in "
                                          r"'package\.module:ClassName' \(a plug-in needs a "
                                          r"colon before its class: examples\.fedavgm:FedAvgM\)"):
        build_config(ExperimentConfig, {'aggregation.strategy': 'examples.fedavgm.FedAvgM'})


def test_built_in_names_and_plug_in_specs_both_pass_in_the_engine_and_the_fleet():
    # Act
    engine = build_config(ExperimentConfig, {
        'aggregation.strategy': SPEC + 'RecordingFedAvg',
        'compression.method': SPEC + 'TopFractionWithMemory',
        'data.topup': True, 'data.topup_generator': SPEC + 'ConstantGenerator'})
    fleet = build_config(FleetConfig, {'aggregation.strategy': SPEC + 'RecordingFedAvg',
                                       'compression.method': 'qsgd'})
    # Assert: the spec string is the value (what config.json and summary.json record)
    assert engine.aggregation.strategy == 'test.unit._plugins:RecordingFedAvg'
    assert engine.compression.method == 'test.unit._plugins:TopFractionWithMemory'
    assert fleet.compression.method == 'qsgd'
    assert is_plugin_spec(fleet.aggregation.strategy) and not is_plugin_spec('fedavg')
    assert split_spec('k', 'a.b.c:D.E') == ('a.b.c', 'D.E')


def test_the_cli_reports_a_bad_plug_in_without_a_traceback(tmp_path, capsys):
    # Act
    code = cli_main(['experiment', str(QUICK), '--out', str(tmp_path / 'run'),
                     '--set', 'aggregation.strategy=no_such_module:FedAvgM'])
    # Assert
    err = capsys.readouterr().err
    assert code == 2 and 'Traceback' not in err
    assert "aggregation.strategy 'no_such_module:FedAvgM': cannot import module" in err
    assert not (tmp_path / 'run').exists()


def test_a_factorys_product_whose_method_cannot_take_the_call_is_refused_when_built():
    # Arrange
    config = build_config(ExperimentConfig, {
        'aggregation.strategy': SPEC + 'fedavg_with_old_aggregate'})
    # Act / Assert
    with pytest.raises(ConfigError, match=r'fedavg_with_old_aggregate returned a .*OldFedAvg '
                                          r'whose aggregate\(self, global_weights, updates\) '
                                          r'cannot take the call Strategy\.aggregate'):
        config.aggregation.build(4, seed=0)
