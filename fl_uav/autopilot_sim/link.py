"""MAVLink 2 side of one simulated PX4 vehicle: a UDP endpoint speaking like PX4 SITL.

:class:`VehicleLink` parses datagrams with pymavlink, answers commands, the parameter and
mission protocols, and streams telemetry from a :class:`~.flight.FlightController`.
As PX4's receiver does, it takes its first sender as its partner (at once when its configured
partner is on localhost, else after PARTNER_LATCH_AFTER_S) and sends telemetry and answers there
for good: a second client on the port is heard but gets nothing. With a MAVLink signing key
(provisioned by SETUP_SIGNING, kept in the vehicle's key file) it signs what it sends and drops
what PX4 would drop: unsigned or wrongly signed messages, replays, except PX4's few allowed
unsigned ones (:mod:`fl_uav.autopilot_sim.signing`). It never lets bad input escape:
malformed datagrams are counted and dropped, unknown commands get COMMAND_ACK UNSUPPORTED.
"""

from __future__ import annotations

import asyncio
import logging
import math
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.autopilot_sim.fence import Fence, FenceError, build_fence, fence_item_problem
from fl_uav.autopilot_sim.flight import (
    FORCE_ARM_MAGIC,
    INTEGER_PARAMS,
    CommandResult,
    FlightController,
    FlightListener,
    FlightMode,
)
from fl_uav.autopilot_sim.mission import (
    MAX_MISSION_ITEMS,
    RELATIVE_ALT_FRAMES,
    MissionItem,
    mission_result_name,
    validate_item,
)
from fl_uav.autopilot_sim.signing import VehicleSigning
from fl_uav.world.geo import yaw_enu_to_ned

_log = logging.getLogger(__name__)

AUTOPILOT_COMPONENT_ID = mavlink.MAV_COMP_ID_AUTOPILOT1
# PX4 main modes and AUTO sub-modes (px4_custom_mode.h).
PX4_MAIN_MODE_POSCTL = 3
PX4_MAIN_MODE_AUTO = 4
PX4_MAIN_MODE_OFFBOARD = 6
PX4_AUTO_TAKEOFF = 2
PX4_AUTO_LOITER = 3
PX4_AUTO_MISSION = 4
PX4_AUTO_RTL = 5
PX4_AUTO_LAND = 6
MODE_TO_PX4: dict[FlightMode, tuple[int, int]] = {
    FlightMode.HOLD: (PX4_MAIN_MODE_AUTO, PX4_AUTO_LOITER),
    FlightMode.TAKEOFF: (PX4_MAIN_MODE_AUTO, PX4_AUTO_TAKEOFF),
    FlightMode.MISSION: (PX4_MAIN_MODE_AUTO, PX4_AUTO_MISSION),
    FlightMode.RTL: (PX4_MAIN_MODE_AUTO, PX4_AUTO_RTL),
    FlightMode.LAND: (PX4_MAIN_MODE_AUTO, PX4_AUTO_LAND),
    FlightMode.OFFBOARD: (PX4_MAIN_MODE_OFFBOARD, 0),
}
PX4_TO_MODE = {value: mode for mode, value in MODE_TO_PX4.items()}
# PX4 firmware version reported in AUTOPILOT_VERSION: 1.15.0, release (type 255).
FLIGHT_SW_VERSION = (1 << 24) | (15 << 16) | (0 << 8) | 255
CAPABILITIES = (mavlink.MAV_PROTOCOL_CAPABILITY_MISSION_INT
                | mavlink.MAV_PROTOCOL_CAPABILITY_COMMAND_INT
                | mavlink.MAV_PROTOCOL_CAPABILITY_PARAM_FLOAT
                | mavlink.MAV_PROTOCOL_CAPABILITY_PARAM_ENCODE_BYTEWISE
                | mavlink.MAV_PROTOCOL_CAPABILITY_SET_POSITION_TARGET_LOCAL_NED
                | mavlink.MAV_PROTOCOL_CAPABILITY_MAVLINK2
                | mavlink.MAV_PROTOCOL_CAPABILITY_MISSION_FENCE
                | mavlink.MAV_PROTOCOL_CAPABILITY_MISSION_RALLY)
SENSORS = (mavlink.MAV_SYS_STATUS_SENSOR_3D_GYRO | mavlink.MAV_SYS_STATUS_SENSOR_3D_ACCEL
           | mavlink.MAV_SYS_STATUS_SENSOR_3D_MAG
           | mavlink.MAV_SYS_STATUS_SENSOR_ABSOLUTE_PRESSURE | mavlink.MAV_SYS_STATUS_SENSOR_GPS
           | mavlink.MAV_SYS_STATUS_AHRS | mavlink.MAV_SYS_STATUS_SENSOR_ANGULAR_RATE_CONTROL
           | mavlink.MAV_SYS_STATUS_SENSOR_ATTITUDE_STABILIZATION
           | mavlink.MAV_SYS_STATUS_SENSOR_Z_ALTITUDE_CONTROL
           | mavlink.MAV_SYS_STATUS_SENSOR_XY_POSITION_CONTROL
           | mavlink.MAV_SYS_STATUS_SENSOR_MOTOR_OUTPUTS | mavlink.MAV_SYS_STATUS_SENSOR_BATTERY
           | mavlink.MAV_SYS_STATUS_PREARM_CHECK)
# Re-request a mission item after this long without it (wall seconds), at most this often.
MISSION_ITEM_TIMEOUT_S = 0.5
# STATUSTEXT.text holds 50 characters; longer texts go in chunks (STATUSTEXT.id, chunk_seq).
STATUSTEXT_CHUNK_BYTES = 50
MISSION_MAX_RETRIES = 6
INT32_MAX = 2**31 - 1
# SET_MESSAGE_INTERVAL: the slowest rate honoured (s).
MAX_STREAM_INTERVAL_S = 2000.0
# Offboard set-points beyond this (m or m/s, relative to the local origin) are ignored.
MAX_LOCAL_SETPOINT = 100_000.0
UINT16_MAX = 2**16 - 1
# SET_POSITION_TARGET_* type_mask bits.
_POSITION_IGNORE = (mavlink.POSITION_TARGET_TYPEMASK_X_IGNORE
                    | mavlink.POSITION_TARGET_TYPEMASK_Y_IGNORE
                    | mavlink.POSITION_TARGET_TYPEMASK_Z_IGNORE)
#: PX4's mavlink receiver (UDP): with its partner at localhost (SITL's default) it takes the
#: first sender as its partner at once, with any other only after this long since its start;
#: until then it handles nothing; from then on it sends to that partner only, for good
#: (src/modules/mavlink/mavlink_receiver.cpp, MavlinkReceiver::run).
PARTNER_LATCH_AFTER_S = 3.0
_LOCALHOST = ('127.0.0.1', 'localhost')

_VELOCITY_IGNORE = (mavlink.POSITION_TARGET_TYPEMASK_VX_IGNORE
                    | mavlink.POSITION_TARGET_TYPEMASK_VY_IGNORE
                    | mavlink.POSITION_TARGET_TYPEMASK_VZ_IGNORE)


@dataclass
class LinkSettings:
    """Per-vehicle link settings derived from the simulator config."""

    host: str
    bind_port: int
    remote_port: int
    position_rate_hz: float = 10.0
    heartbeat_rate_hz: float = 1.0
    #: the vehicle's MAVLink signing key file (PX4's mavlink-signing-key.bin); None: no
    #: storage (a key provisioned by SETUP_SIGNING lasts until the simulator stops)
    key_file: Path | None = None


@dataclass
class _Command:
    """A COMMAND_LONG or COMMAND_INT, normalised."""

    command: int
    params: tuple[float, ...]
    frame: int
    is_int: bool
    source: tuple[int, int]

    @classmethod
    def from_message(cls, msg) -> _Command:
        is_int = msg.get_type() == 'COMMAND_INT'
        if is_int:
            x = math.nan if msg.x == INT32_MAX else msg.x * 1e-7
            y = math.nan if msg.y == INT32_MAX else msg.y * 1e-7
            params = (msg.param1, msg.param2, msg.param3, msg.param4, x, y, msg.z)
            frame = msg.frame
        else:
            params = (msg.param1, msg.param2, msg.param3, msg.param4, msg.param5, msg.param6,
                      msg.param7)
            frame = mavlink.MAV_FRAME_GLOBAL
        return cls(msg.command, tuple(float(p) for p in params), frame, is_int,
                   (msg.get_srcSystem(), msg.get_srcComponent()))

    def param(self, index: int) -> float:
        """Param ``index`` (1-based, as in the MAVLink spec)."""
        return self.params[index - 1]

    def int_param(self, index: int) -> int | None:
        """Param ``index`` as an integer, or None when it is not a finite number."""
        value = self.params[index - 1]
        if not math.isfinite(value) or abs(value) > 2**31:
            return None
        return int(value)


@dataclass
class _Upload:
    """An incoming mission transfer."""

    mission_type: int
    count: int
    partner: tuple[int, int]
    items: list[MissionItem] = field(default_factory=list)
    last_request_wall_s: float = 0.0
    retries: int = 0

    @property
    def next_seq(self) -> int:
        return len(self.items)


@dataclass
class _Stream:
    interval_s: float
    default_interval_s: float
    next_due_s: float


class _DatagramWriter:
    """pymavlink's output "file": every packed message becomes one datagram to the peer."""

    def __init__(self, link: VehicleLink) -> None:
        self._link = link

    def write(self, data: bytes) -> None:
        self._link.send_datagram(data)


