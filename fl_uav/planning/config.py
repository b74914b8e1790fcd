"""``resources.*``: per-drone resource decisions, read by the engine and the fleet's
station alike (the planners are fl_uav.planning.round_resources)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fl_uav.aggregation.config import AggregationConfig
from fl_uav.compression.config import CompressionConfig
from fl_uav.configschema import require_choice
from fl_uav.learning.config import LearningConfig

PLANNERS = ('none', 'feddpq', 'lgc_ddpg', 'lgc_fixed', 'lgc_heuristic')
LGC_PLANNERS = ('lgc_ddpg', 'lgc_fixed', 'lgc_heuristic')
STEPS_SCALE_AUTO = 'auto'   # resources.lgc_steps_scale: fit h0 after a warm-up round
STEPS_SCALE_ONLINE = 'online'   # resources.lgc_steps_scale: refit H^beta every few rounds
KNOBS_FILE = 'knobs.json'   # resources.planner's record: the fleet's and the engine's


@dataclass(frozen=True)
class ResourcesConfig:
    """Per-drone resource decisions made by a controller (issue 5 item 3; fl_uav.planning).

    planner: none (the configured knobs, the same for every drone) | feddpq (FedDPQ
        Algorithm 2, fl_uav.planning.feddpq_opt: run once before round 1 on the engine's own
        fleet, its per-drone transmit power, top-up factor Δ_u, prune ratio ρ_u and range
        bits δ_u applied every round) | lgc_ddpg | lgc_fixed | lgc_heuristic (LGC §3,
        fl_uav.planning.lgc_control: each drone's policy picks its local steps H and entries
        per channel D_n every round from its measured channel rates; lgc_fixed is LGC without
        DRL, the mid action every round; lgc_heuristic the cheapest-channel-first rule).
    feddpq_*: the optimiser's budget (BCD rounds, trials of the q block and of each vector
        block) and its fallback when one common packet-error target is infeasible (clip |
        error). The engine's system section, partition, model and batch define the fleet.
        feddpq_heterogeneity_label_scale: Z_u² += scale · TV_u² in the convergence model
        (fl_uav.planning.feddpq_opt.ConvergenceConstants; not in the paper, whose Z_u does not
        depend on Δ: 0 = FedDPQ's literal form; the default 400 is that module's).
    lgc_*: each drone's channels: one price (LGC Table 1, J/MB) and one bandwidth (Hz) per
        channel, as many as compression.lgc_channel_entries; lgc_channel_max_entries is D_n^max;
        lgc_max_local_steps is H_max (LGC eq. (10c)); lgc_hover_power_w is charged while the
        drone waits on its round (FedEx eq. (8); 0 = not modelled); lgc_entries_scale is the
        progress surrogate's k0 as a fraction of the model's entries and lgc_steps_scale its h0 in
        steps (fl_uav.planning.lgc_control: progress ∝ (1 − e^(−H/h0)) (1 − e^(−K/k0))), a
        number > 0 or ``auto``: the engine runs round 1 at the mid decision (the warm-up that
        lgc_fixed runs anyway, charged like any round), fits h0 to the training loss of the
        fleet's mean model after each local step of that round (fl_uav.planning.lgc_control.
        fit_steps_scale; capped at LINEAR_STEPS_FACTOR · lgc_max_local_steps), then
        trains the controllers and lets them act from round 2 (fl_uav.planning.round_resources);
        lgc_ddpg_train_steps: DDPG steps per drone on the surrogate (before round 1, or after
        the warm-up with ``auto``). lgc_steps_scale_min_drop (auto only; 0 = off): the
        warm-up goes on, up to 5 rounds, until the measured loss falls by this fraction of
        its start within the round (a fit to a flatter curve measures noise).
        lgc_steps_scale ``online`` replaces the surrogate's (1 − e^(−H/h0)) with (H / H_max)^β
        refitted during the run: every lgc_refit_rounds rounds (rounds 1, 1 + K, 1 + 2K, ...)
        is a probe round in which one of lgc_probe_groups groups of drones (drone id modulo
        lgc_probe_groups, in turn; 1 = the whole fleet) takes the mid decision and the others
        their controller's; the engine measures the loss of the model the LGC server would
        produce had the group's drones stopped after h = 0..H steps and fits β
        (fl_uav.planning.lgc_control.fit_steps_exponent); after every informative probe each
        drone's DDPG is retrained from scratch on the refitted surrogate
        (lgc_ddpg_train_steps, seeded), or with lgc_finetune_steps > 0 fine-tuned from its
        current weights for that many steps after the first (off by default: an actor
        saturated at one end of its tanh does not move, fl_uav.planning.lgc_control.
        finetune_ddpg).
    lgc_plateau_window (0 = off; engine only, a configured lgc_steps_scale): a plain rule on
        top of the LGC policy (fl_uav.planning.resources.PlateauSwitch): once the best test
        accuracy of the last lgc_plateau_window rounds exceeds the best before them by less
        than lgc_plateau_min_gain (a fraction), every drone takes lgc_plateau_local_steps
        local steps for the rest of the run (its entries per channel stay the policy's).
        With lgc_fixed: "fixed-decision LGC, then H = 1 once the accuracy has plateaued".
    lgc_stall_window (0 = off; engine only): a guard on top of the LGC policy, not latched:
        in every round after one in which the best test accuracy of the last lgc_stall_window
        rounds gains less than lgc_stall_min_gain over the best before them, every drone takes
        the mid decision (what lgc_fixed does) instead of its policy's.

    feddpq_max_bcd_rounds: block-coordinate-descent rounds of the FedDPQ optimiser.
    feddpq_q_trials: trials of its q block. feddpq_block_trials: trials of each vector block.
    feddpq_fallback: clip | error, when one common packet-error target is infeasible.
    lgc_channel_energy_j_per_mb: each channel's price in J per MB sent (LGC Table 1).
    lgc_channel_bandwidth_hz: each channel's bandwidth in Hz.
    lgc_channel_max_entries: D_n^max, the most entries a drone may send on one channel.
    lgc_max_local_steps: H_max, the most local steps a policy may choose (LGC eq. (10c)).
    lgc_hover_power_w: power charged while a drone waits on its round (0 = not modelled).
    lgc_entries_scale: k0 of the progress surrogate, a fraction of the model's entries.
    lgc_steps_scale: h0 of the progress surrogate in local steps, a number > 0, ``auto``
        (fitted after a warm-up round) or ``online`` (refitted as (H / H_max)^β during the run).
    lgc_ddpg_train_steps: DDPG steps per drone on the surrogate.
    lgc_steps_scale_min_drop (``auto`` only; 0 = off): loss drop, as a fraction of its start,
        the warm-up waits for (up to 5 rounds) before it fits h0.
    lgc_refit_rounds (``online``): rounds between probe rounds, which refit β.
    lgc_finetune_steps (``online``; 0 = off): DDPG steps fine-tuning each drone's policy after
        a refit, instead of retraining it from scratch.
    lgc_probe_groups (``online``): groups of drones that take turns probing (1 = the whole
        fleet).
    lgc_plateau_min_gain: accuracy gain (a fraction) below which lgc_plateau_window sees a
        plateau.
    lgc_plateau_local_steps: local steps every drone takes once the plateau is reached.
    lgc_stall_min_gain: accuracy gain (a fraction) below which lgc_stall_window sees a stall.
    """

    planner: str = 'none'
    feddpq_max_bcd_rounds: int = 2
    feddpq_q_trials: int = 5
    feddpq_block_trials: int = 20
    feddpq_fallback: str = 'clip'
    feddpq_heterogeneity_label_scale: float = 400.0
    lgc_channel_energy_j_per_mb: tuple[float, ...] = (1296.0, 2851.2, 7128.0)
    lgc_channel_bandwidth_hz: tuple[float, ...] = (1e6, 5e6, 20e6)
    lgc_channel_max_entries: int = 6000
    lgc_max_local_steps: int = 10
    lgc_hover_power_w: float = 20.0
    lgc_entries_scale: float = 0.02
    lgc_steps_scale: float | str = 3.0
    lgc_ddpg_train_steps: int = 600
    lgc_steps_scale_min_drop: float = 0.0
    lgc_refit_rounds: int = 5
    lgc_finetune_steps: int = 0
    lgc_probe_groups: int = 4
    lgc_plateau_window: int = 0
    lgc_plateau_min_gain: float = 0.01
    lgc_plateau_local_steps: int = 1
    lgc_stall_window: int = 0
    lgc_stall_min_gain: float = 0.01

    def __post_init__(self) -> None:
        require_choice('resources.planner', self.planner, PLANNERS)
        require_choice('resources.feddpq_fallback', self.feddpq_fallback, ('clip', 'error'))
        for name in ('feddpq_max_bcd_rounds', 'feddpq_q_trials', 'feddpq_block_trials',
                     'lgc_channel_max_entries', 'lgc_max_local_steps', 'lgc_ddpg_train_steps',
                     'lgc_refit_rounds', 'lgc_probe_groups'):
            if getattr(self, name) < 1:
                raise ValueError(f'resources.{name} must be >= 1, got {getattr(self, name)}')
        if not 0 <= self.feddpq_heterogeneity_label_scale < math.inf:
            raise ValueError(f'resources.feddpq_heterogeneity_label_scale must be finite and '
                             f'>= 0, got '
                             f'{self.feddpq_heterogeneity_label_scale}')
        prices, bandwidths = self.lgc_channel_energy_j_per_mb, self.lgc_channel_bandwidth_hz
        if not prices or len(prices) != len(bandwidths):
            raise ValueError(f'resources.lgc_channel_energy_j_per_mb and '
                             f'lgc_channel_bandwidth_hz need one value per channel, got '
                             f'{list(prices)} and {list(bandwidths)}')
        if (any(not 0 <= p < math.inf for p in prices)
                or any(not 0 < b < math.inf for b in bandwidths)):
            raise ValueError(f'resources.lgc_channel_energy_j_per_mb must be finite and >= 0 '
                             f'J/MB and lgc_channel_bandwidth_hz finite and > 0 Hz, got '
                             f'{list(prices)} and {list(bandwidths)}')
        if not 0 <= self.lgc_hover_power_w < math.inf or not 0 < self.lgc_entries_scale <= 1:
            raise ValueError('resources.lgc_hover_power_w must be finite and >= 0 and '
                             'lgc_entries_scale in (0, 1]')
        if self.lgc_finetune_steps < 0:
            raise ValueError(f'resources.lgc_finetune_steps must be >= 0, got '
                             f'{self.lgc_finetune_steps}')
        if not 0.0 <= self.lgc_steps_scale_min_drop < 1.0:
            raise ValueError(f'resources.lgc_steps_scale_min_drop must be in [0, 1), got '
                             f'{self.lgc_steps_scale_min_drop}')
        if self.lgc_plateau_window < 0 or not 0.0 <= self.lgc_plateau_min_gain <= 1.0:
            raise ValueError(f'resources.lgc_plateau_window must be >= 0 and '
                             f'lgc_plateau_min_gain in [0, 1], got {self.lgc_plateau_window}, '
                             f'{self.lgc_plateau_min_gain}')
        if self.lgc_stall_window < 0 or not 0.0 <= self.lgc_stall_min_gain <= 1.0:
            raise ValueError(f'resources.lgc_stall_window must be >= 0 and lgc_stall_min_gain '
                             f'in [0, 1], got {self.lgc_stall_window}, {self.lgc_stall_min_gain}')
        if self.lgc_stall_window > 0 and not self.planner.startswith('lgc'):
            raise ValueError(f'resources.lgc_stall_window needs an lgc_* planner, got '
                             f'{self.planner!r}')
        if not 1 <= self.lgc_plateau_local_steps <= self.lgc_max_local_steps:
            raise ValueError(f'resources.lgc_plateau_local_steps must be in [1, '
                             f'lgc_max_local_steps = {self.lgc_max_local_steps}], got '
                             f'{self.lgc_plateau_local_steps}')
        h0 = self.lgc_steps_scale
        number = not isinstance(h0, str) and math.isfinite(h0) and h0 > 0
        if h0 not in (STEPS_SCALE_AUTO, STEPS_SCALE_ONLINE) and not number:
            raise ValueError(f'resources.lgc_steps_scale must be a number > 0, '
                             f'{STEPS_SCALE_AUTO!r} or {STEPS_SCALE_ONLINE!r}, got {h0!r}')
        if self.lgc_plateau_window > 0 and (not self.planner.startswith('lgc')
                                            or isinstance(h0, str)):
            raise ValueError(f'resources.lgc_plateau_window needs an lgc_* planner with a '
                             f'configured lgc_steps_scale (a number), got planner '
                             f'{self.planner!r}, lgc_steps_scale {h0!r}')


def check_planner_procedures(resources: ResourcesConfig, learning: LearningConfig,
                             compression: CompressionConfig,
                             aggregation: AggregationConfig) -> None:
    """The procedures a planner's knobs drive must be configured (the engine and the fleet):
    FedDPQ's ρ_u needs the feddpq client, δ_u the range quantizer, S the feddpq strategy;
    LGC's H the sgd client (dense model) and D_n the lgc compressor with one entry count per
    priced channel. Fails naming the key and the value it needs."""
    planner = resources.planner
    if planner == 'none':
        return
    if planner == 'feddpq':
        # The feddpq client runs plain SGD (FedDPQ eq. (5)): listed too, so one message names
        # every key to set (LearningConfig checks them once the client is feddpq).
        need = {'learning.client_algorithm': (learning.client_algorithm, 'feddpq'),
                'learning.optimizer': (learning.optimizer, 'sgd'),
                'learning.momentum': (learning.momentum, 0.0),
                'learning.weight_decay': (learning.weight_decay, 0.0),
                'compression.method': (compression.method, 'range'),
                'aggregation.strategy': (aggregation.strategy, 'feddpq')}
    else:
        need = {'learning.client_algorithm': (learning.client_algorithm, 'sgd'),
                'compression.method': (compression.method, 'lgc'),
                'learning.structured_keep': (learning.structured_keep, 1.0)}
        channels = len(resources.lgc_channel_energy_j_per_mb)
        if len(compression.lgc_channel_entries) != channels:
            raise ValueError(f'resources.planner {planner}: compression.lgc_channel_entries has '
                             f'{len(compression.lgc_channel_entries)} channels, '
                             f'resources.lgc_channel_energy_j_per_mb {channels}')
    unmet = [(f'{key} = {wanted!r} (got {value!r})', f'--set {key}={wanted}')
             for key, (value, wanted) in need.items() if value != wanted]
    if planner == 'feddpq' and aggregation.num_selected < 1:   # S, FedDPQ eq. (7)'s draws
        unmet.append((f'aggregation.num_selected >= 1 (got {aggregation.num_selected})',
                      '--set aggregation.num_selected=1'))
    if unmet:
        raise ValueError(f'resources.planner {planner} needs '
                         + ', '.join(text for text, _ in unmet) + ': '
                         + ' '.join(fix for _, fix in unmet))

