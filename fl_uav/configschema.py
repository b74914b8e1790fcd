"""One config schema for the fleet, the ROS nodes and the launcher.

Config files are YAML in ROS 2 parameter format::

    /**:
      ros__parameters:
        world:
          seed: 7

Nested mappings become dotted parameter names (``world.seed``), as ``ros2 launch`` and
``--params-file`` treat them. A frozen dataclass tree describes every key; :func:`build_config`
turns a flat ``{dotted_key: value}`` mapping into that tree and fails on the first unknown key or
bad value with a :class:`ConfigError` naming the key and what is allowed. Values keep the type
ROS 2's parser gives them: a plain ``1e-3`` is a number, a quoted ``'0.1'`` or ``'10'`` is a
string, which a number key refuses, naming itself (integer and float keys alike).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A config key or value is wrong; the message names the key and the allowed values."""


_SCALARS = (bool, int, float, str)


class NumberOrWord:
    """Leaf type of a ``float | str`` field: a number (coerced to float) or a word such as
    ``auto``; the section's ``__post_init__`` says which words it accepts."""


def require_choice(key: str, value: Any, choices: typing.Collection[str]) -> None:
    """ValueError naming ``key``, the bad ``value`` and the allowed ``choices`` unless
    ``value`` is one of them (what every config section's ``__post_init__`` checks)."""
    if value not in choices:
        raise ValueError(f'{key} {value!r} unknown; choices: {", ".join(choices)}')


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _leaf_kind(tp: Any) -> tuple[str, type] | None:
    """Return ('scalar', T) or ('list', T) for a supported leaf type, else None."""
    if tp in _SCALARS:
        return 'scalar', tp
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if len(set(args)) == 1 and args[0] in _SCALARS:
            return 'list', args[0]
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _leaf_kind(args[0])
        if set(args) == {float, str}:
            return 'scalar', NumberOrWord
    return None


def iter_leaves(cls: type, prefix: str = '') -> Iterator[tuple[str, Any, type, str]]:
    """Yield (dotted_key, default, element_type, kind) for every settable leaf of a section."""
    hints = _field_types(cls)
    for field in dataclasses.fields(cls):
        tp = hints[field.name]
        key = f'{prefix}{field.name}'
        if _is_section(tp):
            yield from iter_leaves(tp, key + '.')
            continue
        leaf = _leaf_kind(tp)
        if leaf is None:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        yield key, default, leaf[1], leaf[0]


def default_flat(cls: type) -> dict[str, Any]:
    """All settable keys of a config class with their defaults."""
    return {key: default for key, default, _, _ in iter_leaves(cls)}


class _ParamsLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading a plain ``1e-3`` or ``5e2`` as a number, as ROS 2's own
    parameter parser (rcl_yaml_param_parser) and YAML 1.2 do; YAML 1.1 needs a dot (``1.0e-3``)
    and would hand over the string. A quoted ``'0.1'`` stays a string in both, and a number key
    refuses it (:func:`_coerce`), so a file means the same to ``fl-uav`` and ``ros2 launch``."""


_ParamsLoader.add_implicit_resolver(
    'tag:yaml.org,2002:float',
    re.compile(r'^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$'),
    list('-+0123456789'))


def _load_yaml(text: str) -> Any:
    """YAML text as ROS 2 parameter files are read (:class:`_ParamsLoader`)."""
    return yaml.load(text, Loader=_ParamsLoader)   # noqa: S506 - a SafeLoader subclass


def _looks_numeric(text: str) -> bool:
    """``'10'``, ``'0.1'``: a number written as a (quoted) string, which number keys refuse."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _not_nan(key: str, value: float) -> float:
    """NaN passes every ``x < 0`` range check, so it is refused here, once for every key."""
    if math.isnan(value):
        raise ConfigError(f'config key {key!r}: NaN is not a value')
    return value


#: Keys (by the end of their last segment) that hold a file or directory path.
PATH_KEY_SUFFIXES = ('_dir', '_file', 'path')


