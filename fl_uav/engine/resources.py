"""The engine's resource planner: built from the engine's own fleet, written to
DIR/knobs.json (the planners themselves are fl_uav.planning.round_resources)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fl_uav.planning.round_resources import (
    KNOBS_FILE,
    NoRoundResources,
    PlannerInputs,
    RoundResources,
    build_planner,
)

if TYPE_CHECKING:
    from fl_uav.engine.experiment import ExperimentEngine


def engine_inputs(engine: ExperimentEngine, down_s: float = 0.0) -> PlannerInputs:
    """The planner's view of the engine's fleet (see the module docstring)."""
    config = engine.config
    counts = np.array([np.bincount(engine.data.train_y[p], minlength=engine.data.num_classes)
                       for p in engine.parts], np.float64)
    return PlannerInputs(
        drone_ids=tuple(range(config.num_drones)), class_counts=counts,
        distance_m=np.asarray(engine.distance_m, np.float64),
        num_params=int(sum(int(w.size) for w in engine.weights.values())),
        batch_size=config.learning.batch_size, kappa_steps=config.learning.kappa_steps,
        num_selected=config.aggregation.num_selected, seed=config.seed,
        resources=config.resources, system=config.system, download_s=down_s,
        generator_makes_absent_classes=bool(
            getattr(engine.topup_generator, 'makes_absent_classes', True)))



def build_round_resources(engine: ExperimentEngine, down_s: float) -> RoundResources:
    """The engine's configured planner (:class:`NoRoundResources` for ``none``)."""
    if engine.config.resources.planner == 'none':
        return NoRoundResources()
    return build_planner(engine_inputs(engine, down_s))


def write_knobs(resources: RoundResources, out_dir: Path) -> None:
    """DIR/knobs.json: the planner's decisions (FedDPQ's plan; LGC's per-round choices)."""
    summary = resources.summary()
    if summary is None:
        return
    tmp = Path(out_dir) / (KNOBS_FILE + '.tmp')
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(Path(out_dir) / KNOBS_FILE)
