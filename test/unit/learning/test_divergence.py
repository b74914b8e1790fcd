"""DivergenceMonitor: a finite but exploded loss, or accuracy stuck at chance, is said."""

from __future__ import annotations

import math

import pytest

from fl_uav.learning.divergence import (
    CHANCE_ACCURACY_FACTOR,
    CHANCE_MIN_ROUNDS,
    CHANCE_PATIENCE_ROUNDS,
    LOSS_EXPLOSION_FACTOR,
    DivergenceMonitor,
)

# quick_digits, fedavg (rounds.csv): a learning run that starts at chance
LEARNING = [(0.100, 2.306), (0.189, 2.275), (0.198, 2.213), (0.627, 2.018), (0.719, 1.744)]
# the same with 2ceoafl at server_lr 1 (ten times FedAvg's step)
DIVERGED = [(0.100, 80.66), (0.103, 2.454), (0.100, 31.22), (0.100, 12.69), (0.100, 3.169)]
# quick_digits with 100 drones and 40 rounds (72 % at the end): a slow start, rounds 1-10
SLOW_START = [(0.134, 2.304), (0.120, 2.303), (0.086, 2.302), (0.125, 2.305), (0.103, 2.318),
              (0.100, 2.311), (0.109, 2.300), (0.114, 2.299), (0.148, 2.297), (0.184, 2.290)]


def _observe(monitor: DivergenceMonitor, rounds) -> list[list[str]]:
    return [monitor.observe(r, acc, loss) for r, (acc, loss) in enumerate(rounds, start=1)]


@pytest.mark.parametrize('rounds, num_rounds', [(LEARNING, 5), (SLOW_START, 40),
                                                (DIVERGED[1:2], 1)])
def test_a_learning_slow_or_one_round_run_raises_no_warning(rounds, num_rounds):
    # Arrange
    monitor = DivergenceMonitor(num_classes=10, num_rounds=num_rounds)
    # Act
    raised = _observe(monitor, rounds)
    # Assert
    assert raised == [[]] * len(rounds) and monitor.warnings == []


def test_a_diverged_run_warns_once_of_the_loss_and_at_its_end_of_chance_accuracy():
    # Arrange: 5 rounds, below the patience: judged at its last round
    monitor = DivergenceMonitor(num_classes=10, num_rounds=len(DIVERGED))
    # Act
    raised = _observe(monitor, DIVERGED)
    # Assert: the loss at round 1 (80.7 > 10 ln 10 = 23.0), chance at the end
    assert len(raised[0]) == 1 and 'round 1: test loss 80.66' in raised[0][0]
    assert 'diverged' in raised[0][0] and '= 23' in raised[0][0]
    assert raised[1:4] == [[], [], []] and len(raised[4]) == 1
    assert 'chance level for 5 rounds (best 0.103' in raised[4][0]
    assert monitor.warnings == raised[0] + raised[4]


def test_a_long_run_at_chance_is_reported_after_the_patience():
    # Arrange: 100 configured rounds, every one at chance with a sane loss (lr too small)
    monitor = DivergenceMonitor(num_classes=10, num_rounds=100)
    # Act
    raised = _observe(monitor, [(0.11, 2.30)] * (CHANCE_PATIENCE_ROUNDS + 3))
    # Assert
    assert [i + 1 for i, new in enumerate(raised) if new] == [CHANCE_PATIENCE_ROUNDS]


def test_the_thresholds_are_the_named_multiples_of_ln_c_and_1_over_c():
    # Arrange
    monitor = DivergenceMonitor(num_classes=7, num_rounds=3)
    # Act / Assert
    assert monitor.loss_limit == pytest.approx(LOSS_EXPLOSION_FACTOR * math.log(7))
    assert monitor.chance_accuracy == pytest.approx(CHANCE_ACCURACY_FACTOR / 7)
    assert monitor.chance_rounds is None and CHANCE_MIN_ROUNDS > 3
    with pytest.raises(ValueError, match='num_classes must be >= 2'):
        DivergenceMonitor(num_classes=1, num_rounds=3)
