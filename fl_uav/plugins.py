"""Your own strategy, compressor or top-up generator, named in a config as ``module:Name``.

Three config keys take either a built-in name or a plug-in spec ``package.module:Name``:

==========================  ===============================================  ==================
key                         what ``Name`` must give                          where it runs
==========================  ===============================================  ==================
``aggregation.strategy``    a :class:`fl_uav.aggregation.strategy.Strategy`  engine, station
``compression.method``      a :class:`fl_uav.compression.compressor.         engine, drones
                            Compressor` whose frames the station decodes
``data.topup_generator``    a :class:`fl_uav.learning.topup.Generator`       engine only
==========================  ===============================================  ==================

``Name`` is a class (built with the keyword arguments its constructor names, out of the ones
the key provides: :data:`fl_uav.aggregation.STRATEGY_PLUGIN_ARGUMENTS`, ...) or a factory
function called the same way. The module is imported with :func:`importlib.import_module`:
it must be importable by the process that reads the config (an installed package, or its
directory on ``PYTHONPATH``; the ``fl-uav`` command does not put the current directory there).

The config check imports the module and looks the name up, so a wrong spec fails when the
config is built, as a :class:`~fl_uav.configschema.ConfigError` naming the key, the value and
what is wrong (module not importable, no such attribute, not the key's base class, a
constructor parameter the key does not provide). The object a factory returns is checked when
it is built. Everything here is plain Python (no ROS).
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import hashlib
import importlib
import inspect
import pickle
import random
import sys
import sysconfig
import traceback
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fl_uav.configschema import ConfigError

SPEC_SEPARATOR = ':'
SPEC_FORM = 'package.module:ClassName'


@dataclass(frozen=True)
class PluginKind:
    """What one config key's plug-ins must be.

    key: the dotted config key (``aggregation.strategy``). base: the class (or runtime-checkable
    Protocol) the built object must be an instance of; base_name: how messages call it.
    arguments: the keyword arguments the key provides to the constructor or factory.
    requires: methods a class must implement (a Protocol's, checked on classes that do not
    subclass it). calls: the base's methods the engine and the nodes call; a class that
    overrides one must accept the call the base's signature describes.
    """

    key: str
    base: type
    base_name: str
    arguments: tuple[str, ...]
    requires: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()


def is_plugin_spec(value: Any) -> bool:
    """Whether a config value names a plug-in (``module:Name``) rather than a built-in."""
    return isinstance(value, str) and SPEC_SEPARATOR in value


def split_spec(key: str, spec: str) -> tuple[str, str]:
    """(module, attribute) of ``package.module:Name``; ConfigError naming ``key`` if malformed."""
    module, _, attribute = spec.partition(SPEC_SEPARATOR)
    parts_ok = (all(p.isidentifier() for p in module.split('.'))
                and all(p.isidentifier() for p in attribute.split('.')))
    if not module or not attribute or SPEC_SEPARATOR in attribute or not parts_ok:
        raise ConfigError(f'{key} {spec!r}: a plug-in is written {SPEC_FORM!r} (a module path '
                          f'of Python identifiers, one colon, a class or factory name)')
    return module, attribute


def resolve(key: str, spec: str) -> Any:
    """The object ``spec`` names, imported; ConfigError naming ``key`` and the problem."""
    module_name, attribute = split_spec(key, spec)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name
                                     or module_name.startswith(exc.name + '.')):
            raise ConfigError(
                f'{key} {spec!r}: cannot import module {module_name!r} ({exc}); install it or '
                f'put its directory on PYTHONPATH (searched: {_search_path()})') from None
        raise ConfigError(f'{key} {spec!r}: importing module {module_name!r} failed: a module '
                          f'it imports is missing ({exc})') from None
    except Exception as exc:   # the plug-in's own code raised while being imported
        raise ConfigError(f'{key} {spec!r}: importing module {module_name!r} failed: '
                          f'{type(exc).__name__}: {exc}{raised_at(exc)}') from exc
    value: Any = module
    for part in attribute.split('.'):
        if not hasattr(value, part):
            defined = _defined_here(module)
            close = difflib.get_close_matches(attribute, defined, n=1)
            hint = f' (did you mean {close[0]!r}?)' if close else ''
            shown = ', '.join(defined[:SHOWN_NAMES]) + (
                f', ... ({len(defined)} in all)' if len(defined) > SHOWN_NAMES else '')
            raise ConfigError(f'{key} {spec!r}: module {module_name!r} '
                              f'({_module_file(module)}) has no attribute {attribute!r}{hint}; '
                              f'its classes and functions: {shown or "none"}')
        value = getattr(value, part)
    return value


#: How many of a module's names a "has no attribute" error lists (the hint searches all).
SHOWN_NAMES = 20


def _defined_here(module: Any) -> list[str]:
    """The public classes and functions ``module`` defines itself (not the ones it imports)."""
    return sorted(name for name, obj in vars(module).items()
                  if not name.startswith('_') and (inspect.isclass(obj) or inspect.isfunction(obj))
                  and getattr(obj, '__module__', None) == module.__name__)


_PACKAGE_DIR = Path(__file__).resolve().parent
#: Where the interpreter's own modules and installed libraries live (numpy, torch, ...): a
#: frame there is not the plug-in's line, unless the plug-in itself is installed there.
_LIBRARY_DIRS = tuple(dict.fromkeys(
    Path(sysconfig.get_paths()[key]).resolve()
    for key in ('stdlib', 'platstdlib', 'purelib', 'platlib')))


def _under(filename: str, directories: Sequence[Path]) -> bool:
    path = Path(filename).resolve()
    return any(path.is_relative_to(d) for d in directories)


def raised_at(exc: BaseException) -> str:
    """' (at file:line)' of the innermost frame that raised ``exc``, or ''; when that frame is
    fl_uav's or a library's (a helper the plug-in called, e.g. weighted_mean_delta or
    np.stack), ', called from file:line' adds the innermost frame of neither: the plug-in's
    line (the innermost frame outside fl_uav, if the plug-in is itself an installed package)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ''
    inner = frames[-1]
    outside = ([f for f in frames if not _under(f.filename, (_PACKAGE_DIR, *_LIBRARY_DIRS))]
               or [f for f in frames if not _under(f.filename, (_PACKAGE_DIR,))])
    caller = (f', called from {outside[-1].filename}:{outside[-1].lineno}'
              if outside and outside[-1] is not inner else '')
    return f' (at {inner.filename}:{inner.lineno}{caller})'


