"""FedEx in the fleet, ROS-free: station tours, range-gated ground clients, UAV running sums."""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fl_uav.configschema import ConfigError, build_config
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.express_carrier import ExpressCarrier, ExpressTaskError
from fl_uav.fleet.express_exchange import encode_clu, encode_delivery
from fl_uav.fleet.express_routes import express_layout, plan_express_routes
from fl_uav.fleet.ground_client import GroundClient, client_dataset
from fl_uav.fleet.ground_station import GroundStation
from fl_uav.fleet.messages import EXPRESS_KNOB, RoundTask
from fl_uav.fleet.world_setup import map_labeler
from fl_uav.learning.weights import architecture_fingerprint
from fl_uav.planning.coverage import PlanWaypoint
from fl_uav.planning.geofence import Geofence
from fl_uav.vehicle.fake_vehicle import FakeVehicle
from fl_uav.vehicle.interface import VehicleError

EXPRESS = {
    'mode': 'express', 'num_drones': 2, 'express.num_uavs': 2,
    'ground_clients.num_clients': 4, 'ground_clients.samples_per_client': 24,
    'ground_clients.max_local_steps': 3, 'ground_clients.exchange_timeout_s': 1.0,
    'aggregation.strategy': 'fedex_sync', 'learning.model': 'tiny_cnn',
    'learning.optimizer': 'sgd', 'learning.lr': 0.05,
    'express.area_east_m': 200.0, 'express.area_north_m': 200.0, 'express.blocks_east': 2,
    'express.blocks_north': 2, 'express.altitude_m': 30.0, 'express.radio_range_m': 45.0,
    'express.speed_m_s': 10.0, 'express.hover_time_per_client_s': 2.0,
    'express.step_time_s': 10.0, 'express.gibbs_sweeps': 5, 'express.gibbs_chains': 2,
    'rounds.num_rounds': 2, 'rounds.eval_samples': 40, 'rounds.first_round_extra_s': 0.0,
    'autopilot.home_east_m': 585.0, 'autopilot.home_north_m': 600.0,
}
CONFIG: FleetConfig = build_config(FleetConfig, EXPRESS)


@pytest.fixture(scope='module')
def station():
    rng = np.random.default_rng(0)
    return lambda: GroundStation(CONFIG, rng.normal(size=(40, 3, 32, 32)).astype(np.float32),
                                 rng.integers(0, 7, 40))


@pytest.fixture(scope='module')
def clients():
    layout = express_layout(CONFIG)
    return lambda: [GroundClient(CONFIG, j, *client_dataset(CONFIG, j, tuple(layout
                                                                                .clients_enu_m[j])))
                    for j in range(4)]


class FakeLink:
    """Deliveries go straight to the clients; their CLUs come back in a queue."""

    def __init__(self, clients, uav, hover_over, now_s=100.0):
        self.clients, self.uav, self.hover_over, self.now_s = clients, uav, hover_over, now_s
        self.replies: list[bytes] = []
        self.extra: list[bytes] = []     # frames heard before the answer (noise)
        self.to_train: list = []

    def send(self, client, frame):
        c = self.clients[client]
        east, north, _ = c.position_enu_m if self.hover_over else (0.0, 0.0, 0.0)
        c.on_uav_pose(self.uav, east, north, 30.0, self.now_s)
        gated = c.gate(frame, self.now_s)
        self.replies += self.extra
        if gated is not None:
            self.replies.append(c.exchange(*gated, self.now_s))
            self.to_train.append(c)

    async def receive(self, timeout_s):
        return self.replies.pop(0) if self.replies else None

    def train_all(self):
        """The clients train after the UAV left (the node runs this off its message thread)."""
        for c in self.to_train:
            c.train()


def _fly(station_obj, clients, round_index, hover_over=True, extra=(), sums=None):
    opening = station_obj.open_round(0.0)
    for uav in range(2):
        agent = DroneAgent(CONFIG, uav, map_labeler(CONFIG.world, CONFIG.camera))
        task = agent.accept_global_frame(opening.frame)
        assert isinstance(task, RoundTask) and task.round_index == round_index
        carrier = ExpressCarrier(CONFIG, uav, {n: w.shape for n, w in task.weights.items()},
                                 architecture_fingerprint(task.weights))
        tour = carrier.start_tour(task)
        link = FakeLink(clients, uav, hover_over)
        link.extra = list(extra)
        for client in tour.clients:
            asyncio.run(carrier.visit(client, link))
        link.train_all()
        if sums is not None:
            sums.append(carrier.running_sum)
        verdict = station_obj.receive_update(carrier.upload_frame())
        assert verdict.accepted, verdict
    assert station_obj.should_close(0.0)
    return station_obj.close_round(1.0), opening


