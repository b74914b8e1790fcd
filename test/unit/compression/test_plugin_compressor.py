"""A compressor plug-in's frame goes through the wire format: the receiver's decode gives the
delta the plug-in reported, without knowing the method."""

from __future__ import annotations

import numpy as np
import pytest

from fl_uav.compression.codec import FrameKind, encode_frame
from fl_uav.compression.compressor import decode_update_frame
from fl_uav.compression.config import (
    COMPRESSOR_PLUGIN_ARGUMENTS,
    CompressionConfig,
    build_compressor,
)
from fl_uav.compression.errors import FingerprintMismatch, ShapeMismatch, UnknownKind
from test.unit._plugins import SPEC

FINGERPRINT = b'f' * 8


def _delta():
    rng = np.random.default_rng(0)
    return {'conv.weight': rng.normal(size=(4, 3, 3, 3)).astype(np.float32),
            'fc.bias': rng.normal(size=(10,)).astype(np.float32)}


def test_a_plug_in_frame_decodes_to_the_delta_it_reported():
    # Arrange
    compressor = CompressionConfig(method=SPEC + 'TopFractionWithMemory').build()
    # Act
    frame, reported = compressor.compress(_delta(), np.random.default_rng(1), round_index=3,
                                          sender=2, fingerprint=FINGERPRINT,
                                          metadata={'num_samples': 5})
    received = decode_update_frame(frame, _delta(), FINGERPRINT)
    # Assert
    assert (received.sender, received.round_index) == (2, 3)
    assert received.metadata == {'num_samples': 5}
    for name, value in reported.items():
        np.testing.assert_array_equal(received.delta[name], value)
    assert sum(int(np.count_nonzero(v)) for v in reported.values()) == int(0.25 * 118)


def test_its_state_is_flat_named_arrays_that_restore_the_error_memory():
    # Arrange
    compressor = build_compressor(SPEC + 'TopFractionWithMemory')
    compressor.compress(_delta(), np.random.default_rng(1), round_index=1, sender=0,
                        fingerprint=FINGERPRINT)
    # Act
    restored = build_compressor(SPEC + 'TopFractionWithMemory')
    restored.load_state_dict(compressor.state_dict())
    # Assert
    assert all(isinstance(v, np.ndarray) for v in compressor.state_dict().values())
    for name, value in compressor.residual.items():
        np.testing.assert_array_equal(restored.residual[name], value)


def test_built_in_v2_frames_decode_the_same_way():
    frame, reported = build_compressor('qsgd', qsgd_levels=3).compress(
        _delta(), np.random.default_rng(1), round_index=1, sender=0, fingerprint=FINGERPRINT)
    received = decode_update_frame(frame, _delta(), FINGERPRINT)
    for name, value in reported.items():
        np.testing.assert_array_equal(received.delta[name], value)


@pytest.mark.parametrize(('frame', 'error'), [
    (encode_frame(FrameKind.GLOBAL_MODEL, 1, 0, FINGERPRINT, _delta()), UnknownKind),
    (encode_frame(FrameKind.UPDATE, 1, 0, b'g' * 8, _delta()), FingerprintMismatch),
    (encode_frame(FrameKind.UPDATE, 1, 0, FINGERPRINT, {'fc.bias': np.zeros(3, np.float32)}),
     ShapeMismatch),
])
def test_what_the_station_would_refuse_is_a_frame_error(frame, error):
    with pytest.raises(error):
        decode_update_frame(frame, _delta(), FINGERPRINT)


def test_compression_keys_a_plug_in_does_not_name_are_not_passed_to_it():
    compressor = build_compressor(SPEC + 'TopFractionWithMemory', qsgd_levels=5)
    assert compressor.fraction == 0.25 and 'fraction' not in COMPRESSOR_PLUGIN_ARGUMENTS
