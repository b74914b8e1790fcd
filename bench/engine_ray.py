"""Figure: the experiment engine's backends side by side (docs/benchmarks/engine.md, "The Ray
backend"; issue 27 items 3-4).

Runs `fl-uav experiment` (the real command, each run a fresh process) on one config with
each backend given, and measures from outside:

    wall          the whole process (interpreter, imports, data, Ray start, rounds, plots)
    start-up      wall minus the rounds (rounds.csv wall_s summed); Ray's own share from
                  summary.json's engine_backend.start_s (join Ray, data into the object
                  store, the actors started and checked)
    rounds        each round's wall_s (rounds.csv) and their sum
    memory        peak RSS (VmHWM) of the driver, of the largest Ray worker (actor), the Ray
                  system processes' (raylet, GCS, agents; summed at their peaks), and the
                  peak of the whole process tree's PSS (shared pages such as the object store
                  counted once), from /proc: VmHWM and CPU every --sample-s seconds, PSS every
                  4th sample, by a thread at nice 19
    object store  what goes through Ray per round (summary.json): the global model out, the
                  chunk specs out (sample indices), the frames back

and checks that every run's rounds.csv is identical in every column but wall_s.

    nice -n 5 .venv/bin/python bench/engine_ray.py                       # 1000 drones, 5 rounds
    nice -n 5 .venv/bin/python bench/engine_ray.py --reps 2              # twice, alternating
    nice -n 5 .venv/bin/python bench/engine_ray.py --runs ray:2 --drones 10000
    .venv/bin/python bench/engine_ray.py --model RUN_DIR ...   # the time model of Ray runs

A run is BACKEND:WORKERS (local:1, ray:1, ray:2, local:2 = the local backend's threads).
Linux only (/proc).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / 'config' / 'experiments' / 'scale_fmnist_1000.yaml'
WORKER_TITLE = 'ray::ChunkWorker'   # a Ray actor's process title: ray::<class>[.<method>]


@dataclass
class Peaks:
    """Highest values seen while sampling a run's process tree (KiB)."""

    driver_hwm: int = 0
    worker_hwm: dict[int, int] = field(default_factory=dict)    # pid -> VmHWM
    system_hwm: dict[int, int] = field(default_factory=dict)
    cpu_s: dict[int, float] = field(default_factory=dict)       # pid -> user + system s
    tree_pss: int = 0
    workers_pss: int = 0
    samples: int = 0


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat') as f:
                parent = int(f.read().rsplit(')', 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    return children


def _tree(root: int) -> list[int]:
    children, out, todo = _children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


TICKS = os.sysconf('SC_CLK_TCK')


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 if it is gone)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def _pss_kb(pid: int) -> int:
    try:
        with open(f'/proc/{pid}/smaps_rollup') as f:
            for line in f:
                if line.startswith('Pss:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _title(pid: int) -> str:
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            return f.read().replace(b'\0', b' ').decode(errors='replace').strip()
    except OSError:
        return ''


def sample(root: int, peaks: Peaks, stop: threading.Event, period_s: float,
           pss_every: int = 4) -> None:
    """Until ``stop``: the tree's VmHWM and CPU per process every period_s, its summed PSS
    every pss_every samples (smaps_rollup walks a process's page tables: ~10 ms per 600 MB).
    The thread runs at nice 19, so what it costs is not taken from the run."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    while not stop.is_set():
        tree_pss = workers_pss = 0
        with_pss = peaks.samples % pss_every == 0
        for pid in _tree(root):
            hwm, pss = _status_kb(pid, 'VmHWM'), (_pss_kb(pid) if with_pss else 0)
            tree_pss += pss
            peaks.cpu_s[pid] = max(peaks.cpu_s.get(pid, 0.0), _cpu_s(pid))
            if pid == root:
                peaks.driver_hwm = max(peaks.driver_hwm, hwm)
            elif _title(pid).startswith(WORKER_TITLE):
                peaks.worker_hwm[pid] = max(peaks.worker_hwm.get(pid, 0), hwm)
                workers_pss += pss
            else:
                peaks.system_hwm[pid] = max(peaks.system_hwm.get(pid, 0), hwm)
        peaks.tree_pss = max(peaks.tree_pss, tree_pss)
        peaks.workers_pss = max(peaks.workers_pss, workers_pss)
        peaks.samples += 1
        stop.wait(period_s)


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / 'rounds.csv', newline='') as f:
        return list(csv.DictReader(f))


def run_one(spec: str, args: argparse.Namespace, out_root: Path) -> dict:
    """One `fl-uav experiment` run of ``spec`` (backend:workers), measured."""
    backend, workers = spec.split(':')
    out = out_root / spec.replace(':', '_')
    shutil.rmtree(out, ignore_errors=True)
    sets = {'num_drones': args.drones, 'num_rounds': args.rounds,
            'engine.backend': backend, 'engine.workers': int(workers), **dict(
                s.split('=', 1) for s in args.set)}
    command = [sys.executable, '-m', 'fl_uav.cli', 'experiment', str(args.config),
               '--out', str(out)]
    for key, value in sets.items():
        command += ['--set', f'{key}={value}']
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(
        p for p in (str(REPO), os.environ.get('PYTHONPATH', '')) if p)}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    peaks, stop = Peaks(), threading.Event()
    sampler = threading.Thread(target=sample, args=(process.pid, peaks, stop, args.sample_s),
                               daemon=True)
    sampler.start()
    log = process.communicate()[0]
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    (out_root / f'{out.name}.log').write_text(log)
    if process.returncode != 0:
        raise SystemExit(f'{spec}: fl-uav experiment exited {process.returncode}:\n{log}')
    summary = json.loads((out / 'summary.json').read_text())
    rows = _rows(out)
    round_walls = [float(r['wall_s']) for r in rows]
    backend_info = summary.get('engine_backend', {})
    system = set(peaks.system_hwm) - set(peaks.worker_hwm)   # a worker starts as ray::IDLE
    return {
        'run': spec, 'load_1min_at_start': round(load, 2), 'wall_s': round(wall, 2),
        'rounds_s': round(sum(round_walls), 2),
        'startup_s': round(wall - sum(round_walls), 2),
        'ray_start_s': backend_info.get('start_s'),
        'round_walls_s': [round(w, 2) for w in round_walls],
        'steady_round_s': round(sum(round_walls[1:]) / max(1, len(round_walls) - 1), 2),
        'driver_cpu_s': round(peaks.cpu_s.get(process.pid, 0.0), 1),
        'workers_cpu_s': round(sum(peaks.cpu_s.get(p, 0.0) for p in peaks.worker_hwm), 1),
        'ray_system_cpu_s': round(sum(peaks.cpu_s.get(p, 0.0) for p in system), 1),
        'driver_peak_rss_mib': round(peaks.driver_hwm / 1024, 1),
        'worker_peak_rss_mib': round(max(peaks.worker_hwm.values(), default=0) / 1024, 1),
        'workers_seen': len(peaks.worker_hwm),
        'ray_system_rss_mib': round(sum(peaks.system_hwm[p] for p in system) / 1024, 1),
        'tree_peak_pss_mib': round(peaks.tree_pss / 1024, 1),
        'bytes_per_round': backend_info.get('bytes_per_round'),
        'final_accuracy': summary['final_accuracy'], 'samples': peaks.samples,
        'rows': [{k: v for k, v in r.items() if k != 'wall_s'} for r in rows],
    }


def table(results: list[dict]) -> str:
    head = ('| run | wall s | start-up s (Ray) | rounds s | per round s | CPU s driver / '
            'workers / Ray | driver MiB | largest worker MiB | Ray system MiB | tree PSS MiB | '
            'through Ray per round |')
    lines = [head, '|' + '---|' * 11]
    for r in results:
        ray_start = f' ({r["ray_start_s"]:.1f})' if r['ray_start_s'] is not None else ''
        traffic = r['bytes_per_round']
        moved = ('' if not traffic else
                 f'model {traffic["model_out"] / 1e6:.2f} MB out, specs '
                 f'{traffic["chunks_out"] / 1e6:.2f} MB out, frames '
                 f'{traffic["frames_back"] / 1e6:.1f} MB back')
        worker = f'{r["worker_peak_rss_mib"]:.0f}' if r['workers_seen'] else '-'
        system = f'{r["ray_system_rss_mib"]:.0f}' if r['workers_seen'] else '-'
        lines.append(f'| {r["run"]} | {r["wall_s"]:.1f} | {r["startup_s"]:.1f}{ray_start} | '
                     f'{r["rounds_s"]:.1f} | {" / ".join(f"{w:.1f}" for w in r["round_walls_s"])}'
                     f' | {r["driver_cpu_s"]:.0f} / {r["workers_cpu_s"]:.0f} / '
                     f'{r["ray_system_cpu_s"]:.0f} | {r["driver_peak_rss_mib"]:.0f} | {worker} | '
                     f'{system} | '
                     f'{r["tree_peak_pss_mib"]:.0f} | {moved} |')
    return '\n'.join(lines)


def round_costs(run_dir: Path) -> dict:
    """One Ray run's per-round parts (means of the steady rounds 2..R): drones, drone-steps S,
    workers W, the workers' CPU seconds per drone-step c, the driver's CPU seconds after the
    training (per-drone loop, aggregation, evaluation, checkpoint) and the measured walls."""
    summary = json.loads((run_dir / 'summary.json').read_text())
    backend = summary['engine_backend']
    rounds = backend['rounds']
    walls = [float(r['wall_s']) for r in _rows(run_dir)]
    steady = slice(1, None) if len(walls) > 1 else slice(0, None)

    def mean(values: list[float]) -> float:
        return sum(values[steady]) / len(values[steady])

    steps = mean(rounds['drone_steps'])
    return {'run': str(run_dir), 'drones': summary['num_drones'], 'workers': backend['workers'],
            'drone_steps': steps, 'c_cpu_s': mean(rounds['worker_cpu_s']) / steps,
            'c_wall_s': mean(rounds['worker_busy_s']) / steps,
            'train_wall_s': mean(rounds['train_wall_s']), 'decode_s': mean(rounds['decode_s']),
            'driver_cpu_after_s': mean(rounds['driver_cpu_after_s']),
            'driver_wall_after_s': mean([w - t for w, t in zip(walls,
                                                               rounds['train_wall_s'])]),
            'round_s': mean(walls)}


def time_model(run_dirs: list[Path]) -> str:
    """Fit T(N, W) = c S(N) / W + d N + e on free cores: c, the workers' CPU seconds per
    drone-step (batch 32, this model, encoding included); d N + e, the driver's CPU seconds
    after training (least squares over the runs); S(N), the round's drone-steps. Each run is
    shown against it: measured wall (a loaded machine gives less than W cores) and CPU."""
    import numpy as np

    costs = [round_costs(d) for d in run_dirs]
    c_step = float(np.mean([c['c_cpu_s'] for c in costs]))
    a = np.array([[c['drones'], 1.0] for c in costs])
    b = np.array([c['driver_cpu_after_s'] for c in costs])
    (d, e), *_ = np.linalg.lstsq(a, b, rcond=None)
    lines = [f'c = {c_step * 1e3:.2f} ms CPU per drone-step (worker; per run: '
             + ', '.join(f'{c["c_cpu_s"] * 1e3:.2f}' for c in costs)
             + f'), d = {d * 1e3:.3f} ms per drone, e = {e:.2f} s per round (driver CPU after '
             f'training)',
             '| run | drones | W | drone-steps S | model: c S / W + d N + e s | measured round '
             's | training wall s (model c S / W) | driver after training: wall s, CPU s '
             '(model d N + e) | decode CPU s (during training) |', '|' + '---|' * 9]
    for c in costs:
        train = c_step * c['drone_steps'] / c['workers']
        driver = d * c['drones'] + e
        lines.append(f'| {Path(c["run"]).name} | {c["drones"]} | {c["workers"]} | '
                     f'{c["drone_steps"]:.0f} | {train + driver:.1f} | {c["round_s"]:.1f} | '
                     f'{c["train_wall_s"]:.1f} ({train:.1f}) | {c["driver_wall_after_s"]:.1f}, '
                     f'{c["driver_cpu_after_s"]:.1f} ({driver:.1f}) | {c["decode_s"]:.1f} |')
    return '\n'.join(lines)


def main() -> int:
    if sys.argv[1:2] == ['--model']:   # bench/engine_ray.py --model RUN_DIR ...
        print(time_model([Path(p) for p in sys.argv[2:]]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--config', type=Path, default=CONFIG)
    parser.add_argument('--drones', type=int, default=1000)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--runs', default='local:1,ray:1,ray:2',
                        help='comma-separated BACKEND:WORKERS, run in this order')
    parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                        help='more config overrides, for every run')
    parser.add_argument('--out', type=Path, default=Path('/tmp/fl_uav_engine_ray'))
    parser.add_argument('--sample-s', type=float, default=0.5)
    parser.add_argument('--reps', type=int, default=1,
                        help='repeat the runs, alternating; the table shows each fastest')
    parser.add_argument('--json', type=Path, help='write the results here as JSON')
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    everything: list[dict] = []
    for rep in range(args.reps):   # the runs alternate: a load change hits each alike
        for spec in args.runs.split(','):
            result = run_one(spec.strip(), args, args.out)
            result['rep'] = rep
            everything.append(result)
            print(f'{spec} (rep {rep}): wall {result["wall_s"]} s, rounds '
                  f'{result["round_walls_s"]}, load {result["load_1min_at_start"]}', flush=True)
    # each run's repetition with the shortest rounds (the least disturbed by other load)
    results = [min((r for r in everything if r['run'] == spec.strip()),
                   key=lambda r: r['rounds_s']) for spec in args.runs.split(',')]
    print()
    if args.reps > 1:
        print(f'each run: the fastest of {args.reps} repetitions (rounds s of all: ' + '; '.join(
            f'{spec.strip()} ' + ', '.join(f'{r["rounds_s"]:.1f}' for r in everything
                                            if r['run'] == spec.strip())
            for spec in args.runs.split(',')) + ')')
    print(f'{args.drones} drones x {args.rounds} rounds, {args.config.name}; load (1 min) at '
          f'each start: {", ".join(str(r["load_1min_at_start"]) for r in results)}')
    print(table(results))
    same = all(r['rows'] == everything[0]['rows'] for r in everything)
    if len(everything) > 1:
        print(f'rounds.csv identical in every column but wall_s: {"yes" if same else "NO"}')
    else:
        print('rounds.csv: one run, nothing to compare it with (compare with the rounds.csv of '
              'another run by hand)')
    by_run = {r['run']: r for r in results}
    if 'local:1' in by_run and 'ray:1' in by_run:
        ratio = by_run['ray:1']['rounds_s'] / by_run['local:1']['rounds_s']
        print(f'ray:1 rounds / local:1 rounds = {ratio:.2f} (target <= 1.3)')
    if 'ray:1' in by_run and 'ray:2' in by_run:
        speedup = by_run['ray:1']['rounds_s'] / by_run['ray:2']['rounds_s']
        print(f'ray:1 rounds / ray:2 rounds = {speedup:.2f}x (target >= 1.6)')
    for r in results:
        print(f'{r["run"]}: memory per drone {r["tree_peak_pss_mib"] * 1024 / args.drones:.0f} '
              f'KiB (tree PSS / drones); final accuracy {r["final_accuracy"]}')
    if args.json:
        args.json.write_text(json.dumps([{k: v for k, v in r.items() if k != 'rows'}
                                         for r in everything], indent=1))
    return 0 if same else 1


if __name__ == '__main__':
    raise SystemExit(main())
