"""Embedded PX4-compatible autopilot simulator: N multirotors speaking MAVLink 2 over UDP.

One asyncio loop hosts every vehicle. Vehicle ``i`` binds ``host:(bind_base_port + i)`` and sends
to ``host:(remote_base_port + i)`` (PX4 SITL: 14580+i -> 14540+i), replying to whoever last sent
it a packet, so an unmodified MAVSDK client connects with ``udpin://127.0.0.1:14540``.

Run it stand-alone::

    python -m fl_uav.autopilot_sim.autopilot --vehicles 4 --time-factor 5

or embed it: ``AutopilotSim(config).run_in_thread()`` returns a handle with ``stop()``.
``time_factor`` speeds up simulated physics only; message rates and protocol time-outs stay in
wall time, as a client expects.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.autopilot_sim.flight import FlightController, ParamStore
from fl_uav.autopilot_sim.link import LinkSettings, VehicleLink
from fl_uav.autopilot_sim.physics import BatteryModel
from fl_uav.autopilot_sim.signing import key_file_path
from fl_uav.autopilot_sim.stop_hold import VehicleLinkState

_log = logging.getLogger(__name__)

# The longest simulated step of the physics; larger ticks are split.
MAX_PHYSICS_STEP_S = 0.05




def _plain(value: object) -> object:
    """numpy scalars to Python numbers, so the event log is plain JSON."""
    return value.item() if isinstance(value, np.generic) else value


@dataclass(frozen=True)
class VehicleSnapshot:
    """An immutable copy of one vehicle's ground truth (safe to read from any thread)."""

    vehicle: int
    system_id: int
    t_sim_s: float
    position_enu_m: tuple[float, float, float]
    velocity_enu_m_s: tuple[float, float, float]
    yaw_rad: float
    armed: bool
    mode: str
    landed_state: str
    battery_remaining: float
    battery_voltage_v: float
    mission_current: int
    mission_count: int
    mission_items_reached: tuple[int, ...]