class VehicleLink(asyncio.DatagramProtocol, FlightListener):
    """One simulated PX4 vehicle's MAVLink endpoint (system id ``sysid``, component 1)."""

    def __init__(self, controller: FlightController, sysid: int, settings: LinkSettings,
                 sim_clock: Callable[[], float],
                 wall_clock: Callable[[], float] = time.monotonic) -> None:
        self.controller = controller
        self.sysid = sysid
        self.settings = settings
        #: where telemetry goes: the configured client until the first sender is taken as the
        #: partner (PX4's rule, PARTNER_LATCH_AFTER_S), then that sender for good
        self.peer: tuple[str, int] = (settings.host, settings.remote_port)
        self.partner_latched = False
        self._started_wall_s: float | None = None
        self.transport: asyncio.DatagramTransport | None = None
        self.rx_messages = 0
        self.rx_errors = 0
        self.rx_rejected = 0          # dropped by the signing rules (self.signing says why)
        self.tx_datagrams = 0
        #: wall time (``wall_clock``) of the last HEARTBEAT from the client; None: none yet
        self.client_heartbeat_wall_s: float | None = None
        self._sim_clock = sim_clock
        self._wall_clock = wall_clock
        # Sends (and signs, with a key); incoming frames are parsed by _rx, which checks no
        # signature: VehicleSigning decides, as PX4 does (signature before timestamp).
        self.mav = mavlink.MAVLink(_DatagramWriter(self), srcSystem=sysid,
                                   srcComponent=AUTOPILOT_COMPONENT_ID)
        self._rx = mavlink.MAVLink(None, srcSystem=sysid, srcComponent=AUTOPILOT_COMPONENT_ID)
        self._rx.robust_parsing = True
        self.signing = VehicleSigning(self.mav, sysid, settings.key_file,
                                      on_event=lambda event, **details: self._event(
                                          event, **details))
        self._uploads: dict[int, _Upload] = {}
        self._statustext_id = 0       # the last id of a chunked STATUSTEXT
        self._last_upload_ack: dict[int, tuple[int, int]] = {}
        self._geo_items: dict[int, list[MissionItem]] = {
            mavlink.MAV_MISSION_TYPE_FENCE: [], mavlink.MAV_MISSION_TYPE_RALLY: []}
        self._streams = self._default_streams()
        self._message_senders: dict[int, Callable[[], None]] = {
            mavlink.MAVLINK_MSG_ID_HEARTBEAT: self.send_heartbeat,
            mavlink.MAVLINK_MSG_ID_SYS_STATUS: self._send_sys_status,
            mavlink.MAVLINK_MSG_ID_BATTERY_STATUS: self._send_battery_status,
            mavlink.MAVLINK_MSG_ID_GLOBAL_POSITION_INT: self._send_global_position,
            mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED: self._send_local_position,
            mavlink.MAVLINK_MSG_ID_ATTITUDE: self._send_attitude,
            mavlink.MAVLINK_MSG_ID_GPS_RAW_INT: self._send_gps_raw,
            mavlink.MAVLINK_MSG_ID_EXTENDED_SYS_STATE: self._send_extended_sys_state,
            mavlink.MAVLINK_MSG_ID_MISSION_CURRENT: self._send_mission_current,
            mavlink.MAVLINK_MSG_ID_HOME_POSITION: self._send_home_position,
            mavlink.MAVLINK_MSG_ID_AUTOPILOT_VERSION: self._send_autopilot_version,
        }
        self._handlers: dict[str, Callable] = {
            'HEARTBEAT': self._on_client_heartbeat,
            'COMMAND_LONG': self._on_command,
            'COMMAND_INT': self._on_command,
            'PARAM_REQUEST_LIST': self._on_param_request_list,
            'PARAM_REQUEST_READ': self._on_param_request_read,
            'PARAM_SET': self._on_param_set,
            'MISSION_COUNT': self._on_mission_count,
            'MISSION_ITEM_INT': self._on_mission_item,
            'MISSION_ITEM': self._on_mission_item,
            'MISSION_REQUEST_LIST': self._on_mission_request_list,
            'MISSION_REQUEST_INT': self._on_mission_request,
            'MISSION_REQUEST': self._on_mission_request,
            'MISSION_CLEAR_ALL': self._on_mission_clear_all,
            'MISSION_SET_CURRENT': self._on_mission_set_current,
            'SET_POSITION_TARGET_LOCAL_NED': self._on_set_position_target_local_ned,
            'SET_MODE': self._on_set_mode_message,
            'TIMESYNC': self._on_timesync,
            'SETUP_SIGNING': lambda msg: self.signing.on_setup_signing(msg, controller.armed),
        }
        self._commands: dict[int, Callable[[_Command], object]] = {
            mavlink.MAV_CMD_COMPONENT_ARM_DISARM: self._cmd_arm_disarm,
            mavlink.MAV_CMD_NAV_TAKEOFF: self._cmd_takeoff,
            mavlink.MAV_CMD_NAV_LAND: lambda cmd: self.controller.land(),
            mavlink.MAV_CMD_NAV_RETURN_TO_LAUNCH: lambda cmd: self.controller.return_to_launch(),
            mavlink.MAV_CMD_DO_SET_MODE: self._cmd_set_mode,
            mavlink.MAV_CMD_DO_REPOSITION: self._cmd_reposition,
            mavlink.MAV_CMD_DO_CHANGE_SPEED: lambda cmd: self.controller.change_speed(
                cmd.param(1), cmd.param(2)),
            mavlink.MAV_CMD_DO_SET_HOME: self._cmd_set_home,
            mavlink.MAV_CMD_MISSION_START: self._cmd_mission_start,
            mavlink.MAV_CMD_DO_SET_MISSION_CURRENT: self._cmd_set_mission_current,
            mavlink.MAV_CMD_DO_PAUSE_CONTINUE: self._cmd_pause_continue,
            mavlink.MAV_CMD_REQUEST_MESSAGE: self._cmd_request_message,
            mavlink.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES: lambda cmd: (
                CommandResult.ACCEPTED, self._send_autopilot_version),
            mavlink.MAV_CMD_SET_MESSAGE_INTERVAL: self._cmd_set_message_interval,
            mavlink.MAV_CMD_GET_MESSAGE_INTERVAL: self._cmd_get_message_interval,
        }
        controller.listener = self

    # ----------------------------------------------------------------- transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._started_wall_s = self._wall_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def error_received(self, exc: Exception) -> None:
        # ICMP port-unreachable while no client listens yet: expected, keep going.
        _log.debug('vehicle %d: send error %s', self.sysid, exc)

    def send_datagram(self, data: bytes) -> None:
        """Send raw bytes to the current peer."""
        if self.transport is None or self.transport.is_closing():
            return
        try:
            self.transport.sendto(data, self.peer)
            self.tx_datagrams += 1
        except OSError as exc:
            _log.debug('vehicle %d: sendto failed: %s', self.sysid, exc)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if not self.partner_latched and not self._latch_partner(addr):
            return
        for msg in self._parse(data):
            if not self.signing.accept(msg):
                self.rx_rejected += 1
                continue
            self.rx_messages += 1
            handler = self._handlers.get(msg.get_type())
            if handler is None or not self._addressed_to_me(msg):
                continue
            try:
                handler(msg)
            except Exception:  # noqa: BLE001 - a bad message must never stop the sim
                self.rx_errors += 1
                _log.exception('vehicle %d: error handling %s', self.sysid, msg.get_type())

    def _latch_partner(self, addr: tuple[str, int]) -> bool:
        """PX4's partner rule: take ``addr`` as the partner now if the configured one is on
        localhost or PARTNER_LATCH_AFTER_S have passed since the start; False: not yet (the
        datagram is dropped). A later sender never takes the telemetry over (it is heard,
        as by PX4, and answered only through the partner)."""
        started_s = self._started_wall_s
        waited_s = 0.0 if started_s is None else self._wall_clock() - started_s
        if self.peer[0] not in _LOCALHOST and waited_s <= PARTNER_LATCH_AFTER_S:
            return False
        self.peer = addr
        self.partner_latched = True
        _log.info('vehicle %d: partner %s:%d', self.sysid, addr[0], addr[1])
        return True

    def _parse(self, data: bytes) -> list:
        # Each datagram is parsed on its own: a truncated frame must not swallow the next one.
        mav = self._rx
        mav.buf = bytearray()
        mav.buf_index = 0
        mav.expected_length = mavlink.HEADER_LEN_V1 + 2
        try:
            messages = mav.parse_buffer(data) or []
        except Exception as exc:  # noqa: BLE001 - pymavlink raises on some garbage
            self.rx_errors += 1
            _log.debug('vehicle %d: unparsable datagram (%s)', self.sysid, exc)
            return []
        good = []
        for msg in messages:
            if msg.get_type() == 'BAD_DATA':
                self.rx_errors += 1
            else:
                good.append(msg)
        return good

    def _addressed_to_me(self, msg) -> bool:
        target_system = getattr(msg, 'target_system', 0)
        target_component = getattr(msg, 'target_component', 0)
        return target_system in (0, self.sysid) and target_component in (
            mavlink.MAV_COMP_ID_ALL, AUTOPILOT_COMPONENT_ID)

    # ----------------------------------------------------------------- periodic output

    def _default_streams(self) -> dict[int, _Stream]:
        position_interval_s = 1.0 / self.settings.position_rate_hz
        intervals = {
            mavlink.MAVLINK_MSG_ID_HEARTBEAT: 1.0 / self.settings.heartbeat_rate_hz,
            mavlink.MAVLINK_MSG_ID_SYS_STATUS: 1.0,
            mavlink.MAVLINK_MSG_ID_BATTERY_STATUS: 1.0,
            mavlink.MAVLINK_MSG_ID_GLOBAL_POSITION_INT: position_interval_s,
            mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED: position_interval_s,
            mavlink.MAVLINK_MSG_ID_ATTITUDE: position_interval_s,
            mavlink.MAVLINK_MSG_ID_GPS_RAW_INT: max(position_interval_s, 0.2),
            mavlink.MAVLINK_MSG_ID_EXTENDED_SYS_STATE: 0.5,
            mavlink.MAVLINK_MSG_ID_MISSION_CURRENT: 0.5,
            mavlink.MAVLINK_MSG_ID_HOME_POSITION: 5.0,
        }
        now = self._wall_clock()
        return {msg_id: _Stream(interval, interval, now) for msg_id, interval in intervals.items()}

    def service(self, wall_s: float) -> None:
        """Send due telemetry and re-request overdue mission items."""
        for msg_id, stream in self._streams.items():
            if stream.interval_s <= 0.0 or wall_s < stream.next_due_s:
                continue
            self._message_senders[msg_id]()
            stream.next_due_s += stream.interval_s
            if stream.next_due_s <= wall_s:
                stream.next_due_s = wall_s + stream.interval_s
        for mission_type, upload in list(self._uploads.items()):
            if wall_s - upload.last_request_wall_s < MISSION_ITEM_TIMEOUT_S:
                continue
            if upload.retries >= MISSION_MAX_RETRIES:
                del self._uploads[mission_type]
                self._send_mission_ack(upload.partner, mavlink.MAV_MISSION_OPERATION_CANCELLED,
                                       mission_type)
                self._event('mission_upload_timeout', seq=upload.next_seq)
                continue
            upload.retries += 1
            self._request_item(upload, wall_s)

    # ----------------------------------------------------------------- FlightListener

    def on_state_changed(self) -> None:
        self.send_heartbeat()
        self._send_extended_sys_state()

    def on_mission_changed(self) -> None:
        self._send_mission_current()

    def on_mission_item_reached(self, seq: int) -> None:
        self.mav.mission_item_reached_send(seq)

    def on_status_text(self, severity: int, text: str) -> None:
        """STATUSTEXT as PX4 sends it: a text of up to 50 characters in one message (id 0); a
        longer one in 50-character chunks sharing a non-zero id, the last one shorter than 50
        (an empty one if the text fills its chunks exactly), as MAVLink 2 chunking has it."""
        data = text.encode('ascii', 'replace')
        if len(data) <= STATUSTEXT_CHUNK_BYTES:
            self.mav.statustext_send(severity, data)
            return
        self._statustext_id = self._statustext_id % 0xFFFF + 1
        chunks = [data[i:i + STATUSTEXT_CHUNK_BYTES]
                  for i in range(0, len(data), STATUSTEXT_CHUNK_BYTES)]
        if len(chunks[-1]) == STATUSTEXT_CHUNK_BYTES:
            chunks.append(b'')
        for seq, chunk in enumerate(chunks):
            self.mav.statustext_send(severity, chunk, self._statustext_id, seq)

    def on_home_changed(self) -> None:
        self._send_home_position()

    # ----------------------------------------------------------------- telemetry senders

    def _time_boot_ms(self) -> int:
        return int(self._sim_clock() * 1000.0) & 0xFFFFFFFF

    def _time_usec(self) -> int:
        return int(self._sim_clock() * 1e6)

    def send_heartbeat(self) -> None:
        """HEARTBEAT as a PX4 quadrotor: custom mode, armed flag, system status (STANDBY
        disarmed; armed ACTIVE, or CRITICAL while a failsafe acts)."""
        ctl = self.controller
        main_mode, sub_mode = MODE_TO_PX4[ctl.mode]
        base_mode = mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED
        if ctl.mode == FlightMode.OFFBOARD:
            base_mode |= (mavlink.MAV_MODE_FLAG_GUIDED_ENABLED
                          | mavlink.MAV_MODE_FLAG_STABILIZE_ENABLED)
        else:
            base_mode |= (mavlink.MAV_MODE_FLAG_AUTO_ENABLED | mavlink.MAV_MODE_FLAG_GUIDED_ENABLED
                          | mavlink.MAV_MODE_FLAG_STABILIZE_ENABLED)
        if ctl.armed:
            base_mode |= mavlink.MAV_MODE_FLAG_SAFETY_ARMED
        # As PX4 (mavlink HEARTBEAT stream): armed, CRITICAL while a failsafe acts.
        if not ctl.armed:
            state = mavlink.MAV_STATE_STANDBY
        else:
            state = mavlink.MAV_STATE_CRITICAL if ctl.failsafe else mavlink.MAV_STATE_ACTIVE
        custom_mode = (main_mode << 16) | (sub_mode << 24)
        self.mav.heartbeat_send(mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_PX4, base_mode,
                                custom_mode, state)

    def _health_bits(self) -> int:
        ctl = self.controller
        health = SENSORS
        if not ctl.gps_ok:
            health &= ~(mavlink.MAV_SYS_STATUS_SENSOR_GPS | mavlink.MAV_SYS_STATUS_PREARM_CHECK)
        if ctl.battery.remaining < ctl.params['BAT_LOW_THR']:
            health &= ~mavlink.MAV_SYS_STATUS_PREARM_CHECK
        if ctl.battery.remaining < ctl.params['BAT_CRIT_THR']:
            health &= ~mavlink.MAV_SYS_STATUS_SENSOR_BATTERY
        return health

    def _send_sys_status(self) -> None:
        battery = self.controller.battery
        self.mav.sys_status_send(
            SENSORS, SENSORS, self._health_bits(), 100,
            min(int(battery.voltage_v * 1000.0), UINT16_MAX - 1),
            min(int(battery.current_a * 100.0), 32767),
            int(round(battery.remaining * 100.0)), 0, 0, 0, 0, 0, 0)

    def _send_battery_status(self) -> None:
        ctl = self.controller
        battery = ctl.battery
        cell_mv = min(int(battery.voltage_v / battery.cells * 1000.0), UINT16_MAX - 1)
        voltages = [cell_mv] * min(battery.cells, 10) + [UINT16_MAX] * (10 - min(battery.cells,
                                                                              10))
        nominal_v = battery.cells * 3.7
        consumed_mah = int(battery.consumed_wh / nominal_v * 1000.0)
        energy_hj = int(battery.consumed_wh * 36.0)
        remaining = battery.remaining
        if remaining < ctl.params['BAT_EMERGEN_THR']:
            charge_state = mavlink.MAV_BATTERY_CHARGE_STATE_EMERGENCY
        elif remaining < ctl.params['BAT_CRIT_THR']:
            charge_state = mavlink.MAV_BATTERY_CHARGE_STATE_CRITICAL
        elif remaining < ctl.params['BAT_LOW_THR']:
            charge_state = mavlink.MAV_BATTERY_CHARGE_STATE_LOW
        else:
            charge_state = mavlink.MAV_BATTERY_CHARGE_STATE_OK
        time_remaining_s = battery.time_remaining_s
        time_remaining = 0 if not math.isfinite(time_remaining_s) else min(
            int(time_remaining_s), INT32_MAX)
        self.mav.battery_status_send(
            0, mavlink.MAV_BATTERY_FUNCTION_ALL, mavlink.MAV_BATTERY_TYPE_LIPO, 2500, voltages,
            min(int(battery.current_a * 100.0), 32767), consumed_mah, energy_hj,
            int(round(remaining * 100.0)), time_remaining, charge_state)

    def _send_global_position(self) -> None:
        ctl = self.controller
        lat_deg, lon_deg, alt_amsl_m = ctl.geodetic
        home_alt_m = ctl.home_geodetic[2]
        ve, vn, vu = ctl.velocity_enu_m_s
        heading_cdeg = int(round(math.degrees(yaw_enu_to_ned(ctl.yaw_rad)) * 100.0)) % 36000
        self.mav.global_position_int_send(
            self._time_boot_ms(), int(round(lat_deg * 1e7)), int(round(lon_deg * 1e7)),
            int(round(alt_amsl_m * 1000.0)), int(round((alt_amsl_m - home_alt_m) * 1000.0)),
            _clamp_int16(vn * 100.0), _clamp_int16(ve * 100.0), _clamp_int16(-vu * 100.0),
            heading_cdeg)

    def _local_ned(self) -> tuple[float, float, float]:
        ctl = self.controller
        rel = np.asarray(ctl.position_enu_m) - ctl.local_origin_enu_m
        return float(rel[1]), float(rel[0]), float(-rel[2])

    def _send_local_position(self) -> None:
        north_m, east_m, down_m = self._local_ned()
        ve, vn, vu = self.controller.velocity_enu_m_s
        self.mav.local_position_ned_send(self._time_boot_ms(), north_m, east_m, down_m,
                                         vn, ve, -vu)

    def _send_attitude(self) -> None:
        yaw_ned_rad = yaw_enu_to_ned(self.controller.yaw_rad)
        self.mav.attitude_send(self._time_boot_ms(), 0.0, 0.0, yaw_ned_rad, 0.0, 0.0, 0.0)

    def _send_gps_raw(self) -> None:
        ctl = self.controller
        lat_deg, lon_deg, alt_amsl_m = ctl.geodetic
        ve, vn, _ = ctl.velocity_enu_m_s
        course_cdeg = int(round(math.degrees(math.atan2(ve, vn)) * 100.0)) % 36000
        fix = mavlink.GPS_FIX_TYPE_3D_FIX if ctl.gps_ok else mavlink.GPS_FIX_TYPE_NO_FIX
        self.mav.gps_raw_int_send(
            self._time_usec(), fix, int(round(lat_deg * 1e7)), int(round(lon_deg * 1e7)),
            int(round(alt_amsl_m * 1000.0)), 80, 120,
            min(int(math.hypot(ve, vn) * 100.0), UINT16_MAX - 1), course_cdeg,
            12 if ctl.gps_ok else 0, int(round(alt_amsl_m * 1000.0)), 500, 800, 100, 0)

    def _send_extended_sys_state(self) -> None:
        self.mav.extended_sys_state_send(mavlink.MAV_VTOL_STATE_UNDEFINED,
                                         int(self.controller.landed_state))

    def _send_mission_current(self) -> None:
        ctl = self.controller
        total = len(ctl.mission)
        seq = min(ctl.mission_current, max(total - 1, 0))
        mission_mode = 1 if ctl.mode == FlightMode.MISSION else 2
        self.mav.mission_current_send(seq, total, ctl.mission_state, mission_mode)

    def _send_home_position(self) -> None:
        ctl = self.controller
        lat_deg, lon_deg, alt_amsl_m = ctl.home_geodetic
        rel = ctl.home_enu_m - ctl.local_origin_enu_m
        self.mav.home_position_send(
            int(round(lat_deg * 1e7)), int(round(lon_deg * 1e7)), int(round(alt_amsl_m * 1000.0)),
            float(rel[1]), float(rel[0]), float(-rel[2]), [1.0, 0.0, 0.0, 0.0], 0.0, 0.0, 0.0,
            self._time_usec())

    def _send_autopilot_version(self) -> None:
        uid = 0x53494D0000000000 | (self.sysid & 0xFFFF)
        self.mav.autopilot_version_send(CAPABILITIES, FLIGHT_SW_VERSION, 0, 0, 0,
                                        [0] * 8, [0] * 8, [0] * 8, 0, 0, uid)

    # ----------------------------------------------------------------- commands

    def _on_command(self, msg) -> None:
        cmd = _Command.from_message(msg)
        handler = self._commands.get(cmd.command)
        after: Callable[[], None] | None = None
        if handler is None:
            result = CommandResult.UNSUPPORTED
        else:
            try:
                outcome = handler(cmd)
            except Exception:  # noqa: BLE001 - report, never crash
                _log.exception('vehicle %d: command %d failed', self.sysid, cmd.command)
                outcome = CommandResult.FAILED
            if isinstance(outcome, tuple):
                result, after = outcome
            else:
                result = outcome
        self.mav.command_ack_send(cmd.command, int(result), 0, 0, cmd.source[0], cmd.source[1])
        if after is not None:
            try:
                after()
            except Exception:  # noqa: BLE001 - the ACK is out; report and carry on
                _log.exception('vehicle %d: reply to command %d failed', self.sysid, cmd.command)

    def _cmd_arm_disarm(self, cmd: _Command) -> CommandResult:
        force = cmd.param(2) == FORCE_ARM_MAGIC
        if cmd.param(1) >= 0.5:
            return self.controller.arm(force=force)
        return self.controller.disarm(force=force)

    def _cmd_takeoff(self, cmd: _Command) -> CommandResult:
        alt_m = cmd.param(7)
        if cmd.is_int and cmd.frame in RELATIVE_ALT_FRAMES and math.isfinite(alt_m):
            alt_m += self.controller.home_geodetic[2]
        return self.controller.takeoff(alt_m)

    def _cmd_set_mode(self, cmd: _Command) -> CommandResult:
        base_mode, main_mode, sub_mode = cmd.int_param(1), cmd.int_param(2), cmd.int_param(3)
        if base_mode is None or not base_mode & mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED:
            return CommandResult.UNSUPPORTED
        if main_mode is None:
            return CommandResult.DENIED
        return self._set_px4_mode(main_mode, sub_mode or 0)

    def _set_px4_mode(self, main_mode: int, sub_mode: int) -> CommandResult:
        if main_mode != PX4_MAIN_MODE_AUTO:
            sub_mode = 0
        mode = PX4_TO_MODE.get((main_mode, sub_mode))
        if mode is None:
            if main_mode in range(1, 9):
                # Manual modes need an RC link, which the sim does not have.
                self.on_status_text(mavlink.MAV_SEVERITY_CRITICAL, 'Mode denied: no RC')
                return CommandResult.DENIED
            return CommandResult.UNSUPPORTED
        return self.controller.set_mode(mode, self._wall_clock())

    def _on_set_mode_message(self, msg) -> None:
        if msg.target_system != self.sysid:
            return
        custom_mode = int(msg.custom_mode)
        self._set_px4_mode((custom_mode >> 16) & 0xFF, (custom_mode >> 24) & 0xFF)

    def _cmd_reposition(self, cmd: _Command) -> CommandResult:
        alt_m = cmd.param(7)
        if cmd.is_int and cmd.frame in RELATIVE_ALT_FRAMES and math.isfinite(alt_m):
            alt_m += self.controller.home_geodetic[2]
        return self.controller.reposition(cmd.param(5), cmd.param(6), alt_m,
                                          speed_m_s=cmd.param(1), yaw_ned_rad=cmd.param(4))

    def _cmd_set_home(self, cmd: _Command) -> CommandResult:
        return self.controller.set_home(cmd.param(1) >= 0.5, cmd.param(5), cmd.param(6),
                                        cmd.param(7))

    def _cmd_mission_start(self, cmd: _Command) -> CommandResult:
        first = cmd.int_param(1)
        if first is not None and first > 0 and not self.controller.set_mission_current(first):
            return CommandResult.DENIED
        return self.controller.set_mode(FlightMode.MISSION, self._wall_clock())

    def _cmd_set_mission_current(self, cmd: _Command) -> CommandResult:
        seq = cmd.int_param(1)
        if seq is None or not self.controller.set_mission_current(seq):
            return CommandResult.DENIED
        return CommandResult.ACCEPTED

    def _cmd_pause_continue(self, cmd: _Command) -> CommandResult:
        if cmd.param(1) < 0.5:
            return self.controller.set_mode(FlightMode.HOLD, self._wall_clock())
        return self.controller.set_mode(FlightMode.MISSION, self._wall_clock())

    def _cmd_request_message(self, cmd: _Command):
        sender = self._message_senders.get(cmd.int_param(1))
        if sender is None:
            return CommandResult.UNSUPPORTED
        return CommandResult.ACCEPTED, sender

    def _cmd_set_message_interval(self, cmd: _Command) -> CommandResult:
        stream = self._streams.get(cmd.int_param(1))
        if stream is None:
            return CommandResult.UNSUPPORTED
        interval_us = cmd.param(2)
        if not math.isfinite(interval_us):
            return CommandResult.DENIED
        if interval_us == 0:
            stream.interval_s = stream.default_interval_s
        elif interval_us < 0:
            stream.interval_s = 0.0
        else:
            stream.interval_s = min(max(interval_us * 1e-6, 0.005), MAX_STREAM_INTERVAL_S)
        stream.next_due_s = self._wall_clock()
        return CommandResult.ACCEPTED

    def _cmd_get_message_interval(self, cmd: _Command):
        msg_id = cmd.int_param(1)
        stream = self._streams.get(msg_id)
        if stream is None:
            return CommandResult.UNSUPPORTED
        interval_us = -1 if stream.interval_s <= 0 else int(stream.interval_s * 1e6)
        return CommandResult.ACCEPTED, lambda: self.mav.message_interval_send(msg_id,
                                                                              interval_us)

    def _on_client_heartbeat(self, msg) -> None:
        """The client is there (a stopping simulator holds for a connected client)."""
        self.client_heartbeat_wall_s = self._wall_clock()

    def _on_timesync(self, msg) -> None:
        if msg.tc1 == 0:
            self.mav.timesync_send(time.monotonic_ns(), msg.ts1)

    def _on_set_position_target_local_ned(self, msg) -> None:
        ctl = self.controller
        mask = int(msg.type_mask)
        frame = int(msg.coordinate_frame)
        position = velocity = None
        if frame == mavlink.MAV_FRAME_LOCAL_NED and not mask & _POSITION_IGNORE:
            position = ctl.local_origin_enu_m + np.array([msg.y, msg.x, -msg.z], dtype=float)
        elif not mask & _VELOCITY_IGNORE:
            if frame == mavlink.MAV_FRAME_BODY_NED:
                yaw_ned = float(yaw_enu_to_ned(ctl.yaw_rad))
                north = msg.vx * math.cos(yaw_ned) - msg.vy * math.sin(yaw_ned)
                east = msg.vx * math.sin(yaw_ned) + msg.vy * math.cos(yaw_ned)
                velocity = np.array([east, north, -msg.vz], dtype=float)
            else:
                velocity = np.array([msg.vy, msg.vx, -msg.vz], dtype=float)
        else:
            return
        vector = position if position is not None else velocity
        if not np.all(np.isfinite(vector)) or np.max(np.abs(vector)) > MAX_LOCAL_SETPOINT:
            return
        yaw_enu = None
        if not mask & mavlink.POSITION_TARGET_TYPEMASK_YAW_IGNORE and math.isfinite(msg.yaw):
            yaw_enu = math.pi / 2.0 - float(msg.yaw)
        ctl.offboard_setpoint(self._wall_clock(), position, velocity, yaw_enu)

    # ----------------------------------------------------------------- parameters

    def _send_param(self, index: int) -> None:
        """PARAM_VALUE as PX4 sends it: REAL32, or INT32 (:data:`INTEGER_PARAMS`, e.g.
        GF_ACTION) with the integer's bytes in the float field (PX4's bytewise encoding,
        MAV_PROTOCOL_CAPABILITY_PARAM_ENCODE_BYTEWISE), which MAVSDK reads with
        get_param_int."""
        params = self.controller.params
        name = params.names[index]
        value, param_type = params[name], mavlink.MAV_PARAM_TYPE_REAL32
        if name in INTEGER_PARAMS:
            value, param_type = _int32_bytes_as_float(int(value)), mavlink.MAV_PARAM_TYPE_INT32
        self.mav.param_value_send(name.encode('ascii'), value, param_type, len(params), index)

    def _on_param_request_list(self, msg) -> None:
        for index in range(len(self.controller.params)):
            self._send_param(index)

    def _on_param_request_read(self, msg) -> None:
        params = self.controller.params
        if 0 <= msg.param_index < len(params):
            self._send_param(msg.param_index)
        elif msg.param_id in params:
            self._send_param(params.names.index(msg.param_id))

    def _on_param_set(self, msg) -> None:
        params = self.controller.params
        name = msg.param_id
        if name not in params:
            return
        integer = name in INTEGER_PARAMS
        if (msg.param_type == mavlink.MAV_PARAM_TYPE_INT32) != integer:
            # PX4 keeps a parameter whose type the client got wrong; the echo tells it
            self._event('param_set_refused', param=name, param_type=int(msg.param_type))
            self._send_param(params.names.index(name))
            return
        value = float(_float_bytes_as_int32(msg.param_value) if integer else msg.param_value)
        if params.set(name, value):
            self._event('param_set', param=name, value=value)
        # Echo the (possibly unchanged) value: the client compares it with what it set.
        self._send_param(params.names.index(name))

    # ----------------------------------------------------------------- mission protocol

    def _send_mission_ack(self, partner: tuple[int, int], result: int, mission_type: int) -> None:
        self.mav.mission_ack_send(partner[0], partner[1], result, mission_type)

    def _request_item(self, upload: _Upload, wall_s: float) -> None:
        upload.last_request_wall_s = wall_s
        self.mav.mission_request_int_send(upload.partner[0], upload.partner[1], upload.next_seq,
                                          upload.mission_type)

    def _on_mission_count(self, msg) -> None:
        partner = (msg.get_srcSystem(), msg.get_srcComponent())
        mission_type = int(getattr(msg, 'mission_type', 0))
        if mission_type not in (mavlink.MAV_MISSION_TYPE_MISSION, mavlink.MAV_MISSION_TYPE_FENCE,
                                mavlink.MAV_MISSION_TYPE_RALLY):
            self._send_mission_ack(partner, mavlink.MAV_MISSION_UNSUPPORTED, mission_type)
            return
        count = int(msg.count)
        if count > MAX_MISSION_ITEMS:
            self._send_mission_ack(partner, mavlink.MAV_MISSION_NO_SPACE, mission_type)
            return
        self._last_upload_ack.pop(mission_type, None)
        if count == 0:
            self._uploads.pop(mission_type, None)
            self._store_mission(mission_type, [])
            self._send_mission_ack(partner, mavlink.MAV_MISSION_ACCEPTED, mission_type)
            return
        upload = _Upload(mission_type, count, partner)
        self._uploads[mission_type] = upload
        self._request_item(upload, self._wall_clock())

    def _on_mission_item(self, msg) -> None:
        item = MissionItem.from_message(msg)
        partner = (msg.get_srcSystem(), msg.get_srcComponent())
        upload = self._uploads.get(item.mission_type)
        if upload is None:
            # Our final ACK was lost and the client resent its last item: ACK again.
            last = self._last_upload_ack.get(item.mission_type)
            if last is not None and item.seq == last[0] - 1:
                self._send_mission_ack(partner, last[1], item.mission_type)
            return
        if item.seq != upload.next_seq:
            # Duplicate or out of order: ask again for the one we need.
            self._request_item(upload, self._wall_clock())
            return
        result = validate_item(item)
        if result != mavlink.MAV_MISSION_ACCEPTED:
            self._reject_upload(upload, partner, result, item.seq, item.command)
            return
        if item.mission_type == mavlink.MAV_MISSION_TYPE_FENCE:
            problem = fence_item_problem(item)
            if problem is not None:
                self._reject_fence(upload, partner, problem, item.command)
                return
        upload.items.append(item)
        upload.retries = 0
        if upload.next_seq < upload.count:
            self._request_item(upload, self._wall_clock())
            return
        fence = None
        if item.mission_type == mavlink.MAV_MISSION_TYPE_FENCE:
            # What no single item shows (a polygon's vertices against its count) is checked
            # here, before the final ACK: a refused fence leaves the previous one in force.
            try:
                fence = build_fence(upload.items, self.controller.origin)
            except FenceError as problem:
                self._reject_fence(upload, partner, problem)
                return
        del self._uploads[item.mission_type]
        self._last_upload_ack[item.mission_type] = (upload.count, mavlink.MAV_MISSION_ACCEPTED)
        self._send_mission_ack(partner, mavlink.MAV_MISSION_ACCEPTED, item.mission_type)
        self._store_mission(item.mission_type, upload.items, fence)

    def _reject_upload(self, upload: _Upload, partner: tuple[int, int], result: int,
                       seq: int | None, command: int | None, **details) -> None:
        """End an upload with an error MISSION_ACK (repeated if the client resends its last
        item); whatever was stored before stays."""
        del self._uploads[upload.mission_type]
        self._last_upload_ack[upload.mission_type] = (upload.count, result)
        self._send_mission_ack(partner, result, upload.mission_type)
        self._event('mission_rejected', seq=seq, command=command,
                    result=mission_result_name(result), **details)

    def _reject_fence(self, upload: _Upload, partner: tuple[int, int], problem: FenceError,
                      command: int | None = None) -> None:
        """A malformed geofence: the MAV_MISSION_* error, the reason in a critical STATUSTEXT
        (the sim's wording) and in the event log."""
        if command is None and problem.seq is not None and problem.seq < len(upload.items):
            command = upload.items[problem.seq].command     # stored in order: seq == index
        self.on_status_text(mavlink.MAV_SEVERITY_CRITICAL, f'Geofence rejected: {problem}')
        self._reject_upload(upload, partner, problem.result, problem.seq, command,
                            mission_type=upload.mission_type, reason=str(problem))

    def _store_mission(self, mission_type: int, items: list[MissionItem],
                       fence: Fence | None = None) -> None:
        """Keep an accepted upload (or an empty list: cleared); a FENCE upload also goes to the
        controller as a :class:`~fl_uav.autopilot_sim.fence.Fence` (``fence``: already built
        from ``items``)."""
        if mission_type == mavlink.MAV_MISSION_TYPE_MISSION:
            self.controller.set_mission(items)
            return
        self._geo_items[mission_type] = list(items)
        if mission_type == mavlink.MAV_MISSION_TYPE_FENCE:
            if fence is None:
                fence = build_fence(items, self.controller.origin)
            self.controller.set_fence(fence)

    def _items_of(self, mission_type: int) -> list[MissionItem]:
        if mission_type == mavlink.MAV_MISSION_TYPE_MISSION:
            return self.controller.mission
        return self._geo_items.get(mission_type, [])

    def _on_mission_request_list(self, msg) -> None:
        mission_type = int(getattr(msg, 'mission_type', 0))
        self.mav.mission_count_send(msg.get_srcSystem(), msg.get_srcComponent(),
                                    len(self._items_of(mission_type)), mission_type)

    def _on_mission_request(self, msg) -> None:
        mission_type = int(getattr(msg, 'mission_type', 0))
        items = self._items_of(mission_type)
        partner = (msg.get_srcSystem(), msg.get_srcComponent())
        if not 0 <= msg.seq < len(items):
            self._send_mission_ack(partner, mavlink.MAV_MISSION_INVALID_SEQUENCE, mission_type)
            return
        item = items[msg.seq]
        current = 1 if (mission_type == mavlink.MAV_MISSION_TYPE_MISSION
                        and msg.seq == self.controller.mission_current) else 0
        if msg.get_type() == 'MISSION_REQUEST_INT':
            self.mav.mission_item_int_send(
                partner[0], partner[1], item.seq, item.frame, item.command, current,
                item.autocontinue, item.param1, item.param2, item.param3, item.param4, item.x,
                item.y, item.z, mission_type)
        else:
            self.mav.mission_item_send(
                partner[0], partner[1], item.seq, item.frame, item.command, current,
                item.autocontinue, item.param1, item.param2, item.param3, item.param4,
                item.lat_deg, item.lon_deg, item.z, mission_type)

    def _on_mission_clear_all(self, msg) -> None:
        mission_type = int(getattr(msg, 'mission_type', 0))
        partner = (msg.get_srcSystem(), msg.get_srcComponent())
        types = (list(self._geo_items) + [mavlink.MAV_MISSION_TYPE_MISSION]
                 if mission_type == mavlink.MAV_MISSION_TYPE_ALL else [mission_type])
        for each in types:
            self._uploads.pop(each, None)
            if each == mavlink.MAV_MISSION_TYPE_MISSION or each in self._geo_items:
                self._store_mission(each, [])
        self._send_mission_ack(partner, mavlink.MAV_MISSION_ACCEPTED, mission_type)

    def _on_mission_set_current(self, msg) -> None:
        if not self.controller.set_mission_current(int(msg.seq)):
            self.on_status_text(mavlink.MAV_SEVERITY_WARNING, 'Mission item out of range')

    def _event(self, event: str, /, **details) -> None:
        self.controller.record_event(event, **details)


def _int32_bytes_as_float(value: int) -> float:
    """An INT32 parameter as PX4 puts it in PARAM_VALUE's float field: its four bytes."""
    return struct.unpack('<f', struct.pack('<i', value))[0]


def _float_bytes_as_int32(value: float) -> int:
    """The INT32 parameter a bytewise-encoded PARAM_SET carries in its float field."""
    return struct.unpack('<i', struct.pack('<f', value))[0]


def _clamp_int16(value: float) -> int:
    return max(-32768, min(32767, int(round(value))))