def _search_path(shown_entries: int = 6) -> str:
    """The first entries of ``sys.path``, without repeats ('' is the current directory)."""
    entries = list(dict.fromkeys(p or '(current directory)' for p in sys.path))
    return ', '.join(entries[:shown_entries]) + (', ...' if len(entries) > shown_entries
                                                 else '')


def _module_file(module: Any) -> str:
    return str(getattr(module, '__file__', None) or 'no file')


def check_plugin(kind: PluginKind, spec: str) -> Callable[..., Any]:
    """The class or factory ``spec`` names, checked as far as possible without building it:
    a class must be a subclass of ``kind.base`` (or, for a Protocol, have its methods) and not
    abstract; either must take no required parameter the key does not provide."""
    target = resolve(kind.key, spec)
    if inspect.isclass(target):
        if not _class_fits(target, kind):
            raise ConfigError(f'{kind.key} {spec!r}: {_qualified(target)} is not a '
                              f'{kind.base_name} ({_what_it_needs(kind)})')
        if inspect.isabstract(target):
            missing = ', '.join(sorted(target.__abstractmethods__))
            raise ConfigError(f'{kind.key} {spec!r}: {_qualified(target)} does not implement '
                              f'{missing} (abstract in {kind.base_name})')
        for method in kind.calls:
            problem = _call_problem(target, kind.base, method)
            if problem:
                raise ConfigError(f'{kind.key} {spec!r}: {_qualified(target)}.{problem}')
    elif not callable(target):
        raise ConfigError(f'{kind.key} {spec!r}: {_qualified(target)} is a '
                          f'{type(target).__name__}, neither a class nor a factory function')
    plugin_arguments(kind, spec, target)
    return target


