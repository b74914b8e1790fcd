"""VehicleRunner: an event loop in a daemon thread for synchronous callers."""

import asyncio
import concurrent.futures
import threading

import pytest

from fl_uav.vehicle.runner import VehicleRunner


async def _where() -> str:
    await asyncio.sleep(0)
    return threading.current_thread().name


async def _fail() -> None:
    raise KeyError('boom')


def test_submit_runs_on_the_runner_thread_and_returns_a_future():
    with VehicleRunner(name='test-loop') as runner:
        future = runner.submit(_where())
        assert isinstance(future, concurrent.futures.Future)
        assert future.result(5.0) == 'test-loop'
        assert runner.run(_where(), timeout_s=5.0) == 'test-loop'


def test_exceptions_reach_the_caller():
    with VehicleRunner() as runner, pytest.raises(KeyError, match='boom'):
        runner.submit(_fail()).result(5.0)


def test_stop_cancels_pending_work_and_is_idempotent():
    # Prepare
    runner = VehicleRunner()
    started = threading.Event()

    async def forever():
        started.set()
        await asyncio.Event().wait()

    pending = runner.submit(forever())
    assert started.wait(5.0)
    # Execute
    runner.stop()
    runner.stop()
    # Assert
    assert pending.cancelled()
    assert not runner.running
    coro = _where()
    with pytest.raises(RuntimeError, match='stopped'):
        runner.submit(coro)


def test_blocking_calls_get_a_large_default_executor():
    with VehicleRunner() as runner:
        async def run_in_executor_concurrently() -> int:
            barrier = threading.Barrier(20, timeout=5.0)
            loop = asyncio.get_running_loop()
            results = await asyncio.gather(*(loop.run_in_executor(None, barrier.wait)
                                             for _ in range(20)))
            return len(results)

        # 20 calls blocking until all 20 run at once: needs more than the stock 6 workers.
        assert runner.run(run_in_executor_concurrently(), timeout_s=10.0) == 20
