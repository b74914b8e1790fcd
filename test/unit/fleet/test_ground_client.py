"""GroundClient timing, ROS-free, on a fake clock: training stops before the UAV's return
(pickup less ground_clients.pickup_margin_s) and when a newer delivery arrives (FedEx's
visit: the client hands over what it has trained so far)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fl_uav.configschema import build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.express_exchange import decode_clu, encode_delivery
from fl_uav.fleet.ground_client import GroundClient
from fl_uav.learning.models import build_model
from fl_uav.learning.training import STOP_DEADLINE, STOP_SUPERSEDED
from fl_uav.learning.weights import architecture_fingerprint, get_weights, weight_shapes
from fl_uav.world.landcover import CLASS_NAMES
from test.unit.fleet.test_express_fleet import EXPRESS

CONFIG: FleetConfig = build_config(FleetConfig, {
    **EXPRESS, 'ground_clients.max_local_steps': 50, 'ground_clients.pickup_margin_s': 2.0})
ASKED_STEPS = 40          # the delivery asks for more steps than the deadline leaves
UAV = 0
CLIENT = 0


class SteppingClock:
    """A fake clock: each reading returns ``now`` then advances it by ``tick_s`` (training
    asks it before every step after the first: one tick per step); ``at`` runs a callback
    the first time a reading reaches an instant (a message arriving mid-training)."""

    def __init__(self, tick_s: float = 1.0) -> None:
        self.now = 0.0
        self.tick_s = tick_s
        self._events: list[tuple[float, Callable[[], None]]] = []

    def at(self, instant_s: float, callback: Callable[[], None]) -> None:
        self._events.append((instant_s, callback))

    def __call__(self) -> float:
        value = self.now
        self.now += self.tick_s
        for event in [e for e in self._events if value >= e[0]]:
            self._events.remove(event)
            event[1]()
        return value


def _client(clock: SteppingClock) -> GroundClient:
    rng = np.random.default_rng(0)
    px = CONFIG.learning.input_px
    inputs = rng.normal(size=(24, 3, px, px)).astype(np.float32)
    labels = rng.integers(0, len(CLASS_NAMES), 24)
    return GroundClient(CONFIG, CLIENT, inputs, labels, clock=clock)


def _delivery(round_index: int) -> bytes:
    weights = get_weights(build_model(CONFIG.learning.model, len(CLASS_NAMES),
                                      CONFIG.learning.input_px, seed=round_index))
    return encode_delivery(UAV, round_index, CLIENT, architecture_fingerprint(weights),
                           weights, ASKED_STEPS)


def _visit(client: GroundClient, round_index: int, now_s: float) -> bytes | None:
    """The UAV hovers over the client and delivers; the client's CLU frame, if gated."""
    east, north, _ = client.position_enu_m
    client.on_uav_pose(UAV, east, north, 30.0, now_s)
    gated = client.gate(_delivery(round_index), now_s)
    return None if gated is None else client.exchange(*gated, now_s)


def _clu_steps(client: GroundClient, frame: bytes, round_index: int) -> int:
    weights = get_weights(build_model(CONFIG.learning.model, len(CLASS_NAMES),
                                      CONFIG.learning.input_px, seed=0))
    clu = decode_clu(frame, client._limits, architecture_fingerprint(weights),
                     weight_shapes(weights), UAV, round_index, CLIENT)
    return clu.steps


def test_first_training_has_no_deadline_and_a_retry_does_not_supersede_it():
    # Prepare: the first visit (no revisit interval measured yet), then the UAV's retry
    clock = SteppingClock()
    client = _client(clock)
    _visit(client, 1, 0.0)
    _visit(client, 1, 0.0)           # the same delivery again: the answer was lost
    # Execute
    steps = client.train()
    # Assert: all the steps asked, no stop; the retry was answered, not a new visit
    assert steps == ASKED_STEPS and client.training_stops == {}
    assert client.repeats == 1 and client.revisit_s is None


