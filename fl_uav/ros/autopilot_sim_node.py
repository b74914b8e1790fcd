"""autopilot_sim node: the embedded PX4-compatible MAVLink simulator, N vehicles in one process.

Vehicles speak MAVLink 2 over UDP like PX4 SITL instances; the node also publishes each
vehicle's ground-truth pose (as Gazebo's pose bridge would) for the camera simulator, and writes
the simulator's event log to log_dir on shutdown. Like a real PX4, which does not stop with its
companion's ROS processes, a SIGINT or SIGTERM while a vehicle flies with its drone node
connected (a Ctrl-C under ros2 launch reaches every node at once) stops the simulator only once
those vehicles are down and their clients gone, at most autopilot_stop_hold_s(
flight.shutdown_rtl_timeout_s) later (fl_uav.autopilot_sim.stop_hold); a SIGTERM stops it at
once (a further SIGINT is the same Ctrl-C, forwarded by ros2 launch).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from geometry_msgs.msg import PoseStamped
from rclpy.node import Node

from fl_uav.autopilot_sim.autopilot import AutopilotSim
from fl_uav.autopilot_sim.stop_hold import StopHold
from fl_uav.fleet.config import AutopilotSimNodeParams, FleetConfig
from fl_uav.fleet.messages import PoseSample
from fl_uav.fleet.recording import StopSignals
from fl_uav.fleet_run.launch_plan import (
    autopilot_stop_grace_s,
    autopilot_stop_hold_s,
    sim_autopilot_config,
)
from fl_uav.ros import names
from fl_uav.ros.conversions import pose_to_msg
from fl_uav.ros.params import declare_config
from fl_uav.ros.spin import run_node

NODE_PARAMS = AutopilotSimNodeParams
LOG_FILE = 'autopilot_log.json'


class AutopilotSimNode(Node):
    """Runs the simulator on its own thread; a timer publishes ground truth."""

    def __init__(self) -> None:
        super().__init__('autopilot_sim', automatically_declare_parameters_from_overrides=True)
        self.config, self.own = declare_config(self, FleetConfig, NODE_PARAMS)
        cfg: FleetConfig = self.config
        sim_config = sim_autopilot_config(cfg)
        self.sim = AutopilotSim(sim_config)
        # its stop may hold while the drones land (StopHold); longer is a hang (spin.watch_stop)
        self.stop_budget_s = autopilot_stop_grace_s(cfg.flight.shutdown_rtl_timeout_s)
        self._handle = self.sim.run_in_thread()
        self._pubs = [self.create_publisher(PoseStamped,
                                            names.drone_topic(d, names.GROUND_TRUTH_POSE_TOPIC),
                                            names.TELEMETRY_PUB_QOS)
                      for d in range(cfg.num_drones)]
        self.create_timer(1.0 / self.own.ground_truth_rate_hz, self._publish_truth)
        last_port = cfg.flight.port_base + cfg.num_drones - 1
        signed = sum(v['active'] for v in self.sim.signing_status())
        self.get_logger().info(f'autopilot sim: {cfg.num_drones} vehicles, MAVLink to ports '
                               f'{cfg.flight.port_base}..{last_port}, '
                               f'time factor {sim_config.time_factor}, MAVLink signing on '
                               f'{signed} of them (keys in autopilot.state_dir)')

    def _publish_truth(self) -> None:
        now = self.get_clock().now().nanoseconds * 1e-9
        for snap in self.sim.snapshots():
            east_m, north_m, up_m = snap.position_enu_m
            self._pubs[snap.vehicle].publish(pose_to_msg(
                PoseSample(east_m, north_m, up_m, snap.yaw_rad, now), names.MAP_FRAME))

    def shutdown(self) -> None:
        """Go on simulating while a vehicle flies with its client connected (StopHold; a
        SIGTERM ends that), then stop the simulator and write its event log."""
        hold = StopHold(autopilot_stop_hold_s(self.config.flight.shutdown_rtl_timeout_s),
                        started_s=time.monotonic())
        with StopSignals() as signals:      # a SIGTERM ends the hold, not the node
            hold.wait(self.sim.link_states,
                      interrupted=lambda: signal.Signals.SIGTERM.name in signals.received)
            self._handle.stop()
            for vehicle in self.sim.signing_status():
                if vehicle['rejected']:
                    self.get_logger().warning(
                        f"vehicle {vehicle['vehicle']}: MAVLink signing dropped "
                        f"{sum(vehicle['rejected'].values())} messages: "
                        f"{vehicle['rejected_messages']} ({vehicle['rejected']})")
            if self.own.log_dir:
                Path(self.own.log_dir).mkdir(parents=True, exist_ok=True)
                self.sim.write_log(Path(self.own.log_dir) / LOG_FILE)


def main(args: list[str] | None = None) -> None:
    """Spin until shutdown, then stop the simulator."""
    run_node(AutopilotSimNode, args)


if __name__ == '__main__':
    main()
