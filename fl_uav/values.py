"""What a number in a message or a plug-in's output must be: no ROS, no torch."""

from __future__ import annotations

import math
from typing import Any


def is_int(value: Any) -> bool:
    """An integer, not a bool (booleans are ints in Python; in a message they are not counts)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A finite int or float: what a JSON number in a message must be (JSON may carry an int
    too large for a float, and booleans are ints in Python: neither is a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
