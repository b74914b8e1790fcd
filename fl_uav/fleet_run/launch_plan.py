"""The fleet's node set, built once for both ``ros2 launch`` and the ``fl-uav sim`` launcher.

launch/fleet_sim.launch.py turns these specs into launch_ros ``Node`` actions; the subprocess
launcher (:mod:`fl_uav.fleet_run.launcher`) starts the same specs as processes.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.configschema import ConfigError, build_config, read_params_file
from fl_uav.fleet.config import FleetConfig, FlightConfig, GroundClientConfig
from fl_uav.fleet.keys import PRIVATE_SUFFIX, PUBLIC_SUFFIX, generate_fleet_keys
from fl_uav.fleet.run_log import STATION_CHECKPOINT_FILE

KEYS_DIR = 'keys'                      # a run's Ed25519 keys (fl-uav keygen layout)
MAVLINK_KEYS_DIR = 'mavlink'           # under KEYS_DIR: the drones' MAVLink signing keys
AUTOPILOT_STATE_DIR = 'autopilot_state'   # the simulated autopilots' storage (their keys)

PACKAGE = 'fl_uav'

#: seconds a node has to exit after SIGINT before it is sent SIGTERM (ros2 launch's default
#: sigterm_timeout)
STOP_GRACE_S = 5.0
#: beyond flight.shutdown_rtl_timeout_s, for a drone node to close its link and exit
DRONE_SHUTDOWN_MARGIN_S = 5.0


@dataclass(frozen=True)
class NodeSpec:
    """One node to start: executable (console script = module in fl_uav.ros), ROS name,
    namespace, node-only parameters, and how long it may take to exit after SIGINT
    (``stop_grace_s``: ros2 launch's ``sigterm_timeout``; a drone node's return to launch)."""

    executable: str
    name: str
    namespace: str = ''
    parameters: Mapping[str, Any] = field(default_factory=dict)
    stop_grace_s: float = STOP_GRACE_S

    @property
    def module(self) -> str:
        """Python module that runs the executable."""
        return f'fl_uav.ros.{self.executable}'

    @property
    def log_name(self) -> str:
        """The node's log file name in ROS_LOG_DIR (``uav0_drone``; rcl adds pid and time):
        which file is which node, instead of ``python_<pid>``."""
        return '_'.join(part for part in (self.namespace.strip('/'), self.name) if part)

    def ros_args(self, params_file: str | Path) -> list[str]:
        """Command-line ROS arguments equivalent to the launch action."""
        args = ['--ros-args', '-r', f'__node:={self.name}', '--log-file-name', self.log_name]
        if self.namespace:
            args += ['-r', f'__ns:={self.namespace}']
        args += ['--params-file', str(params_file)]
        for key, value in self.parameters.items():
            args += ['-p', f'{key}:={_param_text(value)}']
        return args


@dataclass(frozen=True)
class Respawn:
    """Restart a drone node, or the ground station node, that dies (a non-zero exit code or
    a signal) after ``delay_s`` seconds, at most ``max_restarts`` times; ``enabled`` false:
    never. A clean exit is never restarted. The station comes back resuming from its
    checkpoint in its output_dir (fl_uav.fleet.station_checkpoint), if it wrote one. The
    launch files (fl_uav.ros.respawn) and ``fl-uav sim`` apply it alike."""

    enabled: bool = True
    delay_s: float = 2.0
    max_restarts: int = 5


def _param_text(value: Any) -> str:
    """A value as ROS parses ``-p key:=value`` (YAML): JSON scalars, plain strings."""
    if isinstance(value, str):
        return value if value else "''"
    return json.dumps(value)


def merged_parameters(config_files: Sequence[str | Path],
                      overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Read config files in order, apply overrides, validate; returns dotted keys."""
    flat: dict[str, Any] = {}
    for path in config_files:
        flat.update(read_params_file(path))
    flat.update(overrides)
    build_config(FleetConfig, flat)
    return flat


