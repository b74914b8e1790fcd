"""The per-drone resource knobs a drone receives with the round, checked before it applies them.

The ground station's planner (``resources.planner``, fl_uav.planning.round_resources) sends each
drone its knobs in the model frame's metadata (``knobs[<drone id>]``). The drone applies
every knob it can and rejects the others, each with a reason, never failing the round:

====================  ==========================================================  ==========
knob                  what the drone does with it                                 needs
====================  ==========================================================  ==========
local_steps           exactly H local SGD steps (LGC eq. (13))                    client sgd
prune_fraction        magnitude pruning ratio ρ_u (FedDPQ eqs. (9)-(10), (40d))   client feddpq
range_bits            range quantizer bits δ_u of its upload (FedDPQ eqs.         method range
                      (11)-(13))
topup_factor          FedDPQ top-up Δ_u of its buffer before training (eqs.       -
                      (1)-(3), fl_uav.learning.topup)
lgc_channel_entries   entries per channel D_n of the LGC compressor (LGC eq.      method lgc
                      (13), budget eq. (10b))
tx_power_w            recorded only: the fleet has no radio model (DDS carries    -
                      the frames); reported back in the update's metadata
packet_error_target,  recorded only: the plan's packet-error target and the       -
packet_error_prob     drone's predicted q_u (FedDPQ eq. (16))
====================  ==========================================================  ==========

A value of the wrong type or outside its range is ``malformed``; a well-formed knob the drone's
configured procedure cannot apply (e.g. ``range_bits`` with ``compression.method: qsgd``) is
``unsupported``. The plan and the express and upload-ack knobs are checked where they are
read; a strategy's knobs by :func:`check_strategy_knobs`:

====================  ==========================================================
draws                 FedDPQ: times the drone was drawn this round, an integer >= 0 (0: it
                      need not train)
proximal_mu           FedProx: μ of the proximal term, a number >= 0 within float32
====================  ==========================================================

A malformed strategy knob is rejected like a resource knob (``malformed``) and the drone
trains as without it (drawn; no proximal term, μ = 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fl_uav.aggregation.knobs import strategy_knob_problems
from fl_uav.learning.client_algorithms import LOCAL_STEPS_KNOB, PRUNE_FRACTION_KNOB
from fl_uav.learning.topup import Generator, build_generator
from fl_uav.planning.feddpq_opt import (
    BITS_KNOB,
    Q_KNOB,
    Q_TARGET_KNOB,
    TOPUP_KNOB,
    TX_POWER_KNOB,
)
from fl_uav.planning.lgc_control import ENTRIES_KNOB
from fl_uav.values import is_finite_number, is_int

MALFORMED, UNSUPPORTED = 'malformed', 'unsupported'
#: Knobs the drone only records (no model of the radio in the fleet).
RECORDED_KNOBS = (TX_POWER_KNOB, Q_TARGET_KNOB, Q_KNOB)
RESOURCE_KNOBS = (LOCAL_STEPS_KNOB, PRUNE_FRACTION_KNOB, BITS_KNOB, TOPUP_KNOB, ENTRIES_KNOB,
                  *RECORDED_KNOBS)
MAX_LOCAL_STEPS = 100_000     # a sanity bound: more is a malformed H, not a plan
RANGE_BITS_MIN, RANGE_BITS_MAX = 1, 16     # the range quantizer's bits (codec v2)
# Update metadata the drone adds for the station (knobs.json, the round records).
KNOBS_APPLIED_KEY = 'knobs_applied'
KNOBS_REJECTED_KEY = 'knobs_rejected'
TOPUP_GENERATED_KEY = 'topup_generated'
POSITION_KEY = 'position_enu_m'


def drone_topup_generator() -> Generator:
    """The drone's top-up generator: label-preserving augmentation of its nadir camera frames
    (every rotation and mirror image, ``augment_dihedral``: the engine's 'auto' for the world
    dataset), on the buffer's H x W x 3 uint8 frames; it makes nothing for a class the drone
    has no sample of (FedDPQ's planner is told so)."""
    return build_generator('auto', 'hwc', 'world')


@dataclass(frozen=True)
class KnobCheck:
    """The resource knobs of one round: typed values to apply and rejections with reasons.

    applied: knob -> value (int, float or list of ints). rejected: knob -> (kind, detail),
    kind ``malformed`` or ``unsupported``."""

    applied: dict[str, Any] = field(default_factory=dict)
    rejected: dict[str, tuple[str, str]] = field(default_factory=dict)


def valid_position(value: Any) -> bool:
    """An upload position (``POSITION_KEY``): three finite ENU metres."""
    return (isinstance(value, list | tuple) and len(value) == 3
            and all(map(is_finite_number, value)))


def _malformed(knob: str, value: Any) -> str | None:
    """Why ``value`` is not a well-formed ``knob``, or None."""
    if knob == LOCAL_STEPS_KNOB:
        ok = is_int(value) and 1 <= value <= MAX_LOCAL_STEPS
        return None if ok else f'an integer in [1, {MAX_LOCAL_STEPS}]'
    if knob == PRUNE_FRACTION_KNOB:
        return None if is_finite_number(value) and 0.0 <= value < 1.0 else 'a number in [0, 1)'
    if knob == BITS_KNOB:
        ok = is_int(value) and RANGE_BITS_MIN <= value <= RANGE_BITS_MAX
        return None if ok else f'an integer in [{RANGE_BITS_MIN}, {RANGE_BITS_MAX}]'
    if knob == TOPUP_KNOB:
        return None if is_finite_number(value) and 0.0 < value <= 1.0 else 'a number in (0, 1]'
    if knob == TX_POWER_KNOB:
        return None if is_finite_number(value) and value > 0.0 else 'a number > 0 (W)'
    if knob in (Q_TARGET_KNOB, Q_KNOB):
        return None if is_finite_number(value) and 0.0 <= value <= 1.0 else 'a number in [0, 1]'
    ok = (isinstance(value, list | tuple) and all(is_int(k) and k >= 0 for k in value)
          and sum(value) >= 1)
    return None if ok else 'a list of entry counts >= 0 with a positive sum'


def check_resource_knobs(knobs: Mapping[str, Any], *, client_algorithm: str,
                         compression_method: str, num_channels: int, model_dim: int
                         ) -> KnobCheck:
    """Check the resource knobs in ``knobs`` against the drone's procedures (module table).

    client_algorithm, compression_method: the drone's ``learning.client_algorithm`` and
    ``compression.method``; num_channels: its LGC channels (``compression.
    lgc_channel_entries``); model_dim: its model's entries (LGC eq. (10b): Σ D_n ≤ D)."""
    applied: dict[str, Any] = {}
    rejected: dict[str, tuple[str, str]] = {}
    needs = {LOCAL_STEPS_KNOB: ('learning.client_algorithm', client_algorithm, 'sgd'),
             PRUNE_FRACTION_KNOB: ('learning.client_algorithm', client_algorithm, 'feddpq'),
             BITS_KNOB: ('compression.method', compression_method, 'range'),
             ENTRIES_KNOB: ('compression.method', compression_method, 'lgc')}
    for knob in RESOURCE_KNOBS:
        if knob not in knobs:
            continue
        value = knobs[knob]
        wanted = _malformed(knob, value)
        if wanted is not None:
            rejected[knob] = (MALFORMED, f'{value!r} is not {wanted}')
            continue
        if knob in needs and needs[knob][1] != needs[knob][2]:
            key, have, need = needs[knob]
            rejected[knob] = (UNSUPPORTED, f'needs {key} {need}, the drone runs {have}')
            continue
        if knob == ENTRIES_KNOB and len(value) != num_channels:
            rejected[knob] = (UNSUPPORTED, f'{len(value)} channels, the drone has '
                                           f'{num_channels}')
            continue
        if knob == ENTRIES_KNOB and sum(value) > model_dim:
            rejected[knob] = (MALFORMED, f'{sum(value)} entries, more than the model has '
                                         f'({model_dim})')
            continue
        applied[knob] = list(value) if knob == ENTRIES_KNOB else value
    return KnobCheck(applied, rejected)


def check_strategy_knobs(knobs: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The strategy knobs in ``knobs`` (fl_uav.aggregation.knobs) that are malformed: knob ->
    (MALFORMED, detail), as :attr:`KnobCheck.rejected`; well-formed ones are not listed."""
    return {knob: (MALFORMED, detail) for knob, detail in strategy_knob_problems(knobs).items()}
