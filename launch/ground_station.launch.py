"""ros2 launch fl_uav ground_station.launch.py [config:=ground_station.yaml] [output_dir:=DIR]"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from fl_uav.fleet_run.launch_plan import launch_config_file


def _nodes(context):
    share = Path(get_package_share_directory('fl_uav'))
    config = str(launch_config_file('config', context.launch_configurations.get('config', ''),
                                    share / 'config' / 'ground_station.yaml'))
    output_dir = context.launch_configurations.get('output_dir', '')
    return [Node(package='fl_uav', executable='ground_station_node', name='ground_station',
                 output='screen', ros_arguments=['--log-file-name', 'ground_station'],
                 parameters=[config, {'output_dir': output_dir}])]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('config', default_value=''),
        DeclareLaunchArgument('output_dir', default_value=''),
        OpaqueFunction(function=_nodes),
    ])
