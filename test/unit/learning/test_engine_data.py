"""The experiment engine's data path: shared eviction rule and FedDPQ top-up, 2-round runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_uav.configschema import build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.data import load_experiment_data
from fl_uav.engine.experiment import ExperimentEngine
from fl_uav.learning.buffer import BufferConfig, OnboardBuffer
from fl_uav.learning.topup import mixed_counts

QUICK = Path(__file__).resolve().parents[3] / 'config' / 'experiments' / 'quick_digits.yaml'
ONLINE = {'data.online': True, 'data.arrivals_e': 10, 'data.arrivals_p': 1.0,
          'data.initial_samples': 20, 'buffer.capacity_samples': 25}


def _config(**overrides) -> ExperimentConfig:
    flat = read_params_file(QUICK)
    flat.update({'num_drones': 3, 'num_rounds': 2, **overrides})
    return build_config(ExperimentConfig, flat)


@pytest.fixture(scope='module')
def digits():
    return load_experiment_data(_config())


def _two_rounds(config: ExperimentConfig, data, out: Path) -> tuple[ExperimentEngine, list]:
    engine = ExperimentEngine(config, out, data=data)
    return engine, [engine.run_round() for _ in range(2)]


def _as_bytes(index: int) -> np.ndarray:
    return np.array([index // 256, index % 256], np.uint8)


def test_trim_top_label_run_holds_what_the_onboard_buffer_holds(tmp_path, digits):
    # Prepare
    config = _config(**ONLINE, **{'buffer.policy': 'trim_top_label'})
    # Execute: 2 rounds, 20 + 10 + 10 + 10 arrivals per drone into 25 slots
    engine, rows = _two_rounds(config, digits, tmp_path / 'trim')
    fifo, _ = _two_rounds(_config(**ONLINE), digits, tmp_path / 'fifo')
    # Assert: each drone's buffer is what an OnboardBuffer fed the same arrivals keeps
    assert [r['round'] for r in rows] == [1, 2] and all(r['participants'] == 3 for r in rows)
    for k, part in enumerate(engine.parts):
        arrived = part[:int(engine.consumed[k])]
        onboard = OnboardBuffer(BufferConfig(25, 'trim_top_label'), (2,))
        onboard.extend(np.stack([_as_bytes(i) for i in arrived]), digits.train_y[arrived])
        images, _ = onboard.arrays()
        assert len(arrived) > 25
        assert [256 * int(a) + int(b) for a, b in images] == engine.buffers[k].tolist()
    assert any(not np.array_equal(a, b) for a, b in zip(engine.buffers, fifo.buffers))


def test_trim_top_label_flattens_the_label_histogram(tmp_path, digits):
    engine, _ = _two_rounds(_config(**ONLINE, **{'buffer.policy': 'trim_top_label'}), digits,
                            tmp_path / 't')
    fifo, _ = _two_rounds(_config(**ONLINE), digits, tmp_path / 'f')
    top = [np.bincount(digits.train_y[b]).max() for b in engine.buffers]
    top_fifo = [np.bincount(digits.train_y[b]).max() for b in fifo.buffers]
    assert all(a <= b for a, b in zip(top, top_fifo)) and sum(top) < sum(top_fifo)


def test_topup_run_trains_on_the_mixed_set_and_charges_generation_once(tmp_path, digits):
    # Prepare: label shards, so each drone holds ~2 classes, unevenly
    config = _config(**{'data.topup': True, 'data.topup_factor': 1.0})
    plain = _config()
    # Execute
    engine, rows = _two_rounds(config, digits, tmp_path / 'topup')
    base, base_rows = _two_rounds(plain, digits, tmp_path / 'plain')
    x, y, charged_again = engine._training_data(0, engine.parts[0])
    # Assert: drone 0's training labels follow eq. (2) for the classes it holds
    real = np.bincount(digits.train_y[engine.parts[0]], minlength=10)
    expected = np.where(real > 0, mixed_counts(real, 1.0), 0)
    assert np.bincount(y, minlength=10).tolist() == expected.tolist()
    assert x.shape[1:] == digits.train_x.shape[1:] and x.dtype == np.float32
    assert len(y) > len(engine.parts[0])
    assert charged_again == 0                       # static data: generated once
    # round 1 pays FedDPQ eqs. (33)-(34) for the synthetic samples, round 2 does not (training
    # and upload energies are the same in both rounds of a run: same data, same fading draws)
    made = [len(engine._training_data(k, p)[1]) - len(p) for k, p in enumerate(engine.parts)]
    extra = [r['energy_mean_j'] - b['energy_mean_j'] for r, b in zip(rows, base_rows)]
    assert min(made) > 0
    assert extra[0] - extra[1] == pytest.approx(
        np.mean([float(engine.cpu.gen_energy_j(n)) for n in made]), rel=1e-6)
    assert all(np.isfinite(r['loss']) for r in rows)


def test_topup_state_survives_a_checkpoint(tmp_path, digits):
    config = _config(**ONLINE, **{'data.topup': True, 'buffer.policy': 'trim_top_label'})
    engine, _ = _two_rounds(config, digits, tmp_path)
    engine.save_checkpoint()
    restored = ExperimentEngine(config, tmp_path, data=digits)
    restored.load_checkpoint()
    assert restored.topup_sources == engine.topup_sources and all(engine.topup_sources)
    for a, b in zip(restored.buffers, engine.buffers):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(restored._training_data(1, restored.buffers[1])[0],
                                  engine._training_data(1, engine.buffers[1])[0])


@pytest.mark.parametrize('online', [True, False])
def test_a_resumed_topup_run_equals_an_uninterrupted_one(tmp_path, online):
    from fl_uav.engine.experiment import run_experiment

    # offline: generation is charged in round 1 only, also after a resume (topup_sources)
    options = {**(ONLINE if online else {}), 'buffer.policy': 'trim_top_label',
               'data.topup': True}
    whole = run_experiment(_config(**options, num_rounds=3), tmp_path / 'whole',
                           echo=lambda _: None)
    run_experiment(_config(**options, num_rounds=2), tmp_path / 'part', echo=lambda _: None)
    resumed = run_experiment(_config(**options, num_rounds=3), tmp_path / 'part', resume=True,
                             echo=lambda _: None)
    assert resumed['rounds_completed'] == 3
    assert resumed['final_accuracy'] == pytest.approx(whole['final_accuracy'])
    whole_rows, part_rows = ((tmp_path / name / 'rounds.csv').read_text().splitlines()
                             for name in ('whole', 'part'))
    energy = whole_rows[0].split(',').index('energy_mean_j')   # includes generation, eq. (33)
    assert [r.split(',')[energy] for r in part_rows] == [r.split(',')[energy] for r in whole_rows]
