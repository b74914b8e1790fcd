"""The signed envelope (wire version 4) against docs/wire_format.md: layout, and every
rejection by its reason before the inner frame is decoded (the issue time last)."""

from __future__ import annotations

import random
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fl_uav.compression.codec import (
    GROUND_STATION_ID,
    DecodeLimits,
    FrameKind,
    decode_frame,
    encode_frame,
    model_fingerprint,
)
from fl_uav.compression.codec_v2 import decode_v2, encode_raw
from fl_uav.compression.errors import FrameError
from fl_uav.compression.signing import (
    ALL_REASONS_SIGNED,
    ENVELOPE_HEADER_SIZE,
    ENVELOPE_OVERHEAD,
    SIGNATURE_SIZE,
    FrameAuth,
    Freshness,
    open_frame,
    sign_frame,
)

FP = model_fingerprint([('w', (2,), 'float32')])
LIMITS = DecodeLimits()
DRONE_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
STATION_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
KEYS = {1: DRONE_KEY.public_key(), GROUND_STATION_ID: STATION_KEY.public_key()}
ISSUED_MS = 1_764_000_000_000        # 2025-11-24T16:00:00Z: the doc's example
H = ENVELOPE_HEADER_SIZE             # 20


def _update(sender: int = 1) -> bytes:
    return encode_frame(FrameKind.UPDATE, 3, sender, FP,
                        {'w': np.array([1.0, -2.0], np.float32)}, {'n': 4})


def _recrc(frame: bytes | bytearray) -> bytes:
    body = bytes(frame[:-4])
    return body + struct.pack('<I', zlib.crc32(body))


def _reason(data: bytes, require: bool = True, keys=KEYS,
            freshness: Freshness | None = None) -> str:
    with pytest.raises(FrameError) as err:
        open_frame(data, LIMITS, keys, require, freshness)
    return err.value.reason


def test_envelope_layout_is_the_documented_one():
    # Arrange
    inner = _update()
    # Act
    signed = sign_frame(inner, 1, DRONE_KEY, issued_ms=ISSUED_MS)
    # Assert: header, inner frame unchanged, signature over all before it, CRC last
    assert len(signed) == len(inner) + ENVELOPE_OVERHEAD == 83 + 88    # the doc's example
    assert signed[:H] == b'FLUV' + bytes([4, 1]) + struct.pack('<HQI', 1, ISSUED_MS,
                                                                len(inner))
    assert signed[:H].hex(' ') == ('46 4c 55 56 04 01 01 00 00 e8 97 b6 9a 01 00 00 '
                                   '53 00 00 00')          # the bytes docs/wire_format.md shows
    assert signed[H:H + len(inner)] == inner
    signature = signed[H + len(inner):-4]
    assert len(signature) == SIGNATURE_SIZE
    DRONE_KEY.public_key().verify(signature, signed[:H + len(inner)])   # raises if not
    assert struct.unpack('<I', signed[-4:])[0] == zlib.crc32(signed[:-4])


@pytest.mark.parametrize('require', [True, False])
def test_a_signed_v1_frame_opens_to_its_inner_frame_which_decodes(require):
    # Arrange
    signed = sign_frame(_update(), 1, DRONE_KEY)
    # Act
    inner = open_frame(signed, LIMITS, KEYS, require)
    frame = decode_frame(inner, LIMITS, expected_fingerprint=FP)
    # Assert
    assert bytes(inner) == _update()
    assert frame.sender == 1 and frame.round_index == 3 and frame.metadata == {'n': 4}


def test_a_signed_v2_frame_opens_and_decodes():
    # Arrange
    v2 = encode_raw(np.array([0.5, 0.25], np.float32), round_index=2, sender=1,
                    fingerprint=FP, metadata={'n': 1})
    # Act
    inner = open_frame(sign_frame(v2, 1, DRONE_KEY), LIMITS, KEYS, True)
    # Assert
    assert decode_v2(inner, LIMITS).sender == 1


def test_an_unsigned_frame_passes_unchanged_when_signatures_are_not_required():
    # Arrange
    plain = _update()
    # Act
    inner = open_frame(plain, LIMITS, KEYS, False)
    # Assert
    assert bytes(inner) == plain
    assert FrameAuth().open(plain, LIMITS).tobytes() == plain    # the default node


def test_an_unsigned_frame_is_rejected_when_signatures_are_required():
    # Act + Assert
    assert _reason(_update()) == 'unsigned'


