"""The node set shared by launch files and `fl-uav sim`, and the launch files themselves."""

from __future__ import annotations

import ast
import importlib.util
import socket
import sys
import types
from pathlib import Path

import pytest
import yaml

from fl_uav.autopilot_sim.signing import key_file_path, read_px4_key_file
from fl_uav.configschema import ConfigError, build_config, read_params_file
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.run_log import STATION_CHECKPOINT_FILE
from fl_uav.fleet_run.launch_plan import (
    DRONE_SHUTDOWN_MARGIN_S,
    STOP_GRACE_S,
    autopilot_stop_hold_s,
    check_fleet_start,
    check_sim_homes,
    drone_file_stop_grace_s,
    fleet_plan,
    launch_parameters,
    merged_parameters,
    mode_overrides,
    write_params_file,
)
from fl_uav.vehicle.mavlink_signing import read_key_file
from test.conftest import BIND_PORT_OFFSET, tiny_fleet_overrides

REPO = Path(__file__).resolve().parents[3]
FLEET_YAML = REPO / 'config' / 'fleet.yaml'


def _fleet(overrides: dict) -> FleetConfig:
    return build_config(FleetConfig, merged_parameters([FLEET_YAML], overrides))


FENCE = r'east \[10.0, 1190.0\] m, north \[10.0, 1190.0\] m'


@pytest.mark.parametrize('overrides, message', [
    ({'num_drones': 3, 'autopilot.home_east_m': 900.0, 'autopilot.home_spacing_m': 150.0},
     r'drone 2: its simulated home \(east 1200.0 m, north 600.0 m\) is outside its geofence '
     r'\(' + FENCE),
    # the second row of homes (home_row_size) lies further north
    ({'num_drones': 3, 'autopilot.home_row_size': 2, 'autopilot.home_north_m': 1185.0},
     r'drone 2: its simulated home \(east 585.0 m, north 1195.0 m\) is outside its '
     r'geofence \(' + FENCE + r'.*home_row_size: 2 per row'),
    ({'num_drones': 2, 'autopilot.num_vehicles': 2,
      'autopilot.home_positions_enu_m': [100.0, 100.0, 5.0, 100.0]},
     r'drone 1: its simulated home \(east 5.0 m, north 100.0 m\)'),
    # 41 vehicles' ports from 14540 reach the simulator's own from 14580: the node would die
    ({'num_drones': 41}, r'autopilot.\* does not fit 41 drones: .*bind_base_port.*--port-base'),
])
def test_a_simulated_home_outside_the_geofence_is_refused_naming_drone_home_and_fence(
        overrides, message):
    # Arrange
    config = _fleet(overrides)
    # Act / Assert
    with pytest.raises(ConfigError, match=message):
        check_sim_homes(config)


@pytest.mark.parametrize('num_drones', [1, 40])
def test_the_fleet_configs_homes_lie_inside_the_fence(num_drones):
    check_sim_homes(_fleet({'num_drones': num_drones}))


def test_fleet_plan_has_simulators_station_and_one_drone_per_uav():
    config = build_config(FleetConfig, {'num_drones': 3})
    specs = fleet_plan(config, '/tmp/out')
    assert [s.executable for s in specs] == ['autopilot_sim_node', 'sim_camera_node',
                                             'ground_station_node'] + ['drone_node'] * 3
    drones = [s for s in specs if s.executable == 'drone_node']
    assert [s.namespace for s in drones] == ['/uav0', '/uav1', '/uav2']
    assert [s.parameters['drone_id'] for s in drones] == [0, 1, 2]
    assert [s.executable for s in fleet_plan(config, with_simulators=False)][0] == \
        'ground_station_node'


def test_express_mode_starts_one_ground_client_each_and_no_camera():
    overrides = {'num_drones': 2, **mode_overrides('express', 2, 3)}
    config = build_config(FleetConfig, merged_parameters([REPO / 'config' / 'fleet.yaml'],
                                                         overrides))
    specs = fleet_plan(config, '/tmp/out')
    assert [s.executable for s in specs] == ['autopilot_sim_node', 'ground_station_node'] + \
        ['drone_node'] * 2 + ['ground_client_node'] * 3
    clients = [s for s in specs if s.executable == 'ground_client_node']
    assert [(s.namespace, s.parameters['client_id']) for s in clients] == [
        ('/gc0', 0), ('/gc1', 1), ('/gc2', 2)]
    assert config.aggregation.strategy == 'fedex_sync' and config.express.num_uavs == 2


