"""ros2 launch fl_uav px4_sitl_fleet.launch.py [num_drones:=4] [config:=...] [output_dir:=...]
    [exit_on_finish:=false] [respawn:=true] [respawn_delay:=2] [respawn_max_retries:=5]

Against PX4 SITL instances (UDP 14540+i) and Gazebo cameras bridged to /uav<i>/camera/image_raw:
fleet_sim.launch.py without the embedded simulators (see sim/README.md).
"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from fl_uav.ros.respawn import respawn_arguments


def generate_launch_description():
    fleet = Path(get_package_share_directory('fl_uav')) / 'launch' / 'fleet_sim.launch.py'
    respawn = respawn_arguments()
    args = ('num_drones', 'config', 'output_dir', 'exit_on_finish',
            *(a.name for a in respawn))
    return LaunchDescription([
        DeclareLaunchArgument('num_drones', default_value='4'),
        DeclareLaunchArgument('config', default_value=''),
        DeclareLaunchArgument('output_dir', default_value=''),
        DeclareLaunchArgument('exit_on_finish', default_value='false'),
        *respawn,
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(str(fleet)),
            launch_arguments={**{a: LaunchConfiguration(a) for a in args},
                              'with_simulators': 'false'}.items()),
    ])