def test_tours_cover_every_client_once_and_stay_in_the_fence():
    routes = plan_express_routes(CONFIG)
    assert sorted(c for t in routes.plan.tours for c in t) == [0, 1, 2, 3]
    fence = CONFIG.geofence_enu()
    for uav in range(2):
        plan = routes.tour_plan(uav, 30.0)
        assert len(plan) == len(routes.tour(uav)) + 1
        assert (plan[-1].east_m, plan[-1].north_m) == CONFIG.autopilot.home_enu_m(0)
        assert all(fence.east_min_m <= w.east_m <= fence.east_max_m for w in plan)
    assert routes.local_steps == {0: 3, 1: 3}   # ceil(Delta / 10 s) slots, capped at 3



@pytest.mark.parametrize('mode', ['sync', 'async'])
def test_clients_are_asked_for_one_step_per_slot_of_the_revisit_period(mode):
    # Arrange: no cap, so the station's step count is the slot rule itself (FedEx Sec. IV-A)
    config = build_config(FleetConfig, {**EXPRESS, 'express.mode': mode,
                                        'aggregation.strategy': f'fedex_{mode}',
                                        'ground_clients.max_local_steps': 100_000})
    # Act
    routes = plan_express_routes(config)
    # Assert: whole slots of eq. (9)'s tour time (Sync: of the longest tour), ceil not floor
    slot = config.express.step_time_s
    rtt = {k: routes.plan.round_trip_s[k] for k in routes.period_s}
    want = {k: math.ceil(r / slot - 1e-9) for k, r in rtt.items()}
    if mode == 'sync':
        want = dict.fromkeys(want, max(want.values()))
    assert routes.local_steps == want
    assert routes.period_s == {k: n * slot for k, n in want.items()}
    assert any(r % slot > 1e-6 for r in rtt.values())   # a fraction to round, or it proves nothing

def test_sync_rounds_lag_one_round_then_apply_the_running_sums_once(station, clients):
    gs, cs = station(), clients()
    first, opening = _fly(gs, cs, 1)
    knobs = opening.plans
    assert all(len(knobs[u]) == len(gs.express.tour(u)) + 1 for u in range(2))
    # FedEx's one-round lag: round 1 only delivers (u_k = 0, no steps), the model does not
    # move; both u_k are still applied, so both UAVs took part, as the strategy counts them
    assert first.participants == [0, 1] == list(first.samples)
    assert first.aggregation['participants'] == len(first.participants)
    assert all(n == 0 for n in first.samples.values()) and first.model_change_l2 == 0.0
    assert sorted(
        c for facts in first.express.values() for c in facts['exchanged']) == [0, 1, 2, 3]
    before = {n: w.copy() for n, w in gs.weights.items()}
    sums = []
    second, _ = _fly(gs, cs, 2, sums=sums)
    assert second.participants == [0, 1] and second.aggregation['participants'] == 2
    # eq. (13): x <- x + (1/N) sum_k u_k, u_k = sum of its clients' CLUs, applied once
    for n in before:
        np.testing.assert_allclose(gs.weights[n], before[n] + (sums[0][n] + sums[1][n]) / 4,
                                   rtol=1e-5, atol=1e-7)
    for c in cs:
        rec = [r for r in c.exchanges if r.accepted]
        assert [r.round_index for r in rec] == [1, 2]
        assert rec[1].clu_steps == 3
    assert gs._strategy.applied == 2
    assert sum(float(np.abs(gs.weights[n] - before[n]).sum()) for n in before) > 0


def test_clu_sum_is_the_sum_of_client_deltas(clients):
    cs = clients()
    routes = plan_express_routes(CONFIG)
    uav, tour = 0, routes.tour(0)
    rng = np.random.default_rng(1)
    shapes = {n: s for n, s in cs[0]._shapes.items()}
    fp = cs[0]._fingerprint
    carrier = ExpressCarrier(CONFIG, uav, shapes, fp)
    weights = {n: rng.normal(size=s).astype(np.float32) for n, s in shapes.items()}
    plan = routes.tour_plan(uav, 30.0)
    carrier.start_tour(RoundTask(3, weights, tuple(plan), {EXPRESS_KNOB: {
        'clients': list(tour), 'local_steps': 2}}))
    deltas = []
    for c in tour:
        delta = {n: rng.normal(size=s).astype(np.float32) for n, s in shapes.items()}
        deltas.append(delta)
        frame = encode_clu(c, uav, 3, fp, delta, {'steps': 2, 'num_samples': 5,
                                                 'train_loss': 1.0, 'distance_m': 30.0})
        assert carrier.accept_clu(frame, c)
    for n in shapes:
        np.testing.assert_allclose(carrier.running_sum[n], sum(d[n] for d in deltas),
                                   rtol=1e-6)


def _zero_model(client):
    """The client's architecture fingerprint and an all-zero model of its shapes."""
    return client._fingerprint, {n: np.zeros(s, np.float32) for n, s in client._shapes.items()}


def test_out_of_range_or_unknown_pose_is_refused_and_counted(clients):
    cs = clients()
    c = cs[0]
    fp, weights = _zero_model(c)
    frame = encode_delivery(1, 1, 0, fp, weights, 2)
    assert c.gate(frame, 10.0) is None                       # no pose of UAV 1 yet
    east, north, _ = c.position_enu_m
    c.on_uav_pose(1, east + 40.0, north, 30.0, 10.0)          # 50 m away > 45 m range
    assert c.gate(frame, 10.0) is None
    c.on_uav_pose(1, east, north, 30.0, 10.0)
    assert c.gate(frame, 10.0 + CONFIG.ground_clients.pose_max_age_s + 0.1) is None  # stale
    gated = c.gate(frame, 10.2)
    assert gated is not None and gated[1] == pytest.approx(30.0)
    assert c.refused == {'no_pose': 2, 'out_of_range': 1}
    assert [r.reason for r in c.exchanges] == ['no_pose', 'out_of_range', 'no_pose']


def test_a_non_finite_uav_pose_is_counted_and_the_last_good_one_kept(clients):
    # Prepare: UAV 1 hovers over client 0, then its pose topic turns to NaN / inf
    c = clients()[0]
    fp, weights = _zero_model(c)
    east, north, _ = c.position_enu_m
    c.on_uav_pose(1, east, north, 30.0, 10.0)
    # Execute
    for bad in ((math.nan, north, 30.0), (east, math.inf, 30.0), (east, north, -math.inf)):
        c.on_uav_pose(1, *bad, 10.1)
    gated = c.gate(encode_delivery(1, 1, 0, fp, weights, 2), 10.2)
    # Assert: counted (and in the client's log), the range still judged on the good pose
    assert c.poses_rejected == {'non_finite': 3}
    assert c.report()['poses_rejected'] == {'non_finite': 3}
    assert gated is not None and gated[1] == pytest.approx(30.0)


def test_bad_frames_are_rejected_by_reason_never_raise(clients):
    cs = clients()
    c = cs[1]
    fp, weights = _zero_model(c)
    good = encode_delivery(0, 1, 1, fp, weights, 2)
    c.on_uav_pose(0, *c.position_enu_m[:2], 30.0, 5.0)
    assert c.gate(b'garbage', 5.0) is None
    assert c.gate(good[:-3], 5.0) is None
    assert c.gate(encode_delivery(0, 1, 2, fp, weights, 2), 5.0) is None   # for client 2
    assert c.gate(encode_delivery(7, 1, 1, fp, weights, 2), 5.0) is None   # no UAV 7
    assert c.gate(encode_delivery(0, 1, 1, fp, weights, 0), 5.0) is None   # 0 steps
    assert dict(c.rejected) == {'bad_magic': 1, 'truncated': 1, 'wrong_client': 1,
                                'unknown_sender': 1, 'metadata': 1}
    assert c.gate(good, 5.0) is not None
    carrier = ExpressCarrier(CONFIG, 0, c._shapes, fp)
    routes = plan_express_routes(CONFIG)
    carrier.start_tour(RoundTask(1, weights, tuple(routes.tour_plan(0, 30.0)), {
        EXPRESS_KNOB: {'clients': list(routes.tour(0)), 'local_steps': 2}}))
    wrong_uav = encode_clu(1, 1, 1, fp, weights, {'steps': 0, 'num_samples': 0,
                                                  'train_loss': None, 'distance_m': 1.0})
    assert not carrier.accept_clu(b'\x00' * 10, 1)
    assert not carrier.accept_clu(wrong_uav, 1)
    assert dict(carrier.rejected) == {'bad_magic': 1, 'wrong_uav': 1}


