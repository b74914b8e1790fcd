"""Helpers for node tests: spin until a condition holds, with a timeout (never fixed sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rclpy.executors import Executor


def spin_until(executor: Executor, condition: Callable[[], bool], timeout_s: float) -> bool:
    """Spin the executor until condition() is true or the timeout passes; returns condition()."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=0.05)
    return condition()
