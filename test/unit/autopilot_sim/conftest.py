"""Fixtures for the autopilot simulator tests: a sim on free ports and pymavlink clients."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from fl_uav.autopilot_sim.autopilot import AutopilotSim, AutopilotSimThread
from fl_uav.autopilot_sim.config import AutopilotSimConfig

from .mav_client import MavClient


@pytest.fixture
def start_sim(port_base: int) -> Iterator[Callable[..., tuple[AutopilotSim, AutopilotSimThread]]]:
    """Start a sim on free ports (remote = port_base, bind = port_base + 1000); stops it after."""
    handles: list[AutopilotSimThread] = []

    def _start(**overrides) -> tuple[AutopilotSim, AutopilotSimThread]:
        settings = {'num_vehicles': 1, 'remote_base_port': port_base,
                    'bind_base_port': port_base + 1000, **overrides}
        sim = AutopilotSim(AutopilotSimConfig(**settings))
        handle = sim.run_in_thread()
        handles.append(handle)
        return sim, handle

    yield _start
    for handle in handles:
        handle.stop()


@pytest.fixture
def client_factory(port_base: int) -> Iterator[Callable[[int], MavClient]]:
    """Clients for vehicle ``i``: they listen where the sim sends (port_base + i)."""
    clients: list[MavClient] = []

    def _client(index: int = 0) -> MavClient:
        client = MavClient(port_base + index, port_base + 1000 + index)
        clients.append(client)
        return client

    yield _client
    for client in clients:
        client.close()


def _wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.01) -> bool:
    deadline_s = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline_s:
            return False
        time.sleep(poll_s)
    return True


@pytest.fixture
def wait_until() -> Callable[..., bool]:
    """``wait_until(predicate, timeout_s)``: poll until true; False after the time-out."""
    return _wait_until
