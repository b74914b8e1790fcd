"""``fl-uav mavlink-key new`` and ``provision`` (fl_uav/vehicle/mavlink_provision.py) against
the simulated autopilot, which takes SETUP_SIGNING as PX4 does."""

from __future__ import annotations

import io
import stat

import pytest

from fl_uav.autopilot_sim.autopilot import AutopilotSim
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.autopilot_sim.signing import key_file_path, read_px4_key_file
from fl_uav.cli import main
from fl_uav.vehicle.mavlink_provision import ProvisionError, provision_key
from fl_uav.vehicle.mavlink_signing import generate_key, passphrase_key, read_key_file
from test.conftest import BIND_PORT_OFFSET


@pytest.fixture
def sim(port_base, tmp_path):
    """One simulated vehicle without a key, its storage in tmp_path/state."""
    sim = AutopilotSim(AutopilotSimConfig(
        num_vehicles=1, remote_base_port=port_base, bind_base_port=port_base + BIND_PORT_OFFSET,
        heartbeat_rate_hz=4.0, state_dir=str(tmp_path / 'state')))
    handle = sim.run_in_thread()
    sim.handle = handle
    yield sim
    handle.stop()


def test_new_writes_a_private_random_key_or_one_from_a_passphrase(tmp_path, monkeypatch,
                                                                  capsys):
    path = tmp_path / 'keys' / 'drone0.key'
    assert main(['mavlink-key', 'new', str(path)]) == 0
    first = read_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and 'provision' in capsys.readouterr().out
    assert main(['mavlink-key', 'new', str(path)]) == 1            # never overwritten silently
    assert read_key_file(path) == first
    monkeypatch.setattr('sys.stdin', io.StringIO('correct horse battery staple\n'))
    assert main(['mavlink-key', 'new', str(path), '--passphrase-stdin', '--overwrite']) == 0
    assert read_key_file(path) == passphrase_key('correct horse battery staple')


def test_provision_puts_the_key_on_the_autopilot_and_rotates_it_only_with_the_current_one(
        sim, port_base, tmp_path, capsys):
    # Arrange: the link as the drone will use it (udpin on its port), the drone not started
    url = f'udpin://127.0.0.1:{port_base}'
    key_path, new_path = tmp_path / 'k1.key', tmp_path / 'k2.key'
    assert main(['mavlink-key', 'new', str(key_path)]) == 0
    assert main(['mavlink-key', 'new', str(new_path)]) == 0
    key, new_key = read_key_file(key_path), read_key_file(new_path)
    # Act: first key (unsigned, the vehicle has none), a rogue's key change without the key,
    # then the rotation signed with the current key
    code = main(['mavlink-key', 'provision', '--key', str(key_path), '--url', url])
    out = capsys.readouterr().out
    with pytest.raises(ProvisionError, match='another key'):
        provision_key(url, generate_key(), timeout_s=2.5)
    rotated = provision_key(url, new_key, current_key=key, timeout_s=10.0)
    # Assert
    assert code == 0 and 'before: unsigned' in out and 'system 1' in out
    assert rotated.before == 'the current key' and rotated.system_id == 1
    stored = read_px4_key_file(key_file_path(tmp_path / 'state', 0))
    assert stored is not None and stored[0] == new_key
    assert sim.signing_status()[0]['rejected_messages'].get('SETUP_SIGNING', 0) >= 1


def test_provision_fails_saying_why_when_the_vehicle_is_armed(sim, port_base, tmp_path, capsys):
    sim.handle.call(lambda: sim.vehicles[0].arm(force=True))    # on the simulator's loop
    path = tmp_path / 'k.key'
    assert main(['mavlink-key', 'new', str(path)]) == 0
    code = main(['mavlink-key', 'provision', '--key', str(path), '--url',
                 f'udpin://127.0.0.1:{port_base}', '--timeout', '2.5'])
    assert code == 1
    assert 'did not start signing' in capsys.readouterr().err
    assert not sim.signing_status()[0]['active']


def test_provision_refuses_a_link_it_cannot_open(tmp_path, capsys):
    path = tmp_path / 'k.key'
    assert main(['mavlink-key', 'new', str(path)]) == 0
    assert main(['mavlink-key', 'provision', '--key', str(path), '--url',
                 'tcpout://127.0.0.1:5760']) == 1
    assert 'tcpout' in capsys.readouterr().err
