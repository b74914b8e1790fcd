"""Faults the engine injects on purpose: poisoned drones (the ``faults.*`` config section).

A poisoned drone trains as an honest one, then sends a forged update in place of its delta Δ
(issue 25 item 5, "a poisoned drone"). The forgery is made from Δ after local training and
before compression, so the compressor encodes it, the uplink is charged for it and the station
decodes and aggregates it as any other update; what the drone keeps for itself (SCAFFOLD's
c_k, OSAFL's step counts) stays honest, and a compressor with error memory (LGC) remembers
what was sent. Every kind gives ||Δ'||₂ = s·||Δ||₂ with s = ``faults.poison_scale``; they
differ in direction only:

* ``scale``: Δ' = s·Δ (the honest direction, blown up: a "boosted" update);
* ``sign_flip``: Δ' = −s·Δ (s = 1: the sign-flipping attack);
* ``random``: Δ' = s·||Δ||₂ · z/||z||₂ with z ~ N(0, I) over the entries the drone sends (an
  unstructured-pruning mask's kept entries, else all), drawn from the run's own stream
  (seed, round, :attr:`Stream.POISON`, drone).

A poisoned drone may also lie about its sample count (``faults.claimed_samples``: the
``num_samples`` FedAvg weighs its update by; issue 26: a signed drone's 2^53 made the station
apply its update alone). The engine, as the station, weighs a count at most what the drone can
hold (:func:`fl_uav.aggregation.robust.cap_samples`), so the claim shows what that cap does.

The drones come from ``faults.poisoned_drones`` (their ids) or ``faults.poisoned_count``
(that many ids drawn without replacement from (seed, 0, :attr:`Stream.POISON`)); the same
drones every round. summary.json records ``faults``: the kind, the scale, the claimed count
and the drones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fl_uav.configschema import require_choice
from fl_uav.streams import Stream, stream_rng

POISON_KINDS = ('none', 'scale', 'sign_flip', 'random')
DEFAULT_POISON_SCALE = 100.0
MAX_CLAIMED_SAMPLES = 2 ** 53
"""The largest count a drone's update may carry (fl_uav.fleet.messages.MAX_COUNT)."""


