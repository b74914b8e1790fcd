"""The ``aggregation.*`` config section: which Strategy the station runs, with its parameters.

An algorithm-layer config (no ROS, no fleet), composed by the fleet's and the engine's configs.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

from fl_uav.aggregation import (
    STRATEGY_PLUGIN,
    build_strategy,
    check_strategy_name,
)
from fl_uav.aggregation.robust import (
    CLIP_NORM_MEDIAN,
    DEFAULT_BYZANTINE_SHARE,
    DEFAULT_CLIP_FACTOR,
)
from fl_uav.configschema import require_choice
from fl_uav.plugins import check_plugin, is_plugin_spec

SERVER_LR_AUTO = 'auto'
"""aggregation.server_lr: the chosen strategy's own default (:func:`default_server_lr`)."""

NO_SERVER_RATE = 1.0
"""The rate recorded for a strategy whose rule has no server rate (FedEx eqs. (13)-(15))."""


def default_server_lr(strategy: str) -> float:
    """The server rate ``strategy`` takes when none is given: its class's constructor default
    (1 for every rule but 2CEOAFL's, whose η = 0.1 is the paper's §4 global rate; with η̃ =
    0.1 that is FedAvg's step, 2CEOAFL eq. (13)); NO_SERVER_RATE for a rule without one. A
    plug-in (module:Name): the default of its own ``server_lr`` argument, else NO_SERVER_RATE."""
    if is_plugin_spec(strategy):
        parameter = inspect.signature(check_plugin(STRATEGY_PLUGIN, strategy)).parameters \
            .get('server_lr')
    else:
        check_strategy_name(strategy)
        rule = type(build_strategy(strategy, num_clients=1))
        parameter = inspect.signature(rule.__init__).parameters.get('server_lr')
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return NO_SERVER_RATE
    return float(parameter.default)


