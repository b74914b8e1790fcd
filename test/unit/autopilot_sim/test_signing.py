"""The simulator's MAVLink 2 signing against PX4's rules (fl_uav/autopilot_sim/signing.py).

Over real UDP with pymavlink clients: what a vehicle with a key accepts (signed with its key
and fresh, or one of PX4's four allowed unsigned messages) and drops (unsigned, another key,
a replay, a new stream over a minute old), that a forged frame cannot move a stream's
timestamp, SETUP_SIGNING (first key unsigned, later ones signed only, never armed, an all-zero
key turns signing off, another vehicle's ignored), and the key file kept across a restart.

A message that must be dropped is followed by a signed probe command: once the probe's
COMMAND_ACK is back the vehicle has dealt with the first (it handles datagrams in order), so
no test waits a fixed time for something not to happen.
"""

from __future__ import annotations

import struct

import pytest
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.autopilot_sim.signing import (
    KEY_ACCEPTED,
    REJECTED_ARMED,
    SIGNING_DISABLED,
    key_file_path,
    read_px4_key_file,
    write_px4_key_file,
)
from fl_uav.vehicle.mavlink_signing import TICKS_PER_SECOND, now_ticks

from .mav_client import CLIENT_COMPID, CLIENT_SYSID, MavClient

KEY = bytes(range(32))
OTHER_KEY = bytes(range(100, 132))
PROBE = mavlink.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES     # harmless, always ACKed
ROGUE = mavlink.MAV_CMD_DO_CHANGE_SPEED                     # ACKed when accepted


def _signer(client: MavClient, key: bytes, timestamp: int | None = None, link_id: int = 0,
            sysid: int = CLIENT_SYSID) -> mavlink.MAVLink:
    """A pymavlink sender through ``client``'s socket that signs with ``key``."""
    mav = mavlink.MAVLink(client, srcSystem=sysid, srcComponent=CLIENT_COMPID)
    mav.signing.secret_key = key
    mav.signing.sign_outgoing = True
    mav.signing.link_id = link_id
    mav.signing.timestamp = now_ticks() if timestamp is None else timestamp
    return mav


def _verified_with(key: bytes, msg) -> bool:
    """pymavlink's own verdict: the message's frame is signed with ``key``."""
    checker = mavlink.MAVLink(None)
    checker.signing.secret_key = key
    checker.robust_parsing = True
    parsed = checker.parse_buffer(bytes(msg.get_msgbuf())) or []
    return len(parsed) == 1 and parsed[0].get_type() != 'BAD_DATA' and parsed[0].get_signed()


def _acks(client: MavClient, command: int) -> list:
    return [m for m in client.received if m.get_type() == 'COMMAND_ACK' and m.command == command]


def _probe(client: MavClient, key: bytes | None):
    """Send the probe command (signed with ``key``, or unsigned) and return its ACK."""
    mav = _signer(client, key) if key is not None else client.mav
    mav.command_long_send(1, 1, PROBE, 0, 0, 0, 0, 0, 0, 0, 0)
    return client.recv('COMMAND_ACK', lambda m: m.command == PROBE)


def _keyed_sim(start_sim, tmp_path, key: bytes = KEY, **overrides):
    write_px4_key_file(key_file_path(tmp_path, 0), key, now_ticks())
    return start_sim(state_dir=str(tmp_path), **overrides)


def test_a_vehicle_without_a_key_takes_everything_and_signs_nothing(start_sim, client_factory,
                                                                    tmp_path):
    # Arrange
    sim, _ = start_sim(state_dir=str(tmp_path))
    client = client_factory()
    # Act
    unsigned = client.command_long(ROGUE, 1, 5.0)
    signed = _signer(client, KEY)
    signed.command_long_send(1, 1, PROBE, 0, 0, 0, 0, 0, 0, 0, 0)
    probe = client.recv('COMMAND_ACK', lambda m: m.command == PROBE)
    heartbeat = client.recv('HEARTBEAT')
    # Assert
    assert unsigned is not None and probe is not None
    assert not bytes(heartbeat.get_msgbuf())[2] & mavlink.MAVLINK_IFLAG_SIGNED
    assert sim.links[0].signing.status()['active'] is False
    assert not sim.links[0].signing.rejected


def test_a_vehicle_with_a_key_signs_what_it_sends(start_sim, client_factory, tmp_path):
    _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    heartbeat = client.recv('HEARTBEAT')
    ack = _probe(client, KEY)
    assert _verified_with(KEY, heartbeat) and _verified_with(KEY, ack)
    assert not _verified_with(OTHER_KEY, heartbeat)


@pytest.mark.parametrize(('how', 'reason'), [('unsigned', 'unsigned'),
                                             ('other_key', 'bad_signature')])
def test_unsigned_or_wrongly_signed_commands_are_dropped(start_sim, client_factory, tmp_path,
                                                         how, reason):
    # Arrange
    sim, _ = _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    rogue = client.mav if how == 'unsigned' else _signer(client, OTHER_KEY)
    # Act
    rogue.command_long_send(1, 1, ROGUE, 0, 1, 5.0, 0, 0, 0, 0, 0)
    probe = _probe(client, KEY)
    # Assert
    signing = sim.links[0].signing
    assert probe is not None and not _acks(client, ROGUE)
    assert signing.rejected == {reason: 1}
    assert signing.rejected_messages == {'COMMAND_LONG': 1}
    assert [e['reason'] for e in sim.events_of(0, 'mavlink_rejected')] == [reason]


def test_a_replayed_signed_frame_is_dropped(start_sim, client_factory, tmp_path):
    # Arrange: one signed command captured on the air
    sim, _ = _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    mav = _signer(client, KEY)
    captured = mav.command_long_encode(1, 1, ROGUE, 0, 1, 5.0, 0, 0, 0, 0, 0).pack(mav)
    client.send_raw(captured)
    assert client.recv('COMMAND_ACK', lambda m: m.command == ROGUE) is not None
    # Act: played back
    client.send_raw(captured)
    probe = _probe(client, KEY)
    # Assert
    assert probe is not None and len(_acks(client, ROGUE)) == 1
    assert sim.links[0].signing.rejected == {'stale_timestamp': 1}


@pytest.mark.parametrize(('lag_s', 'accepted'), [(30.0, True), (90.0, False)])
def test_a_new_stream_is_taken_up_to_a_minute_behind_the_vehicle(start_sim, client_factory,
                                                                 tmp_path, lag_s, accepted):
    # Arrange
    sim, _ = _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    late = _signer(client, KEY, timestamp=now_ticks() - int(lag_s * TICKS_PER_SECOND),
                   link_id=7)
    # Act
    late.command_long_send(1, 1, ROGUE, 0, 1, 5.0, 0, 0, 0, 0, 0)
    probe = _probe(client, KEY)
    # Assert
    assert probe is not None
    assert bool(_acks(client, ROGUE)) is accepted
    assert sim.links[0].signing.rejected == ({} if accepted else {'stale_timestamp': 1})


def test_a_forged_frame_does_not_move_the_stream_timestamp(start_sim, client_factory,
                                                           tmp_path):
    # Arrange: a forger sends on the client's stream, far in the future, with another key
    sim, _ = _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    forger = _signer(client, OTHER_KEY, timestamp=now_ticks() + 3600 * TICKS_PER_SECOND)
    forger.command_long_send(1, 1, ROGUE, 0, 1, 5.0, 0, 0, 0, 0, 0)
    # Act: the genuine client, on the same stream, at the current time
    probe = _probe(client, KEY)
    # Assert: still accepted (pymavlink's check_signature would have recorded the forged
    # timestamp first and refused it as old)
    assert probe is not None and not _acks(client, ROGUE)
    assert sim.links[0].signing.rejected == {'bad_signature': 1}


def test_px4s_allowed_messages_pass_unsigned_and_nothing_else_does(start_sim, client_factory,
                                                                   tmp_path):
    # Arrange
    sim, _ = _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    link = sim.links[0]
    # Act: the four allowed ones unsigned (the heartbeat also with a bad signature), and a
    # parameter read, which is not allowed
    client.mav.heartbeat_send(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0)
    client.mav.radio_status_send(200, 190, 50, 10, 5, 0, 0)
    client.mav.adsb_vehicle_send(1, 0, 0, 0, 0, 0, 0, 0, b'X', 0, 0, 0, 0)
    client.mav.collision_send(0, 1, 0, 0, 10.0, 5.0, 2.0)
    _signer(client, OTHER_KEY).heartbeat_send(mavlink.MAV_TYPE_GCS,
                                              mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0)
    client.mav.param_request_read_send(1, 1, b'RTL_RETURN_ALT', -1)
    probe = _probe(client, KEY)
    # Assert
    assert probe is not None and link.client_heartbeat_wall_s is not None
    assert link.signing.rejected_messages == {'PARAM_REQUEST_READ': 1}
    assert link.rx_rejected == 1