def test_noise_before_the_answer_is_skipped(station, clients):
    gs, cs = station(), clients()
    record, _ = _fly(gs, cs, 1, extra=[b'noise'])
    assert sorted(c for f in record.express.values() for c in f['exchanged']) == [0, 1, 2, 3]


def test_a_uav_out_of_range_collects_nothing(station, clients):
    gs, cs = station(), clients()
    record, _ = _fly(gs, cs, 1, hover_over=False)
    assert all(f['exchanged'] == [] and sorted(f['missed']) == sorted(f['clients'])
               for f in record.express.values())
    # every delivery attempt was refused: 4 clients x ground_clients.delivery_attempts
    attempts = CONFIG.ground_clients.delivery_attempts
    assert sum(c.refused['out_of_range'] for c in cs) == 4 * attempts


@pytest.mark.parametrize('key, value, words', [
    ('mode', 'turbo', 'choices: standard, express'),
    ('express.mode', 'async', 'must be fedex_async'),
    ('express.num_uavs', 3, 'must equal num_drones'),
    ('aggregation.strategy', 'fedavg', 'fedex_sync'),
    ('ground_clients.range_pose', 'gps', 'choices: ground_truth, telemetry'),
    ('express.altitude_m', 4.0, 'altitude band'),
    ('express.area_east_m', 5000.0, 'leaves the geofence'),
    ('express.station_east_m', 10.0, 'station'),
    ('trajectory.planner', '2ceoafl', 'must be coverage with mode express'),
])
def test_bad_express_config_names_the_key(key, value, words):
    with pytest.raises(ConfigError, match=words):
        build_config(FleetConfig, {**EXPRESS, key: value})


def test_express_enabled_is_not_the_fleet_switch():
    with pytest.raises(ConfigError, match='set mode: express'):
        build_config(FleetConfig, {'express.enabled': True})


# --- the UAV's tour through DronePilot (FakeVehicle: its position is the ground truth) ------

class TruthLink:
    """The clients hear the UAV at the fake vehicle's true position when a frame is sent."""

    def __init__(self, clients, uav, vehicle):
        self.clients, self.uav, self.vehicle = clients, uav, vehicle
        self.replies: list[bytes] = []
        self.sent_at: dict[int, tuple[float, float, float]] = {}

    def send(self, client, frame):
        east, north, up = self.vehicle.position_enu_m
        self.sent_at[client] = (east, north, up)
        c = self.clients[client]
        c.on_uav_pose(self.uav, east, north, up, 0.0)
        gated = c.gate(frame, 0.0)
        if gated is not None:
            self.replies.append(c.exchange(*gated, 0.0))

    async def receive(self, timeout_s):
        return self.replies.pop(0) if self.replies else None


def _tour(clients, fence=None, fail_on=None):
    gs = GroundStation(CONFIG, np.zeros((10, 3, 32, 32), np.float32), np.zeros(10, np.int64))
    opening = gs.open_round(0.0)
    agent = DroneAgent(CONFIG, 0, map_labeler(CONFIG.world, CONFIG.camera))
    task = agent.accept_global_frame(opening.frame)
    carrier = ExpressCarrier(CONFIG, 0, agent.shapes, agent.fingerprint)
    vehicle = FakeVehicle(home_enu_m=(*CONFIG.autopilot.home_enu_m(0), 0.0),
                          fail_on=fail_on)
    link = TruthLink(clients, 0, vehicle)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pilot = DronePilot(agent, vehicle, CONFIG.flight, pool,
                           geofence=fence or CONFIG.geofence_enu())
        frame = asyncio.run(pilot.run_express_tour(task, carrier, link, 10.0))
    return gs, pilot, vehicle, carrier, link, frame


