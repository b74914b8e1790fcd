"""Figure: engine vs plain loop vs Flower 1.41 (`make bench`); in docs/benchmarks/engine.md.

Speed of the vectorized multi-client trainer against a plain sequential PyTorch loop.

Workload: the Flower yardstick of docs/reference/flower_baseline.md §2 (bench/_workload.py,
shared with flower_app.py). sklearn digits (8×8, stratified 150/class train, 297 test, seed 0),
label-shard non-IID split with 2 classes per client, the CNN
Conv2d(1,16,3,p=1)-ReLU-Conv2d(16,32,3,p=1)-ReLU-MaxPool2d(2)-Flatten-Linear(512,64)-ReLU-
Linear(64,10) initialised with torch.manual_seed(0); every round each of N
clients does 1 local epoch, batch 16, SGD lr 0.05 without momentum, shuffled by torch.randperm
with a per-(round, client) seed; FedAvg weighted by samples (float32 numpy, accumulated in
client order); the global model is evaluated on the test set after every round.

Engines, each run in its own fresh process (wall time = the whole process, as in the
reference, so interpreter start, imports and data loading are included):

    plain       the reference's sequential loop: one nn.Module, torch.optim.SGD per client
    plain_gc    the same loop with the garbage-collector handling of `fl-uav experiment`
                (collector paused while importing, gc.freeze() after and at exit)
    vectorized  fl_uav.learning.vectorized.VectorizedTrainer (its default 'stacked' backend)
    vmap        the same trainer forced to its torch.func.vmap backend (--engines to add it)
    experiment  the whole experiment engine through its config path
                (config/experiments/yardstick_digits.yaml: its own loader, split, Strategy,
                netmodel clock, rounds.csv, checkpoints, summary and plots)
    experiment_w2   the same with engine.workers=2: chunks of drones trained on both cores
    experiment_seq  the same with engine.vectorized=false: the engine's sequential reference

Both use 1 torch thread. Usage:

    .venv/bin/python bench/vectorized_training.py                 # 3 reps, both sizes
    .venv/bin/python bench/vectorized_training.py --reps 5 --sizes 100x10
    .venv/bin/python bench/vectorized_training.py --engines plain,vectorized,vmap --reps 2
    .venv/bin/python bench/vectorized_training.py --worker --engine vectorized --clients 10 \
        --rounds 30                                               # one run, prints RESULT json

Needs scikit-learn (for the digits data set).
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from _workload import (  # noqa: E402
    BATCH_SIZE,
    LR,
    label_shards,
    load_split,
    make_model,
    shuffle_seed,
)

REPO = Path(__file__).resolve().parents[1]
# Flower-baseline figures (flower_baseline.md §3, quiet machine, min wall of 3 runs, flower_c1).
FLOWER_WALL_S = {10: 26.6, 100: 29.9}
ENGINES = ('plain', 'plain_gc', 'vectorized', 'vmap', 'experiment', 'experiment_w2',
           'experiment_seq', 'flower')
YARDSTICK_CONFIG = REPO / 'config' / 'experiments' / 'yardstick_digits.yaml'
FLOWER_PYTHON = Path(__file__).resolve().parent / '.venv-flower' / 'bin' / 'python'


# ------------------------------------------------------------------ worker ----
def fedavg(weighted: list[tuple[dict, int]]) -> dict:
    """Sample-weighted mean of float32 numpy dicts, accumulated in client order."""
    total = float(sum(n for _, n in weighted))
    merged: dict = {}
    for weights, n in weighted:
        share = n / total
        for name, value in weights.items():
            if name in merged:
                merged[name] += value * share
            else:
                merged[name] = value * share
    return merged


def run_flower_worker(num_clients: int, rounds: int) -> dict:
    """Flower 1.41's simulation of the same workload (run inside bench/.venv-flower)."""
    import flower_app
    from flwr.simulation import run_simulation

    t_imported = time.perf_counter()
    flower_app.SETTINGS.update(clients=num_clients, rounds=rounds)
    run_simulation(server_app=flower_app.server_app, client_app=flower_app.client_app,
                   num_supernodes=num_clients,
                   backend_config={'client_resources': {'num_cpus': 1, 'num_gpus': 0.0}})
    log = flower_app.ROUND_LOG
    stamps = [t for _, t, _ in log]
    round_times = [b - a for a, b in zip(stamps, stamps[1:])]
    return {
        'engine': 'flower', 'clients': num_clients, 'rounds': rounds, 'chunk': 0,
        'import_s': t_imported - T_START, 'setup_s': stamps[0] - t_imported,
        'rounds_s': stamps[-1] - stamps[0], 'round1_s': round_times[0],
        'steady_s_per_round': statistics.median(round_times[1:]) if rounds > 1 else None,
        'train_s': 0.0, 'aggregate_s': 0.0, 'evaluate_s': 0.0,
        'final_acc': log[-1][2], 'acc_curve': [round(a, 4) for _, _, a in log],
        'samples_per_client': [],
        # The driver only: Ray's own processes are not counted (the reference's monitor did).
        'maxrss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_experiment_worker(engine: str, num_clients: int, rounds: int, chunk: int) -> dict:
    """The experiment engine through its command line, in this process (`fl-uav experiment
    config/experiments/yardstick_digits.yaml --set num_drones=N --set num_rounds=R`):
    its data loader and split, partition, Strategy, netmodel clock, rounds.csv, checkpoints,
    summary and plots. 'experiment_seq' is the same with engine.vectorized=false, the engine's
    sequential reference path."""
    import contextlib
    import csv
    import tempfile

    from fl_uav.cli import main as fl_uav_main  # the command imports the engine itself

    t_main = time.perf_counter()
    overrides = {'num_drones': num_clients, 'num_rounds': rounds,
                 'engine.vectorized': str(engine != 'experiment_seq').lower(),
                 'engine.max_clients_per_chunk': chunk,
                 'engine.workers': 2 if engine == 'experiment_w2' else 1}
    with tempfile.TemporaryDirectory() as out:
        argv = ['experiment', str(YARDSTICK_CONFIG), '--out', out]
        for key, value in overrides.items():
            argv += ['--set', f'{key}={value}']
        with contextlib.redirect_stdout(io.StringIO()):   # the progress bar
            code = fl_uav_main(argv)
        main_s = time.perf_counter() - t_main
        if code:
            raise RuntimeError(f'fl-uav {" ".join(argv)} exited with {code}')
        from fl_uav.engine.results import ROUNDS_FILE, SUMMARY_FILE
        summary = json.loads((Path(out) / SUMMARY_FILE).read_text())
        with open(Path(out) / ROUNDS_FILE, newline='') as f:
            rows = list(csv.DictReader(f))
    round_times = [float(r['wall_s']) for r in rows]
    rounds_s = sum(round_times)
    return {
        'engine': engine, 'clients': num_clients, 'rounds': rounds, 'chunk': chunk,
        # import_s: up to the engine's start (imports, config) plus its summary and plots
        'import_s': t_main - T_START + main_s - summary['wall_s'],
        'setup_s': summary['wall_s'] - rounds_s,
        'rounds_s': rounds_s, 'round1_s': round_times[0],
        'steady_s_per_round': statistics.median(round_times[1:]) if rounds > 1 else None,
        'train_s': 0.0, 'aggregate_s': 0.0, 'evaluate_s': 0.0,
        'final_acc': float(rows[-1]['accuracy']),
        'acc_curve': [round(float(r['accuracy']), 4) for r in rows],
        'samples_per_client': [],
        'maxrss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_worker(engine: str, num_clients: int, rounds: int, chunk: int) -> dict:
    """One full federated run in this process; returns timings and accuracy."""
    if engine == 'flower':
        return run_flower_worker(num_clients, rounds)
    if engine.startswith('experiment'):
        return run_experiment_worker(engine, num_clients, rounds, chunk)
    if engine == 'plain_gc':   # the plain loop with the command's garbage-collector handling
        import atexit
        import gc

        gc.disable()
        import sklearn.datasets  # noqa: F401
        import torch
        gc.freeze()
        gc.enable()
        atexit.register(gc.freeze)
        engine = 'plain'
    import torch
    from torch import nn

    if engine != 'plain':  # the plain loop imports nothing of fl_uav
        from fl_uav.learning.training import TrainConfig
        from fl_uav.learning.vectorized import VectorizedTrainer, torch_epoch_orders
    torch.set_num_threads(1)
    t_imported = time.perf_counter()
    x_train, y_train, x_test, y_test = load_split()
    parts = label_shards(y_train, num_clients)
    clients_np = [(x_train[p], y_train[p]) for p in parts]
    clients_t = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in clients_np]
    test_x, test_y = torch.from_numpy(x_test), torch.from_numpy(y_test)
    model = make_model()
    global_weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    evaluator = make_model()

    @torch.no_grad()
    def evaluate(weights: dict) -> float:
        evaluator.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        evaluator.eval()
        return float((evaluator(test_x).argmax(1) == test_y).float().mean())

    def plain_round(server_round: int, weights: dict) -> list[tuple[dict, int]]:
        worker = model
        state = {k: torch.from_numpy(v) for k, v in weights.items()}
        results = []
        for pid, (x, y) in enumerate(clients_t):
            worker.load_state_dict(state)
            worker.train()
            optimizer = torch.optim.SGD(worker.parameters(), lr=LR)
            loss_fn = nn.CrossEntropyLoss()
            generator = torch.Generator().manual_seed(shuffle_seed(server_round, pid))
            order = torch.randperm(len(y), generator=generator)
            total = 0.0
            for start in range(0, len(y), BATCH_SIZE):
                batch = order[start:start + BATCH_SIZE]
                optimizer.zero_grad()
                loss = loss_fn(worker(x[batch]), y[batch])
                loss.backward()
                optimizer.step()
                total += loss.item() * len(batch)
            results.append(({k: v.detach().numpy().copy()
                             for k, v in worker.state_dict().items()}, len(y)))
        return results

    if engine != 'plain':
        config = TrainConfig(local_epochs=1, batch_size=BATCH_SIZE, lr=LR, momentum=0.0)
        backend = 'vmap' if engine == 'vmap' else 'auto'
        trainer = VectorizedTrainer(model, config, max_clients_per_chunk=chunk, backend=backend)

    def vectorized_round(server_round: int, weights: dict) -> list[tuple[dict, int]]:
        seeds = [shuffle_seed(server_round, pid) for pid in range(num_clients)]
        updates = trainer.train(weights, clients_np, seeds, shuffle=torch_epoch_orders)
        return [(u.weights, len(data[1])) for u, data in zip(updates, clients_np)]

    train_round = plain_round if engine == 'plain' else vectorized_round
    accuracies = [evaluate(global_weights)]
    stamps = [time.perf_counter()]
    phases = {'train_s': 0.0, 'aggregate_s': 0.0, 'evaluate_s': 0.0}
    for server_round in range(1, rounds + 1):
        t0 = time.perf_counter()
        updates = train_round(server_round, global_weights)
        t1 = time.perf_counter()
        global_weights = fedavg(updates)
        t2 = time.perf_counter()
        accuracies.append(evaluate(global_weights))
        stamps.append(time.perf_counter())
        for name, seconds in zip(phases, (t1 - t0, t2 - t1, stamps[-1] - t2)):
            phases[name] += seconds
    round_times = [b - a for a, b in zip(stamps, stamps[1:])]
    return {
        'engine': engine, 'clients': num_clients, 'rounds': rounds, 'chunk': chunk,
        'import_s': t_imported - T_START, 'setup_s': stamps[0] - t_imported,
        'rounds_s': stamps[-1] - stamps[0], 'round1_s': round_times[0],
        'steady_s_per_round': statistics.median(round_times[1:]) if rounds > 1 else None,
        **phases, 'final_acc': accuracies[-1], 'acc_curve': [round(a, 4) for a in accuracies],
        'samples_per_client': [int(len(p)) for p in parts][:5],
        'maxrss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# ------------------------------------------------------------------ driver ----
def run_child(engine: str, num_clients: int, rounds: int, chunk: int) -> dict:
    """Run one worker process; wall time and peak RSS are measured from outside."""
    python = str(FLOWER_PYTHON) if engine == 'flower' else sys.executable
    if engine == 'flower' and not FLOWER_PYTHON.exists():
        raise RuntimeError(f'{FLOWER_PYTHON} not found: `make bench` creates the Flower venv')
    cmd = [python, str(Path(__file__).resolve()), '--worker', '--engine', engine,
           '--clients', str(num_clients), '--rounds', str(rounds), '--chunk', str(chunk)]
    env = dict(os.environ, PYTHONPATH=f'{REPO}{os.pathsep}{REPO / "bench"}',
               FLWR_TELEMETRY_ENABLED='0')
    env.pop('_ROS_WHEELS_BOOTSTRAP_COMPLETE', None)   # another venv: let it bootstrap itself
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    out, _ = child.communicate()
    wall = time.perf_counter() - t0
    if child.returncode:
        raise RuntimeError(f'{cmd} failed with {child.returncode}')
    line = next(line for line in out.splitlines() if line.startswith('RESULT '))
    result = json.loads(line[len('RESULT '):])
    result['wall_s'] = wall
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--worker', action='store_true', help='run one engine in-process')
    parser.add_argument('--engine', choices=ENGINES, default='vectorized')
    parser.add_argument('--engines', default='plain,vectorized', help='engines to compare')
    parser.add_argument('--clients', type=int, default=10)
    parser.add_argument('--rounds', type=int, default=30)
    parser.add_argument('--chunk', type=int, default=32, help='max_clients_per_chunk')
    parser.add_argument('--reps', type=int, default=3)
    parser.add_argument('--sizes', default='10x30,100x10', help='CLIENTSxROUNDS,...')
    args = parser.parse_args()
    if args.worker:
        print('RESULT ' + json.dumps(run_worker(args.engine, args.clients, args.rounds,
                                                 args.chunk)), flush=True)
        return

    sizes = [tuple(int(v) for v in s.split('x')) for s in args.sizes.split(',')]
    engines = args.engines.split(',')
    if 'plain' not in engines or not set(engines) <= set(ENGINES):
        parser.error(f'--engines must include plain and name only {", ".join(ENGINES)}')
    runs: dict[tuple[str, int], list[dict]] = {}
    for rep in range(args.reps):
        for num_clients, rounds in sizes:
            for engine in engines:  # interleaved so load spreads evenly
                result = run_child(engine, num_clients, rounds, args.chunk)
                runs.setdefault((engine, num_clients), []).append(result)
                print(f'rep {rep} {engine:10s} N={num_clients:<4d} wall {result["wall_s"]:.2f} s '
                      f'rounds {result["rounds_s"]:.2f} s acc {result["final_acc"]:.4f}',
                      flush=True)
    print(f'\nload average at the end: {os.getloadavg()}; min / median over {args.reps} runs\n')
    header = ('| engine | N x rounds | wall s | import s | setup s | round 1 s | steady s/round '
              '| all rounds s | peak RSS MiB | final acc |')
    print(header)
    print('|' + '---|' * 10)

    def mm(values, fmt='{:.2f}'):
        return f'{fmt.format(min(values))} / {fmt.format(statistics.median(values))}'

    for (engine, num_clients), results in runs.items():
        accuracies = ', '.join(sorted({f'{r["final_acc"]:.4f}' for r in results}))
        print(f'| {engine} | {num_clients} x {results[0]["rounds"]} | '
              f'{mm([r["wall_s"] for r in results])} | {mm([r["import_s"] for r in results])} | '
              f'{mm([r["setup_s"] for r in results])} | {mm([r["round1_s"] for r in results])} | '
              f'{mm([r["steady_s_per_round"] for r in results], "{:.4f}")} | '
              f'{mm([r["rounds_s"] for r in results])} | '
              f'{max(r["maxrss_mib"] for r in results):.0f} | '
              f'{accuracies} |')
    print('\n| engine | N | plain / engine wall (min/min) | plain / engine all rounds '
          '(min/min) | Flower wall (this run, else doc) / engine wall | same accuracy curve '
          'as its reference |')
    print('|---|---|---|---|---|---|')
    for engine in [e for e in engines if e != 'plain']:
        for num_clients, _ in sizes:
            plain, other = runs[('plain', num_clients)], runs[(engine, num_clients)]
            wall_p, wall_o = min(r['wall_s'] for r in plain), min(r['wall_s'] for r in other)
            loop_p, loop_o = min(r['rounds_s'] for r in plain), min(r['rounds_s'] for r in other)
            # The engine's config path has its own split (same recipe, its own seeds): its
            # reference is its sequential path on the identical workload, not the plain loop.
            ref_engine = 'experiment_seq' if engine == 'experiment' else 'plain'
            ref = runs.get((ref_engine, num_clients), plain)
            same = all(p['acc_curve'] == o['acc_curve'] for p, o in zip(ref, other))
            gap = 100 * abs(ref[0]['final_acc'] - other[0]['final_acc'])
            same = f'{same} (vs {ref_engine}: {gap:.2f} points)'
            if ('flower', num_clients) in runs:   # measured in this run
                flower = min(r['wall_s'] for r in runs[('flower', num_clients)])
            else:                                  # the reference document's figure
                flower = FLOWER_WALL_S.get(num_clients)
            flower_ratio = f'{flower / wall_o:.1f}x' if flower else 'n/a'
            print(f'| {engine} | {num_clients} | {wall_p / wall_o:.2f}x | '
                  f'{loop_p / loop_o:.2f}x | {flower_ratio} | {same} |')

if __name__ == '__main__':
    main()
