"""The station checkpoint (fl_uav.fleet.station_checkpoint): a resumed station goes on with the
same run, model, strategy state, records and counters; a corrupt or mismatched checkpoint is
refused in one line and nothing of it is loaded."""

from __future__ import annotations

import json
import zipfile
from unittest import mock

import numpy as np
import pytest

from fl_uav.compression.codec import decode_frame
from fl_uav.compression.signing import now_ms
from fl_uav.configschema import build_config
from fl_uav.fleet import ground_station, station_checkpoint
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.keys import generate_fleet_keys
from fl_uav.fleet.station_checkpoint import (
    CHECKPOINT_FILE,
    MANIFEST_FILE,
    CheckpointError,
)
from test.unit.fleet._fleet_pair import agent_and_station, eval_set
from test.unit.fleet.test_express_fleet import EXPRESS

_BASE = {'num_drones': 1, 'learning.model': 'tiny_cnn', 'learning.min_samples_to_train': 4,
         'rounds.num_rounds': 4, 'rounds.deadline_s': 10.0,
         'rounds.first_round_extra_s': 0.0}
_STRATEGIES = {
    'fedavg': {},
    'scaffold': {'learning.optimizer': 'sgd', 'learning.client_algorithm': 'scaffold',
                 'aggregation.strategy': 'scaffold'},
    'fednova': {'aggregation.strategy': 'fednova'},
}


def _station(flat: dict) -> GroundStation:
    return GroundStation(build_config(FleetConfig, flat), *eval_set())


def _run_rounds(agent, station, rounds: int, start_s: float = 0.0) -> float:
    now = start_s
    for _ in range(rounds):
        opening = station.open_round(now)
        report = agent.train_round(agent.accept_global_frame(opening.frame))
        for frame in report.frames:
            station.receive_update(frame)
        now += 1.0
        station.close_round(now)
    return now


def _comparable(report: dict) -> dict:
    """The report without wall-clock timings."""
    rows = [{k: v for k, v in r.items() if k not in ('aggregate_seconds',)}
            for r in report['rounds']]
    return {**report, 'rounds': rows}


@pytest.mark.parametrize('strategy', sorted(_STRATEGIES))
def test_a_resumed_station_goes_on_as_the_uninterrupted_one(tmp_path, strategy):
    # Prepare: two rounds closed and checkpointed
    flat = {**_BASE, **_STRATEGIES[strategy]}
    agent, station = agent_and_station(flat)
    now = _run_rounds(agent, station, 2)
    path = station_checkpoint.save(station, tmp_path)
    resumed = _station(flat)
    # Execute
    closed = station_checkpoint.resume(resumed, tmp_path)
    # Assert: the same run, model and report; round 3 next
    assert closed == 2 and resumed.next_round_index == 3
    assert path == tmp_path / CHECKPOINT_FILE
    manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
    assert manifest['rounds_closed'] == 2 and manifest['run_id'] == station.run_id
    assert (resumed.run_id, resumed.run_started_ms) == (station.run_id, station.run_started_ms)
    for name, value in station.weights.items():
        np.testing.assert_array_equal(resumed.weights[name], value)
    assert _comparable(resumed.report()) == _comparable(station.report())
    # Assert: round 3 goes out alike (model, SCAFFOLD's c, the upload acknowledgement) and
    # the same update aggregates to the same model (the strategy's state came back); both
    # open it at the same wall-clock moment (the update echoes its opening's)
    with mock.patch.object(ground_station, 'now_ms', return_value=now_ms()):
        first, second = station.open_round(now), resumed.open_round(now)
    a, b = decode_frame(first.frame), decode_frame(second.frame)
    assert a.round_index == b.round_index == 3
    assert a.metadata['knobs'] == b.metadata['knobs']
    assert set(a.tensors) == set(b.tensors)
    for name in a.tensors:
        np.testing.assert_array_equal(a.tensors[name], b.tensors[name])
    report = agent.train_round(agent.accept_global_frame(first.frame))
    for frame in report.frames:
        assert station.receive_update(frame).accepted
        assert resumed.receive_update(frame).accepted
    station.close_round(now + 1.0)
    resumed.close_round(now + 1.0)
    for name, value in station.weights.items():
        np.testing.assert_allclose(resumed.weights[name], value, rtol=0, atol=1e-7)
    assert resumed.strategy.state_dict().keys() == station.strategy.state_dict().keys()
    assert [r.round_index for r in resumed.records] == [1, 2, 3]