def test_mode_overrides_keep_a_given_strategy_and_refuse_clients_without_express():
    assert 'aggregation.strategy' not in mode_overrides('express', 2, None,
                                                        {'aggregation.strategy': 'fedavg'})
    assert mode_overrides(None, 2, None) == {}
    with pytest.raises(ConfigError, match='needs mode express'):
        mode_overrides('standard', 2, 4)


def test_ros_args_match_a_launch_action(tmp_path):
    spec = fleet_plan(build_config(FleetConfig, {'num_drones': 1}), tmp_path)[-1]
    args = spec.ros_args(tmp_path / 'p.yaml')
    assert args[:1] == ['--ros-args'] and '__ns:=/uav0' in args and '__node:=drone' in args
    assert 'drone_id:=0' in args and str(tmp_path / 'p.yaml') in args
    assert args[args.index('--log-file-name') + 1] == 'uav0_drone'   # not python_<pid>


def test_merged_parameters_validate_and_round_trip(tmp_path):
    flat = merged_parameters([REPO / 'config' / 'fleet.yaml'], {'num_drones': 2})
    path = write_params_file(flat, tmp_path / 'params.yaml')
    doc = yaml.safe_load(path.read_text())
    assert doc['/**']['ros__parameters']['num_drones'] == 2
    with pytest.raises(ConfigError, match='learning.lrr'):
        merged_parameters([REPO / 'config' / 'fleet.yaml'], {'learning.lrr': 0.1})


@pytest.mark.parametrize('name', ['fleet.yaml', 'drone.yaml', 'ground_station.yaml'])
def test_shipped_configs_are_valid(name):
    flat = merged_parameters([REPO / 'config' / name], {})
    assert build_config(FleetConfig, flat).num_drones >= 1


@pytest.mark.parametrize('path', sorted((REPO / 'launch').glob('*.launch.py')),
                         ids=lambda p: p.name)
def test_launch_files_define_a_launch_description(path):
    tree = ast.parse(path.read_text(), str(path))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert 'generate_launch_description' in functions


def test_launch_parameters_sign_the_fleet_as_fl_uav_sim_does(tmp_path, port_base):
    # Arrange: free ports (the launch checks them as fl-uav sim does)
    ports = tiny_fleet_overrides(2, port_base)
    # Act
    flat = launch_parameters(REPO / 'config' / 'fleet.yaml', ports, tmp_path)
    given = launch_parameters(REPO / 'config' / 'fleet.yaml',
                              {**ports, 'security.keys_dir': '/etc/fl_uav/keys',
                               'flight.mavlink_key_file': '/etc/fl_uav/mavlink{drone}.key'},
                              tmp_path / 'other')
    sitl = launch_parameters(REPO / 'config' / 'fleet.yaml',
                             {**ports, 'security.keys_dir': '/etc/fl_uav/keys'},
                             tmp_path / 'sitl', with_simulators=False)
    # Assert: fresh keys for the launch and signatures required; a config's keys are kept
    assert flat['security.require_signatures'] is True
    assert sorted(p.name for p in Path(flat['security.keys_dir']).glob('*.pub')) == [
        'drone0.pub', 'drone1.pub', 'station.pub']
    assert given['security.keys_dir'] == '/etc/fl_uav/keys'
    assert given['flight.mavlink_key_file'] == '/etc/fl_uav/mavlink{drone}.key'
    assert not (tmp_path / 'other').exists()
    config = build_config(FleetConfig, flat)
    assert config.security.require_signatures
    # Assert: each autopilot link signed with a key of its own, which its simulated
    # autopilot holds; PX4 SITL has none of ours: unsigned (a key file given is used)
    assert config.flight.mavlink_signing
    keys = [read_key_file(config.flight.mavlink_key_for(d)) for d in (0, 1)]
    assert keys[0] != keys[1]
    assert [read_px4_key_file(key_file_path(config.autopilot.state_dir, d))[0]
            for d in (0, 1)] == keys
    assert sitl['flight.mavlink_signing'] is False and not (tmp_path / 'sitl' / 'keys' /
                                                            'mavlink').exists()


@pytest.mark.parametrize('held, named', [(0, "drone 0's MAVLink link"),
                                         (BIND_PORT_OFFSET + 1, 'simulated autopilot 1')])
