"""The ground station's checkpoint: after every closed round, all it needs to go on.

DIR/station_checkpoint.npz holds the global weights (``w/<name>``), the strategy's state
(its ``state_dict``: SCAFFOLD's c, FedNova's, FedDisco's, OSAFL's, LGC's state, a strategy's
own generator) as the engine's checkpoint stores it (a JSON tree whose numpy arrays are npz
entries: fl_uav.aggregation.strategy.state_arrays_out), and one JSON ``meta`` entry: the run
id and start stamp, the rounds closed, the round records and counters of the report so
far, the divergence monitor, the upload acknowledgements owed, the resource planner's
inputs, status, knobs sent and log, and the identity the checkpoint is only good for. The
random streams need no position of their own: every stream the station draws from is keyed
by (world.seed, round, purpose, drone) (fl_uav.streams), so the next round index is their
position; a strategy's own generator is in its state_dict. DIR/station_checkpoint.json is a
small manifest for people and scripts (run, round, identity); the npz alone is read back.

Both are written to a temporary name and renamed (os.replace), so a station killed at any
moment leaves the previous checkpoint or the new one, never a torn file. A resume reads the
whole checkpoint, checks it (identity, format, every array), builds the strategy, planner
and records it describes, and only then hands them to the station: a checkpoint that is
corrupt, of another format, or made for another model, fleet size, mode, strategy, planner,
run length, world seed or station key is refused with one line (:class:`CheckpointError`,
a ConfigError: the node logs it and exits with the config error status), and nothing of it
is loaded.

Not checkpointed: ``mode: express`` (the FedEx tours' runtime); a resume there is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import serialization

from fl_uav.aggregation.robust import unwrapped
from fl_uav.aggregation.strategy import Strategy, state_arrays_in, state_arrays_out
from fl_uav.configschema import ConfigError
from fl_uav.fleet.ground_station import PER_DRONE_FIELDS, GroundStation, RoundRecord
from fl_uav.fleet.messages import valid_run_id
from fl_uav.fleet.run_log import STATION_CHECKPOINT_FILE, STATION_CHECKPOINT_MANIFEST
from fl_uav.fleet.station_resources import StationResources
from fl_uav.learning.divergence import DivergenceMonitor
from fl_uav.learning.weights import architecture_fingerprint
from fl_uav.plugins import (
    attribute_snapshot,
    changed_attributes,
    is_plugin_spec,
    overrides_state_dict,
)
from fl_uav.world.landcover import CLASS_NAMES

CHECKPOINT_FILE = STATION_CHECKPOINT_FILE
MANIFEST_FILE = STATION_CHECKPOINT_MANIFEST
FORMAT_VERSION = 1
#: RoundRecord fields a checkpoint written before them may lack (issue 26 item 6): they take
#: their defaults (no norms, outliers or capped counts recorded for those rounds).
_ADDED_FIELDS = ('update_norms', 'outliers', 'samples_claimed')


class CheckpointError(ConfigError):
    """A station checkpoint that cannot be resumed from (one line: file and what)."""


def unsupported(station: GroundStation) -> str:
    """Why this station writes no checkpoint ('' when it does)."""
    if station.express is not None:
        return 'mode express (the FedEx tours in flight) is not checkpointed'
    return ''


def station_key_fingerprint(station: GroundStation) -> str:
    """sha256 (16 hex digits) of the station's public signing key; 'unsigned' without keys."""
    key = station.station_key
    if key is None:
        return 'unsigned'
    raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def identity(station: GroundStation) -> dict[str, Any]:
    """What a checkpoint must agree on with the station that resumes from it (config key or
    what: value)."""
    c = station.config
    return {
        'format': FORMAT_VERSION,
        'learning.model': c.learning.model,
        'learning.input_px': c.learning.input_px,
        'model architecture': architecture_fingerprint(station.weights).hex(),
        'num_drones': c.num_drones,
        'mode': c.mode,
        'aggregation.strategy': str(c.aggregation.strategy),
        'resources.planner': c.resources.planner,
        'rounds.num_rounds': c.rounds.num_rounds,
        'world.seed': c.world.seed,
        'station key (security.keys_dir)': station_key_fingerprint(station),
    }


