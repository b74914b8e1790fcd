"""Per-drone resource decisions (issue 5 item 3): FedDPQ's optimiser, LGC's policies.

:func:`build_planner` turns a ``resources`` section and a fleet's facts (:class:`PlannerInputs`)
into an object asked every round for each drone's knobs (fl_uav.planning.resources.
ResourcePlanner) and, for LGC, charging the drone's multi-channel upload. The engine builds it
from its own fleet (:func:`build_round_resources`); the fleet's ground station from what its
drones reported in their first round (fl_uav.fleet.ground_station). Below, as the engine uses it.

* ``feddpq``: the :class:`~fl_uav.planning.feddpq_opt.FeddpqFleet` is the engine's own fleet:
  label counts of each drone's partition (D_loc,u,c), the distances the engine drew, the
  model's parameter count (V), the system section's radio and CPU constants and S =
  ``aggregation.num_selected``. FedDPQ's model charges one SGD step of b samples per round
  (eq. (35)); the engine's drones take ``learning.kappa_steps`` steps, so b = batch ×
  kappa_steps makes the model's compute per round the engine's. Algorithm 2 runs once, seeded,
  before round 1 (FedDPQ §V: the decisions are static); the engine applies transmit power p_u
  (rate eq. (14), energy eq. (37), packet error eqs. (16)-(17) when
  ``system.packet_errors``), Δ_u (top-up, eqs. (1)-(3)), ρ_u (pruning, eqs. (9)-(10), (36))
  and δ_u (range bits, eqs. (11)-(13)).
* ``lgc_*``: each drone has the channels of ``resources.lgc_channel_*`` (LGC Table 1 prices,
  one FedDPQ-style Rayleigh link per channel at the drone's distance). Every round the engine
  draws each channel's rate (eq. (14)), reports it to the drone's controller
  (``observe_rates``, LGC eqs. (11)-(12): the state is the round's consumption factors), and
  the policy picks H and D_n (eq. (13)). The upload is charged as LGC eq. (15b): Σ_n bytes_n ·
  price_n, time max_n bits_n / R_n (the layers go out in parallel), plus hover power × round
  time (FedEx eq. (8)). DDPG: LGC trains each device's agent online during FL (digest 002
  §3.3, paper §4.2). Here each drone's agent is trained BEFORE round 1 on the surrogate
  environment (:class:`~fl_uav.planning.lgc_control.LgcEnv`) built from that drone's own
  channels, distance, CPU, batch and model size, then acts greedily and frozen in the run:
  a run of 50-100 rounds gives each drone 50-100 transitions, fewer than DDPG's warm-up.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_uav.fleet.run_log import KNOBS_FILE
from fl_uav.netmodel.compute import CpuDevice
from fl_uav.netmodel.payload import BYTES_PER_MB
from fl_uav.netmodel.radio import RadioLink
from fl_uav.planning.lgc_control import (
    ENTRIES_KNOB,
    LOCAL_STEPS_KNOB,
    DdpgConfig,
    DdpgPolicy,
    FixedPolicy,
    GreedyChannelPolicy,
    LgcChannel,
    LgcEnv,
    LgcEnvConfig,
    decode_action,
    train_ddpg,
)
from fl_uav.planning.resources import FeddpqResourcePlanner, LgcResourcePlanner
from fl_uav.sim.experiment_config import ResourcesConfig, SystemConfig

if TYPE_CHECKING:
    from fl_uav.sim.experiment import ExperimentEngine

RATES_SEED_TAG = 0x6C676372   # 'lgcr': the LGC channels' fading draws, apart from (seed, round)


@dataclass(frozen=True)
class PlannerInputs:
    """What a resource planner is built from: the engine's own fleet (:func:`engine_inputs`)
    or what the fleet's ground station learned from the drones' reports
    (fl_uav.fleet.ground_station).

    drone_ids: the planned drones. class_counts: D_loc,u,c (U x C real samples per class).
    distance_m: d_u, each drone's distance to the station (U). num_params: V. batch_size: b of
    one SGD step; kappa_steps: the FedDPQ client's steps per round (FedDPQ's model charges one
    step of b · kappa_steps samples, eq. (35)). num_selected: S, FedDPQ's draws per round.
    seed: the optimiser's and the LGC agents' seed. download_s: one round's model download
    (LGC's round time). generator_makes_absent_classes: see
    :class:`~fl_uav.planning.feddpq_opt.FeddpqFleet`.
    """

    drone_ids: tuple[int, ...]
    class_counts: np.ndarray
    distance_m: np.ndarray
    num_params: int
    batch_size: int
    kappa_steps: int
    num_selected: int
    seed: int
    resources: ResourcesConfig
    system: SystemConfig
    download_s: float = 0.0
    generator_makes_absent_classes: bool = True


def engine_inputs(engine: ExperimentEngine, down_s: float = 0.0) -> PlannerInputs:
    """The planner's view of the engine's fleet (see the module docstring)."""
    config = engine.config
    counts = np.array([np.bincount(engine.data.train_y[p], minlength=engine.data.num_classes)
                       for p in engine.parts], np.float64)
    return PlannerInputs(
        drone_ids=tuple(range(config.num_drones)), class_counts=counts,
        distance_m=np.asarray(engine.distance_m, np.float64),
        num_params=int(sum(int(w.size) for w in engine.weights.values())),
        batch_size=config.learning.batch_size, kappa_steps=config.learning.kappa_steps,
        num_selected=config.aggregation.num_selected, seed=config.seed,
        resources=config.resources, system=config.system, download_s=down_s,
        generator_makes_absent_classes=bool(
            getattr(engine.topup_generator, 'makes_absent_classes', True)))


def feddpq_fleet(inputs: PlannerInputs):
    """The FedDPQ optimiser's view of a fleet (see the module docstring)."""
    from fl_uav.planning.feddpq_opt import FeddpqFleet

    s = inputs.system
    return FeddpqFleet(tuple(inputs.drone_ids), inputs.class_counts, inputs.distance_m,
                       num_params=inputs.num_params, interference_w=s.interference_w,
                       cpu_freq_hz=s.cpu_freq_hz,
                       batch_size=inputs.batch_size * inputs.kappa_steps,
                       draws_per_round=inputs.num_selected,
                       bandwidth_hz=s.bandwidth_hz,
                       train_cycles_per_sample=s.train_cycles_per_sample,
                       gen_cycles_per_sample=s.gen_cycles_per_sample,
                       generator_makes_absent_classes=inputs.generator_makes_absent_classes)


class FeddpqRoundResources:
    """FedDPQ Algorithm 2's plan for a fleet, the same knobs every round."""

    kind = 'feddpq'

    def __init__(self, inputs: PlannerInputs) -> None:
        from fl_uav.planning.feddpq_opt import ConvergenceConstants, optimise_feddpq

        r = inputs.resources
        self.fleet = feddpq_fleet(inputs)
        self.constants = ConvergenceConstants(
            heterogeneity_label_scale=r.feddpq_heterogeneity_label_scale)
        self.plan = optimise_feddpq(self.fleet, self.constants, seed=inputs.seed,
                                    fallback=r.feddpq_fallback,
                                    max_bcd_rounds=r.feddpq_max_bcd_rounds,
                                    q_trials=r.feddpq_q_trials, block_trials=r.feddpq_block_trials)
        self.planner = FeddpqResourcePlanner(self.plan)

    def knobs(self, round_index: int, drone_ids) -> dict[int, dict]:
        return self.planner.knobs(round_index, drone_ids)

    def record(self, round_index: int, knobs: dict[int, dict]) -> None:
        """Static plan: nothing per round to record."""

    def summary(self) -> dict[str, Any]:
        p = self.plan.prediction
        return {'planner': 'feddpq', 'mode': self.plan.mode,
                'fallback_reason': self.plan.fallback_reason,
                'packet_error_target': self.plan.packet_error_target,
                'predicted_energy_j': p.energy_j, 'predicted_rounds': p.rounds,
                'model_batch_per_round': self.fleet.batch_size,
                'constants': dataclasses.asdict(self.constants),
                'history_j': list(self.plan.history_j),
                'knobs_by_drone': {str(d): k for d, k in self.plan.knobs_by_drone().items()}}


def lgc_channels(resources: ResourcesConfig, system: SystemConfig, distance_m: float,
                 max_entries: int) -> tuple[LgcChannel, ...]:
    """One drone's channels: LGC Table 1 prices, FedDPQ links of the configured bandwidths."""
    r, s = resources, system
    return tuple(LgcChannel(f'ch{n}', float(price), int(max_entries),
                            RadioLink(bandwidth_hz=float(bw), tx_power_w=s.tx_power_w,
                                      interference_w=s.interference_w), float(distance_m))
                 for n, (price, bw) in enumerate(zip(r.lgc_channel_energy_j_per_mb,
                                                     r.lgc_channel_bandwidth_hz)))


class LgcRoundResources:
    """Each drone's LGC controller, fed the channel rates the engine draws every round."""

    kind = 'lgc'

    def __init__(self, inputs: PlannerInputs) -> None:
        r, s = inputs.resources, inputs.system
        self.seed = inputs.seed
        self.hover_power_w = r.lgc_hover_power_w
        dim = int(inputs.num_params)
        cap = min(r.lgc_channel_max_entries, dim)
        cpu = CpuDevice(cpu_freq_hz=s.cpu_freq_hz,
                        train_cycles_per_sample=s.train_cycles_per_sample,
                        gen_cycles_per_sample=s.gen_cycles_per_sample)
        envs, policies, self.train_s = {}, {}, 0.0
        self.first_decisions: dict[str, dict] = {}
        for i, k in enumerate(int(d) for d in inputs.drone_ids):
            env_config = LgcEnvConfig(
                channels=lgc_channels(r, s, float(inputs.distance_m[i]), cap),
                model_dim=dim, max_local_steps=r.lgc_max_local_steps,
                batch_size=inputs.batch_size, cpu=cpu, hover_power_w=r.lgc_hover_power_w,
                download_s=inputs.download_s, steps_scale=r.lgc_steps_scale,
                entries_scale=r.lgc_entries_scale * dim)
            envs[k] = LgcEnv(env_config, seed=inputs.seed * 1000 + k)
            mid = decode_action(np.zeros(env_config.action_dim), env_config)
            if r.planner == 'lgc_ddpg':
                import time

                t0 = time.perf_counter()
                agent, _ = train_ddpg(env_config, DdpgConfig(train_steps=r.lgc_ddpg_train_steps),
                                      seed=inputs.seed * 1000 + k)
                self.train_s += time.perf_counter() - t0
                policies[k] = DdpgPolicy(agent)
            elif r.planner == 'lgc_fixed':
                policies[k] = FixedPolicy(mid)
            else:
                policies[k] = GreedyChannelPolicy(mid.local_steps, mid.total_entries)
        self.planner = LgcResourcePlanner(envs, policies)
        self.prices_j_per_mb = np.asarray(r.lgc_channel_energy_j_per_mb, np.float64)
        self.rates: dict[int, np.ndarray] = {}
        self.log: dict[str, dict[str, dict]] = {}

    def channel_rates(self, round_index: int, drone: int) -> np.ndarray:
        """This round's rate of each of the drone's channels (one Rayleigh draw each, eq. (14))."""
        env = self.planner.envs[drone]
        rng = np.random.default_rng(np.random.SeedSequence(
            [self.seed, RATES_SEED_TAG, round_index, drone]))
        return np.array([float(ch.link.sample_rate_bit_s(ch.distance_m, rng))
                         for ch in env.config.channels])

    def knobs(self, round_index: int, drone_ids) -> dict[int, dict]:
        for k in drone_ids:
            self.rates[int(k)] = self.channel_rates(round_index, int(k))
            self.planner.observe_rates(int(k), self.rates[int(k)])
        out = self.planner.knobs(round_index, drone_ids)
        for row in out.values():   # at least one entry travels (LGC eq. (10b) with K >= 1)
            if sum(row[ENTRIES_KNOB]) < 1:
                row[ENTRIES_KNOB][0] = 1
        return out

    def record(self, round_index: int, knobs: dict[int, dict]) -> None:
        self.log[str(round_index)] = {
            str(k): {LOCAL_STEPS_KNOB: v[LOCAL_STEPS_KNOB], ENTRIES_KNOB: list(v[ENTRIES_KNOB])}
            for k, v in knobs.items() if LOCAL_STEPS_KNOB in v}

    def upload(self, drone: int, channel_bytes: list[int]) -> tuple[float, float]:
        """(airtime s, energy J) of the layers: max_n 8 bytes_n / R_n and Σ_n bytes_n price_n
        (LGC eq. (15b) with Table 1's J/MB); a channel carrying no entry sends nothing."""
        b = np.asarray(channel_bytes, np.float64)
        rates = self.rates[drone]
        time_s = float(np.max(8.0 * b / rates)) if b.size else 0.0
        return time_s, float(np.dot(b / BYTES_PER_MB, self.prices_j_per_mb))

    def summary(self) -> dict[str, Any]:
        return {'planner': 'lgc', 'ddpg_train_s': self.train_s,
                'hover_power_w': self.hover_power_w, 'decisions': self.log}

    def load_log(self, log: dict[str, dict], upto: int) -> None:
        self.log = {r: v for r, v in log.items() if int(r) <= upto}


def build_planner(inputs: PlannerInputs):
    """The planner ``inputs.resources.planner`` names, or None for ``none``."""
    planner = inputs.resources.planner
    if planner == 'none':
        return None
    if planner == 'feddpq':
        return FeddpqRoundResources(inputs)
    return LgcRoundResources(inputs)


def build_round_resources(engine: ExperimentEngine, down_s: float):
    """The engine's configured planner, or None for ``resources.planner: none``."""
    if engine.config.resources.planner == 'none':
        return None
    return build_planner(engine_inputs(engine, down_s))


def write_knobs(resources, out_dir: Path) -> None:
    """DIR/knobs.json: the planner's decisions (FedDPQ's plan; LGC's per-round choices)."""
    if resources is None:
        return
    tmp = Path(out_dir) / (KNOBS_FILE + '.tmp')
    tmp.write_text(json.dumps(resources.summary(), indent=1))
    tmp.replace(Path(out_dir) / KNOBS_FILE)