def test_launch_parameters_refuse_a_busy_port_before_writing_anything(tmp_path, port_base,
                                                                       held, named):
    # Arrange: another process holds one of the fleet's ports
    run_dir = tmp_path / 'run'
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.bind(('127.0.0.1', port_base + held))
        # Act
        with pytest.raises(ConfigError) as refused:
            launch_parameters(FLEET_YAML, tiny_fleet_overrides(2, port_base), run_dir)
    # Assert: as fl-uav sim refuses it, naming the port and its role; no keys written
    assert f'UDP 127.0.0.1:{port_base + held} ({named}' in str(refused.value)
    assert 'flight.port_base' in str(refused.value)
    assert not run_dir.exists()


def test_launch_parameters_refuse_a_simulated_home_outside_the_geofence(tmp_path, port_base):
    # Arrange
    overrides = {**tiny_fleet_overrides(3, port_base), 'autopilot.home_east_m': 900.0,
                 'autopilot.home_spacing_m': 150.0}
    # Act / Assert
    with pytest.raises(ConfigError, match=r'drone 2: its simulated home .* outside its '
                                          r'geofence'):
        launch_parameters(FLEET_YAML, overrides, tmp_path / 'run')
    assert not (tmp_path / 'run').exists()


def test_without_simulators_the_simulators_homes_and_ports_are_not_checked(port_base):
    # Arrange: homes outside the fence and the simulators' port taken (real PX4 SITL uses
    # neither); the drones' links are free
    config = _fleet({**tiny_fleet_overrides(3, port_base), 'autopilot.home_east_m': 900.0,
                     'autopilot.home_spacing_m': 150.0})
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.bind(('127.0.0.1', port_base + BIND_PORT_OFFSET))
        # Act / Assert: refused with the simulators, accepted without
        with pytest.raises(ConfigError):
            check_fleet_start(config)
        check_fleet_start(config, with_simulators=False)


def test_without_simulators_a_drones_busy_link_is_still_refused(port_base):
    # Arrange
    config = _fleet(tiny_fleet_overrides(2, port_base))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.bind(('127.0.0.1', port_base + 1))
        # Act / Assert
        with pytest.raises(ConfigError, match="drone 1's MAVLink link"):
            check_fleet_start(config, with_simulators=False)


def test_drone_nodes_may_wait_for_their_landing_when_stopped(tmp_path):
    # Arrange: a 40 s return-to-launch wait in the drone's parameter file
    text = (REPO / 'config' / 'drone.yaml').read_text().replace(
        'shutdown_rtl_timeout_s: 30.0', 'shutdown_rtl_timeout_s: 40.0')
    drone_file = tmp_path / 'drone.yaml'
    drone_file.write_text(text)
    config = build_config(FleetConfig, merged_parameters([FLEET_YAML], {'num_drones': 2}))
    # Act
    specs = {spec.name: spec for spec in fleet_plan(config)}
    from_file = drone_file_stop_grace_s(drone_file)
    # Assert: the drones outlast their RTL wait; the autopilot simulator, which goes on
    # flying their vehicles meanwhile, outlasts them; the other nodes keep ros2 launch's default
    rtl_s = config.flight.shutdown_rtl_timeout_s
    assert specs['drone'].stop_grace_s == rtl_s + DRONE_SHUTDOWN_MARGIN_S
    assert autopilot_stop_hold_s(rtl_s) == specs['drone'].stop_grace_s
    assert specs['autopilot_sim'].stop_grace_s == autopilot_stop_hold_s(rtl_s) + STOP_GRACE_S
    assert specs['ground_station'].stop_grace_s == STOP_GRACE_S
    assert from_file == 40.0 + DRONE_SHUTDOWN_MARGIN_S


