"""Helpers for node tests: spin until a condition holds, with a timeout (never fixed sleeps),
and one drone node under test beside the embedded autopilot simulator."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rclpy
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, LivelinessPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import UInt8MultiArray

from fl_uav.autopilot_sim.autopilot import AutopilotSim
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.fleet_run.launch_plan import write_params_file
from fl_uav.ros.drone_node import DroneNode
from test.conftest import BIND_PORT_OFFSET, tiny_fleet_overrides

# /rosout as rcl publishes it (reliable, transient local): a late subscriber gets the backlog.
ROSOUT_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)

# What a viewer subscribes with unless told otherwise: rviz2's display default (reliable,
# volatile, keep last 5), as rqt_plot does; liveliness spelled out so that the QoS check is
# definite.
VIEWER_QOS = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.VOLATILE,
                        liveliness=LivelinessPolicy.AUTOMATIC)


def spin_until(executor: Executor, condition: Callable[[], bool], timeout_s: float) -> bool:
    """Spin the executor until condition() is true or the timeout passes; returns condition()."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=0.05)
    return condition()


def frame_msg(data: bytes) -> UInt8MultiArray:
    """A codec frame (or any bytes) as the message the fleet's frame topics carry."""
    msg = UInt8MultiArray()
    msg.data = data
    return msg


@contextmanager
def node_with_probe(factory: Callable[[], Node], ros_args: list[str]
                    ) -> Iterator[tuple[Node, Node, SingleThreadedExecutor]]:
    """rclpy initialised with ``ros_args``, the node from ``factory`` and a ``probe`` node on
    one executor; on exit the node's ``shutdown()`` (if it has one) runs, both are destroyed
    and rclpy is shut down."""
    rclpy.init(args=ros_args)
    node = factory()
    probe = rclpy.create_node('probe')
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    executor.add_node(probe)
    try:
        yield node, probe, executor
    finally:
        executor.shutdown()
        probe.destroy_node()
        shutdown = getattr(node, 'shutdown', None)
        if callable(shutdown):
            shutdown()
        node.destroy_node()
        rclpy.try_shutdown()


@contextmanager
def drone_under_test(tmp_path: Path, port_base: int, home_enu_m: tuple[float, float],
                     overrides: Mapping[str, Any], node_params: Mapping[str, Any],
                     sim_settings: Mapping[str, Any] | None = None,
                     before_node: Callable[[AutopilotSim], None] | None = None
                     ) -> Iterator[tuple[AutopilotSim, DroneNode, Node, SingleThreadedExecutor]]:
    """Drone 0 (namespace /uav0, exit_on_finish) on a one-vehicle autopilot simulator at
    ``home_enu_m`` (time factor 10; ``sim_settings`` more AutopilotSimConfig fields), plus a
    ``probe`` node on the same executor; the fleet config is the tiny fleet with
    ``overrides``. ``before_node(sim)`` runs once the simulator is up, before the node starts
    (e.g. to provision its signing key). Everything is stopped on exit."""
    sim = AutopilotSim(AutopilotSimConfig(
        num_vehicles=1, remote_base_port=port_base, bind_base_port=port_base + BIND_PORT_OFFSET,
        time_factor=10.0, home_east_m=home_enu_m[0], home_north_m=home_enu_m[1],
        heartbeat_rate_hz=2.0, cruise_speed_m_s=12.0, rtl_return_alt_m=20.0,
        **(sim_settings or {})))
    handle = sim.run_in_thread()
    params = write_params_file({**tiny_fleet_overrides(1, port_base), **overrides},
                               tmp_path / 'params.yaml')
    extra = [arg for key, value in {'drone_id': 0, **node_params, 'exit_on_finish': 'true'}
             .items() for arg in ('-p', f'{key}:={value}')]
    args = ['--ros-args', '-r', '__ns:=/uav0', '--params-file', str(params), *extra]
    try:
        if before_node is not None:
            before_node(sim)
        with node_with_probe(DroneNode, args) as (node, probe, executor):
            yield sim, node, probe, executor
    finally:
        handle.stop()
