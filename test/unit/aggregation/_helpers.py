"""Small builders shared by the aggregation tests."""

from __future__ import annotations

import json

import numpy as np

from fl_uav.aggregation import ClientUpdate


def update(sender: int, values, n: int = 10, round_index: int = 1, **metrics) -> ClientUpdate:
    """A one-tensor update {'w': values}."""
    return ClientUpdate(sender=sender, round_index=round_index,
                        delta={'w': np.asarray(values, np.float32)}, num_samples=n,
                        metrics=metrics)


def model(values) -> dict[str, np.ndarray]:
    return {'w': np.asarray(values, np.float32)}


def json_round_trip(state: dict) -> dict:
    return json.loads(json.dumps(state))