def test_a_tampered_byte_is_a_crc_error_and_with_a_fixed_crc_a_bad_signature():
    # Arrange: one bit of the inner frame's round flipped (and its inner CRC re-made)
    signed = bytearray(sign_frame(_update(), 1, DRONE_KEY))
    signed[H + 8] ^= 0x01
    # Act + Assert
    assert _reason(bytes(signed)) == 'crc'
    assert _reason(_recrc(signed)) == 'signature'


def test_a_tampered_signature_is_rejected():
    # Arrange
    signed = bytearray(sign_frame(_update(), 1, DRONE_KEY))
    signed[-5] ^= 0x80               # last signature byte
    # Act + Assert
    assert _reason(_recrc(signed)) == 'signature'


def test_a_frame_signed_with_another_key_is_rejected():
    # Arrange: drone 1's frame signed by a key that is not drone 1's
    forged = sign_frame(_update(), 1, Ed25519PrivateKey.generate())
    # Act + Assert
    assert _reason(forged) == 'signature'
    assert _reason(forged, require=False) == 'signature'   # a signed frame is always verified


def test_an_unknown_signer_and_a_signer_that_is_not_the_sender_are_rejected():
    # Arrange
    unknown = sign_frame(_update(sender=7), 7, DRONE_KEY)
    # drone 1 signs, but the inner frame claims the station sent it
    impostor = sign_frame(_update(sender=GROUND_STATION_ID), 1, DRONE_KEY)
    # Act + Assert
    assert _reason(unknown) == 'signer'
    assert _reason(impostor) == 'signer'


def test_a_truncated_signature_or_trailing_bytes_are_length_errors():
    # Arrange
    signed = sign_frame(_update(), 1, DRONE_KEY)
    cut = signed[:-4 - 10]                        # 10 signature bytes missing, CRC kept
    cut = _recrc(cut + b'\0\0\0\0')
    # Act + Assert
    assert _reason(cut) == 'truncated'
    assert _reason(signed[:60]) == 'truncated'    # shorter than any envelope
    assert _reason(signed + b'\0') == 'length'


def test_unknown_scheme_version_and_magic_are_rejected_by_their_reasons():
    # Arrange
    signed = sign_frame(_update(), 1, DRONE_KEY)
    scheme = _recrc(signed[:5] + b'\x02' + signed[6:])
    version = signed[:4] + b'\x05' + signed[5:]
    magic = b'XLUV' + signed[4:]
    # Act + Assert
    assert _reason(scheme) == 'header'
    assert _reason(version) == 'version'
    assert _reason(magic) == 'bad_magic'
    with pytest.raises(FrameError) as err:
        open_frame(signed, DecodeLimits(max_frame_bytes=len(signed) - 1), KEYS, True)
    assert err.value.reason == 'oversized'


def test_v1_and_v2_decoders_reject_the_envelope_as_an_unknown_version():
    # Arrange
    signed = sign_frame(_update(), 1, DRONE_KEY)
    # Act + Assert
    for decode in (decode_frame, decode_v2):
        with pytest.raises(FrameError) as err:
            decode(signed, LIMITS)
        assert err.value.reason == 'version'


def test_frame_auth_seals_with_its_key_and_reasons_are_listed():
    # Arrange
    auth = FrameAuth(own_id=1, private_key=DRONE_KEY, public_keys=KEYS, require=True)
    # Act
    sealed = auth.seal(_update())
    # Assert
    assert bytes(auth.open(sealed, LIMITS)) == _update()
    assert FrameAuth().seal(_update()) == _update()
    assert set(ALL_REASONS_SIGNED) == {'unsigned', 'signer', 'signature', 'stale'}


def _clock_at(unix_s: float):
    return lambda: unix_s


@pytest.mark.parametrize('received_after_s, opens', [
    (0.0, True), (299.0, True), (301.0, False),      # max_age_s 300: a replay later is stale
    (-9.0, True), (-11.0, False),                    # max_skew_s 10: a clock too far ahead
])
def test_a_signed_frame_opens_only_within_its_freshness_window(received_after_s, opens):
    # Arrange
    signed = sign_frame(_update(), 1, DRONE_KEY, issued_ms=ISSUED_MS)
    freshness = Freshness(300.0, 10.0, clock=_clock_at(ISSUED_MS / 1000 + received_after_s))
    # Act + Assert
    if opens:
        assert bytes(open_frame(signed, LIMITS, KEYS, True, freshness)) == _update()
    else:
        with pytest.raises(FrameError) as err:
            open_frame(signed, LIMITS, KEYS, True, freshness)
        assert err.value.reason == 'stale' and err.value.field == 'issued_ms'
        assert ('ago' if received_after_s > 0 else 'future') in str(err.value)


