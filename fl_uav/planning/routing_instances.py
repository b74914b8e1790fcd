"""Held-out FedEx-layout CARP instances for checking the route planner (issue 27 item 5).

FedEx (Bian, Shen, Xu) Sec. VII-A layout: 40 clients in a 2 km x 2 km area split into 5 x 2
blocks of 400 m x 1000 m, 4 clients uniformly at random in each block, K = 4 UAVs, 15 kJ per
tour, the FedEx flight model (``RoutingProblem`` defaults); the station is the area's centre
(FedEx does not give it; digest 003 Sec. 5.1).

The positions come from their own random stream, ``SeedSequence([seed, UNSEEN_SEED_TAG])``,
so they share no draws with the placements the planner was developed and tuned on
(``bench/routing_vs_ortools.py``'s ``default_rng(seed)`` for seeds 0-2, the engine's
``place_clients_enu_m`` for placement seeds 0-3). ``UNSEEN_SEEDS`` (1000-1019) are the held-out
set: none of the planner's settings were chosen by looking at them, and they must not be
(tune on other seeds, then check here).
"""

from __future__ import annotations

import numpy as np

from fl_uav.planning.routing import RoutingProblem

UNSEEN_SEED_TAG = 0x756E7365   # 'unse'
UNSEEN_SEEDS = tuple(range(1000, 1020))


def fedex_layout_instance(seed: int, n_uavs: int = 4, energy_budget_j: float = 15e3,
                          blocks_east: int = 5, blocks_north: int = 2,
                          clients_per_block: int = 4, area_m: tuple[float, float] = (2000.0,
                                                                                     2000.0)
                          ) -> RoutingProblem:
    """A FedEx Sec. VII-A CARP instance from the held-out stream (see the module docstring).

    Blocks are filled west to east, then south to north, ``clients_per_block`` clients each;
    client indices follow that order.
    """
    if seed < 0:
        raise ValueError(f'seed must be >= 0, got {seed}')
    rng = np.random.default_rng(np.random.SeedSequence([seed, UNSEEN_SEED_TAG]))
    width, height = area_m[0] / blocks_east, area_m[1] / blocks_north
    clients = []
    for bn in range(blocks_north):
        for be in range(blocks_east):
            offsets = rng.uniform(0.0, 1.0, (clients_per_block, 2))
            clients.append(np.column_stack([(be + offsets[:, 0]) * width,
                                            (bn + offsets[:, 1]) * height]))
    return RoutingProblem(depot_m=(area_m[0] / 2, area_m[1] / 2), clients_m=np.vstack(clients),
                          n_uavs=n_uavs, energy_budget_j=energy_budget_j)
