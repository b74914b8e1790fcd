"""Signed FedEx visit frames: the UAV signs its delivery with its drone key, the ground client
verifies it with the drones' public keys and signs its CLU with gc<j>.key, the UAV verifies
that with the clients' public keys; unsigned, forged and stale visit frames are rejected by
reason (never raised), and keygen writes the clients' keys."""

from __future__ import annotations

import asyncio
import stat

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fl_uav.compression.signing import VERSION_SIGNED, now_ms, sign_frame
from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig, SecurityConfig
from fl_uav.fleet.express_carrier import ExpressCarrier
from fl_uav.fleet.express_exchange import encode_clu, encode_delivery
from fl_uav.fleet.express_routes import express_layout, plan_express_routes
from fl_uav.fleet.ground_client import GroundClient, client_dataset
from fl_uav.fleet.keys import generate_fleet_keys, load_frame_auth, load_ground_client_auth
from fl_uav.fleet.messages import EXPRESS_KNOB, RoundTask
from fl_uav.planning.coverage import PlanWaypoint
from test.unit.fleet.test_express_fleet import EXPRESS, FakeLink

NUM_CLIENTS = EXPRESS['ground_clients.num_clients']
CLU_META = {'steps': 2, 'num_samples': 24, 'train_loss': 0.5, 'distance_m': 30.0}
SIGNER_OFFSET = 6            # envelope header: magic, version, scheme, then the u16 signer


@pytest.fixture(scope='module')
def datasets():
    """Each client's local data (rendered once for the module)."""
    config = build_config(FleetConfig, EXPRESS)
    layout = express_layout(config)
    return [client_dataset(config, j, tuple(layout.clients_enu_m[j]))
            for j in range(NUM_CLIENTS)]


@pytest.fixture
def keys(tmp_path):
    generate_fleet_keys(tmp_path / 'keys', EXPRESS['num_drones'], NUM_CLIENTS)
    return tmp_path / 'keys'


def _config(keys) -> FleetConfig:
    return build_config(FleetConfig, {**EXPRESS, 'security.keys_dir': str(keys),
                                      'security.require_signatures': True})


def _drone_key(keys, drone: int) -> Ed25519PrivateKey:
    return load_frame_auth(SecurityConfig(str(keys)), drone, []).private_key


def _client_key(keys, client: int) -> Ed25519PrivateKey:
    return load_ground_client_auth(SecurityConfig(str(keys)), client, 0).private_key


def _signer(frame: bytes) -> int:
    return int.from_bytes(frame[SIGNER_OFFSET:SIGNER_OFFSET + 2], 'little')


def _zero_model(client: GroundClient):
    return client._fingerprint, {n: np.zeros(s, np.float32) for n, s in client._shapes.items()}


def _carrier_on_tour(config: FleetConfig, client: GroundClient, clients: list[int],
                     uav: int = 0) -> ExpressCarrier:
    """UAV ``uav``'s carrier (its keys from keys_dir) on a round-1 tour over ``clients``."""
    fp, weights = _zero_model(client)
    carrier = ExpressCarrier(config, uav, client._shapes, fp)
    plan = tuple(PlanWaypoint(585.0, 600.0, 30.0) for _ in range(len(clients) + 1))
    carrier.start_tour(RoundTask(1, weights, plan, {EXPRESS_KNOB: {'clients': clients,
                                                                   'local_steps': 2}}))
    return carrier


