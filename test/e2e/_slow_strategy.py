"""A strategy plug-in for the station resume test: FedAvg whose round 4 aggregation takes
SLOW_AGGREGATE_S seconds, so the test can kill the station while it aggregates."""

from __future__ import annotations

import time

from fl_uav.aggregation.fedavg import FedAvg

SPEC = 'test.e2e._slow_strategy:SlowFedAvg'
SLOW_ROUND = 4
SLOW_AGGREGATE_S = 8.0


class SlowFedAvg(FedAvg):
    """FedAvg, SLOW_AGGREGATE_S longer in round SLOW_ROUND (no state of its own)."""

    name = 'slow_fedavg'

    def aggregate(self, round_index, global_weights, updates):
        if round_index == SLOW_ROUND:
            time.sleep(SLOW_AGGREGATE_S)
        return super().aggregate(round_index, global_weights, updates)
