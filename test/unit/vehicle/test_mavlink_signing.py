"""MAVLink 2 signing on raw frames (fl_uav/vehicle/mavlink_signing.py) and the signing relay
between MAVSDK and the autopilot link (fl_uav/vehicle/mavlink_signing_relay.py).

The frames our helpers sign are checked by pymavlink's own signature check, and frames
pymavlink signs by ours, so the two sides do not merely agree with each other. The relay is
driven over real UDP sockets (a stand-in autopilot and a rogue on the drone's port), then
with the real MAVSDK against the simulator holding the key.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import stat
import threading

import pytest
from pymavlink.dialects.v20 import ardupilotmega as apm
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.autopilot_sim.autopilot import AutopilotSim
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.autopilot_sim.signing import key_file_path, write_px4_key_file
from fl_uav.vehicle.mavlink_signing import (
    SigningError,
    StreamCheck,
    generate_key,
    now_ticks,
    passphrase_key,
    read_key_file,
    sign_frame,
    split_frames,
    write_key_file,
)
from fl_uav.vehicle.mavlink_signing_relay import SigningRelay, UdpTransport, parse_link_url
from fl_uav.vehicle.mavsdk_vehicle import MavsdkVehicle
from test.conftest import BIND_PORT_OFFSET

KEY = bytes(range(32))
OTHER_KEY = bytes(range(50, 82))


def _unsigned(sysid: int = 245, dialect=mavlink, build=None) -> bytes:
    mav = dialect.MAVLink(None, srcSystem=sysid, srcComponent=190)
    message = (build or (lambda m: m.command_long_encode(
        1, 1, mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 0, 1, 0, 0, 0, 0, 0, 0)))(mav)
    return message.pack(mav)


def _pymavlink_accepts(frame: bytes, key: bytes, dialect=mavlink) -> bool:
    checker = dialect.MAVLink(None)
    checker.signing.secret_key = key
    checker.robust_parsing = True
    parsed = checker.parse_buffer(frame) or []
    return len(parsed) == 1 and parsed[0].get_type() != 'BAD_DATA' and parsed[0].get_signed()


def _signed_by_pymavlink(key: bytes, timestamp: int, sysid: int = 1) -> bytes:
    mav = mavlink.MAVLink(None, srcSystem=sysid, srcComponent=1)
    mav.signing.secret_key = key
    mav.signing.sign_outgoing = True
    mav.signing.timestamp = timestamp
    return mav.heartbeat_encode(2, 12, 0, 0, 3).pack(mav)


@pytest.mark.parametrize('case', ['command', 'heartbeat', 'not_in_common'])
def test_a_frame_we_sign_passes_pymavlinks_check_and_only_with_the_key(case):
    dialect, build = mavlink, None
    if case == 'heartbeat':
        build = lambda m: m.heartbeat_encode(6, 8, 0, 0, 4)        # noqa: E731
    elif case == 'not_in_common':     # an ArduPilot message: its CRC_EXTRA found from the CRC
        dialect, build = apm, lambda m: m.ahrs_encode(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)  # noqa: E731
    frame = _unsigned(dialect=dialect, build=build)
    signed = sign_frame(frame, KEY, 3, now_ticks())
    assert _pymavlink_accepts(signed, KEY, dialect)
    assert not _pymavlink_accepts(signed, OTHER_KEY, dialect)
    assert signed[:2] == frame[:2] and signed[3:10] == frame[3:10]   # ids, seq kept


def test_our_check_takes_pymavlinks_signatures_in_order_once():
    start = now_ticks()
    check = StreamCheck(KEY, start)
    first, second = (_signed_by_pymavlink(KEY, start + i) for i in (1, 2))
    assert check.check(first) is None and check.check(second) is None
    assert check.check(first) == 'stale_timestamp'            # played back
    assert check.check(_signed_by_pymavlink(OTHER_KEY, start + 5)) == 'bad_signature'
    assert check.check(_signed_by_pymavlink(KEY, start - 7_000_000, sysid=9)) == \
        'stale_timestamp'                                     # a new stream over 1 min old
    assert check.timestamp == start + 2


def test_frames_are_split_from_a_datagram_and_garbage_counted():
    a, b = _unsigned(), sign_frame(_unsigned(), KEY, 0, now_ticks())
    frames, garbage = split_frames(b'\x00\x01' + a + b + a[:5])
    assert frames == [a, b] and garbage == 7


def test_key_files_are_private_and_checked(tmp_path):
    key = generate_key()
    path = write_key_file(tmp_path / 'k' / 'drone0.key', key)
    assert read_key_file(path) == key and len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        write_key_file(path, key)
    os.chmod(path, 0o644)
    with pytest.raises(SigningError, match='readable by others'):
        read_key_file(path)
    (tmp_path / 'bad.key').write_text('abc\n')
    os.chmod(tmp_path / 'bad.key', 0o600)
    with pytest.raises(SigningError, match='not a MAVLink signing key'):
        read_key_file(tmp_path / 'bad.key')
    with pytest.raises(SigningError, match='cannot read'):
        read_key_file(tmp_path / 'missing.key')
    assert passphrase_key('hello').hex().startswith('2cf24dba')    # SHA-256, as MAVProxy


def test_overwriting_a_key_file_readable_by_others_leaves_a_private_one_with_the_new_key(
        tmp_path):
    # Arrange: an old key file someone made readable by all
    path = write_key_file(tmp_path / 'drone0.key', KEY)
    os.chmod(path, 0o644)
    # Act
    write_key_file(path, OTHER_KEY, overwrite=True)
    # Assert
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_key_file(path) == OTHER_KEY
    assert sorted(p.name for p in tmp_path.iterdir()) == ['drone0.key']


def test_an_overwrite_that_fails_midway_leaves_the_old_key_file(tmp_path, monkeypatch):
    # Arrange: the disk fails while the new key is being written
    path = write_key_file(tmp_path / 'drone0.key', KEY)

    def failing_fsync(fd: int) -> None:
        raise OSError(5, 'Input/output error')

    monkeypatch.setattr(os, 'fsync', failing_fsync)
    # Act
    with pytest.raises(OSError, match='Input/output'):
        write_key_file(path, OTHER_KEY, overwrite=True)
    # Assert: the old key whole, no temporary file left
    monkeypatch.undo()
    assert read_key_file(path) == KEY
    assert sorted(p.name for p in tmp_path.iterdir()) == ['drone0.key']


@pytest.mark.parametrize(('url', 'parsed'), [
    ('udpin://0.0.0.0:14540', ('udpin', '0.0.0.0', 14540)),
    ('udp://:14541', ('udpin', '0.0.0.0', 14541)),
    ('udpout://10.0.0.2:14550', ('udpout', '10.0.0.2', 14550)),
    ('serial:///dev/ttyACM0:57600', ('serial', '/dev/ttyACM0', 57600)),
])
def test_link_urls_as_mavsdk_spells_them(url, parsed):
    assert parse_link_url(url) == parsed


@pytest.mark.parametrize('url', ['tcpout://1.2.3.4:5760', 'udpin://0.0.0.0', 'serial://x'])
def test_links_the_relay_cannot_open_are_named(url):
    with pytest.raises(ValueError, match=url.split('//')[0]):
        parse_link_url(url)


@pytest.fixture
def relay_on_udp(port_base):
    """A relay listening on the drone's port (udpin), a stand-in autopilot socket and a
    rogue's socket, both on loopback."""
    relay = SigningRelay(UdpTransport(f'udpin://127.0.0.1:{port_base}', True, '127.0.0.1',
                                      port_base), KEY)
    autopilot = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    autopilot.bind(('127.0.0.1', port_base + BIND_PORT_OFFSET))
    autopilot.settimeout(5.0)
    rogue = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rogue.bind(('127.0.0.1', 0))
    yield relay, autopilot, rogue
    relay.close()
    autopilot.close()
    rogue.close()


