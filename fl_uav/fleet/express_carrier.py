"""ExpressCarrier: a UAV as a FedEx transporter (plain Python, no ROS, no MAVLink).

On a tour (one round of FedEx-Sync, Sec. IV-D) UAV k carries the global model x^{t0} it got
at the station and a running sum u_k (FedEx eq. (12): u_k <- u_k + m_i at each visit, one
model-sized buffer, no per-client copies). At each client it hovers, delivers x^{t0} and
waits for the client's CLU (:meth:`ExpressCarrier.visit`, over an :class:`ExpressLink` the
node provides); back at the station it uploads u_k as an UPDATE frame
(:meth:`ExpressCarrier.upload_frame`), which the station applies with eq. (13).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fl_uav.compression.codec import DecodeLimits, FrameKind, encode_frame
from fl_uav.compression.signing import FrameAuth
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.express_exchange import ExchangeRejected, decode_clu, encode_delivery
from fl_uav.fleet.keys import load_frame_auth, visit_auth
from fl_uav.fleet.messages import (
    EXPRESS_KNOB,
    FLIGHT_ERROR_KEY,
    RUN_ID_KEY,
    RoundTask,
    short_flight_error,
)
from fl_uav.learning.weights import Weights
from fl_uav.values import is_int
from fl_uav.vehicle.streams import put_latest


class ExpressLink(Protocol):
    """The UAV's radio to ground clients (the node implements it over ROS topics)."""

    def send(self, client: int, frame: bytes) -> None:
        """Transmit a delivery frame to one client."""

    async def receive(self, timeout_s: float) -> bytes | None:
        """The next CLU frame heard, or None after ``timeout_s``."""


#: CLU frames a UAV keeps between its reads (:class:`CluInbox`). A visit reads the frames
#: as they come, and a client sends at most one per delivery attempt; frames heard while no
#: visit reads are stale. A bound keeps a flood (a babbling or hostile sender) from growing
#: memory by one frame, up to codec.max_frame_bytes, per message.
CLU_INBOX_FRAMES = 16
#: ``ExpressCarrier.rejected`` reason of a CLU frame dropped because the inbox was full.
INBOX_FULL = 'inbox_full'


class CluInbox:
    """The CLU frames a UAV has heard, for :meth:`ExpressLink.receive` on the vehicle loop:
    :meth:`put_threadsafe` from any thread (the ROS executor), :meth:`get` on ``loop``. At
    most ``capacity`` frames are kept: a new frame when full drops the oldest
    (:func:`put_latest`), counted in ``dropped`` under INBOX_FULL."""

    def __init__(self, loop: asyncio.AbstractEventLoop, dropped: Counter,
                 capacity: int = CLU_INBOX_FRAMES) -> None:
        if capacity < 1:
            raise ValueError(f'capacity must be >= 1 frame, got {capacity}')
        self._loop = loop
        self._frames: asyncio.Queue[bytes] = asyncio.Queue(maxsize=capacity)
        self.dropped = dropped

    def __len__(self) -> int:
        return self._frames.qsize()

    def put_threadsafe(self, frame: bytes) -> None:
        """Queue a frame heard on another thread (safe from any thread)."""
        self._loop.call_soon_threadsafe(self.put, frame)

    def put(self, frame: bytes) -> None:
        """Queue a frame (on the loop's thread); the oldest goes if the inbox is full."""
        if self._frames.full():
            self.dropped[INBOX_FULL] += 1
        put_latest(self._frames, frame)

    async def get(self, timeout_s: float) -> bytes | None:
        """The oldest frame kept, waiting up to ``timeout_s``; None if none came."""
        try:
            return await asyncio.wait_for(self._frames.get(), timeout_s)
        except TimeoutError:
            return None


class ExpressTaskError(ValueError):
    """A round task without a usable express knob (the UAV flies nothing that round)."""


