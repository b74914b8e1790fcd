"""The fleet's Ed25519 keys: file names, ``fl-uav keygen``, and each node's signing identity.

One directory layout everywhere (``security.keys_dir``): ``station.key`` / ``station.pub``
for the ground station (frame sender 0xFFFF), ``drone<i>.key`` / ``drone<i>.pub`` for drone
i, and in ``mode: express`` ``gc<j>.key`` / ``gc<j>.pub`` for FedEx ground client j. Private
keys are PKCS#8 PEM with mode 0600, public keys SubjectPublicKeyInfo PEM, so
``openssl genpkey -algorithm ed25519`` / ``openssl pkey -pubout`` make compatible files. A
machine needs only its own private key and the public keys of the nodes it hears from.

Sender ids: a ground client signs its CLU frames as its client id j, the sender those frames
already carry (docs/wire_format.md, "FedEx express mode"), so ids 0, 1, ... name a drone on
the station's and the clients' links and a ground client on a UAV's CLU topic. The receiver
knows which from the link: a UAV opens CLUs with the clients' public keys only
(:func:`visit_auth`), a client opens deliveries with the drones' only
(:func:`load_ground_client_auth`), so a drone key never passes for a client's or the reverse.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from fl_uav.compression.codec import GROUND_STATION_ID
from fl_uav.compression.signing import (
    FrameAuth,
    Freshness,
    load_private_key,
    load_public_key,
    private_key_pem,
    public_key_pem,
)
from fl_uav.configschema import ConfigError
from fl_uav.fleet.config import SecurityConfig

STATION_KEY_NAME = 'station'
GROUND_CLIENT_KEY_PREFIX = 'gc'
MAX_KEYGEN_DRONES = 250
MAX_KEYGEN_GROUND_CLIENTS = 1000
PRIVATE_SUFFIX = '.key'
PUBLIC_SUFFIX = '.pub'
PRIVATE_KEY_MODE = 0o600


def key_name(node_id: int) -> str:
    """File stem of a node's keys: 'station' for the ground station, 'drone<i>' for drone i."""
    return STATION_KEY_NAME if node_id == GROUND_STATION_ID else f'drone{node_id}'


def ground_client_key_name(client_id: int) -> str:
    """File stem of FedEx ground client j's keys: 'gc<j>' (as its namespace /gc<j>)."""
    return f'{GROUND_CLIENT_KEY_PREFIX}{client_id}'


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file created with ``mode`` (never readable by others, even
    for an instant); an existing file is refused."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, 'wb') as f:
        f.write(data)
    os.chmod(path, mode)          # the umask may have cleared bits of mode


def generate_fleet_keys(out_dir: str | Path, num_drones: int,
                        num_ground_clients: int = 0) -> list[Path]:
    """Write a key pair for the station, for drones 0..num_drones-1 and for ground clients
    0..num_ground_clients-1 (``mode: express``) into ``out_dir``; returns the files written.
    Refuses (FileExistsError) to overwrite any key file."""
    if not 1 <= num_drones <= MAX_KEYGEN_DRONES:
        raise ValueError(f'the number of drones must be in [1, {MAX_KEYGEN_DRONES}], got '
                         f'{num_drones}')
    if not 0 <= num_ground_clients <= MAX_KEYGEN_GROUND_CLIENTS:
        raise ValueError(f'the number of ground clients must be in '
                         f'[0, {MAX_KEYGEN_GROUND_CLIENTS}], got {num_ground_clients}')
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = ([key_name(GROUND_STATION_ID)] + [key_name(d) for d in range(num_drones)]
             + [ground_client_key_name(j) for j in range(num_ground_clients)])
    taken = [out / f'{n}{s}' for n in names for s in (PRIVATE_SUFFIX, PUBLIC_SUFFIX)
             if (out / f'{n}{s}').exists()]
    if taken:
        raise FileExistsError(f'key files exist already, not overwritten: '
                              f'{", ".join(str(p) for p in taken)}')
    written = []
    for name in names:
        key = Ed25519PrivateKey.generate()
        private, public = out / f'{name}{PRIVATE_SUFFIX}', out / f'{name}{PUBLIC_SUFFIX}'
        _write(private, private_key_pem(key), PRIVATE_KEY_MODE)
        _write(public, public_key_pem(key.public_key()), 0o644)
        written += [private, public]
    return written