def test_the_relay_passes_only_frames_signed_with_the_key_and_answers_only_their_sender(
        relay_on_udp):
    # Arrange
    relay, autopilot, rogue = relay_on_udp
    received = []
    start = now_ticks()
    genuine = _signed_by_pymavlink(KEY, start + 1)
    # Act: a command from MAVSDK before any autopilot was heard, then the autopilot's signed
    # heartbeat, the rogue's unsigned and wrongly signed ones, a replay, MAVSDK's command
    relay.send_from_mavsdk(_unsigned())
    received.append(relay.accept_from_link(genuine, autopilot.getsockname()))
    received.append(relay.accept_from_link(_unsigned(1, build=lambda m: m.heartbeat_encode(
        2, 12, 0, 0, 3)), rogue.getsockname()))
    received.append(relay.accept_from_link(_signed_by_pymavlink(OTHER_KEY, start + 9),
                                           rogue.getsockname()))
    received.append(relay.accept_from_link(genuine, rogue.getsockname()))
    relay.send_from_mavsdk(_unsigned())
    data, _ = autopilot.recvfrom(1024)
    # Assert
    assert received == [genuine, b'', b'', b'']
    assert relay.dropped == {'unsigned': 1, 'bad_signature': 1, 'stale_timestamp': 1}
    assert relay.not_sent == 1
    assert relay.transport.peer == autopilot.getsockname()
    assert _pymavlink_accepts(data, KEY) and relay.sent == 1


