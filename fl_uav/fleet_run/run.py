"""``fl-uav sim``: run the embedded fleet end to end and write DIR/summary.json.

Starts the node set of :func:`fl_uav.fleet_run.launch_plan.fleet_plan` as processes on a private
ROS_DOMAIN_ID with localhost-only discovery, prints a line per closed round, stops every
process it started on exit or Ctrl-C, and writes the summary and the accuracy plot. Frames
are signed with keys made for the run (DIR/keys) and the nodes require signatures; with
flight.mavlink_signing (config/fleet.yaml) each drone's autopilot link is signed too, with a key
made for the run (DIR/keys/mavlink) that its simulated autopilot holds (DIR/autopilot_state).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fl_uav.aggregation.robust import OUTLIER_FACTOR
from fl_uav.configschema import ConfigError, build_config, to_flat
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.messages import REPLAY
from fl_uav.fleet.onboard_planner import record_file_name
from fl_uav.fleet.recording import READY_LINE
from fl_uav.fleet.run_log import (
    PROGRESS_FILE,
    STATION_CHECKPOINT_FILE,
    STATION_CHECKPOINT_MANIFEST,
    STATION_REPORT_FILE,
    read_progress,
)
from fl_uav.fleet_run.launch_plan import (
    KEYS_DIR,
    NodeSpec,
    Respawn,
    check_fleet_start,
    fleet_plan,
    merged_parameters,
    run_keys,
    run_mavlink_keys,
    station_resume_argv,
    write_params_file,
)
from fl_uav.fleet_run.launcher import ProcessGroup, Respawner, RunningNode, ros_environment
from fl_uav.fleet_run.recorder_watch import RecorderWatch, recording_summary
from fl_uav.planning.trajectory import class_balance
from fl_uav.plugins import plugin_sources

AUTOPILOT_LOG_FILE = 'autopilot_log.json'
CLIENT_LOG_DIR = 'ground_clients'      # ground_client nodes' logs: gc<j>.json
# Nodes that run until the launcher stops them: their exit is a failure.
_SERVICE_NODES = ('autopilot_sim_node', 'sim_camera_node', 'ground_client_node')
#: stopped once every other node has ended: a drone node shut down in flight commands its
#: (simulated) autopilot to return to launch and waits for the landing
_STOPPED_LAST = ('autopilot_sim_node',)
SUMMARY_FILE = 'summary.json'
PLOT_FILE = 'accuracy.png'
RECORDING_DIR = 'bag'     # --record: the run's rosbag2 directory (MCAP storage)
RECORDER_READY_TIMEOUT_S = 60.0   # python, rclpy and rosbags imports on a busy machine


@dataclass(frozen=True)
class FleetRunOptions:
    """How to run: config files, overrides, output directory, limits."""

    config_files: Sequence[Path]
    overrides: Mapping[str, Any]
    out_dir: Path
    timeout_s: float = 1800.0
    domain_id: int | None = None
    record: bool = False       # record the fleet's topics into out_dir/RECORDING_DIR
    respawn: Respawn = Respawn()   # a drone or station node that dies is restarted
    resume: Path | None = None     # the station goes on from the checkpoint in this directory
    #: words put before each node's command (ProcessGroup.start), e.g. to run the station and
    #: the drones in separate network namespaces (fl_uav.fleet_run.netns); None: none
    command_prefix: Callable[[NodeSpec], Sequence[str]] | None = None


def _format_round(row: Mapping[str, Any]) -> str:
    up = sum(row.get('bytes_up', {}).values())
    return (f'round {row["round_index"]:3d}  accuracy {row["accuracy"]:.3f}  '
            f'loss {row["loss"]:.3f}  participants {len(row["participants"])}  '
            f'up {up / 1e6:.2f} MB  down/drone {row["bytes_down_per_drone"] / 1e6:.2f} MB')


@contextlib.contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored inside (main thread only): stopping the nodes and writing
    the summary are bounded (ProcessGroup.stop escalates to SIGKILL), and a signal in the
    middle would leave nodes running or no summary."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT,
                                                                     signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Deferred:
    """The first SIGINT or SIGTERM that arrived inside :func:`_signals_deferred`."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> bool:
        return self.signum is not None


