"""The ground station's robust rules are selected by the same aggregation keys as the engine's
(median, trimmed_mean, clip_norm): one drone of five sends 100 × the honest delta."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.robust import CoordinateMedian, NormClip, TrimmedMean
from fl_uav.compression.codec import FrameKind, encode_frame
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.learning.weights import architecture_fingerprint
from test.unit.fleet._fleet_pair import eval_set

# honest drone k sends (1 + 0.1 k) · B, drone 4 sends 100 · B: the step each rule takes, in B
HONEST = (1.0, 1.1, 1.2, 1.3)
POISONED = 100.0
RULES = {   # label: (aggregation keys, the rule the station builds, its step in B)
    'fedavg': ({}, FedAvg, (sum(HONEST) + POISONED) / 5),
    'median': ({'aggregation.strategy': 'median'}, CoordinateMedian, 1.2),
    'trimmed_mean': ({'aggregation.strategy': 'trimmed_mean', 'aggregation.trimmed_beta': 0.2},
                     TrimmedMean, (1.1 + 1.2 + 1.3) / 3),
    # norms ∝ 1, 1.1, 1.2, 1.3, 100 -> bound 1.2: 1.3 and 100 are cut to 1.2
    'clip median': ({'aggregation.clip_norm': 'median'}, NormClip,
                    (1.0 + 1.1 + 1.2 + 1.2 + 1.2) / 5),
    # a fixed bound of 1.25 ||B||: 1.3 and 100 are cut to 1.25
    'clip fixed': ({'aggregation.clip_norm': 1.25}, NormClip,
                   (1.0 + 1.1 + 1.2 + 1.25 + 1.25) / 5),
}
FLEET = {'num_drones': 5, 'learning.model': 'tiny_cnn'}


def _update(station: GroundStation, sender: int, tensors: dict) -> bytes:
    meta = {'num_samples': 10, 'steps': 2, 'train_loss': 0.5, 'run_id': station.run_id}
    return encode_frame(FrameKind.UPDATE, station.round_progress[0], sender,
                        architecture_fingerprint(station.weights), tensors, meta)


@pytest.mark.parametrize('rule', sorted(RULES))
def test_the_station_runs_the_configured_robust_rule_on_a_x100_drone(rule):
    # Arrange
    keys, built, step = RULES[rule]
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
    # Assert: the rule built, every update applied, the step it takes
    assert isinstance(station._strategy, built)
    assert record.participants == [0, 1, 2, 3, 4]
    for name, b in base.items():
        np.testing.assert_allclose(station.weights[name] - before[name], step * b,
                                   rtol=1e-3, atol=1e-6)
    if built is NormClip:
        assert record.aggregation['clipped'] == 2
