"""Per-round resource knobs (fl_uav.planning.resources) for FedDPQ and LGC controllers."""

import numpy as np
import pytest

from fl_uav.aggregation.feddpq import DRAWS_KNOB, FedDPQ
from fl_uav.planning.feddpq_opt import FeddpqFleet, optimise_feddpq
from fl_uav.planning.lgc_control import (
    ENTRIES_KNOB,
    LOCAL_STEPS_KNOB,
    FixedPolicy,
    GreedyChannelPolicy,
    LgcDecision,
    LgcEnv,
    LgcEnvConfig,
    table1_channels,
)
from fl_uav.planning.resources import (
    FeddpqResourcePlanner,
    LgcResourcePlanner,
    PlateauSwitch,
    merge_knobs,
)


@pytest.fixture(scope='module')
def feddpq_planner():
    fleet = FeddpqFleet((3, 5), np.array([[30, 5, 0], [10, 10, 10]]), [90.0, 400.0],
                        num_params=5000, cpu_freq_hz=1e9, draws_per_round=2)
    plan = optimise_feddpq(fleet, seed=0, max_bcd_rounds=1, q_trials=3, block_trials=8,
                           q_sampler='tpe')
    return FeddpqResourcePlanner(plan)


def test_feddpq_planner_returns_the_plan_every_round(feddpq_planner):
    first = feddpq_planner.knobs(0, [3, 5])
    later = feddpq_planner.knobs(7, [5])

    assert sorted(first) == [3, 5]
    assert set(first[3]) >= {'tx_power_w', 'topup_factor', 'prune_fraction', 'range_bits'}
    assert later[5] == first[5]


def test_feddpq_planner_names_unknown_drones(feddpq_planner):
    with pytest.raises(KeyError, match=r'drones \[9\] are not in the FedDPQ plan'):
        feddpq_planner.knobs(0, [3, 9])


def test_knobs_merge_with_a_strategy_and_clashes_are_refused(feddpq_planner):
    strategy = FedDPQ(num_selected=2, seed=0)

    merged = merge_knobs(strategy.configure_round(1, [3, 5]), feddpq_planner.knobs(1, [3, 5]))

    assert DRAWS_KNOB in merged[3] and 'tx_power_w' in merged[3]
    with pytest.raises(ValueError, match=r"drone 3: knobs \['tx_power_w'\]"):
        merge_knobs({3: {'tx_power_w': 0.1}}, feddpq_planner.knobs(1, [3]))


def test_lgc_planner_asks_each_drone_policy_with_its_current_state():
    # Arrange: drone 1 fixed, drone 2 greedy on energy only (3G first).
    config = LgcEnvConfig(channels=table1_channels(10_000), weights=(1.0, 0.0),
                          hover_power_w=0.0)
    envs = {1: LgcEnv(config, seed=1), 2: LgcEnv(config, seed=2)}
    planner = LgcResourcePlanner(envs, {1: FixedPolicy(LgcDecision(2, (5, 6, 7))),
                                        2: GreedyChannelPolicy(3, 15_000)})

    # Act
    planner.observe_rates(2, [1e6, 2e6, 3e6])
    knobs = planner.knobs(0, [1, 2])

    # Assert
    assert knobs[1] == {LOCAL_STEPS_KNOB: 2, ENTRIES_KNOB: [5, 6, 7]}
    assert knobs[2] == {LOCAL_STEPS_KNOB: 3, ENTRIES_KNOB: [10_000, 5_000, 0]}
    with pytest.raises(ValueError, match='rates_bit_s must be 3 rates > 0'):
        planner.observe_rates(1, [1e6, 0.0, 1e6])
    with pytest.raises(KeyError, match='drone 4 has no LGC controller'):
        planner.knobs(1, [4])


# --- PlateauSwitch ---------------------------------------------------------------------------

def test_plateau_switch_latches_when_the_last_window_gains_less_than_min_gain():
    # Setup: window 3, 1 point; rounds 1-5 rise fast, 6-8 gain 0.5 points over the best before
    switch = PlateauSwitch(window=3, min_gain=0.01)
    accuracies = [0.10, 0.30, 0.50, 0.60, 0.650, 0.652, 0.655, 0.640, 0.90]
    # Execute
    seen = [switch.observe(r, a) for r, a in enumerate(accuracies, start=1)]
    # Assert: round 7: rounds 5-7 (best 0.655) gain 5.5 points over rounds 1-4 (0.60); round 8:
    # rounds 6-8 (0.655) gain 0.5 point over rounds 1-5 (0.65) < 1 point: latched, and stays
    assert seen == [False] * 7 + [True, True]
    assert switch.switched_after == 8
    assert not switch.active(8) and switch.active(9)   # from the next round on, for good
    assert not switch.stalled()   # round 9 gained again: the round-by-round verdict clears


def test_plateau_switch_needs_more_rounds_than_its_window_and_rounds_in_order():
    # Setup
    switch = PlateauSwitch(window=2, min_gain=0.5)
    # Execute / Assert: no verdict on 2 rounds (nothing before the window)
    assert not switch.observe(1, 0.1) and not switch.observe(2, 0.1)
    assert switch.observe(3, 0.1) and switch.switched_after == 3
    with pytest.raises(ValueError, match='in order'):
        switch.observe(5, 0.2)
    with pytest.raises(ValueError, match='window'):
        PlateauSwitch(window=0, min_gain=0.01)
