"""Figure: the Flower 1.41 rows of `make bench`; in docs/benchmarks/engine.md.

Flower 1.41 ServerApp and ClientApp running the yardstick workload of vectorized_training.py
(bench/_workload.py, which both import; this module does not import that script).

Same data, split, shards, model, initial weights, per-(round, client) shuffle and local SGD as
the plain loop there; FedAvg with every client every round and a central evaluation after each
round. Imported by that script's 'flower' engine inside the Flower venv (bench/.venv-flower,
made by `make bench`), so Ray actors unpickle these apps by reference.
"""

from __future__ import annotations

import time

import _workload as workload
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn

ROUND_LOG: list[tuple[int, float, float]] = []   # (round, perf_counter, test accuracy)
SETTINGS = {'clients': 10, 'rounds': 30}
_CACHE: dict = {}

client_app = ClientApp()
server_app = ServerApp()


def _client_data(pid: int, num_clients: int):
    key = ('data', num_clients)
    if key not in _CACHE:
        torch.set_num_threads(1)
        x, y, _, _ = workload.load_split()
        _CACHE[key] = [(torch.from_numpy(x[p]), torch.from_numpy(y[p]))
                       for p in workload.label_shards(y, num_clients)]
        _CACHE['model'] = workload.make_model()
    return _CACHE[key][pid], _CACHE['model']


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One client's local epoch, exactly as the plain loop's."""
    pid = int(context.node_config['partition-id'])
    (x, y), model = _client_data(pid, int(context.node_config['num-partitions']))
    server_round = int(msg.content['config']['server-round'])
    model.load_state_dict(msg.content['arrays'].to_torch_state_dict())
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=workload.LR)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(workload.shuffle_seed(server_round, pid))
    order = torch.randperm(len(y), generator=generator)
    for start in range(0, len(y), workload.BATCH_SIZE):
        batch = order[start:start + workload.BATCH_SIZE]
        optimizer.zero_grad()
        loss_fn(model(x[batch]), y[batch]).backward()
        optimizer.step()
    content = RecordDict({'arrays': ArrayRecord(model.state_dict()),
                          'metrics': MetricRecord({'num-examples': len(y)})})
    return Message(content=content, reply_to=msg)


def _central_eval(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    if 'test' not in _CACHE:
        _, _, xt, yt = workload.load_split()
        _CACHE['test'] = (torch.from_numpy(xt), torch.from_numpy(yt), workload.make_model())
    xt, yt, model = _CACHE['test']
    model.load_state_dict(arrays.to_torch_state_dict())
    model.eval()
    with torch.no_grad():
        accuracy = float((model(xt).argmax(1) == yt).float().mean())
    ROUND_LOG.append((server_round, time.perf_counter(), accuracy))
    return MetricRecord({'test_acc': accuracy})


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """FedAvg over all clients every round, central evaluation."""
    n = SETTINGS['clients']
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n,
                      min_available_nodes=n)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(workload.make_model().state_dict()),
                   num_rounds=SETTINGS['rounds'], evaluate_fn=_central_eval)
