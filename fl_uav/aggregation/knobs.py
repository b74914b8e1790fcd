"""The knobs a strategy sends each drone with its round (``configure_round``) and what each must
be. Checked where a strategy's knobs are made (:func:`fl_uav.aggregation.strategy.
checked_configure_round`: the engine and the station) and where they arrive (the drone,
fl_uav/fleet/resource_knobs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fl_uav.values import is_finite_number, is_int

#: FedDPQ: how many times the drone was drawn this round (0 = not selected; it need not train).
DRAWS_KNOB = 'draws'
#: FedProx: the proximal coefficient μ of the local objective f_k(w) + (μ/2)·||w − w^t||², i.e.
#: the local step w ← w − η(g_k(w) + μ(w − w^t)) (Li et al. 2020, as in the OSAFL digest §6.2).
PROXIMAL_MU_KNOB = 'proximal_mu'
STRATEGY_KNOBS = (DRAWS_KNOB, PROXIMAL_MU_KNOB)
MAX_PROXIMAL_MU = float(np.finfo(np.float32).max)   # torch trains in float32


def strategy_knob_problems(knobs: Mapping[str, Any]) -> dict[str, str]:
    """The strategy knobs in ``knobs`` that are malformed: knob -> what is wrong (others, and
    knobs of no strategy, are not listed)."""
    problems: dict[str, str] = {}
    draws = knobs.get(DRAWS_KNOB)
    if DRAWS_KNOB in knobs and not (is_int(draws) and draws >= 0):
        problems[DRAWS_KNOB] = f'{draws!r} is not an integer >= 0'
    mu = knobs.get(PROXIMAL_MU_KNOB)
    if PROXIMAL_MU_KNOB in knobs and not (is_finite_number(mu) and 0.0 <= mu <= MAX_PROXIMAL_MU):
        problems[PROXIMAL_MU_KNOB] = f'{mu!r} is not a number in [0, {MAX_PROXIMAL_MU:.3g}]'
    return problems
