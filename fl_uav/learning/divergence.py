"""Warnings for a run whose global model diverged, or is not learning, with a finite loss.

A non-finite loss stops a run (the engine's ExperimentError); a finite one does not, and a
run at 10 % accuracy with a test loss of 10⁸ still "finishes". :class:`DivergenceMonitor`
watches the global model's test loss and accuracy round by round and says so, once per kind,
in words a reader of the log or of summary.json acts on. It changes nothing in the run.

The reference loss is ln(C), the cross-entropy of a model that gives each of C classes the
same probability (what an untrained network is close to); chance accuracy is 1/C (the
held-out sets here are balanced or nearly so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

LOSS_EXPLOSION_FACTOR = 10.0
"""A test loss above this multiple of ln(num_classes) (a uniform guess's cross-entropy) is a
diverged model: the network is confidently wrong on most of the held-out set."""

CHANCE_ACCURACY_FACTOR = 1.5
"""An accuracy at most this multiple of 1/num_classes is chance level (0.15 with 10
classes)."""

CHANCE_PATIENCE_ROUNDS = 10
"""Rounds after which a best accuracy still at chance level is reported. Slow starts are
normal: quick_digits with 100 drones sits at chance for 8 rounds and reaches 72 % in 40."""

CHANCE_MIN_ROUNDS = 5
"""A shorter run (num_rounds below CHANCE_PATIENCE_ROUNDS) is reported at its last round if
it has at least this many rounds and never left chance level (a 1-round run often has not)."""

LOSS_EXPLODED = 'loss_exploded'
AT_CHANCE = 'accuracy_at_chance'


@dataclass
class DivergenceMonitor:
    """Feed it every round's (test accuracy, test loss); it returns and keeps the warnings.

    num_classes: C of the task; num_rounds: the rounds the run is configured for (a run
    shorter than patience_rounds is judged at its end); loss_factor, chance_factor,
    patience_rounds, min_rounds: the thresholds (module constants by default). ``warnings``
    holds every warning so far, for a summary.
    """

    num_classes: int
    num_rounds: int
    loss_factor: float = LOSS_EXPLOSION_FACTOR
    chance_factor: float = CHANCE_ACCURACY_FACTOR
    patience_rounds: int = CHANCE_PATIENCE_ROUNDS
    min_rounds: int = CHANCE_MIN_ROUNDS
    warnings: list[str] = field(default_factory=list)
    _raised: set[str] = field(default_factory=set)
    _rounds: int = 0
    _best_accuracy: float = -math.inf

    def __post_init__(self) -> None:
        if self.num_classes < 2:
            raise ValueError(f'num_classes must be >= 2, got {self.num_classes}')
        if not self.loss_factor > 1.0 or not self.chance_factor >= 1.0:
            raise ValueError(f'loss_factor must be > 1 and chance_factor >= 1, got '
                             f'{self.loss_factor}, {self.chance_factor}')
        if not 1 <= self.min_rounds <= self.patience_rounds or self.num_rounds < 1:
            raise ValueError(f'need 1 <= min_rounds <= patience_rounds and num_rounds >= 1, '
                             f'got {self.min_rounds}, {self.patience_rounds}, '
                             f'{self.num_rounds}')

    @property
    def loss_limit(self) -> float:
        """The test loss above which the model has diverged: loss_factor · ln(C)."""
        return self.loss_factor * math.log(self.num_classes)

    @property
    def chance_rounds(self) -> int | None:
        """After how many rounds a run still at chance level is reported (None: too short)."""
        rounds = min(self.patience_rounds, self.num_rounds)
        return rounds if rounds >= self.min_rounds else None

    @property
    def chance_accuracy(self) -> float:
        """The accuracy at or below which a model is at chance level: chance_factor / C."""
        return self.chance_factor / self.num_classes

    def observe(self, round_index: int, accuracy: float, loss: float) -> list[str]:
        """Record one round's global-model test figures; returns the warnings it raises."""
        self._rounds += 1
        self._best_accuracy = max(self._best_accuracy, float(accuracy))
        new = []
        if LOSS_EXPLODED not in self._raised and loss > self.loss_limit:
            self._raised.add(LOSS_EXPLODED)
            new.append(f'round {round_index}: test loss {loss:.4g} is above {self.loss_factor:g}'
                       f' x ln({self.num_classes}) = {self.loss_limit:.3g} (the loss of a '
                       f'uniform guess): the global model has diverged (learning.lr or '
                       f'aggregation.server_lr too large?); accuracy {accuracy:.3f}')
        due = self.chance_rounds
        if (AT_CHANCE not in self._raised and due is not None and self._rounds >= due
                and self._best_accuracy <= self.chance_accuracy):
            self._raised.add(AT_CHANCE)
            new.append(f'round {round_index}: test accuracy has stayed at chance level for '
                       f'{self._rounds} rounds (best {self._best_accuracy:.3f} <= '
                       f'{self.chance_factor:g} / {self.num_classes} classes): the run is not '
                       f'learning (diverged, or a learning rate too small?)')
        self.warnings += new
        return new
