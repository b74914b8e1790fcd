"""Aggregation strategies (ROS-free), one small class per rule, built by config name.

``aggregation.strategy`` is one of :data:`STRATEGY_NAMES` or a plug-in ``package.module:Name``
(fl_uav.plugins): a :class:`Strategy` subclass, or a factory returning one, built with the
:data:`STRATEGY_PLUGIN_ARGUMENTS` its signature names.
"""

from __future__ import annotations

from fl_uav.aggregation.afacd import AFACD
from fl_uav.aggregation.ceoafl import TwoCEOAFL
from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.feddisco import FedDisco
from fl_uav.aggregation.feddpq import FedDPQ
from fl_uav.aggregation.fedex import FedExAsync, FedExSync
from fl_uav.aggregation.fednova import FedNova
from fl_uav.aggregation.fedprox import FedProx
from fl_uav.aggregation.lgc import LGC
from fl_uav.aggregation.osafl import OSAFL
from fl_uav.aggregation.robust import (
    DEFAULT_BYZANTINE_SHARE,
    DEFAULT_CLIP_FACTOR,
    CoordinateMedian,
    Krum,
    MultiKrum,
    NormClip,
    TrimmedMean,
)
from fl_uav.aggregation.scaffold import Scaffold
from fl_uav.aggregation.strategy import AggregateResult, ClientUpdate, Strategy
from fl_uav.configschema import require_choice
from fl_uav.plugins import PluginKind, build_plugin, is_plugin_spec, require_name_or_plugin

STRATEGY_NAMES = ('fedavg', 'fedprox', 'fednova', 'scaffold', 'feddisco', 'afacd', 'osafl',
                  '2ceoafl', 'feddpq', 'lgc', 'fedex_sync', 'fedex_async', 'median',
                  'trimmed_mean', 'krum', 'multi_krum')

STRATEGY_PLUGIN_ARGUMENTS = ('server_lr', 'num_clients', 'proximal_mu', 'score_interval',
                             'score_shrink_steps', 'trimmed_beta', 'num_selected', 'local_lr',
                             'seed')
"""The keyword arguments a strategy plug-in's constructor (or factory) may take, the ones the
built-ins get: the ``aggregation.*`` keys of the same names (``server_lr``, ``proximal_mu``,
``score_interval``, ``score_shrink_steps``, ``trimmed_beta``, ``num_selected``, ``local_lr``),
``num_clients`` (the drones, or FedEx's ground clients, the station aggregates for) and
``seed`` (an int the strategy may give ``np.random.default_rng``: the run's ``seed`` in the
engine; in the fleet ``stream_seed(world.seed, 0, Stream.STRATEGY)``, a 64-bit seed of its own
stream, since ``default_rng(world.seed)`` is the world map's first stream,
:mod:`fl_uav.streams`). Only the parameters its signature names are passed (all with
``**kwargs``). ``aggregation.clip_norm`` (> 0 or ``median``, the default, with
``aggregation.clip_factor``) wraps a plug-in in :class:`NormClip` as it wraps a built-in."""

STRATEGY_PLUGIN = PluginKind('aggregation.strategy', Strategy,
                             'fl_uav.aggregation.strategy.Strategy', STRATEGY_PLUGIN_ARGUMENTS,
                             calls=('aggregate', 'configure_round', 'state_dict',
                                    'load_state_dict'))


def check_strategy_name(name: str) -> None:
    """``aggregation.strategy`` is a built-in name or an importable Strategy plug-in: a
    ValueError for an unknown name, a ConfigError saying what is wrong with a plug-in spec."""
    require_name_or_plugin(STRATEGY_PLUGIN, name, STRATEGY_NAMES, choice_key='strategy')


def build_strategy(name: str, server_lr: float = 1.0, num_clients: int = 1,
                   proximal_mu: float = 0.01, score_interval: int = 3,
                   score_shrink_steps: float = 0.0,
                   trimmed_beta: float = 0.1, num_selected: int = 0, local_lr: float = 0.1,
                   clip_norm: float | str = 0.0, seed: int = 0,
                   clip_factor: float = DEFAULT_CLIP_FACTOR,
                   byzantine_share: float = DEFAULT_BYZANTINE_SHARE,
                   krum_selected: int = 0) -> Strategy:
    """Build a strategy by its config name or plug-in spec; clip_norm > 0 (a bound) or
    ``'median'`` (clip_factor × the round's median norm) wraps it in norm clipping
    (:class:`NormClip`; here 0, off, unless given: ``aggregation.clip_norm``'s default,
    ``median``, is the config's)."""
    if is_plugin_spec(name):
        strategy = build_plugin(STRATEGY_PLUGIN, name, {
            'server_lr': server_lr, 'num_clients': num_clients, 'proximal_mu': proximal_mu,
            'score_interval': score_interval, 'score_shrink_steps': score_shrink_steps,
            'trimmed_beta': trimmed_beta, 'num_selected': num_selected, 'local_lr': local_lr,
            'seed': seed})
        return _clipped(strategy, clip_norm, clip_factor)
    builders = {
        'fedavg': lambda: FedAvg(server_lr=server_lr),
        'fedprox': lambda: FedProx(mu=proximal_mu, server_lr=server_lr),
        'fednova': lambda: FedNova(server_lr=server_lr),
        'scaffold': lambda: Scaffold(num_clients=num_clients, server_lr=server_lr),
        'feddisco': lambda: FedDisco(server_lr=server_lr),
        'afacd': lambda: AFACD(server_lr=server_lr),
        'osafl': lambda: OSAFL(score_interval=score_interval, server_lr=server_lr,
                                 shrink_steps=score_shrink_steps),
        '2ceoafl': lambda: TwoCEOAFL(server_lr=server_lr, local_lr=local_lr,
                                     num_clients=num_clients),
        'feddpq': lambda: FedDPQ(num_selected=num_selected or num_clients, seed=seed,
                                 server_lr=server_lr),
        'lgc': lambda: LGC(num_clients=num_clients, server_lr=server_lr),
        'fedex_sync': lambda: FedExSync(num_clients),
        'fedex_async': lambda: FedExAsync(num_clients),
        'median': lambda: CoordinateMedian(server_lr=server_lr),
        'trimmed_mean': lambda: TrimmedMean(beta=trimmed_beta, server_lr=server_lr),
        'krum': lambda: Krum(byzantine_share=byzantine_share, server_lr=server_lr),
        'multi_krum': lambda: MultiKrum(byzantine_share=byzantine_share,
                                        selected=krum_selected, server_lr=server_lr),
    }
    require_choice('strategy', name, builders)
    return _clipped(builders[name](), clip_norm, clip_factor)


def _clipped(strategy: Strategy, clip_norm: float | str, factor: float) -> Strategy:
    """``strategy`` wrapped in NormClip unless clip_norm is 0 (off); ``factor`` multiplies
    the round's median norm (clip_norm ``median``)."""
    if clip_norm == 0:
        return strategy
    return NormClip(strategy, clip_norm, factor if isinstance(clip_norm, str) else 1.0)


__all__ = ['AggregateResult', 'ClientUpdate', 'FedAvg', 'Strategy', 'build_strategy',
           'check_strategy_name', 'STRATEGY_NAMES', 'STRATEGY_PLUGIN_ARGUMENTS']
