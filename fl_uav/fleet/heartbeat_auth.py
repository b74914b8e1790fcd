"""Signed station heartbeats: the station signs each beat, a drone takes only genuine, new
and fresh ones (ROS-free).

Why: a beat keeps a drone's station watchdog (fl_uav/fleet/station_watchdog.py) from
returning it to launch. Unsigned, anyone on the DDS domain could keep the drones hovering
between rounds after the station died, until PX4's battery failsafe: by publishing beats of
its own, or by playing back a capture of the real station's. So with keys the station signs
every beat, and a drone that requires signatures counts a beat as heard only if it is signed
by the station, newer than every beat taken before, and fresh.

What a signed beat carries (docs/wire_format.md, "Signed heartbeats"): the beat's own key/values
(:meth:`Heartbeat.values`) and four more:

* ``boot``: 16 hex digits drawn at random when the station process starts (a new one at every
  start; independent of the run id);
* ``counter``: 1 for the first beat of the boot, one more for each next beat (decimal);
* ``stamp_ms``: the station's wall clock when it signed, UNIX milliseconds (decimal);
* ``signature``: Ed25519 by ``station.key`` (the key the drones already trust for the global
  model), 128 hex digits, over :func:`signed_bytes`: the compact ASCII JSON array
  ``["fl_uav.heartbeat.v1", <status name>, [[key, value], ...]]`` of every other key/value
  pair the status carries, sorted by key, as carried (strings). Any value altered, added or
  removed after signing, the status name included, fails the signature. The status' message
  line, level, hardware id and the header stamp are for display and not signed: a drone reads
  none of them.

What a drone takes (:meth:`HeartbeatVerifier.open`), in this order; a refused beat never
reaches the watchdog and is counted by its reason (``heartbeats_refused`` on the drone's
/diagnostics status, fl_uav/fleet/drone_status.py):

1. ``malformed``: not one status, more than MAX_PAIRS key/values, a key twice, with a
   signature a missing or malformed boot, counter, stamp or signature; a beat field missing
   or out of range (:meth:`Heartbeat.from_values`: checked after the signature, step 3, in a
   signed beat);
2. ``unsigned``: no signature, and the drone requires signatures
   (``security.require_signatures``), or it has taken a signed beat before (a station with keys
   signs every beat, so a plain one after it is someone else's; a restart forgets it, as for
   frames);
3. ``forged``: the signature does not verify with ``station.pub`` (another key, or a field
   altered after signing);
4. ``replayed``: not newer than the beats taken before: of the boot last taken, a counter not
   above the last taken; of a boot it left for a later one (the last LEFT_BOOTS_KEPT boots); of
   another boot, a stamp not later than the last beat taken (a new boot is a station started
   after that beat);
5. ``stale``: signed more than ``security.heartbeat_max_age_s`` before the drone's wall clock,
   or more than ``security.max_clock_skew_s`` after it. Without state (a drone that has just
   restarted) this is what refuses a capture played back later.

Freshness and clocks: the age limit bounds what a capture can do to a drone that restarted,
and what a genuine beat the drone missed (best effort) can do when played back late: it counts
once, at its arrival, so the drone returns at most ``heartbeat_max_age_s`` later than it would
have. The drone and the station compare wall clocks, as for frames: keep both on GPS time (the
companion computer's chrony fed by PX4's SYSTEM_TIME or gpsd) or chrony against the station.
The default 15 s is the frames' clock skew allowance (10 s) plus 5 s for the beat to arrive: a
beat is best effort and either arrives within a second or is lost, so a longer age serves only
replays. A drone whose clock is more than ~the limit ahead of the station's refuses every beat
as ``stale`` and returns after ``flight.station_timeout_s`` (fail safe; its log says by how many
seconds). A station restarted with its clock stepped back behind its previous boot's last beat
is ``replayed`` until its clock passes that beat (or the drone restarts).

Without keys on the drone, or keys without ``require_signatures`` before the first signed beat,
a beat is taken as it is (its signature fields, if any, are ignored): it then proves nothing,
anyone on the domain can send one. The station signs its beats whenever it has keys
(``security.keys_dir``), as it signs its frames.

Cost: one Ed25519 signature per beat at the station and one verification per beat per drone:
~40 µs to sign and ~120 µs to verify a beat, canonical JSON and checks included (median, one
thread of a shared 2-core machine: ``bench/heartbeat_signing.py``), at 1 beat/s.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from fl_uav.compression.codec import GROUND_STATION_ID
from fl_uav.compression.signing import FrameAuth, now_ms
from fl_uav.fleet.config import SecurityConfig
from fl_uav.fleet.station_heartbeat import HEARTBEAT_NAME, Heartbeat

#: The first element of the signed JSON array (no signature of anything else verifies as a beat).
SIGNED_DOMAIN = 'fl_uav.heartbeat.v1'
BOOT_KEY, COUNTER_KEY, STAMP_KEY, SIGNATURE_KEY = 'boot', 'counter', 'stamp_ms', 'signature'
AUTH_KEYS = (BOOT_KEY, COUNTER_KEY, STAMP_KEY, SIGNATURE_KEY)
BOOT_HEX_CHARS = 16
SIGNATURE_HEX_CHARS = 128

MALFORMED, UNSIGNED, FORGED, REPLAYED, STALE = (
    'malformed', 'unsigned', 'forged', 'replayed', 'stale')
#: Every reason a drone refuses a beat for, in the order it checks them.
REFUSAL_REASONS = (MALFORMED, UNSIGNED, FORGED, REPLAYED, STALE)
#: Boots a drone remembers having left for a later one (a station restarts rarely).
LEFT_BOOTS_KEPT = 64
#: The most key/value pairs a beat may carry (a signed one carries 10): more is malformed,
#: refused before anything is sorted or verified.
MAX_PAIRS = 32

_BOOT = re.compile(f'[0-9a-f]{{{BOOT_HEX_CHARS}}}')
_COUNTER = re.compile('[1-9][0-9]{0,17}')       # 1 .. < 10^18: never wraps
_STAMP = re.compile('[0-9]{1,15}')              # UNIX ms: up to the year 33658
_SIGNATURE = re.compile(f'[0-9a-f]{{{SIGNATURE_HEX_CHARS}}}')


class HeartbeatRefused(ValueError):
    """A beat a drone does not count as heard: ``reason`` (one of REFUSAL_REASONS) and a
    message naming the problem."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def signed_bytes(name: str, values: Iterable[tuple[str, str]]) -> bytes:
    """What the signature covers: the compact JSON ``[SIGNED_DOMAIN, name, [[key, value],
    ...]]`` of every pair but the signature, sorted by key, ASCII (anything else escaped as
    ``\\uXXXX``, so no string, not even a lone surrogate, fails to encode; keys are
    unique)."""
    pairs = sorted([k, v] for k, v in values if k != SIGNATURE_KEY)
    return json.dumps([SIGNED_DOMAIN, name, pairs], ensure_ascii=True,
                      separators=(',', ':')).encode('ascii')


