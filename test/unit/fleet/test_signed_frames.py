"""Signed frames in the fleet: keys (fl-uav keygen's layout), the security.* config, and a
station and a drone that sign, verify, and count forged or unsigned frames by reason."""

from __future__ import annotations

import dataclasses
import stat
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fl_uav.compression.codec import GROUND_STATION_ID, FrameKind, encode_frame
from fl_uav.compression.signing import Freshness, sign_frame
from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig, SecurityConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.keys import generate_fleet_keys, load_frame_auth, require_keys
from fl_uav.fleet.messages import FinishCommand, RoundTask
from fl_uav.fleet.world_setup import map_labeler

REPO = Path(__file__).resolve().parents[3]

BASE = {'num_drones': 2, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
        'rounds.num_rounds': 2, 'rounds.deadline_s': 10.0, 'rounds.first_round_extra_s': 0.0}


def _config(keys_dir, require: bool = True) -> FleetConfig:
    return build_config(FleetConfig, {**BASE, 'security.keys_dir': str(keys_dir),
                                      'security.require_signatures': require})


def _eval_set(n: int = 20):
    rng = np.random.default_rng(0)
    return rng.normal(0, 1, (n, 3, 32, 32)).astype(np.float32), rng.integers(0, 7, n)


@pytest.fixture
def keys(tmp_path):
    generate_fleet_keys(tmp_path / 'keys', 2)
    return tmp_path / 'keys'


def _update(station: GroundStation, sender: int, value: float = 1.0) -> bytes:
    delta = {n: np.full_like(w, value) for n, w in station.weights.items()}
    return encode_frame(FrameKind.UPDATE, 1, sender, station._fingerprint, delta,
                        {'num_samples': 10})


def _drone_key(keys, drone: int) -> Ed25519PrivateKey:
    return load_frame_auth(SecurityConfig(str(keys)), drone, []).private_key


def test_keygen_writes_a_pair_per_node_with_private_keys_0600(tmp_path):
    # Act
    written = generate_fleet_keys(tmp_path / 'k', 2)
    # Assert
    assert sorted(p.name for p in written) == ['drone0.key', 'drone0.pub', 'drone1.key',
                                               'drone1.pub', 'station.key', 'station.pub']
    for path in written:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o600 if path.suffix == '.key' else 0o644), (path, oct(mode))
    assert b'BEGIN PRIVATE KEY' in (tmp_path / 'k' / 'drone0.key').read_bytes()
    with pytest.raises(FileExistsError, match='drone0.key'):
        generate_fleet_keys(tmp_path / 'k', 1)      # never overwrites a key


@pytest.mark.parametrize(('security', 'refused'), [
    ({}, True),
    ({'security.require_signatures': False}, True),
    ({'security.insecure': True}, False),
    ({'security.keys_dir': '/etc/fl_uav/keys'}, False),
])
def test_a_node_without_keys_is_refused_unless_the_config_says_insecure(security, refused):
    # Arrange: the shipped configs' security (require_signatures true, no keys_dir yet)
    config = build_config(FleetConfig, {'security.require_signatures': True, **security})
    # Act + Assert: one line naming both keys and what to do
    if refused:
        with pytest.raises(ConfigError, match=r'drone 2 has no keys \(security.keys_dir is '
                                              r'empty\).*fl-uav keygen.*security.insecure: true'):
            require_keys(config.security, 'drone 2')
    else:
        require_keys(config.security, 'drone 2')


def test_the_shipped_field_configs_require_signatures_and_are_not_insecure():
    for name in ('drone.yaml', 'ground_station.yaml', 'fleet.yaml'):
        doc = yaml.safe_load((REPO / 'config' / name).read_text())
        security = doc['/**']['ros__parameters']['security']
        assert security['require_signatures'] is True and security['insecure'] is False, name


def test_a_missing_or_exposed_key_fails_at_start_naming_the_key_and_file(keys):
    # Arrange
    (keys / 'drone1.pub').unlink()
    (keys / 'drone0.key').chmod(0o644)
    # Act + Assert
    with pytest.raises(ConfigError, match=r'security.keys_dir: .*drone1.pub'):
        load_frame_auth(SecurityConfig(str(keys)), GROUND_STATION_ID, [0, 1])
    with pytest.raises(ConfigError, match=r'drone0.key: a private key readable by others'):
        load_frame_auth(SecurityConfig(str(keys)), 0, [GROUND_STATION_ID])