@contextlib.contextmanager
def _signals_deferred() -> Iterator[_Deferred]:
    """SIGINT and SIGTERM only noted inside (main thread only), then delivered again to the
    handlers they had once the block ends: starting the nodes is never cut between a node's
    fork and its record in the process group (such a node would be left running), and
    ``ProcessGroup.start`` starts no further node once one arrived."""
    deferred = _Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield deferred
        return

    def note(signum, _frame) -> None:
        if deferred.signum is None:
            deferred.signum = signum

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield deferred
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if deferred.signum is not None:
            signal.raise_signal(deferred.signum)


def run_fleet(options: FleetRunOptions, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the fleet until the station finishes (or timeout / Ctrl-C); returns the summary."""
    out = options.out_dir
    flat = merged_parameters(options.config_files, options.overrides)
    # A bad key or value, a simulated home outside the geofence, simulator ports that do not
    # fit the fleet or a port another process holds stop here, before DIR is touched and
    # before any process starts.
    check_fleet_start(build_config(FleetConfig, flat))
    resume = options.resume
    if resume is not None and not (Path(resume) / STATION_CHECKPOINT_FILE).is_file():
        raise ConfigError(f'--resume {str(resume)!r}: no station checkpoint '
                          f'{STATION_CHECKPOINT_FILE} there (the station writes it into the '
                          f'run directory after each closed round)')
    same_dir = resume is not None and Path(resume).resolve() == out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # an earlier run's files; resuming in its own directory, its rounds and checkpoint stay
    kept = ((PROGRESS_FILE, STATION_CHECKPOINT_FILE, STATION_CHECKPOINT_MANIFEST) if same_dir
            else ())
    for stale in (STATION_REPORT_FILE, PROGRESS_FILE, SUMMARY_FILE, AUTOPILOT_LOG_FILE,
                  STATION_CHECKPOINT_FILE, STATION_CHECKPOINT_MANIFEST):
        if stale not in kept:
            (out / stale).unlink(missing_ok=True)
    for stale in (out / CLIENT_LOG_DIR).glob('gc*.json'):
        stale.unlink()
    shutil.rmtree(out / RECORDING_DIR, ignore_errors=True)   # an earlier run's recording
    resumed_keys = Path(resume) / KEYS_DIR if resume is not None else None
    if resumed_keys is not None and not flat.get('security.keys_dir') and resumed_keys.is_dir():
        # the run's own keys: the checkpoint holds the station key it was made under
        flat.update({'security.keys_dir': str(resumed_keys.resolve()),
                     'security.require_signatures': options.overrides.get(
                         'security.require_signatures', True)})
    else:
        flat.update(run_keys(out, flat, options.overrides))
    flat.update(run_mavlink_keys(out, flat))       # each run (and resume) its own
    config: FleetConfig = build_config(FleetConfig, flat)
    params_file = write_params_file(flat, out / 'params.yaml')
    domain_id = options.domain_id if options.domain_id is not None else random.randint(1, 101)
    env = ros_environment(domain_id, out / 'ros_logs')
    group = ProcessGroup(env, out / 'logs')
    # a dead station comes back resuming from its checkpoint (the run goes on, same run id)
    respawner = Respawner(group, options.respawn, ('drone_node', 'ground_station_node'),
                          restart_argv=lambda node: (
                              station_resume_argv(node.argv, out)
                              if node.spec.executable == 'ground_station_node' else node.argv))
    recorder = ProcessGroup(env, out / 'logs')      # stopped after the fleet's nodes
    specs = fleet_plan(config, out, exit_on_finish=True, resume=resume)
    express = (f' (FedEx express: {config.ground_clients.num_clients} ground clients)'
               if config.mode == 'express' else '')
    echo(f'fl-uav sim: {config.num_drones} drones{express}, {config.rounds.num_rounds} rounds, '
         f'{domain_text(domain_id, options.domain_id, os.environ.get("ROS_DOMAIN_ID"))}, '
         f'output {out}')
    start = time.monotonic()
    status = 'running'
    shown = 0
    watch = None           # --record: the recorder, once it listens
    try:
        not_recording = _start_recorder(recorder, out / RECORDING_DIR) if options.record else None
        if not_recording:
            status = 'failed'
            echo(not_recording)
        else:
            if options.record:
                watch = RecorderWatch(recorder.nodes[-1], out / RECORDING_DIR, start)
            with _signals_deferred() as stopping:
                group.start(specs, params_file, options.command_prefix, stopping)
        while status == 'running':
            died = watch.poll() if watch is not None else None
            if died:       # the run goes on: the federated run is the main output
                echo('\n'.join(filter(None, (died, watch.log_tail(recorder.tail)))))
            rows = read_progress(out)
            for row in rows[shown:]:
                echo(_format_round(row))
            shown = len(rows)
            for line in respawner.poll(time.monotonic() - start, len(rows) + 1):
                echo(line)
            ended = [n for n in group.exited() if not respawner.pending(n)]
            station_gone = any(n.spec.executable == 'ground_station_node' for n in ended)
            drones_gone = sum(n.spec.executable == 'drone_node' for n in ended)
            if station_gone and drones_gone == config.num_drones:
                status = 'finished' if (out / STATION_REPORT_FILE).exists() else 'failed'
                break
            crashed = [n for n in ended if n.process.returncode not in (0, None)
                       or n.spec.executable in _SERVICE_NODES]
            if crashed:
                status = 'failed'
                for node in crashed:
                    echo(f'{node.label} exited with code {node.process.returncode}:\n'
                         f'{group.tail(node)}')
                break
            if time.monotonic() - start > options.timeout_s:
                status = 'timeout'
                echo(f'timeout after {options.timeout_s:.0f} s')
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        status = 'interrupted'
    finally:
        with _interrupts_ignored():    # a second Ctrl-C or SIGTERM must not cut this short
            if status == 'interrupted':
                echo('interrupted: stopping the fleet')
            flying = [n for n in group.alive() if n.spec.executable == 'drone_node']
            if flying:
                echo(f'stopping {len(flying)} drone node(s) first: a drone in flight returns '
                     f'to launch (at most flight.shutdown_rtl_timeout_s = '
                     f'{config.flight.shutdown_rtl_timeout_s:g} s), then the autopilot '
                     f'simulator stops')
            exit_codes = group.stop(last=_STOPPED_LAST)
            died = watch.poll() if watch is not None else None
            if died:
                echo('\n'.join(filter(None, (died, watch.log_tail(recorder.tail)))))
            exit_codes.update(recorder.stop())     # after the nodes: it closes the bag
    with _interrupts_ignored():
        wall_s = time.monotonic() - start
        for row in read_progress(out)[shown:]:
            echo(_format_round(row))
        summary = build_summary(out, config, status, wall_s, exit_codes, domain_id,
                                respawner.deaths)
        if options.record:
            summary['recording'] = recording_summary(out / RECORDING_DIR, watch,
                                                     exit_codes.get(watch.node.label)
                                                     if watch is not None else None, echo)
            if not summary['recording']['complete']:
                summary['warnings'].append(
                    f'the recording is incomplete: {summary["recording"]["incomplete"]}')
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        plot_accuracy(summary, out / PLOT_FILE)
    final = summary['final_accuracy']
    for warning in summary['warnings']:
        echo(f'warning: {warning}')
    status = summary['status']      # 'failed' when the station ended the run as failed
    if summary.get('error'):
        echo(f'error: {summary["error"]}')
    incomplete = (f'; the recording in {out / RECORDING_DIR} is incomplete (warning above)'
                  if options.record and not summary['recording']['complete'] else '')
    echo(f'{status}: {len(summary["rounds"])} rounds in {wall_s:.0f} s, final accuracy '
         f'{final if final is None else round(final, 3)}{incomplete}; wrote '
         f'{out / SUMMARY_FILE}')
    return summary


def _start_recorder(recorder: ProcessGroup, bag: Path) -> str | None:
    """Start ``fl-uav record --out bag`` and wait until it listens; None, or why it did not
    start (its log's tail)."""
    node = recorder.start_command(NodeSpec('recorder_node', 'recorder'),
                                  [sys.executable, '-m', 'fl_uav.cli', 'record', '--out',
                                   str(bag)])
    deadline = time.monotonic() + RECORDER_READY_TIMEOUT_S
    while time.monotonic() < deadline and node.process.poll() is None:
        if READY_LINE in _log_text(node):
            return None
        time.sleep(0.2)
    return (f'--record: the recorder did not start within {RECORDER_READY_TIMEOUT_S:.0f} s '
            f'(exit code {node.process.poll()}):\n{recorder.tail(node)}')


def _log_text(node: RunningNode) -> str:
    try:
        return node.log_path.read_text(errors='replace')
    except OSError:
        return ''


def domain_text(domain_id: int, requested: int | None, shell_domain: str | None) -> str:
    """The start line's domain: a random one (``requested`` None) says that the shell's own
    ROS_DOMAIN_ID is not used, so a user who echoes topics from that shell knows which to set."""
    text = f'ROS_DOMAIN_ID={domain_id}'
    if requested is None and shell_domain is not None and shell_domain != str(domain_id):
        text += (f' (random; not your ROS_DOMAIN_ID={shell_domain}: --domain-id '
                 f'{shell_domain} uses it)')
    return text


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def buffer_balance(class_counts: Sequence[int] | None) -> dict[str, Any]:
    """A drone's buffered samples per class (its planner record's sample_class_counts) and
    their normalised entropy (1: every class alike, 0: one class; None without counts)."""
    if not class_counts:
        return {'buffer_class_counts': None, 'buffer_entropy_norm': None}
    balance = class_balance(np.asarray(class_counts, np.float64))
    return {'buffer_class_counts': [int(c) for c in class_counts],
            'buffer_entropy_norm': round(balance['entropy_norm'], 4)}


def _flight_warnings(rounds: Sequence[Mapping[str, Any]], num_drones: int) -> list[str]:
    """One line per drone whose flight failed in some round: how often, and the last why."""
    lines = []
    for d in range(num_drones):
        errors = [r['flight_errors'][str(d)] for r in rounds
                  if str(d) in r.get('flight_errors', {})]
        if errors:
            lines.append(f'drone {d}: flight failed in {len(errors)} of {len(rounds)} rounds '
                         f'(last: {errors[-1]})')
    return lines


def _idle_warnings(drones: Mapping[str, Mapping[str, Any]], mode: str) -> list[str]:
    """One line per drone that never armed (its autopilot link never came up, e.g. another
    client on its port, or every arming was refused) or, in standard mode, collected no camera
    sample: a run can finish with such a drone and no other sign of it."""
    lines = []
    for d, facts in drones.items():
        if not facts['armed']:
            lines.append(f'drone {d} never armed: no flight, no samples (its node log says '
                         f'why: its autopilot link, or arming refused)')
        elif mode == 'standard' and not facts['samples_collected']:
            lines.append(f'drone {d} collected no camera samples (no frames on its camera '
                         f'topic, or none it could label)')
    return lines


def _death_warnings(deaths: Sequence[Mapping[str, Any]], rounds: Sequence[Mapping[str, Any]]
                    ) -> list[str]:
    """One line per node death: its round, and whether and when the node came back and the
    first round its drone took part in after."""
    lines = []
    for death in deaths:
        text = (f'{death["node"]} died (exit code {death["exit_code"]}) at '
                f'{death["died_s"]:.0f} s in round {death["round"]}')
        if death['restarted_s'] is None:
            lines.append(f'{text}; not restarted')
            continue
        if not death['node'].startswith('uav'):    # the ground station
            after = [r['round_index'] for r in rounds if r['round_index'] >= death['round']]
            lines.append(f'{text}; restarted at {death["restarted_s"]:.0f} s'
                         + (', resumed from its checkpoint' if death.get('resumed') else
                            ', a new run (no checkpoint)')
                         + (f', rounds {after[0]}..{after[-1]} closed after' if after
                            else ', no round closed after'))
            continue
        drone = int(death['node'].removeprefix('uav').split('/')[0])
        back = next((r['round_index'] for r in rounds if r['round_index'] > death['round']
                     and drone in r.get('participants', [])), None)
        lines.append(f'{text}; restarted at {death["restarted_s"]:.0f} s, ' + (
            f'took part again from round {back}' if back is not None
            else 'took part in no later round'))
    return lines


def _late_warnings(rounds: Sequence[Mapping[str, Any]], config: FleetConfig,
                   rejected_total: Mapping[str, int]) -> list[str]:
    """One line per drone whose update missed some round its flight did not fail in (those
    have their own line), and what to do about updates that came after their round had closed
    (a drone's flight ends ``flight.train_reserve_s`` before the deadline: on a busy machine
    its training and upload can take longer)."""
    lines = []
    for d in range(config.num_drones):
        missed = [r['round_index'] for r in rounds if d in r.get('late_or_missing', [])
                  and str(d) not in r.get('flight_errors', {})]
        if missed:
            lines.append(f'drone {d}: no update in time in {len(missed)} of {len(rounds)} '
                         f'rounds ({", ".join(map(str, missed))})')
    late = rejected_total.get('wrong_round', 0)
    if late:
        lines.append(f'{late} update(s) came after their round had closed (rejected as '
                     f'wrong_round): training and upload took longer than '
                     f'flight.train_reserve_s ({config.flight.train_reserve_s:g} s) on this '
                     f'machine; raise it or rounds.deadline_s ({config.rounds.deadline_s:g} s) '
                     f'with --set')
    return lines


def _robustness_warnings(rounds: Sequence[Mapping[str, Any]], config: FleetConfig,
                         rejected_total: Mapping[str, int]) -> list[str]:
    """One line per drone whose update was an outlier (norm over OUTLIER_FACTOR × the round's
    median) or whose reported sample count was over what it can hold, and one for the
    replayed frames the station refused."""
    lines = []
    for d in range(config.num_drones):
        out = [r['round_index'] for r in rounds if d in r.get('outliers', [])]
        if out:
            lines.append(f"drone {d}: update norm over {OUTLIER_FACTOR:g} x the round's median "
                         f'in {len(out)} of {len(rounds)} rounds ({", ".join(map(str, out))}; '
                         f"each round's update_norms)")
        capped = [(r['round_index'], r['samples_claimed'][str(d)]) for r in rounds
                  if str(d) in r.get('samples_claimed', {})]
        if capped:
            lines.append(f'drone {d}: reported more samples than it can hold in {len(capped)} '
                         f'of {len(rounds)} rounds (round {capped[0][0]}: {capped[0][1]}): '
                         f'weighed as buffer.capacity_samples')
    replays = rejected_total.get(REPLAY, 0)
    if replays:
        lines.append(f'{replays} replayed update frame(s) refused (rejected as {REPLAY}): frames '
                     f'the station had already had, or updates of rounds it had closed with '
                     f"them (a recording played again, or a drone's kept update delivered "
                     f'again after a link outage or to a resumed station); not late updates')
    return lines


def build_summary(out: Path, config: FleetConfig, status: str, wall_s: float,
                  exit_codes: Mapping[str, int | None], domain_id: int,
                  deaths: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Per-round results from the station, per-drone flight facts from the autopilot log,
    each node death and restart (:class:`fl_uav.fleet_run.launcher.Respawner`). A run the
    station ended as failed (its report's status and error) is 'failed'."""
    report = _read_json(out / STATION_REPORT_FILE)
    if status == 'finished' and report.get('status') == 'failed':
        status = 'failed'
    rounds = report.get('rounds') or read_progress(out)
    autopilot = _read_json(out / AUTOPILOT_LOG_FILE)
    events = autopilot.get('events', [])
    drones: dict[str, dict[str, Any]] = {}
    for d in range(config.num_drones):
        mine = [e for e in events if e.get('vehicle') == d]
        kinds = [e.get('event') for e in mine]
        last = next((r for r in reversed(rounds) if str(d) in r.get('samples_collected', {})),
                    None)
        trajectory = _read_json(out / record_file_name(d))
        drones[str(d)] = {
            'armed': 'armed' in kinds,
            'took_off': 'takeoff' in kinds,
            'landed': 'landed' in kinds,
            'mission_items_reached': kinds.count('mission_item_reached'),
            'missions_completed': kinds.count('mission_complete'),
            'waypoints_reached': last['waypoints_reached'][str(d)] if last else 0,
            'waypoints_planned': sum(r.get('waypoints_planned', {}).get(str(d), 0)
                                     for r in rounds),
            'samples_collected': last['samples_collected'][str(d)] if last else 0,
            'rounds_participated': sum(d in r.get('participants', []) for r in rounds),
            'outlier_rounds': sum(d in r.get('outliers', []) for r in rounds),
            'samples_capped_rounds': sum(str(d) in r.get('samples_claimed', {})
                                         for r in rounds),
            'flight_failures': sum(str(d) in r.get('flight_errors', {}) for r in rounds),
            'mission_sources': trajectory.get('sources', {}),
            'plan_fallbacks': trajectory.get('fallbacks', {}),
            **buffer_balance(trajectory.get('sample_class_counts')),
        }
    accuracies = [r['accuracy'] for r in rounds]
    summary = {
        'status': status,
        **({'error': report['error']} if report.get('error') else {}),
        'num_drones': config.num_drones,
        'num_rounds_configured': config.rounds.num_rounds,
        'strategy': config.aggregation.strategy,        # a built-in name or a plug-in spec
        'compression_method': config.compression.method,
        'plugins': plugin_sources(to_flat(config)),      # spec, module file, SHA-256
        'initial_accuracy': report.get('initial_accuracy'),
        'final_accuracy': accuracies[-1] if accuracies else None,
        'wall_time_s': wall_s,
        'ros_domain_id': domain_id,
        'rounds': [{
            'round': r['round_index'], 'accuracy': r['accuracy'], 'loss': r['loss'],
            'participants': r['participants'], 'late_or_missing': r['late_or_missing'],
            'bytes_up': r['bytes_up'], 'bytes_up_total': sum(r['bytes_up'].values()),
            'bytes_down_per_drone': r['bytes_down_per_drone'],
            'bytes_down_total': r['bytes_down_per_drone'] * config.num_drones,
            'rejected': r['rejected'], 'duration_s': r['closed_s'] - r['opened_s'],
            'model_change_l2': r.get('model_change_l2'),
            'aggregation': r.get('aggregation', {}),
            'update_norms': r.get('update_norms', {}), 'outliers': r.get('outliers', []),
            **({'samples_claimed': r['samples_claimed']} if r.get('samples_claimed') else {}),
            **({'express': r.get('express', {})} if config.mode == 'express' else {}),
        } for r in rounds],
        'drones': drones,
        'rejected_total': report.get('rejected_total', {}),
        'exit_codes': dict(exit_codes),
        'node_deaths': [dict(d) for d in deaths],
        # the station's: a diverged global model, or one at chance level (a finite loss);
        # each drone whose flight failed (a run can finish with nothing flown) or whose
        # update missed rounds (a run can finish having learned in half of them)
        'warnings': [*(w for r in rounds for w in r.get('warnings', [])),
                     *_flight_warnings(rounds, config.num_drones),
                     *_late_warnings(rounds, config, report.get('rejected_total', {})),
                     *_robustness_warnings(rounds, config, report.get('rejected_total', {})),
                     *_death_warnings(deaths, rounds),
                     *_idle_warnings(drones, config.mode)],
    }
    if config.mode == 'express':
        summary['mode'] = 'express'
        summary['express'] = express_summary(out, config, report)
    return summary


def express_summary(out: Path, config: FleetConfig, report: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """The FedEx plan (from the station) and each ground client's own log: exchanges with
    the UAV's distance from the range source, refusals and rejected frames by reason."""
    clients = {str(j): _read_json(out / CLIENT_LOG_DIR / f'gc{j}.json')
               for j in range(config.ground_clients.num_clients)}
    return {'plan': report.get('express', {}), 'radio_range_m': config.express.radio_range_m,
            'range_pose': config.ground_clients.range_pose, 'clients': clients}


def plot_accuracy(summary: Mapping[str, Any], path: Path) -> None:
    """Accuracy per round (round 0 = the initial model)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rounds = [0] + [r['round'] for r in summary['rounds']]
    initial = summary.get('initial_accuracy')
    acc = [initial if initial is not None else math.nan] + [r['accuracy']
                                                           for r in summary['rounds']]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(rounds, acc, marker='o')
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # no round 1.5
    ax.set_xlabel('round')
    ax.set_ylabel('held-out accuracy')
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    what = ('FedEx-Sync' if summary.get('mode') == 'express' else 'FedAvg')
    ax.set_title(f'fl_uav fleet: {summary["num_drones"]} drones, {what}')
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
