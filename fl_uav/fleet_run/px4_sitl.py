"""What px4_sitl_fleet.launch.py starts besides the fleet: Gazebo, PX4 SITL, camera bridges.

ROS-free (the launch file turns these specs into actions), so the commands, environments and
remappings are testable here. Every constant below is read from its project's own sources:

- PX4-Autopilot ``ROMFS/px4fmu_common/init.d-posix/px4-rc.gzsim``: the model to spawn is
  ``PX4_SIM_MODEL`` less its ``gz_`` prefix, named ``<model>_<px4_instance>`` in Gazebo; it is
  placed at ``PX4_GZ_MODEL_POSE`` ("x,y[,z]", world metres); without ``PX4_GZ_STANDALONE`` the
  instance starts ``gz sim --verbose=1 -r -s ${PX4_GZ_WORLDS}/${PX4_GZ_WORLD}.sdf`` unless a world
  runs already, with ``PX4_GZ_STANDALONE`` it waits (30 s) for ``/world/${PX4_GZ_WORLD}`` and
  spawns ``${PX4_GZ_MODELS}/<model>/model.sdf`` into it.
- PX4-Autopilot ``src/modules/simulation/gz_bridge/gz_env.sh.in`` (which only the non-standalone
  branch sources): ``PX4_GZ_MODELS`` = ``Tools/simulation/gz/models``, ``PX4_GZ_WORLDS`` =
  ``Tools/simulation/gz/worlds``, both appended to ``GZ_SIM_RESOURCE_PATH``, and
  ``GZ_SIM_SYSTEM_PLUGIN_PATH`` = ``build/px4_sitl_default/build_gz-sim_plugins``.
  ``PX4_GZ_WORLDS`` is PX4's own directory, so PX4 cannot start our world itself: the launch
  starts the Gazebo server on ``sim/worlds/fl_uav_landcover.sdf`` with that environment, and
  every PX4 instance standalone with ``PX4_GZ_MODELS`` set (no race either between instances
  that would each start a server).
- PX4-Autopilot airframes: ``4014_gz_x500_mono_cam_down`` sets ``PX4_SIM_MODEL`` to
  x500_mono_cam_down, sources ``4001_gz_x500`` and then ``SIM_GPS_USED 0`` (no simulated GPS,
  optical flow instead); fl_uav flies GPS missions, so the instances run airframe 4001 (the x500,
  ``PX4_SIM_MODEL:=`` keeps ours) with the mono-cam-down model.
- PX4-gazebo-models ``models/x500_mono_cam_down/model.sdf`` merges ``model://mono_cam``, whose
  ``models/mono_cam/model.sdf`` has link ``camera_link`` and a camera sensor ``imager`` with no
  ``<topic>``, so Gazebo publishes it on its scoped default
  ``/world/<world>/model/<model>/link/<link>/sensor/<sensor>/image`` (older PX4-gazebo-models
  revisions name the link ``mono_cam/base_link``: ``gz topic -l`` shows the one yours has, and
  the launch's ``gz_camera_topic`` argument takes it).
- PX4 user guide, multi-vehicle simulation with Gazebo: ``./build/px4_sitl_default/bin/px4 -i N``
  from the PX4-Autopilot directory; instance N's offboard MAVLink goes to UDP 14540 + N
  (fl_uav's ``flight.port_base`` 14540 + drone id).
- gazebosim/ros_gz ``ros_gz_bridge/README.md``: ``parameter_bridge TOPIC@ROS_TYPE[GZ_TYPE`` bridges
  Gazebo to ROS only (the README's ``/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock``; ``@`` both
  ways, ``]`` ROS to Gazebo), ``sensor_msgs/msg/Image`` <-> ``gz.msgs.Image``, ``--ros-args -r
  GZ_TOPIC:=ROS_TOPIC`` renames the ROS side, and ``override_timestamps_with_wall_time`` stamps
  the outgoing messages with wall time: the drone node matches frames to its MAVLink poses by
  stamp on the wall clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fl_uav.world.gz_world import WORLD_NAME

PX4_BINARY = 'build/px4_sitl_default/bin/px4'
PX4_AUTOSTART = 4001
PX4_SIM_MODEL = 'gz_x500_mono_cam_down'
GZ_MODEL = PX4_SIM_MODEL.removeprefix('gz_')
PX4_GZ_MODELS = 'Tools/simulation/gz/models'
PX4_GZ_WORLDS = 'Tools/simulation/gz/worlds'
PX4_GZ_PLUGINS = 'build/px4_sitl_default/build_gz-sim_plugins'
CAMERA_TOPIC = '/world/{world}/model/{model}/link/camera_link/sensor/imager/image'
"""Gazebo topic of drone i's camera; {world}, {model} (``x500_mono_cam_down_<i>``) and {i} are
filled in."""
IMAGE_BRIDGE = '@sensor_msgs/msg/Image[gz.msgs.Image'
ROS_IMAGE_TOPIC = '/uav{i}/camera/image_raw'


@dataclass(frozen=True)
class ProcessSpec:
    """A process to run: command line, working directory, environment added to the launch's."""

    name: str
    cmd: tuple[str, ...]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BridgeSpec:
    """One ros_gz_bridge parameter_bridge node."""

    name: str
    arguments: tuple[str, ...]
    remappings: tuple[tuple[str, str], ...]
    parameters: dict[str, object]
    package: str = 'ros_gz_bridge'
    executable: str = 'parameter_bridge'


