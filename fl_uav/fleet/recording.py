"""Recording a run for Foxglove and rviz: which topics, their schemas, the bag (ROS-free).

``fl-uav record`` and ``fl-uav sim --record`` (the rclpy side is fl_uav/ros/recorder_node.py)
write a **rosbag2 directory with MCAP storage** (``metadata.yaml`` + ``<name>.mcap``) with
rosbags' writer, the layout ``ros2 bag record -s mcap`` writes: ``ros2 bag info`` / ``ros2 bag
play DIR`` on a machine with ROS 2 open the directory (play republishes the latched topics
transient local, from the offered QoS kept in the metadata, so rviz gets them as from the
fleet), and Foxglove opens the ``.mcap`` inside it (profile ``ros2``, ``ros2msg`` schemas,
CDR messages, zstd chunks). A bare ``.mcap`` would open in Foxglove but carries no rosbag2
metadata (offered QoS) for ``ros2 bag play``.

Messages are written as received (raw CDR), stamped with the recorder's receive time, in MCAP
chunks; :meth:`BagWriter.flush` writes the pending chunk to disk, so a recorder killed without
a chance to close (SIGKILL, power) loses at most the messages since the last flush: the
``.mcap`` without its summary is still read by mcap's stream reader, and ``ros2 bag reindex``
rebuilds the missing ``metadata.yaml``.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FL_UAV_TOPICS = r'/fl/.*|/uav\d+/.*|/gc\d+/.*|/diagnostics'
"""The fleet's topics (fl_uav/ros/names.py): the station's, each drone's and ground client's,
and /diagnostics. Not ROS's own (/rosout, /parameter_events)."""
BULKY_TOPICS = (r'/fl/global_model|/fl/updates|/(uav|gc)\d+/express/(model|clu)'
                r'|.*/camera/image_raw')
"""Binary model frames (megabytes a round) and camera images: left out by default."""
BULKY_TYPES = frozenset({'sensor_msgs/msg/Image', 'sensor_msgs/msg/CompressedImage'})
"""Image types, left out by default under any name."""
DEFAULT_DEPTH = 10
"""History depth of a subscription to a volatile topic (rosbag2 record's default)."""
LATCHED_DEPTH = 100
"""Least history depth of a subscription to a transient-local topic: DDS discovery does not
tell a publisher's depth (a remote one reads 0), and the fleet's deepest latched backlog is
the 50 rounds of each metrics topic (fl_uav/ros/names.py METRICS_QOS)."""
ROS_OWN_TOPICS = frozenset({'/rosout', '/parameter_events'})
"""Topics every rclpy node (the recorder too) makes: their presence says no fleet is there."""
READY_LINE = 'recording into'
"""How the recorder's line starts once it listens (fl-uav sim --record waits for it)."""


class RecordingError(Exception):
    """A bad pattern, an unknown message type or an output that cannot be written."""


