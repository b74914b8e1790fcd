"""The ground station's per-drone resource planner (issue 5 item 3) from what the drones report.

``resources.planner`` (none | feddpq | lgc_fixed | lgc_heuristic | lgc_ddpg) is the engine's
planner (fl_uav.planning.round_resources); here its inputs come from the fleet itself:

* D_loc,u,c: the class histogram of each drone's buffer, which every update reports
  (``class_counts``): the data the drone trains on, with the onboard labels. The world setup
  could predict the classes under each drone's sweep, but not what its buffer policy keeps.
* d_u: the distance from the station to where the drone's upload left from: its telemetry pose
  at upload (``position_enu_m`` in the update), floored at 1 m (the path-loss reference,
  FedDPQ eq. (15)). The station stands at UAV 0's home on the ground (``autopilot.home_*``,
  as in ``mode: express``). The pose, not the plan, because with ``trajectory.planner: 2ceoafl``
  the drones fly their own missions.
* V: the global model's entries; b, κ and S: ``learning.batch_size``, ``learning.kappa_steps``
  and ``aggregation.num_selected``; the model download time (LGC's round time) at the
  engine's ``system.downlink_rate_bit_s``.
* The radio and CPU constants of the planners' models (bandwidth, transmit power,
  interference, download rate, CPU frequency, cycles per sample) are the fleet's
  ``planning_model`` section (:class:`~fl_uav.fleet.config.PlanningModelConfig`, defaults
  = the engine's ``system`` defaults): the fleet has no radio or energy model of its own
  (its frames travel over DDS).

Both inputs exist only after every drone has uploaded once, so the planner is built when the
first round closes in which every drone's histogram (this round's or an earlier one) is
non-empty and its pose known, normally round 1, and its knobs travel from the next round on.
Rounds before carry none (the config's values apply). FedDPQ plans once (FedDPQ §V: static
decisions, eqs. (40)-(41), Algorithm 2); LGC's policies decide every round (LGC eq. (13)) from
channel rates the station draws at each drone's d_u (one Rayleigh draw per channel, eq. (14),
the engine's model: the drones measure no rates). ``lgc_ddpg`` pre-trains one DDPG agent per
drone on the surrogate when it plans, as the engine does before round 1
(``resources.lgc_ddpg_train_steps``: at the default 600 steps about 4 s per drone on the
shared 2-core machine, 7.6 s for 2 drones): the station's round close is that much longer,
once: the ground-station node builds it on its aggregation thread after releasing its lock, so
updates and ticks are served meanwhile, and opens the next round when it is done. A planning
error is logged and recorded (``status: failed``); the rounds go on without knobs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.messages import MAX_COUNT
from fl_uav.fleet.resource_knobs import POSITION_KEY, drone_topup_generator, valid_position
from fl_uav.planning.round_resources import PlannerInputs, build_planner
from fl_uav.values import is_int

_log = logging.getLogger(__name__)
MIN_PLANNING_DISTANCE_M = 1.0   # d_u floor: the path loss (d / 1 m)^-2 of FedDPQ eq. (15)
CLASS_COUNTS_KEY = 'class_counts'


def valid_class_counts(value: Any, num_classes: int) -> bool:
    """A drone's reported histogram: ``num_classes`` integer counts in [0, 2^53] (JSON ints
    are unbounded; the planner takes them as float64)."""
    return (isinstance(value, list) and len(value) == num_classes
            and all(is_int(c) and 0 <= c <= MAX_COUNT for c in value))


class StationResources:
    """Builds the configured planner from the drones' reports and asks it for each round's
    knobs; keeps the record written to the run's knobs.json (:meth:`report`)."""

    def __init__(self, config: FleetConfig, num_classes: int) -> None:
        self.config = config
        self.num_classes = num_classes
        self.planner_name = config.resources.planner
        east_m, north_m = config.autopilot.home_enu_m(0)
        self.station_enu_m = (float(east_m), float(north_m), 0.0)
        self.system = config.planning_model.system()
        self.class_counts: dict[int, list[int]] = {}
        self.positions_enu_m: dict[int, list[float]] = {}
        self.planner = None
        self.inputs: PlannerInputs | None = None
        self.status = 'none' if self.planner_name == 'none' else 'waiting'
        self.error = ''
        self.planned_after_round: int | None = None
        self.rounds: dict[int, dict[int, dict]] = {}
        # a resume: the planner's own log (its report's summary) to load once it is rebuilt
        self._resume_log: tuple[dict[str, Any], int] | None = None
        self._sizes: tuple[int, int] | None = None   # (num_params, model_bytes) it planned on

    @property
    def enabled(self) -> bool:
        """A planner is configured."""
        return self.planner_name != 'none'

    def observe(self, drone: int, metadata: Mapping[str, Any]) -> None:
        """Remember a drone's latest non-empty class histogram and upload position (the
        station has validated both before accepting the update)."""
        counts = metadata.get(CLASS_COUNTS_KEY)
        if valid_class_counts(counts, self.num_classes) and sum(counts) > 0:
            self.class_counts[int(drone)] = list(counts)
        position = metadata.get(POSITION_KEY)
        if valid_position(position):
            self.positions_enu_m[int(drone)] = [float(v) for v in position]

    def missing(self, drone_ids: Sequence[int]) -> list[int]:
        """Drones whose histogram or position the station does not have yet."""
        return [d for d in drone_ids
                if d not in self.class_counts or d not in self.positions_enu_m]

    def distance_m(self, drone: int) -> float:
        """d_u: the station's distance to the drone's last upload position (>= 1 m)."""
        offset = np.subtract(self.positions_enu_m[drone], self.station_enu_m)
        return max(MIN_PLANNING_DISTANCE_M, float(np.linalg.norm(offset)))

    def plan_if_ready(self, round_index: int, drone_ids: Sequence[int], num_params: int,
                      model_bytes: int) -> None:
        """Once every drone has reported (see the module docstring), take the planner's
        inputs; the planner itself is built by :meth:`build_pending` (or by the next
        :meth:`knobs`), which may run outside the station's lock: DDPG pre-training takes
        seconds per drone."""
        if self.status != 'waiting' or self.missing(drone_ids):
            return
        try:
            self._sizes = (int(num_params), int(model_bytes))
            self.inputs = self._planner_inputs(drone_ids, num_params, model_bytes)
        except Exception as exc:  # noqa: BLE001 - a planning failure must not stop the rounds
            self._fail(round_index, exc)
            return
        self.status, self.planned_after_round = 'planning', round_index

    def _planner_inputs(self, drone_ids: Sequence[int], num_params: int,
                        model_bytes: int) -> PlannerInputs:
        c = self.config
        return PlannerInputs(
            drone_ids=tuple(int(d) for d in drone_ids),
            class_counts=np.array([self.class_counts[d] for d in drone_ids], np.float64),
            distance_m=np.array([self.distance_m(d) for d in drone_ids], np.float64),
            num_params=int(num_params), batch_size=c.learning.batch_size,
            kappa_steps=c.learning.kappa_steps, num_selected=c.aggregation.num_selected,
            seed=c.world.seed, resources=c.resources, system=self.system,
            download_s=8.0 * model_bytes / self.system.downlink_rate_bit_s,
            generator_makes_absent_classes=bool(getattr(
                drone_topup_generator(), 'makes_absent_classes', True)))

    def _fail(self, round_index: int, exc: Exception) -> None:
        """Record a planning failure: logged, in knobs.json, and the rounds go on without
        knobs."""
        self.status, self.error = 'failed', f'{type(exc).__name__}: {exc}'
        self.planned_after_round = None
        _log.error('resources.planner %s failed after round %d (rounds go on without '
                   'knobs): %s', self.planner_name, round_index, self.error)

    @property
    def pending(self) -> bool:
        """Inputs are taken and the planner is not built yet."""
        return self.status == 'planning'

    def build_pending(self) -> None:
        """Build the planner from the inputs :meth:`plan_if_ready` took (no-op otherwise); a
        failure is logged and recorded, and the rounds go on without knobs."""
        if not self.pending:
            return
        round_index = self.planned_after_round
        try:
            self.planner = build_planner(self.inputs)
        except Exception as exc:  # noqa: BLE001 - a planning failure must not stop the rounds
            self._fail(round_index, exc)
            return
        self.status = 'planned'
        if self._resume_log is not None and self.planner.resumes_from_knobs:
            self.planner.load_log(*self._resume_log)    # its decisions up to the checkpoint
        self._resume_log = None
        _log.info('resources.planner %s planned after round %d', self.planner_name,
                  round_index)

    def knobs(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        """The planner's knobs for this round per drone ({} before it is built); builds a
        pending planner first."""
        self.build_pending()
        if self.planner is None:
            return {}
        knobs = self.planner.knobs(round_index, list(drone_ids))
        self.planner.record(round_index, knobs)
        self.rounds[round_index] = {int(d): dict(k) for d, k in knobs.items()}
        return knobs

    def state_dict(self) -> dict[str, Any]:
        """What a resumed station needs to plan on (JSON-ready): the drones' reports, the
        status, the knobs sent, and the planner's own log. The planner itself is rebuilt
        from its inputs (seeded: the same plan) by :meth:`load_state_dict`."""
        return {'class_counts': {str(d): c for d, c in self.class_counts.items()},
                'positions_enu_m': {str(d): p for d, p in self.positions_enu_m.items()},
                'status': self.status, 'error': self.error,
                'planned_after_round': self.planned_after_round,
                'drone_ids': list(self.inputs.drone_ids) if self.inputs is not None else None,
                'sizes': list(self._sizes) if self._sizes is not None else None,
                'rounds': {str(r): {str(d): k for d, k in row.items()}
                           for r, row in self.rounds.items()},
                'planner_log': self.planner.summary() if self.planner is not None else None}

    def load_state_dict(self, state: Mapping[str, Any], rounds_closed: int) -> None:
        """Restore :meth:`state_dict` into this (new) instance; a planner that was built or
        pending is pending again (built by the next :meth:`build_pending`, then given its log
        up to ``rounds_closed``). ValueError/KeyError/TypeError on a malformed state."""
        self.class_counts = {int(d): [int(v) for v in c]
                             for d, c in state['class_counts'].items()}
        self.positions_enu_m = {int(d): [float(v) for v in p]
                                for d, p in state['positions_enu_m'].items()}
        self.status, self.error = str(state['status']), str(state['error'])
        after = state['planned_after_round']
        self.planned_after_round = None if after is None else int(after)
        self.rounds = {int(r): {int(d): dict(k) for d, k in row.items()}
                       for r, row in state['rounds'].items()}
        if self.status in ('planning', 'planned'):
            num_params, model_bytes = state['sizes']
            self._sizes = (int(num_params), int(model_bytes))
            self.inputs = self._planner_inputs([int(d) for d in state['drone_ids']],
                                               *self._sizes)
            self.status = 'planning'
            if state.get('planner_log') is not None:
                self._resume_log = (dict(state['planner_log']), rounds_closed)

    def report(self) -> dict[str, Any]:
        """What was planned from what, and the knobs sent each round (DIR/knobs.json)."""
        out: dict[str, Any] = {'planner': self.planner_name, 'status': self.status,
                               'planned_after_round': self.planned_after_round,
                               'station_enu_m': list(self.station_enu_m)}
        if self.error:
            out['error'] = self.error
        if self.inputs is not None:
            out['inputs'] = {'drone_ids': list(self.inputs.drone_ids),
                             'distance_m': self.inputs.distance_m.tolist(),
                             'class_counts': self.inputs.class_counts.astype(int).tolist(),
                             'positions_enu_m': {str(d): self.positions_enu_m[d]
                                                 for d in self.inputs.drone_ids},
                             'num_params': self.inputs.num_params,
                             'download_s': self.inputs.download_s}
        if self.planner is not None:
            out['summary'] = self.planner.summary()
        out['rounds'] = {str(r): {str(d): k for d, k in row.items()}
                         for r, row in self.rounds.items()}
        return out