def test_a_frame_of_the_relays_own_sent_back_to_it_is_dropped_and_the_peer_stays(
        relay_on_udp):
    # Arrange: the autopilot heard; one command the relay signed, captured on its way out
    relay, autopilot, rogue = relay_on_udp
    relay.accept_from_link(_signed_by_pymavlink(KEY, now_ticks()), autopilot.getsockname())
    relay.send_from_mavsdk(_unsigned())
    captured, _ = autopilot.recvfrom(1024)
    # Act: the rogue plays it back to the relay's port
    delivered = relay.accept_from_link(captured, rogue.getsockname())
    # Assert: a stale replay of the relay's own stream; the drone still answers the autopilot
    assert delivered == b''
    assert relay.dropped == {'stale_timestamp': 1}
    assert relay.transport.peer == autopilot.getsockname()


@pytest.mark.timeout(60)
def test_mavsdk_flies_a_keyed_simulator_through_the_relay(port_base, tmp_path):
    # Arrange: the simulated autopilot holds the key (as on its SD card)
    write_px4_key_file(key_file_path(tmp_path, 0), KEY, now_ticks())
    sim = AutopilotSim(AutopilotSimConfig(
        num_vehicles=1, remote_base_port=port_base, bind_base_port=port_base + BIND_PORT_OFFSET,
        time_factor=10.0, heartbeat_rate_hz=2.0, state_dir=str(tmp_path)))
    handle = sim.run_in_thread()
    relay_status = {}

    async def scenario():
        vehicle = MavsdkVehicle(f'udpin://127.0.0.1:{port_base}', sim.config.origin,
                                signing_key=KEY)
        try:
            await vehicle.connect(timeout_s=20.0)
            await vehicle.arm()
            await vehicle.takeoff(5.0)
            relay_status.update(vehicle.signing_relay.status())
        finally:
            await vehicle.close()

    # Act
    try:
        asyncio.run(scenario())
    finally:
        handle.stop()
    # Assert: flown; every message the autopilot took was signed with the key; nothing the
    # autopilot sent was dropped by the relay
    signing = sim.signing_status()[0]
    assert math.isclose(sim.vehicles[0].position_enu_m[2], 5.0, abs_tol=0.5)
    assert signing['active'] and signing['rejected'] == {}
    assert signing['accepted_signed'] > 10
    assert relay_status['delivered'] > 10 and relay_status['sent'] > 10
    assert relay_status['dropped'] == {}


def test_a_signing_key_needs_a_link_the_relay_can_open():
    with pytest.raises(ValueError, match='tcpout'):
        MavsdkVehicle('tcpout://127.0.0.1:5760', None, signing_key=KEY)
    with pytest.raises(ValueError, match='32 bytes'):
        MavsdkVehicle('udpin://127.0.0.1:14540', None, signing_key=b'short')


def test_the_relay_on_a_serial_port_reassembles_frames_split_across_reads(tmp_path):
    # Arrange: a pseudo-terminal stands in for the autopilot's serial port
    controller, device = os.openpty()
    relay = SigningRelay.open(f'serial://{os.ttyname(device)}:57600', KEY)
    start = now_ticks()
    frames = [_signed_by_pymavlink(KEY, start + i) for i in range(1, 4)]
    delivered, all_in = [], threading.Event()

    def deliver(data: bytes) -> None:
        delivered.append(data)
        if len(b''.join(delivered)) >= sum(map(len, frames)):
            all_in.set()

    relay.start(deliver)
    stream = b'\x00' + frames[0] + frames[1] + _unsigned(1) + frames[2]
    try:
        # Act: the autopilot's bytes arrive in pieces that cut frames; MAVSDK sends one
        for cut in range(0, len(stream), 7):
            os.write(controller, stream[cut:cut + 7])
        relay.send_from_mavsdk(_unsigned())
        written = os.read(controller, 512)
        arrived = all_in.wait(5.0)
    finally:
        relay.close()
        os.close(controller)
        os.close(device)
    # Assert: the three signed frames whole and in order, the unsigned one and the stray
    # byte dropped; what MAVSDK sent went out signed
    assert arrived and b''.join(delivered) == b''.join(frames)
    assert relay.dropped == {'garbage': 1, 'unsigned': 1}
    assert _pymavlink_accepts(written, KEY)
