"""A run's directory: its file names and rounds.csv columns, the engine's error, reading an
earlier run back (rounds.csv, config.json, the checks before a resume) and writing its
summary.json, accuracy plots and knobs.json (the resource planner's decisions)."""

from __future__ import annotations

import csv
import functools
import importlib.metadata
import json
import math
import operator
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_uav.aggregation.robust import OUTLIER_FACTOR
from fl_uav.configschema import to_flat
from fl_uav.engine.config import ExperimentConfig
from fl_uav.planning.config import KNOBS_FILE
from fl_uav.plugins import plugin_sources

if TYPE_CHECKING:
    from fl_uav.planning.round_resources import RoundResources

ROUNDS_FILE = 'rounds.csv'
SUMMARY_FILE = 'summary.json'
CHECKPOINT_FILE = 'checkpoint.npz'
CONFIG_FILE = 'config.json'
GIT_TIMEOUT_S = 5.0
"""Longest wait for git when a summary records the source commit."""
EXPRESS_FILE = 'express.json'
ROUND_COLUMNS = ('round', 'accuracy', 'loss', 'participants', 'late', 'lost', 'uplink_bytes',
                 'downlink_bytes', 'sim_round_s', 'sim_time_s', 'energy_mean_j',
                 'energy_max_j', 'energy_total_j', 'train_loss_mean', 'wall_s')
_INT_COLUMNS = ('round', 'participants', 'late', 'lost')
UPDATE_NORMS_FILE = 'update_norms.csv'
NORM_COLUMNS = ('round', 'drone', 'norm', 'median_ratio', 'samples', 'samples_claimed',
                'outlier')
"""update_norms.csv, one row per round and drone whose update arrived: its ||Δ||₂ as the
strategy gets it (before clipping), over the round's median norm, the sample count weighed
(capped at what the drone holds) and the one it reported, and outlier 1 when the norm is over
fl_uav.aggregation.robust.OUTLIER_FACTOR × the round's median."""
_NORM_INT_COLUMNS = ('round', 'drone', 'samples', 'samples_claimed', 'outlier')
_BYTE_COLUMNS = ('uplink_bytes', 'downlink_bytes')    # ints, written as ints again on resume


class ExperimentError(RuntimeError):
    """The run cannot go on (e.g. a non-finite loss); partial results are on disk."""


def plugin_fault(config: ExperimentConfig, out_dir: Path, where: str, key: str,
                 fault: str) -> ExperimentError:
    """The run stops on a strategy's or compressor's fault: where, which key's spec, what;
    the rounds (or FedEx updates) before are kept in ``out_dir``."""
    spec = operator.attrgetter(key)(config)
    return ExperimentError(f'{where}: {key} {spec!r}: {fault}; '
                           f'the {where.split()[0]}s before are in {out_dir} '
                           f'(--resume goes on from its last checkpoint)')


def _byte_count(text: str) -> int | float:
    """A bytes column as written: an int (older runs wrote '1234.0'), a float if fractional."""
    value = float(text)
    return int(value) if value.is_integer() else value


def read_rows(path: Path) -> list[dict[str, Any]]:
    """A rounds.csv's rows as numbers (none if it does not exist); a column older runs lack
    reads as NaN, their energy_total_j as mean × drones that trained."""
    if not path.exists():
        return []
    with open(path, newline='') as f:
        rows = [{k: (0 if v in ('', None) else int(v)) if k in _INT_COLUMNS else
                 (math.nan if v in ('', None) else _byte_count(v) if k in _BYTE_COLUMNS
                  else float(v))   # '': a column older runs lack
                 for k, v in row.items()} for row in csv.DictReader(f)]
    for row in rows:
        if math.isnan(row.get('energy_total_j', math.nan)):   # older runs: mean × trained
            row['energy_total_j'] = row['energy_mean_j'] * (row['participants'] + row['late'])
    return rows


def read_norm_rows(path: Path) -> list[dict[str, Any]]:
    """An update_norms.csv's rows as numbers (none if it does not exist: older runs)."""
    if not path.exists():
        return []
    with open(path, newline='') as f:
        return [{k: int(v) if k in _NORM_INT_COLUMNS else float(v) for k, v in row.items()}
                for row in csv.DictReader(f)]


