"""Hostile frames at the receivers behind every frame subscription (the station's updates, the
drone's global model, a ground client's deliveries, a UAV's CLUs and its CLU inbox),
ROS-free.

Each frame a receiver cannot use ends in a counted rejection by reason (the codec's
``FrameError`` reasons and the receivers' own), never in another exception, and nothing
corrupt is taken: no non-finite weight, no round lost to one bad sender. The mutations are
deterministic (seeded): bytes flipped, fields overwritten with absurd values, cuts, with the
CRC32 fixed so the checks behind it are reached; metadata values of the wrong type or range;
tensors of another dtype whose finite values leave the float32 range.
"""

from __future__ import annotations

import asyncio
import copy
import random
import struct
import threading
import zlib
from collections import Counter

import numpy as np
import pytest

from fl_uav.compression.codec import (
    GROUND_STATION_ID,
    DecodeLimits,
    FrameKind,
    decode_frame,
    encode_frame,
)
from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.express_carrier import CLU_INBOX_FRAMES, INBOX_FULL, CluInbox
from fl_uav.fleet.express_exchange import (
    ExchangeRejected,
    decode_clu,
    decode_delivery,
    encode_clu,
    encode_delivery,
)
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import RoundTask
from fl_uav.learning.weights import architecture_fingerprint
from test.unit.fleet._fleet_pair import eval_set

_BASE = {'num_drones': 2, 'learning.model': 'tiny_cnn', 'rounds.num_rounds': 100,
         'rounds.deadline_s': 10.0, 'rounds.first_round_extra_s': 0.0}
BEYOND_FLOAT32 = 1e300     # finite in float64, +inf once cast to the models' float32
#: Values of the wrong type or range for any metadata key (JSON can carry all of them).
ODD_VALUES = [None, True, -1, 2**31, 2**64, -2**63, 1.5, -1e308, 1e308, 'x', 'nan', 'inf', '',
              [], {}, [1, 2, 3], {'a': 1}, [None], [[1e308, 1e308, 1e308]]]
ABSURD_UINTS = [0, 1, 255, 2**15, 2**16 - 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]
MUTATIONS = 300


@pytest.fixture(scope='module')
def pair():
    """Drone 0 and the station of a two-drone fleet. The drone senses nothing here, so it
    has no map labeler (building the world map would take most of the module's time)."""
    config = build_config(FleetConfig, _BASE)
    return DroneAgent(config, 0, labeler=None), GroundStation(config, *eval_set())


def _recrc(frame: bytes | bytearray) -> bytes:
    """The frame with its trailing CRC32 recomputed (the checks behind the CRC are under
    test)."""
    body = bytes(frame[:-4])
    return body + struct.pack('<I', zlib.crc32(body))


def _mutations(frame: bytes, seed: int, count: int = MUTATIONS) -> list[bytes]:
    """``count`` seeded mutations of ``frame``: cuts at every length class, flipped bytes,
    absurd u8..u64 values at any offset, inserted and deleted bytes; most re-CRC'd."""
    rng = random.Random(seed)
    out = [b'', frame[:1], frame[:4], frame[:5], frame[:43], frame[:-1], frame + b'\x00']
    for _ in range(count):
        b = bytearray(frame)
        kind = rng.randrange(5)
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b) - 4)] = rng.getrandbits(8)
        elif kind == 1:
            width = rng.choice([1, 2, 4, 8])
            pos = rng.randrange(len(b) - 4 - width)
            b[pos:pos + width] = (rng.choice(ABSURD_UINTS) % (1 << 8 * width)).to_bytes(
                width, 'little')
        elif kind == 2:
            del b[rng.randrange(len(b)):]
        elif kind == 3:
            pos = rng.randrange(len(b) - 4)
            b[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 9)))
        else:
            pos = rng.randrange(len(b) - 4)
            del b[pos:pos + rng.randint(1, 9)]
        out.append(_recrc(b) if len(b) > 4 and rng.random() < 0.9 else bytes(b))
    return out


def _metadata_variants(metadata: dict, seed: int) -> list[dict]:
    """Every top-level key (and every key one mapping down) set to each odd value or
    removed, plus extra keys; seeded order."""
    variants = []
    paths = [(k,) for k in metadata] + [(k, j) for k, v in metadata.items()
                                        if isinstance(v, dict) for j in v]
    for path in paths:
        for value in [*ODD_VALUES, KeyError]:
            meta = copy.deepcopy(metadata)
            parent = meta if len(path) == 1 else meta[path[0]]
            if value is KeyError:
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            variants.append(meta)
    variants.append({**metadata, 'unexpected': {'deep': [1, 2, 3]}})
    random.Random(seed).shuffle(variants)
    return variants


def _update(station, sender: int, tensors=None, **extra) -> bytes:
    """A valid update from ``sender`` for the open round (zero delta unless ``tensors``;
    ``extra`` metadata entries added)."""
    zero = {n: np.zeros_like(w) for n, w in station.weights.items()}
    meta = {'num_samples': 10, 'steps': 2, 'train_loss': 0.5, 'run_id': station.run_id,
            **extra}
    return encode_frame(FrameKind.UPDATE, station.round_progress[0], sender,
                        architecture_fingerprint(station.weights),
                        zero if tensors is None else tensors, meta)


