"""The ``fl-uav`` command."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fl_uav.config_reference import ALL_TARGETS, TARGET_NAMES
from fl_uav.configschema import ConfigError, parse_override

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / 'config' / 'fleet.yaml'


def _config_default() -> list[Path]:
    if DEFAULT_CONFIG.is_file():
        return [DEFAULT_CONFIG]
    try:
        from ament_index_python.packages import get_package_share_directory
        return [Path(get_package_share_directory('fl_uav')) / 'config' / 'fleet.yaml']
    except (ImportError, LookupError, OSError):
        return []


def sim_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys ``fl-uav sim``'s options set: each --set, then the options' own."""
    from fl_uav.fleet_run.launch_plan import mode_overrides

    overrides = dict(parse_override(text) for text in args.set)
    overrides['num_drones'] = args.drones
    overrides['rounds.num_rounds'] = args.rounds
    overrides.update(mode_overrides(args.mode, args.drones, args.clients, overrides))
    if args.time_factor is not None:
        overrides['autopilot.time_factor'] = args.time_factor
    if args.port_base is not None:
        overrides['flight.port_base'] = args.port_base
        overrides['autopilot.remote_base_port'] = args.port_base
        overrides['autopilot.bind_base_port'] = args.port_base + 1000
    return overrides


def _sim(args: argparse.Namespace) -> int:
    from fl_uav.fleet_run.launch_plan import Respawn
    from fl_uav.fleet_run.run import RECORDING_DIR, FleetRunOptions, run_fleet
    from fl_uav.fleet_run.run import SUMMARY_FILE as SIM_SUMMARY_FILE

    overrides = sim_overrides(args)
    out = Path(args.out)
    _check_out_dir(out)
    resuming_here = args.resume is not None and args.resume.resolve() == out.resolve()
    if (out / SIM_SUMMARY_FILE).is_file() and not args.overwrite and not resuming_here:
        print(f'fl-uav: {out} holds a fleet run already ({SIM_SUMMARY_FILE}): --overwrite '
              f'replaces it, or choose another --out', file=sys.stderr)
        return 1
    bag = out / RECORDING_DIR     # a run's start removes it: never a bag without --overwrite
    if bag.exists() and not args.overwrite and (not bag.is_dir() or any(bag.iterdir())):
        print(f'fl-uav: {bag} holds a recording already (a run that never wrote its '
              f'{SIM_SUMMARY_FILE}, or fl-uav record): --overwrite replaces it, or choose '
              'another --out', file=sys.stderr)
        return 1
    with _terminate_as_interrupt():    # SIGTERM stops the fleet's processes as Ctrl-C does
        summary = run_fleet(FleetRunOptions(
            config_files=args.config or _config_default(), overrides=overrides,
            out_dir=out, timeout_s=args.timeout, domain_id=args.domain_id,
            record=args.record, respawn=Respawn(enabled=args.max_restarts > 0,
                                                delay_s=args.respawn_delay,
                                                max_restarts=args.max_restarts),
            resume=args.resume))
    return sim_exit_code(summary)


def sim_exit_code(summary: dict[str, Any]) -> int:
    """``fl-uav sim``'s exit code: 0 finished; 1 the run failed, timed out or was interrupted;
    RECORDING_INCOMPLETE_EXIT (3) finished, but the --record bag is incomplete."""
    from fl_uav.fleet_run.recorder_watch import RECORDING_INCOMPLETE_EXIT

    if summary['status'] != 'finished':
        return 1
    if not summary.get('recording', {'complete': True})['complete']:
        return RECORDING_INCOMPLETE_EXIT
    return 0


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``timeout``, SLURM, ``kill``) ends the block as Ctrl-C does, raising
    KeyboardInterrupt, so a run writes its summary (status interrupted) and can be resumed.
    Only the first SIGTERM: later ones are ignored while the partial results are written."""
    def interrupt(signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _keygen(args: argparse.Namespace) -> int:
    from fl_uav.fleet.keys import generate_fleet_keys

    _check_out_dir(Path(args.out))
    try:
        written = generate_fleet_keys(args.out, args.drones, args.ground_clients)
    except (FileExistsError, ValueError) as exc:
        print(f'fl-uav: {exc}', file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


def _mavlink_key_new(args: argparse.Namespace) -> int:
    from fl_uav.vehicle.mavlink_signing import generate_key, passphrase_key, write_key_file

    if args.passphrase_stdin:
        passphrase = sys.stdin.readline().rstrip('\n')
        if not passphrase or not passphrase.isascii():
            print('fl-uav: --passphrase-stdin: expected one line of ASCII text on stdin',
                  file=sys.stderr)
            return 1
        key = passphrase_key(passphrase)
    else:
        key = generate_key()
    try:
        path = write_key_file(args.path, key, overwrite=args.overwrite)
    except FileExistsError:
        print(f'fl-uav: {args.path} exists already: not overwritten (--overwrite replaces it; '
              'the autopilot then needs the new key too)', file=sys.stderr)
        return 1
    except OSError as exc:
        print(f'fl-uav: {args.path}: {exc.strerror}', file=sys.stderr)
        return 1
    print(f'{path}: MAVLink signing key (mode 0600). Put it on the autopilot over a wired link: '
          f'fl-uav mavlink-key provision --key {path} --url serial:///dev/ttyACM0:57600; then '
          'set flight.mavlink_key_file to it on the drone')
    return 0


def _mavlink_key_provision(args: argparse.Namespace) -> int:
    from fl_uav.vehicle.mavlink_provision import ProvisionError, provision_key
    from fl_uav.vehicle.mavlink_signing import SigningError, read_key_file
    from fl_uav.vehicle.mavlink_signing_relay import parse_link_url

    try:
        parse_link_url(args.url)
        key = read_key_file(args.key)
        current = read_key_file(args.current_key) if args.current_key else None
    except (ValueError, SigningError) as exc:
        print(f'fl-uav: {exc}', file=sys.stderr)
        return 1
    try:
        done = provision_key(args.url, key, current_key=current,
                             target_system=args.target_system, timeout_s=args.timeout)
    except (ProvisionError, OSError) as exc:
        print(f'fl-uav: {exc}', file=sys.stderr)
        return 1
    print(f'system {done.system_id} (component {done.component_id}) on {args.url} signs with '
          f'{args.key} now (before: {done.before}); it drops unsigned commands from here on')
    return 0


def _experiment(args: argparse.Namespace) -> int:
    from fl_uav.engine.allocator import (
        collector_paused_for_imports,
        keep_large_allocations,
        skip_exit_collection,
    )

    with collector_paused_for_imports() as fresh_process:
        from fl_uav.engine.config import ExperimentConfig
        from fl_uav.engine.experiment import run_experiment
        from fl_uav.engine.results import (
            ExperimentError,
            read_run_config,
            recorded_run_files,
        )
    from fl_uav.configschema import build_config, read_params_file

    if args.out and args.resume:
        raise ConfigError('give --out DIR for a new run or --resume DIR to continue one, '
                          'not both')
    if not (args.out or args.resume):
        raise ConfigError('give --out DIR for a new run (or --resume DIR to continue one)')
    out = Path(args.out or args.resume)
    if args.config is None and args.resume is None:
        raise ConfigError('give a CONFIG file (config/experiments/<name>.yaml)')
    _check_out_dir(out)
    if args.out and not args.overwrite and recorded_run_files(out):
        print(f'fl-uav: {out} holds a run already ({", ".join(recorded_run_files(out))}): '
              f'--resume {out} continues it, --overwrite starts it over (its results are '
              f'replaced), or choose another --out', file=sys.stderr)
        return 1
    try:
        # A resumed run reads its own keys unless a CONFIG is given (then they must agree).
        flat = read_run_config(out) if args.config is None else read_params_file(args.config)
        flat.update(dict(parse_override(text) for text in args.set))
        config = build_config(ExperimentConfig, flat)
        keep_large_allocations()   # the trainer's big buffers reused, not mapped afresh
        with _terminate_as_interrupt():
            summary = run_experiment(config, out, resume=args.resume is not None)
    except ExperimentError as exc:
        print(f'fl-uav: {exc}', file=sys.stderr)
        return 1
    finally:
        if fresh_process:      # the command is about to exit
            skip_exit_collection()
    warnings = summary.get('warnings') or []
    print(f'{summary["status"]}: {summary["rounds_completed"]} rounds, final accuracy '
          f'{summary["final_accuracy"]}, simulated {summary["sim_time_s"]:.1f} s, '
          f'wall {summary["wall_s"]:.1f} s; results in {out}'
          + (f'; {len(warnings)} warning(s), above and in summary.json' if warnings else ''))
    # A diverged run still ran as configured (a result, e.g. one point of an lr sweep): its
    # warnings are in summary.json, the exit code says whether the run completed.
    return 0 if summary['status'] == 'finished' else 1


MAX_ROS_DOMAIN_ID = 232
"""The largest ROS 2 domain ID whose DDS ports fit in 16 bits (REP 2005 / ROS 2 docs)."""


def _non_negative(text: str) -> float:
    """A number >= 0 for argparse (its error names the bad value)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise argparse.ArgumentTypeError(f'{text!r} is not a number >= 0')
    return value


def _non_negative_int(text: str) -> int:
    """An integer >= 0 for argparse (its error names the bad value)."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f'{text!r} is not an integer >= 0')
    return int(text)


def _domain_id(text: str) -> int:
    """A ROS_DOMAIN_ID for argparse (its error names the bad value)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_ROS_DOMAIN_ID:
        raise argparse.ArgumentTypeError(
            f'{text!r} is not a ROS 2 domain ID in [0, {MAX_ROS_DOMAIN_ID}] (0-101 keep clear of '
            'Linux ephemeral ports)')
    return value


def _fractions(text: str) -> tuple[float, ...]:
    """``0.6,0.7`` -> (0.6, 0.7), for argparse (its error names the bad value)."""
    try:
        return tuple(float(part) for part in text.split(','))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f'{text!r} is not a comma-separated list of '
                                         f'accuracies such as 0.6,0.7') from exc


def _compare(args: argparse.Namespace) -> int:
    from fl_uav.engine.compare import compare_runs
    from fl_uav.engine.results import ExperimentError

    try:
        print(compare_runs([Path(d) for d in args.dirs], Path(args.out), args.target,
                           args.targets))
    except ExperimentError as exc:
        print(f'fl-uav: {exc}', file=sys.stderr)
        return 1
    return 0


def _plan(args: argparse.Namespace) -> int:
    import json

    from fl_uav.configschema import build_config, read_params_file
    from fl_uav.planning.coverage import PlanInfeasibleError
    from fl_uav.planning.plan_plots import plot_routes, plot_trajectory
    from fl_uav.planning.plan_request import (
        PlanConfig,
        plan_routes_request,
        plan_trajectory_request,
    )

    flat = read_params_file(args.config)
    flat.update(dict(parse_override(text) for text in args.set))
    config = build_config(PlanConfig, flat)
    out = Path(args.out)
    _check_out_dir(out)      # before the planning, which may take minutes
    try:
        if config.kind == 'trajectory':
            outcome = plan_trajectory_request(config)
            written = plot_trajectory(outcome, _mkdir(out))
        else:
            outcome = plan_routes_request(config)
            written = plot_routes(outcome, _mkdir(out))
    except PlanInfeasibleError as exc:
        print(f'fl-uav: infeasible plan: {exc}', file=sys.stderr)    # '<cause>: <numbers>'
        return 1
    summary = out / f'{config.kind}.json'
    summary.write_text(json.dumps(outcome.figures, indent=2))
    for path in [*written, summary]:
        print(path)
    return 0


def _record(args: argparse.Namespace) -> int:
    from fl_uav.fleet.recording import (
        BagWriter,
        RecordingError,
        StopSignals,
        TopicSelection,
        check_new_bag,
        format_summary,
        nothing_recorded,
    )

    out = Path(args.out)
    try:     # a bad pattern or --out stops here, before ROS starts and before anything is written
        selection = TopicSelection(topics=args.topics, exclude=args.exclude,
                                   record_all=args.all)
        check_new_bag(out)
    except RecordingError as exc:
        print(f'fl-uav: {exc}', file=sys.stderr)
        return 1
    from fl_uav.ros.recorder_node import record  # rclpy's import: before the bag is opened

    # From the bag's creation on, SIGINT and SIGTERM only ask to stop: the bag is closed.
    with StopSignals() as stop:
        try:
            writer = BagWriter(out)
            summary = record(writer, selection, duration_s=args.duration,
                             domain_id=args.domain_id, stop=stop)
        except (RecordingError, OSError) as exc:     # e.g. the disk full
            print(f'fl-uav: recording into {out} failed: {exc}', file=sys.stderr)
            return 1
    print(format_summary(summary))
    if not summary['topics']:
        domain = (args.domain_id if args.domain_id is not None
                  else os.environ.get('ROS_DOMAIN_ID', '0'))
        print(f'fl-uav: nothing recorded: '
              f'{nothing_recorded(selection, summary["not_selected"], domain)}; {out} is an '
              'empty bag', file=sys.stderr)
        return 1
    return 0