def test_the_tour_is_flown_leg_by_leg_and_each_exchange_happens_overhead(clients):
    cs = clients()
    gs, pilot, vehicle, carrier, link, frame = _tour(cs)
    tour = gs.express.tour(0)
    legs = [call[1] for call in vehicle.calls if call[0] == 'fly_waypoints']
    assert [len(leg) for leg in legs] == [1] * (len(tour) + 1)     # one mission per leg
    for client in tour:
        east, north, _ = cs[client].position_enu_m
        assert link.sent_at[client][:2] == pytest.approx((east, north), abs=1e-6)
    assert carrier.tour.exchanged == list(tour) and carrier.tour.missed == []
    assert carrier.tour.waypoints_reached == len(tour) + 1
    assert gs.receive_update(frame).accepted


def test_a_tour_outside_the_geofence_is_not_flown_and_uploads_an_empty_sum(clients):
    cs = clients()
    tiny = Geofence(570.0, 590.0, 600.0, 610.0, min_up_m=5.0, max_up_m=120.0)
    gs, pilot, vehicle, carrier, link, frame = _tour(cs, fence=tiny)
    assert not any(call[0] in ('arm', 'fly_waypoints') for call in vehicle.calls)
    assert pilot.plans_rejected['outside_fence'] == 1
    assert carrier.tour.exchanged == [] and carrier.tour.missed == list(gs.express.tour(0))
    assert 'plan rejected' in carrier.tour.error
    assert all(not np.any(v) for v in carrier.running_sum.values())
    assert gs.receive_update(frame).accepted


def test_a_vehicle_failure_ends_the_tour_but_the_upload_still_goes(clients):
    cs = clients()
    gs, pilot, vehicle, carrier, link, frame = _tour(
        cs, fail_on={'fly_waypoints': VehicleError('mission upload refused')})
    assert carrier.tour.error == 'mission upload refused'
    assert carrier.tour.missed == list(gs.express.tour(0))
    assert gs.receive_update(frame).accepted


# --- FedEx-Async in the fleet: a round per landing, only the landed UAVs depart ----------------

ASYNC = build_config(FleetConfig, {**EXPRESS, 'express.mode': 'async', 'rounds.num_rounds': 4,
                                   'aggregation.strategy': 'fedex_async'})


def _tour_of(station_obj, opening, uav, clients, sums=None):
    """UAV ``uav`` flies the tour of ``opening`` (if it departs in it) and returns u_k's frame."""
    agent = DroneAgent(ASYNC, uav, map_labeler(ASYNC.world, ASYNC.camera))
    task = agent.accept_global_frame(opening.frame)
    if EXPRESS_KNOB not in task.knobs:
        return None
    carrier = ExpressCarrier(ASYNC, uav, agent.shapes, agent.fingerprint)
    link = FakeLink(clients, uav, True)
    for client in carrier.start_tour(task).clients:
        asyncio.run(carrier.visit(client, link))
    link.train_all()
    if sums is not None:
        sums[uav] = carrier.running_sum
    return carrier.upload_frame()


def test_async_applies_each_landing_to_the_current_model_and_redeparts_only_it():
    rng = np.random.default_rng(0)
    gs = GroundStation(ASYNC, rng.normal(size=(40, 3, 32, 32)).astype(np.float32),
                       rng.integers(0, 7, 40))
    layout = express_layout(ASYNC)
    cs = [GroundClient(ASYNC, j, *client_dataset(ASYNC, j, tuple(layout.clients_enu_m[j])))
          for j in range(4)]
    first = gs.open_round(0.0)
    frames = {k: _tour_of(gs, first, k, cs) for k in range(2)}   # both depart in round 1
    assert all(frames.values())
    # UAV 0 lands first: round 1 closes on it alone (u_0 = 0: FedEx's lag), it departs again
    assert not gs.should_close(0.0) and gs.receive_update(frames[0]).accepted
    assert gs.should_close(0.0)
    record = gs.close_round(1.0)
    assert list(record.express) == [0] and record.model_change_l2 == 0.0
    assert record.participants == [0] and record.aggregation['participants'] == 1
    second = gs.open_round(1.0)
    assert set(second.plans) == {0}
    assert _tour_of(gs, second, 1, cs) is None            # UAV 1 is still out on its tour
    sums = {}
    frame_0 = _tour_of(gs, second, 0, cs, sums)
    # UAV 1 lands with its round-1 tour (a stale base is expected in Async), then UAV 0 again
    assert gs.receive_update(frames[1]).accepted
    assert gs.receive_update(frames[1]).reason == 'replay'     # the same frame again
    gs.close_round(2.0)
    third = gs.open_round(2.0)
    assert set(third.plans) == {1}
    before = {n: w.copy() for n, w in gs.weights.items()}
    assert gs.receive_update(frames[0]).reason == 'replay'   # round 1's tour, again
    assert gs.receive_update(frame_0).accepted
    record = gs.close_round(3.0)
    # eq. (14): x <- x + (1/N) u_0 on the current model; UAV 0's CLUs were trained
    for n in before:
        np.testing.assert_allclose(gs.weights[n], before[n] + sums[0][n] / 4, rtol=1e-5,
                                   atol=1e-7)
    assert record.participants == [0] and record.model_change_l2 > 0
    assert record.aggregation['max_lag'] == 1     # UAV 0's u_k: from round 2, applied in 3