def _beyond_float32(weights: dict) -> dict:
    """The same tensors as float64, one value finite but beyond the float32 range."""
    out = {n: np.asarray(w, np.float64).copy() for n, w in weights.items()}
    next(iter(out.values())).flat[0] = BEYOND_FLOAT32
    return out


# --------------------------------------------------------------------------- station


def test_an_update_beyond_float32_is_rejected_as_nonfinite_and_the_good_one_is_used(pair):
    # Prepare: drone 1 sends float64 values that overflow the model's float32
    _, station = pair
    opening = station.open_round(0.0)
    good = _update(station, 0)
    bad = _update(station, 1, tensors=_beyond_float32(station.weights))
    before = dict(station.rejected_total)
    # Execute
    verdicts = [station.receive_update(bad), station.receive_update(good)]
    record = station.close_round(opening.deadline_s)
    # Assert: named and counted, and the round keeps the good update (not lost to the bad one)
    assert [(v.accepted, v.reason) for v in verdicts] == [(False, 'nonfinite'),
                                                          (True, 'accepted')]
    assert station.rejected_total['nonfinite'] == before.get('nonfinite', 0) + 1
    assert record.participants == [0]
    assert all(np.isfinite(w).all() for w in station.weights.values())


@pytest.mark.parametrize('probe_steps, reason', [
    (3, 'accepted'), (0, 'accepted'), (-1, 'metadata'), (1.5, 'metadata'), ('3', 'metadata'),
    (True, 'metadata')])
def test_a_2ceoafl_probe_step_count_must_be_a_count(pair, probe_steps, reason):
    # Prepare: 2CEOAFL's ρ' reported beside steps (fl_uav.aggregation._common.PROBE_STEPS_KEY)
    _, station = pair
    opening = station.open_round(0.0)
    # Execute
    verdict = station.receive_update(_update(station, 0, probe_steps=probe_steps))
    station.close_round(opening.deadline_s)
    # Assert
    assert verdict.reason == reason


def test_mutated_updates_are_counted_by_reason_and_never_raise(pair):
    # Prepare
    _, station = pair
    opening = station.open_round(0.0)
    good = _update(station, 0)
    meta = decode_frame(good).metadata
    frames = _mutations(good, seed=1)
    frames += [encode_frame(FrameKind.UPDATE, opening.round_index, 0, decode_frame(good)
                            .fingerprint, decode_frame(good).tensors, m)
               for m in _metadata_variants(meta, seed=2)]
    before = sum(station.rejected_total.values())
    # Execute
    verdicts = [station.receive_update(f) for f in frames]
    record = station.close_round(opening.deadline_s)
    # Assert: every refusal counted under its reason; what was taken is finite
    refused = [v for v in verdicts if not v.accepted]
    assert sum(station.rejected_total.values()) - before == len(refused)
    assert all(v.reason and v.reason != 'accepted' for v in refused)
    assert sum(v.accepted for v in verdicts) <= 1        # one update per drone and round
    assert all(np.isfinite(w).all() for w in station.weights.values())
    assert record.round_index == opening.round_index


# --------------------------------------------------------------------------- drone


def _global(station_frame: bytes, round_index: int, tensors=None, metadata=None) -> bytes:
    g = decode_frame(station_frame)
    return encode_frame(FrameKind.GLOBAL_MODEL, round_index, GROUND_STATION_ID, g.fingerprint,
                        g.tensors if tensors is None else tensors,
                        g.metadata if metadata is None else metadata)


def test_a_global_model_beyond_float32_is_rejected_by_the_drone(pair):
    # Prepare
    agent, station = pair
    opening = station.open_round(0.0)
    frame = _global(opening.frame, opening.round_index,
                    tensors=_beyond_float32(decode_frame(opening.frame).tensors))
    before = agent.rejected_reasons['nonfinite']
    # Execute
    task = agent.accept_global_frame(frame)
    station.close_round(opening.deadline_s)
    # Assert: not a round to train from (it would train on +inf weights)
    assert task is None
    assert agent.rejected_reasons['nonfinite'] == before + 1


@pytest.mark.parametrize('deadline', ['inf', 'nan', '30', True, -5.0, [], {}])
def test_a_deadline_that_is_not_seconds_is_rejected_by_the_drone(pair, deadline):
    # Prepare: a string 'inf' would become an unbounded flight budget
    agent, station = pair
    opening = station.open_round(0.0)
    meta = {**decode_frame(opening.frame).metadata, 'deadline_s': deadline}
    before = agent.rejected_reasons['metadata']
    # Execute
    task = agent.accept_global_frame(_global(opening.frame, opening.round_index,
                                             metadata=meta))
    station.close_round(opening.deadline_s)
    # Assert
    assert task is None
    assert agent.rejected_reasons['metadata'] == before + 1


