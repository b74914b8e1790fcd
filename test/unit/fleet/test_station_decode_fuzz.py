"""Property tests of the ground station's update path (issue 25 item 4): the frames that reach
``GroundStation.receive_update``, the call the ground_station node makes for every frame on
/fl/updates (fl_uav/ros/ground_station_node.py ``_take_updates``; behind it the envelope's
``FrameAuth.open``, ``decode_frame`` / ``decode_v2`` and the station's own checks).

Whatever the bytes, the verdict is an acceptance or a rejection by one of the reasons
docs/wire_format.md documents, never another exception; a frame mutated from a genuine signed
update is never accepted by a station that requires signatures; a structural mutation that
passes every check (a valid update after all) leaves a finite model. The frames are the ones
the fleet's drones send (``DroneAgent.train_round`` after a real round opening), for the
default compression (none: codec v1), QSGD and LGC (codec v2). Deterministic
(``derandomize``); the time and memory a frame may take are bench/fuzz_station_frames.py's.
"""

from __future__ import annotations

import json
import math
import struct
import tracemalloc
import warnings
from collections import Counter
from dataclasses import dataclass
from unittest import mock

import hypothesis.strategies as st
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings

from fl_uav.compression.codec import GROUND_STATION_ID, MAGIC, FrameKind, encode_frame
from fl_uav.compression.codec_v2 import (
    ALL_REASONS_V2,
    FLAG_METADATA,
    VERSION_V2,
    encode_qsgd,
)
from fl_uav.compression.quantization import QsgdPayload
from fl_uav.compression.signing import ALL_REASONS_SIGNED, now_ms, sign_frame
from fl_uav.configschema import build_config
from fl_uav.fleet import ground_station
from fl_uav.fleet.config import FleetConfig, SecurityConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.keys import generate_fleet_keys, load_frame_auth
from fl_uav.fleet.messages import ROUND_OPENED_KEY, PoseSample
from fl_uav.fleet.update_inbox import INBOX_FULL
from fl_uav.fleet.world_setup import map_labeler
from fl_uav.learning.weights import architecture_fingerprint
from test.unit.fleet._fleet_pair import eval_set
from test.unit.fleet._frame_bytes import crc_fixed, get, put
from test.unit.fleet._frame_bytes import with_metadata as _with_metadata

#: What the station may answer: the codec's reasons (v1 and v2), the envelope's, and the
#: station's own (docs/wire_format.md, "Update frames in the fleet", "Replays and run
#: identity"), or 'accepted'.
STATION_REASONS = ('wrong_kind', 'shape', 'unknown_sender', 'wrong_round', 'replay',
                   'wrong_run', 'duplicate', 'metadata', INBOX_FULL)
DOCUMENTED = frozenset(ALL_REASONS_V2) | frozenset(ALL_REASONS_SIGNED) | frozenset(
    STATION_REASONS)
RUN_ID = '0123456789abcdef'
NUM_DRONES = 3
SIG = 64
ED25519_L = 2**252 + 27742317777372353535851937790883648493
FUZZ = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MIN_EXAMPLES = 250         # of FUZZ's 300: the strategies do not run dry
METHODS = {'none': {}, 'qsgd': {},
           'lgc': {'compression.lgc_channel_entries': [100, 400, 1500]}}
_U32 = struct.Struct('<I')


# ------------------------------------------------------------------------------ frame bytes


def envelope(head: bytes, inner: bytes, sig: bytes, fix_len: bool = False) -> bytes:
    """A signed envelope from its parts, CRC32 fixed (wire_format.md, "Signed envelope")."""
    head = bytearray(head)
    if fix_len:
        put(head, 16, 4, len(inner))
    return crc_fixed(bytes(head) + inner + sig + b'\0\0\0\0')


def split(env: bytes) -> tuple[bytes, bytes, bytes]:
    """(header, inner frame, signature) of a signed envelope."""
    n = get(env, 16, 4)
    return env[:20], env[20:20 + n], env[20 + n:20 + n + SIG]


#: (offset, width) of the envelope's fields after the magic: version, scheme, signer,
#: issued_ms, inner_len.
ENVELOPE_FIELDS = ((4, 1), (5, 1), (6, 2), (8, 8), (16, 4))


