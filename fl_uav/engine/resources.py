"""The engine's resource planner, built from the engine's own fleet (the planners themselves
are fl_uav.planning.round_resources; their decisions go to DIR/knobs.json, engine.results)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fl_uav.planning.round_resources import (
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
