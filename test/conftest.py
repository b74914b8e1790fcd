"""Shared fixtures: a private ROS domain per test session, free ports, tiny fleet configs."""

from __future__ import annotations

import os
import random
import socket

import pytest

# One DDS domain per pytest process, localhost only, so parallel runs never see each other.
os.environ.setdefault('ROS_DOMAIN_ID', str(random.Random(os.getpid()).randint(110, 200)))
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ.pop('ROS_STATIC_PEERS', None)


def free_udp_port_block(count: int) -> int:
    """A base port such that base..base+count-1 and base+1000.. are free UDP ports now."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randint(20000, 40000)
        sockets = []
        try:
            for port in [*range(base, base + count), *range(base + 1000, base + 1000 + count)]:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sockets.append(s)
                s.bind(('127.0.0.1', port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError('no free UDP port block found')


@pytest.fixture
def port_base() -> int:
    """Free MAVLink ports for drones 0..3 (and the simulator's bind ports at +1000)."""
    return free_udp_port_block(4)


def tiny_fleet_overrides(num_drones: int, port_base: int) -> dict:
    """A fleet that runs in seconds: tiny model, small world, short rounds."""
    return {
        'num_drones': num_drones,
        'learning.model': 'tiny_cnn',
        'learning.local_epochs': 1,
        'rounds.eval_samples': 200,
        'flight.port_base': port_base,
        'autopilot.remote_base_port': port_base,
        'autopilot.bind_base_port': port_base + 1000,
    }
