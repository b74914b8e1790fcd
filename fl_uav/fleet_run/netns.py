"""The station and the drones as two hosts: ``fl-uav sim``'s nodes in two Linux network
namespaces joined by one veth pair, the link shaped on both ends' egress (tc tbf caps the
bandwidth, nftables drops packets at random or, for an outage, all of them).

The ground namespace runs the ground station (and any ground clients); the air namespace runs
the drone nodes with their simulated autopilot and camera, so MAVLink stays on the air side's
loopback as on a real drone. DDS crosses the veth by unicast only: each node gets
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST (``ros_environment``) and ROS_STATIC_PEERS=<the other
side's address>. The lossy-link test and ``bench/lossy_links.py`` use it (issue 25 item 3).

Needs root, ``ip``, ``tc`` (the tbf qdisc) and ``nft``; :func:`unavailable_reason` says which
is missing. Every namespace (and with it its veth end, qdisc and nft table) is deleted on exit.
nftables drops in the output hook, before IP fragmentation: a lost packet is a whole UDP
datagram (Fast DDS sends up to ~64 KB in one), not one 1500-byte frame.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fl_uav.fleet.run_log import read_progress
from fl_uav.fleet_run.launch_plan import NodeSpec

#: nodes that run on the ground; every other node runs in the air namespace
GROUND_EXECUTABLES = ('ground_station_node', 'ground_client_node')
NFT_TABLE = 'fl_uav_link'
TOOLS = ('ip', 'tc', 'nft')


@dataclass(frozen=True)
class LinkShape:
    """How the link between the namespaces is impaired, the same in each direction:
    ``loss_pct`` % of the packets dropped at random (nftables), ``rate_mbit`` a bandwidth cap
    (tc tbf, ``burst_kbit`` bucket, packets queued at most ``latency_ms``; None: no cap).
    ``per_frame``: the loss hits each Ethernet frame as the receiving end takes it in (an
    nftables netdev ingress hook: one lost IP fragment loses its whole UDP datagram, as on a
    radio link); otherwise each packet as the sender sends it, before IP fragmentation (a
    whole datagram of up to ~64 KB is lost or not)."""

    loss_pct: float = 0.0
    rate_mbit: float | None = None
    burst_kbit: int = 64
    latency_ms: int = 500
    per_frame: bool = False

    def describe(self) -> str:
        """'lossless', '20 % loss, 20 Mbit/s', ..."""
        unit = ' per frame' if self.per_frame else ''
        parts = [f'{self.loss_pct:g} % loss{unit}'] if self.loss_pct else []
        if self.rate_mbit is not None:
            parts.append(f'{self.rate_mbit:g} Mbit/s')
        return ', '.join(parts) or 'lossless'


@dataclass(frozen=True)
class Outage:
    """The link drops every packet for ``duration_s`` seconds, starting ``after_s`` seconds
    after round ``round_index`` opens (i.e. after round ``round_index - 1`` closes; round 1:
    after the fleet starts)."""

    round_index: int = 2
    after_s: float = 10.0
    duration_s: float = 30.0


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=30)


def unavailable_reason() -> str | None:
    """None if network namespaces, veth pairs, tbf and nftables work here (tried on a
    throwaway pair); otherwise why not, for a test's skip."""
    if os.geteuid() != 0:
        return f'network namespaces need root (running as uid {os.geteuid()})'
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return (f'missing {", ".join(missing)} (Debian: iproute2 for ip and tc, nftables for '
                f'nft)')
    try:
        with NetnsLink(f'fllp{os.getpid() % 100000}') as link:
            link.shape(LinkShape(loss_pct=1.0, rate_mbit=100.0))
            link.counters()
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, 'stderr', '') or ''
        return f'cannot create a shaped veth pair between network namespaces: {exc} {detail}'
    return None


