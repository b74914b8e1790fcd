"""Checkpoint and resume: DIR/checkpoint.npz (global weights, strategy state, clock, buffers,
per-drone client and compressor state, the FedEx runtime) written from the engine's state and
read back into it, so a resumed run equals an uninterrupted one; plug-ins that kept state
their checkpoint cannot hold are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from fl_uav.aggregation import Strategy
from fl_uav.aggregation.robust import unwrapped
from fl_uav.aggregation.strategy import state_arrays_in as _arrays_in
from fl_uav.aggregation.strategy import state_arrays_out as _arrays_out
from fl_uav.compression.compressor import Compressor
from fl_uav.configschema import to_flat
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.results import CHECKPOINT_FILE, EXPRESS_FILE, ExperimentError, write_knobs
from fl_uav.learning.weights import set_weights
from fl_uav.planning.config import KNOBS_FILE
from fl_uav.plugins import (
    attribute_snapshot,
    changed_attributes,
    is_plugin_spec,
    overrides_state_dict,
)


class CheckpointMixin:
    """ExperimentEngine's checkpoint methods; its ``__init__`` sets the state they save and
    load (config, out_dir, weights, model, strategy, buffers, consumed, topup_sources,
    round_index, sim_time_s, express, resources, _plugin_snapshots) and ClientsMixin holds the
    per-drone client algorithms and compressors (_clients, _compressors, made by _client and
    _compressor)."""

    def write_express(self) -> None:
        """DIR/express.json (FedEx plan and update log 1..round_index), written atomically.

        Written at checkpoints and at the end of a run, not per update (the log grows).
        """
        if self.express is None:
            return
        tmp = self.out_dir / (EXPRESS_FILE + '.tmp')
        tmp.write_text(json.dumps(self.express.summary(upto=self.round_index), indent=1))
        tmp.replace(self.out_dir / EXPRESS_FILE)

    def save_checkpoint(self) -> None:
        """Global weights, strategy state, clock and buffers, written atomically.

        In express mode express.json is written first: the update log a resume reads back.
        """
        self.write_express()
        write_knobs(self.resources, self.out_dir)
        meta = {'round_index': self.round_index, 'sim_time_s': self.sim_time_s,
                'consumed': self.consumed.tolist(), 'topup_sources': self.topup_sources,
                'strategy': None}
        arrays = {f'w/{n}': v for n, v in self.weights.items()}
        arrays.update({f'buffer/{k}': b for k, b in enumerate(self.buffers)})
        meta['strategy'] = _arrays_out(self.strategy.state_dict(), 'strategy', arrays)
        meta['unsaved_plugin_state'] = self._unsaved_plugin_state()
        if self.express is not None:   # the models the UAVs carry, their tours flown
            meta['express'] = self.express.runtime.state_dict(arrays)
        for tag, states in (('client', self._clients), ('compressor', self._compressors)):
            for k, owner in states.items():   # per-drone state: SCAFFOLD c_k, LGC residual
                arrays.update({f'{tag}/{k}/{key}': v for key, v in owner.state_dict().items()})
        try:
            meta_json = json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise ExperimentError(
                f'cannot checkpoint round {self.round_index}: the strategy state of '
                f'aggregation.strategy {self.config.aggregation.strategy!r} holds a value that '
                f'is neither JSON nor a numpy array ({exc}); state_dict() returns str-keyed '
                f'dicts, lists, JSON scalars and numpy arrays') from None
        tmp = self.out_dir / (CHECKPOINT_FILE + '.tmp.npz')
        np.savez(tmp, meta=np.frombuffer(meta_json.encode(), np.uint8), **arrays)
        tmp.replace(self.out_dir / CHECKPOINT_FILE)

    def _unsaved_plugin_state(self) -> dict[str, list[str]]:
        """Per plug-in key, the attributes a plug-in without its own state_dict changed since
        it was built (state a checkpoint does not hold); empty when there are none."""
        unsaved: dict[str, list[str]] = {}
        strategy = self._plugin_snapshots.get('aggregation.strategy')
        if strategy is not None:
            changed = changed_attributes(strategy, unwrapped(self.strategy))
            if changed:
                unsaved['aggregation.strategy'] = changed
        compressor = self._plugin_snapshots.get('compression.method')
        if compressor is not None:
            changed = sorted({name for owner in self._compressors.values()
                              for name in changed_attributes(compressor, owner)})
            if changed:
                unsaved['compression.method'] = changed
        return unsaved

    def load_checkpoint(self) -> None:
        """Continue from DIR/checkpoint.npz."""
        path = self.out_dir / CHECKPOINT_FILE
        if not path.is_file():
            raise ExperimentError(f'cannot resume: {path} does not exist')
        with np.load(path) as archive:
            meta = json.loads(bytes(archive['meta']).decode())
            _refuse_unsaved_plugin_state(meta.get('unsaved_plugin_state') or {}, self.config,
                                         self.out_dir)
            self.weights = {n[2:]: archive[n].astype(np.float32) for n in archive.files
                            if n.startswith('w/')}
            self.buffers = [archive[f'buffer/{k}'] for k in range(self.config.num_drones)]
            strategy_state = _arrays_in(meta['strategy'], archive)
            if self.express is not None:
                self.express.runtime.load_state_dict(meta['express'], archive)
                self.express.log = self._express_log(meta)
            for tag, owner in (('client', self._client), ('compressor', self._compressor)):
                states: dict[int, dict[str, np.ndarray]] = {}
                for name in archive.files:
                    if name.startswith(tag + '/'):
                        _, k, key = name.split('/', 2)
                        states.setdefault(int(k), {})[key] = archive[name]
                for k, state in states.items():
                    owner(k).load_state_dict(state)
        self.round_index = int(meta['round_index'])
        self.sim_time_s = float(meta['sim_time_s'])
        knobs_path = self.out_dir / KNOBS_FILE
        if self.resources.resumes_from_knobs and knobs_path.is_file():
            try:
                self.resources.load_log(json.loads(knobs_path.read_text()), self.round_index)
            except ValueError as exc:
                raise ExperimentError(str(exc)) from exc
        self.consumed = np.asarray(meta['consumed'], np.int64)
        self.topup_sources = list(meta.get('topup_sources', self.topup_sources))
        self.strategy.load_state_dict(strategy_state)
        set_weights(self.model, self.weights)

    def _express_log(self, meta: dict[str, Any]) -> list[dict[str, Any]]:
        """The FedEx update log up to the checkpoint: from express.json (written with every
        checkpoint, perhaps later too), or from the checkpoint itself if an older one."""
        upto = self.express.runtime.update_index
        if 'express_log' in meta:
            return list(meta['express_log'])
        path = self.out_dir / EXPRESS_FILE
        log = (json.loads(path.read_text())['updates'] if path.is_file() else [])
        log = [u for u in log if u['update'] <= upto]
        if [u['update'] for u in log] != list(range(1, upto + 1)):
            raise ExperimentError(f'cannot resume: {path} does not hold the FedEx updates '
                                  f'1..{upto} of the checkpoint')
        return log


def plugin_snapshots(config: ExperimentConfig, strategy: Strategy,
                      compressor: Compressor) -> dict[str, dict[str, Any] | None]:
    """{plug-in key: its attributes as built} for the strategy and compressor plug-ins that
    keep the base's empty state_dict (a plug-in that defines state_dict is trusted)."""
    snapshots = {}
    if (is_plugin_spec(config.aggregation.strategy)
            and not overrides_state_dict(unwrapped(strategy), Strategy)):
        snapshots['aggregation.strategy'] = attribute_snapshot(unwrapped(strategy))
    if (is_plugin_spec(config.compression.method)
            and not overrides_state_dict(compressor, Compressor)):
        snapshots['compression.method'] = attribute_snapshot(compressor)
    return snapshots


def _refuse_unsaved_plugin_state(unsaved: dict[str, list[str]], config: ExperimentConfig,
                                 out_dir: Path) -> None:
    """ExperimentError when the checkpoint was written while a plug-in held state it has no
    state_dict for: a resumed run would start that state over and differ from the run."""
    if not unsaved:
        return
    named = '; '.join(f'{key} {to_flat(config)[key]!r} changed {", ".join(names)}'
                      for key, names in sorted(unsaved.items()))
    raise ExperimentError(
        f'cannot resume {out_dir}: a plug-in kept state its checkpoint does not hold ({named}) '
        f'and defines no state_dict; give it state_dict()/load_state_dict() (or a state_dict '
        f'returning {{}} if those attributes are not state), then start the run again')