class RecordingLink(FakeLink):
    """A FakeLink that keeps every delivery frame it carried."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.deliveries: list[bytes] = []

    def send(self, client, frame):
        self.deliveries.append(frame)
        super().send(client, frame)


def test_keygen_writes_each_ground_client_pair_with_private_keys_0600(tmp_path):
    # Act
    written = generate_fleet_keys(tmp_path / 'k', 1, 2)
    # Assert
    assert sorted(p.name for p in written) == ['drone0.key', 'drone0.pub', 'gc0.key', 'gc0.pub',
                                               'gc1.key', 'gc1.pub', 'station.key',
                                               'station.pub']
    for path in written:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o600 if path.suffix == '.key' else 0o644), (path, oct(mode))
    with pytest.raises(FileExistsError, match='gc1.key'):
        generate_fleet_keys(tmp_path / 'k', 1, 2)      # never overwrites a key
    with pytest.raises(ValueError, match='ground clients'):
        generate_fleet_keys(tmp_path / 'k3', 1, -1)


def test_signed_visits_round_trip_over_a_whole_tour(keys, datasets):
    # Arrange
    config = _config(keys)
    cs = [GroundClient(config, j, *datasets[j]) for j in range(NUM_CLIENTS)]
    tour = list(plan_express_routes(config).tour(1))
    carrier = _carrier_on_tour(config, cs[0], tour, uav=1)
    link = RecordingLink(cs, 1, hover_over=True)
    # Act: two tours, so the second carries CLUs trained from the first's delivery
    first = [asyncio.run(carrier.visit(c, link)) for c in tour]
    link.train_all()
    replies_round_1 = [cs[j]._last_reply[1] for j in tour]
    carrier.start_tour(RoundTask(2, carrier.carried, tuple(PlanWaypoint(585.0, 600.0, 30.0)
                                                           for _ in range(len(tour) + 1)),
                                 {EXPRESS_KNOB: {'clients': tour, 'local_steps': 2}}))
    second = [asyncio.run(carrier.visit(c, link)) for c in tour]
    # Assert: every frame on the visit link was signed, by its sender
    assert all(first) and all(second)
    assert carrier.tour.exchanged == tour and carrier.tour.missed == []
    assert all(carrier.tour.clu_steps[c] == 2 for c in tour)
    assert all(f[4] == VERSION_SIGNED and _signer(f) == 1 for f in link.deliveries)
    assert [(r[4], _signer(r)) for r in replies_round_1] == [(VERSION_SIGNED, c) for c in tour]
    assert dict(carrier.rejected) == {} and all(c.rejected == {} for c in cs)


def test_unsigned_forged_and_stale_deliveries_are_rejected_by_reason(keys, datasets):
    # Arrange: UAV 0 in range of client 2 (and posing UAV 1's pose too)
    config = _config(keys)
    c = GroundClient(config, 2, *datasets[2])
    fp, weights = _zero_model(c)
    for uav in (0, 1):
        c.on_uav_pose(uav, *c.position_enu_m[:2], 30.0, 5.0)

    def delivery(uav: int) -> bytes:
        return encode_delivery(uav, 1, 2, fp, weights, 2)

    age_ms = int(config.security.max_frame_age_s * 1000)
    skew_ms = int(config.security.max_clock_skew_s * 1000)
    bad = [
        delivery(0),                                                    # unsigned
        sign_frame(delivery(0), 0, Ed25519PrivateKey.generate()),       # forged: wrong key
        sign_frame(delivery(0), 0, _client_key(keys, 0)),               # client 0's key as UAV 0
        sign_frame(delivery(1), 0, _drone_key(keys, 0)),                # UAV 0 posing as UAV 1
        sign_frame(delivery(0), 0, _drone_key(keys, 0),
                   issued_ms=now_ms() - age_ms - 60_000),               # a replayed recording
        sign_frame(delivery(0), 0, _drone_key(keys, 0),
                   issued_ms=now_ms() + skew_ms + 60_000),              # from the future
    ]
    good = sign_frame(delivery(0), 0, _drone_key(keys, 0))
    # Act
    gated = [c.gate(frame, 5.0) for frame in bad]
    accepted = c.gate(good, 5.0)
    # Assert: counted by reason, nothing answered or refused, the genuine one taken
    assert gated == [None] * len(bad)
    assert dict(c.rejected) == {'unsigned': 1, 'signature': 2, 'signer': 1, 'stale': 2}
    assert c.refused == {} and c.exchanges == []
    assert accepted is not None and accepted[0].uav == 0


def test_unsigned_forged_and_stale_clus_are_rejected_by_reason(keys, datasets):
    # Arrange: UAV 0 on a tour over clients 0 and 1
    config = _config(keys)
    c = GroundClient(config, 0, *datasets[0])
    carrier = _carrier_on_tour(config, c, [0, 1])
    fp, weights = _zero_model(c)
    ones = {n: np.ones_like(w) for n, w in weights.items()}

    def clu(client: int) -> bytes:
        return encode_clu(client, 0, 1, fp, ones, CLU_META)

    age_ms = int(config.security.max_frame_age_s * 1000)
    bad = [
        clu(0),                                                         # unsigned
        sign_frame(clu(0), 0, Ed25519PrivateKey.generate()),            # forged: wrong key
        sign_frame(clu(0), 0, _drone_key(keys, 0)),                     # drone 0's key as client 0
        sign_frame(clu(0), 1, _client_key(keys, 1)),                    # client 1 posing as 0
        sign_frame(clu(0), 0, _client_key(keys, 0),
                   issued_ms=now_ms() - age_ms - 60_000),               # a replayed recording
    ]
    good = sign_frame(clu(0), 0, _client_key(keys, 0))
    # Act
    verdicts = [carrier.accept_clu(frame, 0) for frame in bad]
    unchanged = all(not np.any(v) for v in carrier.running_sum.values())
    taken = carrier.accept_clu(good, 0)
    # Assert: counted by reason, u_k untouched until the genuine CLU
    assert verdicts == [False] * len(bad) and unchanged
    assert dict(carrier.rejected) == {'unsigned': 1, 'signature': 2, 'signer': 1, 'stale': 1}
    assert taken and carrier.tour.exchanged == [0]
    assert all(np.all(v == 1.0) for v in carrier.running_sum.values())


def test_a_signed_clu_is_refused_by_a_uav_without_keys(keys, datasets):
    # Arrange: client 0 signs; the UAV has no keys_dir (and does not require signatures)
    c = GroundClient(build_config(FleetConfig, EXPRESS), 0, *datasets[0])
    carrier = _carrier_on_tour(build_config(FleetConfig, EXPRESS), c, [0])
    fp, weights = _zero_model(c)
    signed = sign_frame(encode_clu(0, 0, 1, fp, weights, CLU_META), 0, _client_key(keys, 0))
    # Act / Assert: it cannot verify, so it does not take it (signer), and plain still works
    assert not carrier.accept_clu(signed, 0)
    assert carrier.accept_clu(encode_clu(0, 0, 1, fp, weights, CLU_META), 0)
    assert dict(carrier.rejected) == {'signer': 1}


@pytest.mark.parametrize('missing, who', [('gc1.key', 'client'), ('drone1.pub', 'client'),
                                          ('gc3.pub', 'uav')])
def test_a_missing_visit_key_fails_at_start_naming_the_file(keys, datasets, missing, who):
    # Arrange
    config = _config(keys)
    (keys / missing).unlink()
    # Act / Assert
    with pytest.raises(ConfigError, match=rf'security.keys_dir: .*{missing}'):
        if who == 'client':
            GroundClient(config, 1, *datasets[1])
        else:
            ExpressCarrier(config, 0, {}, b'\0' * 32)

