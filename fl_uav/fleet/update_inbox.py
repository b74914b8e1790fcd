"""Update frames on their way from the station's executor to its state, in arrival order.

The ground station node's worker thread holds the station's lock while it closes a round
(aggregation and evaluation: seconds). An update subscription callback that waited for that
lock would block the executor, and with it the station's heartbeat (fl_uav/fleet/
station_heartbeat.py), until the close ended. The callback hands the frame to an
:class:`UpdateInbox` instead and returns; whoever holds the lock next (the callback itself when
the lock is free, the worker right after the close, the node's tick) takes the frames out in
the order they arrived and gives them to :meth:`GroundStation.receive_update`, which checks and
counts each as before. Bounded in frames and in bytes: a flood while the worker aggregates
cannot fill the memory (a frame may be as large as codec.max_frame_bytes, 64 MiB, before the
decoder refuses it); frames beyond either bound are refused, counted by the reason
:data:`INBOX_FULL` (in the round's and the run's rejected counters) and logged. ROS-free: the
node only puts and takes.
"""

from __future__ import annotations

import threading
from collections import deque

#: Frames the inbox holds per drone of the fleet: an update, LGC's layer frames (one per
#: layer sent) and resends, all arriving while one round closes, fit with room to spare.
UPDATE_INBOX_FRAMES_PER_DRONE = 64
#: Bytes the inbox holds per drone, in dense updates of the station's model (float32 values
#: and a header): an update and resends of it; a compressed one is smaller.
UPDATE_INBOX_DENSE_UPDATES_PER_DRONE = 4
#: A dense update's frame beyond its values: header, metadata, signature (generous).
UPDATE_FRAME_OVERHEAD_BYTES = 64 * 1024
#: The rejection reason of a frame the full inbox refused.
INBOX_FULL = 'inbox_full'


def inbox_capacity_frames(num_drones: int) -> int:
    """How many frames the station's inbox holds for a fleet of ``num_drones``."""
    return UPDATE_INBOX_FRAMES_PER_DRONE * num_drones


def inbox_capacity_bytes(num_drones: int, model_values: int) -> int:
    """How many bytes of frames the inbox holds for ``num_drones`` drones of a model of
    ``model_values`` parameters."""
    dense_frame_bytes = 4 * model_values + UPDATE_FRAME_OVERHEAD_BYTES
    return UPDATE_INBOX_DENSE_UPDATES_PER_DRONE * dense_frame_bytes * num_drones


class UpdateInbox:
    """A bounded, thread-safe FIFO of update frames, and how many it refused when full
    (``capacity_bytes`` None: bounded in frames only)."""

    def __init__(self, capacity_frames: int, capacity_bytes: int | None = None) -> None:
        if capacity_frames < 1:
            raise ValueError(f'an update inbox holds at least 1 frame, got {capacity_frames}')
        if capacity_bytes is not None and capacity_bytes < 1:
            raise ValueError(f'an update inbox holds at least 1 byte, got {capacity_bytes}')
        self.capacity_frames = capacity_frames
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._frames: deque[bytes] = deque()
        self._bytes = 0
        self._refused = 0

    def put(self, frame: bytes) -> bool:
        """Queue ``frame``; False (and counted as refused) if the inbox is full: in frames,
        or in bytes with it."""
        with self._lock:
            over_bytes = (self.capacity_bytes is not None
                          and self._bytes + len(frame) > self.capacity_bytes)
            if len(self._frames) >= self.capacity_frames or over_bytes:
                self._refused += 1
                return False
            self._frames.append(frame)
            self._bytes += len(frame)
            return True

    @property
    def held_bytes(self) -> int:
        """Bytes of the frames waiting."""
        return self._bytes

    def take_all(self) -> tuple[list[bytes], int]:
        """The queued frames in arrival order, and the frames refused since the last take;
        the inbox is empty afterwards."""
        with self._lock:
            frames, refused = list(self._frames), self._refused
            self._frames.clear()
            self._bytes = self._refused = 0
            return frames, refused

    def __len__(self) -> int:
        with self._lock:
            return len(self._frames)
