"""aggregation.server_lr defaults to the chosen strategy's own server rate (``auto``)."""

from __future__ import annotations

import inspect

import pytest

from fl_uav.aggregation import STRATEGY_NAMES, TwoCEOAFL
from fl_uav.aggregation.config import AggregationConfig, default_server_lr
from fl_uav.configschema import ConfigError, build_config, to_flat
from fl_uav.engine.config import ExperimentConfig


def test_2ceoafl_without_a_server_lr_takes_its_own_eta_not_fedavgs():
    # Arrange: 2CEOAFL eq. (13) steps η/η̃ on the mean delta; its own η is 0.1 (paper §4)
    config = AggregationConfig(strategy='2ceoafl')
    # Act
    strategy = config.build(num_clients=4)
    # Assert
    own = inspect.signature(TwoCEOAFL.__init__).parameters['server_lr'].default
    assert config.server_lr == strategy.server_lr == own == 0.1


@pytest.mark.parametrize('name', STRATEGY_NAMES)
def test_every_strategy_without_a_server_lr_gets_its_constructors_default(name):
    # Arrange
    config = AggregationConfig(strategy=name)
    # Act
    strategy = config.build(num_clients=4)
    # Assert: the rule's own default (FedEx has none: its rule ignores the recorded 1)
    expected = 0.1 if name == '2ceoafl' else 1.0
    assert config.server_lr == default_server_lr(name) == expected
    assert getattr(strategy, 'server_lr', expected) == expected


def test_a_set_server_lr_is_kept_and_config_json_records_the_rate_used():
    # Arrange: the keys `--set aggregation.strategy=2ceoafl [--set aggregation.server_lr=1]`
    chosen = {'aggregation.strategy': '2ceoafl'}
    # Act
    default = build_config(ExperimentConfig, chosen)
    explicit = build_config(ExperimentConfig, {**chosen, 'aggregation.server_lr': 1.0})
    # Assert
    assert to_flat(default)['aggregation.server_lr'] == 0.1
    assert to_flat(explicit)['aggregation.server_lr'] == 1.0
    assert explicit.aggregation.build(4).server_lr == 1.0


def test_a_word_other_than_auto_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="'aggregation'.*server_lr.*'auto'.*'fast'"):
        build_config(ExperimentConfig, {'aggregation.server_lr': 'fast'})
