"""Signed station heartbeats: the station signs, a drone takes only genuine, new and fresh beats
and counts the others by reason."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fl_uav.compression.codec import GROUND_STATION_ID
from fl_uav.compression.signing import FrameAuth
from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig, SecurityConfig
from fl_uav.fleet.heartbeat_auth import (
    REFUSAL_REASONS,
    HeartbeatRefused,
    HeartbeatSigner,
    HeartbeatVerifier,
    heartbeat_signer,
    heartbeat_verifier,
    signed_bytes,
)
from fl_uav.fleet.keys import generate_fleet_keys, load_frame_auth
from fl_uav.fleet.station_heartbeat import HEARTBEAT_NAME, Heartbeat, StationPhase

STATION_KEY = Ed25519PrivateKey.generate()
BEAT = Heartbeat('a1b2', 3, 10, StationPhase.PLANNING, 12.5, 1.0)
T0_S = 1_764_000_000.0           # the drone's wall clock at the start of each test


class Clock:
    """A wall clock the test moves: seconds for the drone, ms for the station."""

    def __init__(self, now_s: float = T0_S) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def ms(self) -> int:
        return round(self.now_s * 1000)


def _signer(clock: Clock, key: Ed25519PrivateKey = STATION_KEY,
            boot: str | None = None) -> HeartbeatSigner:
    return HeartbeatSigner(key, clock.ms, boot)


def _verifier(clock: Clock, require: bool = True, key=STATION_KEY) -> HeartbeatVerifier:
    return HeartbeatVerifier(None if key is None else key.public_key(), require=require,
                             max_age_s=15.0, max_skew_s=10.0, clock=clock)


def _refused(verifier: HeartbeatVerifier, values, name: str = HEARTBEAT_NAME) -> str:
    with pytest.raises(HeartbeatRefused) as caught:
        verifier.open(name, tuple(values))
    return caught.value.reason


def _replace(values, key: str, value: str) -> tuple:
    return tuple((k, value if k == key else v) for k, v in values)


def test_a_signed_beat_round_trips_with_boot_counter_and_stamp():
    # Arrange
    clock = Clock()
    signer, verifier = _signer(clock), _verifier(clock)
    # Act
    first, second = signer.sign(BEAT), signer.sign(BEAT)
    taken = [verifier.open(HEARTBEAT_NAME, first), verifier.open(HEARTBEAT_NAME, second)]
    # Assert: the beat's own values first, then the four of the signature; nothing refused
    assert taken == [BEAT, BEAT]
    assert first[:6] == BEAT.values()
    fields = dict(second)
    assert [k for k, _ in second[6:]] == ['boot', 'counter', 'stamp_ms', 'signature']
    assert (fields['boot'], fields['counter'], fields['stamp_ms']) == (
        signer.boot, '2', str(clock.ms()))
    assert len(fields['boot']) == 16 and len(fields['signature']) == 128
    assert (verifier.boot, verifier.counter) == (signer.boot, 2) and not verifier.refused


def test_the_signature_covers_every_pair_but_itself_in_key_order():
    # Arrange
    values = _signer(Clock(), boot='0123456789abcdef').sign(BEAT)
    # Act
    shuffled = tuple(reversed(values))
    # Assert: the order the pairs come in does not matter, a pair's value does
    assert signed_bytes(HEARTBEAT_NAME, values) == signed_bytes(HEARTBEAT_NAME, shuffled)
    assert signed_bytes(HEARTBEAT_NAME, values).startswith(
        b'["fl_uav.heartbeat.v1","fl_uav: ground_station heartbeat",[["boot",'
        b'"0123456789abcdef"],["counter","1"],["num_rounds","10"],["period_s","1"],')
    assert b'signature' not in signed_bytes(HEARTBEAT_NAME, values)
    assert _verifier(Clock()).open(HEARTBEAT_NAME, shuffled) == BEAT


@pytest.mark.parametrize('alter', [
    lambda v: _replace(v, 'round', '4'),                 # a field altered after signing
    lambda v: _replace(v, 'phase', 'waiting'),
    lambda v: _replace(v, 'period_s', '0.1'),
    lambda v: _replace(v, 'counter', '99'),              # the counter moved on
    lambda v: _replace(v, 'stamp_ms', str(int(dict(v)['stamp_ms']) + 60_000)),
    lambda v: _replace(v, 'boot', 'ffffffffffffffff'),
    lambda v: (*v, ('note', 'hello')),                   # a pair added
    lambda v: _replace(v, 'signature', 'ab' * 64),       # another signature
], ids=['round', 'phase', 'period', 'counter', 'stamp', 'boot', 'added', 'signature'])
def test_a_beat_altered_after_signing_is_forged(alter):
    # Arrange
    clock = Clock()
    values = _signer(clock).sign(BEAT)
    verifier = _verifier(clock)
    # Act / Assert
    assert _refused(verifier, alter(values)) == 'forged'
    assert dict(verifier.refused) == {'forged': 1} and verifier.boot is None


def test_a_beat_under_another_status_name_is_forged():
    clock = Clock()
    values = _signer(clock).sign(BEAT)
    assert _refused(_verifier(clock), values, name='fl_uav: uav0') == 'forged'


def test_a_beat_signed_with_another_key_is_forged_and_a_drone_with_another_station_key_too():
    # Arrange: a rogue's own key; a drone that holds another fleet's station.pub
    clock = Clock()
    rogue = _signer(clock, Ed25519PrivateKey.generate()).sign(BEAT)
    genuine = _signer(clock).sign(BEAT)
    other_fleet = _verifier(clock, key=Ed25519PrivateKey.generate())
    # Act / Assert
    assert _refused(_verifier(clock), rogue) == 'forged'
    assert _refused(other_fleet, genuine) == 'forged'


def test_an_unsigned_beat_is_refused_when_required():
    verifier = _verifier(Clock())
    assert _refused(verifier, BEAT.values()) == 'unsigned'
    assert dict(verifier.refused) == {'unsigned': 1}


def test_unsigned_beats_count_when_not_required_until_a_signed_one_was_taken():
    # Arrange: keys, require_signatures false (the rollout)
    clock = Clock()
    verifier = _verifier(clock, require=False)
    # Act / Assert: a plain beat counts (it proves nothing), until the station's first signed
    # beat: after it, a plain one is someone else's
    assert verifier.open(HEARTBEAT_NAME, BEAT.values()) == BEAT
    assert verifier.open(HEARTBEAT_NAME, _signer(clock).sign(BEAT)) == BEAT
    assert _refused(verifier, BEAT.values()) == 'unsigned'
    # ... and a forged signed beat is refused, required or not
    assert _refused(verifier, _signer(clock, Ed25519PrivateKey.generate()).sign(BEAT)) \
        == 'forged'


def test_a_drone_without_keys_takes_every_well_formed_beat():
    # Arrange: no keys_dir on the drone: it cannot verify
    clock = Clock()
    verifier = heartbeat_verifier(FrameAuth(), SecurityConfig(), clock)
    # Act / Assert: signed or not, forged or not (a beat then proves nothing)
    for values in (BEAT.values(), _signer(clock).sign(BEAT),
                   _signer(clock, Ed25519PrivateKey.generate()).sign(BEAT)):
        assert verifier.open(HEARTBEAT_NAME, values) == BEAT
    assert _refused(verifier, _replace(BEAT.values(), 'round', '11')) == 'malformed'


def test_a_beat_taken_again_or_an_earlier_one_is_replayed():
    # Arrange: beats 1..3 of one boot; the drone took 1 and 3 (2 was lost on the radio)
    clock = Clock()
    signer, verifier = _signer(clock), _verifier(clock)
    beats = [signer.sign(BEAT) for _ in range(3)]
    verifier.open(HEARTBEAT_NAME, beats[0])
    verifier.open(HEARTBEAT_NAME, beats[2])
    # Act / Assert: a counter not above the last taken is a replay, whatever was lost
    assert [_refused(verifier, b) for b in beats] == ['replayed'] * 3
    assert verifier.open(HEARTBEAT_NAME, signer.sign(BEAT)) == BEAT     # counter 4
    assert dict(verifier.refused) == {'replayed': 3}


def test_a_restarted_station_is_taken_and_its_previous_boot_never_again():
    # Arrange: boot A beats; the station restarts 5 s later as boot B
    clock = Clock()
    boot_a = _signer(clock, boot='aaaaaaaaaaaaaaaa')
    verifier = _verifier(clock)
    captured = [boot_a.sign(BEAT) for _ in range(3)]
    verifier.open(HEARTBEAT_NAME, captured[0])
    clock.now_s += 5.0
    boot_b = _signer(clock, boot='bbbbbbbbbbbbbbbb')
    # Act
    taken = verifier.open(HEARTBEAT_NAME, boot_b.sign(BEAT))
    # Assert: B counts (counter 1: a new boot counts from 1); A's beats, even those the drone
    # never took (counters 2 and 3) and even a later one, are replays from now on
    assert taken == BEAT and verifier.boot == 'bbbbbbbbbbbbbbbb'
    assert [_refused(verifier, b) for b in captured[1:]] == ['replayed', 'replayed']
    clock.now_s += 1.0
    assert _refused(verifier, boot_a.sign(BEAT)) == 'replayed'


def test_a_boot_stamped_before_the_last_beat_taken_is_no_later_station_start():
    # Arrange: the drone took boot B's beat at T0 + 10 s; a beat of an unknown boot C was
    # signed at T0 (a capture of a station that ran before, played back within the age)
    clock = Clock()
    earlier = _signer(clock, boot='cccccccccccccccc').sign(BEAT)
    clock.now_s += 10.0
    verifier = _verifier(clock)
    verifier.open(HEARTBEAT_NAME, _signer(clock, boot='bbbbbbbbbbbbbbbb').sign(BEAT))
    # Act / Assert
    assert _refused(verifier, earlier) == 'replayed'
    assert verifier.boot == 'bbbbbbbbbbbbbbbb'


@pytest.mark.parametrize('age_s, reason', [
    (15.0, None), (15.1, 'stale'),              # heartbeat_max_age_s 15 s
    (-10.0, None), (-10.1, 'stale'),            # max_clock_skew_s 10 s: the station ahead
])
def test_a_beat_older_than_the_age_limit_or_too_far_ahead_is_stale(age_s, reason):
    # Arrange: signed at T0 - age_s on the station's clock
    verifier = _verifier(Clock())
    values = _signer(Clock(T0_S - age_s)).sign(BEAT)
    # Act / Assert
    if reason is None:
        assert verifier.open(HEARTBEAT_NAME, values) == BEAT
    else:
        assert _refused(verifier, values) == reason


def test_a_capture_played_back_to_a_restarted_drone_after_the_age_limit_is_stale():
    # Arrange: a capture of the real station's beats; the drone restarts (forgets every boot)
    clock = Clock()
    signer = _signer(clock)
    capture = [signer.sign(BEAT) for _ in range(3)]
    # Act: played back 20 s later (and, to see the bound, within the limit to another one)
    clock.now_s += 20.0
    restarted = _verifier(clock)
    within = _verifier(Clock(T0_S + 14.0))
    # Assert: stale, all of them; within the age limit the newest beat counts once
    assert [_refused(restarted, b) for b in capture] == ['stale'] * 3
    assert within.open(HEARTBEAT_NAME, capture[2]) == BEAT
    assert _refused(within, capture[2]) == 'replayed'


def test_a_refused_beat_moves_nothing():
    # Arrange: counter 2 arrives stale (the drone's clock jumped), then the clock is right
    clock = Clock()
    signer, verifier = _signer(clock), _verifier(clock)
    first, second = signer.sign(BEAT), signer.sign(BEAT)
    clock.now_s += 60.0
    assert _refused(verifier, second) == 'stale'
    # Act: back on time, counter 1 (below the stale 2) still counts
    clock.now_s -= 60.0
    # Assert
    assert verifier.open(HEARTBEAT_NAME, first) == BEAT
    assert verifier.counter == 1


@pytest.mark.parametrize('alter, message', [
    (lambda v: (*v, ('round', '3')), r"keys \['round'\] more than once"),
    (lambda v: tuple((k, x) for k, x in v if k != 'counter'), r'missing or malformed counter'),
    (lambda v: _replace(v, 'counter', '0'), r'malformed counter'),
    (lambda v: _replace(v, 'counter', '+7'), r'malformed counter'),
    (lambda v: _replace(v, 'boot', 'AAAAAAAAAAAAAAAA'), r'malformed boot'),
    (lambda v: _replace(v, 'stamp_ms', '-5'), r'malformed stamp_ms'),
    (lambda v: _replace(v, 'signature', 'xyz'), r'malformed signature'),
], ids=['twice', 'no-counter', 'counter-0', 'counter-sign', 'boot', 'stamp', 'signature'])
def test_a_malformed_beat_is_refused_naming_the_problem(alter, message):
    # Arrange
    clock = Clock()
    verifier = _verifier(clock)
    values = alter(_signer(clock).sign(BEAT))
    # Act
    with pytest.raises(HeartbeatRefused, match=message) as caught:
        verifier.open(HEARTBEAT_NAME, values)
    # Assert
    assert caught.value.reason == 'malformed' and dict(verifier.refused) == {'malformed': 1}


@pytest.mark.parametrize('values, reason', [
    (tuple((f'k{i}', 'v') for i in range(33)), 'malformed'),      # more than 32 pairs
    ((*_signer(Clock()).sign(BEAT), ('note', '\ud800')), 'forged'),  # a lone surrogate
    ((*_signer(Clock()).sign(BEAT)[:-1], ('note', 'é'), _signer(Clock()).sign(BEAT)[-1]),
     'forged'),
    (_replace(BEAT.values(), 'run_id', '\ud800'), 'unsigned'),
], ids=['many', 'surrogate', 'non-ascii', 'unsigned-surrogate'])
def test_odd_strings_and_too_many_pairs_are_refused_never_raised_otherwise(values, reason):
    assert _refused(_verifier(Clock()), values) == reason


def test_a_genuine_beat_with_a_bad_field_is_malformed_and_moves_nothing():
    # Arrange: a station bug signs a phase no drone knows
    clock = Clock()
    verifier = _verifier(clock)
    values = _signer(clock).sign(Heartbeat('a1b2', 3, 10, 'napping', 1.0, 1.0))
    # Act / Assert
    with pytest.raises(HeartbeatRefused, match=r"phase 'napping' is not one of"):
        verifier.open(HEARTBEAT_NAME, values)
    assert verifier.boot is None and dict(verifier.refused) == {'malformed': 1}


def test_refusals_are_counted_by_reason_and_every_reason_is_known():
    # Arrange
    clock = Clock()
    signer, verifier = _signer(clock), _verifier(clock)
    genuine = signer.sign(BEAT)
    verifier.open(HEARTBEAT_NAME, genuine)
    # Act
    for values in (BEAT.values(), BEAT.values(), genuine,
                   _signer(clock, Ed25519PrivateKey.generate()).sign(BEAT)):
        _refused(verifier, values)
    verifier.refuse('malformed', 'heartbeat message with 2 statuses, not 1')
    # Assert
    assert dict(verifier.refused) == {'unsigned': 2, 'replayed': 1, 'forged': 1,
                                      'malformed': 1}
    assert set(verifier.refused) <= set(REFUSAL_REASONS)
    assert REFUSAL_REASONS == ('malformed', 'unsigned', 'forged', 'replayed', 'stale')


def test_the_station_signs_with_station_key_and_a_drone_verifies_with_station_pub(tmp_path):
    # Arrange: fl-uav keygen's layout; drone 0 requires signatures
    generate_fleet_keys(tmp_path, 1)
    security = SecurityConfig(str(tmp_path), require_signatures=True, heartbeat_max_age_s=5.0)
    station = load_frame_auth(security, GROUND_STATION_ID, [0])
    drone = load_frame_auth(security, 0, [GROUND_STATION_ID])
    # Act
    signer = heartbeat_signer(station)
    verifier = heartbeat_verifier(drone, security)
    # Assert: the real clocks; no signer without keys, nor from a drone's identity
    assert verifier.open(HEARTBEAT_NAME, signer.sign(BEAT)) == BEAT
    assert heartbeat_signer(FrameAuth()) is None and heartbeat_signer(drone) is None
    assert signer.boot != heartbeat_signer(station).boot      # one boot per start


def test_boot_ids_are_checked_and_counters_never_repeat():
    with pytest.raises(ValueError, match='16 lower-case hex digits'):
        HeartbeatSigner(STATION_KEY, boot='xyz')
    signer = _signer(Clock())
    counters = [dict(signer.sign(BEAT))['counter'] for _ in range(5)]
    assert counters == ['1', '2', '3', '4', '5']


@pytest.mark.parametrize('value', [0.0, -1.0, float('inf')])
def test_the_heartbeat_age_limit_is_a_positive_number_of_seconds(value):
    with pytest.raises(ConfigError, match=r'security.heartbeat_max_age_s must be a positive '
                                          r'number of seconds'):
        build_config(FleetConfig, {'security.heartbeat_max_age_s': value})


def test_requiring_signed_beats_needs_the_station_key():
    with pytest.raises(ValueError, match="needs the station's public key"):
        HeartbeatVerifier(None, require=True, max_age_s=15.0, max_skew_s=10.0)
