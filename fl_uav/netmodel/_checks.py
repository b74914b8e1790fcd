"""Argument checks shared by the netmodel functions.

Every check raises ValueError naming the argument and its allowed range, so a bad parameter
is caught where it enters the model rather than as a NaN three calls later.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatOrArray = float | NDArray[np.float64]
_SCALARS = (float, int, np.float64, np.float32)   # exact types: bool is not numeric here


def as_float_array(value: ArrayLike, name: str) -> NDArray[np.float64]:
    """``value`` as a float array; NaN or a non-numeric value raises ValueError."""
    if type(value) in _SCALARS:          # fast path: the engine calls these per drone
        if value != value:
            raise ValueError(f'{name} must not be NaN, got {value!r}')
        return np.float64(value)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f'{name} must be numeric, got {value!r}') from exc
    if np.any(np.isnan(arr)):
        raise ValueError(f'{name} must not be NaN, got {value!r}')
    return arr


def _describe(arr: NDArray[np.float64]) -> str:
    if arr.ndim == 0:
        return repr(float(arr))
    bad = arr.ravel()
    return f'array with min {bad.min()!r} and max {bad.max()!r}'


def check_positive(value: ArrayLike, name: str) -> NDArray[np.float64]:
    """Finite and > 0 (elementwise)."""
    arr = as_float_array(value, name)
    if arr.ndim == 0:
        if not (math.isfinite(arr) and arr > 0):
            raise ValueError(f'{name} must be finite and > 0, got {_describe(arr)}')
        return arr
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f'{name} must be finite and > 0, got {_describe(arr)}')
    return arr


def check_non_negative(value: ArrayLike, name: str) -> NDArray[np.float64]:
    """Finite and >= 0 (elementwise)."""
    arr = as_float_array(value, name)
    if arr.ndim == 0:
        if not (math.isfinite(arr) and arr >= 0):
            raise ValueError(f'{name} must be finite and >= 0, got {_describe(arr)}')
        return arr
    if not (np.all(np.isfinite(arr)) and np.all(arr >= 0)):
        raise ValueError(f'{name} must be finite and >= 0, got {_describe(arr)}')
    return arr


def check_unit_interval(value: ArrayLike, name: str, *, closed_low: bool = True,
                        closed_high: bool = False) -> NDArray[np.float64]:
    """In [0, 1) by default; ``closed_low`` / ``closed_high`` choose the bracket ends."""
    arr = as_float_array(value, name)
    low_ok = arr >= 0 if closed_low else arr > 0
    high_ok = arr <= 1 if closed_high else arr < 1
    if not (np.all(low_ok) and np.all(high_ok)):
        interval = ('[' if closed_low else '(') + '0, 1' + (']' if closed_high else ')')
        raise ValueError(f'{name} must be in {interval}, got {_describe(arr)}')
    return arr


def check_field_positive(obj: Any, name: str) -> None:
    """A dataclass field that must be a finite float > 0."""
    value = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) \
            or value <= 0:
        raise ValueError(f'{name} must be a finite number > 0, got {value!r}')


def check_field_non_negative(obj: Any, name: str) -> None:
    """A dataclass field that must be a finite float >= 0."""
    value = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) \
            or value < 0:
        raise ValueError(f'{name} must be a finite number >= 0, got {value!r}')


def out(arr: NDArray[np.float64]) -> FloatOrArray:
    """A 0-d result as a Python float, anything else as an array."""
    arr = np.asarray(arr, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr
