"""Model weights as named numpy arrays: what the wire codec carries and strategies combine.

Torch-free at import: the ``Weights`` type and its arithmetic are read by configuration and
simulation modules that every node imports (fl_uav.engine.express), and only
:func:`set_weights` needs torch itself (see there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fl_uav.compression.codec import fingerprint_of

if TYPE_CHECKING:
    from torch import nn

Weights = dict[str, np.ndarray]


def get_weights(model: nn.Module) -> Weights:
    """Copy a model's parameters and buffers into float32 numpy arrays (state_dict order)."""
    return {name: t.detach().cpu().numpy().astype(np.float32, copy=True)
            for name, t in model.state_dict().items()}


def set_weights(model: nn.Module, weights: Weights) -> None:
    """Load named arrays into a model; names and shapes must match exactly."""
    # Imported here: whoever holds a model has loaded torch already, so this costs nothing,
    # while a top-level import would load torch into every node that only names Weights.
    import torch

    state = model.state_dict()
    missing = set(state) - set(weights)
    extra = set(weights) - set(state)
    if missing or extra:
        raise ValueError(f'weights do not match the model: missing {sorted(missing)}, '
                         f'unexpected {sorted(extra)}')
    new_state = {}
    for name, tensor in state.items():
        array = np.asarray(weights[name])
        if tuple(array.shape) != tuple(tensor.shape):
            raise ValueError(f'weight {name!r}: shape {array.shape} != model '
                             f'{tuple(tensor.shape)}')
        new_state[name] = torch.from_numpy(np.array(array, dtype=np.float32)).to(tensor.dtype)
    model.load_state_dict(new_state)


def weight_shapes(weights: Weights) -> dict[str, tuple[int, ...]]:
    """Names to shapes."""
    return {name: tuple(a.shape) for name, a in weights.items()}


def architecture_fingerprint(weights: Weights) -> bytes:
    """8 bytes identifying the architecture (names, shapes, dtypes), not the values.

    The wire format's fingerprint (docs/wire_format.md), so frames name the model they carry.
    """
    return fingerprint_of(weights)


def subtract(a: Weights, b: Weights) -> Weights:
    """a - b, name by name."""
    return {name: a[name] - b[name] for name in a}


def add(a: Weights, b: Weights) -> Weights:
    """a + b, name by name."""
    return {name: a[name] + b[name] for name in a}
