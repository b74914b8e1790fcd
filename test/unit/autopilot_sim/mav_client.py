"""A minimal pymavlink ground station over UDP for the simulator tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from pymavlink.dialects.v20 import common as mavlink

CLIENT_SYSID = 245
CLIENT_COMPID = 190


class MavClient:
    """A ground station on the vehicle's remote port: the sim's first peer, like MAVSDK."""

    def __init__(self, port: int, vehicle_port: int, host: str = '127.0.0.1') -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.vehicle_addr = (host, vehicle_port)
        self.mav = mavlink.MAVLink(self, srcSystem=CLIENT_SYSID, srcComponent=CLIENT_COMPID)
        self.mav.robust_parsing = True
        self.received: list = []

    def write(self, data: bytes) -> None:
        """pymavlink output hook: one datagram per message."""
        self.sock.sendto(data, self.vehicle_addr)

    def send_raw(self, data: bytes) -> None:
        """Send arbitrary bytes to the vehicle."""
        self.sock.sendto(data, self.vehicle_addr)

    def recv(self, msg_type: str | tuple[str, ...],
             predicate: Callable[[object], bool] = lambda m: True,
             timeout_s: float = 3.0):
        """The next message of a type (and matching ``predicate``), or None on time-out."""
        types = (msg_type,) if isinstance(msg_type, str) else msg_type
        deadline_s = time.monotonic() + timeout_s
        while True:
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                return None
            self.sock.settimeout(remaining_s)
            try:
                data, _ = self.sock.recvfrom(65536)
            except TimeoutError:
                return None
            for msg in self.mav.parse_buffer(data) or []:
                self.received.append(msg)
                if msg.get_type() in types and predicate(msg):
                    return msg

    def drain(self) -> None:
        """Drop everything queued on the socket."""
        self.sock.settimeout(0.0)
        try:
            while True:
                self.sock.recvfrom(65536)
        except (BlockingIOError, TimeoutError):
            pass

    def command_long(self, command: int, *params: float, timeout_s: float = 3.0):
        """Send COMMAND_LONG to vehicle 1 and return its COMMAND_ACK (or None)."""
        padded = list(params) + [0.0] * (7 - len(params))
        self.mav.command_long_send(1, 1, command, 0, *padded)
        return self.recv('COMMAND_ACK', lambda m: m.command == command, timeout_s)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()
