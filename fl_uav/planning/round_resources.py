"""Per-drone resource decisions (issue 5 item 3): FedDPQ's optimiser, LGC's policies.

:func:`build_planner` turns a ``resources`` section and a fleet's facts (:class:`PlannerInputs`)
into an object asked every round for each drone's knobs (fl_uav.planning.resources.
ResourcePlanner) and, for LGC, charging the drone's multi-channel upload. The engine builds it
from its own fleet (fl_uav.engine.experiment.build_round_resources); the fleet's ground station
from what its drones reported in their first round (fl_uav.fleet.ground_station). Below, as the
engine uses it.

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
* ``resources.lgc_steps_scale: auto`` (the engine only: the fleet needs a number; likewise
  ``online``): the surrogate's h₀ (its progress (1 − e^(−H/h₀)) in
  the local steps H) is measured in the engine instead of chosen. Round 1 is a warm-up at the
  mid decision (what lgc_fixed does every round; its energy is charged like any round's).
  During it the vectorised trainer records the fleet's FedAvg model had every drone stopped
  after h = 0, 1, ..., H steps (sample-count weights, uncompressed), and the engine evaluates
  each on a seeded sample of the drones' own training data (never the test set). That is
  the surrogate's quantity itself, the loss of the global model against H, so
  :func:`~fl_uav.planning.lgc_control.fit_steps_scale` fits ℓ(h) = c − A (1 − e^(−h/h₀)) to
  it (capped at LINEAR_STEPS_FACTOR · H_max). Not the drones' own within-round training
  losses: from round 2 on those flatten after 1-10 steps while the global model still gains
  from every step (a drone first fits its own label skew; docs/benchmarks.md). One h₀ for
  the fleet (the measurement is the fleet's); k₀ keeps its configured value (every drone
  sends the same K in the warm-up, so K's effect is not measured). Then each drone's DDPG is
  trained on its surrogate with the fitted h₀ and acts from round 2. The measurement itself
  is free here (a real fleet would upload or evaluate the intermediate models). Round 1's
  curve falls by ~0.1 % of the loss (the model leaves its initialisation slowly), so its
  bend is mostly noise; ``resources.lgc_steps_scale_min_drop`` (off by default; chosen after
  seeing that, docs/benchmarks.md) extends the warm-up until the curve falls by that
  fraction of ℓ(0), at most STEPS_SCALE_MAX_WARMUP_ROUNDS rounds.
* ``resources.lgc_steps_scale: online``: the progress model is refitted during the run, as
  LGC trains its DRL online with the measured loss change (digest 002 §3.3), but with the
  measurement feeding the surrogate instead of the agent's replay buffer (one transition per
  round is too few for DDPG). Rounds 1, 1 + K, 1 + 2K, ... (K = ``resources.lgc_refit_rounds``)
  are probe rounds: the drones of one group (drone id ≡ probe number mod
  ``resources.lgc_probe_groups``; the whole fleet until the first fit) take the mid decision
  (what lgc_fixed does every round, charged like any round), the others their agent's, and
  the engine records the training loss (seeded sample of the drones' data, as ``auto``) of
  the model the LGC server would produce had the group's drones stopped after h = 0..H
  steps, the others having taken theirs: w + η/M Σ_k Top_{K_k}(e_k + Δ_k(h_k)), with each
  drone's own error memory e_k (fl_uav.engine.clients, ``_compressed_trace_losses``). Not
  the uncompressed FedAvg of ``auto``: from round ~16 on (seed 5) that model's loss rises
  with h, while the compressed aggregate the server applies does not; and one group, not
  the fleet, because a whole-fleet probe at H = 11 costs as much as 7 rounds at H = 1 and,
  after such rounds, sets the loss back (docs/benchmarks.md). The surrogate's H-factor
  becomes (H / H_max)^β with β fitted to that curve
  (:func:`~fl_uav.planning.lgc_control.fit_steps_exponent`: ℓ(0) − ℓ(h) = A h^β, no
  saturation scale; a power law can say "no diminishing returns" (β >= 1), which the
  exponential can only approach at its cap). After every probe whose curve falls, each
  drone's DDPG is retrained on its refitted surrogate (``lgc_ddpg_train_steps``, seeded as
  before round 1, ~30 s for 20 drones); with ``lgc_finetune_steps`` > 0 it is instead
  fine-tuned from its current weights after the first (replay buffer emptied). Fine-tuning
  is off by default: an agent trained where H = 1 pays has its actor saturated at the tanh's
  end and does not move when the surrogate turns linear (tested on the tiny surrogate, not
  even with the actor's output layer re-initialised). Between probes the agents act
  greedily. A probe whose curve does not fall changes nothing.
  The measurement costs H + 1 evaluations of the small model on 4,096 samples per probe.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_uav.netmodel.compute import CpuDevice
from fl_uav.netmodel.config import SystemConfig
from fl_uav.netmodel.payload import BYTES_PER_MB
from fl_uav.netmodel.radio import RadioLink
from fl_uav.planning.config import (
    KNOBS_FILE,
    STEPS_SCALE_AUTO,
    STEPS_SCALE_ONLINE,
    ResourcesConfig,
)
from fl_uav.planning.lgc_control import (
    ENTRIES_KNOB,
    LINEAR_STEPS_FACTOR,
    LOCAL_STEPS_KNOB,
    DdpgConfig,
    DdpgPolicy,
    FixedPolicy,
    GreedyChannelPolicy,
    LgcChannel,
    LgcEnv,
    LgcEnvConfig,
    StepsExponentFit,
    StepsScaleFit,
    decode_action,
    finetune_ddpg,
    fit_steps_exponent,
    fit_steps_scale,
    train_ddpg,
)
from fl_uav.planning.resources import (
    FeddpqResourcePlanner,
    LgcResourcePlanner,
    PlateauSwitch,
)
from fl_uav.streams import Stream, stream_seed

RATES_SEED_TAG = 0x6C676372   # 'lgcr': the LGC channels' fading draws, apart from (seed, round)
STEPS_SCALE_SAMPLE_TAG = 0x6C676368   # 'lgch': the training sample the warm-up evaluates on
#: ``lgc_steps_scale: auto``: rounds at the mid decision before h0 is fitted (module docstring).
STEPS_SCALE_WARMUP_ROUNDS = 1
#: With ``lgc_steps_scale_min_drop`` > 0, the warm-up goes on until the measured curve falls
#: by that fraction of ℓ(0), at most this many rounds (then the last round's curve is fitted).
STEPS_SCALE_MAX_WARMUP_ROUNDS = 5
#: Training samples (of the warm-up's drones, seeded) each traced model is evaluated on.
STEPS_SCALE_EVAL_SAMPLES = 4096


@dataclass(frozen=True)
class PlannerInputs:
    """What a resource planner is built from: the engine's own fleet
    (fl_uav.engine.experiment.engine_inputs) or what the fleet's ground station learned from
    the drones' reports (fl_uav.fleet.ground_station).

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


