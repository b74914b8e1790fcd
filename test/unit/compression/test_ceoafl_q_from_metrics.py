"""2CEOAFL's compressor takes q = δ_u^t from the client's metrics (eq. (11), §4)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.aggregation._common import PRUNE_FRACTION_KEY
from fl_uav.compression.config import CompressionConfig


def _raw_share(compressor, metrics, draws: int = 40) -> float:
    delta = {'w': np.linspace(-1.0, 1.0, 50, dtype=np.float32)}
    raw = []
    for seed in range(draws):
        compressor.compress(delta, np.random.default_rng(seed), round_index=1, sender=0,
                            fingerprint=b'\x00' * 8, metrics=metrics)
        raw.append(compressor.last_raw)
    return float(np.mean(raw))


@pytest.mark.parametrize('fraction, share', [(0.0, 0.0), (1.0, 1.0)])
def test_q_is_the_reported_pruning_ratio_when_no_fixed_q_is_configured(fraction, share):
    # Arrange: raw_probability -1 = q follows the drone's δ_u^t
    compressor = CompressionConfig(method='ceoafl', raw_probability=-1.0).build()
    # Act
    observed = _raw_share(compressor, {PRUNE_FRACTION_KEY: fraction, 'steps': 3})
    # Assert
    assert observed == share


def test_a_fixed_q_wins_over_the_metrics_and_no_report_means_always_quantize():
    # Arrange
    fixed = CompressionConfig(method='ceoafl', raw_probability=0.0).build()
    follows = CompressionConfig(method='ceoafl', raw_probability=-1.0).build()
    # Act
    fixed_share = _raw_share(fixed, {PRUNE_FRACTION_KEY: 1.0})
    unreported = _raw_share(follows, None)
    # Assert
    assert fixed_share == 0.0 and unreported == 0.0