def gz_model_name(instance: int) -> str:
    """Gazebo name of PX4 instance i's vehicle (px4-rc.gzsim:
    ``${MODEL_NAME}_${px4_instance}``)."""
    return f'{GZ_MODEL}_{instance}'


def camera_topic(instance: int, world: str = WORLD_NAME, template: str = CAMERA_TOPIC) -> str:
    """Gazebo topic of PX4 instance i's downward camera."""
    return template.format(world=world, model=gz_model_name(instance), i=instance)


def camera_bridges(num_drones: int, world: str = WORLD_NAME,
                   template: str = CAMERA_TOPIC) -> list[BridgeSpec]:
    """One bridge per drone: its Gazebo camera to ``/uav<i>/camera/image_raw``, wall-stamped."""
    bridges = []
    for i in range(num_drones):
        topic = camera_topic(i, world, template)
        bridges.append(BridgeSpec(
            name=f'camera_bridge_{i}', arguments=(topic + IMAGE_BRIDGE,),
            remappings=((topic, ROS_IMAGE_TOPIC.format(i=i)),),
            parameters={'override_timestamps_with_wall_time': True}))
    return bridges


def gz_server(px4_dir: str | Path, world_sdf: str | Path,
              resource_path: str = '') -> ProcessSpec:
    """The Gazebo server on fl_uav's world, in the environment PX4's gz_env.sh gives it."""
    px4 = Path(px4_dir)
    paths = [p for p in (resource_path, str(px4 / PX4_GZ_MODELS), str(px4 / PX4_GZ_WORLDS),
                         str(Path(world_sdf).parent)) if p]
    return ProcessSpec(
        name='gz_server', cmd=('gz', 'sim', '--verbose=1', '-r', '-s', str(world_sdf)),
        cwd=str(px4),
        env={'GZ_SIM_RESOURCE_PATH': ':'.join(paths),
             'GZ_SIM_SYSTEM_PLUGIN_PATH': str(px4 / PX4_GZ_PLUGINS)})


def px4_instances(px4_dir: str | Path, homes_enu_m: Sequence[tuple[float, float]],
                  world: str = WORLD_NAME) -> list[ProcessSpec]:
    """PX4 SITL instance i per home (east, north): the x500 with the downward camera, spawned at
    its home into the running ``world``; it talks MAVLink on UDP 14540 + i."""
    px4 = Path(px4_dir)
    return [ProcessSpec(
        name=f'px4_{i}', cmd=(str(px4 / PX4_BINARY), '-i', str(i)), cwd=str(px4),
        env={'PX4_SYS_AUTOSTART': str(PX4_AUTOSTART), 'PX4_SIM_MODEL': PX4_SIM_MODEL,
             'PX4_GZ_MODEL_POSE': f'{east:g},{north:g}', 'PX4_GZ_WORLD': world,
             'PX4_GZ_STANDALONE': '1', 'PX4_GZ_MODELS': str(px4 / PX4_GZ_MODELS)})
        for i, (east, north) in enumerate(homes_enu_m)]