class RoundResources:
    """What the engine asks of a resource planner every round; the hooks only some planners
    use are no-ops or neutral here (LGC's overrides them), so the engine calls them without
    asking which planner it has."""

    kind = 'none'
    #: W drawn while a drone hovers for its round (FedEx eq. (8)); LGC's setting only
    hover_power_w = 0.0
    #: which trace :meth:`observe_trace` wants: the LGC server's aggregate with each drone's
    #: error memory while :meth:`probe_drones` stop early (LGC ``online``), else the fleet's
    #: uncompressed mean model (``auto``)
    online = False
    #: a resume reads DIR/knobs.json back (:meth:`load_log`); planners without per-round
    #: state leave the file, which may be another run's, unread
    resumes_from_knobs = False

    def knobs(self, round_index: int, drone_ids) -> dict[int, dict]:
        """Per drone, the knobs this round (none: the strategy's and the config's)."""
        return {}

    def record(self, round_index: int, knobs: dict[int, dict]) -> None:
        """The knobs the round ran with, merged (kept by planners that log them)."""

    def observe_accuracy(self, round_index: int, accuracy: float) -> None:
        """The global model's test accuracy after ``round_index`` (LGC's accuracy rules)."""

    def wants_trace(self, round_index: int) -> bool:
        """True when the engine should measure and report :meth:`observe_trace`."""
        return False

    def probe_drones(self, round_index: int) -> set[int]:
        """The drones whose local steps an ``online`` trace varies (LGC's probe group)."""
        return set()

    def observe_trace(self, round_index: int, losses_after_steps: list[float]) -> None:
        """The training loss after h = 0, 1, ... local steps the engine measured in a round
        :meth:`wants_trace` asked for (the LGC surrogate's progress model is fitted to it)."""

    def upload(self, drone: int, channel_bytes: list[int]) -> tuple[float, float]:
        """(airtime s, energy J) of an upload the planner split over its channels, bytes per
        channel (LGC eq. (15b)); asked only when the planner's knobs set the entries per
        channel (lgc_channel_entries), which a planner without channels never does."""
        raise NotImplementedError(f'the {self.kind} planner has no channels to send over')

    def load_log(self, knobs: dict[str, Any], upto: int) -> None:
        """Resume from DIR/knobs.json up to round ``upto`` (planners with per-round state)."""

    def summary(self) -> dict[str, Any] | None:
        """DIR/knobs.json's content, or None: no file."""
        return None

    def run_summary(self) -> dict[str, Any]:
        """What summary.json records about the planner beyond its name."""
        return {}