def test_station_counts_unsigned_and_forged_updates_by_reason_and_takes_the_signed_one(keys):
    # Arrange
    station = GroundStation(_config(keys), *_eval_set())
    station.open_round(now_s=0.0)
    intruder = Ed25519PrivateKey.generate()
    bad = [
        _update(station, 0),                                        # unsigned
        sign_frame(_update(station, 0), 0, intruder),               # forged: wrong key
        sign_frame(_update(station, 1), 0, _drone_key(keys, 0)),    # drone 0 posing as 1
        sign_frame(_update(station, 5), 5, intruder),               # no such signer
    ]
    good = sign_frame(_update(station, 0), 0, _drone_key(keys, 0))
    # Act
    verdicts = [station.receive_update(frame) for frame in [*bad, good]]
    record = station.close_round(now_s=1.0)
    # Assert
    assert [v.reason for v in verdicts] == ['unsigned', 'signature', 'signer', 'signer',
                                            'accepted']
    assert record.participants == [0]
    assert record.rejected == {'unsigned': 1, 'signature': 1, 'signer': 2}
    assert record.bytes_up[0] == len(good)          # the envelope travelled: it is counted


def test_signed_fleet_round_trip_and_drone_counts_forged_station_frames(keys):
    # Arrange
    config = _config(keys)
    station = GroundStation(config, *_eval_set())
    agent = DroneAgent(config, 1, map_labeler(config.world, config.camera))
    opening = station.open_round(now_s=0.0)
    plain = encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, agent.fingerprint,
                         station.weights, {'knobs': {}})
    forged = sign_frame(plain, GROUND_STATION_ID, Ed25519PrivateKey.generate())
    # Act
    task = agent.accept_global_frame(opening.frame)
    rejected = [agent.accept_global_frame(frame) for frame in (plain, forged)]
    report = agent.train_round(task)
    verdict = station.receive_update(report.frame)
    finish = agent.accept_global_frame(station.finish_frame())
    # Assert
    assert opening.frame[4] == 4                    # the global model goes out signed
    assert isinstance(task, RoundTask) and task.round_index == 1
    assert rejected == [None, None]
    assert agent.rejected_reasons == {'unsigned': 1, 'signature': 1}
    assert report.frame[4] == 4 and verdict.accepted, verdict
    assert isinstance(finish, FinishCommand)


def test_without_required_signatures_plain_and_signed_frames_are_both_accepted(keys):
    # Arrange
    station = GroundStation(_config(keys, require=False), *_eval_set())
    station.open_round(now_s=0.0)
    # Act
    plain = station.receive_update(_update(station, 0))
    signed = station.receive_update(sign_frame(_update(station, 1), 1, _drone_key(keys, 1)))
    # Assert
    assert plain.accepted and signed.accepted


def test_a_recorded_station_frame_replayed_later_is_stale(keys):
    # Arrange: the drone hears the recording max_frame_age_s + 1 s after it was made
    config = _config(keys)
    station = GroundStation(config, *_eval_set())
    agent = DroneAgent(config, 1, map_labeler(config.world, config.camera))
    recorded = station.open_round(now_s=0.0).frame
    finish = station.finish_frame()
    later = time.time() + config.security.max_frame_age_s + 1.0
    agent.auth = dataclasses.replace(agent.auth, freshness=Freshness(
        config.security.max_frame_age_s, config.security.max_clock_skew_s,
        clock=lambda: later))
    # Act
    replayed = [agent.accept_global_frame(frame) for frame in (recorded, finish)]
    # Assert
    assert replayed == [None, None] and agent.rejected_reasons == {'stale': 2}
    assert agent.last_rejection.startswith('stale: ') and 's ago' in agent.last_rejection


@pytest.mark.parametrize('key, value', [('max_frame_age_s', 0.0), ('max_clock_skew_s', -1.0),
                                        ('max_frame_age_s', float('nan'))])
def test_a_freshness_window_that_is_not_positive_is_a_config_error(key, value):
    with pytest.raises(ConfigError, match=f'security.{key}'):
        build_config(FleetConfig, {**BASE, f'security.{key}': value})


def test_a_frame_age_limit_shorter_than_a_round_is_a_config_error(keys):
    with pytest.raises(ConfigError, match='security.max_frame_age_s 100 s must exceed the '
                                          'longest round'):
        build_config(FleetConfig, {**BASE, 'security.keys_dir': str(keys),
                                   'rounds.deadline_s': 90.0,
                                   'rounds.first_round_extra_s': 30.0,
                                   'security.max_frame_age_s': 100.0})