def test_a_finished_runs_checkpoint_resumes_finished(tmp_path):
    agent, station = agent_and_station({**_BASE, 'rounds.num_rounds': 2})
    _run_rounds(agent, station, 2)
    station_checkpoint.save(station, tmp_path)
    resumed = _station({**_BASE, 'rounds.num_rounds': 2})
    assert station_checkpoint.resume(resumed, tmp_path) == 2
    assert resumed.finished and resumed.report()['status'] == 'finished'


def _saved(tmp_path, flat: dict | None = None) -> GroundStation:
    agent, station = agent_and_station(flat or _BASE)
    _run_rounds(agent, station, 1)
    station_checkpoint.save(station, tmp_path)
    return station


def _refused(tmp_path, flat: dict) -> tuple[str, GroundStation]:
    """Resume a new station of ``flat`` from tmp_path: the one-line error; the station must
    be as built (nothing half-loaded)."""
    station = _station(flat)
    before = (station.run_id, {n: w.copy() for n, w in station.weights.items()})
    with pytest.raises(CheckpointError) as caught:
        station_checkpoint.resume(station, tmp_path)
    message = str(caught.value)
    assert '\n' not in message and message.startswith(
        f'cannot resume from {tmp_path / CHECKPOINT_FILE}: ')
    assert station.run_id == before[0] and station.records == []
    assert station.next_round_index == 1
    for name, value in before[1].items():
        np.testing.assert_array_equal(station.weights[name], value)
    return message, station


@pytest.mark.parametrize(('override', 'named'), [
    ({'learning.model': 'small_cnn'}, "learning.model is 'tiny_cnn' in the checkpoint, "
                                      "'small_cnn' here"),
    ({'num_drones': 2}, 'num_drones is 1 in the checkpoint, 2 here'),
    ({'aggregation.strategy': 'fednova'}, 'aggregation.strategy is'),
    ({'rounds.num_rounds': 6}, 'rounds.num_rounds is 4 in the checkpoint, 6 here'),
    ({'world.seed': 99}, 'world.seed is'),
])
def test_a_checkpoint_of_another_station_is_refused(tmp_path, override, named):
    _saved(tmp_path)
    message, _ = _refused(tmp_path, {**_BASE, **override})
    assert 'made for another station' in message and named in message, message


def test_a_checkpoint_made_under_other_keys_is_refused(tmp_path):
    # Prepare: the run signed with one key set, resumed with another (and unsigned)
    for name in ('keys_a', 'keys_b'):
        generate_fleet_keys(tmp_path / name, 1)
    ckpt = tmp_path / 'ckpt'
    ckpt.mkdir()
    _saved(ckpt, {**_BASE, 'security.keys_dir': str(tmp_path / 'keys_a')})
    # Execute / Assert
    message, _ = _refused(ckpt, {**_BASE, 'security.keys_dir': str(tmp_path / 'keys_b')})
    assert 'station key (security.keys_dir) is' in message, message
    message, _ = _refused(ckpt, _BASE)
    assert "'unsigned' here" in message, message
    resumed = _station({**_BASE, 'security.keys_dir': str(tmp_path / 'keys_a')})
    assert station_checkpoint.resume(resumed, ckpt) == 1


def test_a_missing_checkpoint_is_refused(tmp_path):
    message, _ = _refused(tmp_path, _BASE)
    assert 'no such file' in message


def test_a_truncated_checkpoint_is_refused(tmp_path):
    _saved(tmp_path)
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    message, _ = _refused(tmp_path, _BASE)
    assert 'corrupt or not a station checkpoint' in message, message