def norms_summary(rows: list[dict[str, Any]], rounds: int) -> tuple[dict[str, Any],
                                                                    list[str]]:
    """summary.json's ``update_norms`` (per flagged drone: the rounds its update was an
    outlier, the rounds its sample count was capped) and a warning line per such drone."""
    outliers: dict[int, list[int]] = {}
    capped: dict[int, list[int]] = {}
    for row in rows:
        if row['outlier']:
            outliers.setdefault(row['drone'], []).append(row['round'])
        if row['samples_claimed'] > row['samples']:
            capped.setdefault(row['drone'], []).append(row['round'])
    warnings = [f"drone {d}: update norm over {OUTLIER_FACTOR:g} x the round's median in "
                f'{len(r)} of {rounds} rounds ({_rounds_text(r)}; {UPDATE_NORMS_FILE})'
                for d, r in sorted(outliers.items())]
    warnings += [f'drone {d}: reported more samples than it holds in {len(r)} of {rounds} '
                 f'rounds ({_rounds_text(r)}): weighed as what it holds'
                 for d, r in sorted(capped.items())]
    return {'file': UPDATE_NORMS_FILE, 'outlier_factor': OUTLIER_FACTOR,
            'outlier_rounds': {str(d): len(r) for d, r in sorted(outliers.items())},
            'samples_capped_rounds': {str(d): len(r) for d, r in sorted(capped.items())}
            }, warnings


def _rounds_text(rounds: list[int], shown: int = 5) -> str:
    """'round 3' / 'rounds 1, 2, 4' / 'rounds 1, 2, 3, 4, 5, ...'."""
    head = ', '.join(map(str, rounds[:shown])) + (', ...' if len(rounds) > shown else '')
    return f'round{"s" if len(rounds) > 1 else ""} {head}'


RESUME_MAY_CHANGE = ('num_rounds', 'engine.torch_threads', 'engine.workers',
                     'engine.checkpoint_every', 'engine.backend', 'engine.ray_address')
"""Keys a resumed run may set differently from the interrupted one: how long it runs and how
it uses the machines (workers and backends are bit-identical), never what it computes."""


def json_mapping(path: Path, prefix: str = '') -> dict[str, Any]:
    """A run file's JSON object, or ExperimentError (``prefix`` first) saying what is wrong."""
    if not path.is_file():
        raise ExperimentError(f'{prefix}{path} does not exist (not an experiment directory)')
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ExperimentError(f'{prefix}{path} is not readable JSON: {exc}') from exc
    if not isinstance(value, dict):
        raise ExperimentError(f'{prefix}{path} does not hold a JSON object')
    return value


def read_run_config(out_dir: Path) -> dict[str, Any]:
    """The flat config a run in ``out_dir`` was started with (its config.json)."""
    return json_mapping(Path(out_dir) / CONFIG_FILE, 'cannot resume: ')


def check_resumable(config: ExperimentConfig, out_dir: Path) -> None:
    """ExperimentError naming every key (outside RESUME_MAY_CHANGE) whose value differs from
    the one the run in ``out_dir`` was started with: a resumed run is the same experiment."""
    saved = read_run_config(out_dir)
    given = json.loads(json.dumps(to_flat(config)))
    differ = [f'{key}: run {saved[key]!r}, given {given[key]!r}' for key in sorted(given)
              if key in saved and key not in RESUME_MAY_CHANGE and saved[key] != given[key]]
    if differ:
        raise ExperimentError(
            f'cannot resume {out_dir}: the config differs from the one it was started with '
            f'({"; ".join(differ)}); resume with the same keys (`fl-uav experiment --resume '
            f'{out_dir}` reads them from its {CONFIG_FILE}), or start a new run with --out')


def recorded_run_files(out_dir: Path) -> list[str]:
    """The files of an earlier run in ``out_dir`` (config, rows, summary) that a new run there
    would replace; empty for a new or empty directory."""
    return [name for name in (CONFIG_FILE, ROUNDS_FILE, SUMMARY_FILE)
            if (Path(out_dir) / name).is_file()]


def energy_to_target(rows: list[dict[str, Any]], target_accuracy: float) -> dict[str, Any]:
    """The fleet's cumulative modelled energy (every drone that trained: compute, generation,
    radio and, with an LGC planner, hover; the rounds.csv ``energy_total_j`` column) up to and
    including the first round whose accuracy is >= ``target_accuracy``, and that round.

    Both are None when the target was never reached (or ``target_accuracy`` is 0: not asked).
    """
    out: dict[str, Any] = {'target_accuracy': target_accuracy or None,
                           'energy_to_target_j': None, 'rounds_to_target': None}
    if not target_accuracy:
        return out
    spent = 0.0
    for row in rows:
        spent += float(row['energy_total_j'])
        if row['accuracy'] >= target_accuracy:
            out.update(energy_to_target_j=spent, rounds_to_target=int(row['round']))
            break
    return out


