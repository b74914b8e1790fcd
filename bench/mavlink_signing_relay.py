"""What MAVLink 2 signing costs a message on the drone's autopilot link.

Workload: the frames MAVSDK sends a PX4 while it flies (HEARTBEAT, COMMAND_LONG,
MISSION_ITEM_INT, SET_POSITION_TARGET_LOCAL_NED: unsigned, as MAVSDK packs them) and the
telemetry the autopilot sends back (HEARTBEAT, GLOBAL_POSITION_INT, LOCAL_POSITION_NED,
ATTITUDE, SYS_STATUS: signed with the key, as a PX4 with a key sends them), one key.

- ``relay out``: SigningRelay.send_from_mavsdk of one MAVSDK frame (split, sign, write) with a
  link that discards, against ``pass out``, the same write without signing.
- ``relay in``: SigningRelay.accept_from_link of one signed telemetry frame (split, signature,
  stream timestamp), against ``pass in``: only splitting the frames.
- ``autopilot in``: the simulated autopilot's check of one parsed signed message
  (VehicleSigning.accept), against the same without a key.
- ``udp``: one frame from MAVSDK to the autopilot's socket over loopback through the relay
  (sign + sendto + recvfrom) against a plain sendto + recvfrom: the latency signing adds.

Per-message min and median wall times over ``--messages`` messages of each kind, one thread.

``--flight S``: the whole drone side in one process, unsigned and then signed: the real MAVSDK
(MavsdkVehicle) connects to the embedded simulator (one vehicle, 20 Hz position telemetry,
2 Hz heartbeats, time factor 10), arms, takes off, and holds S wall seconds with its
telemetry streams running; the process's CPU seconds over the hold (simulator, MAVSDK,
relay: everything) and the wall time from connect to take-off done, each mode once.

    .venv/bin/python bench/mavlink_signing_relay.py                 # 20000 messages
    .venv/bin/python bench/mavlink_signing_relay.py --messages 50000 --flight 20
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pymavlink.dialects.v20 import common as mavlink  # noqa: E402

from fl_uav.autopilot_sim.signing import VehicleSigning  # noqa: E402
from fl_uav.vehicle.mavlink_signing import now_ticks, split_frames  # noqa: E402
from fl_uav.vehicle.mavlink_signing_relay import (  # noqa: E402
    LinkTransport,
    SigningRelay,
    UdpTransport,
)

KEY = bytes(range(32))


class Discard(LinkTransport):
    url = 'discard://'

    def send(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def mavsdk_frames(count: int) -> list[bytes]:
    mav = mavlink.MAVLink(None, srcSystem=245, srcComponent=190)
    makers = (lambda: mav.heartbeat_encode(18, 8, 0, 0, 4),
              lambda: mav.command_long_encode(1, 1, 400, 0, 1, 0, 0, 0, 0, 0, 0),
              lambda: mav.mission_item_int_encode(1, 1, 3, 6, 16, 0, 1, 0, 0, 0, 0,
                                                  473977420, 85455940, 30.0, 0),
              lambda: mav.set_position_target_local_ned_encode(0, 1, 1, 1, 3576, 1.0, 2.0,
                                                               -3.0, 0, 0, 0, 0, 0, 0, 0, 0))
    return [makers[i % len(makers)]().pack(mav) for i in range(count)]


def autopilot_frames(count: int, key: bytes | None) -> list[bytes]:
    mav = mavlink.MAVLink(None, srcSystem=1, srcComponent=1)
    if key is not None:
        mav.signing.secret_key = key
        mav.signing.sign_outgoing = True
        mav.signing.timestamp = now_ticks()
    makers = (lambda: mav.heartbeat_encode(2, 12, 157, 67371008, 4),
              lambda: mav.global_position_int_encode(1000, 473977420, 85455940, 518000,
                                                     30000, 120, -40, 3, 9000),
              lambda: mav.local_position_ned_encode(1000, 10.0, 20.0, -30.0, 1.2, -0.4, 0.0),
              lambda: mav.attitude_encode(1000, 0.01, 0.02, 1.5, 0.0, 0.0, 0.0),
              lambda: mav.sys_status_encode(1, 1, 1, 100, 16000, 500, 90, 0, 0, 0, 0, 0, 0))
    return [makers[i % len(makers)]().pack(mav) for i in range(count)]


def _timed(items, fn) -> list[float]:
    times = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - start) * 1e6)
    return times


def _summary(times: list[float]) -> dict:
    return {'min_us': round(min(times), 2), 'median_us': round(statistics.median(times), 2)}


def measure(messages: int) -> dict:
    out_frames = mavsdk_frames(messages)
    relay = SigningRelay(Discard(), KEY)
    rows = {'pass out': _timed(out_frames, Discard().send),
            'relay out': _timed(out_frames, relay.send_from_mavsdk)}
    assert relay.sent == messages and not relay.dropped, relay.status()
    signed = autopilot_frames(messages, KEY)
    relay = SigningRelay(Discard(), KEY)
    rows['pass in'] = _timed(signed, split_frames)
    rows['relay in'] = _timed(signed, relay.accept_from_link)
    assert relay.delivered == messages and not relay.dropped, relay.status()
    parser = mavlink.MAVLink(None)
    parsed_signed = [parser.parse_buffer(f)[0] for f in signed]
    parsed_plain = [parser.parse_buffer(f)[0] for f in autopilot_frames(messages, None)]
    sender = mavlink.MAVLink(None, srcSystem=1, srcComponent=1)
    off = VehicleSigning(mavlink.MAVLink(None), 1, None)
    on = VehicleSigning(sender, 1, None)
    on._activate(KEY, now_ticks())
    rows['autopilot in, no key'] = _timed(parsed_plain, off.accept)
    rows['autopilot in'] = _timed(parsed_signed, on.accept)
    assert on.accepted_signed == messages and not on.rejected, on.status()
    rows.update(_udp(out_frames[: min(messages, 5000)]))
    return {'messages': messages, **{name: _summary(t) for name, t in rows.items()}}


def _udp(frames: list[bytes]) -> dict:
    """Loopback: plain sendto + recvfrom, and the relay's send_from_mavsdk + recvfrom."""
    autopilot = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    autopilot.bind(('127.0.0.1', 0))
    port = autopilot.getsockname()[1]
    plain = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    relay = SigningRelay(UdpTransport(f'udpout://127.0.0.1:{port}', False, '127.0.0.1', port),
                         KEY)
    try:
        rows = {'udp plain': _timed(frames, lambda f: (plain.sendto(f, ('127.0.0.1', port)),
                                                        autopilot.recvfrom(512))),
                'udp relay': _timed(frames, lambda f: (relay.send_from_mavsdk(f),
                                                        autopilot.recvfrom(512)))}
    finally:
        relay.close()
        plain.close()
        autopilot.close()
    return rows