def _rewrite(path, change) -> None:
    """Rewrite the npz with ``change(meta, arrays)`` applied."""
    with np.load(path) as archive:
        arrays = {n: np.array(archive[n]) for n in archive.files}
    meta = json.loads(bytes(arrays.pop('meta')).decode())
    meta_text = change(meta, arrays)
    np.savez(path, meta=np.frombuffer((meta_text or json.dumps(meta)).encode(), np.uint8),
             **arrays)


def test_a_checkpoint_with_bad_json_is_refused(tmp_path):
    _saved(tmp_path)
    _rewrite(tmp_path / CHECKPOINT_FILE, lambda meta, arrays: '{"run_id": ')
    message, _ = _refused(tmp_path, _BASE)
    assert 'corrupt or not a station checkpoint (JSONDecodeError' in message, message


def test_a_checkpoint_with_wrong_arrays_is_refused(tmp_path):
    _saved(tmp_path)
    name = next(n for n in _station(_BASE).weights)

    def change(meta, arrays):
        arrays[f'w/{name}'] = arrays[f'w/{name}'][..., :1]
    _rewrite(tmp_path / CHECKPOINT_FILE, change)
    message, _ = _refused(tmp_path, _BASE)
    assert f'corrupt or inconsistent state (ValueError: weight {name}:' in message, message


def test_a_checkpoint_with_non_finite_weights_or_a_missing_record_is_refused(tmp_path):
    _saved(tmp_path)
    name = next(n for n in _station(_BASE).weights)

    def change(meta, arrays):
        arrays[f'w/{name}'] = np.full_like(arrays[f'w/{name}'], np.nan)
    _rewrite(tmp_path / CHECKPOINT_FILE, change)
    assert 'non-finite' in _refused(tmp_path, _BASE)[0]
    _saved(tmp_path)
    _rewrite(tmp_path / CHECKPOINT_FILE, lambda meta, arrays: meta.update(records=[]))
    assert 'round records [] are not rounds 1..1' in _refused(tmp_path, _BASE)[0]


def test_a_checkpoint_of_another_format_is_refused(tmp_path):
    _saved(tmp_path)
    _rewrite(tmp_path / CHECKPOINT_FILE,
             lambda meta, arrays: meta['identity'].update(format=99))
    assert 'format 99, this station reads format 1' in _refused(tmp_path, _BASE)[0]


def test_a_zip_without_meta_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / CHECKPOINT_FILE, 'w') as archive:
        archive.writestr('x.npy', b'')
    assert 'not a station checkpoint (no meta entry)' in _refused(tmp_path, _BASE)[0]


def test_express_mode_is_not_checkpointed_and_not_resumed(tmp_path):
    station = _station(EXPRESS)
    assert 'express' in station_checkpoint.unsupported(station)
    message, _ = _refused(tmp_path, EXPRESS)
    assert message.endswith('mode express (the FedEx tours in flight) is not checkpointed')


def test_the_round_a_resumed_station_opens_again_rolls_back_the_drones_lost_upload(tmp_path):
    # Prepare: SCAFFOLD; two rounds closed and checkpointed; the drone trains and uploads
    # round 3, then the station dies before closing it
    flat = {**_BASE, **_STRATEGIES['scaffold']}
    agent, station = agent_and_station(flat)
    now = _run_rounds(agent, station, 2)
    station_checkpoint.save(station, tmp_path)
    task_3 = agent.accept_global_frame(station.open_round(now).frame)
    agent.settle_previous_upload(task_3)
    control_after_round_2 = {n: c.copy() for n, c in agent._client.control.items()}
    agent.train_round(task_3)
    resumed = _station(flat)
    station_checkpoint.resume(resumed, tmp_path)
    # Execute: round 3 again, from the resumed station
    again = agent.accept_global_frame(resumed.open_round(now + 5.0).frame)
    agent.settle_previous_upload(again)
    # Assert: the lost upload's c_k change is undone; the round is trained and accepted
    assert again.round_index == 3 and agent.uploads_rolled_back == 1
    for name, value in control_after_round_2.items():
        np.testing.assert_array_equal(agent._client.control[name], value)
    report = agent.train_round(again)
    assert all(resumed.receive_update(f).accepted for f in report.frames)