class AutopilotSim:
    """N simulated PX4 multirotors in one asyncio loop.

    ``vehicles`` are the live :class:`FlightController` objects (ground truth:
    ``position_enu_m``, ``yaw_rad``, ``armed``, ``landed_state``, ``mode``,
    ``battery_remaining``, ``mission_items_reached``). ``on_tick`` (if given) is called on the
    simulator's loop after every tick with a list of :class:`VehicleSnapshot`;
    :meth:`snapshots` returns the latest list from any thread.
    """

    def __init__(self, config: AutopilotSimConfig | None = None,
                 on_tick: Callable[[list[VehicleSnapshot]], None] | None = None) -> None:
        self.config = config or AutopilotSimConfig()
        self.on_tick = on_tick
        self.events: list[dict] = []
        self._t_sim_s = 0.0
        self._wall_start_s = time.monotonic()
        self._snapshots: list[VehicleSnapshot] = []
        self._tick_task: asyncio.Task | None = None
        self._transports: list[asyncio.DatagramTransport] = []
        self._stopping: asyncio.Event | None = None
        self.vehicles: list[FlightController] = []
        self.links: list[VehicleLink] = []
        cfg = self.config
        for index in range(cfg.num_vehicles):
            params = ParamStore({
                'MIS_TAKEOFF_ALT': cfg.takeoff_alt_m, 'RTL_RETURN_ALT': cfg.rtl_return_alt_m,
                'MPC_XY_CRUISE': cfg.cruise_speed_m_s, 'MPC_XY_VEL_MAX': cfg.max_speed_m_s,
                'NAV_ACC_RAD': cfg.acceptance_radius_m,
            })
            battery = BatteryModel(
                capacity_wh=cfg.battery_capacity_wh,
                energy_wh=cfg.battery_capacity_wh * cfg.initial_battery_fraction,
                cells=cfg.battery_cells, idle_power_w=cfg.idle_power_w,
                hover_power_w=cfg.hover_power_w, max_speed_power_w=cfg.max_speed_power_w,
                max_speed_m_s=cfg.max_speed_m_s)
            east_m, north_m = cfg.home_enu_m(index)
            controller = FlightController(index, cfg.origin, east_m, north_m, params, battery,
                                          self._sim_clock, self._record_event)
            settings = LinkSettings(cfg.host, cfg.bind_base_port + index,
                                    cfg.remote_base_port + index, cfg.position_rate_hz,
                                    cfg.heartbeat_rate_hz,
                                    key_file_path(cfg.state_dir, index) if cfg.state_dir
                                    else None)
            self.vehicles.append(controller)
            self.links.append(VehicleLink(controller, index + 1, settings, self._sim_clock))

    # ----------------------------------------------------------------- clock and log

    def _sim_clock(self) -> float:
        return self._t_sim_s

    @property
    def t_sim_s(self) -> float:
        """Simulated seconds since start."""
        return self._t_sim_s

    def _record_event(self, vehicle: int, event: str, details: dict) -> None:
        entry = {'t_sim_s': round(self._t_sim_s, 3),
                 't_wall_s': round(time.monotonic() - self._wall_start_s, 3),
                 'vehicle': vehicle, 'event': event}
        entry.update({key: _plain(value) for key, value in details.items()})
        self.events.append(entry)
        _log.debug('sim event %s', entry)

    def events_of(self, vehicle: int, event: str | None = None) -> list[dict]:
        """Event-log entries of one vehicle (optionally of one kind)."""
        return [e for e in list(self.events)
                if e['vehicle'] == vehicle and (event is None or e['event'] == event)]

    def write_log(self, path: str | Path) -> None:
        """Write the config, final states and event log as JSON."""
        payload = {
            'config': asdict(self.config),
            't_sim_s': round(self._t_sim_s, 3),
            'vehicles': [asdict(s) for s in self._make_snapshots()],
            'mavlink_signing': self.signing_status(),
            'events': list(self.events),
        }
        Path(path).write_text(json.dumps(payload, indent=1))

    # ----------------------------------------------------------------- ground truth

    def _make_snapshots(self) -> list[VehicleSnapshot]:
        out = []
        for ctl in self.vehicles:
            out.append(VehicleSnapshot(
                ctl.index, ctl.index + 1, self._t_sim_s, ctl.position_enu_m,
                ctl.velocity_enu_m_s, ctl.yaw_rad, ctl.armed, ctl.mode.value,
                ctl.landed_state.name.lower(), ctl.battery_remaining, ctl.battery.voltage_v,
                ctl.mission_current, len(ctl.mission), tuple(ctl.mission_items_reached)))
        return out

    def snapshots(self) -> list[VehicleSnapshot]:
        """The ground truth of every vehicle after the latest tick (thread-safe)."""
        return self._snapshots

    def signing_status(self) -> list[dict]:
        """Each vehicle's MAVLink signing: on or off, messages accepted signed, messages
        rejected by reason and by message, SETUP_SIGNING outcomes
        (:meth:`~fl_uav.autopilot_sim.signing.VehicleSigning.status`)."""
        return [{'vehicle': index, **link.signing.status()}
                for index, link in enumerate(self.links)]

    def link_states(self, wall_s: float | None = None) -> list[VehicleLinkState]:
        """Each vehicle's armed and in-air state (after the latest tick) and how long its
        MAVLink client has been silent at ``wall_s`` (time.monotonic(); default now), for
        the stop decision (:class:`~fl_uav.autopilot_sim.stop_hold.StopHold`); safe from any
        thread."""
        now_s = time.monotonic() if wall_s is None else wall_s
        states = []
        for snap, link in zip(self._snapshots or self._make_snapshots(), self.links,
                              strict=True):
            heard_s = link.client_heartbeat_wall_s
            states.append(VehicleLinkState(
                snap.vehicle, snap.armed, snap.landed_state != 'on_ground',
                None if heard_s is None else max(0.0, now_s - heard_s)))
        return states

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind every vehicle's UDP port and start ticking."""
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            for link in self.links:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda link=link: link,
                    local_addr=(link.settings.host, link.settings.bind_port))
                self._transports.append(transport)
        except OSError:
            for transport in self._transports:
                transport.close()
            self._transports.clear()
            raise
        self._wall_start_s = time.monotonic()
        self._snapshots = self._make_snapshots()
        for link in self.links:
            link.send_heartbeat()
        self._tick_task = asyncio.create_task(self._tick_loop(), name='autopilot-sim-tick')
        _log.info('autopilot sim: %d vehicles on %s:%d.. -> %d.., time factor %.2f',
                  self.config.num_vehicles, self.config.host, self.config.bind_base_port,
                  self.config.remote_base_port, self.config.time_factor)

    async def stop(self) -> None:
        """Stop ticking and close every socket."""
        if self._tick_task is not None:
            self._tick_task.cancel()
            try:
                await self._tick_task
            except asyncio.CancelledError:
                pass
            self._tick_task = None
        for transport in self._transports:
            transport.close()
        self._transports.clear()
        for link in self.links:
            try:
                link.signing.persist()     # as PX4's clean shutdown: the timestamp kept
            except OSError as exc:
                _log.warning('vehicle %d: signing timestamp not saved: %s', link.sysid, exc)
        if self._stopping is not None:
            self._stopping.set()

    async def run_forever(self, stop_event: asyncio.Event | None = None) -> None:
        """Start, run until ``stop_event`` is set (or the task is cancelled), then stop."""
        await self.start()
        try:
            await (stop_event or asyncio.Event()).wait()
        finally:
            await self.stop()

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period_s = 1.0 / self.config.tick_hz
        last_s = loop.time()
        next_s = last_s + period_s
        while True:
            await asyncio.sleep(max(0.0, next_s - loop.time()))
            now_s = loop.time()
            self.tick(now_s - last_s, time.monotonic())
            last_s = now_s
            next_s += period_s
            if next_s <= now_s:
                next_s = now_s + period_s

    def tick(self, dt_wall_s: float, wall_s: float) -> None:
        """Advance physics by ``dt_wall_s * time_factor`` and send due messages."""
        dt_sim_s = max(0.0, dt_wall_s) * self.config.time_factor
        steps = max(1, math.ceil(dt_sim_s / MAX_PHYSICS_STEP_S))
        step_s = dt_sim_s / steps
        for _ in range(steps):
            self._t_sim_s += step_s
            for ctl in self.vehicles:
                try:
                    ctl.step(step_s, wall_s)
                except Exception:  # noqa: BLE001 - one vehicle's bug must not stop the rest
                    _log.exception('vehicle %d: physics step failed', ctl.index)
        for link in self.links:
            try:
                link.service(wall_s)
            except Exception:  # noqa: BLE001
                _log.exception('vehicle %d: link service failed', link.sysid)
        self._snapshots = self._make_snapshots()
        if self.on_tick is not None:
            try:
                self.on_tick(self._snapshots)
            except Exception:  # noqa: BLE001 - a subscriber's bug must not stop the sim
                _log.exception('on_tick callback failed')

    def run_in_thread(self, ready_timeout_s: float = 10.0) -> AutopilotSimThread:
        """Run the simulator on its own event loop in a daemon thread; returns its handle."""
        handle = AutopilotSimThread(self)
        handle.start(ready_timeout_s)
        return handle