def _launch_file_module(monkeypatch, file_name: str, made: list):
    """A launch file loaded against stand-ins for launch and launch_ros (not installable from
    PyPI here) that record the Node actions it makes (keyword arguments as given), with the
    package share directory the repository."""
    launch = types.ModuleType('launch')
    launch.LaunchDescription = list
    actions = types.ModuleType('launch.actions')
    actions.DeclareLaunchArgument = lambda *a, **k: ('arg', a, k)
    actions.OpaqueFunction = lambda **k: ('opaque', k)
    actions.EmitEvent = lambda **k: ('emit', k)
    actions.RegisterEventHandler = lambda *a, **k: ('handler', a, k)
    actions.LogInfo = lambda **k: ('log', k)
    actions.TimerAction = lambda **k: ('timer', k)
    event_handlers = types.ModuleType('launch.event_handlers')
    event_handlers.OnProcessExit = lambda **k: ('on_exit', k)
    events = types.ModuleType('launch.events')
    events.Shutdown = lambda **k: ('shutdown', k)
    launch_ros = types.ModuleType('launch_ros')
    ros_actions = types.ModuleType('launch_ros.actions')
    ros_actions.Node = lambda **kwargs: made.append(kwargs) or kwargs
    for name, module in (('launch', launch), ('launch.actions', actions),
                         ('launch.event_handlers', event_handlers), ('launch.events', events),
                         ('launch_ros', launch_ros), ('launch_ros.actions', ros_actions)):
        monkeypatch.setitem(sys.modules, name, module)
    # fl_uav.ros.respawn loaded afresh on the stand-ins, and that copy gone after the test
    monkeypatch.setitem(sys.modules, 'fl_uav.ros.respawn', None)
    del sys.modules['fl_uav.ros.respawn']
    spec = importlib.util.spec_from_file_location(file_name.replace('.', '_'),
                                                  REPO / 'launch' / file_name)
    launch_file = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch_file)
    monkeypatch.setattr(launch_file, 'get_package_share_directory', lambda package: str(REPO))
    return launch_file


def test_drone_launch_gives_the_drone_node_its_rtl_wait_before_sigterm(monkeypatch):
    # Arrange: the launch file with stand-in launch modules, the shipped drone config
    made: list = []
    module = _launch_file_module(monkeypatch, 'drone.launch.py', made)
    context = types.SimpleNamespace(launch_configurations={
        'config': str(REPO / 'config' / 'drone.yaml'), 'drone_id': '1'})
    # Act
    module._nodes(context)
    # Assert: launch waits the RTL timeout (+ margin) after SIGINT before SIGTERM
    assert len(made) == 1 and made[0]['namespace'] == '/uav1'
    assert float(made[0]['sigterm_timeout']) == drone_file_stop_grace_s(
        REPO / 'config' / 'drone.yaml') == 30.0 + DRONE_SHUTDOWN_MARGIN_S


def test_drone_launch_passes_the_camera_topic_and_transport_to_the_drone_node(monkeypatch):
    # Arrange
    made: list = []
    module = _launch_file_module(monkeypatch, 'drone.launch.py', made)
    context = types.SimpleNamespace(launch_configurations={
        'config': str(REPO / 'config' / 'drone.yaml'), 'drone_id': '1',
        'camera_topic': '/camera/image_raw', 'camera_transport': 'compressed'})
    # Act
    module._nodes(context)
    # Assert: the remap covers either transport's topic; the transport is the node's parameter
    (node,) = made
    assert node['remappings'] == [('camera/image_raw', '/camera/image_raw'),
                                  ('camera/image_raw/compressed', '/camera/image_raw/compressed')]
    assert node['parameters'][1]['camera_transport'] == 'compressed'


def test_fleet_launch_gives_the_autopilot_simulator_the_drones_return_before_sigterm(
        monkeypatch, tmp_path, port_base):
    # Arrange: the fleet launch file with stand-in launch modules, on free ports
    made: list = []
    module = _launch_file_module(monkeypatch, 'fleet_sim.launch.py', made)
    flat = {**read_params_file(FLEET_YAML), **tiny_fleet_overrides(1, port_base)}
    config_file = write_params_file(flat, tmp_path / 'fleet.yaml')
    context = types.SimpleNamespace(launch_configurations={
        'config': str(config_file), 'num_drones': '1', 'output_dir': str(tmp_path / 'run')})
    # Act
    module._nodes(context)
    # Assert: after a Ctrl-C, launch lets the simulator fly the drones home before SIGTERM
    timeouts = {node['name']: float(node['sigterm_timeout']) for node in made}
    rtl_s = build_config(FleetConfig, flat).flight.shutdown_rtl_timeout_s
    assert timeouts['autopilot_sim'] == autopilot_stop_hold_s(rtl_s) + STOP_GRACE_S
    assert timeouts['autopilot_sim'] > timeouts['drone'] > timeouts['ground_station']


