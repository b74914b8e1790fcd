"""FedEx express delivery, planned: where the ground clients are, the UAVs' tours, the
slotted revisit periods (FedEx, Bian, Shen, Xu, Secs. IV-A, VI, VII-A).

Shared by the experiment engine (fl_uav.engine.express, which runs the updates) and the
fleet (fl_uav.fleet.express_routes). The table of equations and the choices where FedEx
is silent are in fl_uav.engine.express's docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_uav.configschema import ConfigError, require_choice
from fl_uav.netmodel.flight import (
    FEDEX_ALTITUDE_M,
    FEDEX_ENERGY_BUDGET_J,
    FEDEX_FLIGHT_POWER_W,
    FEDEX_HOVER_POWER_W,
    FEDEX_SPEED_M_S,
    FEDEX_TX_POWER_W,
    ConstantPower,
)
from fl_uav.planning.coverage import PlanError
from fl_uav.planning.placement import place_clients_enu_m
from fl_uav.planning.routing import (
    FEDEX_HOVER_TIME_S,
    GibbsConfig,
    RoutePlan,
    RoutingProblem,
    gibbs_plan,
)

EXPRESS_MODES = ('sync', 'async')
ROUTE_OBJECTIVES = ('auto', 'sync', 'async', 'total')
EXPRESS_PARTITIONS = ('engine', 'location')
EXPRESS_SEED_TAG = 0x65787072   # 'expr': keeps express seeds apart from the engine's


class ExpressPlanError(ConfigError, PlanError):
    """CARP found no plan within the budget (the message gives the planner's reason)."""



@dataclass(frozen=True)
class ExpressConfig:
    """``express.*``: FedEx UAV express delivery (defaults: FedEx Sec. VII-A where it says).

    enabled: run FedEx instead of direct uploads; num_drones then counts the ground clients.
    mode: sync (FedEx-Sync) | async (FedEx-Async). num_uavs: K, the UAVs ferrying the model.
    route_objective: auto (sync -> eq. (25) min-max, async -> eq. (27) SWS, as the paper
        pairs them) | sync | async | total (the Sec. VII Shortest-Total baseline).
    area_east_m, area_north_m: the client area (2 km x 2 km). blocks_east, blocks_north: the
        blocks it is split into, clients round-robin over them (5 x 2 blocks of 400 m x
        1000 m). station_east_m, station_north_m: the station, negative = the area's centre.
        placement_seed: seed of the client positions.
    speed_m_s: the UAVs' flight speed (10 m/s). flight_power_w: a UAV's power in flight
        (~30 W). hover_power_w: a UAV's power while hovering at a client (~20 W). tx_power_w:
        a UAV's radio power while it exchanges with a client (20 dBm). energy_budget_j: energy
        a UAV may spend on one tour, the CARP budget (15 kJ per round trip).
        hover_time_per_client_s: hover time at each client, T_trans (eq. (3); 100 MB at
        50 Mbit/s = 16 s). altitude_m: hover height (1 km; the link distance), at most
        radio_range_m. radio_range_m: the largest distance at which a client and a UAV
        exchange.
    step_time_s: one FedEx slot = one local SGD step (1 min); tours take whole slots
        (Sec. IV-A, ``tour_slots``). partition: engine (data.*
        split) | location (non-IID type 2: each client's samples are its block's main label
        with probability location_main_prob, 0.7 for FMNIST). location_main_prob (partition
        location): probability that a client's sample carries its block's main label.
        samples_per_client: samples each client holds, 0 = its whole share (60 for FMNIST).
        gibbs_sweeps: sweeps of the CARP Gibbs sampler; gibbs_chains: its independent chains.
    """

    enabled: bool = False
    mode: str = 'sync'
    num_uavs: int = 4
    route_objective: str = 'auto'
    area_east_m: float = 2000.0
    area_north_m: float = 2000.0
    blocks_east: int = 5
    blocks_north: int = 2
    station_east_m: float = -1.0
    station_north_m: float = -1.0
    placement_seed: int = 0
    speed_m_s: float = FEDEX_SPEED_M_S
    flight_power_w: float = FEDEX_FLIGHT_POWER_W
    hover_power_w: float = FEDEX_HOVER_POWER_W
    tx_power_w: float = FEDEX_TX_POWER_W
    energy_budget_j: float = FEDEX_ENERGY_BUDGET_J
    hover_time_per_client_s: float = FEDEX_HOVER_TIME_S
    altitude_m: float = FEDEX_ALTITUDE_M
    radio_range_m: float = FEDEX_ALTITUDE_M
    step_time_s: float = 60.0
    partition: str = 'engine'
    location_main_prob: float = 0.7
    samples_per_client: int = 0
    gibbs_sweeps: int = 40
    gibbs_chains: int = 6

    def __post_init__(self) -> None:
        for key, value, choices in (('mode', self.mode, EXPRESS_MODES),
                                    ('route_objective', self.route_objective, ROUTE_OBJECTIVES),
                                    ('partition', self.partition, EXPRESS_PARTITIONS)):
            require_choice(f'express.{key}', value, choices)
        for key in ('num_uavs', 'blocks_east', 'blocks_north', 'gibbs_sweeps', 'gibbs_chains'):
            if getattr(self, key) < 1:
                raise ValueError(f'express.{key} must be >= 1, got {getattr(self, key)}')
        for key in ('area_east_m', 'area_north_m', 'speed_m_s', 'flight_power_w',
                    'hover_power_w', 'energy_budget_j', 'step_time_s', 'radio_range_m'):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'express.{key} must be finite and > 0, got {value}')
        for key in ('tx_power_w', 'hover_time_per_client_s', 'altitude_m'):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f'express.{key} must be finite and >= 0, got {value}')
        if self.altitude_m > self.radio_range_m:
            raise ValueError(f'express.altitude_m ({self.altitude_m} m) exceeds '
                             f'express.radio_range_m ({self.radio_range_m} m): a hovering UAV '
                             f'could not reach its client')
        for key in ('station_east_m', 'station_north_m'):
            if math.isnan(getattr(self, key)):
                raise ValueError(f"express.{key} must be a number (negative: the area's "
                                 f'centre), got nan')
        if self.placement_seed < 0:
            raise ValueError(f'express.placement_seed must be >= 0, got {self.placement_seed}')
        if self.station_east_m > self.area_east_m or self.station_north_m > self.area_north_m:
            raise ValueError('express.station_east_m / station_north_m must lie in the area '
                             '(or be negative for its centre)')
        if not 0.0 <= self.location_main_prob <= 1.0:
            raise ValueError(f'express.location_main_prob must be in [0, 1], got '
                             f'{self.location_main_prob}')
        if self.samples_per_client < 0:
            raise ValueError(f'express.samples_per_client must be >= 0, got '
                             f'{self.samples_per_client}')

    @property
    def station_enu_m(self) -> tuple[float, float]:
        east = self.area_east_m / 2 if self.station_east_m < 0 else self.station_east_m
        north = self.area_north_m / 2 if self.station_north_m < 0 else self.station_north_m
        return (east, north)

    @property
    def objective(self) -> str:
        return self.mode if self.route_objective == 'auto' else self.route_objective