class AutopilotSimThread:
    """A simulator running in a daemon thread; :meth:`stop` ends it (idempotent)."""

    def __init__(self, sim: AutopilotSim) -> None:
        self.sim = sim
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name='autopilot-sim', daemon=True)

    def start(self, ready_timeout_s: float) -> None:
        """Start the thread and wait until every port is bound (raises what start raised)."""
        self._thread.start()
        if not self._ready.wait(ready_timeout_s):
            raise TimeoutError(f'autopilot sim did not start within {ready_timeout_s} s')
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop_event = asyncio.Event()
        try:
            await self.sim.start()
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop_event.wait()
        finally:
            await self.sim.stop()

    def call(self, fn: Callable[[], object], timeout_s: float = 5.0) -> object:
        """Run ``fn`` on the simulator's loop (e.g. to inject a failure) and return its result."""
        if self.loop is None or not self._thread.is_alive():
            raise RuntimeError('autopilot sim thread is not running')

        async def _call():
            return fn()

        return asyncio.run_coroutine_threadsafe(_call(), self.loop).result(timeout_s)

    @property
    def running(self) -> bool:
        """True while the simulator thread runs."""
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the simulator and join its thread."""
        loop, event = self.loop, self._stop_event
        if loop is not None and event is not None and self._thread.is_alive():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass  # loop already closed
        self._thread.join(timeout_s)


def build_arg_parser() -> argparse.ArgumentParser:
    """Command-line options of ``python -m fl_uav.autopilot_sim.autopilot``."""
    defaults = AutopilotSimConfig()
    parser = argparse.ArgumentParser(
        prog='python -m fl_uav.autopilot_sim.autopilot',
        description='PX4-compatible MAVLink autopilot simulator (N vehicles, UDP).')
    parser.add_argument('--vehicles', type=int, default=defaults.num_vehicles)
    parser.add_argument('--time-factor', type=float, default=defaults.time_factor)
    parser.add_argument('--host', default=defaults.host)
    parser.add_argument('--bind-base-port', type=int, default=defaults.bind_base_port)
    parser.add_argument('--remote-base-port', type=int, default=defaults.remote_base_port)
    parser.add_argument('--tick-hz', type=float, default=defaults.tick_hz)
    parser.add_argument('--position-rate-hz', type=float, default=defaults.position_rate_hz)
    parser.add_argument('--heartbeat-rate-hz', type=float, default=defaults.heartbeat_rate_hz)
    parser.add_argument('--rtl-return-alt-m', type=float, default=defaults.rtl_return_alt_m)
    parser.add_argument('--home-spacing-m', type=float, default=defaults.home_spacing_m)
    parser.add_argument('--home-row-size', type=int, default=defaults.home_row_size)
    parser.add_argument('--state-dir', default=defaults.state_dir,
                        help="vehicles' storage (MAVLink signing keys, as PX4's SD card): "
                        'vehicle<i>/mavlink/mavlink-signing-key.bin')
    parser.add_argument('--log', type=Path, default=None,
                        help='write the JSON event log here on exit')
    parser.add_argument('--verbose', action='store_true')
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGINT or SIGTERM; returns the exit code."""
    args = build_arg_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format='%(asctime)s %(levelname)s %(name)s: %(message)s')
    try:
        config = AutopilotSimConfig(
            num_vehicles=args.vehicles, time_factor=args.time_factor, host=args.host,
            bind_base_port=args.bind_base_port, remote_base_port=args.remote_base_port,
            tick_hz=args.tick_hz, position_rate_hz=args.position_rate_hz,
            heartbeat_rate_hz=args.heartbeat_rate_hz, rtl_return_alt_m=args.rtl_return_alt_m,
            home_spacing_m=args.home_spacing_m, home_row_size=args.home_row_size,
            state_dir=args.state_dir)
    except ValueError as exc:
        print(f'error: {exc}', flush=True)
        return 2
    sim = AutopilotSim(config)

    async def _run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await sim.start()
        print(f'autopilot sim ready: {config.num_vehicles} vehicles, '
              f'{config.host}:{config.bind_base_port}.. -> {config.remote_base_port}.., '
              f'time factor {config.time_factor}', flush=True)
        try:
            await stop.wait()
        finally:
            await sim.stop()

    try:
        asyncio.run(_run())
    except OSError as exc:
        print(f'error: {exc}', flush=True)
        return 1
    finally:
        if args.log is not None:
            sim.write_log(args.log)
    print('autopilot sim stopped', flush=True)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
