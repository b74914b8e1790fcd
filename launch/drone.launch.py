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

camera:=opencv camera_source:=/dev/video0 also starts the camera node (fl_uav.ros.camera_node)
in /uav<drone_id>: it reads a V4L2 device, a stream URL, a GStreamer pipeline or a video file
and publishes /uav<drone_id>/camera/image_raw and camera_info, where the drone node reads;
camera_rate_hz, camera_width, camera_height, camera_loop and camera_info_url set its rate_hz,
width, height, loop and camera_info_url, and camera_config:=FILE gives it a parameter file of
its own keys besides (docs/config_reference.md, camera-node). camera:=none (the default)
starts no camera: another driver publishes the frames.
"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from fl_uav.configschema import ConfigError
from fl_uav.fleet_run.launch_plan import (
    drone_file_stop_grace_s,
    launch_bool,
    launch_config_file,
    launch_float,
    launch_int,
)
from fl_uav.ros.respawn import respawn_arguments, respawn_policy, respawning

CAMERAS = ('none', 'opencv')
# the camera node's parameters the launch arguments set: {argument: (parameter, parse)}
CAMERA_ARGUMENTS = {
    'camera_rate_hz': ('rate_hz', launch_float),
    'camera_width': ('width', launch_int),
    'camera_height': ('height', launch_int),
    'camera_loop': ('loop', launch_bool),
    'camera_info_url': ('camera_info_url', lambda name, text: text),
}


def _camera(context, config: str, drone_id: int, respawn) -> list:
    """camera:=opencv: the camera node in the drone's namespace, reading camera_source
    (ConfigError naming a bad or missing argument, before anything starts)."""
    args = context.launch_configurations
    camera, source = args.get('camera', 'none') or 'none', args.get('camera_source', '')
    if camera not in CAMERAS:
        raise ConfigError(f'launch argument camera:={camera!r}: expected one of '
                          f'{", ".join(CAMERAS)}')
    if camera == 'none':
        if source:
            raise ConfigError(f'launch argument camera_source:={source!r} needs camera:=opencv')
        return []
    if not source:
        raise ConfigError('launch argument camera:=opencv needs camera_source:=... (a V4L2 '
                          'device /dev/video0, a stream URL, a GStreamer pipeline or a video '
                          'file)')
    for other, harmless in (('camera_topic', ''), ('camera_transport', 'raw')):
        if args.get(other, '') not in ('', harmless):
            raise ConfigError(f'launch argument {other}:={args[other]!r} with camera:=opencv: '
                              f'the camera node publishes raw frames on /uav{drone_id}/camera/'
                              f'image_raw, where the drone reads by default; leave {other} out')
    params = {'source': source}
    for argument, (key, parse) in CAMERA_ARGUMENTS.items():
        if args.get(argument, ''):
            params[key] = parse(argument, args[argument])
    own_file = args.get('camera_config', '')
    files = [config, *([str(launch_config_file('camera_config', own_file, Path()))]
                       if own_file else [])]

    def _node():
        return Node(package='fl_uav', executable='camera_node', name='camera',
                    namespace=f'/uav{drone_id}', output='screen',
                    ros_arguments=['--log-file-name', f'uav{drone_id}_camera'],
                    parameters=[*files, params])

    return respawning(_node, respawn, f'uav{drone_id}_camera')


def _nodes(context):
    share = Path(get_package_share_directory('fl_uav'))
    config = str(launch_config_file('config', context.launch_configurations.get('config', ''),
                                    share / 'config' / 'drone.yaml'))
    drone_id = launch_int('drone_id', context.launch_configurations['drone_id'])
    camera_topic = context.launch_configurations.get('camera_topic', '')
    output_dir = context.launch_configurations.get('output_dir', '')
    respawn = respawn_policy(context.launch_configurations)
    camera = _camera(context, config, drone_id, respawn)
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

    return [*respawning(_node, respawn, f'uav{drone_id}_drone'), *camera]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('drone_id', default_value='0'),
        DeclareLaunchArgument('config', default_value=''),
        DeclareLaunchArgument('camera_topic', default_value=''),
        DeclareLaunchArgument('camera_transport', default_value=''),
        DeclareLaunchArgument('output_dir', default_value=''),
        DeclareLaunchArgument('camera', default_value='none',
                              description='opencv: start the camera node (camera_source:=...); '
                              'none: another driver publishes the frames'),
        DeclareLaunchArgument('camera_source', default_value='',
                              description='with camera:=opencv: /dev/video0, a stream URL, a '
                              'GStreamer pipeline or a video file'),
        *(DeclareLaunchArgument(argument, default_value='',
                                description=f"the camera node's {key} ('': its default)")
          for argument, (key, _) in CAMERA_ARGUMENTS.items()),
        DeclareLaunchArgument('camera_config', default_value='',
                              description="a parameter file of the camera node's own keys "
                              '(reconnect_period_s, timeout_s, frame_id, encoding, ...)'),
        *respawn_arguments(),
        OpaqueFunction(function=_nodes),
    ])
