"""Fan-out of telemetry to async-iterator subscribers (shared by every Vehicle implementation)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


def put_latest(queue: asyncio.Queue, item: object) -> None:
    """Put without blocking; a slow consumer loses its oldest items, not the newest."""
    while True:
        try:
            queue.put_nowait(item)
            return
        except asyncio.QueueFull:
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()


async def subscribe(queues: set[asyncio.Queue], maxsize: int) -> AsyncIterator:
    """Yield what is put into a new queue registered in ``queues``; ``None`` ends the stream."""
    queue: asyncio.Queue = asyncio.Queue(maxsize=maxsize)
    queues.add(queue)
    try:
        while True:
            item = await queue.get()
            if item is None:
                return
            yield item
    finally:
        queues.discard(queue)
