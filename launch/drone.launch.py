"""ros2 launch fl_uav drone.launch.py drone_id:=0 [config:=drone.yaml] [output_dir:=/tmp/fl]
    [camera_topic:=/camera/image_raw] [camera_transport:=compressed]
    [respawn:=true] [respawn_delay:=2] [respawn_max_retries:=5]

One drone on a companion computer: the drone node in namespace /uav<drone_id>, talking to its
PX4 autopilot over MAVLink (flight.url_template in the config) and reading its camera topic
/uav<drone_id>/camera/image_raw (camera_topic remaps it to your camera driver's topic;
camera_transport:=compressed reads jpeg/png on <topic>/compressed instead). With output_dir the
drone writes its trajectory record (trajectory_uav<id>.json: plan, missions, fallbacks) there.
A drone node that dies (a crash, a SIGKILL) is started again after respawn_delay seconds and
rejoins the station's run (fl_uav.ros.respawn); a clean exit is not restarted.
"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from fl_uav.fleet_run.launch_plan import drone_file_stop_grace_s, launch_config_file, launch_int
from fl_uav.ros.respawn import respawn_arguments, respawn_policy, respawning


def _nodes(context):
    share = Path(get_package_share_directory('fl_uav'))
    config = str(launch_config_file('config', context.launch_configurations.get('config', ''),
                                    share / 'config' / 'drone.yaml'))
    drone_id = launch_int('drone_id', context.launch_configurations['drone_id'])
    camera_topic = context.launch_configurations.get('camera_topic', '')
    output_dir = context.launch_configurations.get('output_dir', '')
    respawn = respawn_policy(context.launch_configurations)
    remaps = ([('camera/image_raw', camera_topic),   # either transport's topic
               ('camera/image_raw/compressed', f'{camera_topic}/compressed')]
              if camera_topic else [])
    transport = context.launch_configurations.get('camera_transport', '')
    # Stopped in flight (Ctrl-C), the node commands return to launch and waits for the landing
    # (flight.shutdown_rtl_timeout_s): ros2 launch's default 5 s before SIGTERM would cut that.
    stop_grace_s = drone_file_stop_grace_s(config)

    def _node():
        return Node(package='fl_uav', executable='drone_node', name='drone',
                    namespace=f'/uav{drone_id}', output='screen', remappings=remaps,
                    sigterm_timeout=str(stop_grace_s),
                    ros_arguments=['--log-file-name', f'uav{drone_id}_drone'],
                    parameters=[config, {'drone_id': drone_id, 'output_dir': output_dir,
                                         **({'camera_transport': transport} if transport
                                            else {})}])

    return respawning(_node, respawn, f'uav{drone_id}_drone')


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('drone_id', default_value='0'),
        DeclareLaunchArgument('config', default_value=''),
        DeclareLaunchArgument('camera_topic', default_value=''),
        DeclareLaunchArgument('camera_transport', default_value=''),
        DeclareLaunchArgument('output_dir', default_value=''),
        *respawn_arguments(),
        OpaqueFunction(function=_nodes),
    ])
