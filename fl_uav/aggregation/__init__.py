"""Aggregation strategies (ROS-free), one small class per rule."""

from __future__ import annotations

from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.strategy import AggregateResult, ClientUpdate, Strategy

STRATEGY_NAMES = ('fedavg',)


def build_strategy(name: str, server_lr: float = 1.0) -> Strategy:
    """Build a strategy by its config name."""
    if name == 'fedavg':
        return FedAvg(server_lr=server_lr)
    raise ValueError(f'unknown strategy {name!r}; choices: {", ".join(STRATEGY_NAMES)}')


__all__ = ['AggregateResult', 'ClientUpdate', 'FedAvg', 'Strategy', 'build_strategy',
           'STRATEGY_NAMES']
