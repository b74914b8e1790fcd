"""The two roles as plain Python: DroneAgent and GroundStation talking through codec frames."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fl_uav.compression.codec import GROUND_STATION_ID, FrameKind, decode_frame, encode_frame
from fl_uav.compression.codec_v2 import (
    ALL_REASONS_V2,
    VERSION_V2,
    decode_v2,
    encode_qsgd,
    lgc_frame_bytes,
    metadata_section_bytes,
    qsgd_frame_bytes,
    range_frame_bytes,
)
from fl_uav.compression.lgc import decode as lgc_sum
from fl_uav.compression.quantization import qsgd_quantize
from fl_uav.compression.signing import now_ms
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import FinishCommand, PoseSample, RoundTask
from fl_uav.fleet.world_setup import map_labeler
from fl_uav.vehicle.fake_vehicle import FakeVehicle
from fl_uav.vehicle.interface import VehicleError
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import CLASS_NAMES, UNKNOWN, WATER, LandCoverMap

CONFIG: FleetConfig = build_config(FleetConfig, {
    'num_drones': 2, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
    'rounds.num_rounds': 2, 'rounds.deadline_s': 10.0, 'rounds.first_round_extra_s': 0.0,
    'learning.optimizer': 'adam', 'learning.lr': 0.01,
    'autopilot.home_east_m': 585.0, 'autopilot.home_north_m': 600.0})   # inside the fence


def _eval_set(n: int = 40):
    rng = np.random.default_rng(0)
    return rng.normal(0, 1, (n, 3, 32, 32)).astype(np.float32), rng.integers(0, 7, n)


@pytest.fixture
def station() -> GroundStation:
    return GroundStation(CONFIG, *_eval_set())


@pytest.fixture
def agent() -> DroneAgent:
    return DroneAgent(CONFIG, 1, map_labeler(CONFIG.world, CONFIG.camera))


def _update(station: GroundStation, sender: int, round_index: int, value: float,
            num_samples: int = 10) -> bytes:
    delta = {n: np.full_like(w, value) for n, w in station.weights.items()}
    return encode_frame(FrameKind.UPDATE, round_index, sender, station._fingerprint, delta,
                        {'num_samples': num_samples})


def test_round_aggregates_the_sample_weighted_mean(station):
    # Prepare
    opening = station.open_round(now_s=0.0)
    before = {n: w.copy() for n, w in station.weights.items()}
    # Execute
    first = station.receive_update(_update(station, 0, 1, 1.0, num_samples=10))
    second = station.receive_update(_update(station, 1, 1, 4.0, num_samples=30))
    record = station.close_round(now_s=1.0)
    # Assert
    assert opening.round_index == 1 and set(opening.plans) == {0, 1}
    assert first.accepted and second.accepted
    for name, weight in station.weights.items():
        np.testing.assert_allclose(weight, before[name] + 3.25, rtol=1e-6)
    assert record.participants == [0, 1] and record.late_or_missing == []
    assert record.waypoints_planned == {d: len(p) for d, p in opening.plans.items()}


def test_bad_updates_are_counted_by_reason_and_never_raise(station):
    # Prepare
    station.open_round(now_s=0.0)
    good = _update(station, 0, 1, 0.5)
    wrong_fingerprint = encode_frame(FrameKind.UPDATE, 1, 0, b'\x00' * 8,
                                     {'w': np.zeros(3, np.float32)}, {'num_samples': 3})
    # Execute
    verdicts = [station.receive_update(data) for data in (
        b'', b'\x00' * 100, good[:-1], wrong_fingerprint, _update(station, 5, 1, 0.1),
        _update(station, 0, 2, 0.1), _update(station, 0, 1, 0.1, num_samples=-3), good, good,
        _update(station, 0, 1, 0.7))]
    # Assert: the same frame again is a replay; another update of the round a duplicate
    reasons = [v.reason for v in verdicts]
    assert reasons[:7] == ['truncated', 'bad_magic', 'truncated', 'fingerprint',
                           'unknown_sender', 'wrong_round', 'metadata']
    assert reasons[7:] == ['accepted', 'replay', 'duplicate']
    assert sum(station.rejected_total.values()) == 9


def test_wrong_shape_and_oversized_updates_are_rejected(station):
    station.open_round(now_s=0.0)
    shapes = {n: (w.reshape(-1)[:1] if w.size > 1 else w) for n, w in station.weights.items()}
    wrong_shape = encode_frame(FrameKind.UPDATE, 1, 0, station._fingerprint, shapes,
                               {'num_samples': 3})
    small = GroundStation(build_config(FleetConfig, {
        'num_drones': 2, 'learning.model': 'tiny_cnn', 'codec.max_frame_bytes': 4096}),
        *_eval_set())
    small.open_round(now_s=0.0)
    assert station.receive_update(wrong_shape).reason == 'shape'
    assert small.receive_update(_update(small, 0, 1, 0.1)).reason == 'oversized'


def test_round_closes_at_the_deadline_and_an_empty_round_keeps_the_model(station):
    opening = station.open_round(now_s=0.0)
    before = {n: w.copy() for n, w in station.weights.items()}
    assert not station.should_close(opening.deadline_s - 0.1)
    assert station.should_close(opening.deadline_s)
    record = station.close_round(opening.deadline_s)
    assert record.empty and record.late_or_missing == [0, 1]
    for name, weight in station.weights.items():
        np.testing.assert_array_equal(weight, before[name])


def test_station_finishes_after_the_configured_rounds(station):
    for r in range(CONFIG.rounds.num_rounds):
        station.open_round(float(r))
        station.close_round(float(r) + 1)
    assert station.finished
    with pytest.raises(RuntimeError, match='done'):
        station.open_round(10.0)
    assert decode_frame(station.finish_frame()).metadata == {
        'command': 'finish', 'run_id': station.run_id, 'run_started_ms': station.run_started_ms}


def test_agent_labels_frames_at_its_pose_and_skips_what_it_cannot_place(agent):
    image = np.full((64, 64, 3), 100, np.uint8)
    assert not agent.on_camera_frame(image, stamp_s=1.0)            # no pose yet
    agent.on_pose(PoseSample(300.0, 300.0, 2.0, 0.0, stamp_s=1.0))
    assert not agent.on_camera_frame(image, stamp_s=1.0)            # below min altitude
    agent.on_pose(PoseSample(300.0, 300.0, 30.0, 0.0, stamp_s=2.0))
    assert agent.on_camera_frame(image, stamp_s=2.0)
    assert agent.buffered_samples == 1 and agent.frames_skipped == 2
    expected = map_labeler(CONFIG.world, CONFIG.camera).label(300.0, 300.0, 30.0, 0.0)
    assert agent.class_counts()[expected] == 1


def test_agent_does_not_label_a_frame_over_unknown_land_cover():
    # Arrange: unknown land cover (a raster's nodata) west of 600 m, water east of it
    grid = np.full((1200, 1200), WATER, np.uint8)
    grid[:, :600] = UNKNOWN
    agent = DroneAgent(CONFIG, 1, MapLabeler(LandCoverMap(grid, 1.0), CONFIG.camera.fov_deg))
    image = np.full((64, 64, 3), 100, np.uint8)
    agent.on_pose(PoseSample(300.0, 300.0, 30.0, 0.0, stamp_s=1.0))
    agent.on_pose(PoseSample(900.0, 300.0, 30.0, 0.0, stamp_s=2.0))
    # Act
    over_unknown = agent.on_camera_frame(image, stamp_s=1.0)
    over_water = agent.on_camera_frame(image, stamp_s=2.0)
    # Assert: the first counted as unlabelled, not buffered; the second labelled water
    assert not over_unknown and over_water
    assert agent.frames_unlabelled == 1 and agent.frames_skipped == 0
    assert agent.buffered_samples == 1 and agent.class_counts()[WATER] == 1


@pytest.mark.parametrize('pose', [
    PoseSample(float('nan'), 300.0, 30.0, 0.0, stamp_s=1.0),
    PoseSample(300.0, 300.0, float('nan'), 0.0, stamp_s=1.0),
    PoseSample(300.0, 300.0, 30.0, float('inf'), stamp_s=1.0),
    PoseSample(300.0, 300.0, 1e30, 0.0, stamp_s=1.0),   # finite, but no cell to index
])
def test_agent_skips_a_frame_taken_at_a_non_finite_pose(agent, pose):
    # Arrange
    image = np.full((64, 64, 3), 100, np.uint8)
    agent.on_pose(pose)
    # Act
    kept = agent.on_camera_frame(image, stamp_s=1.0)
    # Assert: no label invented for it, the frame counted as skipped
    assert not kept
    assert agent.buffered_samples == 0 and agent.frames_skipped == 1


def test_agent_rejects_bad_global_frames(agent, station):
    opening = station.open_round(0.0)
    not_station = encode_frame(FrameKind.GLOBAL_MODEL, 1, 0, station._fingerprint,
                               station.weights, {})
    assert agent.accept_global_frame(b'junk') is None
    assert agent.accept_global_frame(not_station) is None
    assert agent.rejected_frames == 2
    task = agent.accept_global_frame(opening.frame)
    assert isinstance(task, RoundTask) and task.plan == tuple(opening.plans[1])
    assert isinstance(agent.accept_global_frame(station.finish_frame()), FinishCommand)


def test_agent_trains_and_encodes_an_update_the_station_accepts(agent, station):
    # Prepare
    opening = station.open_round(0.0)
    task = agent.accept_global_frame(opening.frame)
    rng = np.random.default_rng(1)
    for k in range(12):
        agent.on_pose(PoseSample(200.0 + 10 * k, 400.0, 30.0, 0.0, stamp_s=float(k)))
        agent.on_camera_frame(rng.integers(0, 255, (64, 64, 3), np.uint8), stamp_s=float(k))
    # Execute
    report = agent.train_round(task)
    verdict = station.receive_update(report.frame)
    # Assert
    assert report.num_samples == 12 and report.steps > 0 and np.isfinite(report.train_loss)
    assert verdict.accepted
    frame = decode_frame(report.frame)
    assert frame.sender == 1 and frame.metadata['samples_collected'] == 12
    assert any(np.any(t != 0) for t in frame.tensors.values())
    assert len(frame.metadata['class_counts']) == len(CLASS_NAMES)


def test_agent_with_too_few_samples_sends_an_empty_update(agent, station):
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    report = agent.train_round(task)
    assert report.num_samples == 0 and report.steps == 0
    assert all(np.all(t == 0) for t in decode_frame(report.frame).tensors.values())
    assert GROUND_STATION_ID == 0xFFFF


def test_malformed_metadata_is_rejected_not_fatal(station, agent):
    # Prepare
    opening = station.open_round(now_s=0.0)
    delta = {n: np.zeros_like(w) for n, w in station.weights.items()}
    bad_counts = encode_frame(FrameKind.UPDATE, 1, 0, station._fingerprint, delta,
                              {'num_samples': 5, 'samples_collected': 'many'})
    bad_loss = encode_frame(FrameKind.UPDATE, 1, 0, station._fingerprint, delta,
                            {'num_samples': 5, 'train_loss': [1.0]})
    bad_plan = encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, station._fingerprint,
                            station.weights, {'knobs': {'1': {'plan': 'north'}}})
    nan_plan = encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, station._fingerprint,
                            station.weights, {'knobs': {'1': {'plan': [[1.0, 'nan', 3.0]]}}})
    # Execute + Assert
    assert station.receive_update(bad_counts).reason == 'metadata'
    assert station.receive_update(bad_loss).reason == 'metadata'
    assert agent.accept_global_frame(bad_plan) is None
    assert agent.accept_global_frame(nan_plan) is None
    assert agent.rejected_frames == 2
    assert station.close_round(opening.deadline_s).empty


def test_agent_with_structured_pruning_uploads_a_dense_update_with_pruned_zeros(station):
    # Prepare
    config = build_config(FleetConfig, {'num_drones': 2, 'learning.model': 'small_cnn',
                                        'learning.min_samples_to_train': 4,
                                        'learning.structured_keep': 0.5})
    agent = DroneAgent(config, 1, map_labeler(config.world, config.camera))
    small_station = GroundStation(config, *_eval_set())
    task = agent.accept_global_frame(small_station.open_round(0.0).frame)
    rng = np.random.default_rng(2)
    for k in range(8):
        agent.on_pose(PoseSample(200.0 + 10 * k, 400.0, 30.0, 0.0, stamp_s=float(k)))
        agent.on_camera_frame(rng.integers(0, 255, (64, 64, 3), np.uint8), stamp_s=float(k))
    # Execute
    report = agent.train_round(task)
    frame = decode_frame(report.frame)
    # Assert: full shapes, half of the first conv's filters untouched
    first = frame.tensors['features.0.weight']
    touched = np.any(first.reshape(first.shape[0], -1) != 0, axis=1)
    assert first.shape == small_station.weights['features.0.weight'].shape
    assert touched.sum() == first.shape[0] // 2
    assert small_station.receive_update(report.frame).accepted


# --- compressed updates (codec v2) -----------------------------------------------------------

def _compressed_pair(method: str) -> tuple[DroneAgent, GroundStation]:
    config = build_config(FleetConfig, {
        'num_drones': 2, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'learning.structured_keep': 0.5, 'compression.method': method,
        'compression.qsgd_levels': 3, 'compression.range_bits': 4})
    return (DroneAgent(config, 1, map_labeler(config.world, config.camera)),
            GroundStation(config, *_eval_set()))


def _fill(agent: DroneAgent, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for k in range(count):
        agent.on_pose(PoseSample(200.0 + 10 * k, 400.0, 30.0, 0.0, stamp_s=float(k)))
        agent.on_camera_frame(rng.integers(0, 255, (64, 64, 3), np.uint8), stamp_s=float(k))


@pytest.mark.parametrize('method', ['qsgd', 'range'])
def test_compressed_pruned_update_round_trips_with_its_metadata(method):
    # Prepare
    agent, station = _compressed_pair(method)
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    _fill(agent, 10, seed=3)
    before = {n: w.copy() for n, w in station.weights.items()}
    dense_bytes = len(encode_frame(FrameKind.UPDATE, 1, 1, station._fingerprint, before, {}))
    # Execute
    report = agent.train_round(task)
    verdict = station.receive_update(report.frame)
    record = station.close_round(now_s=1.0)
    # Assert: a v2 frame of the formula size (masked entries only) plus the metadata section
    frame = decode_v2(report.frame)
    update = frame.update
    kept = int(update.mask.sum())
    formula = (qsgd_frame_bytes(kept, 3, mask=update.mask) if method == 'qsgd'
               else range_frame_bytes(kept, 4, mask=update.mask))
    assert verdict.accepted and report.frame[4] == VERSION_V2
    assert len(report.frame) == formula + metadata_section_bytes(frame.metadata)
    assert kept < update.dim and len(report.frame) < dense_bytes / 8
    assert frame.metadata['num_samples'] == report.num_samples == 10
    assert frame.metadata['steps'] == report.steps > 0
    assert frame.metadata['samples_collected'] == 10
    assert len(frame.metadata['class_counts']) == len(CLASS_NAMES)
    # Assert: the station aggregated exactly the decoded delta (FedAvg, one participant)
    assert record.samples == {1: 10} and record.bytes_up == {1: len(report.frame)}
    flat_change = np.concatenate([(station.weights[n] - before[n]).ravel() for n in before])
    np.testing.assert_allclose(flat_change, update.dense(), atol=1e-6)


def _v2_frame(station: GroundStation, **changes) -> bytes:
    """A valid QSGD (s = 3) frame of the station's dimension, optionally edited at byte offsets
    (CRC recomputed so the checks behind it are reached)."""
    dim = sum(w.size for w in station.weights.values()) + changes.pop('extra_dim', 0)
    vector = np.random.default_rng(4).standard_normal(dim).astype(np.float32)
    vector[1] = 1e4                                      # dominates the norm: level s
    mask = np.arange(dim) % 3 != 0                       # irregular: sent as a bitmap
    payload = qsgd_quantize(vector[mask], 3, np.random.default_rng(5))
    frame = bytearray(encode_qsgd(payload, round_index=changes.pop('round_index', 1),
                                  sender=changes.pop('sender', 0),
                                  fingerprint=station._fingerprint, mask=mask,
                                  metadata={'num_samples': 4}))
    for offset, value in changes.get('patch', []):
        frame[offset:offset + len(value)] = value
    body = bytes(frame[:-4])
    return body + struct.pack('<I', zlib.crc32(body))


# QSGD byte offsets (docs/wire_format.md): fixed header 26, then the metadata section
# (4 + len('{"num_samples":4}') = 21 bytes), then the 17-byte sub-header (dim, k, s, B, has_mask),
# the 4-byte bucket table, and the stream (norm float32, mask flag bit, bitmap, signs, levels).
_SUB = 26 + 4 + len(b'{"num_samples":4}')
_STREAM = _SUB + 17 + 4


def test_malformed_compressed_updates_are_rejected_by_reason_before_aggregation(station):
    # Prepare
    station.open_round(now_s=0.0)
    before = {n: w.copy() for n, w in station.weights.items()}
    bitmap_flip = bytearray(_v2_frame(station)[_STREAM + 4:_STREAM + 5])
    bitmap_flip[0] ^= 0b0000_0010                        # mask entry 0 (stream bit 33)
    not_an_update = encode_frame(FrameKind.GLOBAL_MODEL, 1, 0, station._fingerprint,
                                 station.weights, {})
    frames = {
        'levels': _v2_frame(station, patch=[(_SUB + 8, struct.pack('<I', 2))]),   # s 3 -> 2
        'mask': _v2_frame(station, patch=[(_STREAM + 4, bytes(bitmap_flip))]),
        'nonfinite': _v2_frame(station, patch=[(_STREAM, struct.pack('<f', np.nan))]),
        'body': _v2_frame(station, patch=[(_SUB + 4, struct.pack('<I', 7))]),     # k vs buckets
        'shape': _v2_frame(station, extra_dim=3),                                 # other model
        'crc': _v2_frame(station)[:-1] + b'\x00',
        'truncated': _v2_frame(station)[:-9],
        'wrong_kind': not_an_update,
        'wrong_round': _v2_frame(station, round_index=2),
        'unknown_sender': _v2_frame(station, sender=9),
    }
    # Execute
    verdicts = {reason: station.receive_update(data) for reason, data in frames.items()}
    record = station.close_round(now_s=1.0)
    # Assert
    assert {reason: v.reason for reason, v in verdicts.items()} == {r: r for r in frames}
    assert record.empty and record.rejected == {r: 1 for r in frames}
    for name, weight in station.weights.items():
        np.testing.assert_array_equal(weight, before[name])


def test_fleet_and_engine_read_the_same_compression_keys_and_refuse_unknown_methods():
    from fl_uav.configschema import ConfigError
    from fl_uav.engine.config import ExperimentConfig

    keys = {'compression.method': 'range', 'compression.range_bits': 6,
            'compression.qsgd_levels': 5, 'compression.per_layer': True}
    assert build_config(FleetConfig, keys).compression == \
        build_config(ExperimentConfig, keys).compression
    with pytest.raises(ConfigError, match=r"compression.*'zip'.*none, qsgd, range"):
        build_config(FleetConfig, {'compression.method': 'zip'})


@pytest.mark.parametrize('algorithm, compression, extra', [
    ('2ceoafl', 'ceoafl', {'learning.prune_fraction': 0.4, 'aggregation.strategy': '2ceoafl'}),
    ('feddpq', 'range', {'learning.momentum': 0.0, 'aggregation.strategy': 'feddpq'}),
    ('osafl', 'qsgd', {'learning.min_local_steps': 2, 'learning.max_local_steps': 3,
                       'aggregation.strategy': 'osafl'}),
])
def test_drones_run_the_configured_client_algorithm_and_compressor(algorithm, compression,
                                                                   extra):
    # Prepare
    config = build_config(FleetConfig, {
        'num_drones': 2, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'learning.optimizer': 'sgd', 'learning.lr': 0.05, 'learning.client_algorithm': algorithm,
        'compression.method': compression, **extra})
    agent = DroneAgent(config, 1, map_labeler(config.world, config.camera))
    station = GroundStation(config, *_eval_set())
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    _fill(agent, 10, seed=4)
    # Execute
    report = agent.train_round(task)
    verdict = station.receive_update(report.frame)
    record = station.close_round(now_s=1.0)
    # Assert
    frame = decode_v2(report.frame)
    assert verdict.accepted and record.participants == [1] and not record.empty
    assert frame.metadata['num_samples'] == 10 and frame.metadata['steps'] == report.steps
    if algorithm == '2ceoafl':       # the magnitude mask travels: only kept entries are sent
        assert frame.metadata['prune_fraction'] == 0.4
        assert frame.update.mask is not None
        assert frame.update.mask.mean() == pytest.approx(0.6, abs=0.1)
    if algorithm == 'feddpq':
        assert frame.metadata['prune_fraction'] == 0.2 and 'mask_density' in frame.metadata
    if algorithm == 'osafl':
        assert report.steps in (2, 3)


def _lgc_pair(drops: list[float]) -> tuple[DroneAgent, GroundStation]:
    config = build_config(FleetConfig, {
        'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'compression.method': 'lgc', 'compression.lgc_channel_entries': [100, 300, 600],
        'compression.lgc_drop_probabilities': drops})
    return (DroneAgent(config, 0, map_labeler(config.world, config.camera)),
            GroundStation(config, *_eval_set()))


def test_lgc_layers_travel_as_frames_the_station_sums_as_they_arrive():
    # Prepare
    agent, station = _lgc_pair([])
    opening = station.open_round(0.0)
    _fill(agent, 10, seed=5)
    before = {n: w.copy() for n, w in station.weights.items()}
    report = agent.train_round(agent.accept_global_frame(opening.frame))
    # Execute: the layers arrive out of order, one of them twice
    first = station.receive_update(report.frames[2])
    open_after_first = not station.should_close(now_s=0.5)
    rest = [station.receive_update(f) for f in (report.frames[0], report.frames[0],
                                                report.frames[1])]
    closes_early = station.should_close(now_s=0.5)
    record = station.close_round(now_s=0.5)
    # Assert
    parts = [decode_v2(f) for f in report.frames]
    assert [p.update.layer.layer_id for p in parts] == [0, 1, 2]
    assert [len(f) for f in report.frames] == [
        lgc_frame_bytes(k) + metadata_section_bytes(parts[0].metadata) for k in (100, 300, 600)]
    assert all(p.metadata['num_samples'] == 10 for p in parts)
    assert first.accepted and open_after_first and closes_early
    assert [v.reason for v in rest] == ['accepted', 'replay', 'accepted']   # one layer twice
    assert record.bytes_up == {0: report.bytes_sent} and record.samples == {0: 10}
    flat_change = np.concatenate([(station.weights[n] - before[n]).ravel() for n in before])
    summed = lgc_sum([p.update.layer for p in parts], parts[0].update.dim)
    np.testing.assert_allclose(flat_change, summed, atol=1e-6)
    assert np.count_nonzero(summed) == 1000


def test_a_dropped_lgc_layer_is_not_sent_and_the_round_waits_for_its_deadline():
    # Prepare: channel 1 drops every layer it carries
    agent, station = _lgc_pair([0.0, 1.0, 0.0])
    opening = station.open_round(0.0)
    _fill(agent, 10, seed=6)
    report = agent.train_round(agent.accept_global_frame(opening.frame))
    # Execute
    verdicts = [station.receive_update(f) for f in report.frames]
    # Assert
    assert [decode_v2(f).update.layer.layer_id for f in report.frames] == [0, 2]
    assert all(v.accepted for v in verdicts)
    assert not station.should_close(opening.deadline_s - 0.1)
    assert station.close_round(opening.deadline_s).participants == [0]


def test_lgc_channels_larger_than_the_model_fail_at_start():
    config = build_config(FleetConfig, {'learning.model': 'tiny_cnn',
                                        'compression.method': 'lgc'})
    with pytest.raises(ValueError, match='compression.lgc_channel_entries'):
        DroneAgent(config, 0, map_labeler(config.world, config.camera))


def test_scaffold_control_variates_travel_down_and_up_as_extra_tensors():
    # Prepare
    config = build_config(FleetConfig, {
        'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'learning.optimizer': 'sgd', 'learning.client_algorithm': 'scaffold',
        'aggregation.strategy': 'scaffold', 'rounds.num_rounds': 2})
    agent = DroneAgent(config, 0, map_labeler(config.world, config.camera))
    station = GroundStation(config, *_eval_set())
    _fill(agent, 10, seed=7)
    first = station.open_round(0.0)
    # Execute: round 1 (c = 0 goes down, Δc comes up), then open round 2
    report = agent.train_round(agent.accept_global_frame(first.frame))
    verdict = station.receive_update(report.frame)
    record = station.close_round(now_s=1.0)
    second = decode_frame(station.open_round(2.0).frame)
    # Assert
    names = set(station.weights)
    uploaded = decode_frame(report.frame).tensors
    assert verdict.accepted and not record.empty
    assert set(uploaded) == names | {'scaffold_dc/' + n for n in names}
    assert set(second.tensors) == names | {'scaffold_c/' + n for n in names}
    for name in names:     # c = c + Δc_k / N with N = 1: c after round 1 equals Δc_0
        np.testing.assert_allclose(second.tensors['scaffold_c/' + name],
                                   uploaded['scaffold_dc/' + name], rtol=1e-5, atol=1e-7)
    assert any(np.any(t != 0) for n, t in second.tensors.items() if n.startswith('scaffold_c/'))
    wrong_c = encode_frame(FrameKind.GLOBAL_MODEL, 2, GROUND_STATION_ID, station._fingerprint,
                           {**station.weights, 'scaffold_c/' + min(names): np.zeros(3)}, {})
    assert agent.accept_global_frame(wrong_c) is None     # a c of the wrong shape: rejected


def test_scaffold_needs_its_strategy_and_dense_uploads_in_the_fleet():
    from fl_uav.configschema import ConfigError

    with pytest.raises(ConfigError, match='aggregation.strategy'):
        build_config(FleetConfig, {'learning.client_algorithm': 'scaffold'})
    with pytest.raises(ConfigError, match='compression.method'):
        build_config(FleetConfig, {'learning.client_algorithm': 'scaffold',
                                   'aggregation.strategy': 'scaffold',
                                   'compression.method': 'qsgd'})


@pytest.mark.parametrize('method', ['range', 'lgc'])
def test_no_corruption_of_a_compressed_upload_makes_the_station_raise(method):
    # Prepare: a real upload; every byte flipped in turn, the CRC recomputed each time
    overrides = ({'compression.method': 'lgc', 'compression.lgc_channel_entries': [50, 150]}
                 if method == 'lgc' else {'compression.method': 'range'})
    config = build_config(FleetConfig, {'num_drones': 1, 'learning.model': 'tiny_cnn',
                                        'learning.min_samples_to_train': 4, **overrides})
    agent = DroneAgent(config, 0, map_labeler(config.world, config.camera))
    station = GroundStation(config, *_eval_set())
    _fill(agent, 6, seed=9)
    upload = agent.train_round(agent.accept_global_frame(station.open_round(0.0).frame)).frames[0]
    known = set(ALL_REASONS_V2) | {'accepted', 'duplicate', 'shape', 'wrong_kind', 'wrong_round',
                                   'unknown_sender', 'metadata', 'wrong_run'}
    opened = copy.deepcopy(station)   # round 1 open, nothing received yet
    # Execute
    reasons = set()
    for pos in range(len(upload) - 4):
        bad = bytearray(upload)
        bad[pos] ^= 0xFF
        body = bytes(bad[:-4])
        reasons.add(station.receive_update(body + struct.pack('<I', zlib.crc32(body))).reason)
    # Assert
    assert reasons <= known and len(reasons) > 3, reasons
    # Execute / Assert: a sample of flips (every header byte, every 8th payload byte), each
    # into a fresh copy of the open round that is then closed: aggregation never raises and
    # the global model stays finite, whatever was accepted
    accepted = 0
    for pos in [*range(64), *range(64, len(upload) - 4, 8)]:
        fresh = copy.deepcopy(opened)
        bad = bytearray(upload)
        bad[pos] ^= 0xFF
        body = bytes(bad[:-4])
        accepted += fresh.receive_update(body + struct.pack('<I', zlib.crc32(body))).accepted
        record = fresh.close_round(now_s=1.0)
        assert all(np.all(np.isfinite(w)) for w in fresh.weights.values()), pos
        assert np.isfinite(record.accuracy), pos
    assert accepted > 0   # some corruptions decode and reach the aggregation


@pytest.mark.parametrize('metadata', [
    {'knobs': {'1': {'plan': [[10 ** 400, 600.0, 30.0]]}}},   # JSON int beyond a float
    {'deadline_s': 10 ** 400},
    {'knobs': {'1': {'plan': ['123']}}},                       # a string is not a waypoint
    {'knobs': {'1': {'plan': {'123': 1}}}},                    # nor a mapping a plan
    {'knobs': {'1': {'plan': [[600.0, 600.0, True]]}}},
])
def test_a_plan_or_deadline_that_is_not_numbers_is_rejected_not_fatal(station, agent, metadata):
    # Prepare
    frame = encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, station._fingerprint,
                         station.weights, metadata)
    # Execute + Assert: counted, never raised (the drone node's callback would die)
    assert agent.accept_global_frame(frame) is None
    assert agent.rejected_frames == 1


@pytest.mark.parametrize('metadata', [
    {'num_samples': 10 ** 400},                      # JSON ints beyond a float
    {'num_samples': 5, 'train_loss': 10 ** 400},
    {'num_samples': 5, 'steps': 10 ** 400},
])
def test_an_update_with_numbers_beyond_a_float_is_rejected_and_the_round_still_closes(
        station, metadata):
    # Prepare
    opening = station.open_round(now_s=0.0)
    delta = {n: np.zeros_like(w) for n, w in station.weights.items()}
    frame = encode_frame(FrameKind.UPDATE, 1, 0, station._fingerprint, delta, metadata)
    # Execute + Assert: rejected on receipt, so closing the round cannot fail on it (a round
    # that fails to close stays open and fails again at every tick: the run stalls)
    assert station.receive_update(frame).reason == 'metadata'
    record = station.close_round(opening.deadline_s)
    assert record.empty and station.next_round_index == 2


def test_agent_reads_the_run_length_and_rejects_one_that_is_not_a_count(station, agent):
    # Arrange
    def frame(num_rounds: object) -> bytes:
        return encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, station._fingerprint,
                            station.weights, {'num_rounds': num_rounds})
    opening = station.open_round(now_s=0.0)
    # Act
    task = agent.accept_global_frame(opening.frame)
    bad = [agent.accept_global_frame(frame(v)) for v in ('10', 0, True, 2.5)]
    # Assert
    assert task.num_rounds == CONFIG.rounds.num_rounds
    assert bad == [None] * 4 and agent.rejected_frames == 4


def test_waypoints_reached_are_per_run_and_a_flight_error_travels_with_the_update(agent,
                                                                                  station):
    # Arrange: the drone flies its plans (a fake vehicle) and trains with its pilot
    task = agent.accept_global_frame(station.open_round(0.0).frame)
    planned = len(task.plan)
    vehicle = FakeVehicle(home_enu_m=(*CONFIG.autopilot.home_enu_m(1), 0.0))

    reports = []

    def fly(round_index: int, run_epoch: int) -> dict:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pilot = DronePilot(agent, vehicle, CONFIG.flight, pool,
                               geofence=CONFIG.geofence_enu())
            reports.append(asyncio.run(pilot.run_round(dataclasses.replace(
                task, round_index=round_index, run_epoch=run_epoch))))
        return decode_frame(reports[-1].frame).metadata

    # Act: two rounds of run 1, then the station restarts (run 2), whose round 1 fails
    # after the take-off
    first, second = fly(1, 1), fly(2, 1)
    vehicle.fail_on['fly_waypoints'] = VehicleError('mission interrupted after 0 of 9 items')
    restarted = fly(1, 2)
    # Assert: the count is the run's, not the node's life's; the failure is in the update
    assert (first['waypoints_reached'], second['waypoints_reached']) == (planned, 2 * planned)
    assert 'flight_error' not in first and 'flight_error' not in second
    assert restarted['waypoints_reached'] == 0
    assert restarted['flight_error'] == 'mission interrupted after 0 of 9 items'
    assert [r.flight_error for r in reports] == ['', '', restarted['flight_error']]


def test_the_station_records_flight_errors_per_round_and_counts_them(station):
    # Arrange: drone 0 reports a failed flight, drone 1 is of an older fl_uav (no key)
    delta = {n: np.zeros_like(w) for n, w in station.weights.items()}

    def update(sender: int, round_index: int, **metadata) -> bytes:
        return encode_frame(FrameKind.UPDATE, round_index, sender, station._fingerprint,
                            delta, {'num_samples': 5, **metadata})

    station.open_round(0.0)
    failed = station.receive_update(update(0, 1, flight_error='arm refused: COMMAND_DENIED'))
    old = station.receive_update(update(1, 1))
    first = station.close_round(1.0)
    station.open_round(2.0)
    # Act
    not_text = station.receive_update(update(0, 2, flight_error=['arm refused']))
    long = station.receive_update(update(1, 2, flight_error='y' * 1000))
    second = station.close_round(3.0)
    # Assert
    assert failed.accepted and old.accepted and long.accepted
    assert not not_text.accepted and not_text.reason == 'metadata'
    assert first.flight_errors == {0: 'arm refused: COMMAND_DENIED'}
    assert first.to_dict()['flight_errors'] == {'0': 'arm refused: COMMAND_DENIED'}
    assert second.flight_errors == {1: 'y' * 197 + '...'}
    assert station.flight_failures() == {0: 1, 1: 1}


def test_the_round_frame_says_when_it_opened_and_a_bad_time_is_rejected(station, agent):
    # Arrange
    before_ms = now_ms()
    opening = station.open_round(now_s=0.0)
    bad_time = encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, station._fingerprint,
                            station.weights, {'opened_ms': 'noon'})
    # Act
    task = agent.accept_global_frame(opening.frame)
    refused = agent.accept_global_frame(bad_time)
    # Assert: the station's wall clock at opening travels with the round
    assert before_ms <= task.opened_ms <= now_ms()
    assert refused is None and agent.last_rejection.startswith('metadata: opened_ms')