def _exit_handler(actions):
    """The on_exit callback of the stand-in OnProcessExit among ``actions``."""
    (handler,) = [a for a in actions if isinstance(a, tuple) and a[0] == 'handler']
    return handler[1][0][1]['on_exit']


def test_a_drone_node_that_dies_is_restarted_and_one_that_ends_cleanly_is_not(monkeypatch):
    # Arrange: the drone launch file on the stand-ins, 2 restarts at most
    made: list = []
    module = _launch_file_module(monkeypatch, 'drone.launch.py', made)
    context = types.SimpleNamespace(launch_configurations={
        'config': str(REPO / 'config' / 'drone.yaml'), 'drone_id': '1', 'respawn': 'true',
        'respawn_delay': '3', 'respawn_max_retries': '2'}, is_shutdown=False)
    killed = types.SimpleNamespace(returncode=-9)
    # Act: SIGKILL the node, then its restart, then the second restart
    first = module._nodes(context)
    restart = _exit_handler(first)(killed, context)
    (timer,) = [a for a in restart if a[0] == 'timer']
    second = _exit_handler(timer[1]['actions'])(killed, context)
    (timer2,) = [a for a in second if a[0] == 'timer']
    third = _exit_handler(timer2[1]['actions'])(killed, context)
    # Assert: restarted after the delay, the same node again, twice, then no more
    assert timer[1]['period'] == 3.0
    assert [n['namespace'] for n in made] == ['/uav1'] * 3
    assert ('restart 1 of at most 2' in restart[0][1]['msg'])
    assert [a[0] for a in third] == ['log'] and 'not restarted again' in third[0][1]['msg']
    assert _exit_handler(first)(types.SimpleNamespace(returncode=0), context) is None
    shutting_down = types.SimpleNamespace(**{**vars(context), 'is_shutdown': True})
    assert _exit_handler(first)(killed, shutting_down) is None


@pytest.mark.parametrize(('name', 'value'), [('respawn', 'yes'), ('respawn_delay', '-1'),
                                             ('respawn_delay', 'soon'),
                                             ('respawn_max_retries', '1.5')])
def test_a_bad_respawn_argument_is_refused_naming_it(monkeypatch, name, value):
    made: list = []
    module = _launch_file_module(monkeypatch, 'drone.launch.py', made)
    context = types.SimpleNamespace(launch_configurations={
        'config': str(REPO / 'config' / 'drone.yaml'), 'drone_id': '1', name: value})
    with pytest.raises(ConfigError, match=f'launch argument {name}:='):
        module._nodes(context)
    assert made == []


def test_fleet_launch_restarts_a_dead_station_resuming_from_its_output_dir(
        monkeypatch, tmp_path, port_base):
    # Arrange: the fleet launch file on the stand-ins; resume:=DIR of another run's keys
    made: list = []
    module = _launch_file_module(monkeypatch, 'fleet_sim.launch.py', made)
    flat = {**read_params_file(FLEET_YAML), **tiny_fleet_overrides(1, port_base)}
    config_file = write_params_file(flat, tmp_path / 'fleet.yaml')
    out = tmp_path / 'run'
    context = types.SimpleNamespace(launch_configurations={
        'config': str(config_file), 'num_drones': '1', 'output_dir': str(out),
        'respawn_delay': '0'}, is_shutdown=False)
    killed = types.SimpleNamespace(returncode=-9)
    actions = module._nodes(context)
    station = [a for a in actions if isinstance(a, tuple) and a[0] == 'handler']
    # Act: the station dies before any checkpoint, then after one
    (first,) = [n for n in made if n['name'] == 'ground_station']
    handlers = [h for h in station if h[1][0][1]['target_action'] is first]
    on_exit = handlers[0][1][0][1]['on_exit']
    (timer,) = [a for a in on_exit(killed, context) if a[0] == 'timer']
    (out / STATION_CHECKPOINT_FILE).write_bytes(b'')
    on_exit_2 = _exit_handler(timer[1]['actions'])
    (timer2,) = [a for a in on_exit_2(killed, context) if a[0] == 'timer']
    # Assert: the first start and the restart before a checkpoint start a new run; then resume
    stations = [n['parameters'][1] for n in made if n['name'] == 'ground_station']
    assert [s.get('resume') for s in stations] == [None, None, str(out)]
    assert timer2[1]['period'] == 0.0