def _map(args: argparse.Namespace) -> int:
    from fl_uav.configschema import build_config
    from fl_uav.fleet.config import FleetConfig
    from fl_uav.fleet_run.launch_plan import merged_parameters
    from fl_uav.world.landcover import MapFileError
    from fl_uav.world.raster import raster_report

    overrides = dict(parse_override(text) for text in args.set)
    overrides['world.map_file'] = str(args.file)
    config = build_config(FleetConfig, merged_parameters(args.config or _config_default(),
                                                         overrides))
    try:
        text, covered = raster_report(args.file, config.world, config.autopilot.origin,
                                      config.geofence_enu().box)
    except (OSError, MapFileError) as exc:
        print(f'fl-uav: {exc}', file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0 if covered else 1


def _gz_world(args: argparse.Namespace) -> int:
    from fl_uav.configschema import build_config
    from fl_uav.fleet.config import FleetConfig
    from fl_uav.fleet.world_setup import world_map
    from fl_uav.fleet_run.launch_plan import merged_parameters
    from fl_uav.world.gz_world import MAX_PNG_BYTES, write_world

    overrides = dict(parse_override(text) for text in args.set)
    config = build_config(FleetConfig, merged_parameters(args.config or _config_default(),
                                                         overrides))
    origin = config.autopilot.origin
    world = world_map(config.world, origin, config.geofence_enu().box)
    try:
        sdf, png = write_world(args.out, world, config.autopilot.origin_lat_deg,
                               config.autopilot.origin_lon_deg,
                               config.autopilot.origin_alt_amsl_m, stride=args.stride)
    except ValueError as exc:
        raise ConfigError(f'--stride {args.stride}: {exc}') from None
    size = png.stat().st_size
    metres = world.resolution_m * args.stride
    print(f'{sdf}\n{png} ({size / 1e6:.1f} MB, {metres:g} m per pixel)')
    if size > MAX_PNG_BYTES:
        print(f'fl-uav: the texture is {size / 1e6:.1f} MB: raise --stride to ship it',
              file=sys.stderr)
    return 0


def _keys(args: argparse.Namespace) -> int:
    from fl_uav.config_reference import reference

    sys.stdout.write(reference(args.target, args.section, markdown=args.markdown))
    return 0


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _check_out_dir(path: Path) -> None:
    """ConfigError naming --out unless ``path`` is a directory or can be made one (nothing
    is created here: an infeasible plan writes nothing)."""
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f'--out {str(path)!r}: {str(existing)!r} is not a directory')
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f'--out {str(path)!r}: directory {str(existing)!r} is not writable')


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``fl-uav``."""
    parser = argparse.ArgumentParser(prog='fl-uav', description='Federated learning on UAV '
                                     'fleets over ROS 2 and MAVLink.')
    sub = parser.add_subparsers(dest='command', required=True)
    sim = sub.add_parser('sim', help='run the embedded fleet (autopilot sim, camera sim, '
                         'ground station, drones) end to end')
    sim.add_argument('--drones', type=int, default=4, help='number of drones (default 4)')
    sim.add_argument('--rounds', type=int, default=10, help='FL rounds (default 10)')
    sim.add_argument('--out', required=True, help='output directory')
    sim.add_argument('--config', action='append', type=Path,
                     help='ROS 2 parameter file(s), later ones win (default config/fleet.yaml)')
    sim.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                     help='override one config key, e.g. --set learning.lr=0.02')
    sim.add_argument('--mode', choices=('standard', 'express'),
                     help='standard: drones train on their cameras; express: FedEx, the '
                     "drones ferry the model to ground clients (default: the config's mode)")
    sim.add_argument('--clients', type=int, help='express: number of ground clients')
    sim.add_argument('--time-factor', type=float, help='autopilot sim speed-up')
    sim.add_argument('--port-base', type=int, metavar='P',
                     help='MAVLink UDP port of drone 0: drone i uses P+i, its simulated '
                     'autopilot P+1000+i (default 14540, autopilots 14580+i)')
    sim.add_argument('--domain-id', type=_domain_id,
                     help="ROS_DOMAIN_ID of the fleet (default: random 1..101; the shell's "
                     'ROS_DOMAIN_ID is not used)')
    sim.add_argument('--timeout', type=float, default=1800.0, help='give up after seconds')
    sim.add_argument('--overwrite', action='store_true', help='replace a fleet run that '
                     '--out holds already')
    sim.add_argument('--record', action='store_true', help='record the run into OUT/bag '
                     '(fl-uav record: rosbag2 with MCAP storage, for Foxglove and ros2 bag '
                     'play); a recorder that dies is reported at once, the run goes on and '
                     'exits with code 3')
    sim.add_argument('--respawn-delay', type=_non_negative, default=2.0, metavar='S',
                     help='a drone node that dies (a crash, a kill) is restarted after S '
                     'seconds and rejoins the run; so is the ground station, which resumes '
                     'from its checkpoint in OUT (default 2)')
    sim.add_argument('--max-restarts', type=_non_negative_int, default=5, metavar='N',
                     help='restarts per drone or station node at most (default 5; 0: a node '
                     'that dies ends the run as failed)')
    sim.add_argument('--resume', type=Path, metavar='DIR',
                     help='go on with the run whose station checkpoint DIR holds (a run '
                     'directory, e.g. --out of a run that stopped): same run id, from the '
                     "round after the last one closed, with DIR's keys; DIR may be --out")
    sim.set_defaults(func=_sim)
    keygen = sub.add_parser('keygen', help='write Ed25519 key pairs for the ground station, '
                            'each drone and each express ground client (security.keys_dir; '
                            'private keys mode 0600)')
    keygen.add_argument('--out', required=True, help='directory to write the keys to')
    keygen.add_argument('--drones', type=int, required=True, help='number of drones')
    keygen.add_argument('--ground-clients', type=int, default=0,
                        help='mode express: number of ground clients (gc<j>.key/.pub, '
                        'j < M; default 0)')
    keygen.set_defaults(func=_keygen)
    mkey = sub.add_parser('mavlink-key', help="MAVLink 2 signing of the drone's autopilot link: "
                          'make a key, put it on the autopilot (PX4 >= 1.17)')
    mkey_sub = mkey.add_subparsers(dest='mavlink_key_command', required=True)
    mkey_new = mkey_sub.add_parser('new', help='write a new random 32-byte key (64 hex digits, '
                                   'mode 0600) for flight.mavlink_key_file')
    mkey_new.add_argument('path', type=Path, help='key file to write')
    mkey_new.add_argument('--passphrase-stdin', action='store_true',
                          help='derive the key from a passphrase read from stdin (SHA-256, as '
                          "MAVProxy's signing setup does) instead of a random one")
    mkey_new.add_argument('--overwrite', action='store_true', help='replace an existing file')
    mkey_new.set_defaults(func=_mavlink_key_new)
    mkey_prov = mkey_sub.add_parser(
        'provision', help='send the key to the autopilot with SETUP_SIGNING and wait until it '
        'signs with it (do it over USB or another wired link, disarmed)')
    mkey_prov.add_argument('--key', type=Path, required=True, help='the key file (mavlink-key '
                           'new)')
    mkey_prov.add_argument('--url', required=True, help='the link: serial:///dev/ttyACM0:57600 '
                           '(USB), udpin://HOST:PORT or udpout://HOST:PORT')
    mkey_prov.add_argument('--current-key', type=Path, metavar='PATH',
                           help='the key the autopilot has now, to change it (PX4 takes a new '
                           'key only signed with the current one)')
    mkey_prov.add_argument('--target-system', type=int, metavar='N',
                           help="the autopilot's MAVLink system id (default: the first heard)")
    mkey_prov.add_argument('--timeout', type=float, default=15.0, metavar='S',
                           help='give up after S seconds (default 15)')
    mkey_prov.set_defaults(func=_mavlink_key_provision)
    exp = sub.add_parser('experiment', help='run an in-process experiment on a simulated clock')
    exp.add_argument('config', type=Path, nargs='?',
                     help='config/experiments/<name>.yaml (with --resume: default the '
                     "run's own config.json)")
    exp.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                     help='override one config key, e.g. --set num_drones=100')
    exp.add_argument('--out', help='output directory')
    exp.add_argument('--resume', metavar='DIR', help='continue the run in DIR from its '
                     'last checkpoint (--set num_rounds=N to run it longer)')
    exp.add_argument('--overwrite', action='store_true', help='with --out: start over in a '
                     'directory that holds a run (its results are replaced)')
    exp.set_defaults(func=_experiment)
    cmp_ = sub.add_parser('compare', help='overlay experiment runs in one plot and one table')
    cmp_.add_argument('dirs', nargs='+', help='experiment output directories')
    cmp_.add_argument('--out', default='comparison',
                      help='where to write the plots and table (default: ./comparison)')
    cmp_.add_argument('--target', type=float, default=None,
                      help='accuracy for the energy-to-target column (default: the '
                      'target_accuracy of each run)')
    cmp_.add_argument('--targets', type=_fractions, default=(), metavar='T1,T2,...',
                      help="add a table of each run's energy and round to each of these "
                      'accuracies, e.g. --targets 0.6,0.7,0.75')
    cmp_.set_defaults(func=_compare)
    plan = sub.add_parser('plan', help='plan a 2CEOAFL trajectory or FedEx routes from a config '
                          'and write PNG plots and a JSON of the figures')
    plan.add_argument('config', type=Path, help='config/plans/<name>.yaml')
    plan.add_argument('--out', required=True, help='output directory')
    plan.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                      help='override one config key, e.g. --set trajectory.num_rounds=20')
    plan.set_defaults(func=_plan)
    rec = sub.add_parser('record', help="record the fleet's topics into a rosbag2 directory "
                         'with MCAP storage (Foxglove; ros2 bag play for rviz)')
    rec.add_argument('--out', required=True, help='bag directory to create (must not exist)')
    rec.add_argument('--domain-id', type=_domain_id,
                     help="ROS_DOMAIN_ID to record (default: the shell's ROS_DOMAIN_ID)")
    rec.add_argument('--duration', type=float, metavar='S',
                     help='stop after S seconds (default: at Ctrl-C or SIGTERM)')
    rec.add_argument('--all', action='store_true', help='every topic, the model frames, '
                     'express frames and camera images included')
    rec.add_argument('--topics', metavar='REGEX', help='only topics whose whole name matches '
                     "REGEX (bulky ones too), e.g. '/uav[0-9]+/pose|/fl/markers'")
    rec.add_argument('--exclude', metavar='REGEX', help='never topics whose whole name '
                     'matches REGEX')
    rec.set_defaults(func=_record)
    map_ = sub.add_parser('map', help="describe a land-cover raster (GeoTIFF) for world.map_file: "
                          'CRS, extent, pixel size, code histogram and class mapping, and how '
                          "it sits against the fleet's geofence (exit 1 if it does not cover it)")
    map_.add_argument('file', type=Path, help='the raster (GeoTIFF or another GDAL format)')
    map_.add_argument('--config', action='append', type=Path,
                      help='ROS 2 parameter file(s) giving world.*, autopilot.origin_*, '
                      'geofence.*, later ones win (default config/fleet.yaml)')
    map_.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                      help='override one config key, e.g. --set autopilot.origin_lat_deg=47.4')
    map_.set_defaults(func=_map)
    gzw = sub.add_parser('gz-world', help="write the Gazebo world of the fleet config's "
                         'land-cover map: the SDF and its ground texture, the one the embedded '
                         'camera renders from (sim/README.md)')
    gzw.add_argument('--out', type=Path, default=Path('sim/worlds'),
                     help='directory for fl_uav_landcover.sdf and '
                     'landcover_ground/materials/textures/landcover.png (default sim/worlds)')
    gzw.add_argument('--config', action='append', type=Path,
                     help='ROS 2 parameter file(s) giving world.* and autopilot.origin_*, later '
                     'ones win (default config/fleet.yaml)')
    gzw.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                     help='override one config key, e.g. --set world.seed=3')
    gzw.add_argument('--stride', type=int, default=2, metavar='K',
                     help='one texture pixel per K x K map cells (default 2: 1 m per pixel '
                     'with 0.5 m cells)')
    gzw.set_defaults(func=_gz_world)
    keys = sub.add_parser('keys', help='list every config key of a target: default, type or '
                          'choices, and meaning (docs/config_reference.md)')
    keys.add_argument('target', choices=(*TARGET_NAMES, ALL_TARGETS),
                      help="fleet (fl-uav sim, ros2 launch), experiment, plan, or a node's own "
                      'parameters (drone-node, station-node, autopilot-node, camera-node); all: '
                      'every target')
    keys.add_argument('--section', metavar='S', help='only the keys of section S, e.g. learning '
                      '(learning.*), or one top-level key')
    keys.add_argument('--markdown', action='store_true', help='Markdown tables instead of text '
                      '(all --markdown writes docs/config_reference.md)')
    keys.set_defaults(func=_keys)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f'fl-uav: config error: {exc}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