def test_freshness_is_checked_after_the_signature_and_the_issue_time_is_signed():
    # Arrange: a stale frame whose issue time an attacker moved to now (CRC re-made)
    freshness = Freshness(300.0, 10.0, clock=_clock_at(ISSUED_MS / 1000 + 3600))
    signed = bytearray(sign_frame(_update(), 1, DRONE_KEY, issued_ms=ISSUED_MS))
    signed[8:16] = struct.pack('<Q', ISSUED_MS + 3_600_000)
    forged_unsigned = sign_frame(_update(), 1, Ed25519PrivateKey.generate(),
                                 issued_ms=ISSUED_MS)
    # Act + Assert: the moved time breaks the signature; a bad signature is not 'stale'
    assert _reason(_recrc(signed), freshness=freshness) == 'signature'
    assert _reason(forged_unsigned, freshness=freshness) == 'signature'


def test_the_first_envelope_version_3_is_refused_by_name():
    # Arrange: a version 3 header (no issue time)
    v3 = b'FLUV' + bytes([3, 1]) + struct.pack('<HI', 1, 83) + _update() + bytes(68)
    # Act
    with pytest.raises(FrameError) as err:
        open_frame(v3, LIMITS, KEYS, False)
    # Assert
    assert err.value.reason == 'version' and 'older fl_uav' in str(err.value)


@pytest.mark.parametrize('age, skew', [(0.0, 10.0), (300.0, -1.0), (float('nan'), 10.0),
                                       (300.0, float('inf'))])
def test_a_freshness_window_must_be_positive_seconds(age, skew):
    with pytest.raises(ValueError, match='positive number of seconds'):
        Freshness(age, skew)


def test_a_plain_frame_from_a_sender_that_has_signed_is_refused_even_when_not_required():
    # Arrange: a node in the rollout phase (keys, signatures not required)
    auth = FrameAuth(own_id=GROUND_STATION_ID, private_key=STATION_KEY, public_keys=KEYS,
                     require=False)
    plain_before = auth.open(_update(sender=1), LIMITS)       # drone 1 has not signed yet
    auth.open(sign_frame(_update(sender=1), 1, DRONE_KEY), LIMITS)
    # Act: the inner frame of a recorded envelope, sent plain
    with pytest.raises(FrameError) as err:
        auth.open(_update(sender=1), LIMITS)
    # Assert
    assert bytes(plain_before) == _update(sender=1)
    assert err.value.reason == 'unsigned' and 'signed its frames before' in str(err.value)
    assert bytes(auth.open(_update(sender=7), LIMITS)) == _update(sender=7)   # others: as before


def test_mutated_envelopes_are_frame_errors_without_big_allocations():
    # Prepare: seeded cuts, flipped bytes and absurd u8..u64 values (inner_len 2**31, 2**32-1,
    # the signer, issued_ms) in a signed v1 and a signed v2 frame, most with the CRC fixed
    rng = random.Random(21)
    absurd = [0, 1, 255, 2**15, 2**16 - 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]
    signed = [sign_frame(_update(), 1, DRONE_KEY, ISSUED_MS),
              sign_frame(encode_raw(np.arange(6, dtype=np.float32), round_index=3, sender=1,
                                    fingerprint=FP), 1, DRONE_KEY, ISSUED_MS)]
    mutated = []
    for frame in signed:
        mutated += [frame[:cut] for cut in range(0, len(frame), 7)]
        for _ in range(300):
            b = bytearray(frame)
            if rng.random() < 0.5:
                b[rng.randrange(len(b) - 4)] = rng.getrandbits(8)
            else:
                width = rng.choice([1, 2, 4, 8])
                pos = rng.randrange(len(b) - 4 - width)
                b[pos:pos + width] = (rng.choice(absurd) % (1 << 8 * width)).to_bytes(
                    width, 'little')
            mutated.append(_recrc(b) if rng.random() < 0.9 else bytes(b))
    reasons, opened = [], 0
    tracemalloc.start()
    # Execute
    try:
        for data in mutated:
            try:
                inner = open_frame(data, LIMITS, KEYS, True)
                (decode_v2 if inner[4] == 2 else decode_frame)(inner, LIMITS)
                opened += 1
            except FrameError as exc:
                reasons.append(exc.reason)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Assert: every other exception type would have ended the loop; a changed byte never
    # opens (the signature covers it), a flip that changed nothing does
    assert len(reasons) + opened == len(mutated)
    assert set(reasons) <= set(ALL_REASONS_SIGNED) | {'bad_magic', 'version', 'truncated',
                                                      'length', 'oversized', 'crc', 'header'}
    assert opened == sum(m in signed for m in mutated)
    assert peak_bytes < 4 * 2**20