def place_clients(config: ExpressConfig, num_clients: int) -> tuple[np.ndarray, np.ndarray]:
    """Client positions (N x 2, ENU metres) and blocks (FedEx Sec. VII-A: 4 per block, 40).

    Client i sits in block i mod B (B = blocks_east x blocks_north, numbered west to east,
    then south to north), uniformly at random inside it (``placement_seed``). The rule is
    ``fl_uav.planning.placement``'s, shared with ``fl-uav plan``.
    """
    return place_clients_enu_m(num_clients, config.area_east_m, config.area_north_m,
                               config.placement_seed, config.blocks_east, config.blocks_north)



def plan_routes(config: ExpressConfig, clients_enu_m: np.ndarray, seed: int
                ) -> tuple[RoutingProblem, RoutePlan]:
    """CARP with the existing planner (FedEx Sec. VI; eq. (25) or (27) with (26)/(28)).

    Raises ExpressPlanError (a ConfigError) with the planner's reason when no UAV can serve
    some client within the budget or no assignment keeps every tour within it.
    """
    try:
        problem = RoutingProblem(
            depot_m=config.station_enu_m, clients_m=clients_enu_m, n_uavs=config.num_uavs,
            speed_m_s=config.speed_m_s,
            propulsion=ConstantPower(config.flight_power_w, config.hover_power_w),
            hover_time_per_client_s=config.hover_time_per_client_s,
            tx_power_w=config.tx_power_w, energy_budget_j=config.energy_budget_j)
        gibbs = GibbsConfig(n_sweeps=config.gibbs_sweeps, n_chains=config.gibbs_chains)
        return problem, gibbs_plan(problem, config.objective, seed=seed, config=gibbs)
    except PlanError as exc:   # a config problem: the CLI reports it as one
        raise ExpressPlanError(f'express (energy_budget_j, num_uavs, area, speed_m_s): no '
                               f'feasible FedEx plan: {exc}') from exc

# ----------------------------------------------------------------------------- the runtime

def tour_slots(round_trip_s: float, step_time_s: float) -> int:
    """Whole FedEx slots a tour of ``round_trip_s`` seconds takes: max(1, ceil(s / slot)).

    FedEx Sec. IV-A slots time (one slot = one local SGD step) and counts the round trip
    Delta_k of eq. (9) in slots; eq. (14) updates x^{t0 + Delta_k} from the u_k of a UAV back
    in slot t0 + Delta_k - 1, so a tour landing 8.3 slots after departure is a 9-slot tour
    (the paper does not give the rounding; digest 003 Sec. 8). A time within 1e-9 slot of a
    whole number is that number.
    """
    return max(1, math.ceil(round_trip_s / step_time_s - 1e-9))


def revisit_slots(mode: str, plan: RoutePlan, step_time_s: float) -> dict[int, int]:
    """Each serving UAV's revisit period in slots: Delta_k (Async, Sec. IV-E), or the round
    Delta = max_k Delta_k on which Sync flies every UAV (Sec. IV-D); Delta_k = ``tour_slots``
    of eq. (9). UAVs with no clients are left out."""
    slots = {k: tour_slots(plan.round_trip_s[k], step_time_s)
             for k, tour in enumerate(plan.tours) if tour}
    longest = max(slots.values())
    return {k: (longest if mode == 'sync' else n) for k, n in slots.items()}


def revisit_periods_s(mode: str, plan: RoutePlan, step_time_s: float) -> dict[int, float]:
    """``revisit_slots`` in seconds (whole slots). Shared by the engine's runtime and the
    fleet's ground station."""
    return {k: n * step_time_s for k, n in revisit_slots(mode, plan, step_time_s).items()}


def local_steps_per_visit(period_s: float, step_time_s: float) -> int:
    """Local SGD steps a client trains between two visits P seconds apart: one per slot
    (FedEx Sec. IV-A, eq. (10): s = t, ..., t + P - 1), i.e. the slots P spans,
    ``tour_slots(P)``; exactly P / step_time_s for a period from ``revisit_periods_s``."""
    return tour_slots(period_s, step_time_s)