class NoRoundResources(RoundResources):
    """``resources.planner: none``: every knob from the strategy and the config."""


class FeddpqRoundResources(RoundResources):
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


class LgcRoundResources(RoundResources):
    """Each drone's LGC controller, fed the channel rates the engine draws every round."""

    kind = 'lgc'
    resumes_from_knobs = True

    def __init__(self, inputs: PlannerInputs) -> None:
        r, s = inputs.resources, inputs.system
        self.seed = inputs.seed
        self.planner_name = r.planner
        self.hover_power_w = r.lgc_hover_power_w
        self.ddpg_train_steps = r.lgc_ddpg_train_steps
        self.steps_scale_setting = r.lgc_steps_scale
        self.auto = r.lgc_steps_scale == STEPS_SCALE_AUTO
        self.online = r.lgc_steps_scale == STEPS_SCALE_ONLINE
        self.refit_rounds = r.lgc_refit_rounds
        self.probe_groups = min(r.lgc_probe_groups, len(inputs.drone_ids))
        self.finetune_steps = r.lgc_finetune_steps
        self.exponent_fits: dict[str, dict] = {}   # online: per probe round, curve and fit
        self.steps_exponent: float | None = None
        self.agents: dict[int, Any] = {}           # online: each drone's DDPG agent
        #: h0 of the surrogate: the configured number, or (auto) the module default until the
        #: warm-up's fit replaces it.
        self.steps_scale = (LgcEnvConfig.steps_scale if self.auto or self.online
                            else float(r.lgc_steps_scale))
        self.max_steps_scale = LINEAR_STEPS_FACTOR * r.lgc_max_local_steps
        self.steps_scale_fit: StepsScaleFit | None = None
        self.steps_scale_curve: list[float] = []   # the curve h0 was fitted on
        self.steps_scale_curves: dict[str, list[float]] = {}   # every warm-up round's
        self.min_drop = r.lgc_steps_scale_min_drop
        self.max_warmup_rounds = (STEPS_SCALE_MAX_WARMUP_ROUNDS if self.min_drop > 0
                                  else STEPS_SCALE_WARMUP_ROUNDS)
        self.fitted_round = 0
        self.steps_scale_note = '' if self.auto or self.online else 'configured'
        self.calibrated = not (self.auto or self.online)
        dim = int(inputs.num_params)
        cap = min(r.lgc_channel_max_entries, dim)
        cpu = CpuDevice(cpu_freq_hz=s.cpu_freq_hz,
                        train_cycles_per_sample=s.train_cycles_per_sample,
                        gen_cycles_per_sample=s.gen_cycles_per_sample)
        envs, policies, self.train_s = {}, {}, 0.0
        self.mid_policies: dict[int, FixedPolicy] = {}
        self.env_configs: dict[int, LgcEnvConfig] = {}
        self.first_decisions: dict[str, dict] = {}
        for i, k in enumerate(int(d) for d in inputs.drone_ids):
            env_config = LgcEnvConfig(
                channels=lgc_channels(r, s, float(inputs.distance_m[i]), cap),
                model_dim=dim, max_local_steps=r.lgc_max_local_steps,
                batch_size=inputs.batch_size, cpu=cpu, hover_power_w=r.lgc_hover_power_w,
                download_s=inputs.download_s, steps_scale=self.steps_scale,
                entries_scale=r.lgc_entries_scale * dim)
            self.env_configs[k] = env_config
            envs[k] = LgcEnv(env_config,
                             seed=stream_seed(inputs.seed, 0, Stream.LGC_SURROGATE, k))
            mid = decode_action(np.zeros(env_config.action_dim), env_config)
            self.mid_policies[k] = FixedPolicy(mid)
            if r.planner == 'lgc_ddpg' and not (self.auto or self.online):
                policies[k] = self._train_policy(k, env_config)
            elif r.planner in ('lgc_ddpg', 'lgc_fixed'):   # auto: the warm-up at the mid action
                policies[k] = FixedPolicy(mid)
            else:
                policies[k] = GreedyChannelPolicy(mid.local_steps, mid.total_entries)
        self.planner = LgcResourcePlanner(envs, policies)
        self.policies = dict(policies)   # between probes (online); the planner's otherwise
        self.prices_j_per_mb = np.asarray(r.lgc_channel_energy_j_per_mb, np.float64)
        self.rates: dict[int, np.ndarray] = {}
        self.log: dict[str, dict[str, dict]] = {}
        #: resources.lgc_plateau_*: H = plateau_local_steps for every drone after the plateau
        self.plateau = (PlateauSwitch(r.lgc_plateau_window, r.lgc_plateau_min_gain)
                        if r.lgc_plateau_window > 0 else None)
        self.plateau_local_steps = r.lgc_plateau_local_steps
        #: resources.lgc_stall_*: the mid decision for every drone while the accuracy stalls
        self.stall = (PlateauSwitch(r.lgc_stall_window, r.lgc_stall_min_gain)
                      if r.lgc_stall_window > 0 else None)
        self.stall_rounds: list[int] = []   # the rounds the stall guard took over

    def observe_accuracy(self, round_index: int, accuracy: float) -> None:
        """The global model's accuracy after round ``round_index`` (the accuracy rules' input:
        ``lgc_plateau_*``, ``lgc_stall_*``)."""
        for rule in (self.plateau, self.stall):
            if rule is not None:
                rule.observe(round_index, accuracy)

    def observed_accuracies(self) -> dict[str, float] | None:
        """Round -> accuracy as the accuracy rules saw it (None without one); kept by the
        rules themselves, both of which see every round."""
        rule = self.plateau or self.stall
        if rule is None:
            return None
        return {str(i): a for i, a in enumerate(rule.accuracies, start=1)}

    def plateau_summary(self) -> dict[str, Any] | None:
        p = self.plateau
        if p is None:
            return None
        return {'window': p.window, 'min_gain': p.min_gain,
                'local_steps': self.plateau_local_steps, 'switched_after_round': p.switched_after}

    def stall_summary(self) -> dict[str, Any] | None:
        g = self.stall
        if g is None:
            return None
        return {'window': g.window, 'min_gain': g.min_gain, 'rounds': list(self.stall_rounds)}

    def _train_policy(self, drone: int, env_config: LgcEnvConfig) -> DdpgPolicy:
        """Drone ``drone``'s DDPG trained on its surrogate (seeded: the same agent on resume)."""
        import time

        t0 = time.perf_counter()
        agent, _ = train_ddpg(env_config, DdpgConfig(train_steps=self.ddpg_train_steps),
                              seed=stream_seed(self.seed, 0, Stream.LGC_DDPG, drone))
        self.train_s += time.perf_counter() - t0
        return DdpgPolicy(agent)

    # -- resources.lgc_steps_scale: auto ------------------------------------------------------
    def wants_trace(self, round_index: int) -> bool:
        """True in a warm-up (auto) or probe (online) round: the engine should report
        :meth:`observe_trace`."""
        if self.online:
            return self.is_probe(round_index)
        return not self.calibrated and round_index <= self.max_warmup_rounds

    def is_probe(self, round_index: int) -> bool:
        """online: rounds 1, 1 + K, 1 + 2K, ... run at the mid decision and are measured."""
        return self.online and round_index >= 1 and (round_index - 1) % self.refit_rounds == 0

    def probe_drones(self, round_index: int) -> set[int]:
        """online: the drones that take the mid decision in probe round ``round_index``:
        drone id ≡ probe number (mod lgc_probe_groups); the whole fleet before the first fit."""
        if not self.is_probe(round_index):
            return set()
        ids = set(self.env_configs)
        if not self.calibrated or self.probe_groups <= 1:
            return ids
        group = ((round_index - 1) // self.refit_rounds) % self.probe_groups
        return {k for k in ids if k % self.probe_groups == group}

    def observe_probe(self, round_index: int, losses_after_steps: list[float]) -> None:
        """online: fit β on the probe's curve; train (first time) or fine-tune the agents."""
        import time

        curve = [float(v) for v in losses_after_steps]
        fit: StepsExponentFit = fit_steps_exponent(curve)
        self.exponent_fits[str(round_index)] = {'losses_after_steps': curve,
                                                'fit': fit.as_dict()}
        if not fit.informative:
            return   # the loss did not fall with h: keep the current model and agents
        self.steps_exponent = fit.exponent
        self.steps_scale_note = f'online: beta {fit.exponent:.3f} from round {round_index}'
        t0 = time.perf_counter()
        for k, env_config in self.env_configs.items():
            env_config = dataclasses.replace(env_config, steps_exponent=fit.exponent)
            self.env_configs[k] = env_config
            rates = self.planner.envs[k].rates
            self.planner.envs[k] = LgcEnv(
                env_config, seed=stream_seed(self.seed, 0, Stream.LGC_SURROGATE, k))
            self.planner.envs[k].rates = rates
            if self.planner_name != 'lgc_ddpg':
                continue
            if k not in self.agents or self.finetune_steps == 0:
                self.agents[k], _ = train_ddpg(
                    env_config, DdpgConfig(train_steps=self.ddpg_train_steps),
                    seed=stream_seed(self.seed, 0, Stream.LGC_DDPG, k))
            else:
                finetune_ddpg(self.agents[k], env_config, self.finetune_steps,
                              seed=stream_seed(self.seed, round_index, Stream.LGC_DDPG, k))
            self.policies[k] = DdpgPolicy(self.agents[k])
        self.train_s += time.perf_counter() - t0
        self.calibrated = True

    def observe_trace(self, round_index: int, losses_after_steps: list[float]) -> None:
        """The warm-up's measurement: the training loss of the fleet's mean model after
        h = 0, 1, ... local steps. Fit h0 and calibrate after the warm-up's first round or,
        with ``lgc_steps_scale_min_drop``, once the curve falls by that fraction of ℓ(0).
        online: a probe round's curve (:meth:`observe_probe`)."""
        if not self.wants_trace(round_index):
            return
        if self.online:
            self.observe_probe(round_index, losses_after_steps)
            return
        curve = [float(v) for v in losses_after_steps]
        self.steps_scale_curves[str(round_index)] = curve
        drop_fraction = (curve[0] - curve[-1]) / curve[0] if curve and curve[0] > 0 else 0.0
        if drop_fraction < self.min_drop and round_index < self.max_warmup_rounds:
            return   # too little signal to fit: one more round at the mid decision
        self.steps_scale_curve, self.fitted_round = curve, round_index
        fit = fit_steps_scale([curve], self.max_steps_scale)
        self.steps_scale_fit = fit
        if fit.informative:
            note = (f'fitted on round {round_index}' + (' (at the cap: no saturation seen)'
                                                        if fit.at_upper_bound else ''))
            self.calibrate(fit.steps_scale, note)
        else:   # the loss did not fall with h: no h0 to measure, keep the module's
            self.calibrate(LgcEnvConfig.steps_scale,
                           f'round {round_index}: loss did not fall with h; module default')

    def calibrate(self, steps_scale: float, note: str) -> None:
        """Rebuild every drone's surrogate with h0 = ``steps_scale``; train DDPG on it."""
        self.steps_scale, self.steps_scale_note = float(steps_scale), note
        for k, env_config in self.env_configs.items():
            env_config = dataclasses.replace(env_config, steps_scale=self.steps_scale)
            self.env_configs[k] = env_config
            self.planner.envs[k] = LgcEnv(
                env_config, seed=stream_seed(self.seed, 0, Stream.LGC_SURROGATE, k))
            if self.planner_name == 'lgc_ddpg':
                self.planner.policies[k] = self._train_policy(k, env_config)
        self.calibrated = True

    def steps_scale_summary(self) -> dict[str, Any]:
        """h0 as used, how it was set and (auto) the warm-up's curve and fit."""
        fit = self.steps_scale_fit
        return {'setting': self.steps_scale_setting, 'value': self.steps_scale,
                'calibrated': self.calibrated, 'note': self.steps_scale_note,
                'warmup_rounds': self.fitted_round,
                'min_drop': self.min_drop if self.auto else None,
                'cap': self.max_steps_scale if self.auto else None,
                'losses_after_steps': self.steps_scale_curve,
                'warmup_curves': self.steps_scale_curves,
                'fit': fit.as_dict() if fit is not None else None,
                'online': ({'refit_rounds': self.refit_rounds,
                            'finetune_steps': self.finetune_steps,
                            'exponent': self.steps_exponent,
                            'probes': self.exponent_fits} if self.online else None)}

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
        if self.online:   # the probe's group at the mid decision, the others their agents
            probe = self.probe_drones(round_index)
            self.planner.policies = {k: self.mid_policies[k] if k in probe else p
                                     for k, p in self.policies.items()}
        policies = self.planner.policies
        if self.stall is not None and self.stall.stalled():   # seen after round - 1
            self.stall_rounds.append(int(round_index))
            self.planner.policies = dict(self.mid_policies)
        try:
            out = self.planner.knobs(round_index, drone_ids)
        finally:
            self.planner.policies = policies
        for row in out.values():   # at least one entry travels (LGC eq. (10b) with K >= 1)
            if sum(row[ENTRIES_KNOB]) < 1:
                row[ENTRIES_KNOB][0] = 1
            if self.plateau is not None and self.plateau.active(round_index):
                row[LOCAL_STEPS_KNOB] = self.plateau_local_steps
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
                'hover_power_w': self.hover_power_w,
                'steps_scale': self.steps_scale_summary(), 'plateau': self.plateau_summary(),
                'stall': self.stall_summary(),
                'accuracies': self.observed_accuracies(),
                'decisions': self.log}

    def run_summary(self) -> dict[str, Any]:
        """What summary.json records about LGC beyond its name: h0 and its fit, the rules."""
        fit = self.steps_scale_fit
        rules: dict[str, Any] = {}   # resources.lgc_plateau_* / lgc_stall_*
        if self.plateau is not None:
            rules['lgc_plateau_switched_after_round'] = self.plateau.switched_after
        if self.stall is not None:
            rules['lgc_stall_rounds'] = len(self.stall_rounds)
        if self.online:
            return {'lgc_steps_scale': None,
                    'lgc_steps_scale_setting': self.steps_scale_setting,
                    'lgc_steps_scale_note': self.steps_scale_note,
                    'lgc_steps_exponent': self.steps_exponent,
                    'lgc_steps_exponent_probes': {
                        r: v['fit']['exponent'] if v['fit']['informative'] else None
                        for r, v in self.exponent_fits.items()}, **rules}
        return {'lgc_steps_scale': self.steps_scale if self.calibrated else None,
                'lgc_steps_scale_setting': self.steps_scale_setting,
                'lgc_steps_scale_note': self.steps_scale_note,
                'lgc_steps_scale_fit': fit.as_dict() if fit is not None else None, **rules}

    def load_log(self, knobs: dict[str, Any], upto: int) -> None:
        """Resume from DIR/knobs.json: the decisions up to round ``upto`` and, past an auto
        warm-up, the fitted h0 (the controllers are retrained on it, seeded: the same)."""
        self.log = {r: v for r, v in knobs.get('decisions', {}).items() if int(r) <= upto}
        if self.plateau is not None or self.stall is not None:   # replay the accuracies
            seen = knobs.get('accuracies') or {}
            for r in range(1, upto + 1):
                if str(r) not in seen:
                    raise ValueError(f'cannot resume after round {upto}: {KNOBS_FILE} holds '
                                     f'no accuracy of round {r} for lgc_plateau / lgc_stall')
                self.observe_accuracy(r, float(seen[str(r)]))
            if self.stall is not None:
                saved_rounds = (knobs.get('stall') or {}).get('rounds', [])
                self.stall_rounds = [int(r) for r in saved_rounds if int(r) <= upto]
        saved = knobs.get('steps_scale') or {}
        if self.online:   # replay the probes in order: the same fits, the same (seeded) agents
            probes = (saved.get('online') or {}).get('probes', {})
            for r in sorted(int(r) for r in probes):
                if r <= upto:
                    self.observe_probe(r, probes[str(r)]['losses_after_steps'])
            return
        if not self.auto:
            return
        self.steps_scale_curves = {r: list(c) for r, c in saved.get('warmup_curves', {}).items()
                                   if int(r) <= upto}
        if not (saved.get('calibrated') and int(saved.get('warmup_rounds', 0)) <= upto):
            if upto > 0 and not self.wants_trace(upto + 1):
                raise ValueError(f'cannot resume after round {upto}: {KNOBS_FILE} holds no '
                                 f'fitted lgc_steps_scale')
            return   # still warming up
        self.steps_scale_curve = list(saved.get('losses_after_steps', []))
        self.fitted_round = int(saved['warmup_rounds'])
        if saved.get('fit'):
            f = saved['fit']
            self.steps_scale_fit = StepsScaleFit(
                f['steps_scale'], f['initial_loss'], f['drop'], f['rmse'],
                f['at_upper_bound'], f['num_steps'], f['num_curves'])
        self.calibrate(float(saved['value']), saved.get('note', ''))


def build_planner(inputs: PlannerInputs) -> RoundResources:
    """The planner ``inputs.resources.planner`` names (:class:`NoRoundResources` for ``none``)."""
    planner = inputs.resources.planner
    if planner == 'none':
        return NoRoundResources()
    if planner == 'feddpq':
        return FeddpqRoundResources(inputs)
    return LgcRoundResources(inputs)


