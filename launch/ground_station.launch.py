"""ros2 launch fl_uav ground_station.launch.py [config:=ground_station.yaml] [output_dir:=DIR]
    [resume:=DIR]

resume:=DIR: go on with the run whose station checkpoint DIR holds (normally the crashed
station's output_dir): same run id, from the round after the last one closed; a checkpoint of
another model, fleet size, strategy or key is refused in one line."""

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
    resume = context.launch_configurations.get('resume', '')
    return [Node(package='fl_uav', executable='ground_station_node', name='ground_station',
                 output='screen', ros_arguments=['--log-file-name', 'ground_station'],
                 parameters=[config, {'output_dir': output_dir, 'resume': resume}])]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('config', default_value=''),
        DeclareLaunchArgument('output_dir', default_value=''),
        DeclareLaunchArgument('resume', default_value='',
                              description='a directory holding a station checkpoint (the '
                              "crashed station's output_dir): go on with its run"),
        OpaqueFunction(function=_nodes),
    ])