def test_training_stops_before_the_uav_returns_less_the_margin():
    # Prepare: visits at t = 0 and t = 10 s: the UAV comes back every 10 s
    clock = SteppingClock()
    client = _client(clock)
    _visit(client, 1, 0.0)
    client.train()
    clock.now = 10.0
    _visit(client, 2, 10.0)
    # Execute: each step takes 1 s on the fake clock
    steps = client.train()
    # Assert: no step starts at or after 10 + 10 - 2 = 18 s (steps start at 10, 11, ..., 17)
    assert client.revisit_s == pytest.approx(10.0)
    assert steps == 8 and client.training_stops == {STOP_DEADLINE: 1}
    # ... and the UAV's next visit collects those 8 steps at once
    clock.now = 20.0
    frame = _visit(client, 3, 20.0)
    assert frame is not None and _clu_steps(client, frame, 3) == 8


def test_a_newer_delivery_mid_training_stops_it_and_takes_the_steps_trained_so_far():
    # Prepare: revisit 10 s (deadline 18 s); the UAV is back at t = 13 s, early
    clock = SteppingClock()
    client = _client(clock)
    _visit(client, 1, 0.0)
    client.train()
    clock.now = 10.0
    _visit(client, 2, 10.0)          # revisit 10 s measured, deadline 18 s
    client.on_uav_pose(UAV, *client.position_enu_m[:2], 30.0, 13.0)
    gated = []
    clock.at(13.0, lambda: gated.append(client.gate(_delivery(3), 13.0)))   # mid-training
    # Execute
    steps = client.train()
    frame = client.exchange(*gated[0], 13.0)      # the worker serves the new visit next
    # Assert: steps start at 10..13; the one asked at 14 s sees the new delivery and stops,
    # so the round-3 visit gets those 4 steps (FedEx: the client uploads its current CLU)
    assert steps == 4 and client.training_stops == {STOP_SUPERSEDED: 1}
    assert _clu_steps(client, frame, 3) == 4
    assert client.report()['training_stops'] == {STOP_SUPERSEDED: 1}


def test_a_delivery_waiting_before_training_starts_means_no_step_and_a_zero_clu():
    # Prepare: the UAV came back (round 2 gated) before the worker started round 1's training
    clock = SteppingClock()
    client = _client(clock)
    _visit(client, 1, 0.0)
    client.on_uav_pose(UAV, *client.position_enu_m[:2], 30.0, 1.0)
    gated = client.gate(_delivery(2), 1.0)
    # Execute
    steps = client.train()
    frame = client.exchange(*gated, 1.0)
    # Assert: nothing trained, and the CLU says so
    assert steps == 0 and client.training_stops == {STOP_SUPERSEDED: 1}
    assert _clu_steps(client, frame, 2) == 0


@pytest.mark.parametrize('value', [-1.0, float('nan'), float('inf')])
def test_a_bad_pickup_margin_names_the_key(value):
    with pytest.raises(ValueError, match='pickup_margin_s'):
        build_config(FleetConfig, {**EXPRESS, 'ground_clients.pickup_margin_s': value})


def test_only_a_retry_of_the_visit_last_answered_is_a_repeat():
    # Prepare: round 1 answered
    client = _client(SteppingClock())
    _visit(client, 1, 0.0)
    client.on_uav_pose(UAV, *client.position_enu_m[:2], 30.0, 1.0)
    # Execute
    retry = client.gate(_delivery(1), 1.0)
    newer = client.gate(_delivery(2), 1.0)
    # Assert: the node answers the retry at once; the newer visit waits for the worker
    assert client.is_repeat(retry[0]) and not client.is_repeat(newer[0])


def test_the_warm_up_changes_neither_the_model_nor_the_fedex_state():
    # Prepare
    client = _client(SteppingClock())
    before = get_weights(client._model)
    # Execute
    client.warm_up()
    # Assert: the model the client trains is untouched, and there is nothing to train yet
    after = get_weights(client._model)
    assert all(np.array_equal(before[n], after[n]) for n in before)
    assert client.train() == 0 and client.training_stops == {}
