"""FedEx express delivery in the experiment engine: UAVs ferry models to and from ground clients.

FedEx (Bian, Shen, Xu), Secs. III-IV and VII. N ground clients hold the data and have no link
to the station; K UAVs fly closed tours station -> their clients -> station, planned once by
CARP (``fl_uav.planning.routing``, eq. (25) for Sync, eq. (27) for Async, budget (26)/(28)).
At a visit the client uploads its cumulative local update (CLU, trained from the model the same
UAV delivered on its previous tour) into the UAV's running sum u_k (eq. (12)) and downloads the
model the UAV carries; on landing the station applies x <- x + (1/N) sum u_k (eqs. (13)-(15),
``fl_uav.aggregation.fedex``; deltas in the x_i - x_base sign, so the sum is added).

======================================  ====================================================
name                                    equation / section
======================================  ====================================================
``place_clients``                       FedEx Sec. VII-A: blocks of the area, random spots
``location_partition``                  FedEx Sec. VII-A non-IID type 2 (main label per block)
``plan_routes``                         FedEx Sec. VI (CARP), eqs. (25)/(27), (26)/(28)
``tour_slots``, ``revisit_slots``       FedEx Sec. IV-A (slotted time), eq. (9) Delta_k in
                                        whole slots, eqs. (10), (13)-(14)
``ExpressRuntime.advance`` (sync)       FedEx Sec. IV-D, eqs. (10)-(13): one update per
                                        round of length Delta = max_k Delta_k (eq. (9))
``ExpressRuntime.advance`` (async)      FedEx Sec. IV-E, eqs. (14)-(15): one update per
                                        landing, UAV k every Delta_k
``ExpressStep.staleness_s``             FedEx eq. (21): apply time - base-model time <= 2 Delta_k
======================================  ====================================================

Choices where FedEx is silent (digest 003 Sec. 8), all ours:

* FedEx's slotted clock (Sec. IV-A: t = 0, 1, 2, ..., one slot = one local SGD step; 1 min in
  Sec. VII-A = ``step_time_s``). FedEx counts Delta_k in slots and never says how eq. (9)'s
  real-valued tour time becomes one; ours: a tour occupies ceil(eq. (9) time / slot) whole
  slots (``tour_slots``), the reading of eq. (14) in which a UAV landing during slot
  t0 + Delta_k - 1 updates x^{t0 + Delta_k}. Sync's round is Delta = max_k of those (= the
  ceil of the longest tour), Async's UAV k re-departs every Delta_k slots; every landing is on
  the slot grid, so UAVs landing in the same slot are one eq. (15) update. A client then trains
  exactly P local steps between two visits (eq. (10): s = t, ..., t + P - 1), P its UAV's
  revisit period in slots (Delta in Sync, Delta_k in Async): one step per slot in both, no
  fraction of a slot lost per visit. Training is computed when the CLU is collected, from the
  model delivered at the previous visit (the same result as training continuously in
  between). CARP (eqs. (25)/(27)) still plans on the unrounded eq. (9) times.
* The station is at (``station_east_m``, ``station_north_m``), by default the area's centre
  (Fig. 4 is missing from the text). Clients go round-robin over the blocks (client i in block
  i mod B), each uniform within its block. The type-2 main label of block b is b mod C
  (0-based labels); the other labels share 1 - p uniformly; samples are drawn without
  replacement across clients.
* Tours are planned once and flown unchanged (FedEx does not re-plan).
* A UAV with no clients stays at the station. In Sync, faster UAVs wait at the station (no
  energy); in both modes a UAV back before its tour's last slot ends waits for it there.
  Energy per tour is the planner's eqs. (4), (7), (8) value; the station stop, battery swap
  and the CLU upload cost nothing (eq. (9)).
* rounds.csv: one row per server update; uplink_bytes = the CLU frames collected (client ->
  UAV), downlink_bytes = the model frames delivered on those tours; energy columns over the
  UAVs that landed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_uav.aggregation.strategy import ClientUpdate, Strategy, checked_aggregate
from fl_uav.learning.weights import Weights
from fl_uav.planning.express import (
    EXPRESS_SEED_TAG,
    ExpressConfig,
    place_clients,
    plan_routes,
    revisit_slots,
)
from fl_uav.planning.routing import RoutePlan, RoutingProblem

if TYPE_CHECKING:
    import torch

    from fl_uav.engine.config import EngineConfig, ExperimentConfig
    from fl_uav.learning.training import TrainConfig
    from fl_uav.learning.vectorized import VectorizedTrainer

# (base weights, client ids, local steps each, seeds) -> (deltas x_i - x_base, mean losses)
TrainFn = Callable[[Weights, Sequence[int], Sequence[int], Sequence[int]],
                   tuple[list[Weights], list[float]]]



def location_partition(labels: np.ndarray, blocks: np.ndarray, num_classes: int,
                       samples_per_client: int, main_prob: float,
                       seed: int) -> list[np.ndarray]:
    """FedEx non-IID type 2: each label is block b's main label b mod C with probability p.

    Otherwise uniform over the other C - 1 labels. Samples are taken without replacement
    from per-class pools shuffled with ``seed``; a pool that runs dry raises ValueError.
    """
    labels = np.asarray(labels)
    if samples_per_client < 1:
        raise ValueError('express.partition location needs express.samples_per_client >= 1')
    if num_classes < 2:
        raise ValueError(f'location partition needs >= 2 classes, got {num_classes}')
    rng = np.random.default_rng(np.random.SeedSequence([seed, EXPRESS_SEED_TAG, 1]))
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in range(num_classes)]
    parts = []
    for block in blocks:
        main = int(block) % num_classes
        others = [c for c in range(num_classes) if c != main]
        is_main = rng.random(samples_per_client) < main_prob
        drawn = np.where(is_main, main, rng.choice(others, samples_per_client))
        take = []
        for c in drawn:
            if not pools[c]:
                raise ValueError(f'express.samples_per_client {samples_per_client}: the '
                                 f'training set has too few samples of class {c}')
            take.append(pools[c].pop())
        parts.append(np.sort(np.asarray(take, np.int64)))
    return parts




@dataclass
class ExpressStep:
    """One server update: who landed, what they carried, what it cost."""

    update_index: int
    time_s: float
    uavs: list[int]
    weights: Weights
    sums: dict[int, Weights]            # u_k of each landing UAV (FedEx eq. (12))
    participants: int                   # CLUs in the update (0 on a UAV's first tour)
    visited: int                        # clients visited on these tours (models delivered)
    staleness_s: float                  # max apply time - base-model time (eq. (21))
    version_lag: int                    # max server updates since the base model
    energy_j: list[float]               # tour energy of each landing UAV
    losses: list[float] = field(default_factory=list)


def _zeros_like(weights: Weights) -> Weights:
    return {n: np.zeros_like(v) for n, v in weights.items()}


def _copy(weights: Weights) -> Weights:
    return {n: np.array(v, copy=True) for n, v in weights.items()}


class ExpressRuntime:
    """FedEx-Sync (Sec. IV-D) and FedEx-Async (Sec. IV-E) on FedEx's slotted clock (Sec. IV-A).

    State per UAV k: the model it carries on its current tour (given to its clients at each
    visit), the model it carried on its previous tour (what its clients' CLUs are trained
    from), and the tours flown. Sync: every UAV departs at r Delta, the station updates once
    at (r + 1) Delta with all u_k (eq. (13)). Async: UAV k lands every Delta_k and the station
    applies the u_k of every UAV landing in that slot to the current model (eqs. (14)-(15));
    the UAV leaves at once with the updated model. Delta and Delta_k are whole slots
    (``revisit_slots``); a client trains one local step per slot between visits.
    """

    def __init__(self, config: ExpressConfig, plan: RoutePlan, weights: Weights,
                 seed: int = 0) -> None:
        self.config = config
        self.plan = plan
        self.seed = int(seed)
        self.num_clients = sum(len(t) for t in plan.tours)
        self.uavs = [k for k, tour in enumerate(plan.tours) if tour]
        self.period_slots = revisit_slots(config.mode, plan, config.step_time_s)
        self.period_s = {k: n * config.step_time_s for k, n in self.period_slots.items()}
        self.steps = dict(self.period_slots)   # one local step per slot (eq. (10))
        self.tours_done = dict.fromkeys(self.uavs, 0)
        self.carried = {k: _copy(weights) for k in self.uavs}
        self.carried_time_s = dict.fromkeys(self.uavs, 0.0)
        self.carried_version = dict.fromkeys(self.uavs, 0)
        self.trained_from: dict[int, Weights | None] = dict.fromkeys(self.uavs)
        self.trained_time_s = dict.fromkeys(self.uavs, 0.0)
        self.trained_version = dict.fromkeys(self.uavs, 0)
        self.update_index = 0
        self.time_s = 0.0

    def next_landing(self) -> tuple[float, list[int]]:
        """The next landing time and the UAVs landing in that slot (one eq. (15) group)."""
        slots = {k: (self.tours_done[k] + 1) * self.period_slots[k] for k in self.uavs}
        first = min(slots.values())
        return first * self.config.step_time_s, [k for k in self.uavs if slots[k] == first]

    def _seed(self, k: int, client: int) -> int:
        seq = np.random.SeedSequence([self.seed, EXPRESS_SEED_TAG, self.tours_done[k], client])
        return int(seq.generate_state(1)[0])

    def advance(self, weights: Weights, train: TrainFn, strategy: Strategy) -> ExpressStep:
        """Fly to the next landing, collect the running sums and apply the server rule.

        FloatingPointError if a client's local training loss is not finite; AggregationError
        if the rule breaks the Strategy contract (:func:`checked_aggregate`, as the engine's
        other rounds and the station call it). Either way before any UAV's model changes."""
        time_s, landing = self.next_landing()
        self.update_index += 1
        sums, updates, losses = {}, [], []
        participants = visited = lag = 0
        staleness_s = 0.0
        for k in landing:
            tour = self.plan.tours[k]
            visited += len(tour)
            u_k = _zeros_like(weights)   # FedEx eq. (12): u_k <- u_k + m_i at each visit
            base = self.trained_from[k]
            if base is not None:
                seeds = [self._seed(k, i) for i in tour]
                deltas, client_losses = train(base, list(tour), [self.steps[k]] * len(tour),
                                              seeds)
                for delta in deltas:
                    for n in u_k:
                        u_k[n] += delta[n]
                losses.extend(client_losses)
                participants += len(tour)
                staleness_s = max(staleness_s, time_s - self.trained_time_s[k])
                lag = max(lag, self.update_index - 1 - self.trained_version[k])
            sums[k] = u_k
            round_tag = (self.update_index if self.config.mode == 'sync'
                         else self.trained_version[k])
            updates.append(ClientUpdate(sender=k, round_index=round_tag, delta=u_k,
                                        num_samples=len(tour)))
        if not all(math.isfinite(loss) for loss in losses):   # the clients', not the rule's
            raise FloatingPointError(f'FedEx update {self.update_index}: non-finite local '
                                     f'training loss')
        new = checked_aggregate(strategy, self.update_index, weights, updates).weights
        for k in landing:   # the next tour carries the updated model (Sync: the next round's)
            self.trained_from[k] = self.carried[k]
            self.trained_time_s[k] = self.carried_time_s[k]
            self.trained_version[k] = self.carried_version[k]
            self.carried[k] = _copy(new)
            self.carried_time_s[k] = time_s
            self.carried_version[k] = self.update_index
            self.tours_done[k] += 1
        self.time_s = time_s
        return ExpressStep(self.update_index, time_s, landing, new, sums, participants,
                           visited, staleness_s, lag,
                           [self.plan.energy_j[k] for k in landing], losses)

    # --- checkpoints ---------------------------------------------------------------------
    def state_dict(self, arrays: dict[str, np.ndarray], prefix: str = 'express') -> dict:
        """JSON-able state; the carried models go into ``arrays`` (npz entries)."""
        for k in self.uavs:
            arrays.update({f'{prefix}/carried/{k}/{n}': v for n, v in self.carried[k].items()})
            if self.trained_from[k] is not None:
                arrays.update({f'{prefix}/trained/{k}/{n}': v
                               for n, v in self.trained_from[k].items()})
        return {'update_index': self.update_index, 'time_s': self.time_s,
                'tours': [list(t) for t in self.plan.tours],
                'step_time_s': self.config.step_time_s,
                'period_slots': {str(k): n for k, n in self.period_slots.items()},
                'per_uav': {str(k): [self.tours_done[k], self.carried_time_s[k],
                                     self.carried_version[k], self.trained_time_s[k],
                                     self.trained_version[k],
                                     self.trained_from[k] is not None] for k in self.uavs}}

    def load_state_dict(self, state: dict, archive: Any, prefix: str = 'express') -> None:
        if [list(t) for t in self.plan.tours] != state['tours']:
            raise ValueError('the checkpoint was made with other FedEx tours (express.* or '
                             'num_drones changed)')
        slots = {str(k): n for k, n in self.period_slots.items()}
        if (state.get('step_time_s') != self.config.step_time_s
                or state.get('period_slots') != slots):
            raise ValueError(
                f'the checkpoint was made on another slot clock (express.step_time_s '
                f'{state.get("step_time_s", "not recorded")} s, revisit periods '
                f'{state.get("period_slots", "not recorded")} slots; now '
                f'{self.config.step_time_s} s, {slots} slots): start a new run')
        self.update_index = int(state['update_index'])
        self.time_s = float(state['time_s'])
        names = list(self.carried[self.uavs[0]])
        for k in self.uavs:
            done, c_time, c_ver, t_time, t_ver, has = state['per_uav'][str(k)]
            self.tours_done[k] = int(done)
            self.carried_time_s[k], self.carried_version[k] = float(c_time), int(c_ver)
            self.trained_time_s[k], self.trained_version[k] = float(t_time), int(t_ver)
            self.carried[k] = {n: np.array(archive[f'{prefix}/carried/{k}/{n}'])
                               for n in names}
            self.trained_from[k] = ({n: np.array(archive[f'{prefix}/trained/{k}/{n}'])
                                     for n in names} if has else None)