def _expand_home(key: str, value: Any) -> Any:
    """``~/fl_runs`` -> ``/home/<user>/fl_runs`` for path keys: a shell leaves ``~`` after
    ``:=`` (``-p output_dir:=~/fl_runs``) and in YAML unexpanded."""
    if isinstance(value, str) and key.rsplit('.', 1)[-1].endswith(PATH_KEY_SUFFIXES):
        return os.path.expanduser(value)
    return value


def _coerce(key: str, value: Any, elem: type, kind: str) -> Any:
    def one(v: Any) -> Any:
        if elem is bool:
            if isinstance(v, bool):
                return v
            raise ConfigError(f'config key {key!r}: expected true or false, got {v!r}')
        if elem is int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f'config key {key!r}: expected an integer, got {v!r}'
                                  + (' (a string: write it unquoted)'
                                     if isinstance(v, str) and _looks_numeric(v) else ''))
            return v
        if elem is float:   # a quoted '0.1' is text, as it is to ROS 2: refused like '10'
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ConfigError(f'config key {key!r}: expected a number, got {v!r}'
                                  + (' (a string: write it unquoted)'
                                     if isinstance(v, str) and _looks_numeric(v) else ''))
            return _not_nan(key, float(v))
        if elem is NumberOrWord:
            if isinstance(v, str):
                return v
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ConfigError(f'config key {key!r}: expected a number or a word, got {v!r}')
            return _not_nan(key, float(v))
        if not isinstance(v, str):
            raise ConfigError(f'config key {key!r}: expected a string, got {v!r}')
        return v

    if kind == 'list':
        if not isinstance(value, list | tuple):
            raise ConfigError(f'config key {key!r}: expected a list, got {value!r}')
        return tuple(one(v) for v in value)
    return one(value)


#: This many unknown keys at once mean a config file for another command (a plan config given
#: to `fl-uav experiment`), not misspellings: said so instead of listing every allowed key.
MISMATCH_UNKNOWN_KEYS = 5


#: Names other FL tools use for a key, by last segment (`learning.learning_rate` is
#: `learning.lr` here); spelling-based suggestions miss these.
SYNONYMS: dict[str, tuple[str, ...]] = {
    'learning_rate': ('lr',), 'lr_rate': ('lr',), 'step_size': ('lr',),
    'epochs': ('local_epochs',), 'num_epochs': ('local_epochs',),
    'local_steps': ('max_steps', 'max_local_steps'), 'batch': ('batch_size',),
    'rounds': ('num_rounds',), 'num_round': ('num_rounds',),
    'drones': ('num_drones',), 'num_clients': ('num_drones',), 'clients': ('num_drones',),
    'random_seed': ('seed',), 'wd': ('weight_decay',), 'prune_ratio': ('prune_fraction',),
}


def _synonym(key: str, leaves: Mapping[str, Any]) -> list[str]:
    """[the allowed key another tool's name for ``key`` stands for], or []."""
    section, _, name = key.rpartition('.')
    for other in SYNONYMS.get(name.lower(), ()):
        candidate = f'{section}.{other}' if section else other
        if candidate in leaves:
            return [candidate]
    return []


def build_config(cls: type, flat: Mapping[str, Any]) -> Any:
    """Build a frozen config tree from dotted keys; unknown keys and bad values raise."""
    leaves = {key: (elem, kind) for key, _, elem, kind in iter_leaves(cls)}
    unknown = [key for key in flat if key not in leaves]
    if len(unknown) >= MISMATCH_UNKNOWN_KEYS:    # a file for another command, not a typo
        raise ConfigError(
            f'{len(unknown)} of {len(flat)} config keys are unknown here (e.g. '
            f'{", ".join(repr(k) for k in unknown[:3])}): is this config for another command? '
            f'(fl-uav plan reads config/plans/*.yaml, fl-uav experiment '
            f'config/experiments/*.yaml, fl-uav sim and the nodes config/fleet.yaml, '
            f'drone.yaml, ground_station.yaml)')
    for key in unknown:
        section = key.rsplit('.', 1)[0] if '.' in key else ''
        near = sorted(k for k in leaves if k.startswith(section + '.')) if section else []
        allowed = (', '.join(near) if near else 'top-level keys and sections ' + ', '.join(
            sorted({k.split('.', 1)[0] for k in leaves})))
        close = _synonym(key, leaves) or difflib.get_close_matches(key, leaves, n=1)
        hint = f' (did you mean {close[0]!r}?)' if close else ''
        raise ConfigError(f'unknown config key {key!r}{hint}; allowed keys: {allowed}')
    return _build_section(cls, '', flat, leaves)


