"""ros2 launch fl_uav fleet_sim.launch.py [num_drones:=4] [config:=...] [output_dir:=...]
    [mode:=standard|express] [num_clients:=N] [exit_on_finish:=false]
    [respawn:=true] [respawn_delay:=2] [respawn_max_retries:=5] [resume:=DIR]

The embedded fleet: autopilot_sim, sim_camera, ground_station and one drone per UAV; in
express mode (FedEx) one ground_client per ground client instead of the camera. The node set
comes from fl_uav.fleet_run.launch_plan.fleet_plan, the same function `fl-uav sim` uses, and frames
are signed as there: fresh keys in output_dir/keys (a new temporary directory without
output_dir) and signatures required, unless the config names security.keys_dir. The same
start-time checks refuse a simulated home outside the geofence and a port another process
holds (fl_uav.fleet_run.launch_plan.check_fleet_start), before any node starts; so does a
launch argument that does not parse (one line naming it). With exit_on_finish:=true the
station and the drones end once the run is over and landed, and the launch ends with them.
A drone node that dies (a crash, a SIGKILL) is started again after respawn_delay seconds and
rejoins the run in progress (fl_uav.ros.respawn: unlike launch's own respawn, a clean exit is
not restarted). So is the ground station: it comes back resuming from the checkpoint it wrote
into output_dir after its last closed round (fl_uav.fleet.station_checkpoint; without
output_dir, or before a round closed, it starts a new run). resume:=DIR starts the station on
the run whose checkpoint DIR holds (DIR's keys are used, as the checkpoint was made under them).
"""

import dataclasses
import functools
import tempfile
from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch_ros.actions import Node

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.run_log import STATION_CHECKPOINT_FILE
from fl_uav.fleet_run.launch_plan import (
    KEYS_DIR,
    PACKAGE,
    NodeSpec,
    fleet_plan,
    launch_bool,
    launch_config_file,
    launch_int,
    launch_parameters,
    mode_overrides,
    write_params_file,
)
from fl_uav.ros.respawn import respawn_arguments, respawn_policy, respawning

FINISHING_EXECUTABLES = ('ground_station_node', 'drone_node', 'ground_client_node')


def _nodes(context):
    share = Path(get_package_share_directory(PACKAGE))
    args = context.launch_configurations
    config_file = launch_config_file('config', args.get('config', ''),
                                     share / 'config' / 'fleet.yaml')
    num_drones = launch_int('num_drones', args['num_drones'], minimum=1)
    output_dir = args.get('output_dir', '')
    with_simulators = launch_bool('with_simulators', args.get('with_simulators', 'true'))
    exit_on_finish = launch_bool('exit_on_finish', args.get('exit_on_finish', 'false'))
    respawn = respawn_policy(args)
    mode = args.get('mode') or None
    clients = args.get('num_clients') or None
    overrides = {'num_drones': num_drones,
                 **mode_overrides(mode, num_drones,
                                  launch_int('num_clients', clients, 1) if clients else None)}
    resume = args.get('resume', '')
    run_dir = Path(output_dir or tempfile.mkdtemp(prefix='fl_uav_fleet_'))
    resumed_keys = Path(resume) / KEYS_DIR if resume else None
    if resumed_keys is not None and resumed_keys.is_dir():
        overrides.update({'security.keys_dir': str(resumed_keys.resolve()),   # the run's own
                          'security.require_signatures': True})             # keys, as before
    # The start-time checks of `fl-uav sim` (homes in the geofence, free ports) run here too.
    flat = launch_parameters(config_file, overrides, run_dir, with_simulators)
    config = build_config(FleetConfig, flat)
    params_file = write_params_file(flat, run_dir / 'fl_uav_params.yaml')

    def _node(spec: NodeSpec) -> Node:
        # sigterm_timeout: a drone node stopped in flight waits for its return to launch, and
        # autopilot_sim (a Ctrl-C reaches it at the same moment) goes on flying the vehicles
        # meanwhile, longer still (fl_uav.autopilot_sim.stop_hold)
        return Node(package=PACKAGE, executable=spec.executable, name=spec.name,
                    namespace=spec.namespace or None, output='screen',
                    sigterm_timeout=str(spec.stop_grace_s),
                    parameters=[str(params_file), dict(spec.parameters)])

    def _station(spec: NodeSpec, started: list) -> Node:
        # the first start as planned; a restart resumes from the checkpoint in output_dir
        if started[0] and output_dir and (Path(output_dir) / STATION_CHECKPOINT_FILE).is_file():
            spec = dataclasses.replace(spec, parameters={**spec.parameters,
                                                         'resume': output_dir})
        started[0] = True
        return _node(spec)

    specs = fleet_plan(config, output_dir or None, exit_on_finish=exit_on_finish,
                       with_simulators=with_simulators, resume=resume or None)
    # The run is over once the station and every drone have ended by themselves (landed); the
    # launch then stops the rest, the simulators, which never end on their own. A drone that
    # died is counted once it is not restarted any more.
    finishing = {spec.log_name for spec in specs if spec.executable in FINISHING_EXECUTABLES}
    ended = set()

    def _ended(label: str):
        def _one_ended(_event, _context):
            ended.add(label)
            if exit_on_finish and ended == finishing:
                return [EmitEvent(event=Shutdown(reason='run finished'))]
            return None
        return _one_ended

    actions = []
    for spec in specs:
        make = functools.partial(_node, spec)
        if spec.executable == 'drone_node':
            actions += respawning(make, respawn, spec.log_name, _ended(spec.log_name))
        elif spec.executable == 'ground_station_node':   # restarted: resume from output_dir
            actions += respawning(functools.partial(_station, spec, [False]), respawn,
                                  spec.log_name, _ended(spec.log_name))
        elif spec.log_name in finishing:
            node = make()
            actions += [node, RegisterEventHandler(OnProcessExit(
                target_action=node, on_exit=_ended(spec.log_name)))]
        else:
            actions.append(make())
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('num_drones', default_value='4'),
        DeclareLaunchArgument('config', default_value=''),
        DeclareLaunchArgument('output_dir', default_value=''),
        DeclareLaunchArgument('mode', default_value='',
                              description="standard | express (FedEx); empty: the config's"),
        DeclareLaunchArgument('num_clients', default_value='',
                              description="express: ground clients (empty: the config's)"),
        DeclareLaunchArgument('exit_on_finish', default_value='false',
                              description='true: end the launch when the run is over (the '
                              'station and the drones end once landed)'),
        DeclareLaunchArgument('with_simulators', default_value='true',
                              description='false: real PX4 SITL/Gazebo instead of the embedded '
                              'autopilot and camera simulators'),
        DeclareLaunchArgument('resume', default_value='',
                              description='a directory holding a station checkpoint (a run '
                              'directory): the station goes on with that run'),
        *respawn_arguments(),
        OpaqueFunction(function=_nodes),
    ])
