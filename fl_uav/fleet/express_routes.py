"""FedEx in the fleet: where the ground clients are and the tours the UAVs fly (ROS-free).

Shared by the ground station (plans once, sends each UAV its tour), the ground clients (each
computes its own position from the same config) and the launcher's summary. The placement
and CARP are the engine's (:func:`fl_uav.engine.express.place_clients`,
:func:`fl_uav.engine.express.plan_routes`: FedEx Sec. VII-A blocks; Sec. VI Gibbs + 2-OPT on
eq. (25), budget (26)); only the frame differs: the engine's area starts at the origin, the
fleet's is centred on the station, which stands at UAV 0's home (where the UAVs take off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_uav.fleet.config import FleetConfig
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.express import (
    local_steps_per_visit,
    place_clients,
    plan_routes,
    revisit_periods_s,
)
from fl_uav.planning.routing import RoutePlan, RoutingProblem


@dataclass(frozen=True)
class ExpressLayout:
    """Station and client positions in the fleet's ENU frame (metres)."""

    station_enu_m: tuple[float, float]
    clients_enu_m: np.ndarray          # (N, 2) east, north; clients stand on the ground
    blocks: np.ndarray                 # (N,) FedEx Sec. VII-A block of each client
    area_offset_enu_m: tuple[float, float]   # fleet ENU = engine area frame + this


def express_layout(config: FleetConfig) -> ExpressLayout:
    """Where the station and the ground clients are (deterministic for the config)."""
    e = config.express
    station = config.autopilot.home_enu_m(0)
    local_station = e.station_enu_m          # the area's centre (negative station keys)
    offset = (station[0] - local_station[0], station[1] - local_station[1])
    local, blocks = place_clients(e, config.ground_clients.num_clients)
    return ExpressLayout(station, local + np.asarray(offset), blocks, offset)


@dataclass(frozen=True)
class ExpressRoutes:
    """CARP's answer for the fleet: tours, FedEx eq. (9) Delta_k, and the clients' steps
    (one per slot of the revisit period P of their UAV, P in whole slots of
    ``express.step_time_s`` (FedEx Sec. IV-A), the engine's rule, capped by
    ``ground_clients.max_local_steps``)."""

    layout: ExpressLayout
    problem: RoutingProblem
    plan: RoutePlan
    period_s: dict[int, float]           # Sync: Delta = max_k Delta_k; Async: Delta_k (slots)
    local_steps: dict[int, int]          # per UAV, per delivered model (capped)

    def tour(self, uav: int) -> tuple[int, ...]:
        """Client ids UAV ``uav`` visits, in order (empty: it stays at the station)."""
        return self.plan.tours[uav]

    def tour_plan(self, uav: int, altitude_m: float) -> list[PlanWaypoint]:
        """Hover waypoints over each client of the tour, then the station (all at altitude);
        empty for a UAV with no clients."""
        tour = self.tour(uav)
        if not tour:
            return []
        points = [self.layout.clients_enu_m[i] for i in tour] + [self.layout.station_enu_m]
        return [PlanWaypoint(float(e), float(n), float(altitude_m)) for e, n in points]

    def assignment(self) -> dict[int, int]:
        """Client id -> the UAV that serves it."""
        return {c: k for k, tour in enumerate(self.plan.tours) for c in tour}

    def summary(self) -> dict[str, Any]:
        """JSON-ready plan facts (FedEx digest Sec. 8 item 11)."""
        p = self.plan
        return {
            'objective': p.objective, 'cost': p.cost,
            'station_enu_m': list(self.layout.station_enu_m),
            'clients_enu_m': np.round(self.layout.clients_enu_m, 2).tolist(),
            'tours': [list(t) for t in p.tours], 'tour_length_m': list(p.length_m),
            'round_trip_s': list(p.round_trip_s), 'energy_j': list(p.energy_j),
            'period_s': {str(k): v for k, v in self.period_s.items()},
            'local_steps_per_visit': {str(k): v for k, v in self.local_steps.items()},
        }


def plan_express_routes(config: FleetConfig) -> ExpressRoutes:
    """Plan CARP once (FedEx Sec. VI) for the fleet's station, clients and UAVs.

    Raises ExpressPlanError (a ConfigError) when no plan meets ``express.energy_budget_j``.
    """
    e = config.express
    layout = express_layout(config)
    local = layout.clients_enu_m - np.asarray(layout.area_offset_enu_m)
    problem, plan = plan_routes(e, local, seed=config.world.seed)
    period_s = revisit_periods_s(e.mode, plan, e.step_time_s)
    steps = {k: min(config.ground_clients.max_local_steps,
                    local_steps_per_visit(v, e.step_time_s)) for k, v in period_s.items()}
    return ExpressRoutes(layout, problem, plan, period_s, steps)
