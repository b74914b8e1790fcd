"""px4_sitl_fleet.launch.py: the camera bridges and PX4 SITL instances it starts, as PX4's and
ros_gz's own sources give them (the expected strings below are quoted from those sources; the
launch is built with the real launch and launch_ros packages of the venv)."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import pytest

from fl_uav.configschema import ConfigError
from fl_uav.fleet_run.px4_sitl import camera_bridges, gz_server, px4_instances

REPO = Path(__file__).resolve().parents[3]
PX4 = '/opt/PX4-Autopilot'

# PX4-Autopilot ROMFS/px4fmu_common/init.d-posix/px4-rc.gzsim:
#   MODEL_NAME="${PX4_SIM_MODEL#*gz_}", MODEL_NAME_INSTANCE="${MODEL_NAME}_${px4_instance}";
# PX4-gazebo-models models/mono_cam/model.sdf: <link name="camera_link"> ...
#   <sensor name="imager" type="camera"> with no <topic>: Gazebo's scoped default topic
#   /world/<world>/model/<model>/link/<link>/sensor/<sensor>/image
CAMERA_1 = ('/world/fl_uav_landcover/model/x500_mono_cam_down_1/link/camera_link/sensor/imager'
            '/image')
# gazebosim/ros_gz ros_gz_bridge/README.md: "parameter_bridge
#   /clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock" (Gazebo to ROS), "sensor_msgs/msg/Image |
#   gz.msgs.Image", "--ros-args ... -r <gz topic>:=<ros topic>"
BRIDGE_ARG_1 = CAMERA_1 + '@sensor_msgs/msg/Image[gz.msgs.Image'


def test_one_wall_stamped_bridge_per_drone_from_its_gazebo_camera_to_its_camera_topic():
    bridges = camera_bridges(3)
    assert [(b.package, b.executable) for b in bridges] == [('ros_gz_bridge',
                                                             'parameter_bridge')] * 3
    assert bridges[1].arguments == (BRIDGE_ARG_1,)
    assert bridges[1].remappings == ((CAMERA_1, '/uav1/camera/image_raw'),)
    assert [b.remappings[0][1] for b in bridges] == [f'/uav{i}/camera/image_raw'
                                                     for i in range(3)]
    assert bridges[0].parameters == {'override_timestamps_with_wall_time': True}


def test_px4_instances_run_as_the_multi_vehicle_docs_say_at_the_configs_homes():
    # Act
    instances = px4_instances(PX4, [(585.0, 600.0), (595.5, 600.0)])
    # Assert: `PX4_SYS_AUTOSTART=4001 PX4_SIM_MODEL=gz_x500_mono_cam_down PX4_GZ_MODEL_POSE="x,y"
    # ./build/px4_sitl_default/bin/px4 -i N` from the PX4-Autopilot directory, standalone into
    # our running world (px4-rc.gzsim: PX4_GZ_STANDALONE, PX4_GZ_WORLD; it spawns
    # ${PX4_GZ_MODELS}/<model>/model.sdf, and gz_env.sh.in's PX4_GZ_MODELS is
    # Tools/simulation/gz/models)
    second = instances[1]
    assert second.cmd == (f'{PX4}/build/px4_sitl_default/bin/px4', '-i', '1')
    assert second.cwd == PX4
    assert second.env == {'PX4_SYS_AUTOSTART': '4001', 'PX4_SIM_MODEL': 'gz_x500_mono_cam_down',
                          'PX4_GZ_MODEL_POSE': '595.5,600', 'PX4_GZ_WORLD': 'fl_uav_landcover',
                          'PX4_GZ_STANDALONE': '1',
                          'PX4_GZ_MODELS': f'{PX4}/Tools/simulation/gz/models'}
    assert [i.cmd[-1] for i in instances] == ['0', '1']


def test_the_gazebo_server_runs_our_world_as_px4_would_run_its_own():
    # Act
    server = gz_server(PX4, '/share/fl_uav/sim/worlds/fl_uav_landcover.sdf', '/mine')
    # Assert: px4-rc.gzsim's `gz sim --verbose=1 -r -s <world>.sdf`, with gz_env.sh.in's paths
    assert server.cmd == ('gz', 'sim', '--verbose=1', '-r', '-s',
                          '/share/fl_uav/sim/worlds/fl_uav_landcover.sdf')
    assert server.env == {
        'GZ_SIM_RESOURCE_PATH': f'/mine:{PX4}/Tools/simulation/gz/models:'
                                f'{PX4}/Tools/simulation/gz/worlds:/share/fl_uav/sim/worlds',
        'GZ_SIM_SYSTEM_PLUGIN_PATH': f'{PX4}/build/px4_sitl_default/build_gz-sim_plugins'}


@pytest.fixture(scope='module')
def real_launch():
    """The real launch packages (../shared/ros2_tools; skip without them), imported here and
    not at collection: importing launch sets its logger class and the root level for the whole
    process, which the logging tests of other modules would see; both are put back after."""
    logger_class, root_level = logging.getLoggerClass(), logging.root.level
    pytest.importorskip('launch_ros', reason='no launch_ros: ../shared/ros2_tools not '
                        'installed (make install)')
    yield
    logging.setLoggerClass(logger_class)
    logging.root.setLevel(root_level)


@pytest.fixture
def launch_file(real_launch, monkeypatch, tmp_path):
    """px4_sitl_fleet.launch.py on the real launch packages, its share directory the
    repository; a stand-in ros_gz_bridge install (an ament index entry and an executable), so
    launch_ros can resolve the bridge's command line."""
    prefix = tmp_path / 'prefix'
    (prefix / 'share' / 'ament_index' / 'resource_index' / 'packages').mkdir(parents=True)
    (prefix / 'share' / 'ament_index' / 'resource_index' / 'packages' / 'ros_gz_bridge').touch()
    executable = prefix / 'lib' / 'ros_gz_bridge' / 'parameter_bridge'
    executable.parent.mkdir(parents=True)
    executable.touch(mode=0o755)
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(prefix))
    spec = importlib.util.spec_from_file_location('px4_sitl_fleet_launch',
                                                  REPO / 'launch' / 'px4_sitl_fleet.launch.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, 'get_package_share_directory', lambda package: str(REPO))
    return module


def _context(**arguments):
    from launch import LaunchContext

    context = LaunchContext()
    context.launch_configurations.update({'num_drones': '2', **arguments})
    return context


def _final(action, context):
    from launch_ros.actions import Node

    if isinstance(action, Node):   # what Node.execute does before its command is prepared
        action._perform_substitutions(context)
        context.extend_locals({'ros_specific_arguments': {
            'name': f'__node:={action.node_name.split("/")[-1]}'}})
    action.process_description.prepare(context, action)
    return action.process_description


def test_the_launch_description_builds_with_its_arguments(launch_file):
    from launch import LaunchDescription
    from launch.actions import OpaqueFunction

    description = launch_file.generate_launch_description()
    assert isinstance(description, LaunchDescription)
    names = {a.name for a in description.get_launch_arguments()}
    assert {'num_drones', 'px4_dir', 'bridges', 'gz_camera_topic', 'config'} <= names
    assert any(isinstance(e, OpaqueFunction) for e in description.entities)


def test_the_launch_bridges_each_camera_and_starts_gazebo_and_px4_given_px4_dir(launch_file):
    from launch.actions import ExecuteProcess
    from launch_ros.actions import Node

    # Arrange
    context = _context(px4_dir=PX4)
    # Act
    actions = launch_file._sitl(context)
    # Assert: two bridges, then the Gazebo server and PX4 instances 0 and 1
    bridges = [a for a in actions if isinstance(a, Node)]
    processes = [a for a in actions if not isinstance(a, Node)]
    assert len(bridges) == 2 and all(isinstance(p, ExecuteProcess) for p in processes)
    bridge = _final(bridges[1], context)
    assert bridge.final_cmd[1] == BRIDGE_ARG_1
    assert f'{CAMERA_1}:=/uav1/camera/image_raw' in bridge.final_cmd
    assert bridge.final_cmd[0].endswith('lib/ros_gz_bridge/parameter_bridge')
    server, first, second = (_final(p, context) for p in processes)
    assert server.final_cmd[:5] == ['gz', 'sim', '--verbose=1', '-r', '-s']
    assert server.final_cmd[5] == str(REPO / 'sim' / 'worlds' / 'fl_uav_landcover.sdf')
    assert Path(server.final_cmd[5]).is_file()
    assert second.final_cmd == [f'{PX4}/build/px4_sitl_default/bin/px4', '-i', '1']
    assert second.final_cwd == PX4
    # the config's homes (config/fleet.yaml: autopilot.home_east_m 585, spacing 10, north 600)
    assert [p.final_env['PX4_GZ_MODEL_POSE'] for p in (first, second)] == ['585,600', '595,600']
    assert second.final_env['PX4_SYS_AUTOSTART'] == '4001'
    assert second.final_env['PX4_SIM_MODEL'] == 'gz_x500_mono_cam_down'
    assert os.environ.get('PX4_SYS_AUTOSTART') is None   # set for the process only


def test_without_px4_dir_only_bridges_and_without_bridges_none(launch_file):
    from launch_ros.actions import Node

    assert all(isinstance(a, Node) for a in launch_file._sitl(_context()))
    assert launch_file._sitl(_context(bridges='false')) == []


def test_a_custom_camera_topic_template_is_used(launch_file):
    context = _context(gz_camera_topic='/world/{world}/model/{model}/link/mono_cam/base_link'
                                       '/sensor/imager/image')
    bridge = _final(launch_file._sitl(context)[0], context)
    assert bridge.final_cmd[1] == ('/world/fl_uav_landcover/model/x500_mono_cam_down_0/link/'
                                   'mono_cam/base_link/sensor/imager/image'
                                   '@sensor_msgs/msg/Image[gz.msgs.Image')


def test_a_bad_bridges_argument_is_refused_naming_it(launch_file):
    with pytest.raises(ConfigError, match='launch argument bridges:='):
        launch_file._sitl(_context(bridges='maybe'))


def test_bridges_without_ros_gz_bridge_end_the_launch_with_one_line_naming_the_argument(
        launch_file, monkeypatch):
    from ament_index_python.packages import PackageNotFoundError

    # Arrange: no ros_gz_bridge installed (the share directory lookup fails for it)
    def share(package):
        if package == 'ros_gz_bridge':
            raise PackageNotFoundError(package)
        return str(REPO)

    monkeypatch.setattr(launch_file, 'get_package_share_directory', share)
    # Act / Assert
    with pytest.raises(ConfigError, match=r'launch argument bridges:=true needs the '
                                          r'ros_gz_bridge package .* bridges:=false'):
        launch_file._sitl(_context())
    assert [a for a in launch_file._sitl(_context(bridges='false'))] == []
