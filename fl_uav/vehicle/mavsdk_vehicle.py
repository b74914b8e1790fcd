"""The Vehicle protocol on MAVSDK 4.x (native binding, ``mavsdk.asyncio``).

One :class:`MavsdkVehicle` owns one ``Mavsdk`` instance and one autopilot. Telemetry streams run
as background tasks for the vehicle's lifetime and fill a cache; every wait is a predicate on
that cache with a time-out (MAVSDK getters only return the last cached value, and armed state and
flight mode come from HEARTBEAT, so a single poll right after a command would be stale).

A lost link (MAVSDK: no HEARTBEAT for 3 s) is logged once and counted in ``link_losses``; a
step waiting on the autopilot then fails at once with a VehicleError naming the lost link, and
commands fail until it is back. MAVSDK re-detects the same system when heartbeats return (also
after an autopilot reboot), re-requests its home position and the streams resume by themselves;
:meth:`MavsdkVehicle.connect` on a connected vehicle waits for the link, fresh health checks and
a home position received since the loss (a rebooted autopilot may have a new home).

What the autopilot says reaches the log: every STATUSTEXT (PX4's "Arming denied: ...",
"Failsafe activated", battery warnings) is logged with the vehicle URL at the level of its
MAVLink severity (:data:`STATUS_TEXT_LEVELS`), and every flight-mode change at INFO. A command
the autopilot refuses raises a VehicleError that quotes the autopilot's status texts of WARNING
or worse that arrived within :data:`STATUS_TEXT_RECENT_S` before the refusal, oldest first (PX4
sends the reason just before the COMMAND_ACK: for a refused arm the failed check's "Preflight
Fail: ..." and then a generic "Arming denied: Resolve system health failures first").

With a MAVLink signing key (``signing_key``) MAVSDK does not open ``url`` itself: a
:class:`~fl_uav.vehicle.mavlink_signing_relay.SigningRelay` owns the link, signs everything
MAVSDK sends and lets only frames signed with the key reach it (MAVSDK cannot sign); MAVSDK
talks to the relay over a ``raw://`` connection, in process.

All coroutines must run on one event loop (e.g. a :class:`~fl_uav.vehicle.runner.VehicleRunner`).
MAVSDK's asyncio wrapper sends every blocking call through the loop's default executor; the
first :meth:`MavsdkVehicle.connect` on a loop installs a larger one, because the default
(min(32, cores + 4) workers) makes several vehicles queue behind each other's slow calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import mavsdk
from mavsdk.asyncio import ComponentType, Configuration, Mavsdk, MavsdkError
from mavsdk.asyncio.plugins.action import ActionAsync
from mavsdk.asyncio.plugins.geofence import (
    Circle,
    FenceType,
    GeofenceAsync,
    GeofenceData,
    Point,
    Polygon,
)
from mavsdk.asyncio.plugins.mavlink_direct import MavlinkDirectAsync
from mavsdk.asyncio.plugins.mission import MissionAsync, MissionItem, MissionPlan
from mavsdk.asyncio.plugins.param import ParamAsync
from mavsdk.asyncio.plugins.telemetry import StatusTextType, TelemetryAsync

from fl_uav.vehicle.interface import (
    AutopilotFence,
    BatteryStatus,
    FenceCircle,
    FencePolygon,
    MissionProgress,
    PoseEnu,
    ProgressCallback,
    VehicleError,
    WaypointEnu,
)
from fl_uav.vehicle.mavlink_signing import KEY_BYTES
from fl_uav.vehicle.mavlink_signing_relay import MAVSDK_RAW_URL, SigningRelay, parse_link_url
from fl_uav.vehicle.runner import ensure_executor
from fl_uav.vehicle.streams import put_latest, subscribe
from fl_uav.world.geo import GeoOrigin, enu_to_geodetic, geodetic_to_enu, yaw_ned_to_enu

_log = logging.getLogger(__name__)
_mavsdk_log = logging.getLogger('mavsdk')
_mavsdk_log_forwarded = False

# Conservative vehicle speeds used only to size default time-outs.
_TIMEOUT_CLIMB_M_S = 1.0
_TIMEOUT_DESCENT_M_S = 0.5
_TIMEOUT_MARGIN_S = 30.0

#: A refused command quotes the autopilot's status texts (WARNING or worse) that arrived at most
#: this long before the refusal; older ones are about something else.
STATUS_TEXT_RECENT_S = 3.0
#: How long a refusal waits for the status text explaining it when none is there yet (MAVSDK
#: hands the COMMAND_ACK and the STATUSTEXT before it to Python on different threads).
STATUS_TEXT_GRACE_S = 0.3
#: Python logging level of each MAVLink STATUSTEXT severity. PX4 sends every operator message
#: ("Arming denied: ...", "Failsafe activated") as CRITICAL: ERROR here, so that FATAL stays
#: for ALERT and EMERGENCY ("Emergency battery level").
STATUS_TEXT_LEVELS = {
    StatusTextType.DEBUG: logging.DEBUG, StatusTextType.INFO: logging.INFO,
    StatusTextType.NOTICE: logging.INFO, StatusTextType.WARNING: logging.WARNING,
    StatusTextType.ERROR: logging.ERROR, StatusTextType.CRITICAL: logging.ERROR,
    StatusTextType.ALERT: logging.CRITICAL, StatusTextType.EMERGENCY: logging.CRITICAL}
_STATUS_TEXTS_KEPT = 16
#: MAVSDK repeats some lines many times a second (e.g. "Sending message failed" for every
#: message once the autopilot's port is gone): the same line is logged at most once per this
#: many seconds, with the number of repeats left out since.
MAVSDK_REPEAT_INTERVAL_S = 10.0


class RepeatCollapser:
    """Lets the first of a run of identical log lines through, then at most one per
    ``interval_s`` (with how many were left out since); thread-safe (MAVSDK logs from its
    own threads)."""

    def __init__(self, interval_s: float = MAVSDK_REPEAT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, max_lines: int = 256) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._max_lines = max_lines
        self._lines: dict[str, list] = {}     # line -> [last logged at, left out since]
        self._lock = threading.Lock()

    def admit(self, line: str) -> tuple[bool, int]:
        """(log it now?, how many identical lines were left out before it)."""
        now = self._clock()
        with self._lock:
            seen = self._lines.get(line)
            if seen is not None and now - seen[0] < self.interval_s:
                seen[1] += 1
                return False, 0
            skipped = seen[1] if seen is not None else 0
            if seen is None and len(self._lines) >= self._max_lines:
                self._lines = {k: v for k, v in self._lines.items()
                               if now - v[0] < self.interval_s}
            self._lines[line] = [now, 0]
            return True, skipped


_MAVSDK_LEVELS = {mavsdk.LogLevel.DEBUG: logging.DEBUG, mavsdk.LogLevel.INFO: logging.INFO,
                  mavsdk.LogLevel.WARN: logging.WARNING, mavsdk.LogLevel.ERROR: logging.ERROR}
_mavsdk_repeats = RepeatCollapser()


#: MAVSDK lines that say what we do on purpose, logged at DEBUG: the signing relay takes
#: MAVSDK's bytes before it adds its raw:// connection (SigningRelay.attach)
MAVSDK_EXPECTED_LINES = ('No raw connection available',)


def log_mavsdk_line(level, message: str, repeats: RepeatCollapser | None = None) -> None:
    """Log one MAVSDK line on the ``mavsdk`` logger, collapsing repeats (see
    :data:`MAVSDK_REPEAT_INTERVAL_S`)."""
    if message.startswith(MAVSDK_EXPECTED_LINES):
        _mavsdk_log.debug('%s', message)
        return
    admitted, skipped = (repeats or _mavsdk_repeats).admit(message)
    if not admitted:
        return
    if skipped:
        _mavsdk_log.log(_MAVSDK_LEVELS.get(level, logging.INFO),
                        '%s (repeated %d more times in between)', message, skipped)
    else:
        _mavsdk_log.log(_MAVSDK_LEVELS.get(level, logging.INFO), '%s', message)


def forward_mavsdk_log() -> None:
    """Send MAVSDK's own log lines (e.g. "sending again", "heartbeats timed out") to the
    ``mavsdk`` Python logger instead of stdout, a line repeated within
    :data:`MAVSDK_REPEAT_INTERVAL_S` once. Process-wide; done once."""
    global _mavsdk_log_forwarded
    if _mavsdk_log_forwarded:
        return

    def _forward(level, message: str, _file, _line) -> bool:
        log_mavsdk_line(level, message)
        return True

    mavsdk.log_subscribe(_forward)
    _mavsdk_log_forwarded = True


@dataclass(frozen=True)
class StatusText:
    """One STATUSTEXT from the autopilot: when it arrived (time.monotonic), its severity
    (a MAVSDK StatusTextType name, e.g. CRITICAL) and the text."""

    received_s: float
    severity: str
    text: str


#: MAVLink's MAV_STATE, by value (the HEARTBEAT's system_status), without the prefix.
MAV_STATE_NAMES = {0: 'UNINIT', 1: 'BOOT', 2: 'CALIBRATING', 3: 'STANDBY', 4: 'ACTIVE',
                   5: 'CRITICAL', 6: 'EMERGENCY', 7: 'POWEROFF', 8: 'FLIGHT_TERMINATION'}
#: The states PX4 reports while a failsafe acts (PX4 mavlink HEARTBEAT stream: armed with
#: vehicle_status.failsafe CRITICAL; EMERGENCY for an engine-failure landing;
#: FLIGHT_TERMINATION for termination or lockdown).
FAILSAFE_STATES = frozenset({'CRITICAL', 'EMERGENCY', 'FLIGHT_TERMINATION'})
MAV_COMP_ID_AUTOPILOT1 = 1


def failsafe_from_system_status(system_status: str) -> bool | None:
    """Whether a HEARTBEAT system_status (a :data:`MAV_STATE_NAMES` name) says PX4's
    failsafe acts; None for '' (no heartbeat heard)."""
    if not system_status:
        return None
    return system_status in FAILSAFE_STATES


def recent_status_texts(texts: Sequence[StatusText], now_s: float,
                        within_s: float = STATUS_TEXT_RECENT_S) -> list[StatusText]:
    """The status texts of WARNING or worse that arrived at most ``within_s`` before ``now_s``,
    oldest first, a repeated text once (its newest); empty if there is none."""
    recent: list[StatusText] = []
    for status in reversed(texts):
        if now_s - status.received_s > within_s:
            break
        if (StatusTextType[status.severity] >= StatusTextType.WARNING
                and all(status.text != kept.text for kept in recent)):
            recent.append(status)
    return recent[::-1]


class _Telemetry:
    """Latest telemetry of one vehicle plus a change signal for predicate waits."""

    def __init__(self) -> None:
        self.connected = False
        self.link_losses = 0
        self.health_ok = False
        self.home_geodetic: tuple[float, float, float] | None = None
        self.home_stale = False          # no home received since the last link loss
        self.geodetic: tuple[float, float, float, float] | None = None
        self.pose: PoseEnu | None = None
        self.yaw_enu_rad = math.nan
        self.armed: bool | None = None
        self.in_air: bool | None = None
        self.landed_state = ''
        self.flight_mode = ''
        self.system_status = ''          # the autopilot's HEARTBEAT MAV_STATE, e.g. 'ACTIVE'
        self.battery: BatteryStatus | None = None
        self.status_texts: deque[StatusText] = deque(maxlen=_STATUS_TEXTS_KEPT)
        self.changed = asyncio.Event()

    def notify(self) -> None:
        """Wake every waiter (each waiter re-checks its predicate)."""
        event, self.changed = self.changed, asyncio.Event()
        event.set()


class MavsdkVehicle:
    """A PX4 multirotor reached through MAVSDK at ``url`` (e.g. ``udpin://127.0.0.1:14540``).

    Positions are ENU metres relative to ``origin``. ``arrival_radius_m`` and
    ``altitude_tolerance_m`` decide when a go-to or take-off has arrived. Waits without an
    explicit ``timeout_s`` get one sized from the distance at conservative speeds.
    ``forward_log`` routes MAVSDK's log to Python logging (see :func:`forward_mavsdk_log`).
    ``signing_key`` (32 bytes): sign the link with it (MAVLink 2 signing, through a
    :class:`~fl_uav.vehicle.mavlink_signing_relay.SigningRelay`; ``url`` must be udpin://,
    udpout:// or serial://); None: MAVSDK on ``url`` directly, unsigned.
    """

    def __init__(self, url: str, origin: GeoOrigin, *, ground_station: bool = False,
                 arrival_radius_m: float = 1.0, altitude_tolerance_m: float = 0.5,
                 command_timeout_s: float = 10.0, forward_log: bool = True,
                 signing_key: bytes | None = None) -> None:
        if '://' not in url:
            raise ValueError(f'url must look like udpin://127.0.0.1:14540, got {url!r}')
        if signing_key is not None:
            if len(signing_key) != KEY_BYTES:
                raise ValueError(f'signing_key must have 32 bytes, got {len(signing_key)}')
            parse_link_url(url)        # ValueError now, not at connect
        if arrival_radius_m <= 0.0 or altitude_tolerance_m <= 0.0:
            raise ValueError('arrival_radius_m and altitude_tolerance_m must be > 0')
        self.url = url
        self.origin = origin
        self.arrival_radius_m = arrival_radius_m
        self.altitude_tolerance_m = altitude_tolerance_m
        self.command_timeout_s = command_timeout_s
        self.forward_log = forward_log
        self._signing_key = signing_key
        self._relay: SigningRelay | None = None
        self._component_type = (ComponentType.GROUND_STATION if ground_station
                                else ComponentType.COMPANION_COMPUTER)
        self._mavsdk: Mavsdk | None = None
        self._system = None
        self._action: ActionAsync | None = None
        self._telemetry: TelemetryAsync | None = None
        self._mission: MissionAsync | None = None
        self._geofence: GeofenceAsync | None = None
        self._direct: MavlinkDirectAsync | None = None
        self._t: _Telemetry | None = None
        self._tasks: list[asyncio.Task] = []
        self._reseed: asyncio.Task | None = None   # health from the getters after a loss
        self._pose_queues: set[asyncio.Queue] = set()
        self._battery_queues: set[asyncio.Queue] = set()
        self._closed = False
        # Position and home telemetry refused (not a place on Earth), by stream.
        self.telemetry_rejected: Counter[str] = Counter()
        # PX4 parameters read at connect (None: not read): RTL_RETURN_ALT (m above home),
        # RTL_LAND_DELAY (s over home before an RTL lands; negative: never lands) and
        # COM_DISARM_LAND (s on the ground before the auto-disarm; <= 0: never disarms).
        self.rtl_return_alt_m: float | None = None
        self.rtl_land_delay_s: float | None = None
        self.disarm_land_s: float | None = None
        # GF_ACTION: what PX4 does when the vehicle leaves the autopilot's fence (None: not
        # read): 0 none, 1 warning, 2 Hold, 3 Return, 4 terminate, 5 Land.
        self.geofence_action: int | None = None
        # MIS_TAKEOFF_ALT as found before the first take-off set it; restored by close().
        self._takeoff_alt_found_m: float | None = None
        # Read once only: after a failed read, a later one would find the value we set.
        self._takeoff_alt_read = False

    # ----------------------------------------------------------------- connection

    @property
    def connected(self) -> bool:
        """True once :meth:`connect` succeeded (and until :meth:`close`)."""
        return self._t is not None and not self._closed

    @property
    def signs_link(self) -> bool:
        """True when the link is MAVLink 2 signed (a signing key was given)."""
        return self._signing_key is not None

    @property
    def signing_relay(self) -> SigningRelay | None:
        """The signing relay while connected with a key (its counters say what it dropped),
        else None."""
        return self._relay

    @property
    def link_losses(self) -> int:
        """How many times the autopilot link was lost since :meth:`connect`."""
        return self._t.link_losses if self._t is not None else 0

    @property
    def link_up(self) -> bool:
        """True while the autopilot's heartbeats are heard (connected and not lost)."""
        return self._t is not None and not self._closed and self._t.connected

    @property
    def armed(self) -> bool | None:
        """The armed state last reported by the autopilot (None: not known yet)."""
        return self._t.armed if self._t is not None else None

    @property
    def in_air(self) -> bool | None:
        """Whether the autopilot last reported the vehicle in the air (None: not known)."""
        return self._t.in_air if self._t is not None else None

    @property
    def flight_mode(self) -> str:
        """The autopilot's flight mode last reported (MAVSDK FlightMode name; '' unknown)."""
        return self._t.flight_mode if self._t is not None else ''

    @property
    def system_status(self) -> str:
        """The autopilot's HEARTBEAT system_status last heard, by MAV_STATE name without its
        prefix (``STANDBY``, ``ACTIVE``, ``CRITICAL``, ...; '' not heard)."""
        return self._t.system_status if self._t is not None else ''

    @property
    def failsafe(self) -> bool | None:
        """Whether PX4 reports a failsafe acting (None: no autopilot HEARTBEAT heard):
        :func:`failsafe_from_system_status`."""
        return failsafe_from_system_status(self.system_status)

    @property
    def home_enu_m(self) -> tuple[float, float, float]:
        """The autopilot's home position in the ENU frame."""
        home = self._require().home_geodetic
        if home is None:
            raise VehicleError(f'{self.url}: home position unknown')
        return geodetic_to_enu(self.origin, *home)

    async def connect(self, timeout_s: float = 30.0) -> None:
        """Connect, then wait for a healthy autopilot with a home position. Once connected,
        waits (after a link loss) for the link, health checks and a home received since."""
        if self._closed:
            raise VehicleError(f'{self.url}: vehicle is closed')
        if self._t is not None:
            try:
                await self._wait_for(self._ready, timeout_s, f'{self.url}: readiness check',
                                     fail_on_link_loss=False)
            except VehicleError as exc:
                raise VehicleError(f'{exc}{await self._health_detail()}') from None
            return
        loop = asyncio.get_running_loop()
        ensure_executor(loop)
        if self.forward_log:
            forward_mavsdk_log()
        deadline_s = loop.time() + timeout_s
        stage = 'opening the connection'
        try:
            self._mavsdk = Mavsdk(Configuration.create_with_component_type(self._component_type))
            if self._signing_key is None:
                await asyncio.wait_for(self._mavsdk.add_any_connection(self.url), timeout_s)
            else:
                self._relay = SigningRelay.open(self.url, self._signing_key)
                raw = self._mavsdk._mavsdk    # the raw-bytes API: on the synchronous instance
                self._relay.attach(raw)
                await asyncio.wait_for(self._mavsdk.add_any_connection(MAVSDK_RAW_URL),
                                       timeout_s)
                self._relay.start(raw.pass_received_raw_bytes)
            stage = 'waiting for an autopilot heartbeat'
            system = await self._mavsdk.first_autopilot(
                timeout_s=max(0.1, deadline_s - loop.time()))
            if system is None:
                raise VehicleError(f'connect {self.url}: no autopilot heartbeat within '
                                   f'{timeout_s:.1f} s')
            self._system = system
            self._action = ActionAsync(system)
            self._telemetry = TelemetryAsync(system)
            self._mission = MissionAsync(system)
            self._geofence = GeofenceAsync(system)
            self._direct = MavlinkDirectAsync(system)
            self._t = _Telemetry()
            # MAVSDK reports later changes only: the system it just discovered is connected.
            self._t.connected = await system.is_connected()
            self._start_streams()
            stage = 'waiting for health checks and a home position'
            seeder = asyncio.create_task(self._seed_from_getters())
            try:
                await self._wait_for(self._ready, max(0.1, deadline_s - loop.time()),
                                     f'connect {self.url}', fail_on_link_loss=False)
            finally:
                seeder.cancel()
        except VehicleError as exc:
            detail = await self._health_detail() if stage.startswith('waiting for health') \
                else ''
            await self._teardown()
            raise VehicleError(f'{exc}{detail}') from None
        except (TimeoutError, MavsdkError, OSError) as exc:
            await self._teardown()
            raise VehicleError(f'connect {self.url}: failed while {stage}: '
                               f'{exc or type(exc).__name__}') from exc
        except BaseException:
            await self._teardown()
            raise
        await self._read_px4_params()
        lat_deg, lon_deg, alt_amsl_m = self._t.home_geodetic
        _log.info('%s: connected, home %.7f, %.7f, %.1f m AMSL (%+.1f m from the origin '
                  'altitude), RTL_RETURN_ALT %s m, RTL_LAND_DELAY %s s, COM_DISARM_LAND %s s, '
                  'GF_ACTION %s', self.url, lat_deg, lon_deg, alt_amsl_m,
                  alt_amsl_m - self.origin.alt_amsl_m, self.rtl_return_alt_m,
                  self.rtl_land_delay_s, self.disarm_land_s, self.geofence_action)

    async def _read_px4_params(self) -> None:
        """Read the PX4 parameters the pilot checks before arming: RTL_RETURN_ALT (every
        return to launch climbs to it above home), RTL_LAND_DELAY and COM_DISARM_LAND (the
        return's landing and the disarm the pilot waits for) and GF_ACTION (what a breach of
        the autopilot's fence does); a failed read is logged and leaves its attribute None."""
        self.rtl_return_alt_m = await self._read_param(
            'RTL_RETURN_ALT', self._action.get_return_to_launch_altitude,
            'the return altitude is not checked against the geofence')
        params = ParamAsync(self._system)
        try:
            self.rtl_land_delay_s = await self._read_param(
                'RTL_LAND_DELAY', lambda: params.get_param_float('RTL_LAND_DELAY'),
                'a return to launch that never lands is not refused')
            self.disarm_land_s = await self._read_param(
                'COM_DISARM_LAND', lambda: params.get_param_float('COM_DISARM_LAND'),
                'a vehicle that never disarms after landing is not refused')
            action = await self._read_param(
                'GF_ACTION', lambda: params.get_param_int('GF_ACTION'),
                "what a breach of the autopilot's fence does is not reported")
            self.geofence_action = None if action is None else int(action)
        finally:
            with contextlib.suppress(Exception):
                params.destroy()

    async def _read_param(self, name: str, make_call: Callable[[], Awaitable[object]],
                          unchecked: str) -> float | None:
        """A float parameter's value; None (logged: ``unchecked`` says what goes unchecked)
        when it cannot be read or is not finite."""
        try:
            value = float(await asyncio.wait_for(make_call(), self.command_timeout_s))
        except (TimeoutError, MavsdkError) as exc:
            _log.warning('%s: could not read %s (%s): %s', self.url, name,
                         exc or type(exc).__name__, unchecked)
            return None
        return value if math.isfinite(value) else None

    @staticmethod
    def _ready(t: _Telemetry) -> bool:
        # Also the armed and in-air states (heard since the last loss: a reboot resets them),
        # so a pilot that starts while the vehicle flies does not arm and take off again.
        state_known = t.armed is not None and t.in_air is not None
        return (t.connected and t.health_ok and t.home_geodetic is not None
                and not t.home_stale and t.pose is not None and state_known)

    async def _seed_from_getters(self, period_s: float = 0.1) -> None:
        """Fill health and home from MAVSDK's cached getters.

        Streams only report changes seen after subscribing: a home position or health state
        that arrived during discovery would otherwise wait for the next periodic message.
        """
        t = self._t
        while t.home_geodetic is None or not t.health_ok:
            with contextlib.suppress(MavsdkError):
                if not t.health_ok and await self._telemetry.health_all_ok():
                    t.health_ok = True
                    t.notify()
                if t.home_geodetic is None:
                    home = await self._telemetry.home()
                    # All NaN: MAVSDK has no home yet (PX4 sets it at its first GPS fix or
                    # arming): not yet known, not telemetry to refuse.
                    if not _unset(home):
                        self._on_home(home)
                    if t.home_geodetic is not None:
                        t.notify()
            await asyncio.sleep(period_s)

    async def _health_detail(self) -> str:
        if self._telemetry is None:
            return ''
        try:
            health = await asyncio.wait_for(self._telemetry.health(), 2.0)
        except (TimeoutError, MavsdkError):
            return ''
        failing = [name for name, value in vars(health).items() if value is False]
        return f' (failing: {", ".join(failing)})' if failing else ''

    def _require(self) -> _Telemetry:
        if self._closed:
            raise VehicleError(f'{self.url}: vehicle is closed')
        if self._t is None:
            raise VehicleError(f'{self.url}: not connected; call connect() first')
        return self._t

    # ----------------------------------------------------------------- telemetry streams

    def _start_streams(self) -> None:
        tel, system = self._telemetry, self._system
        self._tasks = [
            asyncio.create_task(self._consume(system.is_connected_state(), self._on_connected)),
            asyncio.create_task(self._consume(tel.subscribe_health_all_ok(), self._on_health)),
            asyncio.create_task(self._consume(tel.subscribe_home(), self._on_home)),
            asyncio.create_task(self._consume(tel.subscribe_position(), self._on_position)),
            asyncio.create_task(self._consume(tel.subscribe_attitude_euler(), self._on_attitude)),
            asyncio.create_task(self._consume(tel.subscribe_armed(), self._on_armed)),
            asyncio.create_task(self._consume(tel.subscribe_in_air(), self._on_in_air)),
            asyncio.create_task(self._consume(tel.subscribe_landed_state(), self._on_landed)),
            asyncio.create_task(self._consume(tel.subscribe_flight_mode(), self._on_mode)),
            asyncio.create_task(self._consume(tel.subscribe_battery(), self._on_battery)),
            asyncio.create_task(self._consume(tel.subscribe_status_text(),
                                              self._on_status_text)),
            asyncio.create_task(self._consume(self._direct.subscribe_message('HEARTBEAT'),
                                              self._on_heartbeat)),
        ]

    async def _consume(self, stream, handler: Callable[[object], None]) -> None:
        async with contextlib.aclosing(stream):
            async for value in stream:
                try:
                    handler(value)
                except Exception:  # noqa: BLE001 - a bad sample must not end the stream
                    _log.exception('%s: telemetry handler failed', self.url)
                self._t.notify()

    def _on_connected(self, connected: bool) -> None:
        t = self._t
        if bool(connected) == t.connected:
            return
        t.connected = bool(connected)
        if not connected:
            # Health, home and state are heard again when the link is back (the autopilot may
            # have rebooted: disarmed, on the ground, no mission, maybe another home).
            t.link_losses += 1
            t.health_ok = False
            t.home_stale = True
            t.armed = t.in_air = None
            t.landed_state = t.flight_mode = t.system_status = ''
            _log.warning('%s: autopilot link lost', self.url)
            return
        _log.info('%s: autopilot link re-established', self.url)
        if self._reseed is not None:
            self._reseed.cancel()
        self._reseed = asyncio.create_task(self._seed_from_getters())

    def _on_health(self, ok: bool) -> None:
        self._t.health_ok = bool(ok)

    def _on_home(self, home) -> None:
        if not (_on_earth(home.latitude_deg, home.longitude_deg)
                and math.isfinite(home.absolute_altitude_m)):
            self._refuse('home', home)
            return
        self._t.home_geodetic = (home.latitude_deg, home.longitude_deg,
                                 home.absolute_altitude_m)
        self._t.home_stale = False

    def _on_position(self, pos) -> None:
        # A NaN altitude is passed on (a pose without a footprint: its frames go unlabelled);
        # a latitude or longitude off the globe would be a finite place nobody notices.
        if not _on_earth(pos.latitude_deg, pos.longitude_deg):
            self._refuse('position', pos)
            return
        t = self._t
        t.geodetic = (pos.latitude_deg, pos.longitude_deg, pos.absolute_altitude_m,
                      pos.relative_altitude_m)
        east_m, north_m, up_m = geodetic_to_enu(self.origin, pos.latitude_deg,
                                                pos.longitude_deg, pos.absolute_altitude_m)
        yaw = t.yaw_enu_rad if math.isfinite(t.yaw_enu_rad) else 0.0
        t.pose = PoseEnu(east_m, north_m, up_m, yaw, time.time())
        _fan_out(self._pose_queues, t.pose)

    def _refuse(self, stream: str, sample) -> None:
        """Count a refused telemetry sample; log the 1st, 10th, 100th, ... of a stream."""
        self.telemetry_rejected[stream] += 1
        count = self.telemetry_rejected[stream]
        if count == 10 ** int(math.log10(count)):
            _log.warning('%s: %s telemetry refused (lat %s, lon %s, alt %s m: not a place '
                         'on Earth); %d so far', self.url, stream, sample.latitude_deg,
                         sample.longitude_deg, sample.absolute_altitude_m, count)

    def _on_attitude(self, euler) -> None:
        if math.isfinite(euler.yaw_deg):
            self._t.yaw_enu_rad = yaw_ned_to_enu(math.radians(euler.yaw_deg))

    def _on_armed(self, armed: bool) -> None:
        self._t.armed = bool(armed)

    def _on_in_air(self, in_air: bool) -> None:
        self._t.in_air = bool(in_air)

    def _on_landed(self, state) -> None:
        self._t.landed_state = state.name

    def _on_mode(self, mode) -> None:
        t = self._t
        if mode.name != t.flight_mode:
            if t.flight_mode:
                _log.info('%s: flight mode %s -> %s', self.url, t.flight_mode, mode.name)
            else:
                _log.info('%s: flight mode %s', self.url, mode.name)
        t.flight_mode = mode.name

    def _on_heartbeat(self, message) -> None:
        """The autopilot's HEARTBEAT (MAVSDK's mavlink_direct, fields as JSON): its
        system_status; heartbeats of other components (a camera, a ground station) are not
        the autopilot's and are skipped."""
        if message.component_id != MAV_COMP_ID_AUTOPILOT1:
            return
        try:
            code = int(json.loads(message.fields_json)['system_status'])
        except (ValueError, KeyError, TypeError) as exc:
            _log.warning('%s: HEARTBEAT without a readable system_status (%s): %r', self.url,
                         exc, message.fields_json[:200])
            return
        status = MAV_STATE_NAMES.get(code, f'UNKNOWN_{code}')
        t = self._t
        if status != t.system_status and (status in FAILSAFE_STATES
                                          or t.system_status in FAILSAFE_STATES):
            _log.warning('%s: autopilot system_status %s -> %s', self.url,
                         t.system_status or 'unknown', status)
        t.system_status = status

    def _on_status_text(self, status) -> None:
        severity = StatusTextType(status.type)
        text = str(status.text).strip()
        self._t.status_texts.append(StatusText(time.monotonic(), severity.name, text))
        _log.log(STATUS_TEXT_LEVELS.get(severity, logging.INFO), '%s: autopilot says: %s (%s)',
                 self.url, text, severity.name)

    def _on_battery(self, battery) -> None:
        remaining = battery.remaining_percent / 100.0 if math.isfinite(
            battery.remaining_percent) else math.nan
        self._t.battery = BatteryStatus(remaining, battery.voltage_v)
        _fan_out(self._battery_queues, self._t.battery)

    async def _wait_for(self, predicate: Callable[[_Telemetry], bool], timeout_s: float,
                        what: str, fail_on_link_loss: bool = True) -> None:
        """Return once ``predicate(telemetry)`` holds; VehicleError after ``timeout_s``, or
        (``fail_on_link_loss``) as soon as the link is lost or was lost during the wait."""
        t = self._require()
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + timeout_s
        losses = t.link_losses
        while not predicate(t):
            if fail_on_link_loss and (not t.connected or t.link_losses != losses):
                raise VehicleError(f'{what}: autopilot link lost')
            remaining_s = deadline_s - loop.time()
            if remaining_s <= 0.0:
                link = '' if t.connected else ' (autopilot link lost)'
                raise VehicleError(f'{what}: timed out after {timeout_s:.1f} s{link}')
            if self._closed:
                raise VehicleError(f'{what}: vehicle closed while waiting')
            # asyncio.wait, not wait_for: Python 3.11's wait_for can swallow the caller's
            # cancellation (e.g. a round's flight budget) when the event fires at that moment.
            changed = asyncio.ensure_future(t.changed.wait())
            try:
                await asyncio.wait((changed,), timeout=remaining_s)
            finally:
                changed.cancel()

    # ----------------------------------------------------------------- geometry

    def _pose(self) -> PoseEnu:
        pose = self._require().pose
        if pose is None:
            raise VehicleError(f'{self.url}: no position telemetry yet')
        return pose

    def _home_up_m(self) -> float:
        return self.home_enu_m[2]

    def _at(self, waypoint: WaypointEnu) -> Callable[[_Telemetry], bool]:
        def arrived(t: _Telemetry) -> bool:
            pose = t.pose
            return pose is not None and math.hypot(
                pose.east_m - waypoint.east_m, pose.north_m - waypoint.north_m) <= (
                self.arrival_radius_m) and abs(pose.up_m - waypoint.up_m) <= (
                self.altitude_tolerance_m)
        return arrived

    @staticmethod
    def _motion_timeout_s(horizontal_m: float, speed_m_s: float, climb_m: float = 0.0,
                          descent_m: float = 0.0) -> float:
        return (_TIMEOUT_MARGIN_S + 2.0 * horizontal_m / max(speed_m_s, 0.5)
                + 2.0 * climb_m / _TIMEOUT_CLIMB_M_S + 2.0 * descent_m / _TIMEOUT_DESCENT_M_S)

    # ----------------------------------------------------------------- actions

    async def _call(self, what: str, make_call: Callable[[], Awaitable[object]],
                    timeout_s: float | None = None) -> object:
        """Await ``make_call()`` (a MAVSDK call), turning its errors into VehicleError."""
        t = self._require()
        if not t.connected:
            raise VehicleError(f'{self.url}: {what}: autopilot link lost')
        timeout_s = timeout_s or self.command_timeout_s
        try:
            return await asyncio.wait_for(make_call(), timeout_s)
        except MavsdkError as exc:
            if not t.connected:
                raise VehicleError(f'{self.url}: {what}: autopilot link lost') from exc
            result = getattr(exc, 'result', None)
            reason = result.name if result is not None else str(exc)
            said = '; '.join(f'"{status.text}"' for status in
                             await self._reason_from_autopilot(t))
            raise VehicleError(f'{self.url}: {what} refused by the autopilot: {reason}'
                               + (f' (autopilot: {said})' if said else '')) from exc
        except TimeoutError as exc:
            raise VehicleError(f'{self.url}: {what}: no answer within '
                               f'{timeout_s:.1f} s') from exc

    async def _reason_from_autopilot(self, t: _Telemetry) -> list[StatusText]:
        """The status texts that explain a refusal just received: the recent ones (WARNING or
        worse), waited for at most STATUS_TEXT_GRACE_S if none has arrived yet."""
        refused_s = time.monotonic()
        deadline_s = refused_s + STATUS_TEXT_GRACE_S
        while not (said := recent_status_texts(t.status_texts, time.monotonic())):
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0.0 or self._closed:
                return []
            changed = asyncio.ensure_future(t.changed.wait())
            try:
                await asyncio.wait((changed,), timeout=remaining_s)
            finally:
                changed.cancel()
        return said

    async def arm(self) -> None:
        """Arm in Hold; returns once HEARTBEAT reports armed.

        A vehicle in another mode is switched to Hold first: PX4 refuses to arm in Land or
        Return (its mode_req_prevent_arming) and, in a manual mode, without an RC; armed in
        Mission it would fly the mission left on it. MAVSDK's own arm leaves only Mission and
        Return for Hold (ActionImpl::need_hold_before_arm_px4), not Land."""
        mode = self._require().flight_mode
        if mode and mode != 'HOLD':
            _log.info('%s: switching the autopilot from %s to Hold before arming', self.url,
                      mode)
            await self._call('hold before arming', lambda: self._action.hold())
            await self._wait_for(lambda t: t.flight_mode == 'HOLD', self.command_timeout_s,
                                 f'{self.url}: hold before arming (waiting for the Hold mode)')
        await self._call('arm', lambda: self._action.arm())
        await self._wait_for(lambda t: t.armed is True, self.command_timeout_s,
                             f'{self.url}: arm (waiting for the armed state)')

    async def disarm(self) -> None:
        """Disarm (on the ground); returns once HEARTBEAT reports disarmed."""
        await self._call('disarm', lambda: self._action.disarm())
        await self._wait_for(lambda t: t.armed is False, self.command_timeout_s,
                             f'{self.url}: disarm (waiting for the disarmed state)')

    async def takeoff(self, altitude_m: float, timeout_s: float | None = None) -> None:
        """Take off to ``altitude_m`` above the origin; returns within tolerance of it."""
        relative_m = altitude_m - self._home_up_m()
        if not relative_m >= 1.0:
            raise VehicleError(f'{self.url}: take-off altitude {altitude_m:.1f} m is less than '
                               f'1 m above home ({self._home_up_m():.1f} m)')
        if not self._takeoff_alt_read:
            self._takeoff_alt_read = True
            self._takeoff_alt_found_m = await self._read_param(
                'MIS_TAKEOFF_ALT', self._action.get_takeoff_altitude,
                'it is left at the take-off altitude set now')
        await self._call('set take-off altitude',
                         lambda: self._action.set_takeoff_altitude(relative_m))
        await self._call('take-off', lambda: self._action.takeoff())
        climb_m = max(0.0, altitude_m - self._pose().up_m)
        timeout_s = timeout_s or self._motion_timeout_s(0.0, 1.0, climb_m=climb_m)
        await self._wait_for(
            lambda t: t.pose is not None and t.pose.up_m >= altitude_m - self.altitude_tolerance_m,
            timeout_s, f'{self.url}: take-off to {altitude_m:.1f} m')

    async def goto_enu(self, waypoint: WaypointEnu, speed_m_s: float,
                       timeout_s: float | None = None) -> None:
        """Fly to ``waypoint`` (Hold mode + DO_REPOSITION) at ``speed_m_s``; returns there."""
        if not speed_m_s > 0.0:
            raise VehicleError(f'{self.url}: speed must be > 0, got {speed_m_s}')
        lat_deg, lon_deg, alt_amsl_m = enu_to_geodetic(self.origin, waypoint.east_m,
                                                       waypoint.north_m, waypoint.up_m)
        pose = self._pose()
        await self._call('go-to', lambda: self._action.goto_location(
            lat_deg, lon_deg, alt_amsl_m, math.nan))
        # DO_CHANGE_SPEED after the reposition: PX4 applies it to the active set-point.
        await self._call('set speed', lambda: self._action.set_current_speed(speed_m_s))
        horizontal_m = math.hypot(waypoint.east_m - pose.east_m, waypoint.north_m - pose.north_m)
        dz_m = waypoint.up_m - pose.up_m
        timeout_s = timeout_s or self._motion_timeout_s(horizontal_m, speed_m_s,
                                                        max(dz_m, 0.0), max(-dz_m, 0.0))
        await self._wait_for(self._at(waypoint), timeout_s,
                             f'{self.url}: go-to ({waypoint.east_m:.1f}, '
                             f'{waypoint.north_m:.1f}, {waypoint.up_m:.1f})')

    async def fly_waypoints(self, waypoints: Sequence[WaypointEnu], speed_m_s: float,
                            on_progress: ProgressCallback | None = None,
                            timeout_s: float | None = None) -> int:
        """Upload the waypoints as a mission, run it and return the number of items reached.

        Raises VehicleError if the upload is refused, the mission is interrupted (the
        autopilot leaves Mission mode) or it does not finish within ``timeout_s``.
        """
        if not waypoints:
            return 0
        if not speed_m_s > 0.0:
            raise VehicleError(f'{self.url}: speed must be > 0, got {speed_m_s}')
        home_up_m = self._home_up_m()
        items = []
        for waypoint in waypoints:
            lat_deg, lon_deg, _ = enu_to_geodetic(self.origin, waypoint.east_m,
                                                  waypoint.north_m, waypoint.up_m)
            items.append(MissionItem(
                latitude_deg=lat_deg, longitude_deg=lon_deg,
                relative_altitude_m=waypoint.up_m - home_up_m, speed_m_s=speed_m_s,
                is_fly_through=True, acceptance_radius_m=self.arrival_radius_m,
                vehicle_action=MissionItem.VehicleAction.NONE))
        total = len(items)
        progress: list[MissionProgress] = []
        state = {'fresh': False, 'mode_seen': False}

        def on_mission_progress(value) -> None:
            current = MissionProgress(int(value.current), int(value.total))
            if current.total != total:
                return
            if current.current < current.total:
                state['fresh'] = True
            if not state['fresh'] or (progress and progress[-1] == current):
                return
            progress.append(current)
            if on_progress is not None:
                try:
                    on_progress(current)
                except Exception:  # noqa: BLE001 - the caller's callback must not abort
                    _log.exception('%s: on_progress callback failed', self.url)

        watcher = asyncio.create_task(self._consume(self._mission.subscribe_mission_progress(),
                                                    on_mission_progress))
        try:
            await self._call('disable RTL after mission',
                             lambda: self._mission.set_return_to_launch_after_mission(False))
            await self._call(f'mission upload ({total} items)',
                             lambda: self._mission.upload_mission(MissionPlan(items)),
                             timeout_s=self.command_timeout_s + 0.5 * total)
            await self._call('mission start', lambda: self._mission.start_mission())
            path_m = _path_length_m(self._pose(), waypoints)
            timeout_s = timeout_s or self._motion_timeout_s(path_m, speed_m_s,
                                                            climb_m=_climb_m(waypoints))

            def finished(t: _Telemetry) -> bool:
                if t.flight_mode == 'MISSION':
                    state['mode_seen'] = True
                done = bool(progress) and progress[-1].current >= total
                if not done and state['mode_seen'] and t.flight_mode not in ('MISSION', ''):
                    reached = progress[-1].current if progress else 0
                    raise VehicleError(f'{self.url}: mission interrupted after {reached} of '
                                       f'{total} items (mode {t.flight_mode})')
                return done

            await self._wait_for(finished, timeout_s,
                                 f'{self.url}: mission of {total} waypoints')
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        # The autopilot reports the last item once inside its acceptance radius, then holds
        # at the item itself: return when the vehicle is there.
        last = waypoints[-1]
        try:
            await self._wait_for(self._at(last), self._motion_timeout_s(
                self.arrival_radius_m + 5.0, 1.0), f'{self.url}: settling at the last waypoint')
        except VehicleError as exc:
            _log.warning('%s', exc)
        return min(progress[-1].current, total)

    async def download_fence(self) -> AutopilotFence:
        """The geofence stored on the autopilot (MAVLink fence protocol), in ENU metres."""
        data = await self._call('geofence download', lambda: self._geofence.download_geofence())
        return AutopilotFence(
            tuple(FencePolygon(tuple(self._point_en_m(p) for p in polygon.points),
                               polygon.fence_type == FenceType.INCLUSION)
                  for polygon in data.polygons),
            tuple(FenceCircle(self._point_en_m(circle.point), float(circle.radius),
                              circle.fence_type == FenceType.INCLUSION)
                  for circle in data.circles))

    async def upload_fence(self, fence: AutopilotFence) -> None:
        """Replace the autopilot's geofence with ``fence`` (an empty one clears it); returns
        once the autopilot accepted every item."""
        if fence.empty:
            await self._call('geofence clear', lambda: self._geofence.clear_geofence())
            return
        data = GeofenceData(
            [Polygon([self._point(corner) for corner in polygon.corners_en_m],
                     FenceType.INCLUSION if polygon.inclusion else FenceType.EXCLUSION)
             for polygon in fence.polygons],
            [Circle(self._point(circle.center_en_m), float(circle.radius_m),
                    FenceType.INCLUSION if circle.inclusion else FenceType.EXCLUSION)
             for circle in fence.circles])
        items = sum(len(p.corners_en_m) for p in fence.polygons) + len(fence.circles)
        await self._call(f'geofence upload ({fence.describe()})',
                         lambda: self._geofence.upload_geofence(data),
                         timeout_s=self.command_timeout_s + 0.5 * items)

    def _point(self, east_north_m: tuple[float, float]) -> Point:
        lat_deg, lon_deg, _ = enu_to_geodetic(self.origin, east_north_m[0], east_north_m[1],
                                              0.0)
        return Point(lat_deg, lon_deg)

    def _point_en_m(self, point: Point) -> tuple[float, float]:
        east_m, north_m, _ = geodetic_to_enu(self.origin, point.latitude_deg,
                                             point.longitude_deg, self.origin.alt_amsl_m)
        return east_m, north_m

    async def land(self, timeout_s: float | None = None) -> None:
        """Land here; returns once on the ground and disarmed."""
        height_m = max(0.0, self._pose().up_m - self._home_up_m())
        await self._call('land', lambda: self._action.land())
        timeout_s = timeout_s or (self._motion_timeout_s(0.0, 1.0, descent_m=height_m)
                                  + self._disarm_wait_s())
        await self._wait_for(lambda t: t.armed is False and t.landed_state == 'ON_GROUND',
                             timeout_s, f'{self.url}: landing')

    async def return_to_launch(self, timeout_s: float | None = None) -> None:
        """Fly home (RTL) and land; returns once on the ground and disarmed."""
        pose = self._pose()
        home_e, home_n, home_up = self.home_enu_m
        distance_m = math.hypot(pose.east_m - home_e, pose.north_m - home_n)
        height_m = max(0.0, pose.up_m - home_up)
        await self._call('return to launch', lambda: self._action.return_to_launch())
        timeout_s = timeout_s or self.return_timeout_s(distance_m, height_m)
        await self._wait_for(lambda t: t.armed is False and t.landed_state == 'ON_GROUND',
                             timeout_s, f'{self.url}: return to launch')

    def return_timeout_s(self, distance_m: float, height_m: float) -> float:
        """How long a return to launch from ``distance_m`` away and ``height_m`` above home
        may take: the climb to RTL_RETURN_ALT (60 m, PX4's default, when unknown), the flight
        home, the descent, RTL_LAND_DELAY over home and COM_DISARM_LAND on the ground."""
        return_alt_m = 60.0 if self.rtl_return_alt_m is None else self.rtl_return_alt_m
        climb_m = max(0.0, return_alt_m - height_m)
        land_delay_s = max(0.0, self.rtl_land_delay_s or 0.0)
        return (self._motion_timeout_s(distance_m, 5.0, climb_m=climb_m,
                                       descent_m=height_m + climb_m)
                + 2.0 * land_delay_s + self._disarm_wait_s())

    def _disarm_wait_s(self) -> float:
        """Twice COM_DISARM_LAND (the wait on the ground before PX4 disarms; 2 s, PX4's
        default, when unknown)."""
        return 2.0 * (2.0 if self.disarm_land_s is None else max(0.0, self.disarm_land_s))

    # ----------------------------------------------------------------- streams for callers

    async def poses(self) -> AsyncIterator[PoseEnu]:
        """Yield every position update as a PoseEnu (ends when the vehicle is closed)."""
        self._require()
        async for pose in subscribe(self._pose_queues, 32):
            yield pose

    async def batteries(self) -> AsyncIterator[BatteryStatus]:
        """Yield every battery update (ends when the vehicle is closed)."""
        self._require()
        async for battery in subscribe(self._battery_queues, 32):
            yield battery

    @property
    def latest_pose(self) -> PoseEnu | None:
        """The last pose received, or None."""
        return self._t.pose if self._t is not None else None

    @property
    def latest_battery(self) -> BatteryStatus | None:
        """The last battery state received, or None."""
        return self._t.battery if self._t is not None else None

    # ----------------------------------------------------------------- shutdown

    async def close(self) -> None:
        """Put back the MIS_TAKEOFF_ALT found before the first take-off (PX4 keeps a
        parameter set, across reboots too: an operator's next take-off from QGroundControl
        or the RC would climb to ours), then stop telemetry, end the pose/battery iterators and
        destroy the MAVSDK instance. A failed restore is logged."""
        if self._closed:
            return
        await self._restore_takeoff_altitude()
        self._closed = True
        await self._teardown()

    async def _restore_takeoff_altitude(self) -> None:
        found_m = self._takeoff_alt_found_m
        if found_m is None or self._t is None:
            return
        try:
            await self._call('restore MIS_TAKEOFF_ALT',
                             lambda: self._action.set_takeoff_altitude(found_m))
        except VehicleError as exc:
            _log.warning('%s: MIS_TAKEOFF_ALT stays at the last take-off altitude set: %s '
                         '(it was %g m)', self.url, exc, found_m)
            return
        self._takeoff_alt_found_m = None
        _log.info('%s: MIS_TAKEOFF_ALT restored to %g m', self.url, found_m)

    async def _teardown(self) -> None:
        if self._reseed is not None:
            self._tasks.append(self._reseed)
            self._reseed = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        for queue in list(self._pose_queues) + list(self._battery_queues):
            put_latest(queue, None)
        for plugin in (self._action, self._telemetry, self._mission, self._geofence,
                       self._direct):
            if plugin is not None:
                with contextlib.suppress(Exception):
                    plugin.destroy()
        self._action = self._telemetry = self._mission = self._geofence = self._direct = None
        self._system = None
        if self._relay is not None:      # before MAVSDK goes: its reader hands bytes to it
            relay, self._relay = self._relay, None
            await asyncio.get_running_loop().run_in_executor(None, relay.close)
        if self._mavsdk is not None:
            mavsdk_instance, self._mavsdk = self._mavsdk, None
            await asyncio.get_running_loop().run_in_executor(None, mavsdk_instance.destroy)
        if self._t is not None:
            self._t.notify()
        if not self._closed:
            # A failed connect leaves the vehicle ready for another connect().
            self._t = None


def _unset(position) -> bool:
    """MAVSDK's Position before anything was received: every field NaN."""
    return all(math.isnan(value) for value in (
        position.latitude_deg, position.longitude_deg, position.absolute_altitude_m))


def _on_earth(lat_deg: float, lon_deg: float) -> bool:
    """A latitude in [-90, 90] and a longitude in [-180, 180] degrees (NaN is neither)."""
    return -90.0 <= lat_deg <= 90.0 and -180.0 <= lon_deg <= 180.0


def _fan_out(queues: set[asyncio.Queue], item: object) -> None:
    for queue in list(queues):
        put_latest(queue, item)


def _path_length_m(start: PoseEnu, waypoints: Sequence[WaypointEnu]) -> float:
    length_m = 0.0
    east_m, north_m = start.east_m, start.north_m
    for waypoint in waypoints:
        length_m += math.hypot(waypoint.east_m - east_m, waypoint.north_m - north_m)
        east_m, north_m = waypoint.east_m, waypoint.north_m
    return length_m


def _climb_m(waypoints: Sequence[WaypointEnu]) -> float:
    ups = [w.up_m for w in waypoints]
    return max(ups) - min(ups) if ups else 0.0
