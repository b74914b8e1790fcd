"""ros2 launch fl_uav fleet_sim.launch.py [num_drones:=4] [config:=...] [output_dir:=...]
    [mode:=standard|express] [num_clients:=N]

The embedded fleet: autopilot_sim, sim_camera, ground_station and one drone per UAV; in
express mode (FedEx) one ground_client per ground client instead of the camera. The node set
comes from fl_uav.fleet_run.launch_plan.fleet_plan, the same function `fl-uav sim` uses, and frames
are signed as there: fresh keys in output_dir/keys (a new temporary directory without
output_dir) and signatures required, unless the config names security.keys_dir. The same
start-time checks refuse a simulated home outside the geofence and a port another process
holds (fl_uav.fleet_run.launch_plan.check_fleet_start), before any node starts.
"""

import tempfile
from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet_run.launch_plan import (
    PACKAGE,
    fleet_plan,
    launch_parameters,
    mode_overrides,
    write_params_file,
)


def _nodes(context):
    share = Path(get_package_share_directory(PACKAGE))
    config_file = context.launch_configurations.get('config') or str(share / 'config' /
                                                                      'fleet.yaml')
    num_drones = int(context.launch_configurations['num_drones'])
    output_dir = context.launch_configurations.get('output_dir', '')
    with_simulators = context.launch_configurations.get('with_simulators', 'true') == 'true'
    mode = context.launch_configurations.get('mode') or None
    clients = context.launch_configurations.get('num_clients') or None
    overrides = {'num_drones': num_drones,
                 **mode_overrides(mode, num_drones, int(clients) if clients else None)}
    run_dir = Path(output_dir or tempfile.mkdtemp(prefix='fl_uav_fleet_'))
    # The start-time checks of `fl-uav sim` (homes in the geofence, free ports) run here too.
    flat = launch_parameters(config_file, overrides, run_dir, with_simulators)
    config = build_config(FleetConfig, flat)
    params_file = write_params_file(flat, run_dir / 'fl_uav_params.yaml')
    # sigterm_timeout: a drone node stopped in flight waits for its return to launch, and
    # autopilot_sim (a Ctrl-C reaches it at the same moment) goes on flying the vehicles
    # meanwhile, longer still (fl_uav.autopilot_sim.stop_hold)
    return [Node(package=PACKAGE, executable=spec.executable, name=spec.name,
                 namespace=spec.namespace or None, output='screen',
                 sigterm_timeout=str(spec.stop_grace_s),
                 parameters=[str(params_file), dict(spec.parameters)])
            for spec in fleet_plan(config, output_dir or None, exit_on_finish=False,
                                   with_simulators=with_simulators)]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('num_drones', default_value='4'),
        DeclareLaunchArgument('config', default_value=''),
        DeclareLaunchArgument('output_dir', default_value=''),
        DeclareLaunchArgument('mode', default_value='',
                              description="standard | express (FedEx); empty: the config's"),
        DeclareLaunchArgument('num_clients', default_value='',
                              description="express: ground clients (empty: the config's)"),
        DeclareLaunchArgument('with_simulators', default_value='true',
                              description='false: real PX4 SITL/Gazebo instead of the embedded '
                              'autopilot and camera simulators'),
        OpaqueFunction(function=_nodes),
    ])
