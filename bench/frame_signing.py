"""Figure: what signing costs a frame (encode, seal, open, decode); in docs/benchmarks/fleet.md.

What signing costs a frame: Ed25519 envelope (wire version 4) seal and open, next to the
plain v1 encode and decode of the same global-model frame.

Workload: the fleet's models (the GLOBAL_MODEL frame the station sends each round: every
tensor dense float32, the usual metadata), random keys. For each model, interleaved and
``--reps`` times each after a warm-up: ``encode`` (encode_frame), ``seal`` (sign_frame of the
encoded frame: SHA-512 of the whole frame inside Ed25519), ``open`` (open_frame with the
freshness window: CRC32 + signature verification, zero-copy), ``decode`` (decode_frame of the
opened inner frame). Min and median wall times, and bytes. One process, one thread.

    .venv/bin/python bench/frame_signing.py                # 50 reps
    .venv/bin/python bench/frame_signing.py --reps 200 --models tiny_cnn,small_cnn
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

import torch  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from fl_uav.compression.codec import (  # noqa: E402
    GROUND_STATION_ID,
    DecodeLimits,
    FrameKind,
    decode_frame,
    encode_frame,
)
from fl_uav.compression.signing import Freshness, open_frame, sign_frame  # noqa: E402
from fl_uav.learning.models import build_model  # noqa: E402
from fl_uav.learning.weights import architecture_fingerprint, get_weights  # noqa: E402
from fl_uav.world.landcover import CLASS_NAMES  # noqa: E402

METADATA = {'deadline_s': 60.0, 'num_rounds': 10, 'run_id': '0123456789abcdef',
            'run_started_ms': 1_764_000_000_000, 'knobs': {}}


def _time_ms(fn, reps: int) -> tuple[float, float]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times), statistics.median(times)


def measure(model_name: str, reps: int) -> dict:
    """Times (ms, min and median) of encode, seal, open and decode for one model's frame."""
    weights = get_weights(build_model(model_name, len(CLASS_NAMES), 32, seed=0))
    fingerprint = architecture_fingerprint(weights)
    key = Ed25519PrivateKey.generate()
    public = {GROUND_STATION_ID: key.public_key()}
    limits = DecodeLimits(max_frame_bytes=1 << 30)
    freshness = Freshness(300.0, 10.0)
    frame = encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, fingerprint, weights,
                         METADATA)
    signed = sign_frame(frame, GROUND_STATION_ID, key)
    steps = {
        'encode': lambda: encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID,
                                       fingerprint, weights, METADATA),
        'seal': lambda: sign_frame(frame, GROUND_STATION_ID, key),
        'open': lambda: open_frame(signed, limits, public, True, freshness),
        'decode': lambda: decode_frame(open_frame(signed, limits, public, True, freshness),
                                       limits, expected_fingerprint=fingerprint),
    }
    for fn in steps.values():      # warm-up
        fn()
    times = {name: [] for name in steps}
    for _ in range(reps):           # interleaved
        for name, fn in steps.items():
            times[name].append(_time_ms(fn, 1)[0])
    return {'model': model_name, 'frame_bytes': len(frame), 'signed_bytes': len(signed),
            **{name: {'min_ms': round(min(t), 3), 'median_ms': round(statistics.median(t), 3)}
               for name, t in times.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--reps', type=int, default=50)
    parser.add_argument('--models', default='tiny_cnn,small_cnn,lenet5')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = [measure(name, args.reps) for name in args.models.split(',')]
    print(f'{"model":<10} {"frame B":>9} {"signed B":>9} '
          + ' '.join(f'{s + " ms (min/med)":>22}' for s in ('encode', 'seal', 'open',
                                                               'decode')))
    for row in rows:
        print(f'{row["model"]:<10} {row["frame_bytes"]:>9} {row["signed_bytes"]:>9} '
              + ' '.join(f'{row[s]["min_ms"]:>10.3f} /{row[s]["median_ms"]:>10.3f}'
                         for s in ('encode', 'seal', 'open', 'decode')))
    print(json.dumps(rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())