@functools.lru_cache(maxsize=1)
def source_version() -> dict[str, str]:
    """Which code made a run: the installed fl_uav version and, in a git checkout, its commit
    (with ``-dirty`` if tracked files differ from it; '' outside a checkout or without git)."""
    try:
        version = importlib.metadata.version('fl_uav')
    except importlib.metadata.PackageNotFoundError:
        version = ''
    here = str(Path(__file__).resolve().parent)
    commit = ''
    try:
        head = subprocess.run(['git', '-C', here, 'rev-parse', 'HEAD'], capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, check=True).stdout.strip()
        dirty = subprocess.run(['git', '-C', here, 'status', '--porcelain',
                                '--untracked-files=no'], capture_output=True, text=True,
                               timeout=GIT_TIMEOUT_S, check=True).stdout.strip()
        commit = head + ('-dirty' if dirty else '')
    except (OSError, subprocess.SubprocessError):
        pass
    return {'fl_uav_version': version, 'git_commit': commit}


def write_summary(config: ExperimentConfig, out_dir: Path, rows: list[dict[str, Any]],
                  status: str, error: str, wall_s: float,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """DIR/summary.json (``extra``: the planner's entries, e.g. LGC's h0) and the plots."""
    summary = {
        'name': config.name, 'seed': config.seed, **source_version(),
        'status': status, 'error': error,
        'rounds_completed': len(rows), 'num_rounds': config.num_rounds,
        'num_drones': config.num_drones, 'dataset': config.data.dataset,
        'partition': config.data.partition, 'strategy': config.aggregation.strategy,
        'server_lr': config.aggregation.server_lr,   # the rate used (``auto`` resolved)
        'final_accuracy': rows[-1]['accuracy'] if rows else None,
        'best_accuracy': max((r['accuracy'] for r in rows), default=None),
        'sim_time_s': rows[-1]['sim_time_s'] if rows else 0.0,
        'uplink_bytes_total': sum(r['uplink_bytes'] for r in rows),
        'energy_total_j': float(sum(r['energy_total_j'] for r in rows)),
        'resources_planner': config.resources.planner,
        'plugins': plugin_sources(to_flat(config)),   # spec, module file, SHA-256
        **(extra or {}),
        **energy_to_target(rows, config.target_accuracy),
        'engine_wall_s': sum(r['wall_s'] for r in rows),
        'wall_s': wall_s,
    }
    (out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    if rows:
        plot_runs([(config.name, rows)], out_dir)
    return summary


PLOT_AXES = (('round', 'round', 'accuracy_vs_round.png'),
             ('sim_time_s', 'simulated time (s)', 'accuracy_vs_sim_time.png'),
             ('uplink_cum', 'cumulative uplink (MB)', 'accuracy_vs_uplink.png'))
"""(x key, x label, file) of the accuracy plots every run writes."""


def accuracy_figure(runs: list[tuple[str, list[dict[str, Any]]]], key: str, label: str):
    """Test accuracy against ``key`` (a rounds.csv column, or ``uplink_cum``: cumulative MB),
    one line per run; rounds get integer ticks only (no round 1.5)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # not pyplot: no GUI machinery, a faster import
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for run_name, rows in runs:
        if key == 'uplink_cum':
            xs = np.cumsum([r['uplink_bytes'] for r in rows]) / 1e6
        else:
            xs = [r[key] for r in rows]
        ax.plot(xs, [r['accuracy'] for r in rows], marker='.', label=run_name)
    if key == 'round':
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(label)
    ax.set_ylabel('test accuracy')
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_runs(runs: list[tuple[str, list[dict[str, Any]]]], out_dir: Path) -> None:
    """Accuracy vs round, vs simulated time and vs cumulative uplink bytes, one line per run."""
    for key, label, name in PLOT_AXES:
        accuracy_figure(runs, key, label).savefig(out_dir / name)


def write_knobs(resources: RoundResources, out_dir: Path) -> None:
    """DIR/knobs.json: the planner's decisions (FedDPQ's plan; LGC's per-round choices)."""
    summary = resources.summary()
    if summary is None:
        return
    tmp = Path(out_dir) / (KNOBS_FILE + '.tmp')
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(Path(out_dir) / KNOBS_FILE)