class HeartbeatSigner:
    """The station's side: each beat's key/values with its boot, next counter, stamp and
    signature. Thread-safe (one counter per boot, never repeated)."""

    def __init__(self, key: Ed25519PrivateKey, clock_ms: Callable[[], int] = now_ms,
                 boot: str | None = None) -> None:
        self.boot = secrets.token_hex(BOOT_HEX_CHARS // 2) if boot is None else boot
        if not _BOOT.fullmatch(self.boot):
            raise ValueError(f'a boot id is {BOOT_HEX_CHARS} lower-case hex digits, got '
                             f'{self.boot!r}')
        self._key, self._clock_ms = key, clock_ms
        self._counter = 0
        self._lock = threading.Lock()

    def sign(self, beat: Heartbeat) -> tuple[tuple[str, str], ...]:
        """The key/value pairs the signed beat carries (the beat's own, then boot, counter,
        stamp_ms and signature)."""
        with self._lock:
            self._counter += 1
            counter = self._counter
        values = (*beat.values(), (BOOT_KEY, self.boot), (COUNTER_KEY, str(counter)),
                  (STAMP_KEY, str(self._clock_ms())))
        signature = self._key.sign(signed_bytes(HEARTBEAT_NAME, values))
        return (*values, (SIGNATURE_KEY, signature.hex()))


def heartbeat_signer(auth: FrameAuth) -> HeartbeatSigner | None:
    """The station's signer from its frame identity (``station.key``); None without keys (the
    beats go out unsigned)."""
    if auth.private_key is None or auth.own_id != GROUND_STATION_ID:
        return None
    return HeartbeatSigner(auth.private_key)


class HeartbeatVerifier:
    """A drone's side: which beats count as the station heard (module docstring), and how many
    were refused, by reason (:attr:`refused`). ``public_key`` None: a drone without keys (every
    well-formed beat counts). ``clock``: the drone's wall clock, UNIX seconds."""

    def __init__(self, public_key: Ed25519PublicKey | None, *, require: bool,
                 max_age_s: float, max_skew_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        if require and public_key is None:
            raise ValueError("requiring signed heartbeats needs the station's public key")
        self._key, self._require, self._clock = public_key, require, clock
        self._max_age_s, self._max_skew_s = max_age_s, max_skew_s
        self.refused: Counter[str] = Counter()
        self.signed_seen = False        # a signed beat was taken: plain ones are refused
        self.boot: str | None = None    # the boot, counter and stamp of the last beat taken
        self.counter = 0
        self.stamp_ms = 0
        self._left: deque[str] = deque(maxlen=LEFT_BOOTS_KEPT)

    def refuse(self, reason: str, message: str) -> HeartbeatRefused:
        """Count a refusal; the error to raise or log."""
        self.refused[reason] += 1
        return HeartbeatRefused(reason, message)

    def open(self, name: str, values: Sequence[tuple[str, str]]) -> Heartbeat:
        """The beat a status (its name and key/value pairs) carries, if it counts as the
        station heard; HeartbeatRefused (counted) naming the problem otherwise. The drone's
        state (last boot, counter and stamp) moves only with a beat taken."""
        if len(values) > MAX_PAIRS:
            raise self.refuse(MALFORMED, f'heartbeat with {len(values)} key/value pairs, more '
                                         f'than {MAX_PAIRS}')
        fields = dict(values)
        if len(fields) != len(values):
            twice = sorted(k for k, n in Counter(k for k, _ in values).items() if n > 1)
            raise self.refuse(MALFORMED, f'heartbeat with keys {twice} more than once')
        if SIGNATURE_KEY not in fields or self._key is None:
            return self._plain(name, fields)
        boot, counter, stamp_ms = self._auth_fields(fields)
        try:
            self._key.verify(bytes.fromhex(fields[SIGNATURE_KEY]), signed_bytes(name, values))
        except InvalidSignature:
            raise self.refuse(FORGED, f'heartbeat of boot {boot} counter {counter}: the '
                                      f'signature does not verify with station.pub (signed '
                                      f'with another key, or altered after signing)') from None
        beat = self._beat(name, fields)
        self._check_order(boot, counter, stamp_ms)
        self._check_fresh(boot, counter, stamp_ms)
        if boot != self.boot and self.boot is not None:
            self._left.append(self.boot)
        self.boot, self.counter, self.stamp_ms = boot, counter, stamp_ms
        self.signed_seen = True
        return beat

    def _plain(self, name: str, fields: dict[str, str]) -> Heartbeat:
        if self._require:
            raise self.refuse(UNSIGNED, 'unsigned heartbeat, and this drone requires signed '
                                        'ones (security.require_signatures)')
        if self.signed_seen:
            raise self.refuse(UNSIGNED, 'unsigned heartbeat, but the station has signed its '
                                        'heartbeats before (another sender?)')
        return self._beat(name, fields)

    def _beat(self, name: str, fields: dict[str, str]) -> Heartbeat:
        try:
            return Heartbeat.from_values(name, fields)
        except ValueError as exc:
            raise self.refuse(MALFORMED, str(exc)) from None

    def _auth_fields(self, fields: dict[str, str]) -> tuple[str, int, int]:
        """boot, counter, stamp_ms of a signed beat (its signature well formed too)."""
        bad = [k for k, pattern in ((BOOT_KEY, _BOOT), (COUNTER_KEY, _COUNTER),
                                    (STAMP_KEY, _STAMP), (SIGNATURE_KEY, _SIGNATURE))
               if not pattern.fullmatch(fields.get(k, ''))]
        if bad:
            raise self.refuse(MALFORMED, f'signed heartbeat with a missing or malformed '
                                         f'{", ".join(bad)} (boot: {BOOT_HEX_CHARS} hex '
                                         f'digits, counter: 1 or more, stamp_ms: UNIX ms, '
                                         f'signature: {SIGNATURE_HEX_CHARS} hex digits)')
        return fields[BOOT_KEY], int(fields[COUNTER_KEY]), int(fields[STAMP_KEY])

    def _check_order(self, boot: str, counter: int, stamp_ms: int) -> None:
        if boot == self.boot:
            if counter <= self.counter:
                raise self.refuse(REPLAYED, f'heartbeat of boot {boot} counter {counter}, '
                                            f'not after the last taken ({self.counter})')
        elif boot in self._left:
            raise self.refuse(REPLAYED, f'heartbeat of boot {boot}, a station boot left for '
                                        f'a later one ({self.boot})')
        elif self.boot is not None and stamp_ms <= self.stamp_ms:
            raise self.refuse(REPLAYED, f'heartbeat of boot {boot} signed at {stamp_ms} ms, '
                                        f'not after the last taken (boot {self.boot} at '
                                        f'{self.stamp_ms} ms): not a later station start')

    def _check_fresh(self, boot: str, counter: int, stamp_ms: int) -> None:
        age_s = self._clock() - stamp_ms / 1000.0
        if age_s > self._max_age_s:
            raise self.refuse(STALE, f'heartbeat of boot {boot} counter {counter} signed '
                                     f'{age_s:.1f} s ago, more than security.heartbeat_max_'
                                     f'age_s {self._max_age_s:g} s (a capture played back, or '
                                     f"this drone's clock ahead of the station's)")
        if -age_s > self._max_skew_s:
            raise self.refuse(STALE, f'heartbeat of boot {boot} counter {counter} signed '
                                     f'{-age_s:.1f} s in the future, more than security.max_'
                                     f"clock_skew_s {self._max_skew_s:g} s (the station's "
                                     f'clock is ahead: sync the clocks, GPS time or chrony)')


def heartbeat_verifier(auth: FrameAuth, security: SecurityConfig,
                       clock: Callable[[], float] = time.time) -> HeartbeatVerifier:
    """A drone's verifier from its frame identity (``station.pub``, None without keys) and
    ``security.*`` (require_signatures, heartbeat_max_age_s, max_clock_skew_s; without keys,
    security.insecure, nothing is signed and nothing required)."""
    return HeartbeatVerifier(auth.public_keys.get(GROUND_STATION_ID),
                             require=security.require_signatures and bool(security.keys_dir),
                             max_age_s=security.heartbeat_max_age_s,
                             max_skew_s=security.max_clock_skew_s, clock=clock)