def test_mutated_global_frames_are_counted_by_reason_and_never_raise(pair):
    # Prepare
    agent, station = pair
    opening = station.open_round(0.0)
    station.close_round(opening.deadline_s)
    meta = decode_frame(opening.frame).metadata
    frames = _mutations(opening.frame, seed=3)
    frames += [_global(opening.frame, opening.round_index, metadata=m)
               for m in _metadata_variants(meta, seed=4)]
    before = agent.rejected_frames
    shapes = agent.shapes
    # Execute
    results = [agent.accept_global_frame(f) for f in frames]
    # Assert: a refusal is counted; a task taken is usable (shapes, finite float32 weights,
    # finite deadline, finite plan)
    assert agent.rejected_frames - before == sum(r is None for r in results)
    for task in results:
        if isinstance(task, RoundTask):
            assert {n: w.shape for n, w in task.weights.items()} == shapes
            assert all(w.dtype == np.float32 and np.isfinite(w).all()
                       for w in task.weights.values())
            assert np.isfinite(task.deadline_s) and task.deadline_s >= 0
            assert all(np.isfinite([p.east_m, p.north_m, p.up_m]).all() for p in task.plan)


# --------------------------------------------------------------------------- express visit


def _visit_frames(station):
    weights = {n: np.asarray(w, np.float32) for n, w in station.weights.items()}
    shapes = {n: w.shape for n, w in weights.items()}
    fingerprint = architecture_fingerprint(weights)
    delivery = encode_delivery(1, 4, 0, fingerprint, weights, 2)
    clu = encode_clu(0, 1, 4, fingerprint, weights,
                     {'steps': 2, 'num_samples': 24, 'train_loss': 0.5, 'distance_m': 30.0})
    return weights, shapes, fingerprint, delivery, clu


def test_a_delivery_or_clu_beyond_float32_is_rejected_as_nonfinite(pair):
    # Prepare
    _, station = pair
    weights, shapes, fingerprint, _, _ = _visit_frames(station)
    wide = _beyond_float32(weights)
    delivery = encode_delivery(1, 4, 0, fingerprint, wide, 2)
    clu = encode_clu(0, 1, 4, fingerprint, wide,
                     {'steps': 2, 'num_samples': 24, 'train_loss': 0.5, 'distance_m': 30.0})
    # Execute
    with pytest.raises(ExchangeRejected) as delivery_error:
        decode_delivery(delivery, DecodeLimits(), fingerprint, shapes, 0, 2)
    with pytest.raises(ExchangeRejected) as clu_error:
        decode_clu(clu, DecodeLimits(), fingerprint, shapes, 1, 4, 0)
    # Assert
    assert delivery_error.value.reason == clu_error.value.reason == 'nonfinite'


def test_mutated_visit_frames_are_exchange_rejections_only(pair):
    # Prepare
    _, station = pair
    _, shapes, fingerprint, delivery, clu = _visit_frames(station)
    limits = DecodeLimits()
    # Execute
    outcomes = []
    for frame in _mutations(delivery, seed=5, count=150):
        try:
            d = decode_delivery(frame, limits, fingerprint, shapes, 0, 2)
            outcomes.append(all(np.isfinite(w).all() for w in d.weights.values()))
        except ExchangeRejected as exc:
            outcomes.append(bool(exc.reason))
    for frame in _mutations(clu, seed=6, count=150):
        try:
            c = decode_clu(frame, limits, fingerprint, shapes, 1, 4, 0)
            outcomes.append(all(np.isfinite(w).all() for w in c.delta.values()))
        except ExchangeRejected as exc:
            outcomes.append(bool(exc.reason))
    # Assert: anything else would have raised out of the loop
    assert all(outcomes)


def test_a_flood_of_clu_frames_keeps_only_the_newest_and_counts_the_rest():
    # Prepare: 100 frames heard from another thread while no visit reads
    rejected: Counter = Counter()

    async def flood_then_read() -> tuple[int, list]:
        inbox = CluInbox(asyncio.get_running_loop(), rejected)
        sender = threading.Thread(target=lambda: [inbox.put_threadsafe(bytes([i]))
                                                  for i in range(100)])
        sender.start()
        await asyncio.get_running_loop().run_in_executor(None, sender.join)
        await asyncio.sleep(0)          # the loop runs the queued puts
        kept = len(inbox)
        read = [await inbox.get(0.01) for _ in range(CLU_INBOX_FRAMES + 1)]
        return kept, read

    # Execute
    kept, read = asyncio.run(flood_then_read())
    # Assert: bounded, the oldest dropped and counted, then a read times out empty
    assert kept == CLU_INBOX_FRAMES
    assert rejected == {INBOX_FULL: 100 - CLU_INBOX_FRAMES}
    assert read[:-1] == [bytes([i]) for i in range(100 - CLU_INBOX_FRAMES, 100)]
    assert read[-1] is None


def test_a_waiting_read_gets_a_frame_put_from_another_thread():
    # Prepare
    async def wait_for_one() -> bytes | None:
        inbox = CluInbox(asyncio.get_running_loop(), Counter())
        timer = threading.Timer(0.05, inbox.put_threadsafe, (b'clu',))
        timer.start()
        try:
            return await inbox.get(5.0)
        finally:
            timer.cancel()

    # Execute / Assert
    assert asyncio.run(wait_for_one()) == b'clu'