def plan_summary(config: ExpressConfig, problem: RoutingProblem, plan: RoutePlan,
                 runtime: ExpressRuntime) -> dict[str, Any]:
    """What express.json records about the plan (FedEx digest Sec. 8 item 11)."""
    rtt = [plan.round_trip_s[k] for k in runtime.uavs]
    return {
        'mode': config.mode, 'objective': plan.objective, 'cost': plan.cost,
        'station_enu_m': list(config.station_enu_m),
        'clients_enu_m': np.asarray(problem.clients_m).round(2).tolist(),
        'tours': [list(t) for t in plan.tours],
        'tour_length_m': list(plan.length_m), 'round_trip_s': list(plan.round_trip_s),
        'energy_j': list(plan.energy_j), 'energy_budget_j': config.energy_budget_j,
        'max_round_trip_s': max(rtt),
        'sum_r_delta_sq_s2': float(sum(len(plan.tours[k]) * plan.round_trip_s[k] ** 2
                                       for k in runtime.uavs)),
        'step_time_s': config.step_time_s,
        'period_slots': {str(k): v for k, v in runtime.period_slots.items()},
        'period_s': {str(k): v for k, v in runtime.period_s.items()},
        'local_steps_per_visit': {str(k): v for k, v in runtime.steps.items()},
    }


