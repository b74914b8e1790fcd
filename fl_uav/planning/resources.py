"""Per-drone resource knobs for each round: the tiny interface a Strategy or the engine calls.

Both controllers of issue 5 item 3 answer the same question a Strategy's ``configure_round``
answers (fl_uav.aggregation.strategy): given the round and the drones in it, a dict of knobs
per drone id, which travels with the round's global model.

* :class:`FeddpqResourcePlanner`: FedDPQ's decisions are static (FedDPQ §V: chosen once before
  training by Algorithm 2, fl_uav.planning.feddpq_opt), so every round returns the plan's
  ``tx_power_w``, ``topup_factor``, ``prune_fraction``, ``range_bits`` (plus the packet-error
  target and the drone's own predicted q).
* :class:`LgcResourcePlanner`: LGC's decisions are per round (LGC §3.2, fl_uav.planning.
  lgc_control): each drone's policy (DDPG, fixed or the heuristic) maps that drone's current
  consumption factors (LGC eq. (11)) to ``local_steps`` and ``lgc_channel_entries``. The caller
  reports measured channel rates with :meth:`LgcResourcePlanner.observe_rates` when it has them.

:class:`PlateauSwitch` is a plain rule beside the LGC policies (``resources.lgc_plateau_*``):
once the fleet's accuracy has plateaued, every drone takes a fixed number of local steps; and
(``resources.lgc_stall_*``, not latched) while it stalls, every drone takes the mid decision.

:func:`merge_knobs` combines a strategy's knobs with these, refusing silent overwrites.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from fl_uav.planning.feddpq_opt import FeddpqPlan
from fl_uav.planning.lgc_control import LgcEnv


class ResourcePlanner(Protocol):
    """What the ground station (or the engine) asks each round."""

    def knobs(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        """Per-drone knobs for ``round_index`` (a dict per drone id)."""
        ...


class FeddpqResourcePlanner:
    """FedDPQ eqs. (40)-(41): the optimiser's per-drone knobs, the same every round."""

    def __init__(self, plan: FeddpqPlan) -> None:
        self.plan = plan
        self._by_drone = plan.knobs_by_drone()

    def knobs(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        if round_index < 0:
            raise ValueError(f'round_index must be >= 0, got {round_index}')
        unknown = [int(d) for d in drone_ids if int(d) not in self._by_drone]
        if unknown:
            raise KeyError(f'drones {unknown} are not in the FedDPQ plan (planned drones: '
                           f'{sorted(self._by_drone)}); re-run optimise_feddpq for this fleet')
        return {int(d): dict(self._by_drone[int(d)]) for d in drone_ids}


class LgcResourcePlanner:
    """LGC §3.2: each drone's policy picks H and D_n from its current consumption factors."""

    def __init__(self, envs: Mapping[int, LgcEnv], policies: Mapping[int, object]) -> None:
        if set(envs) != set(policies):
            raise ValueError(f'envs and policies must cover the same drones, got '
                             f'{sorted(envs)} and {sorted(policies)}')
        self.envs = {int(d): e for d, e in envs.items()}
        self.policies = {int(d): p for d, p in policies.items()}

    def observe_rates(self, drone_id: int, rates_bit_s: Sequence[float]) -> None:
        """Set the channel rates the drone measured (they drive its next state, eq. (12))."""
        env = self._env(drone_id)
        rates = np.asarray(rates_bit_s, np.float64)
        if rates.shape != (env.config.num_channels,) or not np.all(rates > 0):
            raise ValueError(f'drone {drone_id}: rates_bit_s must be {env.config.num_channels} '
                             f'rates > 0, got {list(rates_bit_s)}')
        env.rates = rates

    def _env(self, drone_id: int) -> LgcEnv:
        if int(drone_id) not in self.envs:
            raise KeyError(f'drone {drone_id} has no LGC controller (drones: '
                           f'{sorted(self.envs)})')
        return self.envs[int(drone_id)]

    def knobs(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        if round_index < 0:
            raise ValueError(f'round_index must be >= 0, got {round_index}')
        out = {}
        for d in drone_ids:
            env = self._env(d)
            out[int(d)] = self.policies[int(d)].decide(env, env.state()).knobs()
        return out


class PlateauSwitch:
    """Latches once the accuracy has plateaued: after round r (r > ``window``), when the best
    accuracy of rounds r − window + 1 .. r exceeds the best of rounds 1 .. r − window by less
    than ``min_gain`` (both as fractions). From round r + 1 on :meth:`active` is True.

    A plain rule, no model: "no new gain of ``min_gain`` within the last ``window`` rounds".
    The accuracies are the engine's per-round test accuracy of the global model (what the
    server would score on a held-out set); rounds must be reported in order, 1, 2, ...
    """

    def __init__(self, window: int, min_gain: float) -> None:
        if window < 1 or not 0.0 <= min_gain <= 1.0:
            raise ValueError(f'window must be >= 1 and min_gain in [0, 1], got {window}, '
                             f'{min_gain}')
        self.window, self.min_gain = int(window), float(min_gain)
        self.accuracies: list[float] = []
        self.switched_after: int | None = None

    def observe(self, round_index: int, accuracy: float) -> bool:
        """Record round ``round_index``'s accuracy; True once the switch has latched."""
        if round_index != len(self.accuracies) + 1:
            raise ValueError(f'rounds must be reported in order: expected round '
                             f'{len(self.accuracies) + 1}, got {round_index}')
        self.accuracies.append(float(accuracy))
        if self.switched_after is None and self.stalled():
            self.switched_after = int(round_index)
        return self.switched_after is not None

    def gain(self) -> float | None:
        """Best of the last ``window`` rounds minus the best before them (None: too few)."""
        w = self.window
        if len(self.accuracies) <= w:
            return None
        return max(self.accuracies[-w:]) - max(self.accuracies[:-w])

    def stalled(self) -> bool:
        """The verdict on the rounds seen so far, not latched: the last window gained less
        than ``min_gain`` (``resources.lgc_stall_*`` uses it round by round)."""
        gain = self.gain()
        return gain is not None and gain < self.min_gain

    def active(self, round_index: int) -> bool:
        """True in the rounds after the one in which the plateau was seen."""
        return self.switched_after is not None and round_index > self.switched_after


def merge_knobs(strategy_knobs: Mapping[int, Mapping], resource_knobs: Mapping[int, Mapping]
                ) -> dict[int, dict]:
    """Per drone, the union of a strategy's knobs and a planner's; a shared key is an error."""
    out: dict[int, dict] = {int(d): dict(k) for d, k in strategy_knobs.items()}
    for d, knobs in resource_knobs.items():
        row = out.setdefault(int(d), {})
        clash = sorted(set(row) & set(knobs))
        if clash:
            raise ValueError(f'drone {d}: knobs {clash} are set by both the strategy and the '
                             f'resource planner')
        row.update(knobs)
    return out