def flight(hold_s: float, signed: bool, port_base: int) -> dict:
    """Connect, arm, take off, hold ``hold_s``: wall seconds to airborne, CPU seconds and
    messages the autopilot took during the hold."""
    import asyncio
    import tempfile

    from fl_uav.autopilot_sim.autopilot import AutopilotSim
    from fl_uav.autopilot_sim.config import AutopilotSimConfig
    from fl_uav.autopilot_sim.signing import key_file_path, write_px4_key_file
    from fl_uav.vehicle.mavsdk_vehicle import MavsdkVehicle

    with tempfile.TemporaryDirectory() as state:
        if signed:
            write_px4_key_file(key_file_path(state, 0), KEY, now_ticks())
        sim = AutopilotSim(AutopilotSimConfig(
            num_vehicles=1, remote_base_port=port_base, bind_base_port=port_base + 1000,
            time_factor=10.0, heartbeat_rate_hz=2.0, position_rate_hz=20.0, state_dir=state))
        handle = sim.run_in_thread()
        result = {}

        async def scenario():
            vehicle = MavsdkVehicle(f'udpin://127.0.0.1:{port_base}', sim.config.origin,
                                    signing_key=KEY if signed else None)
            start = time.monotonic()
            try:
                await vehicle.connect(timeout_s=30.0)
                await vehicle.arm()
                await vehicle.takeoff(10.0)
                result['airborne_s'] = round(time.monotonic() - start, 2)
                rx_before, cpu_before = sim.links[0].rx_messages, time.process_time()
                tx_before = sim.links[0].tx_datagrams
                await asyncio.sleep(hold_s)
                result['hold_cpu_s'] = round(time.process_time() - cpu_before, 3)
                result['to_autopilot_per_s'] = round(
                    (sim.links[0].rx_messages - rx_before) / hold_s, 1)
                result['from_autopilot_per_s'] = round(
                    (sim.links[0].tx_datagrams - tx_before) / hold_s, 1)
            finally:
                await vehicle.close()

        try:
            asyncio.run(scenario())
        finally:
            handle.stop()
    result['hold_cpu_percent'] = round(100.0 * result['hold_cpu_s'] / hold_s, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--messages', type=int, default=20000)
    parser.add_argument('--flight', type=float, default=0.0, metavar='S',
                        help='also fly unsigned and signed, holding S seconds (0: not)')
    parser.add_argument('--port-base', type=int, default=24540)
    args = parser.parse_args(argv)
    row = measure(args.messages)
    if args.flight > 0:
        for signed in (False, True):
            row[f'flight {"signed" if signed else "unsigned"}'] = flight(
                args.flight, signed, args.port_base)
    for name, value in row.items():
        if isinstance(value, dict) and 'min_us' in value:
            print(f'{name:22s} {value["min_us"]:8.2f} / {value["median_us"]:8.2f} µs '
                  '(min / median)')
        elif isinstance(value, dict):
            print(f'{name:22s} {value}')
    print(json.dumps(row))
    return 0


if __name__ == '__main__':
    sys.exit(main())