@dataclass
class TourLog:
    """What one tour did: per client, whether the CLU came, its steps and hover time."""

    round_index: int
    clients: tuple[int, ...]
    local_steps: int
    exchanged: list[int] = field(default_factory=list)
    missed: list[int] = field(default_factory=list)
    clu_steps: dict[int, int] = field(default_factory=dict)
    distance_m: dict[int, float] = field(default_factory=dict)
    hover_s: dict[int, float] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    waypoints_reached: int = 0
    error: str = ''
    run_id: str | None = None        # the station's run (echoed in u_k: RUN_ID_KEY)
    run_started_ms: int | None = None     # when it started (in each delivery)

    def to_metadata(self) -> dict[str, Any]:
        """The tour's facts as the upload's ``express`` metadata (JSON keys are strings)."""
        return {'clients': list(self.clients), 'exchanged': self.exchanged,
                'missed': self.missed,
                'clu_steps': {str(c): v for c, v in self.clu_steps.items()},
                'distance_m': {str(c): round(v, 3) for c, v in self.distance_m.items()},
                'hover_s': {str(c): round(v, 3) for c, v in self.hover_s.items()},
                'waypoints_reached': self.waypoints_reached, 'error': self.error}


class ExpressCarrier:
    """FedEx transporter state of one UAV: the carried model and the running sum u_k."""

    def __init__(self, config: FleetConfig, uav_id: int, shapes: dict[str, tuple[int, ...]],
                 fingerprint: bytes, *, auth: FrameAuth | None = None) -> None:
        self.config = config
        self.uav_id = uav_id
        self._shapes = shapes
        self._fingerprint = fingerprint
        self._limits = DecodeLimits(max_frame_bytes=config.codec.max_frame_bytes)
        # security.*: u_k is signed like any update; the drone's agent already holds its
        # keys, which it passes as ``auth``. On the visit link the UAV signs its deliveries
        # with the same key and opens CLUs with the ground clients' public keys.
        self._auth = auth if auth is not None else load_frame_auth(config.security, uav_id, [])
        self.visit_auth = visit_auth(self._auth, config.security,
                                     config.ground_clients.num_clients)
        self.carried: Weights | None = None
        self.running_sum: Weights = {n: np.zeros(s, np.float32) for n, s in shapes.items()}
        self.tour: TourLog | None = None
        self.rejected: Counter[str] = Counter()     # CLU frames that could not be used

    def start_tour(self, task: RoundTask) -> TourLog:
        """Take the round's model and tour; u_k <- 0. Raises ExpressTaskError on a bad knob."""
        knob = task.knobs.get(EXPRESS_KNOB)
        try:
            clients, steps = knob['clients'], knob['local_steps']
        except (KeyError, TypeError) as exc:
            raise ExpressTaskError(f'round {task.round_index}: express knob {knob!r} '
                                   f'unusable: {exc!r}') from None
        g = self.config.ground_clients
        # Each client once (a second visit would add its CLU to u_k twice), all of them real.
        if not (isinstance(clients, list | tuple) and all(map(is_int, clients))
                and all(0 <= c < g.num_clients for c in clients)
                and len(set(clients)) == len(clients)):
            raise ExpressTaskError(f'round {task.round_index}: express clients {clients!r} '
                                   f'must be distinct ids in 0..{g.num_clients - 1}')
        if not (is_int(steps) and 1 <= steps <= g.max_local_steps):
            raise ExpressTaskError(f'round {task.round_index}: express local_steps {steps!r} '
                                   f'must be an integer in [1, {g.max_local_steps}] '
                                   f'(ground_clients.max_local_steps)')
        clients = tuple(clients)
        if len(task.plan) != (len(clients) + 1 if clients else 0):
            raise ExpressTaskError(f'round {task.round_index}: {len(clients)} clients but '
                                   f'{len(task.plan)} waypoints (want one per client and the '
                                   f'station)')
        self.carried = task.weights
        self.running_sum = {n: np.zeros(s, np.float32) for n, s in self._shapes.items()}
        self.tour = TourLog(task.round_index, clients, steps, run_id=task.run_id,
                            run_started_ms=task.run_started_ms)
        return self.tour

    def delivery_frame(self, client: int) -> bytes:
        """The carried model, addressed to ``client`` (signed now, with keys)."""
        if self.tour is None or self.carried is None:
            raise RuntimeError('no tour started')
        return encode_delivery(self.uav_id, self.tour.round_index, client, self._fingerprint,
                               self.carried, self.tour.local_steps, self.visit_auth,
                               self.tour.run_id, self.tour.run_started_ms)

    def accept_clu(self, data: bytes, client: int) -> bool:
        """Add a client's CLU to u_k (FedEx eq. (12)) if the frame answers this visit; a bad
        frame (also one unsigned where signatures are required, forged or stale) is counted
        in ``rejected`` by reason and changes nothing."""
        tour = self.tour
        if tour is None:
            self.rejected['no_tour'] += 1
            return False
        try:
            clu = decode_clu(data, self._limits, self._fingerprint, self._shapes, self.uav_id,
                             tour.round_index, client, self.visit_auth)
        except ExchangeRejected as exc:
            self.rejected[exc.reason] += 1
            return False
        if clu.steps > self.config.ground_clients.max_local_steps:
            self.rejected['metadata'] += 1      # no client trains more per visit
            return False
        for name, value in clu.delta.items():
            self.running_sum[name] += value
        tour.exchanged.append(client)
        tour.clu_steps[client] = clu.steps
        tour.distance_m[client] = clu.distance_m
        if clu.train_loss is not None:
            tour.losses.append(clu.train_loss)
        return True

    async def visit(self, client: int, link: ExpressLink) -> bool:
        """Hovering over ``client``: deliver, then wait up to exchange_timeout_s for its CLU
        (frames that are not its answer are counted and skipped), sending the delivery again
        ``delivery_attempts`` times in all while none came. False: missed."""
        g = self.config.ground_clients
        start = time.monotonic()
        frame = self.delivery_frame(client)
        ok = False
        for attempt in range(1, g.delivery_attempts + 1):
            link.send(client, frame)
            deadline = start + g.exchange_timeout_s * attempt / g.delivery_attempts
            while not ok and (remaining := deadline - time.monotonic()) > 0:
                data = await link.receive(remaining)
                if data is None:
                    break
                ok = self.accept_clu(data, client)
            if ok:
                break
        if not ok:
            self.tour.missed.append(client)
        self.tour.hover_s[client] = time.monotonic() - start
        return ok

    def upload_frame(self, waypoints_reached_total: int = 0) -> bytes:
        """u_k for the station (UPDATE, this round): ``num_samples`` = CLUs that carried
        training, ``steps`` = their local steps, ``waypoints_reached`` = the UAV's count in
        this run (as a standard drone reports it), the tour's facts under ``express`` and its
        error, if any, as ``flight_error`` too."""
        tour = self.tour
        if tour is None:
            raise RuntimeError('no tour started')
        trained = [c for c in tour.exchanged if tour.clu_steps.get(c, 0) > 0]
        with np.errstate(over='ignore'):
            loss = float(np.mean(tour.losses)) if tour.losses else None
        if loss is not None and not math.isfinite(loss):
            loss = None          # finite losses whose sum overflows: the frame must encode
        metadata = {'num_samples': len(trained),
                    'steps': sum(tour.clu_steps.get(c, 0) for c in trained),
                    'train_loss': loss, 'waypoints_reached': waypoints_reached_total,
                    'samples_collected': 0, EXPRESS_KNOB: tour.to_metadata()}
        if tour.error:
            metadata[FLIGHT_ERROR_KEY] = short_flight_error(tour.error)
        if tour.run_id is not None:
            metadata[RUN_ID_KEY] = tour.run_id
        return self._auth.seal(encode_frame(FrameKind.UPDATE, tour.round_index, self.uav_id,
                                            self._fingerprint, self.running_sum, metadata))
