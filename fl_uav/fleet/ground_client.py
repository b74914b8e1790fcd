"""GroundClient: a FedEx ground client as plain Python (no ROS).

It holds fixed local data, has no link to the station, and exchanges only with a UAV that
hovers within radio range (FedEx Sec. III: the UAV hovers above the client while the model and
the CLU are transmitted). At a visit (FedEx Sec. IV-D, digest Sec. 2.2 ``visit``):

1. the UAV's delivery is decoded and checked, and the UAV's distance is taken from the pose
   the client was given for that UAV (:meth:`GroundClient.on_uav_pose`), never from the
   frame: out of range (or no fresh pose) -> refused, counted, no answer (a radio that cannot
   hear does not reply);
2. the client answers with its CLU m_i, trained from the model the same UAV delivered on its
   previous tour (zeros before the first one: FedEx's one-round lag), FedEx eq. (11), in the
   Delta = x_i - x_base sign;
3. it takes the delivered model as its new base and trains ``local_steps`` SGD steps from it
   (FedEx eq. (10); :meth:`train`, run by the caller off its message thread). FedEx trains
   one step per slot until the next visit; the station asks for the slots of Delta,
   ceil(Delta / step_time_s), as the engine does, capped by ``ground_clients.max_local_steps``.

Timing (wall clock, not FedEx slots: a slot is the engine's modelled minute, a real device
steps as fast as it can). The UAV that delivered comes back one revisit period later (Sync:
the next round, Async: its next tour) and waits at most ``exchange_timeout_s`` for the CLU.
Training is bounded by a :class:`~fl_uav.learning.training.StopCondition` asked before every
step, as the drones' training is:

* deadline: no step starts after the expected pickup less ``ground_clients.pickup_margin_s``
  (the visit instant plus the client's last measured revisit interval, on :attr:`clock`; none
  before a second visit has been seen). What was trained is the CLU (at least one step).
* superseded: a newer delivery passed :meth:`gate` (the UAV is back, or another one came)
  while training runs. FedEx's visit (digest Sec. 2.2 ``visit``, Sec. 1.5) has the client
  upload its *current* CLU m_i, whatever it has accumulated, then reset to the delivered
  model: so unlike a drone's superseded round nothing is dropped; training stops before its
  next step and the steps taken so far are the CLU this visit collects (zero steps: a zero
  CLU). A repeated delivery (the UAV's retry of the same visit) supersedes nothing.

Before this, a client trained all ``local_steps`` whatever the clock said: a visit arriving
while it trained waited behind the training; past ``exchange_timeout_s`` the UAV left
without the CLU, and the answer, sent later to a UAV gone, carried the training away with it.

With ``security.keys_dir`` the client signs its CLUs as client j with ``gc<j>.key`` and
opens deliveries with the drones' public keys ``drone<i>.pub``
(:func:`~fl_uav.fleet.keys.load_ground_client_auth`); with ``require_signatures`` an
unsigned, forged or stale delivery is rejected by reason like any bad frame.

Local data (no download): ``ground_clients.samples_per_client`` frames rendered from the
land-cover world at random poses within ``data_radius_m`` of the client, labelled from the
map (:func:`client_dataset`): location-correlated, as FedEx's non-IID type 2.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fl_uav.compression.codec import DecodeLimits
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.express_exchange import (
    Delivery,
    ExchangeRejected,
    decode_delivery,
    encode_clu,
)
from fl_uav.fleet.express_routes import express_layout
from fl_uav.fleet.keys import load_ground_client_auth
from fl_uav.fleet.messages import MAX_COUNT
from fl_uav.fleet.round_gate import REPEAT, RoundGate
from fl_uav.fleet.world_setup import fleet_world
from fl_uav.learning.models import build_model
from fl_uav.learning.training import NonFiniteLossError, StopCondition, train_local
from fl_uav.learning.weights import (
    Weights,
    architecture_fingerprint,
    get_weights,
    set_weights,
    weight_shapes,
)
from fl_uav.streams import Stream, stream_seed
from fl_uav.world.camera import AerialRenderer
from fl_uav.world.dataset import (
    HELDOUT_ALTITUDE_RANGE_M,
    render_dataset,
    sample_poses,
    to_model_input,
    without_unknown,
)
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import CLASS_NAMES

CLIENT_SEED_TAG = 0x67636c69   # 'gcli': keeps the clients' data streams apart


def client_dataset(config: FleetConfig, client_id: int,
                   position_enu_m: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """(model inputs float32 N x 3 x px x px, labels int64 N) of one ground client: frames
    rendered at poses within ``data_radius_m`` of its position (clipped to the world), less
    those over unknown land cover."""
    g = config.ground_clients
    world = fleet_world(config)
    rng = np.random.default_rng(np.random.SeedSequence([g.data_seed, CLIENT_SEED_TAG,
                                                        client_id]))
    east, north = position_enu_m
    r = g.data_radius_m
    poses = sample_poses(world, g.samples_per_client, rng, HELDOUT_ALTITUDE_RANGE_M,
                         (east - r, north - r, east + r, north + r))
    renderer = AerialRenderer(world, config.camera, seed=g.data_seed + client_id)
    images, labels = without_unknown(*render_dataset(
        world, renderer, MapLabeler(world, config.camera.fov_deg), poses, rng))
    return to_model_input(images, config.learning.input_px), labels


@dataclass(frozen=True)
class ExchangeRecord:
    """One visit as the client saw it (its log)."""

    uav: int
    round_index: int
    accepted: bool
    reason: str
    distance_m: float | None
    clu_steps: int
    stamp_s: float


class GroundClient:
    """One FedEx ground client: local data, base model x_base, local model x_i, range gate."""

    def __init__(self, config: FleetConfig, client_id: int, inputs: np.ndarray,
                 labels: np.ndarray, clock: Callable[[], float] = time.monotonic) -> None:
        layout = express_layout(config)
        if not 0 <= client_id < len(layout.clients_enu_m):
            raise ValueError(f'client_id {client_id} outside 0..{len(layout.clients_enu_m) - 1} '
                             f'(ground_clients.num_clients)')
        self.config = config
        self.client_id = client_id
        east, north = layout.clients_enu_m[client_id]
        self.position_enu_m = (float(east), float(north), 0.0)   # on the ground
        self.radio_range_m = config.express.radio_range_m
        self._inputs, self._labels = inputs, labels
        self._model = build_model(config.learning.model, len(CLASS_NAMES),
                                  config.learning.input_px, seed=config.learning.init_seed)
        initial = get_weights(self._model)
        self._shapes = weight_shapes(initial)
        self._fingerprint = architecture_fingerprint(initial)
        self._limits = DecodeLimits(max_frame_bytes=config.codec.max_frame_bytes)
        # security.*: its own key signs the CLUs, the drones' public keys open deliveries
        self.auth = load_ground_client_auth(config.security, client_id, config.num_drones)
        self._train_config = config.learning.train_config()
        self._lock = threading.Lock()
        self._poses: dict[int, tuple[tuple[float, float, float], float]] = {}
        # FedEx state: the base model (last delivery), the local model trained from it.
        self._base: Weights | None = None
        self._base_round: int | None = None
        self._local: Weights | None = None
        self._steps = 0
        self._loss: float | None = None
        self._pending_steps = 0
        # Timing (see the module docstring): ``clock`` (s) times visits and training stops;
        # ``_generation`` counts the new deliveries gated, ``_serving`` the one exchanged.
        self.clock = clock
        self._generation = 0
        self._serving = 0
        self._last_visit_s: float | None = None
        self.revisit_s: float | None = None          # last measured revisit interval
        self._stop_at_s: float | None = None         # no step of this training after it
        self.training_stops: Counter[str] = Counter()   # StopCondition reasons
        self.rejected: Counter[str] = Counter()     # bad frames, by reason
        self.refused: Counter[str] = Counter()      # good frames from a UAV out of range
        self.poses_rejected: Counter[str] = Counter()   # UAV poses not used, by reason
        self.training_failures = 0
        self.repeats = 0                           # repeated deliveries answered again
        self._last_reply: tuple[tuple[int, int], bytes] | None = None
        # Per UAV, the rounds (and runs) of its deliveries: a replay of an earlier one is
        # refused (stale_round / old_run), a retry of the last one answered. No run-length
        # cap: a ground device's config need not know the station's rounds.num_rounds.
        self.rounds: dict[int, RoundGate] = {}
        self.train_seconds = 0.0
        self.exchanges: list[ExchangeRecord] = []

    # --- radio ---------------------------------------------------------------------------
    def on_uav_pose(self, uav: int, east_m: float, north_m: float, up_m: float,
                    received_s: float) -> None:
        """Remember UAV ``uav``'s latest position (ENU m) and when it arrived (wall s); a
        non-finite one is counted (``poses_rejected['non_finite']``) and the last good one
        stays in use."""
        if all(math.isfinite(v) for v in (east_m, north_m, up_m)):
            with self._lock:
                self._poses[uav] = ((east_m, north_m, up_m), received_s)
        else:
            self.poses_rejected['non_finite'] += 1

    def distance_to_m(self, uav: int, now_s: float) -> float | None:
        """3-D distance to UAV ``uav`` from its latest pose, None if none is fresh."""
        with self._lock:
            entry = self._poses.get(uav)
        if entry is None or now_s - entry[1] > self.config.ground_clients.pose_max_age_s:
            return None
        return math.dist(entry[0], self.position_enu_m)

    def gate(self, data: bytes, now_s: float) -> tuple[Delivery, float] | None:
        """Decode a delivery and check the sender is within radio range now.

        Returns (delivery, distance_m), or None when the frame is bad (``rejected`` by
        reason) or its UAV is out of range / has no fresh pose (``refused``); never raises.
        """
        try:
            delivery = decode_delivery(data, self._limits, self._fingerprint, self._shapes,
                                       self.client_id, self.config.num_drones, self.auth)
        except ExchangeRejected as exc:
            self.rejected[exc.reason] += 1
            return None
        if delivery.local_steps > self.config.ground_clients.max_local_steps:
            self.rejected['metadata'] += 1      # the station never asks more: not trained
            return None
        gate = self.rounds.setdefault(delivery.uav, RoundGate(MAX_COUNT))
        verdict = gate.admit_round(delivery.round_index, None, delivery.run_id,
                                   delivery.run_started_ms)
        if not verdict.taken and verdict.action != REPEAT:   # a retry is answered again
            self.rejected[verdict.action] += 1
            return None
        distance = self.distance_to_m(delivery.uav, now_s)
        reason = ('no_pose' if distance is None
                  else 'out_of_range' if distance > self.radio_range_m else '')
        if reason:
            self.refused[reason] += 1
            self.exchanges.append(ExchangeRecord(delivery.uav, delivery.round_index, False,
                                                 reason, distance, 0, now_s))
            return None
        if verdict.taken:           # a new visit (not a retry): it supersedes the training
            with self._lock:
                self._generation += 1
        return delivery, float(distance)

    # --- FedEx ---------------------------------------------------------------------------
    def exchange(self, delivery: Delivery, distance_m: float, now_s: float) -> bytes:
        """Answer a gated delivery with the CLU (FedEx eq. (11)) and take its model as the
        new base; call :meth:`train` next. The CLU is zero before the first training. A
        repeated delivery (same UAV and round: the UAV did not hear the answer) gets the
        same CLU frame again and changes nothing."""
        key = (delivery.uav, delivery.round_index)
        if self._last_reply is not None and self._last_reply[0] == key:
            self.repeats += 1
            return self._last_reply[1]
        if self._base is not None and self._local is not None:
            delta = {n: self._local[n] - self._base[n] for n in self._base}
        else:
            delta = {n: np.zeros(s, np.float32) for n, s in self._shapes.items()}
        steps = self._steps
        meta: dict[str, Any] = {
            'steps': steps, 'num_samples': len(self._labels) if steps else 0,
            'train_loss': self._loss if steps else None, 'distance_m': round(distance_m, 3)}
        if self._base_round is not None and steps:
            meta['base_round'] = self._base_round
        frame = encode_clu(self.client_id, delivery.uav, delivery.round_index,
                           self._fingerprint, delta, meta, self.auth)
        self._base = delivery.weights
        self._base_round = delivery.round_index
        self._local, self._steps, self._loss = None, 0, None
        self._pending_steps = delivery.local_steps
        visit_s = self.clock()
        if self._last_visit_s is not None:
            self.revisit_s = visit_s - self._last_visit_s
        self._last_visit_s = visit_s
        self._stop_at_s = (None if self.revisit_s is None else visit_s + max(
            0.0, self.revisit_s - self.config.ground_clients.pickup_margin_s))
        with self._lock:
            self._serving = self._generation
        self.exchanges.append(ExchangeRecord(delivery.uav, delivery.round_index, True,
                                             'exchanged', distance_m, steps, now_s))
        self._last_reply = (key, frame)
        return frame

    def superseded(self) -> bool:
        """A newer delivery than the one last exchanged has passed :meth:`gate`."""
        with self._lock:
            return self._generation != self._serving

    def warm_up(self) -> None:
        """One throwaway SGD step on a copy of the model, to be run once before the first
        delivery. A fresh process's first training pays torch's lazy start-up (the first
        optimizer alone imports for ~2 s here, more with several processes starting at
        once): measured in the express fleet, the first 20 steps took 5.5-6.3 s against
        0.2-0.4 s later, as long as the whole revisit interval, so a UAV coming back found
        no step trained. Changes no FedEx state."""
        torch.set_num_threads(self.config.learning.torch_threads)
        scratch = copy.deepcopy(self._model)
        config = dataclasses.replace(self._train_config, max_steps=1, local_epochs=1)
        train_local(scratch, self._inputs[:config.batch_size],
                    self._labels[:config.batch_size], config, seed=0)

    def is_repeat(self, delivery: Delivery) -> bool:
        """The delivery is a retry of the visit last answered (:meth:`exchange` gives the
        same frame again and changes nothing, so it may be answered while training runs)."""
        last = self._last_reply
        return last is not None and last[0] == (delivery.uav, delivery.round_index)

    def train(self) -> int:
        """FedEx eq. (10): up to ``local_steps`` SGD steps from the base model on the local
        data, stopped by the pickup deadline or a newer delivery (module docstring); returns
        the steps run (0 if nothing to train, if a newer delivery came first, or if the loss
        went non-finite). The steps run are the CLU the next visit collects."""
        if self._base is None or not self._pending_steps:
            return 0
        steps, self._pending_steps = self._pending_steps, 0
        torch.set_num_threads(self.config.learning.torch_threads)
        set_weights(self._model, self._base)
        seed = stream_seed(self.config.world.seed, self._base_round, Stream.CLIENT_BATCHES,
                           self.client_id)
        config = dataclasses.replace(self._train_config, max_steps=steps,
                                     local_epochs=max(1, math.ceil(
                                         steps * self._train_config.batch_size
                                         / max(1, len(self._labels)))))
        stop = StopCondition(self._stop_at_s, self.superseded, self.clock)
        start = time.perf_counter()
        try:
            result = train_local(self._model, self._inputs, self._labels, config, seed, stop)
        except NonFiniteLossError:
            self.training_failures += 1
            return 0
        self.train_seconds = time.perf_counter() - start
        if stop.reason:
            self.training_stops[stop.reason] += 1
        if result.steps:
            self._local = get_weights(self._model)
            self._steps, self._loss = result.steps, float(result.mean_loss)
        return result.steps

    def report(self) -> dict[str, Any]:
        """JSON-ready log of this client: position, exchanges, refusals, rejections."""
        return {
            'client': self.client_id, 'position_enu_m': list(self.position_enu_m),
            'radio_range_m': self.radio_range_m, 'samples': len(self._labels),
            'exchanges': [dataclasses.asdict(r) for r in self.exchanges],
            'refused': dict(self.refused), 'rejected': dict(self.rejected),
            'poses_rejected': dict(self.poses_rejected),
            'repeats': self.repeats,
            'training_failures': self.training_failures,
            'training_stops': dict(self.training_stops),
            'revisit_s': self.revisit_s,
        }