def inner_fields(inner: bytes) -> list[tuple[int, int]]:
    """(offset, width) of a v1 or v2 frame's header fields, its first tensor-table entry
    (v1) or its metadata length and sub-header (v2): the lengths included."""
    if inner[4] == 1:
        name_len = inner[40]
        ndim = inner[42 + name_len]
        entry = [(40, 1), (41 + name_len, 1), (42 + name_len, 1)]
        entry += [(43 + name_len + 4 * j, 4) for j in range(ndim)]
        entry += [(43 + name_len + 4 * ndim, 8), (51 + name_len + 4 * ndim, 8)]
        return [(4, 1), (5, 1), (6, 2), (8, 4), (12, 2), (14, 2), (16, 8), (24, 4), (28, 4),
                (32, 8), *entry]
    sub = 30 + get(inner, 26, 4)
    widths = {0x11: (4, 4, 4, 4, 1), 0x12: (4, 4, 1, 4, 1), 0x13: (4, 4, 1),
              0x14: (1, 1, 4, 4, 4)}[inner[5]]
    offsets = [sub + sum(widths[:i]) for i in range(len(widths))]
    return [(4, 1), (5, 1), (6, 2), (8, 4), (12, 2), (14, 8), (22, 4), (26, 4),
            *zip(offsets, widths)]


def field_value(width: int) -> st.SearchStrategy[int]:
    """A value for a field of ``width`` bytes: an edge of its range or of the decode limits,
    or any."""
    top = (1 << 8 * width) - 1
    edges = [v for v in (0, 1, 2, 255, 256, 65535, 65536, 2**31, 2**32 - 1, 2**32,
                         50_000_001, 64 * 2**20 + 1, 2**63, top, top - 1) if v <= top]
    return st.one_of(st.sampled_from(edges), st.integers(0, top))


# ------------------------------------------------------------------------------ the fleet


@dataclass
class Fleet:
    """One compression method's fleet: configs, keys and drone 0's and 1's round-1 frames."""

    signed_config: FleetConfig
    plain_config: FleetConfig
    keys: dict
    env0: list[bytes]             # drone 0's genuine signed frames (LGC: one per layer)
    env1: list[bytes]             # drone 1's
    metadata: dict

    @property
    def inner0(self) -> list[bytes]:
        return [split(f)[1] for f in self.env0]

    def station(self, signed: bool) -> GroundStation:
        """A fresh station of the drones' run with round 1 open, stamped as the opening the
        drones trained for (another opening of it is a resumed station's, which refuses
        them)."""
        config = self.signed_config if signed else self.plain_config
        station = GroundStation(config, *eval_set(), run_id=RUN_ID)
        with mock.patch.object(ground_station, 'now_ms',
                               return_value=self.metadata[ROUND_OPENED_KEY]):
            station.open_round(0.0)
        return station

    def signed_now(self) -> tuple[list[bytes], list[bytes]]:
        """Drone 0's and drone 1's frames signed again now (the freshness window)."""
        return ([sign_frame(split(f)[1], 0, self.keys[0]) for f in self.env0],
                [sign_frame(split(f)[1], 1, self.keys[1]) for f in self.env1])


def _drone_frames(config: FleetConfig, opening: bytes, drone: int) -> tuple[bytes, ...]:
    agent = DroneAgent(config, drone, map_labeler(config.world, config.camera))
    rng = np.random.default_rng(drone)
    for k in range(24):
        agent.on_pose(PoseSample(200.0 + 10 * k, 400.0 + 50 * drone, 30.0, 0.0, float(k)))
        agent.on_camera_frame(rng.integers(0, 255, (64, 64, 3), np.uint8), float(k))
    report = agent.train_round(agent.accept_global_frame(opening))
    assert report.steps > 0 and report.frames
    return report.frames


@pytest.fixture(scope='module')
def keys_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp('fuzz') / 'keys'
    generate_fleet_keys(folder, NUM_DRONES)
    return folder


@pytest.fixture(scope='module', params=list(METHODS))
def fleet(request, keys_dir) -> Fleet:
    flat = {'num_drones': NUM_DRONES, 'learning.model': 'tiny_cnn',
            'rounds.num_rounds': 100, 'compression.method': request.param,
            **METHODS[request.param]}
    signed = build_config(FleetConfig, {**flat, 'security.keys_dir': str(keys_dir),
                                        'security.require_signatures': True})
    security = SecurityConfig(str(keys_dir))
    keys = {d: load_frame_auth(security, d, []).private_key for d in range(NUM_DRONES)}
    keys[GROUND_STATION_ID] = load_frame_auth(security, GROUND_STATION_ID, []).private_key
    opening = GroundStation(signed, *eval_set(), run_id=RUN_ID).open_round(0.0).frame
    env0 = list(_drone_frames(signed, opening, 0))
    inner = split(env0[0])[1]
    meta_at = 40 + get(inner, 24, 4) if inner[4] == 1 else 30
    meta_len = get(inner, 28 if inner[4] == 1 else 26, 4)
    return Fleet(signed, build_config(FleetConfig, flat), keys, env0,
                 list(_drone_frames(signed, opening, 1)),
                 json.loads(inner[meta_at:meta_at + meta_len]))


# -------------------------------------------------------------------------------- mutations


@st.composite
def forged(draw, fleet: Fleet, env0: list[bytes], env1: list[bytes]) -> bytes:
    """A frame made from drone 0's genuine signed update without drone 0's key (a stale one
    with it: a recording played later, or a clock far ahead)."""
    env = draw(st.sampled_from(env0))
    head, inner, sig = split(env)
    kind = draw(st.sampled_from(['bitflip', 'truncate', 'extend', 'field', 'sig_swap',
                                 'sig_malleate', 'other_key', 'other_id', 'unsigned',
                                 'stale']))
    if kind == 'bitflip':
        b = bytearray(env)
        for bit in draw(st.lists(st.integers(0, 8 * len(env) - 1), min_size=1, max_size=16,
                                 unique=True)):
            b[bit >> 3] ^= 1 << (bit & 7)
        return crc_fixed(b) if draw(st.booleans()) else bytes(b)
    if kind == 'truncate':
        cut = draw(st.integers(0, len(env) - 1))
        if cut >= 88 and draw(st.booleans()):      # the declared length follows the cut
            b = bytearray(env[:cut])
            put(b, 16, 4, cut - 88)
            return crc_fixed(b)
        return env[:cut]
    if kind == 'extend':
        junk = draw(st.binary(min_size=1, max_size=300))
        if draw(st.booleans()):
            return env + junk
        return envelope(head, inner + junk, sig, fix_len=draw(st.booleans()))
    if kind == 'field':                             # a header, table or length field
        in_envelope = draw(st.booleans())
        offset, width = draw(st.sampled_from(ENVELOPE_FIELDS if in_envelope
                                             else inner_fields(inner)))
        b = bytearray(env if in_envelope else inner)
        value = draw(field_value(width).filter(lambda v: v != get(b, offset, width)))
        put(b, offset, width, value)
        if in_envelope:
            return crc_fixed(b) if draw(st.booleans()) else bytes(b)
        return envelope(head, crc_fixed(b) if draw(st.booleans()) else bytes(b), sig)
    if kind == 'sig_swap':          # another genuine frame's signature (and header)
        other = draw(st.sampled_from([f for f in env0 + env1 if f != env]))
        other_head, _, other_sig = split(other)
        return envelope(other_head if draw(st.booleans()) else head, inner, other_sig,
                        fix_len=True)
    if kind == 'sig_malleate':
        r, s = sig[:32], int.from_bytes(sig[32:], 'little')
        new = draw(st.one_of(
            st.integers(1, 15).filter(lambda k: s + k * ED25519_L < 2**256).map(
                lambda k: r + (s + k * ED25519_L).to_bytes(32, 'little')),   # S + kL
            st.binary(min_size=SIG, max_size=SIG),
            st.just(sig[32:] + r)))
        return envelope(head, inner, new)
    if kind == 'other_key':
        signer, key = draw(st.sampled_from([
            (0, fleet.keys[1]), (1, fleet.keys[1]), (0, fleet.keys[2]),
            (0, fleet.keys[GROUND_STATION_ID]),
            (GROUND_STATION_ID, fleet.keys[GROUND_STATION_ID]),
            (0, Ed25519PrivateKey.from_private_bytes(bytes(32))), (7, fleet.keys[1])]))
        return sign_frame(inner, signer, key)
    if kind == 'other_id':          # signer and/or inner sender: another drone, unknown, station
        new_id = draw(st.integers(1, 0xFFFF))
        b, h = bytearray(inner), bytearray(head)
        where = draw(st.sampled_from(['inner', 'envelope', 'both']))
        if where != 'envelope':
            put(b, 12, 2, new_id)
        if where != 'inner':
            put(h, 6, 2, new_id)
        return envelope(bytes(h), crc_fixed(b), sig)
    if kind == 'unsigned':          # the inner plain frame, cut out of the envelope
        return inner
    beyond_s = draw(st.floats(5.0, 1e7))            # outside the window by this much
    security = fleet.signed_config.security
    if draw(st.booleans()):                          # a recording, played later
        issued = now_ms() - int((security.max_frame_age_s + beyond_s) * 1000)
    else:                                            # a clock far ahead
        issued = now_ms() + int((security.max_clock_skew_s + beyond_s) * 1000)
    return sign_frame(inner, 0, fleet.keys[0], issued)


