"""Figure: the fleet over lossy and slow links; in docs/benchmarks/links.md (issue 25 item 3).

The station and the drones in separate network namespaces joined by a veth pair
(fl_uav.fleet_run.netns): DDS crosses it by unicast (ROS_STATIC_PEERS), MAVLink stays on the
air side. Each scenario shapes both ends' egress (tc tbf caps the bandwidth, nftables drops
packets at random) or cuts the link for 30 s mid-round, runs ``fl-uav sim``'s fleet with the
same seed and config, and records: rounds completed, participants per round, updates missing
at their round's close and updates that came after it, final accuracy against the lossless
run, the bytes the link carried against the payload bytes (updates up, model down).

Needs root, ip, tc and nft. Run it under nice on a shared machine:

    nice -n 10 .venv/bin/python bench/lossy_links.py --out /tmp/links
    nice -n 10 .venv/bin/python bench/lossy_links.py --out /tmp/links \
        --scenarios lossless,loss20_20mbit \
        --drones 2 --rounds 3 --set learning.model=tiny_cnn
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fl_uav.fleet_run.netns import (  # noqa: E402
    LinkShape,
    Outage,
    fleet_run_over_link,
    unavailable_reason,
)

SCENARIOS = {
    'lossless': (LinkShape(), None),
    'loss10': (LinkShape(loss_pct=10.0), None),
    'loss20': (LinkShape(loss_pct=20.0), None),
    '20mbit': (LinkShape(rate_mbit=20.0), None),
    'loss20_20mbit': (LinkShape(loss_pct=20.0, rate_mbit=20.0), None),
    'drop30s': (LinkShape(), Outage(round_index=2, after_s=10.0, duration_s=30.0)),
    # loss per Ethernet frame on the way in (a lost IP fragment loses its datagram)
    'frames2': (LinkShape(loss_pct=2.0, per_frame=True), None),
    'frames20_20mbit': (LinkShape(loss_pct=20.0, rate_mbit=20.0, per_frame=True), None),
}
DEFAULT_SCENARIOS = ('lossless', 'loss10', 'loss20', '20mbit', 'loss20_20mbit', 'drop30s')


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _port_base() -> int:
    """A random MAVLink port block (the air namespace has its own ports; the start check
    looks in this one)."""
    return random.Random().randint(20000, 38000)


def _order(name: str) -> tuple[int, str]:
    scenario = name.split('.')[0]
    return (list(SCENARIOS).index(scenario) if scenario in SCENARIOS else len(SCENARIOS), name)


def table(reports: dict[str, dict]) -> str:
    """The markdown table of the runs' reports (name: scenario, or scenario.k for the k-th
    repeat); accuracy against the mean of the lossless runs."""
    lossless = [r['final_accuracy'] for name, r in reports.items()
                if name.split('.')[0] == 'lossless' and r['final_accuracy'] is not None]
    base = sum(lossless) / len(lossless) if lossless else None
    lines = ['| scenario | status | rounds | participants per round | missing at close | '
             'late arrivals | final accuracy | vs lossless (points) | payload MB | wire MB | '
             'wire / payload | dropped MB | UDP rcvbuf drops | wall s |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    for name, r in reports.items():
        acc = r['final_accuracy']
        diff = (f'{100 * (acc - base):+.1f}' if acc is not None and base is not None else '-')
        ratio = (f'{r["wire_bytes"] / r["payload_bytes"]:.2f}' if r['payload_bytes'] else '-')
        outage = r.get('outage') or {}
        label = name + (f' (link down {outage.get("began_s", "?")}-{outage.get("ended_s", "?")}'
                        ' s)' if outage else '')
        lines.append(
            f'| {label} | {r["status"]} | {r["rounds_completed"]}/{r["rounds_configured"]} | '
            f'{",".join(map(str, r["participants"]))} | {r["missing_at_close"]} | '
            f'{r["late_arrivals"]} | {"-" if acc is None else f"{acc:.3f}"} | {diff} | '
            f'{r["payload_bytes"] / 1e6:.2f} | {r["wire_bytes"] / 1e6:.2f} | {ratio} | '
            f'{r["dropped_bytes"] / 1e6:.2f} | {r.get("udp_rcvbuf_errors", "-")} | '
            f'{r["wall_time_s"]:.0f} |')
    return '\n'.join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('--scenarios', default=','.join(DEFAULT_SCENARIOS),
                        help=f'comma-separated, of {", ".join(SCENARIOS)} (one named twice '
                             f'runs twice)')
    parser.add_argument('--drones', type=int, default=3)
    parser.add_argument('--rounds', type=int, default=6)
    parser.add_argument('--config', type=Path, default=REPO / 'config' / 'fleet.yaml')
    parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                        help='config override, for every scenario')
    parser.add_argument('--timeout', type=float, default=1200.0)
    parser.add_argument('--repeats', type=int, default=1,
                        help='run the scenario list this many times (interleaved)')
    parser.add_argument('--table', type=Path, nargs='*', metavar='DIR',
                        help='only print the table of the runs saved in DIR/*.json')
    args = parser.parse_args()
    if args.table is not None:
        saved = {}
        for folder in args.table or [args.out]:
            for path in sorted(folder.glob('*.json'), key=lambda p: _order(p.stem)):
                saved[path.stem] = json.loads(path.read_text())
        print(table(saved))
        return 0
    reason = unavailable_reason()
    if reason:
        print(f'cannot run: {reason}', file=sys.stderr)
        return 2
    overrides = {'num_drones': args.drones, 'rounds.num_rounds': args.rounds,
                 'autopilot.time_factor': 10.0}
    for item in args.set:
        key, _, text = item.partition('=')
        overrides[key] = _value(text)
    reports: dict[str, dict] = {}
    started = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    runs, seen = [], {}
    for scenario in args.scenarios.split(',') * args.repeats:   # a repeat: scenario.k
        seen[scenario] = seen.get(scenario, 0) + 1
        runs.append((scenario if seen[scenario] == 1 else f'{scenario}.{seen[scenario]}',
                     scenario))
    for index, (name, scenario) in enumerate(runs):
        shape, outage = SCENARIOS[scenario]
        port = _port_base()
        run_overrides = {**overrides, 'flight.port_base': port,
                         'autopilot.remote_base_port': port,
                         'autopilot.bind_base_port': port + 1000}
        out = args.out / name
        log = (args.out / f'{name}.log')
        args.out.mkdir(parents=True, exist_ok=True)
        with open(log, 'w') as stream:
            def echo(line: str, stream=stream) -> None:
                stream.write(line + '\n')
                stream.flush()

            report = fleet_run_over_link(
                [args.config], run_overrides, out, shape, f'fll{os.getpid() % 10000}{index}',
                outage=outage, domain_id=random.randint(1, 100), timeout_s=args.timeout,
                echo=echo)
        reports[name] = report
        (args.out / f'{name}.json').write_text(json.dumps(report, indent=2))
        print(f'{name}: {report["status"]}, {report["rounds_completed"]} rounds, accuracy '
              f'{report["final_accuracy"]}, wire {report["wire_bytes"] / 1e6:.2f} MB, '
              f'{report["wall_time_s"]:.0f} s', flush=True)
    print()
    print(f'{started}; {args.drones} drones, {args.rounds} rounds, overrides '
          f'{json.dumps(overrides)}')
    print()
    print(table(reports))
    (args.out / 'table.md').write_text(table(reports) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
