"""``autopilot.*``: the embedded autopilot simulator's settings (no pymavlink, no asyncio:
the fleet's config reads it in every node)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fl_uav.world.geo import GeoOrigin


@dataclass(frozen=True)
class AutopilotSimConfig:
    """Simulator settings (validated; a bad value raises ValueError naming the field).

    num_vehicles: vehicles, system ids 1..N. bind_base_port / remote_base_port / host: UDP
    endpoints (vehicle i binds bind_base_port+i, sends to remote_base_port+i).
    time_factor: simulated seconds per wall second. tick_hz: physics and scheduling rate (wall).
    position_rate_hz: GLOBAL_POSITION_INT / LOCAL_POSITION_NED / ATTITUDE rate.
    heartbeat_rate_hz: HEARTBEAT rate (PX4: 1 Hz; use 2 Hz on lossy links).
    max_speed_m_s (MPC_XY_VEL_MAX), cruise_speed_m_s (MPC_XY_CRUISE), takeoff_alt_m
    (MIS_TAKEOFF_ALT), rtl_return_alt_m (RTL_RETURN_ALT), acceptance_radius_m (NAV_ACC_RAD):
    initial PX4 parameters. battery_capacity_wh, initial_battery_fraction, battery_cells,
    hover_power_w, max_speed_power_w, idle_power_w: battery model.
    origin_*: geographic origin of the ENU frame. home_positions_enu_m: flat
    (east0, north0, east1, north1, ...) home positions in metres; empty: vehicles stand
    home_spacing_m apart along east starting at (home_east_m, home_north_m), in rows of
    home_row_size (the next row home_spacing_m further north), so a large fleet stays inside
    the world's geofence.
    home_east_m, home_north_m: vehicle 0's home in ENU metres when home_positions_enu_m is
    empty. home_spacing_m: distance between neighbouring vehicles' homes (along east, and
    between rows). home_row_size: vehicles per row.
    state_dir: the vehicles' storage, as PX4's SD card: vehicle i keeps its MAVLink signing
    key (provisioned by SETUP_SIGNING) in vehicle<i>/mavlink/mavlink-signing-key.bin, PX4's
    format, and signs and checks with it from its next start on too; '' = none (a key lasts
    until the simulator stops). fl-uav sim puts each drone's key there before the start.
    """

    num_vehicles: int = 4
    bind_base_port: int = 14580
    remote_base_port: int = 14540
    host: str = '127.0.0.1'
    time_factor: float = 1.0
    tick_hz: float = 50.0
    position_rate_hz: float = 10.0
    heartbeat_rate_hz: float = 1.0
    max_speed_m_s: float = 15.0
    cruise_speed_m_s: float = 5.0
    takeoff_alt_m: float = 2.5
    rtl_return_alt_m: float = 60.0
    acceptance_radius_m: float = 2.0
    battery_capacity_wh: float = 100.0
    initial_battery_fraction: float = 1.0
    battery_cells: int = 4
    hover_power_w: float = 250.0
    max_speed_power_w: float = 350.0
    idle_power_w: float = 5.0
    origin_lat_deg: float = 47.397742
    origin_lon_deg: float = 8.545594
    origin_alt_amsl_m: float = 488.0
    home_positions_enu_m: tuple[float, ...] = ()
    home_east_m: float = 0.0
    home_north_m: float = 0.0
    home_spacing_m: float = 10.0
    home_row_size: int = 50
    state_dir: str = ''

    def __post_init__(self) -> None:
        homes = self.home_positions_enu_m
        if homes and all(isinstance(h, Sequence) for h in homes):
            # Accept ((e0, n0), (e1, n1), ...) too; store it flat.
            object.__setattr__(self, 'home_positions_enu_m',
                               tuple(float(v) for pair in homes for v in pair))
        _check(1 <= self.num_vehicles <= 250, 'num_vehicles', 'in [1, 250]', self.num_vehicles)
        for name in ('bind_base_port', 'remote_base_port'):
            base = getattr(self, name)
            _check(1 <= base and base + self.num_vehicles - 1 <= 65535, name,
                   'a port such that base + num_vehicles - 1 <= 65535', base)
        bind = range(self.bind_base_port, self.bind_base_port + self.num_vehicles)
        remote = range(self.remote_base_port, self.remote_base_port + self.num_vehicles)
        _check(not set(bind) & set(remote), 'bind_base_port',
               'a range not overlapping remote_base_port..', self.bind_base_port)
        _check(bool(self.host), 'host', 'non-empty', self.host)
        _check(0.01 <= self.time_factor <= 100.0, 'time_factor', 'in [0.01, 100]',
               self.time_factor)
        _check(1.0 <= self.tick_hz <= 1000.0, 'tick_hz', 'in [1, 1000]', self.tick_hz)
        _check(0.1 <= self.position_rate_hz <= self.tick_hz, 'position_rate_hz',
               'in [0.1, tick_hz]', self.position_rate_hz)
        _check(0.2 <= self.heartbeat_rate_hz <= self.tick_hz, 'heartbeat_rate_hz',
               'in [0.2, tick_hz]', self.heartbeat_rate_hz)
        _check(0.5 <= self.max_speed_m_s <= 50.0, 'max_speed_m_s', 'in [0.5, 50]',
               self.max_speed_m_s)
        _check(0.5 <= self.cruise_speed_m_s <= self.max_speed_m_s, 'cruise_speed_m_s',
               'in [0.5, max_speed_m_s]', self.cruise_speed_m_s)
        _check(0.0 <= self.takeoff_alt_m <= 200.0, 'takeoff_alt_m', 'in [0, 200]',
               self.takeoff_alt_m)
        _check(0.0 <= self.rtl_return_alt_m <= 500.0, 'rtl_return_alt_m', 'in [0, 500]',
               self.rtl_return_alt_m)
        _check(0.05 <= self.acceptance_radius_m <= 200.0, 'acceptance_radius_m',
               'in [0.05, 200]', self.acceptance_radius_m)
        _check(self.battery_capacity_wh > 0.0, 'battery_capacity_wh', '> 0',
               self.battery_capacity_wh)
        _check(0.0 <= self.initial_battery_fraction <= 1.0, 'initial_battery_fraction',
               'in [0, 1]', self.initial_battery_fraction)
        _check(1 <= self.battery_cells <= 14, 'battery_cells', 'in [1, 14]', self.battery_cells)
        for name in ('hover_power_w', 'max_speed_power_w', 'idle_power_w'):
            _check(getattr(self, name) >= 0.0, name, '>= 0', getattr(self, name))
        _check(-89.0 <= self.origin_lat_deg <= 89.0, 'origin_lat_deg', 'in [-89, 89]',
               self.origin_lat_deg)
        _check(-180.0 <= self.origin_lon_deg <= 180.0, 'origin_lon_deg', 'in [-180, 180]',
               self.origin_lon_deg)
        _check(math.isfinite(self.origin_alt_amsl_m), 'origin_alt_amsl_m', 'finite',
               self.origin_alt_amsl_m)
        _check(len(self.home_positions_enu_m) in (0, 2 * self.num_vehicles),
               'home_positions_enu_m', f'empty or {2 * self.num_vehicles} numbers '
               '(east, north per vehicle)', self.home_positions_enu_m)
        _check(all(math.isfinite(v) for v in self.home_positions_enu_m),
               'home_positions_enu_m', 'finite', self.home_positions_enu_m)
        _check(self.home_spacing_m >= 0.0, 'home_spacing_m', '>= 0', self.home_spacing_m)
        _check(self.home_row_size >= 1, 'home_row_size', '>= 1', self.home_row_size)

    @property
    def origin(self) -> GeoOrigin:
        """The geographic origin of the ENU frame."""
        return GeoOrigin(self.origin_lat_deg, self.origin_lon_deg, self.origin_alt_amsl_m)

    def home_enu_m(self, index: int) -> tuple[float, float]:
        """Home (east, north) of vehicle ``index``, metres."""
        if self.home_positions_enu_m:
            return (self.home_positions_enu_m[2 * index],
                    self.home_positions_enu_m[2 * index + 1])
        row, column = divmod(index, self.home_row_size)
        return (self.home_east_m + column * self.home_spacing_m,
                self.home_north_m + row * self.home_spacing_m)


def _check(ok: bool, name: str, allowed: str, value: object) -> None:
    if not ok:
        raise ValueError(f'AutopilotSimConfig.{name} must be {allowed}, got {value!r}')

