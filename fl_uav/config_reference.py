"""The config-key reference: every settable key of a config target, from the code itself.

A *target* is one config class a command or node reads (``fleet``: :class:`FleetConfig`,
``experiment``: :class:`ExperimentConfig`, ...). For each of its leaves (the keys
:func:`~fl_uav.configschema.iter_leaves` yields, as :func:`~fl_uav.configschema.build_config`
accepts them) the reference gives:

- the default and the type (integer, number, string, bool, list of ...);
- the allowed values where the code has a closed list: found by building the key's section with
  a value no list holds and reading the choices from the error
  :func:`~fl_uav.configschema.require_choice` (or a plug-in key's check) raises, so the list is
  the one the validator enforces; a few closed lists checked otherwise are in
  :data:`EXTRA_CHOICES`;
- the meaning: the key's entry in the docstring of the dataclass that holds it (see
  :func:`docstring_entries` for the forms read). A key without one says so.

``fl-uav keys TARGET`` prints it; ``fl-uav keys all --markdown`` writes docs/config_reference.md.
No ROS: the config classes are imported when a target is first used.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
import textwrap
import typing
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from fl_uav.configschema import ConfigError, NumberOrWord, iter_leaves


@dataclass(frozen=True)
class Target:
    """One config class and who reads it."""

    name: str
    class_path: str     # 'package.module:ClassName', imported on first use
    read_by: str

    def config_class(self) -> type:
        """The dataclass (imported now: the fleet's pulls in torch)."""
        module, _, name = self.class_path.partition(':')
        return getattr(importlib.import_module(module), name)


TARGETS = (
    Target('fleet', 'fl_uav.fleet.config:FleetConfig',
           '`fl-uav sim`, `ros2 launch` and every fleet node (config/fleet.yaml, drone.yaml, '
           'ground_station.yaml)'),
    Target('experiment', 'fl_uav.engine.config:ExperimentConfig',
           '`fl-uav experiment` (config/experiments/*.yaml)'),
    Target('plan', 'fl_uav.planning.plan_request:PlanConfig',
           '`fl-uav plan` (config/plans/*.yaml)'),
    Target('drone-node', 'fl_uav.fleet.config:DroneNodeParams',
           "the drone node's own parameters, beside every `fleet` key"),
    Target('station-node', 'fl_uav.fleet.config:GroundStationNodeParams',
           "the ground station node's own parameters, beside every `fleet` key"),
    Target('autopilot-node', 'fl_uav.fleet.config:AutopilotSimNodeParams',
           "the autopilot simulator node's own parameters, beside every `fleet` key"),
    Target('camera-node', 'fl_uav.fleet.config:CameraNodeParams',
           "the camera node's own parameters (a real camera through OpenCV), beside every "
           '`fleet` key'),
)
TARGET_NAMES = tuple(t.name for t in TARGETS)
ALL_TARGETS = 'all'

#: Closed lists a validator checks without require_choice, by dotted key: the words a
#: number-or-word key takes beside a number, and learning.input_px's model input sizes.
EXTRA_CHOICES: dict[str, tuple[Any, ...]] = {
    'aggregation.server_lr': ('auto',),                   # SERVER_LR_AUTO
    'aggregation.clip_norm': ('median',),                 # CLIP_NORM_MEDIAN
    'resources.lgc_steps_scale': ('auto', 'online'),      # STEPS_SCALE_AUTO, _ONLINE
    'learning.input_px': (16, 32, 64),
}

REGENERATE_COMMAND = 'fl-uav keys all --markdown > docs/config_reference.md'
NO_DESCRIPTION = 'no description'


@dataclass(frozen=True)
class KeyInfo:
    """One settable key of a target."""

    key: str
    default: Any
    type_name: str               # integer | number | string | bool | number or word | list of
    choices: tuple[Any, ...]     # () when any value of the type is allowed
    plugin: bool                 # also takes a plug-in 'package.module:Name'
    description: str             # '' when the holding class's docstring has none
    owner: str                   # module.Class whose docstring describes the key

    @property
    def section(self) -> str:
        """The key's first segment (``learning`` of ``learning.lr``; a top-level key's own
        name)."""
        return self.key.split('.', 1)[0]


def target(name: str) -> Target:
    """The target called ``name``; ConfigError naming the targets otherwise."""
    for candidate in TARGETS:
        if candidate.name == name:
            return candidate
    raise ConfigError(f'unknown config target {name!r}; targets: {", ".join(TARGET_NAMES)}')


# --- the tree -------------------------------------------------------------------------------

def _owners(cls: type, prefix: str = '') -> dict[str, tuple[type, str]]:
    """{dotted key: (the dataclass holding it, its field name)} for every field of the tree."""
    out: dict[str, tuple[type, str]] = {}
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        tp = hints[field.name]
        key = prefix + field.name
        out[key] = (cls, field.name)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out.update(_owners(tp, key + '.'))
    return out


_TYPE_NAMES = {bool: 'bool', int: 'integer', float: 'number', str: 'string',
               NumberOrWord: 'number or word'}


def key_reference(name: str) -> list[KeyInfo]:
    """Every settable key of target ``name``, in the order of the config tree."""
    return list(_key_reference(target(name).name))


@functools.cache
def _key_reference(name: str) -> tuple[KeyInfo, ...]:
    cls = target(name).config_class()
    owners = _owners(cls)
    infos = []
    for key, default, elem, kind in iter_leaves(cls):
        owner, field_name = owners[key]
        type_name = _TYPE_NAMES[elem]
        if kind == 'list':
            type_name = f'list of {type_name}s'
        choices, plugin = (_probe_choices(owner, field_name) if elem is str and kind == 'scalar'
                           else ((), False))
        choices = choices or EXTRA_CHOICES.get(key, ())
        infos.append(KeyInfo(key, default, type_name, choices, plugin,
                             _descriptions(owner).get(field_name, ''),
                             f'{owner.__module__}.{owner.__qualname__}'))
    return tuple(infos)


def key_descriptions(cls: type) -> dict[str, str]:
    """{dotted key: meaning} for every leaf of config class ``cls`` ('' where the holding
    class's docstring has none): the descriptions of :func:`key_reference` without its
    choice probing, cheap enough for a node's parameter descriptors."""
    owners = _owners(cls)
    by_class: dict[type, dict[str, str]] = {}
    out = {}
    for key, *_ in iter_leaves(cls):
        owner, field_name = owners[key]
        if owner not in by_class:
            by_class[owner] = _descriptions(owner)
        out[key] = by_class[owner].get(field_name, '')
    return out


_PROBE = 'fl-uav-keys-probe'     # no dot or colon: not mistaken for a plug-in spec
_CHOICES_RE = re.compile(re.escape(repr(_PROBE)) + r' unknown; choices: (?P<choices>[^\n]*)')
_PLUGIN_CHOICE = 'or a plug-in '


def _probe_choices(section: type, field_name: str) -> tuple[tuple[str, ...], bool]:
    """(choices, takes a plug-in) of a string field: its section built with a value no list
    holds, the choices read from require_choice's error (``... unknown; choices: a, b``).
    Every other field keeps its (valid) default, so the field's own check is what fails."""
    try:
        section(**{field_name: _PROBE})
    except (ValueError, TypeError) as exc:     # ConfigError is a ValueError
        found = _CHOICES_RE.search(str(exc))
        if found:
            items = found['choices'].split(', ')
            plugin = any(item.startswith(_PLUGIN_CHOICE) for item in items)
            return tuple(i for i in items if not i.startswith(_PLUGIN_CHOICE)), plugin
    return (), False


# --- docstrings -----------------------------------------------------------------------------

@functools.cache
def _descriptions(cls: type) -> dict[str, str]:
    """{field name: description} from ``cls``'s docstring, then its bases' (first wins)."""
    names = [f.name for f in dataclasses.fields(cls)]
    found: dict[str, str] = {}
    for klass in cls.__mro__:
        doc = klass.__dict__.get('__doc__')
        if doc and klass is not object:
            for name, text in docstring_entries(doc, names).items():
                found.setdefault(name, text)
    return found


def _item_pattern(names: Iterable[str]) -> str:
    """One key as a docstring names it: ``name``, ``\\`\\`name\\`\\```, or ``prefix_*``, not
    part of a longer word or of a dotted key (``flight.speed_m_s`` is another section's)."""
    alternatives = '|'.join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return (rf'(?<![\w.])(?:``)?(?:(?:{alternatives})(?![\w*]|\.\w)'
            r'|[a-z][a-z0-9]*(?:_[a-z0-9]+)*_\*)(?:``)?')


# A parenthetical with one level of nesting inside, intervals ``(0, 60]`` included.
_PAREN = r'\((?:[^()\[\]]|[(\[][^()\[\]]*[)\]])*\)'
_CONDITION = r'\s*[<>]=?\s*[\w.]+'           # 'structured_keep < 1: ...'
_SEPARATOR = r'\s*(?:,\s*(?:and\s+)?|/\s*|\s+and\s+)'
_ENTRY_START = r'(?:\A|\n[ \t]*|[.;:,][ \t]+|[.;:,]\n[ \t]*)'


def docstring_entries(doc: str, names: Collection[str]) -> dict[str, str]:
    """{name: one-line description} for the ``names`` a docstring describes.

    Read forms, each at the start of the text, a line or a clause (after ``. ; : ,``):

    - ``name: text`` and shared ones, ``a, b and c: text`` or ``a / b: text``; a name may carry
      a parenthetical or a condition before the colon, which then leads its description
      (``proximal_mu (fedprox): weight`` -> ``fedprox: weight``, ``structured_keep < 1: each``
      -> ``when < 1: each``);
    - ``prefix_*: text`` for a name starting with ``prefix_`` that the docstring names nowhere
      else (a name mentioned in the group's prose has its own meaning there);
    - ``name (text)`` followed by ``, . ;``: the parenthetical is the description;
    - ``name is text``.

    An entry runs to the next entry or blank line; its first sentence is the description.
    A name the docstring only mentions in passing gets none.
    """
    item = _item_pattern(names)
    qualified = rf'{item}(?:\s*{_PAREN})?(?:{_CONDITION})?'
    head = re.compile(rf'{_ENTRY_START}(?P<head>{qualified}(?:{_SEPARATOR}{qualified})*)'
                      r'\s*:(?=\s|\Z)')
    paren = re.compile(rf'{_ENTRY_START}(?P<head>{item})\s*(?P<paren>{_PAREN})(?=\s*[,.;]|\s*\Z)')
    is_entry = re.compile(rf'{_ENTRY_START}(?P<head>{item})\s+is\s+')
    head_item = re.compile(rf'(?P<name>{item})(?:\s*(?P<paren>{_PAREN}))?(?P<cond>{_CONDITION})?')

    heads = list(head.finditer(doc))
    spans = [(m.start('head'), m.end()) for m in heads]

    def free(match: re.Match) -> bool:
        return not any(start <= match.start('head') < end for start, end in spans)

    parens = [m for m in paren.finditer(doc) if free(m)]
    spans += [(m.start('head'), m.end()) for m in parens]
    verbs = [m for m in is_entry.finditer(doc) if free(m)]
    starts = sorted([start for start, _ in spans] + [m.start('head') for m in verbs]
                    + [m.start() for m in re.finditer(r'\n[ \t]*\n', doc)] + [len(doc)])

    def text_from(position: int) -> str:
        return doc[position:next(s for s in starts if s >= position)]

    # A name's own entry beats a shared one, which beats ``name (text)`` and ``name is``;
    # among equals the first wins.
    ranked: dict[str, tuple[int, str]] = {}
    wildcard: dict[str, str] = {}

    def note(name: str, rank: int, text: str) -> None:
        if name not in ranked or rank < ranked[name][0]:
            ranked[name] = (rank, text)

    for match in heads:
        text = text_from(match.end())
        items = list(head_item.finditer(match['head']))
        for found in items:
            name = found['name'].strip('`')
            lead = (found['paren'][1:-1] if found['paren'] else
                    'when ' + found['cond'].strip() if found['cond'] else '')
            described = f'{lead}: {text}' if lead else text
            if name.endswith('*'):
                wildcard.setdefault(name, described)
            else:
                note(name, 0 if len(items) == 1 else 1, described)
    for match in parens:
        note(match['head'].strip('`'), 2, match['paren'][1:-1])
    for match in verbs:
        note(match['head'].strip('`'), 3, text_from(match.end()))
    specific = {name: text for name, (_, text) in ranked.items()}

    out = {}
    for name in names:
        text = specific.get(name)
        if text is None and not re.search(rf'(?<![\w.]){re.escape(name)}(?!\w)', doc):
            text = next((t for prefix, t in wildcard.items() if name.startswith(prefix[:-1])),
                        None)
        if text is not None and (sentence := first_sentence(text)):
            out[name] = sentence
    return out


_ABBREVIATIONS = {'e.g', 'i.e', 'eq', 'eqs', 'Eq', 'Eqs', 'Sec', 'Secs', 'Alg', 'Fig', 'cf',
                  'vs', 'approx'}
_ROLE = re.compile(r':[a-z]+:`([^`]+)`')


def _role_as_code(match: re.Match) -> str:
    """``:meth:`~pkg.Class.method``` -> ```method```, ``:mod:`pkg.mod``` -> ```pkg.mod```."""
    name = match[1]
    if name.startswith('~'):
        name = name[1:].rsplit('.', 1)[-1]
    return f'``{name}``'


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` on one line, RST roles and ````code```` as ``code``.

    A sentence ends at a full stop and a space outside brackets, not after an abbreviation
    (``e.g.``, ``Sec.``, ``eq.``)."""
    text = ' '.join(text.split())
    text = _ROLE.sub(_role_as_code, text)
    text = text.replace('``', '`')
    depth = 0
    for i, char in enumerate(text):
        if char in '([{':
            depth += 1
        elif char in ')]}':
            depth = max(0, depth - 1)
        elif (char == '.' and depth == 0 and text[i + 1:i + 2] == ' '
              and text[:i].rsplit(' ', 1)[-1] not in _ABBREVIATIONS):
            text = text[:i + 1]
            break
    return text.strip().rstrip(';,:').strip()


# --- sections -------------------------------------------------------------------------------

def filter_section(infos: list[KeyInfo], section: str | None) -> list[KeyInfo]:
    """The keys of ``section`` (``learning``: ``learning.*``; a top-level key: itself);
    ConfigError naming the sections there are when it has none."""
    if section is None:
        return infos
    chosen = [info for info in infos if info.section == section]
    if not chosen:
        names = ', '.join(dict.fromkeys(info.section for info in infos))
        raise ConfigError(f'no section {section!r} here; sections and top-level keys: {names}')
    return chosen


# --- rendering ------------------------------------------------------------------------------

def format_value(value: Any) -> str:
    """A default as a config file writes it: ``true``, ``'sgd'``, ``''``, ``[1.0, 2.0]``."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, tuple | list):
        return '[' + ', '.join(format_value(v) for v in value) + ']'
    return repr(value)


def type_text(info: KeyInfo) -> str:
    """``string: sgd | adam`` or ``number or word: auto`` or ``integer``."""
    if not info.choices and not info.plugin:
        return info.type_name
    words = ' | '.join(str(c) for c in info.choices)
    plugin = ', or a plug-in package.module:Name' if info.plugin else ''
    return f'{info.type_name}: {words}{plugin}'


def _count(infos: list[KeyInfo]) -> str:
    return f'{len(infos)} key' + ('' if len(infos) == 1 else 's')


def _missing(info: KeyInfo) -> str:
    return f'({NO_DESCRIPTION} in the docstring of {info.owner})'


WRAP_COLUMNS = 99


def render_text(name: str, section: str | None = None) -> str:
    """The plain-text reference of one target: ``key = default  (type)`` and the meaning."""
    spec = target(name)
    infos = filter_section(key_reference(name), section)
    lines = [f'# {spec.name}: {spec.class_path.replace(":", ".")}, read by '
             f'{spec.read_by.replace("`", "")}; {_count(infos)}']
    for info in infos:
        lines.append(f'{info.key} = {format_value(info.default)}  ({type_text(info)})')
        lines += textwrap.wrap(info.description or _missing(info), WRAP_COLUMNS,
                               initial_indent='    ', subsequent_indent='    ')
    return '\n'.join(lines) + '\n'


_CODE_SPAN = re.compile(r'(`[^`]*`)')


def _markdown_cell(text: str) -> str:
    """Text safe in a GitHub table cell: ``|`` escaped everywhere, ``*`` and ``<`` outside
    code spans."""
    parts = _CODE_SPAN.split(text)
    for i in range(0, len(parts), 2):       # the text between code spans
        parts[i] = parts[i].replace('*', r'\*').replace('<', '&lt;')
    return ''.join(parts).replace('|', r'\|')


def render_markdown(name: str, section: str | None = None) -> str:
    """One target's Markdown section: a heading, who reads it and a table."""
    spec = target(name)
    infos = filter_section(key_reference(name), section)
    lines = [f'## {spec.name}', '',
             f'`{spec.class_path.replace(":", ".")}`, read by {spec.read_by}: '
             f'{_count(infos)}.', '',
             '| key | default | type / choices | meaning |', '|---|---|---|---|']
    for info in infos:
        meaning = (_markdown_cell(info.description) if info.description
                   else f'*{_markdown_cell(_missing(info))}*')
        lines.append(f'| `{info.key}` | `{format_value(info.default)}` | '
                     f'{_markdown_cell(type_text(info))} | {meaning} |')
    return '\n'.join(lines) + '\n'


def reference_markdown() -> str:
    """docs/config_reference.md: every target's section under one introduction."""
    intro = [
        '# Config key reference', '',
        f'Generated from the config dataclasses and their docstrings by `{REGENERATE_COMMAND}`'
        ' (fl_uav/config_reference.py); do not edit it by hand, a unit test checks that it is '
        'current. `fl-uav keys TARGET [--section S]` prints the same in a terminal.', '',
        'A key `a.b` is set in a ROS 2 parameter file as nested mappings under `/**:` '
        '`ros__parameters:` (`a:`, then `b: value` indented below it) or on a command line with '
        '`--set a.b=value`; an unknown key or a bad value stops the command, naming the key. '
        'The choices listed are the values the validator accepts.', '',
        'Targets: ' + ', '.join(f'[{t.name}](#{t.name})' for t in TARGETS) + '.', '']
    return '\n'.join(intro) + '\n' + '\n'.join(render_markdown(t.name) for t in TARGETS)


def reference(name: str, section: str | None = None, markdown: bool = False) -> str:
    """What ``fl-uav keys NAME [--section S] [--markdown]`` prints: one target's reference, or
    with ``all`` every target's (those with section S) and, as Markdown without a section,
    docs/config_reference.md."""
    if name != ALL_TARGETS:
        names: tuple[str, ...] = (target(name).name,)
    elif section is None:
        if markdown:
            return reference_markdown()
        names = TARGET_NAMES
    else:
        names = tuple(n for n in TARGET_NAMES
                      if any(info.section == section for info in key_reference(n)))
        if not names:
            raise ConfigError(f'no target has a section or top-level key {section!r}')
    render = render_markdown if markdown else render_text
    return '\n'.join(render(n, section) for n in names)
