"""The project's random streams: one table of purposes, one seed function (no ROS, no torch).

A stream is keyed by (run seed, round, purpose, index): ``SeedSequence([seed, round, purpose,
index])``. With the round and index below 2³² (one entropy word each) and the seed below 2⁶⁴
(one word, two from 2³² on, which makes the sequence longer, not another key's), distinct keys
are distinct entropy, so two purposes, drones or runs never share a stream whatever the fleet
size. Seeds made by adding small integers (``10 + drone`` beside ``20 + drone``, ``seed * 1000
+ drone``) share streams as soon as one key outgrows its slot: drone k + 10's batches were
drone k's compressor draws in the engine with 10 or more drones.
The run seed is ``seed`` in the engine and ``world.seed`` in the fleet. No purpose is 0: the
key ``[seed, 0, 0, 0]`` is ``default_rng(seed)``'s own SeedSequence, since SeedSequence pads
its entropy with zeros (``[s]``, ``[s, 0]`` and ``[s, 0, 0, 0]`` are one sequence; the world's
first land-cover attempt is ``default_rng([world.seed, 0])``, i.e. ``default_rng(world.seed)``).
So the fleet's station gives its strategy (which may do ``default_rng(seed)``) not
``world.seed`` but ``stream_seed(world.seed, 0, Stream.STRATEGY)``.
"""

from __future__ import annotations

import enum

import numpy as np


class Stream(enum.IntEnum):
    """What a stream is for; ``index`` is the drone (or client) unless stated."""

    # the experiment engine (fl_uav.engine: data, experiment, clients)
    SPLIT = 1             # the stratified train/test split (round 0)
    TEST_SUBSET = 2       # which test samples data.max_test_samples keeps (round 0)
    PARTITION = 3         # each drone's share of the training set (round 0)
    WORLD_DATA = 4        # data.dataset world: the frames' poses and nuisances (round 0)
    DISTANCES = 5         # the drones' distances to the station (round 0)
    ARRIVALS = 6          # a round's online data arrivals
    LINK = 7              # a round's fading draws (upload rates)
    PACKET_ERRORS = 8     # a round's packet-error draws (FedDPQ eqs. (16)-(17))
    GLOBAL_RANDOM = 9     # np.random's and random's global seed in a round (plug-ins)
    BATCHES = 10          # a drone's training seed in a round (batch order, its draws)
    COMPRESSOR = 11       # a drone's compressor draws in a round
    # the fleet (fl_uav.fleet)
    FLEET_BATCHES = 12    # a drone's training seed in a round
    FLEET_COMPRESSOR = 13  # a drone's compressor draws in a round
    CLIENT_BATCHES = 14   # a FedEx ground client's training seed for a base round
    # per-drone resource decisions (fl_uav.planning.round_resources, fl_uav.planning.lgc_control)
    LGC_SURROGATE = 15    # a drone's LGC surrogate (LgcEnv) of the planner (round 0)
    LGC_DDPG = 16         # a drone's DDPG training (round 0) or fine-tuning (its round)
    DDPG_AGENT = 17       # in one DDPG run: the agent's init, exploration and minibatches
    DDPG_ENV = 18         # in one DDPG run: its surrogate's draws (fading)
    # 2CEOAFL trajectories (fl_uav.fleet.onboard_planner, fl_uav.planning.plan_request)
    REGION_SAMPLES = 19   # fl-uav plan: the positions class regions are fitted to
    REGION_FIT = 20       # the class regions' k-means++ initialisation (2CEOAFL eq. (1))
    CLASS_PRIORITIES = 21  # ψ's mixing matrix M_u (2CEOAFL eq. (2))
    TRAJECTORY = 22       # a trajectory's own draws (fl-uav plan's random baseline)
    # the fleet's ground station and drones, moved off bare world.seed (branch seedcontract)
    STRATEGY = 23         # the fleet station's aggregation strategy's int seed (round 0)
    FLEET_TOPUP = 24      # a drone's FedDPQ top-up draws in a round (eqs. (1)-(3))
    # the engine's injected faults (fl_uav.engine.faults)
    POISON = 25           # which drones faults.poisoned_count poisons (round 0); a poisoned
    #                       drone's random update in a round


def stream_seed(seed: int, round_index: int, purpose: Stream, index: int = 0) -> int:
    """The 64-bit seed of one stream: run ``seed``, round, purpose, ``index``.

    64 bits so that seeds of different keys coincide with probability ~n²/2⁶⁵ (32-bit seeds
    are likely to: half the time from ~77,000 seeds, e.g. 1000 drones × 40 rounds × 2).
    ValueError names a key out of range (negative, or wider than the words above).
    """
    keys = [int(seed), int(round_index), int(purpose), int(index)]
    if min(keys) < 0 or keys[0] >= 2**64 or max(keys[1:]) >= 2**32:
        raise ValueError(f'stream_seed needs a seed in [0, 2**64) and a round and index in '
                         f'[0, 2**32), got seed {seed}, round {round_index}, purpose '
                         f'{purpose!r}, index {index}')
    return int(np.random.SeedSequence(keys).generate_state(1, np.uint64)[0])


def stream_rng(seed: int, round_index: int, purpose: Stream, index: int = 0
               ) -> np.random.Generator:
    """A generator on the stream :func:`stream_seed` keys."""
    return np.random.default_rng(stream_seed(seed, round_index, purpose, index))
