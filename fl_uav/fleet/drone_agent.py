"""DroneAgent: the client role as plain Python (no ROS, no MAVLink).

It labels camera frames from the onboard land-cover raster at the drone's pose, keeps them in a
capped buffer, receives the global model with the round's plan and knobs, trains locally and
encodes the update with the configured compressor (``compression.method``: a dense codec v1
frame, or a codec v2 QSGD / range frame; with structured pruning only the kept coordinates are
sent, under a mask). The ROS node feeds it messages and flies the plan through the Vehicle.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import cv2
import numpy as np
import torch

from fl_uav.aggregation.feddpq import DRAWS_KNOB
from fl_uav.aggregation.fedprox import PROXIMAL_MU_KNOB
from fl_uav.aggregation.scaffold import (
    CONTROL_TENSOR_PREFIX,
    DELTA_C_KEY,
    DELTA_C_TENSOR_PREFIX,
    split_prefixed,
    with_prefix,
)
from fl_uav.compression.codec import (
    GROUND_STATION_ID,
    DecodeLimits,
    FrameError,
    FrameKind,
    decode_frame,
    float32_tensors,
)
from fl_uav.compression.codec_v2 import split_frames
from fl_uav.compression.config import PlannedCompressors
from fl_uav.compression.paper_compressors import LgcCompressor
from fl_uav.compression.signing import now_ms
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.keys import load_frame_auth
from fl_uav.fleet.messages import (
    FLIGHT_ERROR_KEY,
    ROUND_OPENED_KEY,
    RUN_ID_KEY,
    UPLOAD_ACK_KNOB,
    FinishCommand,
    PoseSample,
    RoundTask,
    round_opened_of,
    run_of,
)
from fl_uav.fleet.resource_knobs import (
    KNOBS_APPLIED_KEY,
    KNOBS_REJECTED_KEY,
    POSITION_KEY,
    RECORDED_KNOBS,
    TOPUP_GENERATED_KEY,
    KnobCheck,
    check_resource_knobs,
    check_strategy_knobs,
    drone_topup_generator,
    valid_position,
)
from fl_uav.learning.buffer import OnboardBuffer
from fl_uav.learning.client_algorithms import SERVER_CONTROL_KNOB, ScaffoldClient
from fl_uav.learning.models import build_model
from fl_uav.learning.topup import top_up
from fl_uav.learning.training import STOP_DEADLINE, STOP_SUPERSEDED, StopCondition
from fl_uav.learning.weights import (
    architecture_fingerprint,
    get_weights,
    weight_shapes,
)
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.feddpq_opt import BITS_KNOB, TOPUP_KNOB
from fl_uav.planning.lgc_control import ENTRIES_KNOB
from fl_uav.plugins import is_plugin_spec, raised_at
from fl_uav.streams import Stream, stream_rng, stream_seed
from fl_uav.values import is_finite_number
from fl_uav.world.dataset import to_model_input
from fl_uav.world.labeler import MapLabeler
from fl_uav.world.landcover import CLASS_NAMES, UNKNOWN

_log = logging.getLogger(__name__)

#: Seconds kept between the end of a round's encoding and the station's deadline when local
#: steps are fitted to the time left (:func:`steps_that_fit`): the publish and the DDS transfer
#: of the update (~0.6 MB: tens of ms idle, a few seconds with many concurrent uploads and Fast
#: DDS's default heartbeat, /work/shared/docs/platform.md) and the clock skew between drone and
#: station.
UPLOAD_MARGIN_S = 2.0

#: Rounds whose measured step speed the step cap uses: the slowest of them (several drones
#: training at once on a shared computer, or other load, make a step several times slower from
#: one round to the next).
STEP_SPEED_ROUNDS = 3

#: The step cap plans with this many times the slowest measured step time: the time a step
#: takes still swings from one round to the next beyond the window (measured in ``fl-uav sim
#: --drones 4 --set learning.local_epochs=12`` on 2 shared cores: a round's steps took up to
#: 1.4-1.7 x the slowest of the drone's previous 3 rounds; docs/benchmarks.md). The plan keeps
#: most rounds short; the stop instant (:meth:`DroneAgent.stop_at_s`) holds the deadline.
STEP_TIME_SAFETY = 1.5

#: UpdateReport.dropped when a newer round arrived before the round's update was encoded.
DROPPED_SUPERSEDED = STOP_SUPERSEDED


def steps_that_fit(time_left_s: float, seconds_per_step: float, overhead_s: float) -> int:
    """Local steps that end before the round's deadline: ⌊(T_left − T_fixed − margin) / t_step⌋,
    at least 1.

    Parameters
    ----------
    time_left_s : float
        Seconds from the start of the round's local work to the station's deadline (s).
    seconds_per_step : float
        The drone's own measured time per local step (s), > 0.
    overhead_s : float
        The work after the steps (encoding), as measured in the previous round (s);
        UPLOAD_MARGIN_S is kept for the publish.
    """
    if not seconds_per_step > 0:
        raise ValueError(f'seconds_per_step must be > 0, got {seconds_per_step}')
    usable_s = time_left_s - max(0.0, overhead_s) - UPLOAD_MARGIN_S
    return max(1, math.floor(usable_s / seconds_per_step))


class UploadEncodingError(RuntimeError):
    """A compressor plug-in raised while encoding this round's update: nothing is sent (the
    message names round, drone, spec, exception and file:line)."""


@dataclass(frozen=True)
class UpdateReport:
    """What one round of local work spent and produced: the frames to publish, in order (one,
    or one per LGC layer that its channel carries this round), the resource knobs of the
    round the drone rejected (knob -> (malformed | unsupported, detail)) and why this round's
    flight failed ('' if it did not; the update carries it as ``flight_error``).
    ``dropped``: why the round's work was dropped and nothing is sent ('' = not dropped;
    DROPPED_SUPERSEDED: a newer round arrived, so the station has closed this one and would
    refuse its update as ``wrong_round``). ``steps``: the local steps the update's Δ covers
    (sent as ``steps``); ``probe_steps``: steps taken that Δ does not cover (2CEOAFL's ρ').
    ``steps_cap``: the local steps the round's time left allowed (:func:`steps_that_fit`;
    None = no cap applied: not planned this round, or a client whose step count is its own,
    :meth:`~fl_uav.learning.client_algorithms.ClientAlgorithm.capped_steps`);
    ``planned_steps``: the steps the client takes without a cap (None: its own step count,
    which the cap does not apply to). ``stopped``: STOP_DEADLINE when the training stopped at
    the deadline's stop instant (the steps taken are sent), else ''."""

    round_index: int
    frames: tuple[bytes, ...]
    num_samples: int
    steps: int
    train_loss: float
    train_seconds: float
    knobs_rejected: dict[str, tuple[str, str]] = field(default_factory=dict)
    flight_error: str = ''
    dropped: str = ''
    steps_cap: int | None = None
    stopped: str = ''
    planned_steps: int | None = None
    probe_steps: int = 0

    @property
    def capped(self) -> bool:
        """The deadline's step plan cut the local training: the cap was below the steps the
        client would otherwise have taken (a cap equal to them cut nothing)."""
        return (self.steps_cap is not None and self.planned_steps is not None
                and self.steps_cap < self.planned_steps)

    @property
    def frame(self) -> bytes:
        """The update frame of a single-frame method (every method but lgc)."""
        if len(self.frames) != 1:
            raise ValueError(f'this update travels as {len(self.frames)} frames')
        return self.frames[0]

    @property
    def bytes_sent(self) -> int:
        """Uplink bytes of this round's update."""
        return sum(len(f) for f in self.frames)


