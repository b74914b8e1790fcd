"""Put a MAVLink signing key on an autopilot with SETUP_SIGNING, and check that it took.

What PX4 does with SETUP_SIGNING (fl_uav/autopilot_sim/signing.py has the rules and their
sources): without a key it takes one unsigned, on any link; with a key only a SETUP_SIGNING
signed with that key changes it; never while armed; it sends no acknowledgement. So
:func:`provision_key` sends SETUP_SIGNING (signed with ``current_key`` when rotating), again
every RESEND_S, until the autopilot's HEARTBEAT comes signed with the new key, or fails with
what it saw. PX4's docs advise doing the first one over a trusted link (USB): anyone who can
reach a link of a vehicle without a key can put theirs on it.

The link is opened as the signing relay opens it (``serial://DEVICE:BAUD``,
``udpin://HOST:PORT``, ``udpout://HOST:PORT``). Over UDP mind PX4's partner rule: an autopilot
answers the first address it heard on that port for good, so provision from the port the
drone will use (its ``flight.url_template``), before the drone node starts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pymavlink.dialects.v20 import common as mavlink

from fl_uav.vehicle.mavlink_signing import (
    is_signed,
    msg_id,
    now_ticks,
    sign_frame,
    signature_matches,
    source,
    split_frames,
)
from fl_uav.vehicle.mavlink_signing_relay import open_transport

#: who provisions: a ground station's ids (MAVLink's usual GCS system id and component)
PROVISIONER_SYSID = 255
PROVISIONER_COMPID = mavlink.MAV_COMP_ID_MISSIONPLANNER
RESEND_S = 1.0
POLL_S = 0.1


class ProvisionError(RuntimeError):
    """The key could not be put on the autopilot (the message says what was seen)."""


@dataclass(frozen=True)
class Provisioned:
    """An autopilot that now signs with the key: its ids, and how it signed before."""

    system_id: int
    component_id: int
    before: str              # 'unsigned', 'the current key', 'another key'
    attempts: int


def _heartbeat(mav: mavlink.MAVLink) -> bytes:
    return mav.heartbeat_encode(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0,
                                mavlink.MAV_STATE_ACTIVE).pack(mav)


def _autopilot_heartbeats(data: bytes, system_id: int | None):
    """The autopilot HEARTBEAT frames in ``data`` (from ``system_id`` if given)."""
    checker = mavlink.MAVLink(None)
    checker.robust_parsing = True
    for frame in split_frames(data)[0]:
        if msg_id(frame) != mavlink.MAVLINK_MSG_ID_HEARTBEAT:
            continue
        sysid, compid = source(frame)
        if system_id is not None and sysid != system_id:
            continue
        parsed = checker.parse_buffer(frame) or []
        if parsed and parsed[0].get_type() == 'HEARTBEAT' and \
                parsed[0].autopilot != mavlink.MAV_AUTOPILOT_INVALID:
            yield frame, sysid, compid


def _signed_by(frame: bytes, key: bytes | None) -> bool:
    return key is not None and is_signed(frame) and signature_matches(frame, key)


def provision_key(url: str, key: bytes, *, current_key: bytes | None = None,
                  target_system: int | None = None, timeout_s: float = 15.0,
                  clock=time.monotonic) -> Provisioned:
    """Send SETUP_SIGNING with ``key`` over ``url`` to the autopilot (``target_system``, or
    the first autopilot heard) until its HEARTBEAT is signed with ``key``; ProvisionError
    after ``timeout_s`` (saying whether an autopilot was heard, and how it signed)."""
    transport = open_transport(url)
    mav = mavlink.MAVLink(None, srcSystem=PROVISIONER_SYSID, srcComponent=PROVISIONER_COMPID)
    deadline_s = clock() + timeout_s
    target: tuple[int, int] | None = None
    before = ''
    attempts = 0
    next_send_s = clock()
    try:
        while clock() < deadline_s:
            if clock() >= next_send_s:
                next_send_s = clock() + RESEND_S
                _send(transport, _heartbeat(mav))   # allowed unsigned: the vehicle answers
                if target is not None:
                    _send(transport, _setup_signing(mav, target, key, current_key))
                    attempts += 1
            got = transport.receive(POLL_S)
            if got is None:
                continue
            data, peer = got
            for frame, sysid, compid in _autopilot_heartbeats(data, target_system):
                transport.accept_peer(peer)
                if target is None:
                    target = (sysid, compid)
                    before = ('unsigned' if not is_signed(frame) else 'the current key'
                              if _signed_by(frame, current_key) else
                              'the new key' if _signed_by(frame, key) else 'another key')
                    next_send_s = clock()
                elif (sysid, compid) == target and attempts and _signed_by(frame, key):
                    return Provisioned(sysid, compid, before, attempts)
    finally:
        transport.close()
    if target is None:
        which = f'system {target_system}' if target_system is not None else 'any autopilot'
        raise ProvisionError(f'{url}: no HEARTBEAT from {which} within {timeout_s:g} s')
    seen = {'another key': 'it signs with another key: give that one as --current-key',
            'the current key': 'it signs with the current key', 'the new key': '',
            'unsigned': 'it signed nothing before'}[before]
    raise ProvisionError(
        f'{url}: system {target[0]} did not start signing with the key within {timeout_s:g} s '
        f'({attempts} SETUP_SIGNING sent; {seen}). PX4 takes no SETUP_SIGNING while armed, and '
        f'has signing from v1.17 on')


def _send(transport, data: bytes) -> None:
    try:
        transport.send(data)
    except ConnectionError:
        pass             # udpin: no autopilot heard yet


def _setup_signing(mav: mavlink.MAVLink, target: tuple[int, int], key: bytes,
                   current_key: bytes | None) -> bytes:
    frame = mav.setup_signing_encode(target[0], target[1], key, now_ticks()).pack(mav)
    if current_key is None:
        return frame
    return sign_frame(frame, current_key, 0, now_ticks())
