"""ros2 launch fl_uav fleet_sim.launch.py [num_drones:=4] [config:=...] [output_dir:=...]

The embedded fleet: autopilot_sim, sim_camera, ground_station and one drone per UAV. The node
set comes from fl_uav.sim.launch_plan.fleet_plan, the same function `fl-uav sim` uses.
"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.sim.launch_plan import PACKAGE, fleet_plan, merged_parameters, write_params_file


def _nodes(context):
    share = Path(get_package_share_directory(PACKAGE))
    config_file = context.launch_configurations.get('config') or str(share / 'config' /
                                                                      'fleet.yaml')
    num_drones = int(context.launch_configurations['num_drones'])
    output_dir = context.launch_configurations.get('output_dir', '')
    with_simulators = context.launch_configurations.get('with_simulators', 'true') == 'true'
    flat = merged_parameters([config_file], {'num_drones': num_drones})
    config = build_config(FleetConfig, flat)
    params_file = write_params_file(flat, Path(output_dir or '/tmp') / 'fl_uav_params.yaml')
    return [Node(package=PACKAGE, executable=spec.executable, name=spec.name,
                 namespace=spec.namespace or None, output='screen',
                 parameters=[str(params_file), dict(spec.parameters)])
            for spec in fleet_plan(config, output_dir or None, exit_on_finish=False,
                                   with_simulators=with_simulators)]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('num_drones', default_value='4'),
        DeclareLaunchArgument('config', default_value=''),
        DeclareLaunchArgument('output_dir', default_value=''),
        DeclareLaunchArgument('with_simulators', default_value='true',
                              description='false: real PX4 SITL/Gazebo instead of the embedded '
                              'autopilot and camera simulators'),
        OpaqueFunction(function=_nodes),
    ])
