"""The README's quick_digits figure is what the shipped config gives."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from fl_uav.configschema import build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import run_experiment

REPO = Path(__file__).resolve().parents[3]
QUICK = REPO / 'config' / 'experiments' / 'quick_digits.yaml'
TOLERANCE_POINTS = 0.5   # another BLAS may round differently; 73 % against 71.9 % is not that


def _stated_figure(readme: str) -> float:
    """The README's "as is, 5 rounds: X %" in its figures table (the quick_digits row), or its
    "Y % where PyTorch runs AVX-512 kernels" when this machine's PyTorch does: the AVX-512
    kernels round differently, and 5 rounds of 10 drones carry that to 0.8 points (measured:
    74.37 % with this machine's AVX-512 kernels, 74.93 % with ATEN_CPU_CAPABILITY=avx2 or
    default on the same machine; 75.2 % on the machine of 2026-11-25)."""
    stated = re.search(r'as is, 5 rounds: ([0-9.]+) %;\s*#?\s*([0-9.]+) % where PyTorch runs '
                       r'AVX-512 kernels', readme)
    assert stated is not None, 'the README no longer states the quick_digits figures'
    avx512 = torch.backends.cpu.get_cpu_capability().startswith('AVX512')
    return float(stated.group(2 if avx512 else 1))


def test_readme_states_the_accuracy_quick_digits_reaches_as_shipped(tmp_path):
    # Arrange: the README's figure for this machine's PyTorch kernels
    stated = _stated_figure((REPO / 'README.md').read_text())
    config = build_config(ExperimentConfig, read_params_file(QUICK))
    # Act
    summary = run_experiment(config, tmp_path, echo=lambda _: None)
    # Assert
    assert config.num_rounds == 5 and config.num_drones == 10
    assert abs(100 * summary['final_accuracy'] - stated) <= TOLERANCE_POINTS
