"""One entry point for every node's ``main``: init, spin, and always clean up.

A node that ends by itself (the station and the drones with ``exit_on_finish``) exposes a
``done`` event; the loop then spins in short slices until it is set. A node with a
``shutdown()`` method (stop threads, write logs) gets it called before it is destroyed, on a
normal end, on Ctrl-C and on an external shutdown alike. A node whose config or parameters
are wrong (ConfigError at construction) ends with the error logged, without a traceback, and
exit status CONFIG_ERROR_EXIT_STATUS.
"""

from __future__ import annotations

from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from fl_uav.configschema import ConfigError

SPIN_SLICE_S = 0.1   # how often a node with a ``done`` event checks it
CONFIG_ERROR_EXIT_STATUS = 2


def run_node(factory: Callable[[], Node], args: list[str] | None = None) -> None:
    """Create the node with ``factory`` and run it until shutdown (or until ``node.done``)."""
    rclpy.init(args=args)
    try:
        node = factory()
    except ConfigError as exc:
        rclpy.logging.get_logger('fl_uav').fatal(f'bad configuration: {exc}')
        rclpy.try_shutdown()
        raise SystemExit(CONFIG_ERROR_EXIT_STATUS) from None
    done = getattr(node, 'done', None)
    try:
        if done is None:
            rclpy.spin(node)
        else:
            while rclpy.ok() and not done.is_set():
                rclpy.spin_once(node, timeout_sec=SPIN_SLICE_S)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        shutdown = getattr(node, 'shutdown', None)
        if callable(shutdown):
            shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