def _shapes_of(tensors: dict) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in tensors.items()}


class DroneAgent:
    """The onboard learning pipeline of one drone."""

    def __init__(self, config: FleetConfig, drone_id: int, labeler: MapLabeler,
                 pose_history_s: float = 5.0) -> None:
        self.config = config
        self.drone_id = drone_id
        self._labeler = labeler
        px = config.learning.input_px
        self._buffer = OnboardBuffer(config.buffer, (px, px, 3))
        self._model = build_model(config.learning.model, len(CLASS_NAMES), px,
                                  seed=config.learning.init_seed)
        self._shapes = weight_shapes(get_weights(self._model))
        self._fingerprint = architecture_fingerprint(get_weights(self._model))
        self._compressor = config.compression.build()     # one per drone (lgc keeps state)
        self._model_dim = sum(int(np.prod(shape)) for shape in self._shapes.values())
        config.compression.check_model_dim(self._model_dim)   # fail at start
        self._planned = PlannedCompressors(config.compression)   # a planner's δ_u, D_n
        self._topup_generator = drone_topup_generator()
        self._client = config.learning.build_client()       # one per drone (scaffold: c_k)
        self._lock = threading.Lock()
        self._poses: deque[PoseSample] = deque()
        # Geo-tags (east_m, north_m, label) of the samples the buffer accepted, newest
        # capacity_samples: 2CEOAFL eq. (1) regions are fitted from them onboard.
        self._geotags: deque[tuple[float, float, int]] = deque(
            maxlen=config.buffer.capacity_samples)
        self._pose_history_s = pose_history_s
        self.frames_received = 0
        self.frames_skipped = 0
        # Frames over unknown land cover (a raster's nodata or unmapped codes): not labelled.
        self.frames_unlabelled = 0
        # Camera messages that were no image (fleet.camera_frames.ImageFormatError), by reason.
        self.camera_frames_rejected: Counter = Counter()
        self.waypoints_reached = 0      # in the current run (begin_flight starts it over)
        self._flight_epoch = 0          # the run (RoundTask.run_epoch) the figures belong to
        self.rounds_trained = 0
        # Rounds whose work was dropped because a newer round arrived (nothing sent).
        self.rounds_dropped = 0
        # The drone's own step times (its last trained rounds) and encoding time (its last):
        # local steps are fitted to the round's time left (steps_that_fit).
        self._step_speeds_s: deque[float] = deque(maxlen=STEP_SPEED_ROUNDS)
        self.overhead_s = 0.0
        # Rounds whose step plan cut the local steps to meet the deadline: the cap was below
        # the steps the client would otherwise have taken (UpdateReport.capped).
        self.rounds_capped = 0
        # Rounds whose training the deadline's stop instant ended (what was trained was sent).
        self.rounds_stopped_at_deadline = 0
        self.rejected_frames = 0
        self.rejected_reasons: Counter = Counter()   # station frames rejected, by reason
        self.last_rejection = ''                     # the last one's reason and detail
        self.malformed_acks = 0         # UPLOAD_ACK_KNOB values that could not be read
        self.uploads_rolled_back = 0    # previous uploads the station reported unused (or part)
        # Resource knobs (fl_uav.fleet.resource_knobs) rejected, by '<knob>/<kind>'.
        self.knobs_rejected: Counter = Counter()
        # The recorded-only knobs last received (tx_power_w, the packet-error target and q_u).
        self.recorded_knobs: dict[str, float] = {}
        # The last encoded upload awaiting the station's verdict: (round, client trained).
        self._pending_upload: tuple[int, bool] | None = None
        self._run_epoch = 0             # the run (RoundTask.run_epoch) the state belongs to
        self.runs_started = 0           # learning state reset for a new run (not the first)
        self._train_config = config.learning.train_config()
        # security.*: signs the updates, verifies the station's frames (fl_uav.fleet.keys)
        self.auth = load_frame_auth(config.security, drone_id, [GROUND_STATION_ID])

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Tensor shapes of the model (what frames from and to the station carry)."""
        return dict(self._shapes)

    @property
    def fingerprint(self) -> bytes:
        """Architecture fingerprint of the model."""
        return self._fingerprint

    # --- sensing -------------------------------------------------------------------------
    def on_pose(self, pose: PoseSample) -> None:
        """Remember a telemetry pose (kept for a few seconds to match image stamps)."""
        with self._lock:
            self._poses.append(pose)
            while self._poses and pose.stamp_s - self._poses[0].stamp_s > self._pose_history_s:
                self._poses.popleft()

    def pose_at(self, stamp_s: float) -> PoseSample | None:
        """The telemetry pose nearest in time to a stamp, or None if none is recent."""
        with self._lock:
            if not self._poses:
                return None
            stamps = [p.stamp_s for p in self._poses]
            i = bisect.bisect_left(stamps, stamp_s)
            candidates = [self._poses[j] for j in (i - 1, i) if 0 <= j < len(stamps)]
        best = min(candidates, key=lambda p: abs(p.stamp_s - stamp_s))
        return best if abs(best.stamp_s - stamp_s) <= self._pose_history_s else None

    def latest_pose(self) -> PoseSample | None:
        """The newest telemetry pose, or None before the first one."""
        with self._lock:
            return self._poses[-1] if self._poses else None

    def reject_camera_frame(self, reason: str) -> None:
        """Count a camera message that could not be read as an image (by ``reason``:
        'encoding', 'geometry', 'size', 'decode'); the drone's status shows the counts."""
        self.camera_frames_rejected[reason] += 1

    def on_camera_frame(self, image_rgb: np.ndarray, stamp_s: float) -> bool:
        """Label a frame at the drone's pose and buffer it; False if it was not kept."""
        self.frames_received += 1
        pose = self.pose_at(stamp_s)
        # A non-finite pose (an autopilot NaN altitude) has no footprint: no label for it.
        if (pose is None or pose.non_finite_fields()
                or pose.up_m < self.config.camera.min_altitude_m
                or image_rgb.ndim != 3 or image_rgb.shape[2] != 3):
            self.frames_skipped += 1
            return False
        try:
            label = self._labeler.label(pose.east_m, pose.north_m, pose.up_m, pose.yaw_rad)
        except ValueError:   # finite but absurd (e.g. a 1e30 m altitude): no cell to label
            self.frames_skipped += 1
            return False
        if label == UNKNOWN:
            self.frames_unlabelled += 1
            return False
        px = self.config.learning.input_px
        small = cv2.resize(image_rgb, (px, px), interpolation=cv2.INTER_AREA)
        with self._lock:
            kept = self._buffer.add(small, label)
            if kept:
                self._geotags.append((pose.east_m, pose.north_m, label))
            return kept

    def geotagged_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions (N x 2, ENU m, where the frame was taken) and labels (N,) of the newest
        samples the buffer accepted (the buffer's content under fifo and append_only)."""
        with self._lock:
            tags = list(self._geotags)
        positions = np.array([(e, n) for e, n, _ in tags], np.float64).reshape(-1, 2)
        return positions, np.array([label for _, _, label in tags], np.int64)

    @property
    def buffered_samples(self) -> int:
        """Samples currently in the onboard buffer."""
        return len(self._buffer)

    @property
    def samples_collected(self) -> int:
        """Samples offered to the buffer since start."""
        return self._buffer.total_offered

    def class_counts(self) -> np.ndarray:
        """Buffered samples per class."""
        with self._lock:
            return self._buffer.class_counts(len(CLASS_NAMES))

    # --- rounds --------------------------------------------------------------------------
    def accept_global_frame(self, data: bytes) -> RoundTask | FinishCommand | None:
        """Decode the station's frame; None (and a counted rejection) if it is unusable."""
        limits = DecodeLimits(max_frame_bytes=self.config.codec.max_frame_bytes)
        try:   # the signed envelope is verified before the inner frame is decoded
            frame = decode_frame(self.auth.open(data, limits), limits,
                                 expected_fingerprint=self._fingerprint)
        except FrameError as exc:
            return self._reject(exc.reason, str(exc))
        if frame.sender != GROUND_STATION_ID:
            return self._reject('unknown_sender')
        try:
            run_id, started_ms = run_of(frame.metadata)
        except ValueError as exc:
            return self._reject('metadata', str(exc))
        if frame.kind == FrameKind.CONTROL:
            if frame.metadata.get('command') == 'finish':
                return FinishCommand(frame.round_index, run_id, started_ms)
            return self._reject('metadata')
        if frame.kind != FrameKind.GLOBAL_MODEL:
            return self._reject('wrong_kind')
        try:   # the model's float32: a float64 value beyond its range is no weight
            tensors = float32_tensors(frame.tensors)
        except FrameError as exc:
            return self._reject(exc.reason, str(exc))
        weights, control = split_prefixed(tensors, CONTROL_TENSOR_PREFIX)   # SCAFFOLD c
        if _shapes_of(weights) != self._shapes or (control and _shapes_of(control)
                                                   != self._shapes):
            return self._reject('shape')
        try:
            knobs = dict(frame.metadata.get('knobs', {}).get(str(self.drone_id), {}))
            raw_plan = knobs.get('plan', [])
            deadline_s = frame.metadata.get('deadline_s', 0.0)
        except (AttributeError, TypeError, ValueError, OverflowError):
            return self._reject('metadata')     # malformed knobs or plan: not this round's task
        # Seconds, not a string float() would read ('inf': a flight without a time bound).
        if not (is_finite_number(deadline_s) and deadline_s >= 0):
            return self._reject('metadata', f'deadline_s {deadline_s!r} is not seconds')
        try:
            opened_ms = round_opened_of(frame.metadata)
        except ValueError as exc:
            return self._reject('metadata', str(exc))
        num_rounds = frame.metadata.get('num_rounds')
        if num_rounds is not None and (isinstance(num_rounds, bool)
                                       or not isinstance(num_rounds, int) or num_rounds < 1):
            return self._reject('metadata')     # a run length that is not a count
        # Each waypoint three finite numbers (not strings, not an int beyond a float).
        if not (isinstance(raw_plan, list) and all(map(valid_position, raw_plan))):
            return self._reject('metadata')
        plan = tuple(PlanWaypoint(float(e), float(n), float(u)) for e, n, u in raw_plan)
        if control:
            knobs[SERVER_CONTROL_KNOB] = control
        return RoundTask(round_index=frame.round_index, weights=weights, plan=plan,
                         knobs=knobs, deadline_s=float(deadline_s), num_rounds=num_rounds,
                         run_id=run_id, run_started_ms=started_ms, opened_ms=opened_ms)

    def _reject(self, reason: str, detail: str = '') -> None:
        """Count one unusable station frame (``rejected_frames``, and by reason); keep what
        was wrong with it (``last_rejection``: reason and detail, for the log)."""
        self.rejected_frames += 1
        self.rejected_reasons[reason] += 1
        self.last_rejection = f'{reason}: {detail}' if detail else reason

    def train_round(self, task: RoundTask,
                    superseded: Callable[[], bool] | None = None) -> UpdateReport:
        """Run the configured client algorithm from the global weights on the buffer (the
        engine's code, fl_uav.learning.client_algorithms) and encode the update frame.

        The round's resource knobs are checked first (:meth:`check_knobs`); the applied ones
        set the steps (``local_steps``), the pruning ratio (``prune_fraction``), the buffer's
        FedDPQ top-up (``topup_factor``, eqs. (1)-(3)) and the upload's compressor
        (``range_bits``, ``lgc_channel_entries``); a rejected one leaves the config's value.

        Catching up. ``superseded`` says whether a newer round has arrived (the station closed
        this one and would refuse its update): checked before training, before every local
        step and before encoding; once true the round's work is dropped (``dropped`` set, no
        frame, nothing to acknowledge; a started training's client state is rolled back as for
        a lost upload) so the newer round trains at once. The previous upload is still settled
        with this round's acknowledgement. When the round says when it opened, the steps of
        the sgd and scaffold clients are capped to those that end before the deadline at the
        drone's own measured speed (:func:`steps_that_fit`; a planner's ``local_steps`` knob
        and the other clients' own step counts are kept: ``ClientAlgorithm.capped_steps``;
        ``rounds_capped`` counts the rounds the cap was below the client's own steps, one it
        met exactly cut nothing), and no local step of any client
        starts after the stop instant (:meth:`stop_at_s`; the first step always runs): the
        steps taken are sent (``stopped``). Both stops are one
        :class:`~fl_uav.learning.training.StopCondition`, asked before each local step."""
        start = time.perf_counter()
        if task.run_epoch < self._run_epoch:   # a round of a run left: no state touched
            _log.info('drone %d: round %d belongs to a run left; not trained, nothing sent',
                      self.drone_id, task.round_index)
            return UpdateReport(task.round_index, (), 0, 0, float('nan'),
                                time.perf_counter() - start)
        self.start_run(task.run_epoch)
        self.settle_previous_upload(task)
        if superseded is not None and superseded():
            return self._dropped(task, start, 'before training')
        steps_cap, planned_steps, probe_steps = None, None, 0
        check = self.check_knobs(task)
        knobs = {**{k: v for k, v in task.knobs.items() if k not in check.rejected},
                 **check.applied}
        torch.set_num_threads(self.config.learning.torch_threads)
        with self._lock:
            images, labels = self._buffer.arrays()
        steps, loss, num_samples, trained, train_s = 0, float('nan'), 0, False, 0.0
        stopped = ''
        delta = {name: np.zeros_like(w) for name, w in task.weights.items()}
        mask, metrics, delta_c, generated = None, {}, None, None
        selected = knobs.get(DRAWS_KNOB, 1) > 0     # FedDPQ: drawn this round? (checked)
        if selected and len(images) >= self.config.learning.min_samples_to_train:
            if TOPUP_KNOB in check.applied:     # FedDPQ eqs. (1)-(3) on the buffer's frames
                made = top_up(images, labels, len(CLASS_NAMES), check.applied[TOPUP_KNOB],
                              self._topup_generator,
                              stream_rng(self.config.world.seed, task.round_index,
                                         Stream.FLEET_TOPUP, self.drone_id))
                images = np.concatenate([images, made.images])
                labels = np.concatenate([labels, made.labels])
                generated = made.generated_total
            inputs = to_model_input(images, self.config.learning.input_px)
            lr = self.config.learning.lr * self.config.learning.lr_decay ** (task.round_index - 1)
            mu = float(knobs.get(PROXIMAL_MU_KNOB, 0.0))
            train_config = dataclasses.replace(self._train_config, lr=lr, proximal_mu=mu)
            # the config's steps are fitted to the time left when the steps start; a client's
            # own step count (None) is not, the stop instant alone bounds it
            planned_steps = self._client.capped_steps(len(labels), train_config, knobs)
            steps_cap = None if planned_steps is None else self.steps_cap(task)
            if steps_cap is not None:
                train_config = dataclasses.replace(train_config,
                                                   max_steps=min(planned_steps, steps_cap))
            stop = StopCondition(self.stop_at_s(task), superseded)
            train_start = time.perf_counter()
            result = self._client.train(
                self._model, task.weights, inputs, labels, train_config,
                seed=stream_seed(self.config.world.seed, task.round_index,
                                 Stream.FLEET_BATCHES, self.drone_id), knobs=knobs,
                should_stop=stop)
            train_end = time.perf_counter()
            train_s = train_end - train_start
            if stop.reason == STOP_SUPERSEDED:
                self._client.upload_lost()    # stopped: nothing will leave this round
                return self._dropped(task, start, 'during training')
            if superseded is not None and superseded():
                self._client.upload_lost()    # trained, but nothing will leave this round
                return self._dropped(task, start, 'after training')
            stopped = stop.reason
            delta, mask, metrics = result.delta, result.mask, dict(result.metrics)
            delta_c = metrics.pop(DELTA_C_KEY, None)
            steps, loss, num_samples = result.steps, result.mean_loss, result.num_samples
            probe_steps = result.probe_steps
            self.rounds_trained += 1
            trained = True
        metadata = {
            **metrics,
            'num_samples': num_samples, 'steps': steps,
            'train_loss': loss if np.isfinite(loss) else None,
            'samples_collected': self.samples_collected,
            'waypoints_reached': self.waypoints_reached,
            'mission_waypoints': len(task.plan),
            'class_counts': self.class_counts().tolist(),
        }
        if task.flight_error:           # why this round's flight failed
            metadata[FLIGHT_ERROR_KEY] = task.flight_error
        if task.run_id is not None:     # echoed: the station refuses another run's update
            metadata[RUN_ID_KEY] = task.run_id
        if task.opened_ms is not None:  # echoed: a station resumed since refuses it
            metadata[ROUND_OPENED_KEY] = task.opened_ms
        pose = self.latest_pose()
        position = None if pose is None else [pose.east_m, pose.north_m, pose.up_m]
        if valid_position(position):   # where the upload left, for the station's d_u; a pose
            metadata[POSITION_KEY] = position   # with a NaN is left out (encoding would fail)

        if check.applied:
            metadata[KNOBS_APPLIED_KEY] = check.applied
        if check.rejected:
            metadata[KNOBS_REJECTED_KEY] = {k: kind for k, (kind, _) in check.rejected.items()}
        if generated is not None:
            metadata[TOPUP_GENERATED_KEY] = generated
        try:
            frames = self._encode(task, delta, mask, delta_c, metadata, check.applied)
        except Exception as exc:
            method = self.config.compression.method
            if not is_plugin_spec(method):   # a built-in's bug: its traceback
                raise
            if trained:   # nothing leaves this round: the client's state must not count it
                self._client.upload_lost()
            raise UploadEncodingError(
                f'round {task.round_index}, drone {self.drone_id}: compression.method '
                f'{method!r}: {type(self._compressor).__name__}.compress raised '
                f'{type(exc).__name__}: {exc}{raised_at(exc)}; nothing sent this round') from exc
        self._pending_upload = (task.round_index, trained)
        total_s = time.perf_counter() - start
        steps_taken = steps + probe_steps   # the step time: every step the round ran
        if trained and steps_taken > 0:
            self.record_step_time(train_s / steps_taken)
            self.overhead_s = time.perf_counter() - train_end
            _log.info('drone %d: round %d: %d local steps in %.1f s (%.3f s a step; cap %s), '
                      'encoded in %.1f s', self.drone_id, task.round_index, steps_taken,
                      train_s, train_s / steps_taken, steps_cap, self.overhead_s)
        report = UpdateReport(task.round_index, frames, num_samples, steps, loss, total_s,
                              dict(check.rejected), task.flight_error, steps_cap=steps_cap,
                              stopped=stopped, planned_steps=planned_steps,
                              probe_steps=probe_steps)
        if trained and report.capped:
            self.rounds_capped += 1
        if stopped == STOP_DEADLINE:
            self.rounds_stopped_at_deadline += 1
        return report

    @property
    def seconds_per_step(self) -> float | None:
        """The drone's local step time the step cap uses: the slowest measured over its last
        STEP_SPEED_ROUNDS trained rounds (None: none trained yet)."""
        return max(self._step_speeds_s) if self._step_speeds_s else None

    def record_step_time(self, seconds_per_step: float) -> None:
        """One trained round's measured time per local step (train_round calls it)."""
        self._step_speeds_s.append(seconds_per_step)

    def steps_cap(self, task: RoundTask, now_wall_ms: int | None = None) -> int | None:
        """The local steps that end before the round's deadline (:func:`steps_that_fit`) at
        the drone's measured step speed (:attr:`seconds_per_step` x STEP_TIME_SAFETY); None
        when the round does
        not say when it opened, or no round has been trained yet."""
        if task.opened_ms is None or self.seconds_per_step is None:
            return None
        now = now_ms() if now_wall_ms is None else now_wall_ms
        time_left_s = task.deadline_s - (now - task.opened_ms) / 1000.0
        return steps_that_fit(time_left_s, self.seconds_per_step * STEP_TIME_SAFETY,
                              self.overhead_s)

    def stop_at_s(self, task: RoundTask) -> float | None:
        """The ``time.monotonic()`` instant after which no local step starts, so the update
        leaves before the round's deadline whatever the steps cost this round: the deadline
        less the last encoding time and UPLOAD_MARGIN_S (StopCondition.stop_at_s; the first
        step always runs). None when the round does not say when it opened."""
        if task.opened_ms is None:
            return None
        time_left_s = task.deadline_s - (now_ms() - task.opened_ms) / 1000.0
        usable_s = time_left_s - max(0.0, self.overhead_s) - UPLOAD_MARGIN_S
        return time.monotonic() + usable_s

    def _dropped(self, task: RoundTask, start_s: float, when: str) -> UpdateReport:
        """A newer round arrived: this round's work stops here and nothing is sent."""
        self.rounds_dropped += 1
        _log.info('drone %d: round %d dropped %s: a newer round arrived (the station has '
                  'closed this one); nothing sent', self.drone_id, task.round_index, when)
        return UpdateReport(task.round_index, (), 0, 0, float('nan'),
                            time.perf_counter() - start_s, flight_error=task.flight_error,
                            dropped=DROPPED_SUPERSEDED)

    def begin_flight(self, run_epoch: int) -> None:
        """A flight of run ``run_epoch`` starts (the pilot calls it first): with a new run
        the per-run flight figures (``waypoints_reached``, reported with every update) start
        over; the same run, or one left, changes nothing. Separate from :meth:`start_run`,
        which runs at training, after the new run's first flight has been counted."""
        if run_epoch > self._flight_epoch:
            if self._flight_epoch != 0:
                self.waypoints_reached = 0
            self._flight_epoch = run_epoch

    def start_run(self, run_epoch: int) -> None:
        """Drop the learning state an earlier run left when ``run_epoch`` is a new run: the
        client algorithm's (SCAFFOLD's c_k), the compressor's (LGC's residual) and the upload
        awaiting an acknowledgement; the buffer's samples and geo-tags stay (the world did not
        change). Called by :meth:`train_round` first; a no-op for the same run or one left
        (``run_epoch`` below the current: :meth:`train_round` skips its round)."""
        if run_epoch <= self._run_epoch:
            return
        if self._run_epoch != 0:
            self._client = self.config.learning.build_client()
            self._compressor = self.config.compression.build()
            self._pending_upload = None
            self.runs_started += 1
            _log.info('drone %d: a new run (%d): client and compressor state reset',
                      self.drone_id, run_epoch)
        self._run_epoch = run_epoch

    def check_knobs(self, task: RoundTask) -> KnobCheck:
        """The round's resource knobs (fl_uav.fleet.resource_knobs): each rejected one is
        counted (``knobs_rejected``, by '<knob>/<kind>') and logged; the recorded-only ones
        (``tx_power_w``: the fleet models no radio) are kept in ``recorded_knobs``."""
        c = self.config
        check = check_resource_knobs(
            task.knobs, client_algorithm=c.learning.client_algorithm,
            compression_method=c.compression.method,
            num_channels=len(c.compression.lgc_channel_entries), model_dim=self._model_dim)
        check = KnobCheck(check.applied, {**check.rejected,
                                          **check_strategy_knobs(task.knobs)})
        for knob, (kind, detail) in check.rejected.items():
            self.knobs_rejected[f'{knob}/{kind}'] += 1
            _log.warning('drone %d, round %d: knob %s rejected (%s): %s', self.drone_id,
                         task.round_index, knob, kind, detail)
        self.recorded_knobs.update({k: v for k, v in check.applied.items()
                                    if k in RECORDED_KNOBS})
        return check

    def settle_previous_upload(self, task: RoundTask) -> None:
        """Undo what the previous upload changed if the station says it was not used.

        The round task's UPLOAD_ACK_KNOB tells whether the round r − 1 update was aggregated
        (for LGC: which layers); a task for the upload's own round again (a station resumed
        from its checkpoint reopens the round it crashed in) says it was not. If it was not,
        the client algorithm's and the compressor's ``upload_lost`` run (SCAFFOLD's c_k,
        LGC's residual), as the engine does for a late
        drone; if only some LGC layers were summed, exactly those stay acknowledged. Only for
        an upload this agent made in round r − 1 and not yet settled (so a second call does
        nothing); a malformed knob is counted (``malformed_acks``) and ignored. Called by
        :meth:`train_round` first.
        """
        pending, self._pending_upload = self._pending_upload, None
        ack = task.knobs.get(UPLOAD_ACK_KNOB)
        if pending is None or ack is None:
            return
        try:
            ack_round, used = ack['round'], ack['used']
            layers = ack.get('layers')
            if (isinstance(ack_round, bool) or not isinstance(ack_round, int)
                    or not isinstance(used, bool)):
                raise TypeError('round must be an int and used a bool')
            if layers is not None and not all(isinstance(c, int) and not isinstance(c, bool)
                                              for c in layers):
                raise TypeError('layers must be layer ids')
        except (KeyError, TypeError, ValueError, AttributeError):
            self.malformed_acks += 1
            return
        upload_round, trained = pending
        if upload_round >= task.round_index:   # the station opened that round again (it
            used = False                        # resumed from its checkpoint): never used
        elif ack_round != upload_round or ack_round != task.round_index - 1:
            return
        lgc = isinstance(self._compressor, LgcCompressor)
        if used and lgc and layers is not None:
            if set(layers) >= set(self._compressor.last_received):
                return
            self._compressor.upload_used(layers)      # only some layers were summed
            self.uploads_rolled_back += 1
            return
        if used:
            return
        if trained:
            self._client.upload_lost()
        self._compressor.upload_lost()
        self.uploads_rolled_back += 1

    def _encode(self, task: RoundTask, delta: dict, mask: dict | None, delta_c: dict | None,
                metadata: dict, applied: dict | None = None) -> tuple[bytes, ...]:
        """The frames that carry this round's update (the configured compressor's output; a
        planner's ``range_bits`` picks the range quantizer's bits δ_u, FedDPQ eqs. (11)-(13),
        and ``lgc_channel_entries`` the LGC layers' sizes D_n this round, LGC eq. (13))."""
        applied = applied or {}
        # Flattened in the global frame's tensor order (the station unflattens in that order).
        delta = {name: delta[name] for name in task.weights}
        if isinstance(self._client, ScaffoldClient):   # Δc_k beside Δ (dense v1 tensors)
            if delta_c is None:
                delta_c = {name: np.zeros_like(w) for name, w in delta.items()}
            delta = {**delta, **with_prefix(delta_c, DELTA_C_TENSOR_PREFIX)}
        rng = stream_rng(self.config.world.seed, task.round_index, Stream.FLEET_COMPRESSOR,
                         self.drone_id)
        compressor = self._planned.select(self._compressor, applied.get(BITS_KNOB),
                                          applied.get(ENTRIES_KNOB))
        sent, _ = compressor.compress(delta, rng, round_index=task.round_index,
                                      sender=self.drone_id, fingerprint=self._fingerprint,
                                      mask=mask, metadata=metadata, metrics=metadata)
        if isinstance(self._compressor, LgcCompressor):
            # LGC: one frame per layer; a layer whose channel drops it this round is not sent
            # (the compressor kept it in its residual, LGC §2.5).
            layers = split_frames(sent)
            return tuple(self.auth.seal(layers[c]) for c in self._compressor.last_received)
        return (self.auth.seal(sent),)