def plugin_snapshot(station: GroundStation) -> dict[str, Any] | None:
    """The strategy plug-in's attributes as built, when it has no state_dict of its own
    (engine rule: a plug-in that defines state_dict is trusted); None otherwise."""
    if (is_plugin_spec(station.config.aggregation.strategy)
            and not overrides_state_dict(unwrapped(station.strategy), Strategy)):
        return attribute_snapshot(unwrapped(station.strategy))
    return None


def save(station: GroundStation, out_dir: str | os.PathLike,
         snapshot: dict[str, Any] | None = None) -> Path:
    """Write DIR/station_checkpoint.npz (then the manifest), atomically; call between rounds
    (under the lock the station's rounds run under). ``snapshot``: :func:`plugin_snapshot`
    taken at start (a plug-in's state that no state_dict holds makes the checkpoint
    unresumable, as in the engine). ValueError when the strategy's state is not
    checkpointable."""
    out = Path(out_dir)
    meta = station.checkpoint_state()
    arrays = {f'w/{n}': np.asarray(w) for n, w in station.weights.items()}
    meta['strategy'] = state_arrays_out(station.strategy.state_dict(), 'strategy', arrays)
    meta['unsaved_plugin_state'] = changed_attributes(snapshot, unwrapped(station.strategy))
    meta['identity'] = identity(station)
    try:
        meta_json = json.dumps(meta)
    except (TypeError, ValueError) as exc:
        raise ValueError(f'cannot checkpoint round {meta["rounds_closed"]}: the state of '
                         f'aggregation.strategy {station.config.aggregation.strategy!r} holds a '
                         f'value that is neither JSON nor a numpy array ({exc})') from None
    suffix = f'{os.getpid()}.{threading.get_ident()}.tmp'
    tmp = out / f'{CHECKPOINT_FILE}.{suffix}.npz'
    with open(tmp, 'wb') as f:
        np.savez(f, meta=np.frombuffer(meta_json.encode(), np.uint8), **arrays)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(out / CHECKPOINT_FILE)
    manifest = {'format': FORMAT_VERSION, 'run_id': meta['run_id'],
                'run_started_ms': meta['run_started_ms'],
                'rounds_closed': meta['rounds_closed'], 'identity': meta['identity'],
                'checkpoint': CHECKPOINT_FILE}
    tmp = out / f'{MANIFEST_FILE}.{suffix}'
    tmp.write_text(json.dumps(manifest, indent=2))
    tmp.replace(out / MANIFEST_FILE)
    return out / CHECKPOINT_FILE


def checkpoint_path(directory: str | os.PathLike) -> Path:
    """The checkpoint file in a station's output directory."""
    return Path(directory) / CHECKPOINT_FILE


def resume(station: GroundStation, directory: str | os.PathLike) -> int:
    """Load DIR/station_checkpoint.npz into ``station`` (just built, no round opened): the
    same run id and start, the weights, strategy, records, planner and counters. Returns the
    rounds closed (the next round is that + 1). CheckpointError (one line) and nothing loaded
    when the checkpoint is missing, corrupt or made for another station."""
    path = checkpoint_path(directory)
    where = f'cannot resume from {path}'
    if station.round_open or station.records:
        raise RuntimeError('resume a station before it opens a round')
    why = unsupported(station)
    if why:
        raise CheckpointError(f'{where}: {why}')
    if not path.is_file():
        raise CheckpointError(f'{where}: no such file (the station writes it after each '
                              f'closed round into its output_dir)')
    meta, arrays = _read(path, where)
    _check_identity(meta, identity(station), where)
    parts = _parts(station, meta, arrays, where)
    station.restore(meta, *parts)
    return len(station.records)


def _read(path: Path, where: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The meta JSON and every array, all read now (a torn or corrupt file fails here)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: np.array(archive[name]) for name in archive.files}
        meta = json.loads(bytes(arrays.pop('meta')).decode())
    except KeyError:
        raise CheckpointError(f'{where}: not a station checkpoint (no meta entry)') from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is refused in one line
        raise CheckpointError(f'{where}: corrupt or not a station checkpoint '
                              f'({type(exc).__name__}: {_one_line(exc)})') from None
    if not isinstance(meta, dict):
        raise CheckpointError(f'{where}: corrupt (its meta entry is not a JSON object)')
    return meta, arrays