def _call_problem(cls: type, base: type, method: str) -> str:
    """'' if ``cls.method`` accepts the call ``base.method``'s signature describes (its
    positional parameters by position, its keyword-only ones by name, the optional ones too:
    the callers pass them), else what is wrong, starting with the method's name."""
    mine, theirs = getattr(cls, method, None), getattr(base, method, None)
    if mine is None or theirs is None or mine is theirs or not callable(mine):
        return ''
    if isinstance(inspect.getattr_static(cls, method), staticmethod | classmethod):
        return ''   # no self to stand in for: not judged
    try:
        wanted, given = inspect.signature(theirs), inspect.signature(mine)
    except (TypeError, ValueError):   # a builtin or a C callable: not ours to judge
        return ''
    positional = [p.name for p in wanted.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = [p.name for p in wanted.parameters.values() if p.kind is p.KEYWORD_ONLY]
    try:
        given.bind(*positional, **dict.fromkeys(keywords))
    except TypeError as exc:
        return (f'{method}{_plain(given)} cannot take the call {base.__name__}.{method}'
                f'{_plain(wanted)} describes ({exc})')
    return ''


def _plain(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` without annotations: the names and defaults a message needs."""
    return signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=inspect.Signature.empty)


def _class_fits(cls: type, kind: PluginKind) -> bool:
    if _is_protocol(kind.base):    # structural: the methods are there
        return all(callable(getattr(cls, method, None)) for method in kind.requires)
    return issubclass(cls, kind.base)


def _is_protocol(cls: type) -> bool:
    return bool(getattr(cls, '_is_protocol', False))


def _what_it_needs(kind: PluginKind) -> str:
    if _is_protocol(kind.base):
        return f'a plug-in for {kind.key} must have the method(s) {", ".join(kind.requires)}'
    return f'a plug-in for {kind.key} must subclass it'


def _qualified(obj: Any) -> str:
    module = getattr(obj, '__module__', None)
    name = getattr(obj, '__qualname__', None) or repr(obj)
    return f'{module}.{name}' if module else name


def plugin_arguments(kind: PluginKind, spec: str, target: Callable[..., Any],
                     values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The keyword arguments ``target`` gets: those of ``kind.arguments`` its signature names
    (all of them if it takes ``**kwargs``), taken from ``values`` (None: names only). A
    required parameter the key does not provide is a ConfigError."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return {}
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        names: Collection[str] = kind.arguments
    else:
        names = [p.name for p in params if p.name in kind.arguments
                 and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unmet = [p.name for p in params if p.default is p.empty and p.name not in names
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if unmet:
        raise ConfigError(f'{kind.key} {spec!r}: {_qualified(target)} requires '
                          f'{", ".join(unmet)}, which {kind.key} does not provide; it provides '
                          f'{", ".join(kind.arguments)} (give the others defaults, or name a '
                          f'factory function that sets them)')
    if values is None:
        return dict.fromkeys(names)
    return {name: values[name] for name in names}


def build_plugin(kind: PluginKind, spec: str, values: Mapping[str, Any]) -> Any:
    """Build the plug-in ``spec`` names with the arguments its signature asks for out of
    ``values`` (one per name in ``kind.arguments``); the result must be a ``kind.base``."""
    target = check_plugin(kind, spec)
    arguments = plugin_arguments(kind, spec, target, values)
    try:
        built = target(**arguments)
    except Exception as exc:   # its own code: say what and where, without a traceback
        given = ', '.join(f'{k}={v!r}' for k, v in arguments.items())
        raise ConfigError(f'{kind.key} {spec!r}: {_qualified(target)}({given}) failed: '
                          f'{type(exc).__name__}: {exc}{raised_at(exc)}') from exc
    if not isinstance(built, kind.base):
        raise ConfigError(f'{kind.key} {spec!r}: {_qualified(target)} returned a '
                          f'{_qualified(type(built))}, not a {kind.base_name} '
                          f'({_what_it_needs(kind)})')
    if not inspect.isclass(target):   # a factory's product: its methods checked now
        for method in kind.calls:
            problem = _call_problem(type(built), kind.base, method)
            if problem:
                raise ConfigError(f'{kind.key} {spec!r}: {_qualified(target)} returned a '
                                  f'{_qualified(type(built))} whose {problem}')
    return built


def require_name_or_plugin(kind: PluginKind, value: str, choices: Collection[str],
                           choice_key: str | None = None) -> None:
    """A config section's check of a key that takes a built-in name or a plug-in spec.

    A spec is checked by :func:`check_plugin` (ConfigError). An unknown name is a ValueError
    naming ``choice_key`` (default ``kind.key``), the value, the choices and the plug-in form
    (a dotted name without the colon is pointed at it)."""
    if is_plugin_spec(value):
        check_plugin(kind, value)
        return
    if value in choices:
        return
    hint = ''
    if '.' in value:
        module, _, name = value.rpartition('.')
        hint = f' (a plug-in needs a colon before its class: {module}:{name})'
    raise ValueError(f'{choice_key or kind.key} {value!r} unknown; choices: '
                     f'{", ".join(choices)}, or a plug-in {SPEC_FORM!r}{hint}')


PLUGIN_KEYS = ('aggregation.strategy', 'compression.method', 'data.topup_generator')
"""The config keys that take a plug-in spec (the fleet has the first two)."""


def plugin_sources(flat: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """{key: :func:`plugin_source`} for every plug-in a flat config (``to_flat``) names: what
    a run's summary records beside the spec strings of its config."""
    return {key: plugin_source(flat[key]) for key in PLUGIN_KEYS
            if key in flat and is_plugin_spec(flat[key])}


def plugin_source(spec: str) -> dict[str, str]:
    """Where a plug-in's code came from, for a run's summary: the spec, the module's file and
    the SHA-256 of its bytes ('' when it has no file), so a result can be traced to its code."""
    module = sys.modules.get(spec.partition(SPEC_SEPARATOR)[0])
    path = getattr(module, '__file__', None) or ''
    digest = ''
    if path and Path(path).is_file():
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return {'spec': spec, 'module_file': path, 'module_sha256': digest}


def overrides_state_dict(obj: Any, base: type) -> bool:
    """Whether ``obj``'s class defines its own ``state_dict`` (not ``base``'s default)."""
    return getattr(type(obj), 'state_dict', None) is not getattr(base, 'state_dict', None)


def attribute_snapshot(obj: Any) -> dict[str, Any] | None:
    """A deep copy of ``obj``'s instance attributes, to tell later whether it kept state
    (None when they cannot be copied: then nothing is told)."""
    try:
        return copy.deepcopy(dict(vars(obj)))
    except Exception:   # locks, handles, ...: not ours to judge
        return None


def changed_attributes(snapshot: Mapping[str, Any] | None, obj: Any) -> list[str]:
    """The names of ``obj``'s instance attributes that differ from ``snapshot`` (added,
    removed or changed; numpy arrays compared by value), sorted; [] without a snapshot."""
    if snapshot is None:
        return []
    now = vars(obj)
    return sorted(name for name in set(snapshot) | set(now)
                  if name not in snapshot or name not in now
                  or not _same_value(snapshot[name], now[name]))


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.shape == b.shape and a.dtype == b.dtype
                and bool(np.all((a == b) | ((a != a) & (b != b)))))   # NaN equals NaN
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and type(a) is type(b):
        return len(a) == len(b) and all(map(_same_value, a, b))
    if type(a) is type(b) and type(a).__eq__ is object.__eq__:
        # No == of its own (a random Generator, a helper object): == is identity, and a deep
        # copy is never identical. Compared by content: its pickle, else its attributes.
        try:
            return pickle.dumps(a) == pickle.dumps(b)
        except Exception:   # noqa: BLE001 - not picklable: its attributes, if it has them
            if hasattr(a, '__dict__') and hasattr(b, '__dict__'):
                return _same_value(vars(a), vars(b))
            return False
    try:
        return bool(a == b)
    except Exception:   # an object whose == is not a truth value
        return False


@contextlib.contextmanager
def seeded_global_random(seed: int) -> Iterator[None]:
    """numpy's legacy global generator (``np.random.normal``, ...) and Python's ``random``
    seeded with ``seed`` inside the block, their earlier states put back after it: a plug-in
    that draws from them instead of the ``rng`` or ``seed`` it is given is still
    reproducible where the caller seeds per round (the experiment engine). torch's generator
    is not touched."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    np.random.seed(seed % 2**32)
    random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)
