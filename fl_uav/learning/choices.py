"""The names ``learning.*`` keys choose from: one torch-free table each.

The configs (fl_uav.learning.config, and through it fl_uav.fleet.config) validate against
these tables, and the torch modules that build what a name means (fl_uav.learning.models,
training, client_algorithms) re-export and use the same tables, so a node that only reads its
configuration (the autopilot simulator, the camera, the recorder) never imports torch.
"""

from __future__ import annotations

#: ``learning.model``: the architectures fl_uav.learning.models.build_model builds.
MODEL_NAMES = ('small_cnn', 'tiny_cnn', 'digits_cnn', 'lenet5')

#: ``learning.optimizer``: the local optimizers fl_uav.learning.training.train_local runs.
OPTIMIZERS = ('sgd', 'adam')

#: ``learning.client_algorithm``: the round procedures
#: fl_uav.learning.client_algorithms.build_client_algorithm builds.
CLIENT_ALGORITHMS = ('sgd', '2ceoafl', 'feddpq', 'osafl', 'scaffold')
