"""The fleet's Ed25519 keys: file names, ``fl-uav keygen``, and each node's signing identity.

One directory layout everywhere (``security.keys_dir``): ``station.key`` / ``station.pub``
for the ground station (frame sender 0xFFFF), ``drone<i>.key`` / ``drone<i>.pub`` for drone
i. Private keys are PKCS#8 PEM with mode 0600, public keys SubjectPublicKeyInfo PEM, so
``openssl genpkey -algorithm ed25519`` / ``openssl pkey -pubout`` make compatible files. A
machine needs only its own private key and the public keys of the nodes it hears from.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

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
PRIVATE_SUFFIX = '.key'
PUBLIC_SUFFIX = '.pub'
PRIVATE_KEY_MODE = 0o600


def key_name(node_id: int) -> str:
    """File stem of a node's keys: 'station' for the ground station, 'drone<i>' for drone i."""
    return STATION_KEY_NAME if node_id == GROUND_STATION_ID else f'drone{node_id}'


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file created with ``mode`` (never readable by others, even
    for an instant); an existing file is refused."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, 'wb') as f:
        f.write(data)
    os.chmod(path, mode)          # the umask may have cleared bits of mode


def generate_fleet_keys(out_dir: str | Path, num_drones: int) -> list[Path]:
    """Write a key pair for the station and for drones 0..num_drones-1 into ``out_dir``;
    returns the files written. Refuses (FileExistsError) to overwrite any key file."""
    if not 1 <= num_drones <= 250:
        raise ValueError(f'the number of drones must be in [1, 250], got {num_drones}')
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [key_name(GROUND_STATION_ID)] + [key_name(d) for d in range(num_drones)]
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


def load_frame_auth(security: SecurityConfig, own_id: int, peers: list[int]) -> FrameAuth:
    """The signing identity of node ``own_id`` (GROUND_STATION_ID or a drone id) that hears
    from ``peers``: its private key and their public keys from ``security.keys_dir``. Without
    keys_dir: FrameAuth() (plain frames, as before). ConfigError naming security.keys_dir
    and the file at fault when a key is missing, unreadable, not Ed25519 or readable by
    others (a node then stops at start, the error logged)."""
    if not security.keys_dir:
        return FrameAuth()
    try:
        return _load(security, own_id, peers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _load(security: SecurityConfig, own_id: int, peers: list[int]) -> FrameAuth:
    folder = Path(security.keys_dir).expanduser()
    own_file = folder / f'{key_name(own_id)}{PRIVATE_SUFFIX}'
    private = load_private_key(_read(own_file, private=True),
                               f'security.keys_dir: {own_file}')
    public = {}
    for peer in peers:
        path = folder / f'{key_name(peer)}{PUBLIC_SUFFIX}'
        public[peer] = load_public_key(_read(path, private=False),
                                       f'security.keys_dir: {path}')
    return FrameAuth(own_id=own_id, private_key=private, public_keys=public,
                     require=security.require_signatures,
                     freshness=Freshness(security.max_frame_age_s, security.max_clock_skew_s))
