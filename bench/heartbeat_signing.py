"""What signing costs a station heartbeat: sign at the station, verify at a drone.

Workload: the station's heartbeat as it beats (fl_uav/fleet/heartbeat_auth.py), a random
station key. ``sign``: HeartbeatSigner.sign (the beat's key/values, boot, counter, stamp,
the canonical JSON and one Ed25519 signature); ``verify``: HeartbeatVerifier.open of the next
beat in order (the checks, the canonical JSON, one Ed25519 verification, the beat parsed).
Each of ``--beats`` beats is signed, then each is verified; per-beat min and median wall
times. One process, one thread; the ROS message conversion is not included.

    .venv/bin/python bench/heartbeat_signing.py               # 2000 beats
    .venv/bin/python bench/heartbeat_signing.py --beats 10000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from fl_uav.fleet.heartbeat_auth import HeartbeatSigner, HeartbeatVerifier  # noqa: E402
from fl_uav.fleet.station_heartbeat import HEARTBEAT_NAME, PhaseClock  # noqa: E402


def measure(beats: int) -> dict:
    """Per-beat sign and verify times in µs (min and median) over ``beats`` beats."""
    key = Ed25519PrivateKey.generate()
    signer = HeartbeatSigner(key)
    verifier = HeartbeatVerifier(key.public_key(), require=True, max_age_s=15.0,
                                 max_skew_s=10.0)
    clock = PhaseClock('0123456789abcdef', 10, 1.0, 0.0)
    signed, sign_us = [], []
    for i in range(beats):
        beat = clock.beat(float(i))
        start = time.perf_counter()
        values = signer.sign(beat)
        sign_us.append((time.perf_counter() - start) * 1e6)
        signed.append(values)
    verify_us = []
    for values in signed:
        start = time.perf_counter()
        verifier.open(HEARTBEAT_NAME, values)
        verify_us.append((time.perf_counter() - start) * 1e6)
    assert not verifier.refused, verifier.refused
    return {'beats': beats, 'carried_chars': sum(len(k) + len(v) for k, v in signed[-1]),
            **{name: {'min_us': round(min(t), 1), 'median_us': round(statistics.median(t), 1)}
               for name, t in (('sign', sign_us), ('verify', verify_us))}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--beats', type=int, default=2000)
    args = parser.parse_args(argv)
    row = measure(args.beats)
    print(f'{row["beats"]} beats, {row["carried_chars"]} characters of key/values each: '
          f'sign {row["sign"]["min_us"]} / {row["sign"]["median_us"]} µs, verify '
          f'{row["verify"]["min_us"]} / {row["verify"]["median_us"]} µs (min / median)')
    print(json.dumps(row))
    return 0


if __name__ == '__main__':
    sys.exit(main())
