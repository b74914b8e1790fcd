"""Ground-client placement for FedEx (Bian, Shen, Xu), Sec. VII-A: one rule, two users.

``fl-uav plan`` (kind routes, ``fl_uav.planning.plan_request``) and the FedEx express runtime
(``fl_uav.engine.express``) both call :func:`place_clients_enu_m`, so the CARP instance the
planner shows is the one the experiment flies for the same area, blocks and seed.

* ``fedex_blocks`` (FedEx Sec. VII-A): the area is split into ``blocks_east`` x
  ``blocks_north`` blocks (5 x 2 of 400 m x 1000 m in the paper), numbered west to east, then
  south to north; client i sits in block i mod B, uniformly at random inside it.
* ``uniform``: uniform over the whole area (block numbers are still those of the position's
  round-robin block, i mod B, so callers get the same shape of result).

The random stream is ``SeedSequence([seed, PLACEMENT_SEED_TAG])`` (the tag keeps placement
draws apart from other uses of the same seed).
"""

from __future__ import annotations

import numpy as np

from fl_uav.configschema import require_choice

CLIENT_PLACEMENTS = ('fedex_blocks', 'uniform')
FEDEX_BLOCKS_EAST = 5       # FedEx Sec. VII-A: 2 km x 2 km in 5 x 2 blocks
FEDEX_BLOCKS_NORTH = 2
PLACEMENT_SEED_TAG = 0x65787072   # 'expr', the express runtime's tag (its streams unchanged)


def place_clients_enu_m(num_clients: int, area_east_m: float, area_north_m: float,
                        seed: int, blocks_east: int = FEDEX_BLOCKS_EAST,
                        blocks_north: int = FEDEX_BLOCKS_NORTH,
                        placement: str = 'fedex_blocks') -> tuple[np.ndarray, np.ndarray]:
    """Client positions (N x 2, ENU metres from the area's south-west corner) and blocks (N,).

    FedEx Sec. VII-A: client i is in block i mod B (B = blocks_east x blocks_north, 4 clients
    per block for 40 clients), uniform inside it; or uniform over the area.
    """
    require_choice('placement', placement, CLIENT_PLACEMENTS)
    if num_clients < 1:
        raise ValueError(f'num_clients must be >= 1, got {num_clients}')
    if blocks_east < 1 or blocks_north < 1:
        raise ValueError(f'blocks_east and blocks_north must be >= 1, got {blocks_east}, '
                         f'{blocks_north}')
    blocks = np.arange(num_clients) % (blocks_east * blocks_north)
    rng = np.random.default_rng(np.random.SeedSequence([seed, PLACEMENT_SEED_TAG]))
    offsets = rng.uniform(0.0, 1.0, (num_clients, 2))
    if placement == 'uniform':
        return offsets * np.array([area_east_m, area_north_m]), blocks
    width_m = area_east_m / blocks_east
    height_m = area_north_m / blocks_north
    east = (blocks % blocks_east + offsets[:, 0]) * width_m
    north = (blocks // blocks_east + offsets[:, 1]) * height_m
    return np.stack([east, north], axis=1), blocks