def _read(path: Path, private: bool) -> bytes:
    what = f'security.keys_dir: {path}'
    try:
        mode = path.stat().st_mode
        if private and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ValueError(f'{what}: a private key readable by others (mode '
                             f'{stat.S_IMODE(mode):o}); chmod 600 it')
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f'{what}: cannot read the key ({exc.strerror})') from None


def require_keys(security: SecurityConfig, node: str) -> None:
    """ConfigError unless ``node`` ('drone 0', 'the ground station', ...) has keys
    (security.keys_dir) or the config says it runs without them (security.insecure): secure
    by default, a node without keys would send unsigned frames and take unsigned ones, whose
    sender anyone can claim to be."""
    if security.keys_dir or security.insecure:
        return
    raise ConfigError(f'{node} has no keys (security.keys_dir is empty): it would send '
                      f'unsigned frames and take unsigned ones, whose sender anyone can claim '
                      f"to be. Make the fleet's keys (fl-uav keygen --out DIR) and set "
                      f'security.keys_dir, or set security.insecure: true to run unsigned '
                      f'(a bench, not a field)')


def load_frame_auth(security: SecurityConfig, own_id: int, peers: Iterable[int], *,
                    own_name: str | None = None,
                    peer_name: Callable[[int], str] = key_name) -> FrameAuth:
    """The signing identity of node ``own_id`` (GROUND_STATION_ID, a drone id, or with
    ``own_name`` another key's file stem) that hears from ``peers`` (their file stems from
    ``peer_name``): its private key and their public keys from ``security.keys_dir``.
    Without keys_dir: FrameAuth() (plain frames, as before). ConfigError naming
    security.keys_dir and the file at fault when a key is missing, unreadable, not Ed25519
    or readable by others (a node then stops at start, the error logged)."""
    if not security.keys_dir:
        return FrameAuth()
    try:
        folder = Path(security.keys_dir).expanduser()
        own_file = folder / f'{own_name or key_name(own_id)}{PRIVATE_SUFFIX}'
        private = load_private_key(_read(own_file, private=True),
                                   f'security.keys_dir: {own_file}')
        public = _load_public_keys(folder, peers, peer_name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return FrameAuth(own_id=own_id, private_key=private, public_keys=public,
                     require=security.require_signatures,
                     freshness=Freshness(security.max_frame_age_s, security.max_clock_skew_s))


def _load_public_keys(folder: Path, peers: Iterable[int], peer_name: Callable[[int], str]
                      ) -> dict[int, Ed25519PublicKey]:
    public = {}
    for peer in peers:
        path = folder / f'{peer_name(peer)}{PUBLIC_SUFFIX}'
        public[peer] = load_public_key(_read(path, private=False),
                                       f'security.keys_dir: {path}')
    return public


def load_ground_client_auth(security: SecurityConfig, client_id: int,
                            num_drones: int) -> FrameAuth:
    """FedEx ground client j's identity: ``gc<j>.key`` (it signs its CLUs as sender j) and
    the public keys ``drone<i>.pub`` of the UAVs that deliver to it (i < num_drones)."""
    return load_frame_auth(security, client_id, range(num_drones),
                           own_name=ground_client_key_name(client_id))


def visit_auth(drone_auth: FrameAuth, security: SecurityConfig,
               num_clients: int) -> FrameAuth:
    """A UAV's identity on its visit link: its own drone key from ``drone_auth`` (it signs
    its deliveries as itself, as its updates) and the public keys ``gc<j>.pub`` of the
    ground clients whose CLUs it opens (j < num_clients), instead of the station's. Without
    keys_dir: ``drone_auth`` (FrameAuth(), plain frames). ConfigError as load_frame_auth."""
    if not security.keys_dir:
        return drone_auth
    try:
        public = _load_public_keys(Path(security.keys_dir).expanduser(), range(num_clients),
                                   ground_client_key_name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return dataclasses.replace(drone_auth, public_keys=public)
