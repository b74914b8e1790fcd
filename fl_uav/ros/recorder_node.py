"""``fl-uav record``: record the fleet's topics into a rosbag2 directory with MCAP storage.

A thin node around :class:`fl_uav.fleet.recording.BagWriter`: every ``discovery_period_s`` it
looks at the graph and subscribes (raw CDR, no deserialisation) to each new topic the
:class:`TopicSelection` picks, with a QoS that matches all its publishers
(:func:`subscription_qos`: transient local for latched plans, markers and metrics, whose
backlog it then receives); every ``flush_period_s`` it writes the chunk in memory to disk. Ctrl-C,
SIGTERM and the end of ``duration_s`` write what DDS has delivered, then close the bag (MCAP
summary, metadata.yaml).
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions

from fl_uav.fleet.recording import (
    READY_LINE,
    BagWriter,
    QosOffer,
    RecordingError,
    StopSignals,
    TopicSelection,
    subscription_qos,
)

NODE_NAME = 'recorder'
DISCOVERY_PERIOD_S = 1.0
FLUSH_PERIOD_S = 1.0
SPIN_SLICE_S = 0.1
DRAIN_QUIET_S = 0.25
"""At a stop, the messages DDS delivered are written until a slice this long brings none."""
DRAIN_MAX_S = 2.0
"""... and for at most this long (a live fleet never falls quiet)."""


def message_class(msgtype: str) -> type:
    """The Python message class of ``pkg/msg/Name`` (RecordingError if it is not installed)."""
    package, kind, name = (msgtype.split('/') + ['', ''])[:3]
    try:
        return getattr(importlib.import_module(f'{package}.{kind}'), name)
    except (ImportError, AttributeError, ValueError):
        raise RecordingError(f'{msgtype}: no Python message class installed '
                             f'({package}.{kind}.{name})') from None


def _offer(profile: QoSProfile) -> QosOffer:
    return QosOffer(reliable=profile.reliability == ReliabilityPolicy.RELIABLE,
                    transient_local=profile.durability == DurabilityPolicy.TRANSIENT_LOCAL,
                    depth=profile.depth)


def _profile(offer: QosOffer) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=offer.depth,
                      reliability=(ReliabilityPolicy.RELIABLE if offer.reliable
                                   else ReliabilityPolicy.BEST_EFFORT),
                      durability=(DurabilityPolicy.TRANSIENT_LOCAL if offer.transient_local
                                  else DurabilityPolicy.VOLATILE))


class RecorderNode(Node):
    """Subscribes raw to the selected topics as they appear and writes what arrives."""

    def __init__(self, writer: BagWriter, selection: TopicSelection,
                 discovery_period_s: float = DISCOVERY_PERIOD_S,
                 flush_period_s: float = FLUSH_PERIOD_S) -> None:
        super().__init__(NODE_NAME)
        self._writer = writer
        self._selection = selection
        self._subscribed: dict[str, Any] = {}
        self._ignored: set[str] = set()      # not recordable (logged once)
        self.not_selected: set[str] = set()   # seen, left out by the selection
        self.create_timer(discovery_period_s, self.discover)
        self.create_timer(flush_period_s, self._writer.flush)
        self.discover()

    def discover(self) -> None:
        """Subscribe to each selected topic that has a publisher and no subscription yet."""
        for topic, types in self.get_topic_names_and_types():
            if topic in self._subscribed or topic in self._ignored or topic in self.not_selected:
                continue
            if not self._selection.selects(topic, types[0]):
                self.not_selected.add(topic)
                continue
            publishers = self.get_publishers_info_by_topic(topic)
            if not publishers:
                continue            # subscribers only so far: no QoS to match yet
            if len(types) > 1:
                self.get_logger().warning(f'{topic} has several types {types}: '
                                          f'recording {types[0]}')
            offers = [_offer(p.qos_profile) for p in publishers]
            try:
                cls = message_class(types[0])
                self._writer.add_topic(topic, types[0], offers)
            except RecordingError as exc:
                self._ignored.add(topic)
                self.get_logger().warning(f'not recording {topic}: {exc}')
                continue
            qos = subscription_qos(offers)
            self._subscribed[topic] = self.create_subscription(
                cls, topic, self._receiver(topic), _profile(qos), raw=True)
            self.get_logger().info(
                f'recording {topic} ({types[0]}, {"reliable" if qos.reliable else "best effort"}'
                f', {"transient local" if qos.transient_local else "volatile"}, '
                f'depth {qos.depth})')

    def _receiver(self, topic: str) -> Callable[[bytes], None]:
        def receive(data: bytes) -> None:
            self._writer.write(topic, data, self.get_clock().now().nanoseconds)
        return receive


def record(writer: BagWriter, selection: TopicSelection, duration_s: float | None = None,
           domain_id: int | None = None, echo: Callable[[str], None] = print,
           stop: StopSignals | None = None) -> dict[str, Any]:
    """Record into ``writer`` until Ctrl-C, SIGTERM or ``duration_s``; the bag is closed
    whatever ends it. Returns the recording's summary (fl_uav.fleet.recording.summarize).

    A signal only asks to stop (``stop``, or one made here): the messages DDS has already
    delivered are written (until a spin slice of ``DRAIN_QUIET_S`` brings none, at most
    ``DRAIN_MAX_S``; a second signal cuts that short), then the bag is closed. rclpy installs
    no signal handler of its own: its handlers shut the context down under a running
    ``spin_once`` (an RCLError, exit code 1) and drop what was not yet taken."""
    with contextlib.ExitStack() as stack:
        if stop is None:
            stop = stack.enter_context(StopSignals())
        node = None
        try:
            rclpy.init(domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO)
            node = RecorderNode(writer, selection)
            echo(f'{READY_LINE} {writer.path} (Ctrl-C stops)')
            deadline = None if duration_s is None else time.monotonic() + duration_s
            while not stop.requested and (deadline is None or time.monotonic() < deadline):
                rclpy.spin_once(node, timeout_sec=SPIN_SLICE_S)
            drain_end = time.monotonic() + DRAIN_MAX_S
            while not stop.hurried and time.monotonic() < drain_end:
                slice_start = time.monotonic()
                rclpy.spin_once(node, timeout_sec=DRAIN_QUIET_S)
                if time.monotonic() - slice_start >= DRAIN_QUIET_S:
                    break       # nothing came within the slice: all delivered is written
        finally:
            with StopSignals():     # closing is short; a signal now must not cut it
                summary = writer.close()
                if node is not None:
                    node.destroy_node()
                rclpy.try_shutdown()
    # what the selection left out: why nothing was recorded, when nothing was
    return {**summary, 'not_selected': sorted(node.not_selected if node is not None else ())}
