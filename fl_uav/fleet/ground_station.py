"""GroundStation: the server role as plain Python (no ROS).

Round state machine: open a round (global model + per-drone plan and knobs, deadline) →
collect updates (codec v1 dense or codec v2 QSGD / range / raw frames, or LGC layer frames that
are summed as they arrive, LGC eq. (2); each validated; bad ones counted by reason, never fatal,
and never shown to the strategy; a frame the station has already had, or of an update it
already took in a closed round, is a ``replay``, not a late update; a drone's sample count
weighs at most what it can hold, :meth:`GroundStation.sample_cap`) → close when every drone
answered (all its LGC layers) or the deadline passed → aggregate with the configured Strategy →
evaluate on the world's held-out set → next round. Time comes from the caller (wall or
simulated clock).

In ``mode: express`` (FedEx) the drones are transporters: CARP is planned once at start
(:mod:`fl_uav.fleet.express_routes`), each round's plan is a UAV's tour and its ``express``
knob, the updates are the UAVs' running sums u_k (FedEx eq. (12)) and the strategy is
FedEx's: Sync waits for every u_k and applies eq. (13) once; Async closes a round at each
landing (eqs. (14)-(15)) and sends only the landed UAVs out again.

With ``resources.planner`` (standard mode) the station also plans each drone's resource knobs
(fl_uav.planning.round_resources, the engine's planners): see :class:`StationResources`.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections import Counter, OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fl_uav.aggregation import ClientUpdate
from fl_uav.aggregation.robust import cap_samples, norm_report, unwrapped
from fl_uav.aggregation.scaffold import (
    CONTROL_TENSOR_PREFIX,
    DELTA_C_KEY,
    DELTA_C_TENSOR_PREFIX,
    Scaffold,
    split_prefixed,
    with_prefix,
)
from fl_uav.aggregation.strategy import (
    AggregateResult,
    AggregationError,
    Strategy,
    checked_aggregate,
    checked_configure_round,
)
from fl_uav.compression.codec import (
    GROUND_STATION_ID,
    DecodeLimits,
    FrameError,
    FrameKind,
    decode_frame,
    encode_frame,
    encoded_size,
    float32_tensors,
)
from fl_uav.compression.codec_v2 import VERSION_V2, FrameKindV2, LgcPart, decode_v2
from fl_uav.compression.errors import ShapeMismatch
from fl_uav.compression.lgc import decode as lgc_sum
from fl_uav.compression.quantization import flatten, unflatten
from fl_uav.compression.signing import FrameAuth, now_ms
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.express_routes import ExpressRoutes, plan_express_routes
from fl_uav.fleet.keys import load_frame_auth
from fl_uav.fleet.messages import (
    EXPRESS_KNOB,
    FLIGHT_ERROR_KEY,
    MAX_COUNT,
    REPLAY,
    ROUND_OPENED_KEY,
    RUN_ID_HEX_CHARS,
    RUN_ID_KEY,
    UPLOAD_ACK_KNOB,
    run_metadata,
    short_flight_error,
    valid_run_id,
)
from fl_uav.fleet.resource_knobs import KNOBS_REJECTED_KEY, POSITION_KEY, valid_position
from fl_uav.fleet.station_resources import CLASS_COUNTS_KEY, StationResources, valid_class_counts
from fl_uav.learning.divergence import DivergenceMonitor
from fl_uav.learning.models import build_model
from fl_uav.learning.training import evaluate
from fl_uav.learning.weights import (
    Weights,
    architecture_fingerprint,
    get_weights,
    set_weights,
    weight_shapes,
)
from fl_uav.planning.coverage import PlanWaypoint, coverage_plan
from fl_uav.planning.feddpq_opt import TOPUP_KNOB
from fl_uav.planning.resources import merge_knobs
from fl_uav.streams import Stream, stream_seed
from fl_uav.values import is_finite_number, is_int
from fl_uav.world.landcover import CLASS_NAMES

# Non-negative integer counts a drone reports with its update (anything else is rejected).
_COUNT_METRICS = ('num_samples', 'steps', 'probe_steps', 'samples_collected',
                  'waypoints_reached', 'mission_waypoints')
# Codec v2 kinds a drone may upload (an LGC update is several LGC_LAYER frames).
_V2_UPDATE_KINDS = (FrameKindV2.QSGD, FrameKindV2.RANGE, FrameKindV2.RAW, FrameKindV2.LGC_LAYER)
_VERSION_OFFSET = 4
#: Frames whose digest the station remembers, per drone of the fleet (oldest forgotten first).
REPLAY_DIGESTS_PER_DRONE = 256


@dataclass(frozen=True)
class _ReceivedUpdate:
    """What any update frame version yields once decoded: header fields, metadata, delta."""

    sender: int
    round_index: int
    metadata: dict[str, Any]
    delta: dict[str, np.ndarray]
    layer: tuple[int, int] | None = None      # LGC part: (layer id, layers in the update)


class _Rejected(Exception):
    """An update frame that decoded but cannot be used (reason as in the rejected counters)."""

    def __init__(self, reason: str, sender: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.sender = reason, sender


@dataclass(frozen=True)
class RoundOpening:
    """What the station publishes when a round opens."""

    round_index: int
    frame: bytes
    plans: dict[int, list[PlanWaypoint]]
    deadline_s: float


@dataclass
class RoundRecord:
    """Per-round results (one row of the run's summary)."""

    round_index: int
    accuracy: float
    loss: float
    participants: list[int]              # senders whose update the strategy applied (used)
    late_or_missing: list[int]
    bytes_down_per_drone: int
    bytes_up: dict[int, int]
    train_loss: dict[int, float]
    samples: dict[int, int]
    samples_collected: dict[int, int]
    waypoints_reached: dict[int, int]
    waypoints_planned: dict[int, int]
    rejected: dict[str, int]
    opened_s: float
    closed_s: float
    aggregate_seconds: float
    empty: bool
    express: dict[int, Any] = field(default_factory=dict)   # per UAV: its tour's facts
    model_change_l2: float = 0.0         # ||x_{r+1} - x_r||_2 of the global model
    # The strategy's numeric report (e.g. FedEx-Async's max_lag: server updates between the
    # model a landed tour carried and the one its u_k is applied to, digest Sec. 8 item 11).
    aggregation: dict[str, float] = field(default_factory=dict)
    # resources.planner: the knobs the planner sent each drone this round, and the resource
    # knobs each drone reported rejecting ({knob: malformed | unsupported}).
    resource_knobs: dict[int, dict] = field(default_factory=dict)
    knobs_rejected: dict[int, dict] = field(default_factory=dict)
    # What this round's evaluation showed for the first time: a diverged global model or one
    # still at chance level (fl_uav.learning.divergence), e.g. learning.lr far too large.
    warnings: list[str] = field(default_factory=list)
    # Why a drone's flight failed this round (its update's FLIGHT_ERROR_KEY), for the drones
    # whose flight failed and that reported it.
    flight_errors: dict[int, str] = field(default_factory=dict)
    # ||Δ||₂ of each update that arrived, as decoded (before the strategy's clipping), and the
    # drones whose norm was over OUTLIER_FACTOR × the round's median (robust.norm_report).
    update_norms: dict[int, float] = field(default_factory=dict)
    outliers: list[int] = field(default_factory=list)
    # The sample count a drone reported where it exceeded what the drone can hold
    # (GroundStation.sample_cap): ``samples`` has the cap it was weighed as.
    samples_claimed: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (keys of per-drone maps as strings)."""
        out = asdict(self)
        for key in PER_DRONE_FIELDS:
            out[key] = {str(k): v for k, v in out[key].items()}
        return out


PER_DRONE_FIELDS = ('bytes_up', 'train_loss', 'samples', 'samples_collected',
                    'waypoints_reached', 'waypoints_planned', 'express', 'resource_knobs',
                    'knobs_rejected', 'flight_errors', 'update_norms', 'samples_claimed')
"""RoundRecord fields that are per-drone maps (their JSON keys are strings)."""


@dataclass
class _OpenRound:
    index: int
    opened_s: float
    deadline_s: float
    #: the wall-clock stamp of this opening (ROUND_OPENED_KEY), which drones echo
    opened_ms: int | None = None
    plan_lengths: dict[int, int] = field(default_factory=dict)
    updates: dict[int, ClientUpdate] = field(default_factory=dict)
    bytes_up: dict[int, int] = field(default_factory=dict)
    bytes_down: int = 0
    rejected: Counter = field(default_factory=Counter)
    lgc_layers: dict[int, tuple[int, set[int]]] = field(default_factory=dict)
    resource_knobs: dict[int, dict] = field(default_factory=dict)
    samples_claimed: dict[int, int] = field(default_factory=dict)   # above the cap

    def complete(self, drone: int) -> bool:
        """The drone's update arrived (for LGC: every one of its layers)."""
        if drone not in self.updates:
            return False
        total, seen = self.lgc_layers.get(drone, (0, set()))
        return len(seen) == total


@dataclass(frozen=True)
class UpdateVerdict:
    """Whether an update frame was accepted, and why not."""

    accepted: bool
    reason: str
    sender: int | None = None
    detail: str = ''        # what exactly was wrong, for the log (a FrameError's message)


class GroundStation:
    """Owns the global model, the round state machine and the aggregation strategy."""

    def __init__(self, config: FleetConfig, eval_inputs: np.ndarray,
                 eval_labels: np.ndarray, run_id: str | None = None) -> None:
        self.config = config
        # Drawn at start, in every frame sent, echoed in updates (fl_uav/fleet/round_gate.py):
        # a restarted station is a new run to the drones, an earlier run's updates are refused.
        self.run_id = secrets.token_hex(RUN_ID_HEX_CHARS // 2) if run_id is None else run_id
        if not valid_run_id(self.run_id):
            raise ValueError(f'run_id must be {RUN_ID_HEX_CHARS} lower-case hex digits, got '
                             f'{self.run_id!r}')
        self.run_started_ms = now_ms()        # orders runs (RoundGate)
        self.drone_ids = list(range(config.num_drones))
        self._model = build_model(config.learning.model, len(CLASS_NAMES),
                                  config.learning.input_px, seed=config.learning.init_seed)
        self.weights: Weights = get_weights(self._model)
        self._shapes = weight_shapes(self.weights)
        self._fingerprint = architecture_fingerprint(self.weights)
        self._layout = flatten(self.weights)[1]   # codec v2 order: the global frame's tensors
        # mode express: CARP once at start (FedEx Sec. VI); the server rule counts the N
        # ground clients, not the UAVs (FedEx eq. (13): x <- x + (1/N) sum_k u_k).
        self.express: ExpressRoutes | None = (plan_express_routes(config)
                                              if config.mode == 'express' else None)
        num_clients = (config.ground_clients.num_clients if self.express is not None
                       else config.num_drones)
        # the plug-in contract: an int seed the strategy may give default_rng; world.seed
        # itself would be the land-cover map's first stream ([seed] = [seed, 0], streams.py)
        self._num_clients = num_clients
        self._strategy = self.build_strategy()
        self._round_warnings: list[str] = []   # what went wrong opening the open round
        # aggregation.max_failed_rounds: rounds in a row whose aggregation failed, and why the
        # run ended as failed ('' while it has not), as the engine stops on a plug-in's fault
        self._failed_in_a_row = 0
        self.failure = ''
        # FedEx-Async (eqs. (14)-(15)): a round is one server update; it closes as soon as
        # a UAV lands, and only the UAVs that landed depart again, with the new model.
        self._async = self.express is not None and config.express.mode == 'async'
        self._out: dict[int, int] = {}          # UAV -> round whose model it carries
        self._landed: dict[int, tuple[ClientUpdate, int]] = {}   # u_k (and bytes) to apply
        # Sync waits for every UAV (one with no clients uploads u_k = 0 at once); Async never
        # sends one with no clients (it would land, and re-depart, at once: the engine skips it).
        self._departing = [d for d in self.drone_ids
                           if not self._async or self.express.tour(d)]
        # SCAFFOLD (Karimireddy et al. 2020, Alg. 1): c goes down and Δc_k comes up as extra
        # tensors of the v1 frames (names prefixed), beside the model and the update.
        self._scaffold = isinstance(unwrapped(self._strategy), Scaffold)
        self._update_shapes = {**self._shapes, **(with_prefix(self._shapes,
                                                              DELTA_C_TENSOR_PREFIX)
                                                  if self._scaffold else {})}
        self._limits = DecodeLimits(max_frame_bytes=config.codec.max_frame_bytes)
        # an LGC update is one layer per channel (LGC eq. (1)): a frame announcing more is
        # refused before the station keeps a count of its layers
        self._max_lgc_layers = max(1, len(config.compression.lgc_channel_entries))
        # security.*: signs the global model and control frames, verifies the drones' updates
        self._auth = load_frame_auth(config.security, GROUND_STATION_ID, self.drone_ids)
        self._eval = (eval_inputs, eval_labels)
        self._round: _OpenRound | None = None
        # Per drone: the previous round's update as aggregated (LGC: the layer ids summed,
        # else None); a drone absent here had nothing used (UPLOAD_ACK_KNOB).
        self._used_last_round: dict[int, list[int] | None] = {}
        self.records: list[RoundRecord] = []
        self.rejected_total: Counter = Counter()
        # replays (REPLAY): digests of the update frames had, and per closed round the
        # drones whose update it took (LGC: the layer ids summed; None: the whole update)
        self._digests: OrderedDict[bytes, None] = OrderedDict()
        self._max_digests = REPLAY_DIGESTS_PER_DRONE * config.num_drones
        self._taken: dict[int, dict[int, frozenset[int] | None]] = {}
        # resources.planner: built from the drones' reports, its knobs merged into each round's
        self.resources = StationResources(config, len(CLASS_NAMES))
        self.initial_accuracy, self.initial_loss = self.evaluate()
        # A finite loss does not stop the run: the station says when the model diverged.
        self.divergence = DivergenceMonitor(len(CLASS_NAMES), config.rounds.num_rounds)

    def build_strategy(self) -> Strategy:
        """A new instance of the configured strategy, as this station built its own (a
        resume loads the checkpoint's state into one before it replaces the station's)."""
        return self.config.aggregation.build(
            self._num_clients, seed=stream_seed(self.config.world.seed, 0, Stream.STRATEGY))

    @property
    def strategy(self) -> Strategy:
        """The aggregation strategy (its state_dict goes into the station checkpoint)."""
        return self._strategy

    @property
    def station_key(self) -> Ed25519PrivateKey | None:
        """The station's signing key (None: unsigned frames)."""
        return self._auth.private_key

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything but the weights and the strategy that a resumed station needs to go
        on after the last closed round (JSON-ready; fl_uav.fleet.station_checkpoint)."""
        if self._round is not None:
            raise RuntimeError(f'round {self._round.index} is open: checkpoint between rounds')
        d = self.divergence
        return {
            'run_id': self.run_id, 'run_started_ms': self.run_started_ms,
            'rounds_closed': len(self.records),
            'records': [r.to_dict() for r in self.records],
            'rejected_total': dict(self.rejected_total),
            'initial_accuracy': self.initial_accuracy, 'initial_loss': self.initial_loss,
            'failed_in_a_row': self._failed_in_a_row, 'failure': self.failure,
            'used_last_round': {str(k): v for k, v in self._used_last_round.items()},
            'divergence': {'warnings': list(d.warnings), 'raised': sorted(d._raised),
                           'rounds': d._rounds, 'best_accuracy': d._best_accuracy},
            'resources': self.resources.state_dict(),
        }

    def restore(self, state: dict[str, Any], weights: Weights, strategy: Strategy,
                records: list[RoundRecord], resources: StationResources,
                divergence: DivergenceMonitor) -> None:
        """Take over a checkpoint's state (each part already read and checked by
        fl_uav.fleet.station_checkpoint): only assignments, nothing here can fail half-way."""
        self.run_id = state['run_id']
        self.run_started_ms = state['run_started_ms']
        self.weights = weights
        self._strategy = strategy
        self.records = records
        self.rejected_total = Counter(state['rejected_total'])
        self.initial_accuracy = state['initial_accuracy']
        self.initial_loss = state['initial_loss']
        self._failed_in_a_row = state['failed_in_a_row']
        self.failure = state['failure']
        self._used_last_round = {int(k): v for k, v in state['used_last_round'].items()}
        # the records do not keep LGC's layer ids: a late layer of a round closed before the
        # resume is taken for a replay of its update
        self._taken = {r.round_index: dict.fromkeys(r.bytes_up) for r in records}
        self.resources = resources
        self.divergence = divergence

    # --- state ---------------------------------------------------------------------------
    @property
    def auth(self) -> FrameAuth:
        """The station's signing identity (security.*): ``station.key`` signs its frames and
        its heartbeats (fl_uav/fleet/heartbeat_auth.py)."""
        return self._auth

    @property
    def next_round_index(self) -> int:
        """Index of the next round to open (1-based)."""
        return len(self.records) + 1

    @property
    def finished(self) -> bool:
        """All configured rounds are closed, or the run ended as failed (:attr:`failure`)."""
        return bool(self.failure) or len(self.records) >= self.config.rounds.num_rounds

    @property
    def status(self) -> str:
        """'failed' (the run ended early, :attr:`failure` says why), 'finished' or
        'running'."""
        if self.failure:
            return 'failed'
        return 'finished' if self.finished else 'running'

    @property
    def round_open(self) -> bool:
        """A round is collecting updates."""
        return self._round is not None

    @property
    def round_progress(self) -> tuple[int, float, list[int]] | None:
        """(index, deadline on the station's clock, drones whose update is complete) of the
        open round; None between rounds."""
        r = self._round
        if r is None:
            return None
        return r.index, r.deadline_s, sorted(d for d in r.updates if r.complete(d))

    def evaluate(self) -> tuple[float, float]:
        """Accuracy and loss of the global model on the held-out set."""
        torch.set_num_threads(self.config.learning.torch_threads)
        set_weights(self._model, self.weights)
        return evaluate(self._model, *self._eval)

    # --- rounds --------------------------------------------------------------------------
    def open_round(self, now_s: float) -> RoundOpening:
        """Open the next round: plans, knobs and the encoded global model."""
        if self._round is not None:
            raise RuntimeError(f'round {self._round.index} is still open')
        if self.finished:
            raise RuntimeError(self.failure or 'all rounds are done')
        index = self.next_round_index
        duration = self.config.rounds.deadline_s
        if index == 1:
            duration += self.config.rounds.first_round_extra_s
        plans = self._plans(index)
        self._round_warnings = []
        try:
            knobs = checked_configure_round(self._strategy, index, self.drone_ids)
        except AggregationError as exc:   # the round goes out, without the strategy's knobs
            knobs = {d: {} for d in self.drone_ids}
            self._round_warnings.append(
                f'round {index}: aggregation.strategy {self.config.aggregation.strategy!r}: '
                f"{exc}; the round went out without the strategy's knobs")
        planned = self.resources.knobs(index, self.drone_ids)    # {} until planned
        knobs = merge_knobs(knobs, planned)
        if self.express is not None:   # Sync: every UAV departs with x_r (Sec. IV-D);
            for d in self._departing:  # Async: those that just landed (Sec. IV-E)
                knobs[d] = {**knobs.get(d, {}), EXPRESS_KNOB: {
                    'clients': list(self.express.tour(d)),
                    'local_steps': self.express.local_steps.get(d, 1)}}
                self._out[d] = index
        for d in plans:
            knobs[d] = {**knobs.get(d, {}),
                        'plan': [[w.east_m, w.north_m, w.up_m] for w in plans[d]]}
            if index > 1:
                knobs[d][UPLOAD_ACK_KNOB] = self._upload_ack(d, index - 1)
        tensors = self.weights
        if self._scaffold:
            control = unwrapped(self._strategy).server_control(self.weights)
            tensors = {**self.weights, **with_prefix(control, CONTROL_TENSOR_PREFIX)}
        opened_ms = now_ms()
        frame = self._auth.seal(encode_frame(
            FrameKind.GLOBAL_MODEL, index, GROUND_STATION_ID, self._fingerprint, tensors,
            {'deadline_s': duration, 'num_rounds': self.config.rounds.num_rounds,
             ROUND_OPENED_KEY: opened_ms,    # wall clock: a late drone flies what is left
             **run_metadata(self.run_id, self.run_started_ms),
             'knobs': {str(d): k for d, k in knobs.items()}}))
        self._round = _OpenRound(index, now_s, now_s + duration, opened_ms, bytes_down=len(frame),
                                 plan_lengths={d: len(p) for d, p in plans.items()},
                                 resource_knobs={d: dict(k) for d, k in planned.items()})
        return RoundOpening(index, frame, plans, now_s + duration)

    def _plans(self, index: int) -> dict[int, list[PlanWaypoint]]:
        """This round's plan per drone: a coverage sweep, or in express mode its CARP tour
        (the same every round: FedEx plans once and flies the tours unchanged) for each UAV
        departing (Async: only those that just landed)."""
        if self.express is not None:
            return {d: self.express.tour_plan(d, self.config.express.altitude_m)
                    for d in self._departing}
        return {d: coverage_plan(d, self.config.num_drones, index, self.config.world.size_m,
                                 self.config.coverage, seed=self.config.world.seed)
                for d in self.drone_ids}

    def _upload_ack(self, drone: int, round_index: int) -> dict[str, Any]:
        """The UPLOAD_ACK_KNOB value for one drone: was its ``round_index`` update used?"""
        used = drone in self._used_last_round
        ack: dict[str, Any] = {'round': round_index, 'used': used}
        layers = self._used_last_round.get(drone)
        if layers is not None:
            ack['layers'] = layers
        return ack

    def receive_update(self, data: bytes) -> UpdateVerdict:
        """Validate one update frame; bad input is counted by reason and never raises."""
        verdict = self._check_update(data)
        if not verdict.accepted:
            self.count_rejected(verdict.reason)
        return verdict

    def count_rejected(self, reason: str, frames: int = 1) -> None:
        """Count ``frames`` update frames rejected for ``reason`` (in the run's counters and,
        while a round is open, the round's), e.g. those the node's full inbox refused."""
        self.rejected_total[reason] += frames
        if self._round is not None:
            self._round.rejected[reason] += frames

    def _decode_update(self, data: bytes) -> _ReceivedUpdate:
        """Decode a v1 UPDATE (with SCAFFOLD: Δc_k as prefixed tensors) or a v2 QSGD / range /
        raw frame or one LGC layer frame into a dense named delta and the sender's metadata.
        A signed envelope is verified (and a plain frame refused if signatures are required)
        before the inner frame is decoded."""
        data = self._auth.open(data, self._limits)
        if len(data) > _VERSION_OFFSET and data[_VERSION_OFFSET] == VERSION_V2:
            # The model's parameter count: a frame of another dim is refused (shape) before
            # its stream is read, so what it declares cannot size an allocation.
            v2 = decode_v2(data, self._limits, expected_fingerprint=self._fingerprint,
                           expected_dim=self._layout.dim)
            if v2.kind not in _V2_UPDATE_KINDS:
                raise _Rejected('wrong_kind', v2.sender)
            part = v2.update
            if isinstance(part, LgcPart):
                if part.num_layers > self._max_lgc_layers:
                    raise ShapeMismatch(
                        f'an LGC frame of {part.num_layers} layers; this fleet sends at most '
                        f'{self._max_lgc_layers} (compression.lgc_channel_entries)',
                        field='num_layers')
                return _ReceivedUpdate(v2.sender, v2.round_index, v2.metadata,
                                       unflatten(lgc_sum([part.layer], part.dim), self._layout),
                                       (part.layer.layer_id, part.num_layers))
            return _ReceivedUpdate(v2.sender, v2.round_index, v2.metadata,
                                   unflatten(part.dense(), self._layout))
        frame = decode_frame(data, self._limits, expected_fingerprint=self._fingerprint,
                             expected_shapes=self._update_shapes)
        if frame.kind != FrameKind.UPDATE:
            raise _Rejected('wrong_kind', frame.sender)
        tensors = float32_tensors(frame.tensors)   # NonFiniteValues beyond float32
        delta, delta_c = split_prefixed(tensors, DELTA_C_TENSOR_PREFIX)
        metadata = {**frame.metadata, DELTA_C_KEY: delta_c} if self._scaffold else frame.metadata
        return _ReceivedUpdate(frame.sender, frame.round_index, metadata, delta)

    def sample_cap(self, drone: int) -> int:
        """The most samples ``drone``'s update may weigh: what it can hold. A drone trains on
        its buffer (buffer.capacity_samples, the same key on every node) and, when this round
        sent it FedDPQ's top-up Δ, on the samples that adds (each class topped up to at most
        ⌈Δ · capacity⌉, FedDPQ eq. (1)); a FedEx UAV reports the ground clients it carried,
        at most its tour's. A larger count is weighed as the cap (issue 26: a signed drone's
        2^53 samples made FedAvg apply its update alone)."""
        if self.express is not None:
            return len(self.express.tour(drone))
        capacity = self.config.buffer.capacity_samples
        r = self._round
        topup = (r.resource_knobs.get(drone, {}).get(TOPUP_KNOB) if r is not None else None)
        if topup is None or not is_finite_number(topup) or topup <= 0:
            return capacity
        return capacity + len(CLASS_NAMES) * math.ceil(float(topup) * capacity)

    def _replayed(self, frame: _ReceivedUpdate, digest: bytes) -> str:
        """Why ``frame`` is a replay ('' if it is not): the station had these bytes already,
        or it closed the frame's round with this drone's update in it."""
        if digest in self._digests:
            return f'drone {frame.sender} round {frame.round_index}: a frame received before'
        taken = self._taken.get(frame.round_index, {})
        if frame.sender in taken and (taken[frame.sender] is None or frame.layer is None
                                      or frame.layer[0] in taken[frame.sender]):
            return (f'drone {frame.sender} round {frame.round_index}: its update of that round '
                    f'was already taken when the round closed')
        echoed, r = frame.metadata.get(ROUND_OPENED_KEY), self._round
        if (not self._async and r is not None and frame.round_index == r.index
                and r.opened_ms is not None and echoed is not None and echoed != r.opened_ms):
            # kept by DDS (TRANSIENT_LOCAL) and delivered again to a station resumed from its
            # checkpoint: the drone saw the round opened again and discounted that upload
            # (DroneAgent.settle_previous_upload), so taking it would part their states
            return (f'drone {frame.sender} round {frame.round_index}: trained for an earlier '
                    f'opening of the round (before the station resumed)')
        return ''

    def _remember(self, digest: bytes) -> None:
        self._digests[digest] = None
        while len(self._digests) > self._max_digests:
            self._digests.popitem(last=False)

    def _check_update(self, data: bytes) -> UpdateVerdict:
        try:
            frame = self._decode_update(data)
        except FrameError as exc:
            return UpdateVerdict(False, exc.reason, detail=str(exc))
        except _Rejected as exc:
            return UpdateVerdict(False, exc.reason, exc.sender)
        if frame.sender not in self.drone_ids:
            return UpdateVerdict(False, 'unknown_sender', frame.sender)
        run_id = frame.metadata.get(RUN_ID_KEY)
        if run_id is not None and run_id != self.run_id:   # none: a drone of an older fl_uav
            return UpdateVerdict(False, 'wrong_run', frame.sender,
                                 f'an update of run {run_id!r}, this run is {self.run_id}')
        digest = hashlib.blake2b(data, digest_size=16).digest()
        replayed = self._replayed(frame, digest)
        if replayed:
            return UpdateVerdict(False, REPLAY, frame.sender, replayed)
        self._remember(digest)   # a late frame delivered again is a replay too, not late twice
        if self._async:    # u_k of the tour that started in round _out[k]
            if self._out.get(frame.sender) != frame.round_index:
                return UpdateVerdict(False, 'wrong_round', frame.sender)
        elif self._round is None or frame.round_index != self._round.index:
            return UpdateVerdict(False, 'wrong_round', frame.sender)
        if set(frame.delta) != set(self._shapes):
            return UpdateVerdict(False, 'shape', frame.sender)
        counts = {key: frame.metadata.get(key, 0) for key in _COUNT_METRICS}
        if not all(is_int(v) and 0 <= v <= MAX_COUNT
                   for v in counts.values()):
            return UpdateVerdict(False, 'metadata', frame.sender)
        loss = frame.metadata.get('train_loss')
        if loss is not None and not is_finite_number(loss):
            return UpdateVerdict(False, 'metadata', frame.sender)
        if not self._reports_ok(frame.metadata):
            return UpdateVerdict(False, 'metadata', frame.sender)
        update = ClientUpdate(sender=frame.sender, round_index=frame.round_index,
                              delta=frame.delta, num_samples=counts['num_samples'],
                              metrics=dict(frame.metadata))
        capped = cap_samples(update, self.sample_cap(frame.sender))
        if self._async:
            if frame.sender in self._landed:
                return UpdateVerdict(False, 'duplicate', frame.sender)
            self._landed[frame.sender] = (capped, len(data))
            if capped is not update and self._round is not None:
                self._round.samples_claimed[frame.sender] = update.num_samples
            return UpdateVerdict(True, 'accepted', frame.sender)
        r = self._round
        if frame.sender in r.updates:
            return self._add_layer(r, frame, len(data))
        if frame.layer is not None:
            r.lgc_layers[frame.sender] = (frame.layer[1], {frame.layer[0]})
        r.updates[frame.sender] = capped
        if capped is not update:
            r.samples_claimed[frame.sender] = update.num_samples
        r.bytes_up[frame.sender] = len(data)
        return UpdateVerdict(True, 'accepted', frame.sender)

    @staticmethod
    def _reports_ok(metadata: dict[str, Any]) -> bool:
        """The drone's histogram, upload position and rejected knobs, when present, are well
        formed (the planner's inputs; the round record)."""
        checks = ((CLASS_COUNTS_KEY, lambda v: valid_class_counts(v, len(CLASS_NAMES))),
                  (POSITION_KEY, valid_position),
                  (FLIGHT_ERROR_KEY, lambda v: isinstance(v, str)),
                  (KNOBS_REJECTED_KEY, lambda v: isinstance(v, dict) and all(
                      isinstance(k, str) and isinstance(x, str) for k, x in v.items())))
        return all(key not in metadata or ok(metadata[key]) for key, ok in checks)

    @staticmethod
    def _add_layer(r: _OpenRound, frame: _ReceivedUpdate, size: int) -> UpdateVerdict:
        """Sum another LGC layer into the sender's update (LGC eq. (2)); else a duplicate."""
        total, seen = r.lgc_layers.get(frame.sender, (0, set()))
        if frame.layer is None or frame.layer[1] != total or frame.layer[0] in seen:
            return UpdateVerdict(False, 'duplicate', frame.sender)
        seen.add(frame.layer[0])
        delta = r.updates[frame.sender].delta
        for name, value in frame.delta.items():
            delta[name] += value
        r.bytes_up[frame.sender] += size
        return UpdateVerdict(True, 'accepted', frame.sender)

    def should_close(self, now_s: float) -> bool:
        """Every drone's update is complete, or the deadline passed (FedEx-Async: a UAV
        landed, or the deadline passed)."""
        r = self._round
        if r is not None and self._async:     # FedEx-Async: at the first landing
            return bool(self._landed) or now_s >= r.deadline_s
        return r is not None and (all(r.complete(d) for d in self.drone_ids)
                                  or now_s >= r.deadline_s)

    def close_round(self, now_s: float) -> RoundRecord:
        """Aggregate what arrived, evaluate, and record the round."""
        r = self._round
        if r is None:
            raise RuntimeError('no round is open')
        start = time.perf_counter()
        if self._async:   # eq. (15): every UAV landed by now, applied to the current model
            landed, self._landed = self._landed, {}
            r.updates = {k: u for k, (u, _) in landed.items()}
            r.bytes_up = {k: size for k, (_, size) in landed.items()}
            for k in landed:
                del self._out[k]
            self._departing = sorted(landed)
        updates = [r.updates[d] for d in sorted(r.updates)]
        norms = norm_report(updates)   # what arrived, before the strategy clips anything
        failure = ''
        try:
            result = checked_aggregate(self._strategy, r.index, self.weights, updates)
        except AggregationError as exc:   # the round closes anyway, on the model it had
            failure = (f'round {r.index}: aggregation.strategy '
                       f'{self.config.aggregation.strategy!r}: {exc}; the model is kept and '
                       f'no update applied')
            result = AggregateResult(dict(self.weights), empty=True,
                                     metrics={'participants': 0})
        change = 0.0
        applied = not failure
        if applied:
            # in float64: an accepted update may hold float32 values near its range
            change = math.sqrt(sum(float(np.sum(np.subtract(result.weights[n], w,
                                                            dtype=np.float64) ** 2))
                                   for n, w in self.weights.items()))
            self.weights = result.weights
        accuracy, loss = self.evaluate()
        record = RoundRecord(
            round_index=r.index, accuracy=accuracy, loss=loss,
            # Whose update the strategy applied (FedEx: a first tour's u_k = 0 is applied
            # too; FedAvg: not an update without samples), as its 'participants' counts.
            participants=list(result.used) if applied else [],
            late_or_missing=[d for d in self.drone_ids if d not in r.updates],
            bytes_down_per_drone=r.bytes_down, bytes_up=dict(r.bytes_up),
            train_loss={u.sender: _finite_or_nan(u.metrics.get('train_loss'))
                        for u in updates},
            samples={u.sender: u.num_samples for u in updates},
            samples_collected={u.sender: int(u.metrics.get('samples_collected', 0))
                               for u in updates},
            waypoints_reached={u.sender: int(u.metrics.get('waypoints_reached', 0))
                               for u in updates},
            waypoints_planned=self._waypoints_planned(r),
            rejected=dict(r.rejected), opened_s=r.opened_s, closed_s=now_s,
            aggregate_seconds=time.perf_counter() - start, empty=result.empty,
            express={u.sender: u.metrics[EXPRESS_KNOB] for u in updates
                     if isinstance(u.metrics.get(EXPRESS_KNOB), dict)},
            model_change_l2=change,
            aggregation={k: v for k, v in result.metrics.items()
                         if isinstance(v, int | float) and not isinstance(v, bool)
                         and math.isfinite(v)},
            resource_knobs=r.resource_knobs,
            knobs_rejected={u.sender: dict(u.metrics[KNOBS_REJECTED_KEY]) for u in updates
                            if KNOBS_REJECTED_KEY in u.metrics},
            warnings=[*self._round_warnings, *([failure] if failure else []),
                      *self.divergence.observe(r.index, accuracy, loss)],
            flight_errors={u.sender: short_flight_error(u.metrics[FLIGHT_ERROR_KEY])
                           for u in updates if u.metrics.get(FLIGHT_ERROR_KEY)},
            update_norms=dict(norms.norms), outliers=list(norms.outliers),
            samples_claimed=dict(r.samples_claimed))
        # Closed before anything else can fail: a retry would apply the aggregate twice.
        self.records.append(record)
        for u in updates:   # by the update's round (FedEx-Async: its tour's departure)
            layers = r.lgc_layers.get(u.sender)
            self._taken.setdefault(u.round_index, {})[u.sender] = (
                None if layers is None else frozenset(layers[1]))
        self._round = None
        self._count_failure(r.index, failure)
        # What the strategy applied, not all that arrived (FedAvg skips an update without
        # samples; a robust strategy drops outliers): the drones roll back the rest.
        self._used_last_round = {
            d: sorted(r.lgc_layers[d][1]) if d in r.lgc_layers else None
            for d in (result.used if applied else ()) if d in r.updates}
        if self.resources.enabled:   # the planner's inputs: each drone's histogram and pose
            for u in updates:
                self.resources.observe(u.sender, u.metrics)
            # The model download alone, as the engine charges it (LGC's round time), not the
            # whole frame with every drone's plan and knobs. A failure is recorded, not raised.
            self.resources.plan_if_ready(r.index, self.drone_ids, self._layout.dim,
                                         encoded_size(self.weights, {'round': r.index}))
        return record

    def _count_failure(self, round_index: int, failure: str) -> None:
        """aggregation.max_failed_rounds: the run ends as failed (:attr:`failure`) after that
        many aggregations in a row failed; a round that aggregated starts the count over."""
        self._failed_in_a_row = self._failed_in_a_row + 1 if failure else 0
        limit = self.config.aggregation.max_failed_rounds
        if limit and self._failed_in_a_row >= limit:
            self.failure = (f'the run stopped as failed after round {round_index}: the '
                            f'aggregation failed in {self._failed_in_a_row} rounds in a row '
                            f'(aggregation.max_failed_rounds {limit}), the model is the one '
                            f'before them; last: {failure}')

    def report(self) -> dict[str, Any]:
        """The run's report (DIR/ground_station.json): status ('finished', or 'failed' with the
        'error'), the rounds, the rejected frames and the drones' flight failures."""
        return {
            'run_id': self.run_id,
            'status': self.status,
            **({'error': self.failure} if self.failure else {}),
            'initial_accuracy': self.initial_accuracy,
            'initial_loss': self.initial_loss,
            'rounds': [r.to_dict() for r in self.records],
            'rejected_total': dict(self.rejected_total),
            'flight_failures': {str(d): n for d, n in self.flight_failures().items()},
            **({'express': self.express.summary()} if self.express else {}),
            **({'resources': self.resources.report()} if self.resources.enabled else {}),
        }

    def plan_pending(self) -> None:
        """Build the resource planner whose inputs the last :meth:`close_round` took (no-op
        otherwise; :meth:`open_round` does it too). Seconds for ``lgc_ddpg``: a caller with a
        lock can run it outside, between closing one round and opening the next."""
        self.resources.build_pending()

    def flight_failures(self) -> dict[int, int]:
        """Per drone, the rounds of this run whose update reported a failed flight."""
        return {d: sum(d in r.flight_errors for r in self.records) for d in self.drone_ids}

    @staticmethod
    def _waypoints_planned(r: _OpenRound) -> dict[int, int]:
        """Per drone, the waypoints of the mission it was to fly: what it reported (a drone
        planning onboard flies its own mission), else the length of the station's plan."""
        planned = dict(r.plan_lengths)
        for drone, update in r.updates.items():
            reported = update.metrics.get('mission_waypoints')
            if isinstance(reported, int) and not isinstance(reported, bool):
                planned[drone] = reported
        return planned

    def finish_frame(self) -> bytes:
        """The control frame telling drones the run is over."""
        return self._auth.seal(encode_frame(FrameKind.CONTROL, len(self.records),
                                            GROUND_STATION_ID, self._fingerprint, {},
                                            {'command': 'finish',
                                             **run_metadata(self.run_id,
                                                            self.run_started_ms)}))


def _finite_or_nan(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan
