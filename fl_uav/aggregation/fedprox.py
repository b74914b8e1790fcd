"""FedProx (Li et al., MLSys 2020): FedAvg at the server, a proximal term on the drones."""

from __future__ import annotations

from collections.abc import Sequence

from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.knobs import PROXIMAL_MU_KNOB


class FedProx(FedAvg):
    """FedProx: the server rule is FedAvg's w ← w + η_s Σ n_k Δ_k / Σ n_k (OSAFL digest §6.2).

    Only :meth:`configure_round` differs: it sends ``{PROXIMAL_MU_KNOB: μ}`` to every drone.
    Stateless, so the checkpoint is ``{}``.
    """

    name = 'fedprox'

    def __init__(self, mu: float = 0.01, server_lr: float = 1.0) -> None:
        super().__init__(server_lr=server_lr)
        if not mu >= 0.0:
            raise ValueError(f'mu must be >= 0, got {mu}')
        self.mu = float(mu)

    def configure_round(self, round_index: int, drone_ids: Sequence[int]) -> dict[int, dict]:
        return {drone: {PROXIMAL_MU_KNOB: self.mu} for drone in drone_ids}