def mode_overrides(mode: str | None, num_drones: int, num_clients: int | None,
                   overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The keys ``--mode`` / ``mode:=`` sets, for ``fl-uav sim`` and the launch file alike.

    express: the drones are FedEx's transporters (``express.num_uavs`` = num_drones), the
    station applies FedEx's rule (``aggregation.strategy`` fedex_sync, or fedex_async with
    ``express.mode=async`` in ``overrides``, unless given there) and ``num_clients`` ground
    clients are started. ``num_clients`` without
    express is a ConfigError.
    """
    given = dict(overrides or {})
    keys: dict[str, Any] = {}
    if mode:
        keys['mode'] = mode
    if mode == 'express':
        keys['express.num_uavs'] = num_drones
        if 'aggregation.strategy' not in given:
            keys['aggregation.strategy'] = f'fedex_{given.get("express.mode", "sync")}'
        if num_clients is not None:
            keys['ground_clients.num_clients'] = num_clients
    elif num_clients is not None:
        raise ConfigError('the number of ground clients needs mode express')
    return keys


def write_params_file(flat: Mapping[str, Any], path: str | Path) -> Path:
    """Write dotted keys as a ROS 2 parameter file (``/**: ros__parameters:``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': dict(flat)}}, sort_keys=True))
    return path


def sim_autopilot_config(config: FleetConfig) -> AutopilotSimConfig:
    """The simulator's config as the autopilot_sim node builds it: ``autopilot.*`` with one
    vehicle per drone, vehicle i on drone i's port (ValueError if autopilot.* does not fit
    the fleet, e.g. home_positions_enu_m for another number of drones)."""
    return dataclasses.replace(config.autopilot, num_vehicles=config.num_drones,
                               remote_base_port=config.flight.port_base)


def check_sim_homes(config: FleetConfig) -> None:
    """ConfigError unless every drone's simulated home (autopilot.home_east_m, home_north_m,
    home_spacing_m, home_row_size, or home_positions_enu_m) lies inside the drones' geofence:
    a drone whose home is outside refuses to arm (DronePilot), so it would fly nothing all
    run; said at start, naming the drone, its home and the fence."""
    try:
        autopilot = sim_autopilot_config(config)
    except ValueError as exc:
        raise ConfigError(f'autopilot.* does not fit {config.num_drones} drones: {exc} (fl-uav '
                          f'sim --port-base P binds the simulator at P + 1000)') from None
    fence = config.geofence_enu()
    for drone in range(config.num_drones):
        east_m, north_m = autopilot.home_enu_m(drone)
        if not fence.contains_en(east_m, north_m):
            raise ConfigError(
                f'drone {drone}: its simulated home (east {east_m:.1f} m, north {north_m:.1f} '
                f'm) is outside its geofence ({fence.describe()}); it would refuse to arm and '
                f'fly nothing. Move the homes inside (autopilot.home_east_m, home_north_m, '
                f'home_spacing_m, home_row_size: {autopilot.home_row_size} per row, or '
                f'home_positions_enu_m) or widen the fence (geofence.*, world.size_m, '
                f'coverage.margin_m)')


def fleet_udp_endpoints(config: FleetConfig, with_simulators: bool = True
                        ) -> dict[tuple[str, int], str]:
    """The UDP (host, port)s the fleet's processes bind, by role: each drone's MAVLink link
    (a ``udpin://`` flight.url_template) and, ``with_simulators``, each simulated
    autopilot's own port."""
    endpoints = {}
    for d in range(config.num_drones):
        url = urlsplit(config.flight.url_for(d))
        if url.scheme == 'udpin' and url.port is not None:
            endpoints[(url.hostname or '0.0.0.0', url.port)] = (
                f"drone {d}'s MAVLink link, flight.port_base + {d}")
        if with_simulators:
            endpoints[(config.autopilot.host, config.autopilot.bind_base_port + d)] = (
                f'simulated autopilot {d}, autopilot.bind_base_port + {d}')
    return endpoints


def busy_udp_ports(endpoints: Mapping[tuple[str, int], str]) -> list[str]:
    """The roles of the UDP (host, port) endpoints another process holds now: each is bound
    and released at once (a port freed later is fine, one taken later is not caught)."""
    busy = []
    for (host, port), role in endpoints.items():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                busy.append(f'UDP {host}:{port} ({role})')
    return busy


def refuse_busy_ports(config: FleetConfig, with_simulators: bool = True) -> None:
    """ConfigError naming every port of the fleet another process holds (another fl-uav sim,
    a PX4 SITL): otherwise the drones start, fail to connect and fly nothing."""
    busy = busy_udp_ports(fleet_udp_endpoints(config, with_simulators))
    if busy:
        raise ConfigError(
            f'{"; ".join(busy)}: in use by another process (another fl-uav sim or a PX4 '
            f'SITL?); choose free ports with --port-base P (drone i uses P + i, its simulated '
            f'autopilot P + 1000 + i; with ros2 launch: flight.port_base, '
            f'autopilot.remote_base_port and autopilot.bind_base_port)')


def check_fleet_start(config: FleetConfig, with_simulators: bool = True) -> None:
    """The checks before a fleet starts, for ``fl-uav sim`` and ``ros2 launch fl_uav
    fleet_sim.launch.py`` alike (ConfigError naming the problem): every simulated home
    inside the geofence (:func:`check_sim_homes`) and no fleet port held by another process
    (:func:`refuse_busy_ports`). ``with_simulators`` false (real PX4 SITL): only the drones'
    MAVLink ports; the simulators' homes and ports are not used."""
    if with_simulators:
        check_sim_homes(config)
    refuse_busy_ports(config, with_simulators)


def fleet_plan(config: FleetConfig, output_dir: str | Path | None = None,
               exit_on_finish: bool = True, with_simulators: bool = True,
               resume: str | Path | None = None) -> list[NodeSpec]:
    """autopilot_sim + sim_camera + ground_station + one drone node per UAV (+ in
    ``mode: express`` one ground_client node per FedEx ground client, namespace /gc<j>);
    ``resume``: the directory of the station checkpoint the station goes on from."""
    out = str(output_dir) if output_dir else ''
    specs: list[NodeSpec] = []
    if with_simulators:
        specs.append(NodeSpec('autopilot_sim_node', 'autopilot_sim',
                              parameters={'log_dir': out},
                              stop_grace_s=autopilot_stop_grace_s(
                                  config.flight.shutdown_rtl_timeout_s)))
        if config.mode != 'express':    # express: the drones' cameras are not used
            specs.append(NodeSpec('sim_camera_node', 'sim_camera'))
    specs.append(NodeSpec('ground_station_node', 'ground_station',
                          parameters={'output_dir': out, 'exit_on_finish': exit_on_finish,
                                      **({'resume': str(resume)} if resume else {})}))
    specs += [NodeSpec('drone_node', 'drone', namespace=f'/uav{d}',
                       parameters={'drone_id': d, 'exit_on_finish': exit_on_finish,
                                   'output_dir': out},
                       stop_grace_s=drone_stop_grace_s(config.flight.shutdown_rtl_timeout_s))
              for d in range(config.num_drones)]
    if config.mode == 'express':
        specs += [NodeSpec('ground_client_node', 'ground_client', namespace=f'/gc{j}',
                           parameters={'client_id': j, 'output_dir': out})
                  for j in range(config.ground_clients.num_clients)]
    return specs


def drone_stop_grace_s(shutdown_rtl_timeout_s: float) -> float:
    """How long a drone node may take to exit after SIGINT: stopped in flight it commands a
    return to launch and waits up to flight.shutdown_rtl_timeout_s for the landing, then
    closes its link (ros2 launch's default 5 s would SIGTERM it mid-wait)."""
    return shutdown_rtl_timeout_s + DRONE_SHUTDOWN_MARGIN_S


def autopilot_stop_hold_s(shutdown_rtl_timeout_s: float) -> float:
    """How long the autopilot simulator, stopped while its vehicles fly with their drone nodes
    connected (a Ctrl-C under ros2 launch signals them all at once), goes on simulating at
    most (:class:`fl_uav.autopilot_sim.stop_hold.StopHold`): as long as a drone node may take
    to exit after SIGINT (:func:`drone_stop_grace_s`), a real PX4 outlives its companion's ROS
    nodes."""
    return drone_stop_grace_s(shutdown_rtl_timeout_s)


def autopilot_stop_grace_s(shutdown_rtl_timeout_s: float) -> float:
    """How long the autopilot_sim node may take to exit after SIGINT: its hold
    (:func:`autopilot_stop_hold_s`) plus ros2 launch's default STOP_GRACE_S to stop and write
    its event log (a shorter sigterm_timeout would cut the drones' return)."""
    return autopilot_stop_hold_s(shutdown_rtl_timeout_s) + STOP_GRACE_S


def drone_file_stop_grace_s(config_file: str | Path) -> float:
    """:func:`drone_stop_grace_s` for a drone's parameter file (flight.shutdown_rtl_timeout_s
    from the file, else its default); a bad file or value is the ConfigError the node would
    stop with."""
    flat = read_params_file(config_file)
    return drone_stop_grace_s(build_config(FleetConfig, flat).flight.shutdown_rtl_timeout_s)


def run_keys(out: Path, flat: Mapping[str, Any], overrides: Mapping[str, Any]
             ) -> dict[str, Any]:
    """Signed frames in the embedded fleet: unless security.keys_dir is set, fresh keys for
    this run in DIR/keys (the previous run's removed; in ``mode: express`` the ground
    clients' too, so the visit frames are signed) and security.require_signatures true
    (unless a --set override says otherwise: config files are not asked, since
    config/fleet.yaml's false is meant for real fleets without keys). Returns the keys to add
    to the parameters."""
    if flat.get('security.keys_dir'):
        return {}
    keys_dir = out / KEYS_DIR
    for suffix in (PRIVATE_SUFFIX, PUBLIC_SUFFIX):
        for stale in keys_dir.glob(f'*{suffix}'):
            stale.unlink()
    express = flat.get('mode', FleetConfig.mode) == 'express'
    num_clients = int(flat.get('ground_clients.num_clients',
                               GroundClientConfig.num_clients)) if express else 0
    generate_fleet_keys(keys_dir, int(flat.get('num_drones', FleetConfig.num_drones)),
                        num_clients)
    return {'security.keys_dir': str(keys_dir.resolve()), 'security.require_signatures':
            overrides.get('security.require_signatures', True)}


def run_mavlink_keys(out: Path, flat: Mapping[str, Any], with_simulators: bool = True
                     ) -> dict[str, Any]:
    """A signed autopilot link in the embedded fleet: with flight.mavlink_signing and no
    flight.mavlink_key_file, a fresh key per drone for this run in DIR/keys/mavlink and the
    same in each simulated autopilot's storage DIR/autopilot_state (as provisioned); returns
    the keys to add to the parameters. Real PX4 SITL (``with_simulators`` false) holds no key
    of ours: its link stays unsigned (flight.mavlink_signing false) unless a key file is given
    (provisioned by ``fl-uav mavlink-key provision``)."""
    signing = flat.get('flight.mavlink_signing', FlightConfig.mavlink_signing)
    if not signing or flat.get('flight.mavlink_key_file'):
        return {}
    if not with_simulators:
        return {'flight.mavlink_signing': False}
    from fl_uav.fleet.mavlink_keys import make_sim_keys  # pymavlink: only where keys are made

    state_dir = (out / AUTOPILOT_STATE_DIR).resolve()
    pattern = make_sim_keys(out / KEYS_DIR / MAVLINK_KEYS_DIR, state_dir,
                            int(flat.get('num_drones', FleetConfig.num_drones)))
    return {'flight.mavlink_key_file': pattern, 'autopilot.state_dir': str(state_dir)}


def launch_parameters(config_file: str | Path, overrides: Mapping[str, Any],
                      run_dir: str | Path, with_simulators: bool = True) -> dict[str, Any]:
    """The fleet's parameters for ``ros2 launch fl_uav fleet_sim.launch.py``: the config file
    with the launch arguments' overrides, checked as ``fl-uav sim`` checks them before
    anything is written (:func:`check_fleet_start`, ConfigError), signed as it signs
    (:func:`run_keys`: fresh keys in ``run_dir``/keys and signatures required, unless the
    config names keys; :func:`run_mavlink_keys`: the autopilot links signed)."""
    flat = merged_parameters([config_file], overrides)
    check_fleet_start(build_config(FleetConfig, flat), with_simulators)
    flat.update(run_keys(Path(run_dir), flat, overrides))
    flat.update(run_mavlink_keys(Path(run_dir), flat, with_simulators))
    return flat


def launch_int(name: str, text: str, minimum: int = 0) -> int:
    """A launch argument ``name:=text`` that must be an integer >= ``minimum`` (ConfigError
    naming the argument: ros2 launch then ends with that one line, before any node starts)."""
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f'launch argument {name}:={text!r}: expected an integer '
                          f'>= {minimum}') from None
    if value < minimum:
        raise ConfigError(f'launch argument {name}:={value}: must be >= {minimum}')
    return value


def launch_float(name: str, text: str, minimum: float = 0.0) -> float:
    """A launch argument ``name:=text`` that must be a number >= ``minimum`` (ConfigError
    naming the argument otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f'launch argument {name}:={text!r}: expected a number '
                          f'>= {minimum:g}') from None
    if not value >= minimum:       # NaN too
        raise ConfigError(f'launch argument {name}:={value:g}: must be >= {minimum:g}')
    return value


def launch_bool(name: str, text: str) -> bool:
    """A launch argument ``name:=true|false`` (ConfigError naming it otherwise)."""
    if text.lower() not in ('true', 'false'):
        raise ConfigError(f'launch argument {name}:={text!r}: expected true or false')
    return text.lower() == 'true'


def launch_config_file(name: str, text: str, default: Path) -> Path:
    """A launch argument naming a config file: ``default`` when empty, else a file that
    exists (ConfigError naming the argument and the path)."""
    path = Path(text) if text else default
    if not path.is_file():
        raise ConfigError(f'launch argument {name}:={str(path)!r}: no such config file')
    return path


def station_resume_argv(node_argv: Sequence[str], output_dir: str | Path) -> tuple[str, ...]:
    """The restarted station's command: its own, resuming from the checkpoint in its output
    directory if there is one (else unchanged: a station that died before closing a round
    starts a new run, which the drones join)."""
    if not output_dir or not (Path(output_dir) / STATION_CHECKPOINT_FILE).is_file():
        return tuple(node_argv)
    return (*node_argv, '-p', f'resume:={output_dir}')