_ODD = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                 st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30),
                 st.lists(st.integers(-5, 5), max_size=8),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
_RAW_METADATA = [b'', b'{', b'[]', b'null', b'{"a":1,"a":2}', b'{"x":NaN}', b'{"x":1e999}',
                 b'\xff\xfe{}', b'{"x":' + b'1' * 5000 + b'}', b'[' * 30000 + b']' * 30000,
                 b'{"x":"' + b'y' * 65536 + b'"}']


def with_metadata(inner: bytes, blob: bytes) -> bytes:
    """The plain frame with its metadata replaced by ``blob`` (lengths fixed, CRC not)."""
    assert inner[4] == 1 or inner[6] & FLAG_METADATA     # a v2 frame carries metadata
    return _with_metadata(inner, blob)
    old = get(inner, 26, 4)
    b = bytearray(inner[:26] + _U32.pack(len(blob)) + blob + inner[30 + old:])
    put(b, 22, 4, get(inner, 22, 4) + len(blob) - old)
    assert inner[6] & FLAG_METADATA
    return bytes(b)


@st.composite
def structural(draw, fleet: Fleet) -> bytes:
    """Drone 0's plain update with a structural mutation and its CRC32 fixed, so that every
    check behind the CRC is reached: bits flipped in its header, table or metadata, a field
    set to an edge value, odd metadata, bytes cut or inserted with the lengths fixed."""
    inner = draw(st.sampled_from(fleet.inner0))
    kind = draw(st.sampled_from(['bitflip', 'field', 'metadata', 'cut']))
    b = bytearray(inner)
    if kind == 'bitflip':
        end = min(len(b) - 4, 30 + get(b, 26, 4) + 64 if b[4] == 2
                  else 40 + get(b, 24, 4) + get(b, 28, 4) + 64)
        for bit in draw(st.lists(st.integers(0, 8 * end - 1), min_size=1, max_size=4)):
            b[bit >> 3] ^= 1 << (bit & 7)
    elif kind == 'field':
        offset, width = draw(st.sampled_from(inner_fields(inner)))
        put(b, offset, width, draw(field_value(width)))
    elif kind == 'metadata':
        odd = draw(st.dictionaries(st.sampled_from(sorted(fleet.metadata) + ['x']), _ODD,
                                   max_size=3))
        blob = draw(st.one_of(
            st.sampled_from(_RAW_METADATA),
            st.just(json.dumps({**fleet.metadata, **odd}, separators=(',', ':')).encode())))
        b = bytearray(with_metadata(inner, blob))
    else:
        pos = draw(st.integers(40 if b[4] == 1 else 26, len(b) - 5))
        junk = draw(st.binary(min_size=0, max_size=16))
        cut = draw(st.integers(0, min(16, len(b) - 4 - pos)))
        b[pos:pos + cut] = junk
        delta = len(junk) - cut
        length_at = (32, 8) if b[4] == 1 else (22, 4)   # the body's length follows the cut
        put(b, *length_at, max(0, get(b, *length_at) + delta))
    return crc_fixed(b)