@dataclass(frozen=True)
class FaultsConfig:
    """poison: what a poisoned drone sends instead of its update Δ (after local training,
    before compression), none | scale (s·Δ) | sign_flip (−s·Δ) | random (a Gaussian direction
    of norm s·||Δ||), with s = poison_scale.
    poison_scale: s, the forged update's L2 norm over the honest one's (a number > 0; 100 =
    issue 25's ×100; 1 with sign_flip is the plain sign flip).
    poisoned_drones: the ids of the poisoned drones, each below num_drones (or set
    poisoned_count; one of the two with a poison, neither without).
    poisoned_count: how many drones are poisoned, drawn from the run's seed (the same drones
    every round), instead of poisoned_drones.
    claimed_samples: the sample count (num_samples, FedAvg's weight) the poisoned drones report,
    0 = their true count, up to 2^53 (issue 26's claim), weighed at most what the drone holds,
    as the station weighs it (with poison scale and poison_scale 1 only the count lies)."""

    poison: str = 'none'
    poison_scale: float = DEFAULT_POISON_SCALE
    poisoned_drones: tuple[int, ...] = ()
    poisoned_count: int = 0
    claimed_samples: int = 0

    def __post_init__(self) -> None:
        require_choice('poison', self.poison, POISON_KINDS)
        if not 0.0 < self.poison_scale < math.inf:
            raise ValueError(f'poison_scale must be a finite number > 0, got '
                             f'{self.poison_scale}')
        if self.poisoned_count < 0:
            raise ValueError(f'poisoned_count must be >= 0, got {self.poisoned_count}')
        bad = [k for k in self.poisoned_drones if k < 0]
        if bad or len(set(self.poisoned_drones)) != len(self.poisoned_drones):
            raise ValueError(f'poisoned_drones must be distinct drone ids >= 0, got '
                             f'{list(self.poisoned_drones)}')
        if self.poisoned_drones and self.poisoned_count:
            raise ValueError('set poisoned_drones (ids) or poisoned_count (drawn from the '
                             'seed), not both')
        if not 0 <= self.claimed_samples <= MAX_CLAIMED_SAMPLES:
            raise ValueError(f'claimed_samples must be in [0, 2^53] (0 = the true count), got '
                             f'{self.claimed_samples}')
        chosen = bool(self.poisoned_drones or self.poisoned_count)
        if self.poison == 'none':
            if self.claimed_samples:
                raise ValueError('claimed_samples has no effect with poison none: set poison '
                                 '(scale with poison_scale 1 forges the count alone) and '
                                 'poisoned_drones')
            if chosen:
                raise ValueError('poisoned_drones / poisoned_count have no effect with poison '
                                 'none: set poison (scale, sign_flip, random) or leave them out')
            if self.poison_scale != DEFAULT_POISON_SCALE:
                raise ValueError(f'poison_scale = {self.poison_scale} has no effect with '
                                 f'poison none: set poison or leave poison_scale out')
        elif not chosen:
            raise ValueError(f'poison {self.poison} poisons no drone: set poisoned_drones '
                             f'(ids) or poisoned_count')

    def check(self, num_drones: int) -> None:
        """ValueError naming the key if a drone id or the count does not fit the fleet."""
        over = [k for k in self.poisoned_drones if k >= num_drones]
        if over:
            raise ValueError(f'faults.poisoned_drones {over} are not drones: ids go from 0 to '
                             f'num_drones - 1 = {num_drones - 1}')
        if self.poisoned_count > num_drones:
            raise ValueError(f'faults.poisoned_count ({self.poisoned_count}) exceeds '
                             f'num_drones ({num_drones})')

    def drones(self, num_drones: int, seed: int) -> tuple[int, ...]:
        """The poisoned drones' ids, sorted: the configured ones, or ``poisoned_count`` drawn
        without replacement from (seed, 0, Stream.POISON)."""
        if self.poison == 'none':
            return ()
        if self.poisoned_drones:
            return tuple(sorted(self.poisoned_drones))
        rng = stream_rng(seed, 0, Stream.POISON)
        return tuple(sorted(int(k) for k in rng.choice(num_drones, self.poisoned_count,
                                                        replace=False)))

    def summary(self, num_drones: int, seed: int) -> dict:
        """summary.json's ``faults`` entry: the kind, the scale and the drones."""
        if self.poison == 'none':
            return {'poison': 'none', 'poisoned_drones': []}
        return {'poison': self.poison, 'poison_scale': self.poison_scale,
                **({'claimed_samples': self.claimed_samples} if self.claimed_samples else {}),
                'poisoned_drones': list(self.drones(num_drones, seed))}


def poison_delta(delta: Mapping[str, np.ndarray], kind: str, scale: float,
                 rng: np.random.Generator | None = None,
                 mask: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The forged update of ``kind`` for the honest ``delta`` (each tensor's dtype kept; the
    input is not changed). ``random`` draws from ``rng``; ``mask`` (True = sent) keeps its
    zeros outside the mask, as the honest delta has them."""
    require_choice('poison', kind, POISON_KINDS[1:])
    if kind in ('scale', 'sign_flip'):
        factor = scale if kind == 'scale' else -scale
        return {n: (np.asarray(d, np.float64) * factor).astype(np.asarray(d).dtype)
                for n, d in delta.items()}
    if rng is None:
        raise ValueError('poison random needs a random generator')
    norm = math.sqrt(sum(float(np.sum(np.square(np.asarray(d, np.float64))))
                         for d in delta.values()))
    noise = {}
    for n, d in delta.items():
        z = rng.standard_normal(np.shape(d))
        if mask is not None and n in mask:
            z = z * np.asarray(mask[n], bool)
        noise[n] = z
    z_norm = math.sqrt(sum(float(np.sum(np.square(z))) for z in noise.values()))
    factor = scale * norm / z_norm if z_norm > 0 else 0.0
    return {n: (noise[n] * factor).astype(np.asarray(d).dtype) for n, d in delta.items()}


def poison_result(faults: FaultsConfig, seed: int, drone: int, r: int, result):
    """``faults.poison``: the drone's round (a ClientResult) with its delta replaced by the
    forgery, made after training and before compression; ``random`` draws from (seed, round,
    Stream.POISON, drone). The local engine and the Ray backend's workers both call it."""
    rng = stream_rng(seed, r, Stream.POISON, drone) if faults.poison == 'random' else None
    return dataclasses.replace(result, delta=poison_delta(
        result.delta, faults.poison, faults.poison_scale, rng, result.mask))
