"""OnboardPlanner: each drone plans and flies its own 2CEOAFL trajectory (ROS-free).

2CEOAFL (Pervej et al.) has every aerial client plan, on its own and once, one waypoint q_t per
FL round that maximises the proportionally fair class-priority objective of eq. (4), over the
class regions of its spatial Gaussian mixture (eq. (1)) and the time-varying class priorities
ψ of eq. (2). Onboard, with ``trajectory.planner: 2ceoafl``:

1. Survey: for the first ``trajectory.survey_rounds`` rounds the drone flies the station's
   coverage sweep (the round task's plan) and buffers geo-tagged labelled samples (the agent
   labels each camera frame from its land-cover raster at the telemetry pose matched by stamp,
   and keeps (east_m, north_m, label) of every sample the buffer accepts).
2. Plan (once, in the first round after the survey, retried each round until it succeeds):
   fit eq. (1) per class from those geo-tags (:func:`fit_class_regions`; classes with fewer
   than ``min_samples_per_class`` samples get no region), take ψ of eq. (2) for the remaining
   rounds (:func:`class_priorities`, M_u seeded by the world seed and the drone id), and solve
   eqs. (4)-(5) by SCA (Algorithm 1, :func:`plan_trajectory_detailed`) from the drone's
   current position under its own limits: the geofence box, the altitude band (the plan flies
   at ``coverage.altitude_m``, the survey's altitude, so footprints and labels match the fitted
   regions), a reach per round (``FleetConfig.round_reach_m`` less the sampling diamond) and a
   battery budget on the path length (:meth:`OnboardPlanner.energy_budget_m`).
3. Fly: round t's mission is q_t, then a sampling diamond of radius ``sample_radius_m`` around
   it (q → E → N → W → S → q; shrunk so it stays inside the fence), so the drone collects
   varied frames of the region at q_t (2CEOAFL senses at q_t, eq. (6)) and ends the round at
   q_t, where the plan's next step starts. The mission goes through DronePilot's geofence check
   like any plan.

If planning fails (no labelled samples, so no region: ``no_class_regions``; any other
:class:`PlanInfeasibleError` cause; no telemetry position: ``no_position``; a malformed request:
``plan_error``), the drone logs the cause, counts it in ``fallbacks`` and flies the station's
coverage plan for that round. Every round's choice is kept in :meth:`OnboardPlanner.record`.

Energy model (documented choice; the paper has none): the drone is airborne for the whole of
each remaining round, hovering at ``hover_power_w`` when not flying, flying at
``cruise_power_w`` at flight.speed_m_s (:class:`fl_uav.netmodel.flight.ConstantPower`), and
must keep ``battery_reserve_fraction`` of the pack plus a return leg across the fence diagonal.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fl_uav.fleet.config import FleetConfig, sampling_pattern_length_m
from fl_uav.fleet.messages import RoundTask
from fl_uav.netmodel.flight import ConstantPower
from fl_uav.planning.coverage import PlanError, PlanInfeasibleError, PlanWaypoint
from fl_uav.planning.geofence import Geofence
from fl_uav.planning.trajectory import (
    GaussianRegion,
    TrajectoryConstraints,
    class_priorities,
    fit_class_regions,
    plan_trajectory_detailed,
    total_path_m,
)
from fl_uav.world.landcover import CLASS_NAMES

_log = logging.getLogger(__name__)

MISSION_SOURCES = ('coverage', 'survey', '2ceoafl', 'fallback')
NO_POSITION = 'no_position'     # fallback cause: no telemetry pose to plan from
PLAN_ERROR = 'plan_error'       # fallback cause: a malformed request (PlanError, not infeasible)
_J_PER_WH = 3600.0


def record_file_name(drone_id: int) -> str:
    """File the drone node writes :meth:`OnboardPlanner.record` to, in its output_dir."""
    return f'trajectory_uav{drone_id}.json'


@dataclass(frozen=True)
class RoundMission:
    """What the drone flies in a round and why.

    source: 'coverage' (planner coverage), 'survey' (2ceoafl survey round), '2ceoafl' (q_t and
    its sampling diamond) or 'fallback' (the station's plan because planning failed: ``cause``);
    target: q_t of 2CEOAFL ('2ceoafl' rounds only).
    """

    round_index: int
    source: str
    waypoints: tuple[PlanWaypoint, ...]
    target: PlanWaypoint | None = None
    cause: str = ''


@dataclass(frozen=True)
class OnboardTrajectory:
    """The drone's own 2CEOAFL plan: q_t for rounds first_round..first_round + T - 1.

    classes: associated class per round (eq. (3), -1: none); objective: eq. (4) of the plan;
    regions: the fitted eq. (1) components it was planned over; start_enu_m: where it starts;
    step_m, budget_m: the reach per round and the path budget it met; solve_time_s: wall time.
    """

    first_round: int
    waypoints: tuple[PlanWaypoint, ...]
    classes: tuple[int, ...]
    objective: float
    regions: tuple[GaussianRegion, ...]
    start_enu_m: tuple[float, float]
    step_m: float
    budget_m: float
    solve_time_s: float

    def target_for(self, round_index: int) -> PlanWaypoint | None:
        """q_t of a round, or None outside the planned rounds."""
        index = round_index - self.first_round
        return self.waypoints[index] if 0 <= index < len(self.waypoints) else None


def sampling_diamond(target: PlanWaypoint, radius_m: float,
                     fence: Geofence) -> tuple[PlanWaypoint, ...]:
    """q_t, then E, N, W, S of it at radius r, then q_t again; r is cut to the distance from
    q_t to the fence box so every point stays inside (no point is clipped). r < 1 m: just q_t."""
    room_m = min(target.east_m - fence.east_min_m, fence.east_max_m - target.east_m,
                 target.north_m - fence.north_min_m, fence.north_max_m - target.north_m)
    radius_m = max(0.0, min(radius_m, room_m))
    if radius_m < 1.0:
        return (target,)
    e, n, u = target.east_m, target.north_m, target.up_m
    return (target, PlanWaypoint(e + radius_m, n, u), PlanWaypoint(e, n + radius_m, u),
            PlanWaypoint(e - radius_m, n, u), PlanWaypoint(e, n - radius_m, u), target)


def _seed_of(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


class OnboardPlanner:
    """Chooses each round's mission: the station's sweep, or the drone's own 2CEOAFL plan."""

    def __init__(self, config: FleetConfig, drone_id: int,
                 samples: Callable[[], tuple[np.ndarray, np.ndarray]],
                 on_plan: Callable[[OnboardTrajectory], None] | None = None) -> None:
        self.config = config
        self.drone_id = drone_id
        self.fence = config.geofence_enu()
        self._samples = samples
        self._on_plan = on_plan
        self._lock = threading.Lock()
        self.trajectory: OnboardTrajectory | None = None
        self.missions: list[RoundMission] = []
        self.sources: Counter[str] = Counter()
        self.fallbacks: Counter[str] = Counter()
        self.battery_fraction = 1.0
        self.num_classes = len(CLASS_NAMES)
        self._propulsion = ConstantPower(config.trajectory.cruise_power_w,
                                         config.trajectory.hover_power_w)

    @property
    def onboard(self) -> bool:
        """Whether this drone plans its own trajectory (trajectory.planner 2ceoafl)."""
        return self.config.trajectory.planner == '2ceoafl'

    def on_battery(self, remaining_fraction: float) -> None:
        """Latest battery telemetry (the energy budget starts from it); ignored if not in
        [0, 1]."""
        if math.isfinite(remaining_fraction) and 0.0 <= remaining_fraction <= 1.0:
            self.battery_fraction = float(remaining_fraction)

    # --- the pieces of a plan --------------------------------------------------------------
    def fit_regions(self) -> list[GaussianRegion]:
        """2CEOAFL eq. (1) from the drone's geo-tagged samples (classes with at least
        min_samples_per_class samples)."""
        positions, labels = self._samples()
        traj = self.config.trajectory
        if len(labels) == 0:
            return []
        counts = np.bincount(labels, minlength=self.num_classes)
        keep = counts[labels] >= traj.min_samples_per_class
        return fit_class_regions(positions[keep], labels[keep], self.num_classes,
                                 components_per_class=traj.components_per_class,
                                 seed=_seed_of(self.config.world.seed, self.drone_id))

    def priorities(self, first_round: int) -> np.ndarray:
        """ψ (T_left x C) of 2CEOAFL eq. (2) for rounds first_round..num_rounds: the rows of
        the whole run's ψ (T = rounds.num_rounds), M_u seeded per drone."""
        num_rounds = self.config.rounds.num_rounds
        psi = class_priorities(num_rounds, self.num_classes,
                               seed=_seed_of(self.config.world.seed, self.drone_id))
        return psi[first_round - 1:]

    def pattern_length_m(self) -> float:
        """Longest sampling diamond flown around q_t each round."""
        return sampling_pattern_length_m(self.config.trajectory.sample_radius_m)

    def energy_budget_m(self, rounds_left: int) -> float:
        """Path length (start through every q_t) the battery allows for the remaining rounds.

        Usable energy = pack x (battery fraction now - reserve fraction); it must cover hovering
        through every remaining round (rounds.deadline_s each), the extra power of level flight
        over hover on the path, the sampling diamonds, and a return leg across the fence
        diagonal. With level flight cheaper than hover, the path costs nothing extra and the
        budget is unlimited if hovering and the return fit (else 0: infeasible).
        """
        traj, speed = self.config.trajectory, self.config.flight.speed_m_s
        usable_j = traj.battery_wh * _J_PER_WH * (self.battery_fraction
                                                  - traj.battery_reserve_fraction)
        cruise_w = float(self._propulsion.flight_power_w(speed))
        hover_w = self._propulsion.hover_power_w
        diagonal_m = math.hypot(self.fence.east_max_m - self.fence.east_min_m,
                                self.fence.north_max_m - self.fence.north_min_m)
        fixed_j = (hover_w * rounds_left * self.config.rounds.deadline_s
                   + cruise_w * diagonal_m / speed)
        extra_j_per_m = (cruise_w - hover_w) / speed
        if usable_j - fixed_j < 0.0:
            return 0.0
        if extra_j_per_m <= 0.0:
            return math.inf
        return (usable_j - fixed_j) / extra_j_per_m - rounds_left * self.pattern_length_m()

    def constraints(self, rounds_left: int) -> TrajectoryConstraints:
        """The drone's limits as the planner takes them (reach per round, fence, band, budget)."""
        speed = self.config.flight.speed_m_s
        step_m = self.config.round_reach_m() - self.pattern_length_m()
        return TrajectoryConstraints(
            fence=self.fence.box, altitude_m=self.config.coverage.altitude_m,
            min_altitude_m=self.fence.min_up_m, max_altitude_m=self.fence.max_up_m,
            max_speed_m_s=speed, round_time_s=step_m / speed,
            budget_m=self.energy_budget_m(rounds_left), zeta=self.config.trajectory.zeta,
            time_limit_s=self.config.trajectory.solver_time_limit_s)

    def plan(self, first_round: int, start_enu_m: Sequence[float]) -> OnboardTrajectory:
        """Plan q_t for rounds first_round..num_rounds (2CEOAFL eqs. (1)-(5), Algorithm 1).
        Raises PlanInfeasibleError (with its cause) or PlanError."""
        regions = self.fit_regions()
        psi = self.priorities(first_round)
        constraints = self.constraints(len(psi))
        start = (float(start_enu_m[0]), float(start_enu_m[1]))
        result = plan_trajectory_detailed(regions, psi, start, constraints,
                                          seed=_seed_of(self.config.world.seed, self.drone_id))
        return OnboardTrajectory(first_round, tuple(result.waypoints), tuple(result.classes),
                                 result.objective, tuple(regions), start, constraints.step_m,
                                 constraints.budget_m, result.solve_time_s)

    # --- a round ---------------------------------------------------------------------------
    def mission_for(self, task: RoundTask,
                    start_enu_m: Sequence[float] | None) -> RoundMission:
        """This round's mission. Coverage planner or survey round: the station's plan. Else the
        drone's own q_t and sampling diamond (planning first if no plan exists yet); if planning
        fails the station's plan, with the cause logged and counted."""
        with self._lock:
            mission = self._choose(task, start_enu_m)
            self.missions.append(mission)
            self.sources[mission.source] += 1
        return mission

    def _choose(self, task: RoundTask, start_enu_m: Sequence[float] | None) -> RoundMission:
        index = task.round_index
        if not self.onboard:
            return RoundMission(index, 'coverage', task.plan)
        if index <= self.config.trajectory.survey_rounds:
            return RoundMission(index, 'survey', task.plan)
        if self.trajectory is None or self.trajectory.target_for(index) is None:
            cause = self._try_to_plan(index, start_enu_m)
            if cause:
                self.fallbacks[cause] += 1
                return RoundMission(index, 'fallback', task.plan, cause=cause)
        target = self.trajectory.target_for(index)
        waypoints = sampling_diamond(target, self.config.trajectory.sample_radius_m,
                                     self.fence)
        return RoundMission(index, '2ceoafl', waypoints, target=target)

    def _try_to_plan(self, first_round: int, start_enu_m: Sequence[float] | None) -> str:
        """Plan from here; '' on success, else the fallback cause (logged)."""
        if start_enu_m is None:
            cause, detail = NO_POSITION, 'no telemetry position to plan from'
        else:
            try:
                self.trajectory = self.plan(first_round, start_enu_m)
            except PlanInfeasibleError as exc:
                cause, detail = exc.cause, str(exc)
            except PlanError as exc:
                cause, detail = PLAN_ERROR, str(exc)
            else:
                plan = self.trajectory
                _log.info('drone %d: 2CEOAFL plan for rounds %d..%d over %d fitted regions: '
                          'eq. (4) objective %.3f, path %.0f m (budget %.0f m), %.1f s',
                          self.drone_id, first_round, first_round + len(plan.waypoints) - 1,
                          len(plan.regions), plan.objective,
                          total_path_m(plan.start_enu_m, plan.waypoints), plan.budget_m,
                          plan.solve_time_s)
                if self._on_plan is not None:
                    try:
                        self._on_plan(plan)
                    except Exception:  # noqa: BLE001 - a display hook must not stop the flight
                        _log.exception('drone %d: on_plan callback failed', self.drone_id)
                return ''
        _log.warning("drone %d round %d: no 2CEOAFL plan (%s), flying the station's coverage "
                     'plan instead: %s', self.drone_id, first_round, cause, detail)
        return cause

    def round_task(self, task: RoundTask, start_enu_m: Sequence[float] | None) -> RoundTask:
        """The task with this round's mission as its plan (what the pilot checks and flies)."""
        mission = self.mission_for(task, start_enu_m)
        return task if mission.waypoints is task.plan else replace(task, plan=mission.waypoints)

    # --- what happened ---------------------------------------------------------------------
    def describe_round(self, round_index: int) -> str:
        """What the drone flew in a round, for log lines: '2ceoafl mission', 'fallback mission:
        no_class_regions', ..."""
        with self._lock:
            flown = next((m for m in reversed(self.missions) if m.round_index == round_index),
                         None)
        if flown is None:
            return 'no mission chosen'
        return f'{flown.source} mission' + (f': {flown.cause}' if flown.cause else '')

    def record(self) -> dict[str, Any]:
        """JSON-ready account: the plan (regions, q_t, objective), every round's mission, and the
        class counts of the geo-tagged samples now."""
        with self._lock:
            plan = self.trajectory
            missions = list(self.missions)
            sources, fallbacks = dict(self.sources), dict(self.fallbacks)
        labels = self._samples()[1]
        out: dict[str, Any] = {
            'drone_id': self.drone_id, 'planner': self.config.trajectory.planner,
            'sample_class_counts': np.bincount(labels, minlength=self.num_classes).tolist(),
            'survey_rounds': self.config.trajectory.survey_rounds,
            'sources': sources, 'fallbacks': fallbacks, 'plan': None,
            'rounds': [{'round': m.round_index, 'source': m.source, 'cause': m.cause,
                        'target_enu_m': None if m.target is None else _xyz(m.target),
                        'mission_enu_m': [_xyz(w) for w in m.waypoints]} for m in missions],
        }
        if plan is not None:
            out['plan'] = {
                'first_round': plan.first_round, 'start_enu_m': list(plan.start_enu_m),
                'waypoints_enu_m': [_xyz(w) for w in plan.waypoints],
                'classes': list(plan.classes), 'objective': plan.objective,
                'step_m': plan.step_m,
                'budget_m': plan.budget_m if math.isfinite(plan.budget_m) else None,
                'path_m': total_path_m(plan.start_enu_m, plan.waypoints),
                'solve_time_s': plan.solve_time_s,
                'regions': [{'class_id': r.class_id, 'center_enu_m': list(r.center_enu_m),
                             'radius_m': r.radius_m, 'weight': r.weight}
                            for r in plan.regions]}
        return out

    def write_record(self, path: str | Path) -> None:
        """Write :meth:`record` as JSON (via a temporary file and a rename; creates the
        directory)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + '.tmp')
        tmp.write_text(json.dumps(self.record(), indent=2))
        tmp.replace(path)


def _xyz(waypoint: PlanWaypoint) -> list[float]:
    return [waypoint.east_m, waypoint.north_m, waypoint.up_m]
