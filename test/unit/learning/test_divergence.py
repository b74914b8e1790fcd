"""DivergenceMonitor: a finite but exploded loss, or accuracy stuck at chance, is said."""

from __future__ import annotations

import math

import pytest

from fl_uav.learning.divergence import (
    CHANCE_ACCURACY_FACTOR,
    CHANCE_PATIENCE_ROUNDS,
    LOSS_EXPLOSION_FACTOR,
    DivergenceMonitor,
)

# quick_digits, fedavg (rounds.csv): a learning run that starts at chance
LEARNING = [(0.100, 2.306), (0.189, 2.275), (0.198, 2.213), (0.627, 2.018), (0.719, 1.744)]
# the same with 2ceoafl at server_lr 1 (ten times FedAvg's step)
DIVERGED = [(0.100, 80.66), (0.103, 2.454), (0.100, 31.22), (0.100, 12.69), (0.100, 3.169)]


def _observe(monitor: DivergenceMonitor, rounds) -> list[list[str]]:
    return [monitor.observe(r, acc, loss) for r, (acc, loss) in enumerate(rounds, start=1)]


def test_a_learning_run_raises_no_warning():
    # Arrange
    monitor = DivergenceMonitor(num_classes=10)
    # Act
    raised = _observe(monitor, LEARNING)
    # Assert
    assert raised == [[]] * len(LEARNING) and monitor.warnings == []


def test_a_diverged_run_warns_once_of_the_loss_and_once_of_chance_accuracy():
    # Arrange
    monitor = DivergenceMonitor(num_classes=10)
    # Act
    raised = _observe(monitor, DIVERGED)
    # Assert: the loss at round 1 (80.7 > 10 ln 10 = 23.0), chance after the patience
    assert len(raised[0]) == 1 and 'round 1: test loss 80.66' in raised[0][0]
    assert 'diverged' in raised[0][0] and '= 23' in raised[0][0]
    assert raised[1:CHANCE_PATIENCE_ROUNDS - 1] == [[]] * (CHANCE_PATIENCE_ROUNDS - 2)
    assert len(raised[CHANCE_PATIENCE_ROUNDS - 1]) == 1
    assert 'chance level for 5 rounds (best 0.103' in raised[CHANCE_PATIENCE_ROUNDS - 1][0]
    assert monitor.warnings == raised[0] + raised[CHANCE_PATIENCE_ROUNDS - 1]


def test_the_thresholds_are_the_named_multiples_of_ln_c_and_1_over_c():
    # Arrange
    monitor = DivergenceMonitor(num_classes=7)
    # Act / Assert
    assert monitor.loss_limit == pytest.approx(LOSS_EXPLOSION_FACTOR * math.log(7))
    assert monitor.chance_accuracy == pytest.approx(CHANCE_ACCURACY_FACTOR / 7)
    with pytest.raises(ValueError, match='num_classes must be >= 2'):
        DivergenceMonitor(num_classes=1)