class NetnsLink:
    """Two namespaces (``<tag>g`` ground, ``<tag>a`` air) and a veth pair between them
    (10.A.B.2 on the ground, 10.A.B.1 in the air, a /30 picked at random). Use as a context
    manager: the namespaces are deleted on exit, whatever happened."""

    def __init__(self, tag: str, subnet: tuple[int, int] | None = None) -> None:
        if len(tag) > 12:
            raise ValueError(f'tag {tag!r}: at most 12 characters (interface names: 15)')
        self.tag = tag
        a, b = subnet or (random.randint(200, 250), random.randint(0, 255))
        self.air_ip, self.ground_ip = f'10.{a}.{b}.1', f'10.{a}.{b}.2'
        self.ns = {'ground': f'{tag}g', 'air': f'{tag}a'}
        self.dev = {'ground': f'{tag}vg', 'air': f'{tag}va'}
        self._created: list[str] = []
        self._shape = LinkShape()

    # ------------------------------------------------------------------ life cycle
    def __enter__(self) -> NetnsLink:
        try:
            self.create()
        except BaseException:
            self.delete()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def create(self) -> None:
        """The namespaces, the veth pair, addresses, loopbacks up, an empty nft table."""
        for side in ('ground', 'air'):
            _run(['ip', 'netns', 'add', self.ns[side]])
            self._created.append(self.ns[side])
        _run(['ip', 'link', 'add', self.dev['air'], 'netns', self.ns['air'], 'type', 'veth',
              'peer', 'name', self.dev['ground'], 'netns', self.ns['ground']])
        for side, ip in (('air', self.air_ip), ('ground', self.ground_ip)):
            ns, dev = self.ns[side], self.dev[side]
            _run(['ip', '-n', ns, 'addr', 'add', f'{ip}/30', 'dev', dev])
            _run(['ip', '-n', ns, 'link', 'set', 'lo', 'up'])
            _run(['ip', '-n', ns, 'link', 'set', dev, 'up'])
            self._nft(side, f'add table inet {NFT_TABLE}')
            for name in ('lost', 'outage'):
                self._nft(side, f'add counter inet {NFT_TABLE} {name}')
            # loss at priority 0, the outage before it (its drops are counted apart)
            self._nft(side, f'add chain inet {NFT_TABLE} loss '
                            '{ type filter hook output priority 0 ; }')
            self._nft(side, f'add chain inet {NFT_TABLE} outage '
                            '{ type filter hook output priority -10 ; }')
            self._nft(side, f'add table netdev {NFT_TABLE}')
            self._nft(side, f'add counter netdev {NFT_TABLE} lost')
            self._nft(side, f'add chain netdev {NFT_TABLE} frames {{ type filter hook ingress '
                            f'device "{dev}" priority 0 ; }}')

    def delete(self) -> None:
        """Delete the namespaces made (their veth ends, qdiscs and nft tables go with them)."""
        for ns in self._created:
            _run(['ip', 'netns', 'del', ns], check=False)
        self._created.clear()

    def _nft(self, side: str, command: str) -> None:
        _run(['ip', 'netns', 'exec', self.ns[side], 'nft', command])

    # ------------------------------------------------------------------ impairments
    def shape(self, shape: LinkShape) -> None:
        """Apply ``shape`` on both ends' egress (replacing an earlier one)."""
        for side in ('ground', 'air'):
            ns, dev = self.ns[side], self.dev[side]
            _run(['tc', '-n', ns, 'qdisc', 'del', 'dev', dev, 'root'], check=False)
            if shape.rate_mbit is not None:
                _run(['tc', '-n', ns, 'qdisc', 'add', 'dev', dev, 'root', 'tbf', 'rate',
                      f'{shape.rate_mbit:g}mbit', 'burst', f'{shape.burst_kbit}kbit',
                      'latency', f'{shape.latency_ms}ms'])
            self._nft(side, f'flush chain inet {NFT_TABLE} loss')
            self._nft(side, f'flush chain netdev {NFT_TABLE} frames')
            per_10k = round(shape.loss_pct * 100)
            if per_10k and shape.per_frame:
                self._nft(side, f'add rule netdev {NFT_TABLE} frames numgen random mod 10000 '
                                f'< {per_10k} counter name lost drop')
            elif per_10k:
                self._nft(side, f'add rule inet {NFT_TABLE} loss oifname "{dev}" numgen random '
                                f'mod 10000 < {per_10k} counter name lost drop')
        self._shape = shape

    def set_outage(self, down: bool) -> None:
        """Drop every packet on the link both ways (``down``), or stop doing so."""
        for side in ('ground', 'air'):
            self._nft(side, f'flush chain inet {NFT_TABLE} outage')
            if down:
                self._nft(side, f'add rule inet {NFT_TABLE} outage oifname "{self.dev[side]}" '
                                'counter name outage drop')

    def counters(self) -> dict[str, dict[str, int]]:
        """Per side: bytes and packets the veth end sent (after the drops), and the bytes and
        packets nftables dropped at random (lost) and in an outage; tbf's own drops; the UDP
        datagrams dropped because a socket's receive buffer was full (the namespace's
        /proc/net/snmp RcvbufErrors: DDS then asks for them again)."""
        out = {}
        for side in ('ground', 'air'):
            ns, dev = self.ns[side], self.dev[side]
            link = json.loads(_run(['ip', '-n', ns, '-s', '-j', 'link', 'show', 'dev',
                                    dev]).stdout)[0]
            tx = link.get('stats64', link.get('stats', {}))['tx']
            row = {'tx_bytes': int(tx['bytes']), 'tx_packets': int(tx['packets'])}
            for family in ('inet', 'netdev'):   # netdev: frames lost on the way in
                nft = json.loads(_run(['ip', 'netns', 'exec', ns, 'nft', '-j', 'list',
                                       'counters', 'table', family, NFT_TABLE]).stdout)
                for item in nft.get('nftables', []):
                    counter = item.get('counter')
                    if counter:
                        for unit in ('bytes', 'packets'):
                            key = f'{counter["name"]}_{unit}'
                            row[key] = row.get(key, 0) + int(counter[unit])
            qdisc = json.loads(_run(['tc', '-n', ns, '-s', '-j', 'qdisc', 'show', 'dev',
                                     dev]).stdout or '[]')
            row['tbf_dropped_packets'] = sum(int(q.get('drops', 0)) for q in qdisc
                                             if q.get('kind') == 'tbf')
            row['udp_rcvbuf_errors'] = _udp_rcvbuf_errors(
                _run(['ip', 'netns', 'exec', ns, 'cat', '/proc/net/snmp']).stdout)
            out[side] = row
        return out

    # ------------------------------------------------------------------ the fleet's nodes
    def side_of(self, spec: NodeSpec) -> str:
        """'ground' for the station (and ground clients), 'air' for every other node."""
        return 'ground' if spec.executable in GROUND_EXECUTABLES else 'air'

    def command_prefix(self, spec: NodeSpec) -> list[str]:
        """``ip netns exec NS env ROS_STATIC_PEERS=<the other side>``: both exec, so the
        node's PID is the one started (run.FleetRunOptions.command_prefix)."""
        side = self.side_of(spec)
        peer = self.air_ip if side == 'ground' else self.ground_ip
        return ['ip', 'netns', 'exec', self.ns[side], 'env', f'ROS_STATIC_PEERS={peer}']


