"""Figure: the geofence's download / upload time per drone; in docs/benchmarks/fleet.md.

What putting the drone's geofence on the autopilot costs before the first flight.

Times MavsdkVehicle.download_fence and upload_fence (the unmodified MAVSDK 4.x client's geofence
plugin, MAVLink fence protocol over loopback UDP) against the embedded autopilot simulator, with
the fence the drone uploads (the default world's box widened by geofence.autopilot_margin_m):

    .venv/bin/python bench/autopilot_fence_upload.py [--reps 20] [--port 27600]

Prints each repetition's times and the median of each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fl_uav.autopilot_sim.autopilot import AutopilotSim
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.fleet.autopilot_fence import fence_for_autopilot  # noqa: E402
from fl_uav.fleet.config import FleetConfig  # noqa: E402
from fl_uav.planning.geofence import GeofenceConfig  # noqa: E402
from fl_uav.vehicle.mavsdk_vehicle import MavsdkVehicle  # noqa: E402

BIND_OFFSET = 1000


async def _measure(sim: AutopilotSim, url: str, reps: int) -> list[tuple[float, float]]:
    fence = fence_for_autopilot(FleetConfig().geofence_enu(),
                                GeofenceConfig().autopilot_margin_m)
    vehicle = MavsdkVehicle(url, sim.config.origin)
    times = []
    try:
        await vehicle.connect(timeout_s=15.0)
        for _ in range(reps):
            start_s = time.perf_counter()
            await vehicle.download_fence()
            downloaded_s = time.perf_counter()
            await vehicle.upload_fence(fence)
            times.append((downloaded_s - start_s, time.perf_counter() - downloaded_s))
    finally:
        await vehicle.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--reps', type=int, default=20)
    parser.add_argument('--port', type=int, default=27600, help='MAVLink port (sim: +1000)')
    args = parser.parse_args()
    sim = AutopilotSim(AutopilotSimConfig(num_vehicles=1, remote_base_port=args.port,
                                          bind_base_port=args.port + BIND_OFFSET))
    handle = sim.run_in_thread()
    try:
        times = asyncio.run(_measure(sim, f'udpin://127.0.0.1:{args.port}', args.reps))
    finally:
        handle.stop()
    for rep, (download_s, upload_s) in enumerate(times, 1):
        print(f'rep {rep:2d}: download {1e3 * download_s:6.1f} ms, '
              f'upload {1e3 * upload_s:6.1f} ms')
    print(f'median of {len(times)}: download '
          f'{1e3 * statistics.median(t[0] for t in times):.1f} ms, upload '
          f'{1e3 * statistics.median(t[1] for t in times):.1f} ms')


if __name__ == '__main__':
    main()