def _judged(station: GroundStation, frame: bytes):
    """The verdict on ``frame``, checked: an acceptance or a documented reason."""
    verdict = station.receive_update(frame)
    assert verdict.accepted or verdict.reason in DOCUMENTED, verdict
    assert verdict.accepted == (verdict.reason == 'accepted'), verdict
    return verdict


# ------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize('signed', [True, False], ids=['signed', 'unsigned'])
def test_any_bytes_end_in_a_documented_verdict_and_only_the_genuine_are_accepted(fleet,
                                                                                  signed):
    # Arrange: the station of a fleet that signs (or of the default, unsigned one); the bytes
    # are random, behind a real magic and version, behind a real envelope or plain header, or
    # the genuine frames themselves
    station = fleet.station(signed)
    env0, env1 = fleet.signed_now()
    genuine = env0 + env1 if signed else [split(f)[1] for f in env0 + env1]
    prefix = st.sampled_from([b'FLUV', b'FLUV\x01', b'FLUV\x02', b'FLUV\x03', b'FLUV\x04',
                              b'FLUV\x05', env0[0][:20], split(env0[0])[1][:26],
                              split(env0[0])[1][:40]])
    anything = st.one_of(st.binary(max_size=600),
                         st.tuples(prefix, st.binary(max_size=600)).map(b''.join),
                         st.sampled_from(genuine))
    accepted, judged = [], []

    @FUZZ
    @given(data=anything)
    def check(data):
        # Act
        verdict = _judged(station, data)
        judged.append(verdict.reason)
        # Assert
        if verdict.accepted:
            accepted.append(data)
            assert data in genuine

    check()
    # Assert: the genuine frames were drawn and taken (the path accepts what it should)
    assert len(judged) >= MIN_EXAMPLES, len(judged)
    assert accepted and station.round_progress[2] == [0, 1]


def test_mutations_of_a_signed_update_are_never_accepted(fleet):
    # Arrange: a station that requires signatures, round 1 open, drone 0's slot free
    station = fleet.station(signed=True)
    env0, env1 = fleet.signed_now()
    reasons = Counter()

    @FUZZ
    @given(frame=forged(fleet, env0, env1))
    def check(frame):
        if frame in env0:
            return                   # not a mutation (e.g. a flip undone by the CRC fix)
        # Act
        verdict = _judged(station, frame)
        # Assert
        assert not verdict.accepted, 'a forged frame was accepted'
        reasons[verdict.reason] += 1

    check()
    # Assert: the mutations met every check of the envelope, and the genuine frames are
    # accepted by the very station that refused them all (the round open, the slot free)
    assert sum(reasons.values()) >= MIN_EXAMPLES, reasons
    assert {'crc', 'signature', 'signer', 'stale', 'unsigned', 'truncated'} <= set(reasons)
    assert all(station.receive_update(f).accepted for f in env0)


@pytest.mark.parametrize('signed', [False, True], ids=['plain', 'signed_by_the_drone'])
def test_structural_mutations_end_in_a_documented_verdict_and_a_finite_model(fleet, signed):
    # Arrange: the default unsigned station (anyone may send it a frame), or one that requires
    # signatures and gets the mutated frame signed with drone 0's own key (the key is in the
    # wrong hands, or the drone's software is broken)
    holder = {'station': fleet.station(signed)}
    reasons = Counter()

    @FUZZ
    @given(frame=structural(fleet))
    def check(frame):
        if signed:
            frame = sign_frame(frame, 0, fleet.keys[0])
        # Act
        verdict = _judged(holder['station'], frame)
        reasons[verdict.reason] += 1
        # Assert: an update that passed every check aggregates into a finite model
        if verdict.accepted:
            holder['station'].close_round(1.0)
            assert all(np.isfinite(w).all() for w in holder['station'].weights.values())
            holder['station'] = fleet.station(signed)

    check()
    # Assert: the mutations reached the decoders' checks behind the CRC
    assert sum(reasons.values()) >= MIN_EXAMPLES, reasons
    assert len(set(reasons) - {'accepted', 'crc', 'signature'}) >= 4, reasons


