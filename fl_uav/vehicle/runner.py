"""An asyncio event loop in a daemon thread, for synchronous callers of async vehicles.

An rclpy node (or any synchronous code) builds a :class:`VehicleRunner`, submits coroutines with
:meth:`VehicleRunner.submit` (getting a :class:`concurrent.futures.Future`) and calls
:meth:`VehicleRunner.stop` on shutdown. Every coroutine of one vehicle must run on the same
runner, because MAVSDK subscriptions deliver to the loop that created them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar('T')

# Worker threads of the default executor given to a vehicle loop (threads start lazily). MAVSDK's
# asyncio wrapper runs every blocking call there; the stock default (min(32, cores + 4)) makes
# several vehicles queue behind each other's slow calls (time-outs, mission transfers).
EXECUTOR_WORKERS = 64
_loops_with_executor: weakref.WeakSet = weakref.WeakSet()


def ensure_executor(loop: asyncio.AbstractEventLoop, workers: int = EXECUTOR_WORKERS) -> None:
    """Give ``loop`` a default executor of ``workers`` threads, once per loop."""
    if loop in _loops_with_executor:
        return
    loop.set_default_executor(ThreadPoolExecutor(max_workers=workers,
                                                 thread_name_prefix='vehicle-call'))
    _loops_with_executor.add(loop)


class VehicleRunner:
    """Owns an event loop running in a daemon thread until :meth:`stop`."""

    def __init__(self, name: str = 'vehicle-loop', executor_workers: int = EXECUTOR_WORKERS,
                 start_timeout_s: float = 5.0) -> None:
        self.loop = asyncio.new_event_loop()
        ensure_executor(self.loop, executor_workers)
        self._started = threading.Event()
        self._stopped = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        if not self._started.wait(start_timeout_s):
            raise RuntimeError(f'{name}: event loop did not start within {start_timeout_s} s')

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def running(self) -> bool:
        """True until :meth:`stop` was called."""
        return not self._stopped and self._thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the future resolves with its result or exception."""
        with self._lock:
            if not self.running:
                coro.close()
                raise RuntimeError('VehicleRunner is stopped')
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Submit ``coro`` and block until it finishes (or ``timeout_s`` passes)."""
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel every task, shut the loop's executor down and join the thread (idempotent)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if not self._thread.is_alive():
            return
        try:
            future = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                future.result(timeout_s)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout_s)

    async def _shutdown(self) -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.loop.shutdown_asyncgens()
        await self.loop.shutdown_default_executor()

    def __enter__(self) -> VehicleRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