def _build_section(cls: type, prefix: str, flat: Mapping[str, Any], leaves: dict) -> Any:
    hints = _field_types(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):
        tp = hints[field.name]
        key = f'{prefix}{field.name}'
        if _is_section(tp):
            kwargs[field.name] = _build_section(tp, key + '.', flat, leaves)
        elif key in flat and key in leaves:
            elem, kind = leaves[key]
            kwargs[field.name] = _expand_home(key, _coerce(key, flat[key], elem, kind))
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        section = prefix.rstrip('.') or 'root'
        raise ConfigError(f'config section {section!r}: {exc}') from exc


def to_flat(config: Any, prefix: str = '') -> dict[str, Any]:
    """Flatten a config tree back to dotted keys (settable leaves only)."""
    out: dict[str, Any] = {}
    hints = _field_types(type(config))
    for field in dataclasses.fields(config):
        tp = hints[field.name]
        value = getattr(config, field.name)
        key = f'{prefix}{field.name}'
        if _is_section(tp):
            out.update(to_flat(value, key + '.'))
        elif _leaf_kind(tp) is not None:
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def flatten_mapping(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
    """Turn nested YAML mappings into dotted keys, as ROS 2 parameter files do."""
    out: dict[str, Any] = {}
    for name, value in tree.items():
        key = f'{prefix}{name}'
        if isinstance(value, Mapping):
            out.update(flatten_mapping(value, key + '.'))
        else:
            out[key] = value
    return out


def _nearby_files(path: Path) -> str:
    """' (did you mean ...?)' with the YAML files beside a missing one whose names are close
    (a typo in config/experiments/<name>.yaml), or the directory's YAML files if none is."""
    if not path.parent.is_dir():
        return ''
    names = sorted(p.name for p in path.parent.glob('*.yaml'))
    close = difflib.get_close_matches(path.name, names, n=3)
    if close:
        return f' (did you mean {", ".join(str(path.parent / n) for n in close)}?)'
    return f'; {path.parent} holds {", ".join(names)}' if names else ''


def read_params_file(path: str | Path, node_name: str | None = None) -> dict[str, Any]:
    """Read a ROS 2 parameter file: the ``/**`` section, then the node's own section."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f'config file {str(path)!r} does not exist{_nearby_files(path)}')
    try:
        doc = _load_yaml(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f'config file {str(path)!r} is not valid YAML: {exc}') from exc
    if not isinstance(doc, Mapping):
        raise ConfigError(f'config file {str(path)!r}: top level must be a mapping')
    flat: dict[str, Any] = {}
    sections = ['/**']
    if node_name:
        sections += [node_name, node_name.lstrip('/'), '/' + node_name.lstrip('/')]
    found = [section for section in sections if doc.get(section) is not None]
    if not found:
        keys = ', '.join(map(str, list(doc)[:8])) or 'none, the file is empty'
        raise ConfigError(
            f'config file {str(path)!r} has no {" or ".join(map(repr, sections))} section '
            f'(top-level keys: {keys}); a ROS 2 parameter file reads '
            f'"/**:" then "  ros__parameters:" then the keys')
    for section in found:
        body = doc[section]
        if not isinstance(body, Mapping) or 'ros__parameters' not in body:
            raise ConfigError(
                f'config file {str(path)!r}: section {section!r} needs a ros__parameters mapping')
        flat.update(flatten_mapping(body['ros__parameters'] or {}))
    return flat


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` (value in YAML syntax) from a command line."""
    if '=' not in text:
        raise ConfigError(f'override {text!r} must look like key=value')
    key, raw = text.split('=', 1)
    return key.strip(), _load_yaml(raw)