def _udp_rcvbuf_errors(snmp: str) -> int:
    """RcvbufErrors of the ``Udp:`` lines of /proc/net/snmp (0 if absent)."""
    rows = [line.split()[1:] for line in snmp.splitlines() if line.startswith('Udp:')]
    if len(rows) < 2 or 'RcvbufErrors' not in rows[0]:
        return 0
    return int(rows[1][rows[0].index('RcvbufErrors')])


class OutageScheduler:
    """A thread that cuts ``link`` for an :class:`Outage` in a run writing to ``out`` (its
    rounds from progress.jsonl); records when it began and ended (seconds since start)."""

    def __init__(self, link: NetnsLink, outage: Outage, out: Path) -> None:
        self._link, self._outage, self._out = link, outage, out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='link-outage', daemon=True)
        self._start = time.monotonic()
        self.record: dict[str, Any] = {'round': outage.round_index,
                                       'duration_s': outage.duration_s}

    def __enter__(self) -> OutageScheduler:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._link.set_outage(False)

    def _now(self) -> float:
        return round(time.monotonic() - self._start, 1)

    def _run(self) -> None:
        while len(read_progress(self._out)) < self._outage.round_index - 1:
            if self._stop.wait(0.5):
                return
        if self._stop.wait(self._outage.after_s):
            return
        self._link.set_outage(True)
        self.record['began_s'] = self._now()
        self._stop.wait(self._outage.duration_s)
        self._link.set_outage(False)
        self.record['ended_s'] = self._now()


@contextmanager
def fleet_link(tag: str, shape: LinkShape, subnet: tuple[int, int] | None = None
               ) -> Iterator[NetnsLink]:
    """A shaped :class:`NetnsLink`, deleted on exit."""
    with NetnsLink(tag, subnet) as link:
        link.shape(shape)
        yield link


