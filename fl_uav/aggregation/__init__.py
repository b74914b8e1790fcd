"""Aggregation strategies (ROS-free), one small class per rule, built by config name."""

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
from fl_uav.aggregation.robust import CoordinateMedian, NormClip, TrimmedMean
from fl_uav.aggregation.scaffold import Scaffold
from fl_uav.aggregation.strategy import AggregateResult, ClientUpdate, Strategy
from fl_uav.configschema import require_choice

STRATEGY_NAMES = ('fedavg', 'fedprox', 'fednova', 'scaffold', 'feddisco', 'afacd', 'osafl',
                  '2ceoafl', 'feddpq', 'lgc', 'fedex_sync', 'fedex_async', 'median',
                  'trimmed_mean')


def build_strategy(name: str, server_lr: float = 1.0, num_clients: int = 1,
                   proximal_mu: float = 0.01, score_interval: int = 3,
                   trimmed_beta: float = 0.1, num_selected: int = 0, local_lr: float = 0.1,
                   clip_norm: float = 0.0, seed: int = 0) -> Strategy:
    """Build a strategy by its config name; clip_norm > 0 wraps it in norm clipping."""
    builders = {
        'fedavg': lambda: FedAvg(server_lr=server_lr),
        'fedprox': lambda: FedProx(mu=proximal_mu, server_lr=server_lr),
        'fednova': lambda: FedNova(server_lr=server_lr),
        'scaffold': lambda: Scaffold(num_clients=num_clients, server_lr=server_lr),
        'feddisco': lambda: FedDisco(server_lr=server_lr),
        'afacd': lambda: AFACD(server_lr=server_lr),
        'osafl': lambda: OSAFL(score_interval=score_interval, server_lr=server_lr),
        '2ceoafl': lambda: TwoCEOAFL(server_lr=server_lr, local_lr=local_lr,
                                     num_clients=num_clients),
        'feddpq': lambda: FedDPQ(num_selected=num_selected or num_clients, seed=seed,
                                 server_lr=server_lr),
        'lgc': lambda: LGC(num_clients=num_clients, server_lr=server_lr),
        'fedex_sync': lambda: FedExSync(num_clients),
        'fedex_async': lambda: FedExAsync(num_clients),
        'median': lambda: CoordinateMedian(server_lr=server_lr),
        'trimmed_mean': lambda: TrimmedMean(beta=trimmed_beta, server_lr=server_lr),
    }
    require_choice('strategy', name, builders)
    strategy = builders[name]()
    return NormClip(strategy, clip_norm) if clip_norm > 0 else strategy


__all__ = ['AggregateResult', 'ClientUpdate', 'FedAvg', 'Strategy', 'build_strategy',
           'STRATEGY_NAMES']
