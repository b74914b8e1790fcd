"""run_node: every node's main. Ends when the node's ``done`` event is set, and always calls
the node's ``shutdown()`` and destroys it."""

from __future__ import annotations

import threading

import pytest
import rclpy
from rclpy.node import Node

from fl_uav.configschema import ConfigError
from fl_uav.ros.spin import CONFIG_ERROR_EXIT_STATUS, run_node

pytestmark = pytest.mark.timeout(30)


class _FinishingNode(Node):
    """Sets ``done`` from a timer after a few ticks; records its lifecycle."""

    events: list[str] = []

    def __init__(self) -> None:
        super().__init__('spin_test_node')
        self.done = threading.Event()
        self.ticks = 0
        self.create_timer(0.01, self._tick)

    def _tick(self) -> None:
        self.ticks += 1
        if self.ticks == 3:
            self.events.append('finished')
            self.done.set()

    def shutdown(self) -> None:
        self.events.append('shutdown')

    def destroy_node(self) -> None:
        self.events.append('destroyed')
        super().destroy_node()


class _FailingNode(_FinishingNode):
    def _tick(self) -> None:
        raise KeyboardInterrupt


def test_run_node_returns_when_done_and_cleans_up_in_order():
    # Arrange
    _FinishingNode.events = []
    # Act
    run_node(_FinishingNode, args=[])
    # Assert
    assert _FinishingNode.events == ['finished', 'shutdown', 'destroyed']
    assert not rclpy.ok()


def test_run_node_cleans_up_on_ctrl_c():
    # Arrange
    _FailingNode.events = []
    # Act
    run_node(_FailingNode, args=[])
    # Assert
    assert _FailingNode.events == ['shutdown', 'destroyed']
    assert not rclpy.ok()


def _misconfigured_node() -> Node:
    raise ConfigError("config key 'drone_id': expected an integer, got 'abc'")


def test_run_node_ends_a_misconfigured_node_with_its_error_and_no_traceback():
    # Act
    with pytest.raises(SystemExit) as ended:
        run_node(_misconfigured_node, args=[])
    # Assert
    assert ended.value.code == CONFIG_ERROR_EXIT_STATUS and ended.value.__cause__ is None
    assert not rclpy.ok()