class StopSignals:
    """SIGINT and SIGTERM as a request to stop, inside a ``with`` block (main thread only).

    The recorder must not die at a signal: killed by SIGTERM's default action it leaves an
    ``.mcap`` without its summary and no ``metadata.yaml``, and a KeyboardInterrupt (or rclpy's
    own handlers, which shut the context down under a running ``spin_once``) ends it before it
    has written what DDS already delivered. Here a signal only sets :attr:`requested`; the
    recorder then takes the messages already received and closes the bag. A second signal
    (an impatient Ctrl-C) sets :attr:`hurried`: close now, without waiting for late messages;
    the bag is still closed.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: list[str] = []
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """A stop was asked for."""
        return bool(self.received)

    @property
    def hurried(self) -> bool:
        """It was asked for twice: stop waiting for late messages."""
        return len(self.received) > 1

    def _handle(self, signum: int, _frame: Any) -> None:
        self.received.append(signal.Signals(signum).name)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def _compile(pattern: str, option: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise RecordingError(f'{option} {pattern!r} is not a regular expression: {exc}') from None


@dataclass(frozen=True)
class TopicSelection:
    """Which topics to record; patterns match the whole topic name (``re.fullmatch``).

    Default (no option): every fl_uav topic (:data:`FL_UAV_TOPICS`) but the bulky ones
    (:data:`BULKY_TOPICS`, :data:`BULKY_TYPES`). ``record_all``: every topic on the graph.
    ``topics``: the topics it matches, bulky ones included. ``exclude``: never these (with
    any of the others).
    """

    topics: str | None = None
    exclude: str | None = None
    record_all: bool = False

    def __post_init__(self) -> None:
        if self.record_all and self.topics is not None:
            raise RecordingError('give --all or --topics REGEX, not both')
        for pattern, option in ((self.topics, '--topics'), (self.exclude, '--exclude')):
            if pattern is not None:
                _compile(pattern, option)

    def selects(self, topic: str, msgtype: str) -> bool:
        """Whether to record ``topic`` of type ``msgtype`` (``pkg/msg/Name``)."""
        if self.exclude is not None and re.fullmatch(self.exclude, topic):
            return False
        if self.record_all:
            return True
        if self.topics is not None:
            return re.fullmatch(self.topics, topic) is not None
        return (re.fullmatch(FL_UAV_TOPICS, topic) is not None
                and re.fullmatch(BULKY_TOPICS, topic) is None and msgtype not in BULKY_TYPES)


def nothing_recorded(selection: TopicSelection, seen: Iterable[str], domain: object) -> str:
    """Why a recording holds no topic: none but ROS's own appeared on ``domain``, or
    ``selection`` left out every one of those ``seen`` (named, the first few)."""
    fleet = sorted(set(seen) - ROS_OWN_TOPICS)
    if not fleet:
        return (f"no topic but ROS's own appeared on ROS_DOMAIN_ID={domain} (is the fleet "
                'running there? --domain-id chooses the domain)')
    options = ' '.join(f'{flag} {pattern!r}' for flag, pattern in (
        ('--topics', selection.topics), ('--exclude', selection.exclude)) if pattern is not None)
    shown = ', '.join(fleet[:6]) + (f', ... ({len(fleet)} in all)' if len(fleet) > 6 else '')
    return f'{options or "the default selection"} matched none of the topics seen ({shown})'


@dataclass(frozen=True)
class QosOffer:
    """The QoS one publisher offers (or a subscription asks): what matching depends on."""

    reliable: bool
    transient_local: bool
    depth: int


def subscription_qos(offers: Sequence[QosOffer]) -> QosOffer:
    """The subscription that gets every publisher's messages, as rosbag2 record adapts it.

    Reliable only if every publisher is (a reliable subscription never matches a best-effort
    publisher); transient local only if every publisher is (same rule), with a depth that
    holds every publisher's latched backlog (their depths summed, where known), at least
    :data:`LATCHED_DEPTH`; volatile: :data:`DEFAULT_DEPTH`.
    """
    if not offers:
        raise RecordingError('no publisher to match: a topic is subscribed to once it has one')
    transient_local = all(o.transient_local for o in offers)
    depth = (max(LATCHED_DEPTH, sum(o.depth for o in offers)) if transient_local
             else DEFAULT_DEPTH)
    return QosOffer(reliable=all(o.reliable for o in offers), transient_local=transient_local,
                    depth=depth)


def _share_dirs() -> list[Path]:
    """Where ament packages keep their ``msg/*.msg``: AMENT_PREFIX_PATH's ``share``, then
    this interpreter's (the ROS 2 wheels install them into the venv)."""
    prefixes = [p for p in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) if p]
    return [Path(p) / 'share' for p in [*prefixes, sys.prefix]]


class SchemaStore:
    """Message definitions for the bag's schemas: rosbags' Kilted typestore, and for a type it
    does not know the ``.msg`` files of the installed packages (no network)."""

    def __init__(self, share_dirs: Iterable[Path] | None = None) -> None:
        from rosbags.typesys import Stores, get_typestore

        self.typestore = get_typestore(Stores.ROS2_KILTED)
        self._share_dirs = list(share_dirs) if share_dirs is not None else _share_dirs()

    def definition(self, msgtype: str) -> tuple[str, str]:
        """(concatenated ``ros2msg`` text, RIHS01 type hash) of ``msgtype`` (``pkg/msg/Name``).

        Raises RecordingError naming the type when neither the typestore nor a package's
        ``.msg`` file defines it (or one of the types it uses)."""
        from rosbags.typesys import TypesysError

        for _ in range(100):    # each pass adds one missing type; a message nests few
            try:
                text, _ = self.typestore.generate_msgdef(msgtype, ros_version=2)
                return text, self.typestore.hash_rihs01(msgtype)
            except TypesysError as exc:
                missing = re.search(r"Type '([^']+)' is unknown", str(exc))
                if missing is None:
                    raise RecordingError(f'{msgtype}: {exc}') from None
                self._load(missing.group(1), msgtype)
        raise RecordingError(f'{msgtype}: too many nested types')

    def _load(self, name: str, wanted: str) -> None:
        from rosbags.typesys import get_types_from_msg

        parts = name.split('/')
        if len(parts) != 3 or parts[1] != 'msg':
            raise RecordingError(f'{wanted}: {name!r} is no message type (pkg/msg/Name)')
        package, _, base = parts
        for share in self._share_dirs:
            path = share / package / 'msg' / f'{base}.msg'
            if path.is_file():
                self.typestore.register(get_types_from_msg(path.read_text(), name))
                return
        raise RecordingError(
            f'{wanted}: no definition of {name} (not in the Kilted typestore, no '
            f'{package}/msg/{base}.msg under {", ".join(map(str, self._share_dirs))})')


def _rosbags_qos(offer: QosOffer) -> Any:
    from rosbags.interfaces import (
        Qos,
        QosDurability,
        QosHistory,
        QosLiveliness,
        QosReliability,
        QosTime,
    )

    zero = QosTime(0, 0)
    return Qos(QosHistory.KEEP_LAST, offer.depth,
               QosReliability.RELIABLE if offer.reliable else QosReliability.BEST_EFFORT,
               QosDurability.TRANSIENT_LOCAL if offer.transient_local
               else QosDurability.VOLATILE,
               zero, zero, QosLiveliness.AUTOMATIC, zero, False)


def check_new_bag(path: Path) -> None:
    """RecordingError unless ``path`` can become a new bag directory: it must not exist (a bag
    already there is never overwritten) and its parent must be a writable directory."""
    path = Path(path)
    if path.is_dir() and any(path.iterdir()):
        held = sorted(p.name for p in path.iterdir())
        raise RecordingError(
            f'{path} holds {len(held)} file(s) already ({", ".join(held[:3])}'
            f'{", ..." if len(held) > 3 else ""}): a bag is written into a new directory and '
            'never over another (choose another --out or remove it)')
    if path.exists():
        raise RecordingError(f'{path} exists already: a bag is written into a new '
                             'directory (choose another --out or remove it)')
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK | os.X_OK):
        raise RecordingError(f'{path}: {path.parent} is no writable directory')


@dataclass
class TopicRecord:
    """One recorded topic: its type and how many messages were written."""

    msgtype: str
    messages: int = 0
    connection: Any = field(default=None, repr=False)


class BagWriter:
    """A rosbag2 directory with MCAP storage at ``path`` (which must not exist), written by
    rosbags; topics are added as they are discovered, then raw CDR messages written."""

    def __init__(self, path: Path, schemas: SchemaStore | None = None) -> None:
        from rosbags.rosbag2 import (
            CompressionFormat,
            CompressionMode,
            StoragePlugin,
            Writer,
            WriterError,
        )

        self.path = Path(path)
        check_new_bag(self.path)
        self._schemas = schemas if schemas is not None else SchemaStore()
        self._writer = Writer(self.path, version=Writer.VERSION_LATEST,
                              storage_plugin=StoragePlugin.MCAP)
        # zstd MCAP chunks, as rosbag2's MCAP plugin writes them by default; the metadata
        # says no file or message compression (rosbag2 reads the chunks through the plugin)
        self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        try:
            self._writer.open()
        except WriterError as exc:
            raise RecordingError(str(exc)) from None
        self.topics: dict[str, TopicRecord] = {}
        self._closed = False

    @property
    def mcap_path(self) -> Path:
        """The MCAP file inside the bag directory (what Foxglove opens)."""
        return self.path / f'{self.path.name}.mcap'

    def add_topic(self, topic: str, msgtype: str, offers: Sequence[QosOffer]) -> None:
        """Register ``topic`` with its schema and the publishers' offered QoS (ros2 bag play
        offers the same). RecordingError for an unknown type, and nothing is registered."""
        if topic in self.topics:
            raise RecordingError(f'{topic} is recorded already (as {self.topics[topic].msgtype})')
        text, rihs01 = self._schemas.definition(msgtype)
        connection = self._writer.add_connection(
            topic, msgtype, msgdef=text, rihs01=rihs01,
            offered_qos_profiles=[_rosbags_qos(o) for o in offers])
        self.topics[topic] = TopicRecord(msgtype, connection=connection)

    def write(self, topic: str, data: bytes, log_time_ns: int) -> None:
        """One serialized (CDR) message of an added topic, received at ``log_time_ns``."""
        record = self.topics[topic]
        self._writer.write(record.connection, log_time_ns, data)
        record.messages += 1

    def flush(self) -> None:
        """Write the messages held in memory to disk as a complete MCAP chunk, so a recorder
        killed from now on loses none of them (rosbags writes a chunk at 1 MiB otherwise)."""
        storage = self._writer.storage
        if storage is not None and storage.chunk.bio.tell():
            storage.close_chunk()
            storage.bio.flush()

    def close(self) -> dict[str, Any]:
        """Write the MCAP summary and metadata.yaml; returns :func:`summarize`'s figures.
        Closing twice is closing once."""
        if not self._closed:
            self._closed = True
            self._writer.close()
        return summarize(self.path, {t: r.messages for t, r in self.topics.items()},
                         {t: r.msgtype for t, r in self.topics.items()})


def summarize(path: Path, counts: Mapping[str, int], types: Mapping[str, str]
              ) -> dict[str, Any]:
    """What a recording holds: per topic its type and message count, totals, bytes on disk."""
    size = sum(f.stat().st_size for f in Path(path).rglob('*') if f.is_file())
    return {'path': str(path), 'messages': sum(counts.values()), 'bytes': size,
            'topics': {t: {'type': types[t], 'messages': counts[t]} for t in sorted(counts)}}


def read_bag_summary(path: Path) -> dict[str, Any]:
    """:func:`summarize` of a closed bag directory, read back with rosbags."""
    from rosbags.rosbag2 import Reader

    with Reader(path) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
        types = {c.topic: c.msgtype for c in reader.connections}
    return summarize(path, counts, types)


def read_unclosed_bag(path: Path) -> dict[str, Any]:
    """:func:`summarize` of a bag its recorder could not close (killed: no metadata.yaml, no
    MCAP summary): the messages mcap's stream reader finds in its ``.mcap``, up to the first
    damaged or missing record; ``closed`` False."""
    from mcap.records import Channel, Message, Schema
    from mcap.stream_reader import StreamReader

    path = Path(path)
    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, str]] = {}
    counts: dict[str, int] = {}
    try:
        with open(path / f'{path.name}.mcap', 'rb') as stream:
            for record in StreamReader(stream).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record.name
                elif isinstance(record, Channel):
                    channels[record.id] = (record.topic, schemas.get(record.schema_id, ''))
                    counts.setdefault(record.topic, 0)
                elif isinstance(record, Message) and record.channel_id in channels:
                    counts[channels[record.channel_id][0]] += 1
    except Exception:  # noqa: BLE001,S110 - the file ends mid-record where it was cut
        pass
    types = {topic: msgtype for topic, msgtype in channels.values()}
    return {**summarize(path, counts, types), 'closed': False}


def format_summary(summary: Mapping[str, Any]) -> str:
    """The recorder's closing lines: a line per topic, then the totals."""
    lines = [f'  {topic:<40} {info["messages"]:>7}  {info["type"]}'
             for topic, info in summary['topics'].items()]
    lines.append(f'recorded {summary["messages"]} messages on {len(summary["topics"])} topics, '
                 f'{summary["bytes"] / 1e6:.2f} MB in {summary["path"]}')
    return '\n'.join(lines)