@dataclass(frozen=True)
class AggregationConfig:
    """strategy: aggregation rule (see fl_uav.aggregation.STRATEGY_NAMES, or a plug-in
    ``package.module:Name``). proximal_mu (fedprox): weight μ of the proximal term
    (μ/2)‖w − w_global‖² the drones add to their local loss. score_interval (osafl, Υ): scored
    rounds per window of OSAFL's online scores (Algorithm 2); every Υ-th round the drones'
    scores are refreshed. score_shrink_steps (osafl, k₀ of eq. (29)): 0 = the paper's
    Δ_u ≈ λ_u. trimmed_beta (trimmed_mean): fraction β of the largest and of the smallest
    values dropped per coordinate before averaging. num_selected (feddpq): drones drawn with
    replacement per round, 0 = all. local_lr (2ceoafl): the drones' step size η̃. clip_norm:
    clip each delta's L2 norm to a bound C before the rule sees it (norm bounding around any
    rule, NormClip), ``median`` (the default) = clip_factor × the median norm of the round's
    deltas (adaptive: a drone that scales its update up is cut to a few honest norms), a
    number > 0 = that fixed C, 0 = off (the paper reproductions' configs set 0: their rules
    as published). clip_factor (clip_norm median): C over the round's median norm, >= 1 (1 cuts
    every delta above the median; 2, the default, left clean accuracy as it was on
    quick_digits, docs/benchmarks/robustness.md). byzantine_share (krum, multi_krum): the
    share f/n of the round's n updates assumed forged, f = ⌊share·n⌋ (at most ⌊(n − 3)/2⌋,
    Krum's n > 2f + 2); a delta's score sums its squared distances to its n − f − 2 nearest
    others. krum_selected (multi_krum): how many of the lowest-scoring deltas are averaged,
    0 = n − f (krum takes the single lowest).

    server_lr: the server's step, a number > 0 or ``auto`` (the default: the strategy's own,
    :func:`default_server_lr`; the built config holds the number used, so config.json records
    it). What it scales depends on the rule: fedavg, fedprox, feddisco, feddpq, median,
    trimmed_mean: w ← w + η · (their mean of the drones' deltas Δ), 1 = plain averaging;
    fednova: η · τ_eff times the normalised direction; scaffold: η_g (its Alg. 1); afacd,
    osafl: the global η̃ on the (score-)weighted per-step deltas Δ/κ (OSAFL eq. (8); its
    §4.2 takes 6 on FMNIST); lgc: η of w + η/M Σ Δ (the paper: 1); 2ceoafl: η of eq. (13),
    w ← w − η Σ α Π with Π = −Δ/η̃, so the step on the mean delta is η/η̃ (default 0.1:
    η = η̃ is FedAvg's step; 1 would be ten times it); fedex_sync, fedex_async: none (FedEx
    eqs. (13)-(15) have no server rate)."""

    strategy: str = 'fedavg'
    server_lr: float | str = SERVER_LR_AUTO
    proximal_mu: float = 0.01
    score_interval: int = 3
    score_shrink_steps: float = 0.0
    trimmed_beta: float = 0.1
    num_selected: int = 0
    local_lr: float = 0.1
    clip_norm: float | str = CLIP_NORM_MEDIAN
    clip_factor: float = DEFAULT_CLIP_FACTOR
    byzantine_share: float = DEFAULT_BYZANTINE_SHARE
    krum_selected: int = 0

    def __post_init__(self) -> None:
        check_strategy_name(self.strategy)   # a built-in name or a plug-in module:Name
        if self.server_lr == SERVER_LR_AUTO:
            object.__setattr__(self, 'server_lr', default_server_lr(self.strategy))
        elif isinstance(self.server_lr, str) or not 0 < self.server_lr < math.inf:
            raise ValueError(f'server_lr must be a finite number > 0 or {SERVER_LR_AUTO!r} '
                             f'(the strategy default), got {self.server_lr!r}')
        if self.proximal_mu < 0 or self.score_interval < 1 or self.num_selected < 0:
            raise ValueError('proximal_mu >= 0, score_interval >= 1, num_selected >= 0')
        if not (math.isfinite(self.score_shrink_steps) and self.score_shrink_steps >= 0):
            raise ValueError(f'score_shrink_steps must be a finite number >= 0, got '
                             f'{self.score_shrink_steps}')
        if isinstance(self.clip_norm, str):
            require_choice('clip_norm', self.clip_norm, (CLIP_NORM_MEDIAN,))
        elif not 0.0 <= self.clip_norm < math.inf:
            raise ValueError(f'clip_norm must be a finite number >= 0 (0 = off) or '
                             f'{CLIP_NORM_MEDIAN!r}, got {self.clip_norm!r}')
        if not (math.isfinite(self.clip_factor) and self.clip_factor >= 1.0):
            raise ValueError(f'clip_factor must be a finite number >= 1, got '
                             f'{self.clip_factor!r}')
        if self.clip_norm != CLIP_NORM_MEDIAN and self.clip_factor != DEFAULT_CLIP_FACTOR:
            raise ValueError(f'clip_factor {self.clip_factor:g} has no effect with clip_norm '
                             f'{self.clip_norm!r}: it multiplies the median norm of clip_norm '
                             f'{CLIP_NORM_MEDIAN!r}; set clip_norm {CLIP_NORM_MEDIAN} or leave '
                             f'clip_factor out')
        if not 0.0 <= self.byzantine_share < 0.5 or self.krum_selected < 0:
            raise ValueError(f'byzantine_share in [0, 0.5) and krum_selected >= 0, got '
                             f'{self.byzantine_share!r} and {self.krum_selected!r}')
        if not 0.0 <= self.trimmed_beta < 0.5 or not self.local_lr > 0:
            raise ValueError('trimmed_beta in [0, 0.5), local_lr > 0')

    def build(self, num_clients: int, seed: int = 0):
        """The configured Strategy for a fleet of num_clients drones."""
        return build_strategy(self.strategy, server_lr=self.server_lr, num_clients=num_clients,
                              proximal_mu=self.proximal_mu, score_interval=self.score_interval,
                              score_shrink_steps=self.score_shrink_steps,
                              trimmed_beta=self.trimmed_beta, num_selected=self.num_selected,
                              local_lr=self.local_lr, clip_norm=self.clip_norm, seed=seed,
                              clip_factor=self.clip_factor,
                              byzantine_share=self.byzantine_share,
                              krum_selected=self.krum_selected)
