"""Figure: OSAFL's step length by κ; in docs/reproductions.md (OSAFL), not docs/benchmarks/.

How long each drone's κ-normalised OSAFL step is, by κ (docs/reproductions.md, OSAFL).

Runs the FedAvg-in-OSAFL-setting experiment (seed 0, in process) and, after rounds 1, 5, 10
and 20, trains every drone from the current global model for exactly κ = 1, 3, 8, 15 steps
and prints the median of ||Δw_u|| / κ over the drones: the length of OSAFL eq. (7)'s d_u
times η. Usage: ``PYTHONPATH=. .venv/bin/python bench/osafl_step_norms.py``
"""

import tempfile
from pathlib import Path

import numpy as np

from fl_uav.configschema import build_config, read_params_file
from fl_uav.engine.config import ExperimentConfig
from fl_uav.engine.experiment import ExperimentEngine

CONFIG = (Path(__file__).resolve().parents[1] / 'config' / 'experiments'
          / 'fedavg_osafl_setting_fmnist.yaml')
KAPPAS = (1, 3, 8, 15)
REPORT_AFTER_ROUNDS = (1, 5, 10, 20)


def median_step_norms(engine: ExperimentEngine) -> dict[int, float]:
    """Median over drones of ||Δw_u|| / κ after exactly κ local steps from the global model."""
    drones = range(engine.config.num_drones)
    data = [engine._training_data(k, engine.buffers[k])[:2] for k in drones]
    out = {}
    for kappa in KAPPAS:
        updates = engine._trainer.train(engine.weights, data, list(drones),
                                        steps=[kappa] * len(data))
        norms = [np.sqrt(sum(float(np.sum((np.asarray(u.weights[n]) - w) ** 2))
                             for n, w in engine.weights.items())) / kappa for u in updates]
        out[kappa] = float(np.median(norms))
    return out


def main() -> None:
    flat = read_params_file(str(CONFIG))
    flat['seed'] = 0
    engine = ExperimentEngine(build_config(ExperimentConfig, flat), Path(tempfile.mkdtemp()))
    for r in range(max(REPORT_AFTER_ROUNDS) + 1):
        if r in REPORT_AFTER_ROUNDS:
            norms = median_step_norms(engine)
            print(f'after round {r}: ' + ', '.join(f'κ={k}: {v:.4f}' for k, v in norms.items()))
        engine.run_round()


if __name__ == '__main__':
    main()
