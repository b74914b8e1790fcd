"""ros2 launch fl_uav px4_sitl_fleet.launch.py [num_drones:=4] [config:=...] [output_dir:=...]
    [px4_dir:=/path/to/PX4-Autopilot] [bridges:=true] [gz_camera_topic:=...]
    [exit_on_finish:=false] [respawn:=true] [respawn_delay:=2] [respawn_max_retries:=5]

Against PX4 SITL instances (UDP 14540+i) and their Gazebo cameras: fleet_sim.launch.py without
the embedded simulators (see sim/README.md), plus
- one ros_gz_bridge per drone, its x500_mono_cam_down camera to /uav<i>/camera/image_raw
  (bridges:=false for your own bridges); gz_camera_topic: the Gazebo topic template ({world},
  {model} = x500_mono_cam_down_<i>, {i}) if your PX4 models name the camera otherwise;
- with px4_dir:=..., a built PX4-Autopilot: the Gazebo server on sim/worlds/fl_uav_landcover.sdf
  and PX4 SITL instance i (px4 -i i) of the x500_mono_cam_down at drone i's home of the config
  (autopilot.home_*). Without px4_dir, start them yourself (sim/README.md).
The specs and their sources: fl_uav/fleet_run/px4_sitl.py.
"""

from pathlib import Path

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch import LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    ExecuteProcess,
    IncludeLaunchDescription,
    OpaqueFunction,
)
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet_run.launch_plan import (
    PACKAGE,
    launch_bool,
    launch_config_file,
    launch_int,
    merged_parameters,
)
from fl_uav.fleet_run.px4_sitl import CAMERA_TOPIC, camera_bridges, gz_server, px4_instances
from fl_uav.ros.respawn import respawn_arguments
from fl_uav.world.gz_world import WORLD_NAME


def _sitl(context):
    """The bridges and, with px4_dir, Gazebo and the PX4 instances."""
    share = Path(get_package_share_directory(PACKAGE))
    args = context.launch_configurations
    num_drones = launch_int('num_drones', args['num_drones'], minimum=1)
    actions = []
    if launch_bool('bridges', args.get('bridges', 'true')):
        template = args.get('gz_camera_topic') or CAMERA_TOPIC
        bridges = camera_bridges(num_drones, WORLD_NAME, template)
        try:
            get_package_share_directory(bridges[0].package)
        except PackageNotFoundError:
            raise ConfigError(f'launch argument bridges:=true needs the {bridges[0].package} '
                              f'package (apt install ros-$ROS_DISTRO-ros-gz-bridge); '
                              f'bridges:=false if the cameras are bridged already') from None
        actions += [Node(package=b.package, executable=b.executable, name=b.name,
                         output='screen', arguments=list(b.arguments),
                         remappings=list(b.remappings), parameters=[dict(b.parameters)])
                    for b in bridges]
    px4_dir = args.get('px4_dir', '')
    if px4_dir:
        config_file = launch_config_file('config', args.get('config', ''),
                                         share / 'config' / 'fleet.yaml')
        config = build_config(FleetConfig, merged_parameters([config_file],
                                                             {'num_drones': num_drones}))
        world_sdf = share / 'sim' / 'worlds' / f'{WORLD_NAME}.sdf'
        homes = [config.autopilot.home_enu_m(i) for i in range(num_drones)]
        for spec in [gz_server(px4_dir, world_sdf), *px4_instances(px4_dir, homes)]:
            actions.append(ExecuteProcess(cmd=list(spec.cmd), cwd=spec.cwd, name=spec.name,
                                          additional_env=dict(spec.env), output='screen'))
    return actions


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
        DeclareLaunchArgument('px4_dir', default_value='',
                              description='a built PX4-Autopilot: start Gazebo and the PX4 '
                              'SITL instances too (empty: they run already)'),
        DeclareLaunchArgument('bridges', default_value='true',
                              description='false: no camera bridges (you run your own)'),
        DeclareLaunchArgument('gz_camera_topic', default_value=CAMERA_TOPIC,
                              description='Gazebo camera topic of drone i ({world}, {model}, '
                              '{i}); `gz topic -l` lists them'),
        *respawn,
        OpaqueFunction(function=_sitl),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(str(fleet)),
            launch_arguments={**{a: LaunchConfiguration(a) for a in args},
                              'with_simulators': 'false'}.items()),
    ])