def _check_identity(meta: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    found = meta.get('identity')
    if not isinstance(found, dict):
        raise CheckpointError(f'{where}: corrupt (no identity in its meta entry)')
    if found.get('format') != expected['format']:
        raise CheckpointError(f'{where}: format {found.get("format")!r}, this station reads '
                              f'format {expected["format"]}')
    for key, value in expected.items():
        if found.get(key) != value:
            raise CheckpointError(f'{where}: made for another station: {key} is '
                                  f'{found.get(key)!r} in the checkpoint, {value!r} here')


def _parts(station: GroundStation, meta: dict[str, Any], arrays: dict[str, np.ndarray],
           where: str) -> tuple:
    """Everything the station takes over, built and checked; nothing of the station is
    touched here."""
    try:
        unsaved = meta['unsaved_plugin_state']
        if unsaved:
            raise CheckpointError(
                f'{where}: the strategy plug-in {station.config.aggregation.strategy!r} kept '
                f'state its checkpoint does not hold ({", ".join(unsaved)}) and defines no '
                f'state_dict; give it state_dict()/load_state_dict()')
        if not valid_run_id(meta['run_id']) or not isinstance(meta['run_started_ms'], int):
            raise ValueError(f'run id {meta["run_id"]!r} / start {meta["run_started_ms"]!r}')
        weights = _weights(station, arrays)
        records = [_record(row) for row in meta['records']]
        closed = int(meta['rounds_closed'])
        if [r.round_index for r in records] != list(range(1, closed + 1)):
            raise ValueError(f'round records {[r.round_index for r in records]} are not '
                             f'rounds 1..{closed}')
        if closed > station.config.rounds.num_rounds:
            raise ValueError(f'{closed} rounds closed of a run of '
                             f'{station.config.rounds.num_rounds}')
        for key in ('initial_accuracy', 'initial_loss'):
            float(meta[key])
        if not isinstance(meta['failure'], str) or not isinstance(meta['failed_in_a_row'], int):
            raise ValueError('failure / failed_in_a_row')
        {int(k): v for k, v in meta['used_last_round'].items()}   # noqa: B018 - checked
        {str(k): int(v) for k, v in meta['rejected_total'].items()}   # noqa: B018
        strategy = station.build_strategy()
        strategy.load_state_dict(state_arrays_in(meta['strategy'], arrays))
        resources = StationResources(station.config, len(CLASS_NAMES))
        resources.load_state_dict(meta['resources'], closed)
        d = meta['divergence']
        divergence = DivergenceMonitor(len(CLASS_NAMES), station.config.rounds.num_rounds)
        divergence.warnings = [str(w) for w in d['warnings']]
        divergence._raised = {str(w) for w in d['raised']}
        divergence._rounds = int(d['rounds'])
        divergence._best_accuracy = float(d['best_accuracy'])
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever is malformed: refused, in one line
        raise CheckpointError(f'{where}: corrupt or inconsistent state '
                              f'({type(exc).__name__}: {_one_line(exc)})') from None
    return weights, strategy, records, resources, divergence


def _weights(station: GroundStation, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The checkpoint's global weights: every tensor of the station's model, float32, finite,
    of its shape, in its order (the codec's tensor order)."""
    found = {n[2:]: a for n, a in arrays.items() if n.startswith('w/')}
    if set(found) != set(station.weights):
        raise ValueError(f"weights {sorted(found)} are not the model's tensors")
    weights = {}
    for name, ref in station.weights.items():
        value = found[name]
        if value.shape != ref.shape or value.dtype != np.float32:
            raise ValueError(f'weight {name}: {value.dtype} {value.shape}, the model has '
                             f'{ref.dtype} {ref.shape}')
        if not np.all(np.isfinite(value)):
            raise ValueError(f'weight {name} holds non-finite values')
        weights[name] = value
    return weights


def _record(row: dict[str, Any]) -> RoundRecord:
    """A RoundRecord back from its to_dict (per-drone keys back to ints)."""
    names = {f.name for f in dataclasses.fields(RoundRecord)}
    if set(row) - set(_ADDED_FIELDS) != names - set(_ADDED_FIELDS) or not set(row) <= names:
        raise ValueError(f'a round record with fields {sorted(set(row) ^ names)} differing')
    values = dict(row)
    for key in PER_DRONE_FIELDS:
        if key in row:
            values[key] = {int(k): v for k, v in row[key].items()}
    values['train_loss'] = {k: float('nan') if v is None else float(v)
                            for k, v in values['train_loss'].items()}
    return RoundRecord(**values)


def _one_line(exc: BaseException) -> str:
    return ' '.join(str(exc).split())[:300]
