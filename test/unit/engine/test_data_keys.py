"""A data key set where the chosen partition or dataset ignores it is an error naming both."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl_uav.configschema import ConfigError, build_config, read_params_file
from fl_uav.engine.config import DATA_KEY_NEEDS, ExperimentConfig

QUICK = Path(__file__).resolve().parents[3] / 'config' / 'experiments' / 'quick_digits.yaml'

# key -> (a value other than its default, a setting of the key it depends on that ignores it)
IGNORED = {
    'dirichlet_alpha': (0.01, {'data.partition': 'shards'}),
    'shards_per_client': (3, {'data.partition': 'iid'}),
    'path': ('/nonexistent', {'data.dataset': 'digits'}),
    'test_fraction': (0.3, {'data.dataset': 'fashion_mnist'}),
    'world_samples': (500, {'data.dataset': 'digits'}),
    'arrivals_e': (3, {'data.online': False}),
    'arrivals_p': (0.3, {'data.online': False}),
    'initial_samples': (5, {'data.online': False}),
    'topup_factor': (0.2, {'data.topup': False}),
    'topup_generator': ('augment_shift', {'data.topup': False}),
}


def test_every_conditional_data_key_is_covered():
    assert set(IGNORED) == set(DATA_KEY_NEEDS)


@pytest.mark.parametrize('key', sorted(IGNORED))
def test_a_key_set_where_it_has_no_effect_names_it_and_the_key_it_depends_on(key):
    # Arrange
    value, setting = IGNORED[key]
    flat = {**setting, f'data.{key}': value}
    decider = next(iter(setting))
    # Act / Assert
    with pytest.raises(ConfigError, match=rf'data\.{key} = .* has no effect with {decider} '):
        build_config(ExperimentConfig, flat)


def test_dirichlet_alpha_on_quick_digits_shards_is_refused_not_silently_ignored():
    # Arrange: the reviewer's `--set data.dirichlet_alpha=0.01` on quick_digits
    flat = {**read_params_file(QUICK), 'data.dirichlet_alpha': 0.01}
    # Act / Assert
    with pytest.raises(ConfigError, match=r"data\.dirichlet_alpha = 0\.01 has no effect with "
                                          r"data\.partition = 'shards'.*dirichlet"):
        build_config(ExperimentConfig, flat)


def test_a_key_at_its_default_or_where_it_acts_is_accepted():
    # Arrange: quick_digits writes test_fraction 0.2 and shards_per_client 2 (the defaults)
    flat = read_params_file(QUICK)
    # Act
    default = build_config(ExperimentConfig, {**flat, 'data.dirichlet_alpha': 0.5})
    acting = build_config(ExperimentConfig, {**flat, 'data.partition': 'dirichlet',
                                             'data.dirichlet_alpha': 0.01})
    files = build_config(ExperimentConfig, {'data.dataset': 'fashion_mnist',
                                            'data.path': '/srv/fmnist'})
    # Assert
    assert default.data.partition == 'shards' and acting.data.dirichlet_alpha == 0.01
    assert files.data.path == '/srv/fmnist'