# ----------------------------------------------------------------------------- engine glue

@dataclass(frozen=True)
class ExpressLayout:
    """Where the ground clients are (and their blocks) and the CARP plan that serves them."""

    clients_enu_m: np.ndarray
    blocks: np.ndarray
    problem: RoutingProblem
    plan: RoutePlan


def plan_express(config: ExperimentConfig) -> ExpressLayout:
    """Place the ground clients and solve CARP (FedEx Sec. VI) from the config alone.

    Needs no data, so the engine calls it before loading the dataset: an infeasible plan
    (a budget below one tour, a client out of reach) is reported at once (ExpressPlanError).
    """
    clients_enu_m, blocks = place_clients(config.express, config.num_drones)
    problem, plan = plan_routes(config.express, clients_enu_m, config.seed)
    return ExpressLayout(clients_enu_m, blocks, problem, plan)


class EngineExpress:
    """What the experiment engine holds in express mode: positions, data, plan, runtime.

    ``parts`` replaces the engine's partition when ``express.partition`` is location or
    ``express.samples_per_client`` > 0. ``run_update`` is one rounds.csv row.
    ``layout`` is :func:`plan_express`'s, solved before the engine loads the data.
    """

    def __init__(self, config: ExperimentConfig, labels: np.ndarray, num_classes: int,
                 parts: list[np.ndarray], weights: Weights, layout: ExpressLayout) -> None:
        e = config.express
        self.config = e
        self.clients_enu_m, self.blocks = layout.clients_enu_m, layout.blocks
        n = e.samples_per_client
        if e.partition == 'location':
            self.parts = location_partition(labels, self.blocks, num_classes, n,
                                            e.location_main_prob, config.seed)
        else:
            self.parts = [p[:n] if n else p for p in parts]
        for i, part in enumerate(self.parts):
            if len(part) == 0:
                raise ValueError(f'express: ground client {i} has no training data '
                                 f'(num_drones {config.num_drones} too large for the data)')
        self.problem, self.plan = layout.problem, layout.plan
        self.runtime = ExpressRuntime(e, self.plan, weights, config.seed)
        self.log: list[dict[str, Any]] = []
        self._trainer: VectorizedTrainer | None = None

    def summary(self, upto: int | None = None) -> dict[str, Any]:
        """express.json: the plan and the log of server updates 1..``upto`` (all: None)."""
        log = self.log if upto is None else [u for u in self.log if u['update'] <= upto]
        return {**plan_summary(self.config, self.problem, self.plan, self.runtime),
                'updates': log}

    def trainer(self, settings: EngineConfig, model: torch.nn.Module,
                train_config: TrainConfig) -> VectorizedTrainer:
        """The vectorised trainer of the ground clients' local SGD, built once on first use
        from the engine's settings, model and training config.

        FedEx clients always train this way (all from one base model, FedEx eq. (10)), with
        or without ``engine.vectorized`` (which selects the direct-upload engine's path).
        """
        if self._trainer is None:
            self._trainer = settings.build_trainer(model, train_config)
        return self._trainer

    def train_fn(self, trainer: VectorizedTrainer, train_config: TrainConfig,
                 x: np.ndarray, y: np.ndarray) -> TrainFn:
        """Local SGD (FedEx eq. (10)) of the given clients from one base model, all at once."""
        trainer.config = train_config

        def train(base: Weights, clients: Sequence[int], steps: Sequence[int],
                  seeds: Sequence[int]) -> tuple[list[Weights], list[float]]:
            data = [(x[self.parts[i]], y[self.parts[i]]) for i in clients]
            done = trainer.train(base, data, seeds, steps=list(steps))
            deltas = [{n: u.weights[n] - base[n] for n in base} for u in done]
            return deltas, [float(u.result.mean_loss) for u in done]
        return train

    def run_update(self, trainer: VectorizedTrainer, train_config: TrainConfig,
                   weights: Weights, strategy: Strategy, train_x: np.ndarray,
                   train_y: np.ndarray) -> dict[str, Any]:
        """One server update of the global ``weights`` by ``strategy``, the ground clients
        training on their parts of (``train_x``, ``train_y``); returns the rounds.csv row
        fields and the new weights."""
        from fl_uav.compression.codec import encoded_size

        previous_s = self.runtime.time_s
        train = self.train_fn(trainer, train_config, train_x, train_y)
        step = self.runtime.advance(weights, train, strategy)
        frame_bytes = encoded_size(step.weights, {'round': step.update_index})
        self.log.append({'update': step.update_index, 'time_s': step.time_s,
                         'uavs': step.uavs, 'participants': step.participants,
                         'staleness_s': step.staleness_s, 'version_lag': step.version_lag,
                         'energy_j': step.energy_j})
        return {
            'weights': step.weights, 'participants': step.participants, 'late': 0, 'lost': 0,
            'uplink_bytes': frame_bytes * step.participants,
            'downlink_bytes': frame_bytes * step.visited,
            'sim_round_s': step.time_s - previous_s, 'sim_time_s': step.time_s,
            'energy_mean_j': float(np.mean(step.energy_j)),
            'energy_max_j': float(np.max(step.energy_j)),
            'energy_total_j': float(np.sum(step.energy_j)),
            'train_loss_mean': float(np.mean(step.losses)) if step.losses else math.nan,
        }