class LossyLink(FakeLink):
    """The first delivery to each client is lost on the way; later attempts arrive."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lost: set[int] = set()

    def send(self, client, frame):
        if client not in self.lost:
            self.lost.add(client)
            return
        super().send(client, frame)


def test_a_lost_delivery_is_sent_again_and_a_repeat_gets_the_same_answer(clients):
    cs = clients()
    gs = GroundStation(CONFIG, np.zeros((10, 3, 32, 32), np.float32), np.zeros(10, np.int64))
    opening = gs.open_round(0.0)
    agent = DroneAgent(CONFIG, 0, map_labeler(CONFIG.world, CONFIG.camera))
    task = agent.accept_global_frame(opening.frame)
    carrier = ExpressCarrier(CONFIG, 0, agent.shapes, agent.fingerprint)
    link = LossyLink(cs, 0, True)
    tour = carrier.start_tour(task)
    assert all(asyncio.run(carrier.visit(c, link)) for c in tour.clients)
    assert tour.exchanged == list(tour.clients)
    # A client that answered but was asked again (its answer was lost) answers the same
    c = cs[tour.clients[0]]
    c.on_uav_pose(0, *c.position_enu_m[:2], 30.0, 0.0)
    gated = c.gate(carrier.delivery_frame(c.client_id), 0.0)
    first = [r for r in c.exchanges if r.accepted]
    again = c.exchange(*gated, 0.0)
    assert c.repeats == 1 and [r for r in c.exchanges if r.accepted] == first
    assert carrier.accept_clu(again, c.client_id)     # the same CLU (zero: nothing trained)


# --- malformed express knobs and deliveries --------------------------------------------------

@pytest.mark.parametrize('knob', [
    {'clients': [0, 99], 'local_steps': 2},        # no client 99 (4 ground clients)
    {'clients': [-1], 'local_steps': 2},
    {'clients': [1, 1], 'local_steps': 2},         # visited twice: its CLU summed twice
    {'clients': '01', 'local_steps': 2},           # a string, not a list of ids
    {'clients': [0], 'local_steps': 10 ** 6},      # beyond ground_clients.max_local_steps
    {'clients': [0.5], 'local_steps': 2},
])
def test_a_tour_knob_naming_unknown_or_repeated_clients_is_refused_before_flying(clients, knob):
    # Arrange: as many waypoints as the knob's clients and the station, all in the fence
    cs = clients()
    fp, weights = _zero_model(cs[0])
    carrier = ExpressCarrier(CONFIG, 0, cs[0]._shapes, fp)
    count = len(knob['clients']) + 1
    plan = tuple(PlanWaypoint(585.0, 600.0, 30.0) for _ in range(count))
    # Act / Assert
    with pytest.raises(ExpressTaskError):
        carrier.start_tour(RoundTask(1, weights, plan, {EXPRESS_KNOB: knob}))


def test_a_delivery_asking_more_steps_than_the_client_trains_is_rejected(clients):
    # Arrange: a UAV in range asks for far more than ground_clients.max_local_steps (3)
    c = clients()[2]
    fp, weights = _zero_model(c)
    c.on_uav_pose(0, *c.position_enu_m[:2], 30.0, 5.0)
    # Act / Assert: rejected by reason, never trained (a client busy for ever serves no one)
    assert c.gate(encode_delivery(0, 1, 2, fp, weights, 10 ** 9), 5.0) is None
    assert dict(c.rejected) == {'metadata': 1}
    assert c.gate(encode_delivery(0, 1, 2, fp, weights, 3), 5.0) is not None


def _tour_over_two_clients(cs):
    """(fingerprint, zero model, a carrier on a tour over clients 0 and 1, 2 steps each)."""
    fp, weights = _zero_model(cs[0])
    carrier = ExpressCarrier(CONFIG, 0, cs[0]._shapes, fp)
    carrier.start_tour(RoundTask(1, weights, tuple(PlanWaypoint(585.0, 600.0, 30.0)
                                                   for _ in range(3)),
                                 {EXPRESS_KNOB: {'clients': [0, 1], 'local_steps': 2}}))
    return fp, weights, carrier


@pytest.mark.parametrize('bad', [
    {'train_loss': 10 ** 400},                 # JSON ints beyond a float
    {'distance_m': 10 ** 400},
    {'steps': 10 ** 6},                        # more than any client trains per visit
])
def test_a_bad_clu_is_rejected_and_the_other_clients_still_reach_the_station(clients, bad):
    # Arrange: a tour over two clients; the first answers with a malformed CLU
    fp, weights, carrier = _tour_over_two_clients(clients())
    good = {'steps': 2, 'num_samples': 24, 'train_loss': 0.5, 'distance_m': 30.0}
    ones = {n: np.ones_like(w) for n, w in weights.items()}
    # Act
    first = carrier.accept_clu(encode_clu(0, 0, 1, fp, ones, {**good, **bad}), 0)
    second = carrier.accept_clu(encode_clu(1, 0, 1, fp, ones, good), 1)
    # Assert: the bad one counted and skipped, the good one summed and uploaded
    assert not first and second and dict(carrier.rejected) == {'metadata': 1}
    assert all(np.all(v == 1.0) for v in carrier.running_sum.values())
    assert carrier.upload_frame()


def test_losses_whose_mean_overflows_upload_without_a_loss(clients):
    # Arrange: two finite CLU losses whose sum is beyond a float
    fp, weights, carrier = _tour_over_two_clients(clients())
    meta = {'steps': 2, 'num_samples': 24, 'train_loss': 1e308, 'distance_m': 30.0}
    for c in (0, 1):
        assert carrier.accept_clu(encode_clu(c, 0, 1, fp, weights, meta), c)
    # Act / Assert: the upload is still made (an unencodable frame would lose u_k)
    gs = GroundStation(CONFIG, np.zeros((10, 3, 32, 32), np.float32), np.zeros(10, np.int64))
    gs.open_round(0.0)
    assert gs.receive_update(carrier.upload_frame()).accepted


def test_a_replayed_delivery_of_an_earlier_round_or_run_is_refused(clients):
    # Arrange: client 3 heard UAV 0's round-2 delivery of run B (started at t = 2000 ms)
    c = clients()[3]
    fp, weights = _zero_model(c)
    c.on_uav_pose(0, *c.position_enu_m[:2], 30.0, 5.0)
    run_a, run_b, run_c = 'a' * 16, 'b' * 16, 'c' * 16

    def delivery(round_index, run_id, started_ms):
        return encode_delivery(0, round_index, 3, fp, weights, 2, run_id=run_id,
                               run_started_ms=started_ms)

    first = c.gate(delivery(2, run_b, 2000), 5.0)
    c.exchange(*first, 5.0)
    # Act
    retry = c.gate(delivery(2, run_b, 2000), 5.0)            # the UAV did not hear the CLU
    earlier_round = c.gate(delivery(1, run_b, 2000), 5.0)    # a recording of round 1
    earlier_run = c.gate(delivery(2, run_a, 1000), 5.0)      # a recording of run A
    later_run = c.gate(delivery(1, run_c, 3000), 5.0)        # the station restarted
    # Assert
    assert first[0].run_id == run_b and first[0].run_started_ms == 2000
    assert retry is not None and earlier_round is None and earlier_run is None
    assert later_run is not None
    assert dict(c.rejected) == {'stale_round': 1, 'old_run': 1}


def test_a_client_takes_rounds_beyond_its_own_configured_run_length(clients):
    # Arrange: the client's config says 2 rounds; the station runs longer
    c = clients()[2]
    fp, weights = _zero_model(c)
    c.on_uav_pose(0, *c.position_enu_m[:2], 30.0, 5.0)
    # Act / Assert
    assert c.gate(encode_delivery(0, CONFIG.rounds.num_rounds + 5, 2, fp, weights, 2),
                  5.0) is not None
