"""OnboardPlanner: each drone plans and flies its own 2CEOAFL trajectory (ROS-free).

2CEOAFL (Pervej et al.) has every aerial client plan, on its own and once, one waypoint q_t per
FL round that maximises the proportionally fair class-priority objective of eq. (4), over the
class regions of its spatial Gaussian mixture (eq. (1)) and the time-varying class priorities
ψ of eq. (2). Onboard, with ``trajectory.planner: 2ceoafl``:

1. Survey: for the first ``trajectory.survey_rounds`` rounds the drone flies the station's
   coverage sweep (the round task's plan) and buffers geo-tagged labelled samples (the agent
   labels each camera frame from its land-cover raster at the telemetry pose matched by stamp,
   and keeps (east_m, north_m, label) of every sample the buffer accepts).
2. Plan: fit eq. (1) per class (:func:`fit_class_regions`, ``components_per_class``
   Gaussians per class; classes with fewer than ``min_samples_per_class`` samples get no
   region) to geo-tagged labels: with ``trajectory.regions: survey`` the drone's own buffered
   samples (the paper's D_u^0; only classes its survey saw), with ``map`` labels of the onboard
   land-cover raster the drone labels its frames with, one per camera footprint over the fence
   (:func:`raster_geotags`; every class, fitted once). Then solve eqs. (4)-(5) by SCA
   (Algorithm 1, :func:`plan_trajectory_detailed`) from the drone's current position under its
   own limits: the geofence box, the altitude band (the plan flies at ``coverage.altitude_m``,
   the survey's altitude, so footprints and labels match the fitted regions), a reach per round
   (``FleetConfig.round_reach_m`` less the sampling diamond) and a battery budget on the path
   length (:meth:`OnboardPlanner.energy_budget_m`). The priorities ψ:

   * ``trajectory.priorities: paper`` (default): ψ of eq. (2) for the remaining rounds
     (:func:`class_priorities`, M_u seeded by the world seed and the drone id), planned once in
     the first round after the survey (retried each round until it succeeds).
   * ``deficit``: re-planned every round for the remaining rounds with ψ = 1 and the buffer's
     class counts as held mass h_c inside eq. (4)'s log (:meth:`held_mass`: counts in rounds'
     worth of samples), so the proportional fairness of eq. (4) is over the drone's whole
     dataset and a visit pays most for the class the buffer lacks (eq. (2)'s ψ is random by
     design, not aimed at the drone's need). It gives the more even buffers but did not learn
     better in the fleet (docs/benchmarks.md): it keeps going back to classes whose regions
     yield few frames of the class (thin roads), and it plans every round.
3. Fly: round t's mission starts at q_t (2CEOAFL senses at q_t, eq. (6)); the mission goes
   through DronePilot's geofence check like any plan. Then, with ``trajectory.sampling``:

   * ``sweep`` (default): a boustrophedon over the square around q_t's region's association
     circle (:func:`sweep_box`), then over the class's other regions, nearest first (new ground
     of the class before any repeat), legs ``coverage.leg_spacing_m`` apart (the station's
     spacing, about one camera footprint), flown back and forth until the round's flight length
     is used (:func:`region_sweep`). The round's flight length is the station's sweep of the
     round from the drone's position (what ``coverage`` would fly; the flight budget cuts both
     alike), at least the reach: the camera samples per second of flight, so a planned round
     collects as many frames as a sweep round, from the class the plan chose.
   * ``diamond``: a diamond of radius ``sample_radius_m`` around q_t (q → E → N → W → S → q;
     shrunk so it stays inside the fence), ending at q_t, where the plan's next step starts.

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
from fl_uav.planning.coverage import (
    Box,
    PlanError,
    PlanInfeasibleError,
    PlanWaypoint,
    lawnmower,
    path_length_m,
)
from fl_uav.planning.geofence import Geofence
from fl_uav.planning.trajectory import (
    GaussianRegion,
    TrajectoryConstraints,
    associated_regions,
    class_priorities,
    fit_class_regions,
    plan_trajectory_detailed,
    total_path_m,
)
from fl_uav.streams import Stream, stream_seed
from fl_uav.world.camera import footprint_m
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import CLASS_NAMES, UNKNOWN

_log = logging.getLogger(__name__)

MISSION_SOURCES = ('coverage', 'survey', '2ceoafl', 'fallback')
NO_POSITION = 'no_position'     # fallback cause: no telemetry pose to plan from
PLAN_ERROR = 'plan_error'       # fallback cause: a malformed request (PlanError, not infeasible)
_J_PER_WH = 3600.0
# A fitted component is kept only if its own class is the majority (as the labeler's majority
# rule) of the geo-tagged labels inside its association circle ζ λ (eq. (3)): a Gaussian fitted
# over a class's scattered blobs can centre on another class, and visiting it senses that one.
MIN_REGION_PURITY = 0.5
# Patterns shorter than this are not worth a waypoint (the mission acceptance radius is 1 m).
MIN_PATTERN_M = 1.0


Geotags = tuple[np.ndarray, np.ndarray]     # positions (N x 2, ENU m), labels (N,)


def record_file_name(drone_id: int) -> str:
    """File the drone node writes :meth:`OnboardPlanner.record` to, in its output_dir."""
    return f'trajectory_uav{drone_id}.json'


@dataclass(frozen=True)
class RoundMission:
    """What the drone flies in a round and why.

    source: 'coverage' (planner coverage), 'survey' (2ceoafl survey round), '2ceoafl' (q_t and
    its sampling pattern) or 'fallback' (the station's plan because planning failed: ``cause``);
    target: q_t of 2CEOAFL ('2ceoafl' rounds only); class_id: q_t's class (eq. (3), -1: none);
    sample_m: length of the sampling pattern after q_t.
    """

    round_index: int
    source: str
    waypoints: tuple[PlanWaypoint, ...]
    target: PlanWaypoint | None = None
    cause: str = ''
    class_id: int = -1
    sample_m: float = 0.0


@dataclass(frozen=True)
class OnboardTrajectory:
    """The drone's own 2CEOAFL plan: q_t for rounds first_round..first_round + T - 1.

    classes: associated class per round (eq. (3), -1: none); objective: eq. (4) of the plan;
    regions: the fitted eq. (1) components it was planned over; start_enu_m: where it starts;
    step_m, budget_m: the reach per round and the path budget it met; solve_time_s: wall time;
    time_capped: a wall-clock safety cap (trajectory.plan_time_budget_s,
    trajectory.solver_time_limit_s) cut the planner short, so the plan depends on the load.
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
    time_capped: bool = False

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


def sweep_box(region: GaussianRegion, fence: Geofence, min_side_m: float,
              zeta: float = 1.0) -> Box | None:
    """The box a sampling sweep covers: the square around the region's association circle of
    eq. (3) (half-side ζ λ around μ), widened to at least min_side_m a side, clipped to the
    fence; None if less than MIN_PATTERN_M of it is inside the fence."""
    half_m = max(zeta * region.radius_m, min_side_m / 2.0)
    east, north = region.center_enu_m
    box = (max(east - half_m, fence.east_min_m), max(north - half_m, fence.north_min_m),
           min(east + half_m, fence.east_max_m), min(north + half_m, fence.north_max_m))
    if box[2] - box[0] < MIN_PATTERN_M or box[3] - box[1] < MIN_PATTERN_M:
        return None
    return box


def _box_pass(box: Box, from_xy: np.ndarray, leg_spacing_m: float) -> np.ndarray:
    """Corners of a boustrophedon of ``box`` (legs along north, leg_spacing_m apart) starting at
    the corner nearest from_xy."""
    east_min, north_min, east_max, north_max = box
    corners = np.array([(w.east_m, w.north_m) for w in lawnmower(box, leg_spacing_m, 0.0)])
    if from_xy[0] > (east_min + east_max) / 2.0:
        corners[:, 0] = east_min + east_max - corners[:, 0]
    if from_xy[1] > (north_min + north_max) / 2.0:
        corners[:, 1] = north_min + north_max - corners[:, 1]
    return corners


def region_sweep(target: PlanWaypoint, boxes: Sequence[Box], length_m: float,
                 leg_spacing_m: float) -> tuple[PlanWaypoint, ...]:
    """q_t, then a boustrophedon of each box (legs along north, leg_spacing_m apart, each from
    its corner nearest the drone): ``boxes[0]`` first (q_t's region), then the others nearest
    first, so the round covers new ground of the class before it repeats any; the whole pass is
    then flown back and forth until length_m of path after q_t is used, the last segment cut
    at length_m. Every point but q_t is inside a box. length_m below MIN_PATTERN_M or no box:
    just q_t."""
    if not (math.isfinite(length_m) and leg_spacing_m > 0.0):
        raise PlanError(f'sweep length {length_m} m and leg spacing {leg_spacing_m} m must be '
                        f'finite and > 0')
    if length_m < MIN_PATTERN_M or not boxes:
        return (target,)
    here = np.array([target.east_m, target.north_m])
    legs, left = [], list(boxes[1:])
    box = boxes[0]
    while True:
        legs.append(_box_pass(box, here, leg_spacing_m))
        here = legs[-1][-1]
        if not left:
            break
        box = min(left, key=lambda b: math.hypot((b[0] + b[2]) / 2.0 - here[0],
                                                  (b[1] + b[3]) / 2.0 - here[1]))
        left.remove(box)
    one_pass = np.vstack(legs)
    points = [np.array([target.east_m, target.north_m])]
    used_m, forward = 0.0, True
    while used_m < length_m:
        for corner in (one_pass if forward else one_pass[::-1]):
            step_m = float(np.linalg.norm(corner - points[-1]))
            if step_m <= 0.0:
                continue
            if used_m + step_m >= length_m:
                points.append(points[-1] + (corner - points[-1]) * (length_m - used_m) / step_m)
                used_m = length_m
                break
            points.append(corner)
            used_m += step_m
        forward = not forward
    return tuple(PlanWaypoint(float(p[0]), float(p[1]), target.up_m) for p in points)


def raster_geotags(label_at: Callable[[float, float], int], fence: Geofence,
                   spacing_m: float) -> Geotags:
    """Geo-tagged labels of a land-cover raster: one at the centre of every spacing_m cell of
    the fence box (label_at(east_m, north_m): the class the camera would label there)."""
    if not spacing_m > 0.0:
        raise PlanError(f'raster spacing must be > 0, got {spacing_m} m')
    east = np.arange(fence.east_min_m + spacing_m / 2.0, fence.east_max_m, spacing_m)
    north = np.arange(fence.north_min_m + spacing_m / 2.0, fence.north_max_m, spacing_m)
    grid = np.array([(e, n) for e in east for n in north], np.float64).reshape(-1, 2)
    labels = np.array([label_at(float(e), float(n)) for e, n in grid], np.int64)
    return grid, labels


def pure_regions(regions: Sequence[GaussianRegion], positions_enu_m: np.ndarray,
                 labels: np.ndarray, zeta: float) -> list[GaussianRegion]:
    """The regions whose own class is at least MIN_REGION_PURITY of the geo-tagged labels inside
    their association circle ||q - μ|| <= ζ λ (eq. (3)); a circle holding no label is kept."""
    positions = np.asarray(positions_enu_m, np.float64).reshape(-1, 2)
    labels = np.asarray(labels).reshape(-1)
    kept = []
    for region in regions:
        inside = (np.linalg.norm(positions - np.asarray(region.center_enu_m), axis=1)
                  <= zeta * region.radius_m)
        if not inside.any() or np.mean(labels[inside] == region.class_id) >= MIN_REGION_PURITY:
            kept.append(region)
    return kept


def map_geotags(labeler: MapLabeler, fence: Geofence, altitude_m: float) -> Geotags:
    """:func:`raster_geotags` of the drone's own labeler at the survey altitude, one label per
    camera footprint (the label a nadir frame there gets; footprints over unknown land cover
    are left out)."""
    positions, labels = raster_geotags(
        lambda east_m, north_m: labeler.label(east_m, north_m, altitude_m),
        fence, footprint_m(altitude_m, labeler.fov_deg))
    known = labels != UNKNOWN
    return positions[known], labels[known]


class OnboardPlanner:
    """Chooses each round's mission: the station's sweep, or the drone's own 2CEOAFL plan."""

    def __init__(self, config: FleetConfig, drone_id: int, samples: Callable[[], Geotags],
                 on_plan: Callable[[OnboardTrajectory], None] | None = None,
                 map_samples: Callable[[], Geotags] | None = None) -> None:
        """samples: the drone's geo-tagged buffered samples; map_samples: geo-tagged labels of
        its land-cover raster (:func:`raster_geotags`), needed by trajectory.regions map."""
        traj = config.trajectory
        if traj.planner == '2ceoafl' and traj.regions == 'map' and map_samples is None:
            raise ValueError('trajectory.regions map fits the class regions to the onboard '
                             'land-cover raster, but no map_samples were given (use '
                             'trajectory.regions survey without a raster)')
        self.config = config
        self.drone_id = drone_id
        self.fence = config.geofence_enu()
        self._samples = samples
        self._map_samples = map_samples
        self._map_regions: list[GaussianRegion] | None = None
        self._on_plan = on_plan
        self.plans_made = 0
        self._lock = threading.Lock()
        self.trajectory: OnboardTrajectory | None = None
        self.missions: list[RoundMission] = []
        self.sources: Counter[str] = Counter()
        self.fallbacks: Counter[str] = Counter()
        self.battery_fraction = 1.0
        self.num_classes = len(CLASS_NAMES)
        self._propulsion = ConstantPower(config.trajectory.cruise_power_w,
                                         config.trajectory.hover_power_w)

    def _seed(self, purpose: Stream) -> int:
        """This drone's seed for one purpose (its regions' fit, its M_u, its trajectory):
        one stream each of (world.seed, purpose, drone), not one seed for all three."""
        return stream_seed(self.config.world.seed, 0, purpose, self.drone_id)

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
        """2CEOAFL eq. (1) from geo-tagged labels (classes with at least min_samples_per_class
        of them): the drone's buffered samples (regions survey) or its raster (regions map,
        fitted once: the raster does not change)."""
        if self.config.trajectory.regions == 'survey':
            return self._fit(*self._samples())
        if self._map_regions is None:
            self._map_regions = self._fit(*self._map_samples())
        return list(self._map_regions)

    def _fit(self, positions: np.ndarray, labels: np.ndarray) -> list[GaussianRegion]:
        traj = self.config.trajectory
        if len(labels) == 0:
            return []
        counts = np.bincount(labels, minlength=self.num_classes)
        keep = counts[labels] >= traj.min_samples_per_class
        regions = fit_class_regions(positions[keep], labels[keep], self.num_classes,
                                    components_per_class=traj.components_per_class,
                                    seed=self._seed(Stream.REGION_FIT))
        return pure_regions(regions, positions, labels, traj.zeta)

    def priorities(self, first_round: int) -> np.ndarray:
        """ψ (T_left x C) of 2CEOAFL eq. (2) for rounds first_round..num_rounds: the rows of
        the whole run's ψ (T = rounds.num_rounds), M_u seeded per drone."""
        num_rounds = self.config.rounds.num_rounds
        psi = class_priorities(num_rounds, self.num_classes,
                               seed=self._seed(Stream.CLASS_PRIORITIES))
        return psi[first_round - 1:]

    def held_mass(self, rounds_flown: int) -> np.ndarray:
        """h_c of eq. (4) under priorities deficit: the buffer's class counts in rounds' worth
        of samples (counts / mean samples per round flown), the units of Σ_t I ψ with ψ = 1."""
        labels = self._samples()[1]
        counts = np.bincount(labels, minlength=self.num_classes).astype(np.float64)
        per_round = counts.sum() / max(1, rounds_flown)
        return counts / per_round if per_round > 0.0 else counts

    def pattern_length_m(self) -> float:
        """Longest sampling diamond flown around q_t each round (the reach per round keeps
        room for it; a sweep takes what is left of the round)."""
        return sampling_pattern_length_m(self.config.trajectory.sample_radius_m)

    def round_pattern_energy_m(self) -> float:
        """Sampling path per round the energy budget reserves: the diamond, or with sampling
        sweep all the flight a round allows (flight.speed_m_s x round flight time; the pilot
        cuts a longer flight at the round's flight budget)."""
        if self.config.trajectory.sampling == 'sweep':
            return self.config.flight.speed_m_s * self.config.round_flight_time_s()
        return self.pattern_length_m()

    def energy_budget_m(self, rounds_left: int) -> float:
        """Path length (start through every q_t) the battery allows for the remaining rounds.

        Usable energy = pack x (battery fraction now - reserve fraction); it must cover hovering
        through every remaining round (rounds.deadline_s each), the extra power of level flight
        over hover on the path, the sampling patterns (:meth:`round_pattern_energy_m`), and a
        return leg across the fence diagonal. With level flight cheaper than hover, the path
        costs nothing extra and the budget is unlimited if hovering and the return fit (else 0:
        infeasible).
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
        return (usable_j - fixed_j) / extra_j_per_m - rounds_left * self.round_pattern_energy_m()

    def constraints(self, rounds_left: int) -> TrajectoryConstraints:
        """The drone's limits as the planner takes them (reach per round, fence, band, budget)."""
        speed, traj = self.config.flight.speed_m_s, self.config.trajectory
        step_m = self.config.round_reach_m() - self.pattern_length_m()
        return TrajectoryConstraints(
            fence=self.fence.box, altitude_m=self.config.coverage.altitude_m,
            min_altitude_m=self.fence.min_up_m, max_altitude_m=self.fence.max_up_m,
            max_speed_m_s=speed, round_time_s=step_m / speed,
            budget_m=self.energy_budget_m(rounds_left), zeta=self.config.trajectory.zeta,
            window_passes=traj.window_passes, horizon_iterations=traj.horizon_iterations,
            time_limit_s=traj.solver_time_limit_s, time_budget_s=traj.plan_time_budget_s)

    def plan(self, first_round: int, start_enu_m: Sequence[float]) -> OnboardTrajectory:
        """Plan q_t for rounds first_round..num_rounds (2CEOAFL eqs. (1)-(5), Algorithm 1).
        Raises PlanInfeasibleError (with its cause) or PlanError."""
        regions = self.fit_regions()
        held = None
        if self.config.trajectory.priorities == 'deficit':
            rounds_left = self.config.rounds.num_rounds - first_round + 1
            psi = np.ones((rounds_left, self.num_classes))
            held = self.held_mass(first_round - 1)
        else:
            psi = self.priorities(first_round)
        constraints = self.constraints(len(psi))
        start = (float(start_enu_m[0]), float(start_enu_m[1]))
        result = plan_trajectory_detailed(regions, psi, start, constraints,
                                          seed=self._seed(Stream.TRAJECTORY),
                                          held_mass=held)
        return OnboardTrajectory(first_round, tuple(result.waypoints), tuple(result.classes),
                                 result.objective, tuple(regions), start, constraints.step_m,
                                 constraints.budget_m, result.solve_time_s,
                                 result.time_capped)

    # --- a round ---------------------------------------------------------------------------
    def mission_for(self, task: RoundTask,
                    start_enu_m: Sequence[float] | None) -> RoundMission:
        """This round's mission. Coverage planner or survey round: the station's plan. Else the
        drone's own q_t and sampling pattern (planning first if no plan covers the round yet, or
        every round with priorities deficit); if planning fails the station's plan, with the
        cause logged and counted."""
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
        replan = self.config.trajectory.priorities == 'deficit'
        if replan or self.trajectory is None or self.trajectory.target_for(index) is None:
            cause = self._try_to_plan(index, start_enu_m)
            if cause:
                self.fallbacks[cause] += 1
                return RoundMission(index, 'fallback', task.plan, cause=cause)
        plan = self.trajectory
        target = plan.target_for(index)
        class_id = plan.classes[index - plan.first_round]
        region = self._target_region(target, plan.regions)
        if self.config.trajectory.sampling == 'diamond' or region is None:
            waypoints = sampling_diamond(target, self.config.trajectory.sample_radius_m,
                                         self.fence)
        else:
            waypoints = self._sweep(task, start_enu_m, target, region, plan.regions)
        return RoundMission(index, '2ceoafl', waypoints, target=target, class_id=class_id,
                            sample_m=path_length_m(list(waypoints)))

    def round_length_m(self, task: RoundTask, start_enu_m: Sequence[float] | None) -> float:
        """Flight length of a planned round with sampling sweep: the station's sweep of this
        round from the drone's position (what planner coverage flies), at least the reach."""
        plan = list(task.plan)
        station_m = 0.0
        if plan:
            station_m = path_length_m(plan)
            if start_enu_m is not None:
                station_m += math.hypot(plan[0].east_m - start_enu_m[0],
                                        plan[0].north_m - start_enu_m[1])
        return max(self.config.round_reach_m(), station_m)

    def _sweep(self, task: RoundTask, start_enu_m: Sequence[float] | None,
               target: PlanWaypoint, region: GaussianRegion,
               regions: Sequence[GaussianRegion]) -> tuple[PlanWaypoint, ...]:
        """q_t, then :func:`region_sweep` over q_t's region and the class's other regions."""
        spacing_m, zeta = self.config.coverage.leg_spacing_m, self.config.trajectory.zeta
        box = sweep_box(region, self.fence, spacing_m, zeta)
        if box is None:
            return sampling_diamond(target, self.config.trajectory.sample_radius_m, self.fence)
        others = [sweep_box(r, self.fence, spacing_m, zeta) for r in regions
                  if r.class_id == region.class_id and r is not region]
        transit_m = 0.0 if start_enu_m is None else math.hypot(
            target.east_m - start_enu_m[0], target.north_m - start_enu_m[1])
        return region_sweep(target, [box, *[b for b in others if b is not None]],
                            self.round_length_m(task, start_enu_m) - transit_m, spacing_m)

    def _target_region(self, target: PlanWaypoint,
                       regions: Sequence[GaussianRegion]) -> GaussianRegion | None:
        """The region q_t is associated with (eq. (3) with C4, :func:`associated_regions`)."""
        index = int(associated_regions([target], regions, self.config.trajectory.zeta)[0])
        return regions[index] if index >= 0 else None

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
                self.plans_made += 1
                _log.info('drone %d: 2CEOAFL plan for rounds %d..%d over %d fitted regions: '
                          'eq. (4) objective %.3f, path %.0f m (budget %.0f m), %.1f s',
                          self.drone_id, first_round, first_round + len(plan.waypoints) - 1,
                          len(plan.regions), plan.objective,
                          total_path_m(plan.start_enu_m, plan.waypoints), plan.budget_m,
                          plan.solve_time_s)
                if plan.time_capped:
                    _log.warning('drone %d: the 2CEOAFL planner hit a wall-clock safety cap '
                                 '(trajectory.plan_time_budget_s %.1f s / solver_time_limit_s '
                                 '%.1f s): the plan depends on the CPU load', self.drone_id,
                                 self.config.trajectory.plan_time_budget_s,
                                 self.config.trajectory.solver_time_limit_s)
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
            'sampling': self.config.trajectory.sampling,
            'priorities': self.config.trajectory.priorities,
            'regions_source': self.config.trajectory.regions,
            'plans_made': self.plans_made,
            'sources': sources, 'fallbacks': fallbacks, 'plan': None,
            'rounds': [{'round': m.round_index, 'source': m.source, 'cause': m.cause,
                        'class_id': m.class_id, 'sample_m': m.sample_m,
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
                'solve_time_s': plan.solve_time_s, 'time_capped': plan.time_capped,
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