def test_genuine_but_unusable_frames_are_refused_by_reason(fleet):
    # Arrange: genuinely signed frames that a station still must refuse
    station = fleet.station(signed=True)
    env0, _ = fleet.signed_now()
    inner = bytearray(split(env0[0])[1])
    put(inner, 8, 4, 2)                                       # round 2 while round 1 is open
    late = sign_frame(crc_fixed(inner), 0, fleet.keys[0])
    plain = encode_frame(FrameKind.UPDATE, 1, 1, bytes(8), {}, {})
    # Act
    verdicts = [station.receive_update(f) for f in (late, plain, *env0, *env0)]
    # Assert
    assert [v.reason for v in verdicts[:2]] == ['wrong_round', 'unsigned']
    assert all(v.accepted for v in verdicts[2:2 + len(env0)])
    assert {v.reason for v in verdicts[2 + len(env0):]} == {'replay'}     # the same frames


def test_a_v2_update_of_another_dim_is_refused_before_its_stream_is_read(fleet):
    # Arrange: a QSGD update (s = 2) of the model's dim + 1 whose first level is 3 > s; the
    # station used to decode (and allocate for) the whole stream first, and said 'levels'
    station = fleet.station(signed=False)
    dim = sum(w.size for w in station.weights.values()) + 1
    payload = QsgdPayload(s=2, bucket_sizes=(dim,), norms=np.ones(1, np.float32),
                          negative=np.zeros(dim, bool), levels=np.ones(dim, np.uint8))
    frame = bytearray(encode_qsgd(payload, round_index=1, sender=0,
                                  fingerprint=architecture_fingerprint(station.weights),
                                  metadata=fleet.metadata))
    stream_bits = 32 + dim + 2 * dim                  # norm, signs, 2-bit levels
    stream_at = len(frame) - 4 - (stream_bits + 7) // 8
    for bit in (32 + dim, 33 + dim):                  # level 0 := 0b11
        frame[stream_at + bit // 8] |= 1 << bit % 8
    # Act
    verdict = station.receive_update(crc_fixed(frame))
    # Assert
    assert verdict.reason == 'shape', verdict


@pytest.mark.parametrize('num_layers', [3, 4, 255])
def test_an_lgc_frame_announcing_more_layers_than_the_channels_is_refused(fleet, num_layers):
    # Arrange: drone 0's genuine LGC layer 0, plain, its layer count changed (3 channels)
    if fleet.plain_config.compression.method != 'lgc':
        pytest.skip('an LGC fleet only')
    station = fleet.station(signed=False)
    inner = bytearray(fleet.inner0[0])
    sub = 30 + get(inner, 26, 4)                        # layer_id u8, num_layers u8, ...
    put(inner, sub + 1, 1, num_layers)
    # Act
    verdict = station.receive_update(crc_fixed(inner))
    # Assert: 3 is the fleet's count (taken); more is 'shape', naming both counts
    if num_layers == 3:
        assert verdict.accepted, verdict
    else:
        assert verdict.reason == 'shape', verdict
        assert f'an LGC frame of {num_layers} layers; this fleet sends at most 3' in (
            verdict.detail)


def test_an_accepted_update_near_the_float32_range_is_recorded_as_a_finite_change(fleet):
    # Arrange: a plain v1 update whose values are finite float32 near the range's end (a
    # structural mutation that flips an exponent bit passes every check)
    station = fleet.station(signed=False)
    big = {n: np.full_like(w, 3e38) for n, w in station.weights.items()}
    frame = encode_frame(FrameKind.UPDATE, 1, 0, architecture_fingerprint(station.weights),
                         big, {**fleet.metadata, 'num_samples': 1})
    # Act
    with warnings.catch_warnings():
        warnings.simplefilter('error')          # no overflow on the way
        verdict = station.receive_update(frame)
        record = station.close_round(1.0)
    # Assert: the model moved by about 3e38 per entry, and says so
    assert verdict.accepted and record.participants == [0]
    assert math.isfinite(record.model_change_l2) and record.model_change_l2 > 3e38


# ------------------------------------------------------------- declared sizes, bounded memory

#: (kind, sub-header format, fields): fields are the sub-header's values, with 'D' for the
#: model's own parameter count; each frame declares one size far beyond its 16-byte stream
#: (issue 26: a 63-byte QSGD frame, 151 bytes signed, made the station allocate 47.7 MB).
_SUBHEADERS = {0x11: '<IIIIB', 0x12: '<IIBIB', 0x13: '<IIB', 0x14: '<BBIII'}
DECLARED = {
    'qsgd_dim': (0x11, (12_500_000, 12_500_000, 2, 1, 0)),
    'qsgd_kept': (0x11, ('D', 2**32 - 1, 2, 1, 0)),
    'qsgd_buckets': (0x11, ('D', 'D', 2, 2**32 - 1, 0)),
    'qsgd_levels': (0x11, ('D', 'D', 2**32 - 1, 1, 0)),
    'range_dim': (0x12, (12_500_000, 12_500_000, 8, 1, 0)),
    'range_buckets': (0x12, ('D', 'D', 8, 2**32 - 1, 0)),
    'raw_dim': (0x13, (12_500_000, 12_500_000, 0)),
    'raw_kept': (0x13, ('D', 2**32 - 1, 1)),
    'lgc_k': (0x14, (0, 3, 0, 2**32 - 1, 'D')),
    'lgc_dim': (0x14, (0, 3, 0, 1, 12_500_000)),
    'qsgd_mask': (0x11, (12_500_000, 1, 2, 1, 1)),
    'range_mask': (0x12, (12_500_000, 1, 8, 1, 1)),
    'raw_mask': (0x13, (12_500_000, 1, 1)),
    'lgc_layers': (0x14, (0, 255, 0, 1, 'D')),
}
ALLOCATION_LIMIT_B = 2**20


def declaring_frame(station: GroundStation, metadata: dict, kind: int, fields: tuple) -> bytes:
    """A v2 update of round 1 from drone 0: the fleet's metadata, the sub-header ``fields``
    and a 16-byte stream, whose first word is the one bucket's size (QSGD, range: ``kept``,
    so the bucket table agrees with the header), or for LGC one (index, value) pair: index 0,
    value 0 (docs/wire_format.md, "Codec v2")."""
    dim = sum(w.size for w in station.weights.values())
    values = tuple(dim if f == 'D' else f for f in fields)
    sub = struct.pack(_SUBHEADERS[kind], *values)
    stream = (_U32.pack(values[1]) if kind in (0x11, 0x12) else b'') + bytes(range(16))
    meta = json.dumps(metadata).encode()
    body = _U32.pack(len(meta)) + meta + sub + (bytes(8) if kind == 0x14 else stream[:16])
    head = struct.pack('<4sBBHIH8sI', MAGIC, VERSION_V2, kind, FLAG_METADATA, 1, 0,
                       architecture_fingerprint(station.weights), len(body))
    return crc_fixed(head + body + bytes(4))


@pytest.mark.parametrize('case', list(DECLARED))
def test_a_small_frame_declaring_a_huge_size_is_refused_by_reason_within_1_mib(fleet, case):
    # Arrange: the frame signed with drone 0's own key (a compromised drone: the signature
    # holds), and plain to a station that takes unsigned frames
    kind, fields = DECLARED[case]
    plain_station, signed_station = fleet.station(signed=False), fleet.station(signed=True)
    frame = declaring_frame(plain_station, fleet.metadata, kind, fields)
    signed = sign_frame(frame, 0, fleet.keys[0])
    assert len(signed) < 1024      # most of it the fleet's metadata
    fleet.station(signed=False).receive_update(frame)    # one-time imports (numpy.ma) first
    verdicts, peaks = [], []
    for station, data in ((plain_station, frame), (signed_station, signed)):
        # Act
        tracemalloc.start()
        try:
            verdicts.append(station.receive_update(data))
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    # Assert: refused by a documented reason, having allocated under 1 MiB
    for verdict in verdicts:
        assert not verdict.accepted and verdict.reason in DOCUMENTED, verdict
    assert max(peaks) < ALLOCATION_LIMIT_B, (peaks, [v.reason for v in verdicts])
