"""The ground station's robust rules are selected by the same aggregation keys as the engine's
(median, trimmed_mean, krum, multi_krum, clip_norm, clip_factor): one drone of five sends 100 ×
the honest delta. By default every rule sees the deltas clipped to twice the round's median
norm."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.robust import (
    CoordinateMedian,
    Krum,
    MultiKrum,
    NormClip,
    TrimmedMean,
    unwrapped,
)
from fl_uav.compression.codec import FrameKind, encode_frame
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.learning.weights import architecture_fingerprint
from test.unit.fleet._fleet_pair import eval_set

# honest drone k sends (1 + 0.1 k) · B, drone 4 sends 100 · B: the step each rule takes, in B
HONEST = (1.0, 1.1, 1.2, 1.3)
POISONED = 100.0
NO_CLIP = {'aggregation.clip_norm': 0.0}
# The default clip: norms ∝ 1, 1.1, 1.2, 1.3, 100 -> bound 2 × 1.2: 100 is cut to 2.4
CLIPPED = (*HONEST, 2.4)
RULES = {   # label: (aggregation keys, the rule inside the clip, clipped, its step in B, used)
    'fedavg (default)': ({}, FedAvg, 1, sum(CLIPPED) / 5, [0, 1, 2, 3, 4]),
    'fedavg unclipped': (NO_CLIP, FedAvg, 0, (sum(HONEST) + POISONED) / 5, [0, 1, 2, 3, 4]),
    'median': ({'aggregation.strategy': 'median', **NO_CLIP}, CoordinateMedian, 0, 1.2,
               [0, 1, 2, 3, 4]),
    'trimmed_mean': ({'aggregation.strategy': 'trimmed_mean', 'aggregation.trimmed_beta': 0.2,
                      **NO_CLIP}, TrimmedMean, 0, (1.1 + 1.2 + 1.3) / 3, [0, 1, 2, 3, 4]),
    # f = 1 of 5, scores over the 2 nearest: 1.1 and 1.2 tie lowest (0.02 ||B||², rounding
    # picks one), 100 is far off; the step is the one drone's (None: read from ``used``)
    'krum': ({'aggregation.strategy': 'krum', **NO_CLIP}, Krum, 0, None, [[1], [2]]),
    'multi_krum': ({'aggregation.strategy': 'multi_krum', **NO_CLIP}, MultiKrum, 0,
                   sum(HONEST) / 4, [0, 1, 2, 3]),
    'krum clipped': ({'aggregation.strategy': 'krum'}, Krum, 1, None, [[1], [2]]),
    # bound 1 × the median 1.2: 1.3 and 100 are cut to 1.2
    'clip median x1': ({'aggregation.clip_factor': 1.0}, FedAvg, 2,
                       (1.0 + 1.1 + 1.2 + 1.2 + 1.2) / 5, [0, 1, 2, 3, 4]),
    # a fixed bound of 1.25 ||B||: 1.3 and 100 are cut to 1.25
    'clip fixed': ({'aggregation.clip_norm': 1.25}, FedAvg, 2,
                   (1.0 + 1.1 + 1.2 + 1.25 + 1.25) / 5, [0, 1, 2, 3, 4]),
}
FLEET = {'num_drones': 5, 'learning.model': 'tiny_cnn'}


def _update(station: GroundStation, sender: int, tensors: dict) -> bytes:
    meta = {'num_samples': 10, 'steps': 2, 'train_loss': 0.5, 'run_id': station.run_id}
    return encode_frame(FrameKind.UPDATE, station.round_progress[0], sender,
                        architecture_fingerprint(station.weights), tensors, meta)


@pytest.mark.parametrize('rule', sorted(RULES))
def test_the_station_runs_the_configured_robust_rule_on_a_x100_drone(rule):
    # Arrange
    keys, built, clipped, step, used = RULES[rule]
    shapes = GroundStation(build_config(FleetConfig, FLEET), *eval_set()).weights
    rng = np.random.default_rng(0)
    base = {n: rng.normal(0, 0.01, w.shape).astype(np.float32) for n, w in shapes.items()}
    if rule == 'clip fixed':   # the bound in units of ||B||
        norm = np.sqrt(sum(np.sum(np.square(b.astype(np.float64))) for b in base.values()))
        keys = {'aggregation.clip_norm': keys['aggregation.clip_norm'] * float(norm)}
    station = GroundStation(build_config(FleetConfig, {**FLEET, **keys}), *eval_set())
    before = {n: w.copy() for n, w in station.weights.items()}
    station.open_round(0.0)
    # Act
    for drone, factor in enumerate((*HONEST, POISONED)):
        verdict = station.receive_update(_update(
            station, drone, {n: (factor * b).astype(np.float32) for n, b in base.items()}))
        assert verdict.accepted, verdict.reason
    record = station.close_round(now_s=1.0)
    # Assert: the rule built, the updates applied, the step it takes
    assert isinstance(unwrapped(station._strategy), built)
    assert isinstance(station._strategy, NormClip) == (keys.get('aggregation.clip_norm') != 0)
    if step is None:   # krum: one of the tied drones
        assert record.participants in used
        step = HONEST[record.participants[0]]
    else:
        assert record.participants == used
    for name, b in base.items():
        np.testing.assert_allclose(station.weights[name] - before[name], step * b,
                                   rtol=1e-3, atol=1e-6)
    assert record.aggregation.get('clipped', 0) == clipped
    # every update's norm is in the record, drone 4's flagged (100 × the median 1.2)
    assert sorted(record.update_norms) == [0, 1, 2, 3, 4] and record.outliers == [4]
    ratio = record.update_norms[4] / record.update_norms[2]
    assert ratio == pytest.approx(POISONED / 1.2, rel=1e-4)
