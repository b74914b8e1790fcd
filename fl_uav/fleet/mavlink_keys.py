"""Each drone's MAVLink signing key (``flight.mavlink_signing``, ``flight.mavlink_key_file``):
loaded for the drone node, and made for a run of the embedded fleet with the simulated
autopilots holding them.

These keys sign the MAVLink link between a drone's companion computer and its autopilot
(fl_uav/vehicle/mavlink_signing.py); they are not the fleet's Ed25519 frame keys
(fl_uav/fleet/keys.py, ``security.keys_dir``), which sign the learning traffic over DDS.
"""

from __future__ import annotations

from pathlib import Path

from fl_uav.autopilot_sim.signing import key_file_path, write_px4_key_file
from fl_uav.configschema import ConfigError
from fl_uav.fleet.config import FlightConfig
from fl_uav.vehicle.mavlink_signing import (
    SigningError,
    generate_key,
    now_ticks,
    read_key_file,
    write_key_file,
)

#: ``fl-uav sim``: drone i's key file in the run's MAVLink keys directory
DRONE_KEY_PATTERN = 'drone{drone}.key'


def drone_mavlink_key(flight: FlightConfig, drone_id: int) -> bytes | None:
    """Drone ``drone_id``'s MAVLink signing key, or None with ``flight.mavlink_signing``
    false. ConfigError naming the keys when signing is on and the key file is not set, or is
    missing, unreadable, readable by others or not a key: secure by default, a drone does
    not fly an unsigned link its config asks to sign."""
    if not flight.mavlink_signing:
        return None
    path = flight.mavlink_key_for(drone_id)
    if not path:
        raise ConfigError(
            f'drone {drone_id}: flight.mavlink_signing is true but flight.mavlink_key_file is '
            f"empty: make a key (fl-uav mavlink-key new PATH), put it on the drone's PX4 "
            f'(fl-uav mavlink-key provision --key PATH --url serial:///dev/ttyACM0:57600, '
            f'over USB) and set flight.mavlink_key_file; or set flight.mavlink_signing: false '
            f'for a PX4 without signing (anyone on the link can then command the vehicle)')
    try:
        return read_key_file(path)
    except SigningError as exc:
        raise ConfigError(f'drone {drone_id}: flight.mavlink_key_file: {exc}') from None


def make_sim_keys(keys_dir: str | Path, state_dir: str | Path, num_drones: int) -> str:
    """Keys for a run of the embedded fleet: a new key per drone in ``keys_dir``
    (DRONE_KEY_PATTERN, replacing the previous run's) and the same key in simulated vehicle
    i's storage under ``state_dir`` (PX4's key file, as if provisioned: the simulator loads it
    at start). Returns the ``flight.mavlink_key_file`` pattern for the drones."""
    keys_dir, state_dir = Path(keys_dir), Path(state_dir)
    for stale in keys_dir.glob(DRONE_KEY_PATTERN.replace('{drone}', '*')):
        stale.unlink()
    for drone in range(num_drones):
        key = generate_key()
        write_key_file(keys_dir / DRONE_KEY_PATTERN.format(drone=drone), key)
        write_px4_key_file(key_file_path(state_dir, drone), key, now_ticks())
    return str(keys_dir.resolve() / DRONE_KEY_PATTERN)
