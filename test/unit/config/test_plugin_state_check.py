"""Resume's check that a plug-in without state_dict kept no state: no false alarms."""

from __future__ import annotations

import numpy as np

from fl_uav.plugins import attribute_snapshot, changed_attributes


class _Helper:
    def __init__(self) -> None:
        self.scale = 2.0


class _Holder:
    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self.helper = _Helper()
        self.weights = np.zeros(3)


def test_untouched_objects_without_their_own_equality_are_not_changed():
    # Arrange: a random generator and a helper object, neither with its own ==
    holder = _Holder()
    snapshot = attribute_snapshot(holder)
    # Act / Assert: untouched: nothing changed
    assert changed_attributes(snapshot, holder) == []


def test_a_used_generator_and_a_changed_helper_are_changed():
    # Arrange
    holder = _Holder()
    snapshot = attribute_snapshot(holder)
    # Act: draw from the generator, change the helper
    holder.rng.random()
    holder.helper.scale = 3.0
    # Assert
    assert changed_attributes(snapshot, holder) == ['helper', 'rng']