def link_report(summary: dict[str, Any], before: dict[str, dict[str, int]],
                after: dict[str, dict[str, int]]) -> dict[str, Any]:
    """What a run over the link measured: rounds completed, participants per round, updates
    missing at their round's close (late or never sent) and updates that came after their
    round had closed (rejected as wrong_round), final accuracy, bytes the link carried
    against the payload bytes the station counted (updates up, global model down to each
    drone). Wire bytes are what the veth ends
    sent: a packet dropped at random before it (the output hook) is not among them but in
    ``dropped_bytes``; a frame lost per frame (``LinkShape.per_frame``) was sent, and is in
    both."""
    delta = {side: {key: after[side].get(key, 0) - before[side].get(key, 0)
                    for key in after[side]} for side in after}
    rounds = summary.get('rounds', [])
    payload_up = sum(r['bytes_up_total'] for r in rounds)
    payload_down = sum(r['bytes_down_total'] for r in rounds)
    wire_up = delta['air']['tx_bytes']
    wire_down = delta['ground']['tx_bytes']
    dropped = sum(delta[s].get('lost_bytes', 0) + delta[s].get('outage_bytes', 0)
                  for s in delta)
    return {
        'status': summary.get('status'),
        'rounds_completed': len(rounds),
        'rounds_configured': summary.get('num_rounds_configured'),
        'participants': [len(r['participants']) for r in rounds],
        'missing_at_close': sum(len(r['late_or_missing']) for r in rounds),
        'late_arrivals': int(summary.get('rejected_total', {}).get('wrong_round', 0)),
        'final_accuracy': summary.get('final_accuracy'),
        'initial_accuracy': summary.get('initial_accuracy'),
        'payload_bytes': payload_up + payload_down,
        'payload_up_bytes': payload_up,
        'payload_down_bytes': payload_down,
        'wire_bytes': wire_up + wire_down,
        'wire_up_bytes': wire_up,
        'wire_down_bytes': wire_down,
        'dropped_bytes': dropped,
        'tbf_dropped_packets': sum(delta[s]['tbf_dropped_packets'] for s in delta),
        'udp_rcvbuf_errors': sum(delta[s].get('udp_rcvbuf_errors', 0) for s in delta),
        'wall_time_s': round(summary.get('wall_time_s', 0.0), 1),
        'counters': delta,
    }


def run_over_link(run: Callable[[Callable[[NodeSpec], Sequence[str]]], dict[str, Any]],
                  tag: str, shape: LinkShape, out: Path, outage: Outage | None = None,
                  subnet: tuple[int, int] | None = None) -> dict[str, Any]:
    """Make the shaped link, call ``run(command_prefix)`` (which runs the fleet and returns
    its summary), with ``outage`` scheduled; returns :func:`link_report` with the shape and
    the outage's record. The namespaces are gone when it returns or raises."""
    with fleet_link(tag, shape, subnet) as link:
        before = link.counters()
        if outage is None:
            summary = run(link.command_prefix)
            record = None
        else:
            with OutageScheduler(link, outage, out) as scheduler:
                summary = run(link.command_prefix)
            record = dict(scheduler.record)
        report = link_report(summary, before, link.counters())
    report['shape'] = shape.describe()
    report['outage'] = record
    return report


def fleet_run_over_link(config_files: Sequence[Path], overrides: dict[str, Any], out: Path,
                        shape: LinkShape, tag: str, *, outage: Outage | None = None,
                        domain_id: int | None = None, timeout_s: float = 1800.0,
                        echo: Callable[[str], None] = print) -> dict[str, Any]:
    """``fl-uav sim`` (:func:`fl_uav.fleet_run.run.run_fleet`) with the station and the drones
    on either side of a shaped link; :func:`run_over_link`'s report. A drone node is never
    restarted here (a restart would hide what the link did)."""
    from fl_uav.fleet_run.launch_plan import Respawn
    from fl_uav.fleet_run.run import FleetRunOptions, run_fleet

    def run(prefix: Callable[[NodeSpec], Sequence[str]]) -> dict[str, Any]:
        return run_fleet(FleetRunOptions(config_files=config_files, overrides=overrides,
                                         out_dir=out, timeout_s=timeout_s,
                                         domain_id=domain_id, respawn=Respawn(enabled=False),
                                         command_prefix=prefix), echo)

    return run_over_link(run, tag, shape, out, outage)