def test_setup_signing_provisions_a_vehicle_and_the_key_survives_a_restart(
        start_sim, client_factory, tmp_path):
    # Arrange: a vehicle without a key; its first key comes unsigned, as over USB
    sim, handle = start_sim(state_dir=str(tmp_path))
    client = client_factory()
    requested = now_ticks()
    # Act
    client.mav.setup_signing_send(1, 1, KEY, requested)
    signed_ack = _probe(client, KEY)
    handle.stop()
    stored = read_px4_key_file(key_file_path(tmp_path, 0))
    file_bytes = key_file_path(tmp_path, 0).read_bytes()
    restarted, _ = start_sim(state_dir=str(tmp_path))
    client.drain()
    client.received.clear()
    client.mav.command_long_send(1, 1, ROGUE, 0, 1, 5.0, 0, 0, 0, 0, 0)
    after_restart = _probe(client, KEY)
    heartbeat = client.recv('HEARTBEAT')
    # Assert: provisioned (SETUP_SIGNING itself is not answered: its signed replies tell)
    assert sim.links[0].signing.setup == {KEY_ACCEPTED: 1}
    assert _verified_with(KEY, signed_ack)
    # the key file as PX4 writes it: the key, then the timestamp (little-endian), 0600
    assert len(file_bytes) == 40 and file_bytes[:32] == KEY
    assert stored[1] == struct.unpack('<Q', file_bytes[32:])[0] >= requested
    assert key_file_path(tmp_path, 0).stat().st_mode & 0o777 == 0o600
    # Assert: after the restart, signed still and the unsigned command dropped
    assert _verified_with(KEY, heartbeat) and _verified_with(KEY, after_restart)
    assert not _acks(client, ROGUE)
    assert restarted.links[0].signing.rejected == {'unsigned': 1}


def test_a_key_is_changed_only_by_a_setup_signing_signed_with_it(start_sim, client_factory,
                                                                  tmp_path):
    # Arrange
    sim, _ = _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    signing = sim.links[0].signing
    # Act: an unsigned key change (a rogue's), then one signed with the current key
    client.mav.setup_signing_send(1, 1, OTHER_KEY, now_ticks())
    assert _probe(client, KEY) is not None
    refused_key = signing.key
    _signer(client, KEY).setup_signing_send(1, 1, OTHER_KEY, now_ticks())
    rotated = _probe(client, OTHER_KEY)
    # Assert
    assert refused_key == KEY and signing.rejected_messages == {'SETUP_SIGNING': 1}
    assert rotated is not None and _verified_with(OTHER_KEY, rotated)
    assert read_px4_key_file(key_file_path(tmp_path, 0))[0] == OTHER_KEY


def test_a_signed_command_replayed_after_a_same_key_setup_signing_is_dropped(
        start_sim, client_factory, tmp_path):
    # Arrange: a signed command on its own stream (link 3), taken and captured on the air
    sim, _ = _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    mav = _signer(client, KEY, link_id=3)
    captured = mav.command_long_encode(1, 1, ROGUE, 0, 1, 5.0, 0, 0, 0, 0, 0).pack(mav)
    client.send_raw(captured)
    assert client.recv('COMMAND_ACK', lambda m: m.command == ROGUE) is not None
    # Act: the same key provisioned again (signed with it, on link 0), then the playback
    _signer(client, KEY).setup_signing_send(1, 1, KEY, now_ticks())
    assert _probe(client, KEY) is not None
    client.send_raw(captured)
    probe = _probe(client, KEY)
    # Assert
    signing = sim.links[0].signing
    assert signing.setup == {KEY_ACCEPTED: 1}
    assert probe is not None and len(_acks(client, ROGUE)) == 1
    assert signing.rejected == {'stale_timestamp': 1}


def test_setup_signing_is_refused_while_armed(start_sim, client_factory, tmp_path):
    # Arrange: armed, no key
    sim, _ = start_sim(state_dir=str(tmp_path))
    client = client_factory()
    assert client.command_long(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1).result == \
        mavlink.MAV_RESULT_ACCEPTED
    # Act
    client.mav.setup_signing_send(1, 1, KEY, now_ticks())
    probe = _probe(client, None)
    # Assert
    assert probe is not None and not sim.links[0].signing.active
    assert sim.links[0].signing.setup == {REJECTED_ARMED: 1}
    assert not key_file_path(tmp_path, 0).exists()


def test_an_all_zero_key_turns_signing_off_only_when_signed(start_sim, client_factory,
                                                             tmp_path):
    # Arrange
    sim, _ = _keyed_sim(start_sim, tmp_path)
    client = client_factory()
    signing = sim.links[0].signing
    # Act: unsigned, then signed with the key
    client.mav.setup_signing_send(1, 1, bytes(32), 0)
    assert _probe(client, KEY) is not None
    still_on = signing.active
    _signer(client, KEY).setup_signing_send(1, 1, bytes(32), 0)
    off_ack = _probe(client, None)
    # Assert
    assert still_on and signing.rejected_messages == {'SETUP_SIGNING': 1}
    assert off_ack is not None and not signing.active
    assert signing.setup == {SIGNING_DISABLED: 1}
    assert read_px4_key_file(key_file_path(tmp_path, 0)) is None


def test_setup_signing_for_another_vehicle_is_ignored(start_sim, client_factory, tmp_path):
    sim, _ = start_sim(state_dir=str(tmp_path))
    client = client_factory()
    client.mav.setup_signing_send(7, 1, KEY, now_ticks())
    client.mav.setup_signing_send(1, mavlink.MAV_COMP_ID_CAMERA, KEY, now_ticks())
    assert _probe(client, None) is not None
    assert not sim.links[0].signing.active and sim.links[0].signing.setup == {}
