"""drone node over real rclpy/DDS and real MAVLink: an autopilot that comes up late, Ctrl-C in
flight, rounds from a restarted or forged station, and bad node parameters."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
import rasterio
import rclpy
from affine import Affine
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import Image
from std_msgs.msg import UInt8MultiArray

import fl_uav.ros.drone_node as drone_node_module
from fl_uav.autopilot_sim.autopilot import AutopilotSim
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.compression.codec import GROUND_STATION_ID, FrameKind, decode_frame, encode_frame
from fl_uav.configschema import ConfigError
from fl_uav.fleet.config import SecurityConfig
from fl_uav.fleet.heartbeat_auth import HeartbeatSigner, heartbeat_signer
from fl_uav.fleet.keys import generate_fleet_keys, load_frame_auth
from fl_uav.fleet.station_heartbeat import PhaseClock, StationPhase
from fl_uav.fleet_run.launch_plan import write_params_file
from fl_uav.learning.models import build_model
from fl_uav.learning.weights import architecture_fingerprint, get_weights
from fl_uav.ros import names
from fl_uav.ros.autopilot_sim_node import AutopilotSimNode
from fl_uav.ros.conversions import heartbeat_to_msg, rgb_to_image
from fl_uav.ros.drone_node import DroneNode
from fl_uav.ros.ground_station_node import GroundStationNode
from test.conftest import BIND_PORT_OFFSET, tiny_fleet_overrides
from test.ros.rosutil import drone_under_test, frame_msg, node_with_probe, spin_until

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]
HOME = (585.0, 600.0)
RUN_ROUNDS = 10


def _fingerprint_and_weights() -> tuple[bytes, dict]:
    weights = get_weights(build_model('tiny_cnn', 7))
    return architecture_fingerprint(weights), weights


def _round_frame(round_index: int, plan: list, num_rounds: int = RUN_ROUNDS,
                 run_id: str | None = None) -> bytes:
    fingerprint, weights = _fingerprint_and_weights()
    return encode_frame(FrameKind.GLOBAL_MODEL, round_index, GROUND_STATION_ID, fingerprint,
                        weights, {'deadline_s': 60.0, 'num_rounds': num_rounds,
                                  'knobs': {'0': {'plan': plan}},
                                  **({'run_id': run_id} if run_id else {})})


def _simulator(port_base: int) -> AutopilotSim:
    return AutopilotSim(AutopilotSimConfig(
        num_vehicles=1, remote_base_port=port_base, bind_base_port=port_base + BIND_PORT_OFFSET,
        time_factor=10.0, home_east_m=HOME[0], home_north_m=HOME[1], heartbeat_rate_hz=2.0,
        cruise_speed_m_s=12.0, rtl_return_alt_m=20.0))


def _broken_status(*args, **kwargs):
    raise RuntimeError('dictionary changed size during iteration')


def _uploads_and_model_pub(probe):
    uploads: list[bytes] = []
    probe.create_subscription(UInt8MultiArray, names.UPDATES_TOPIC,
                              lambda m: uploads.append(bytes(m.data)), names.UPDATES_QOS)
    model_pub = probe.create_publisher(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC,
                                       names.GLOBAL_MODEL_QOS)
    return uploads, model_pub


def test_a_drone_started_before_its_autopilot_gets_telemetry_and_samples(tmp_path, port_base):
    # Arrange: the drone node starts, its first connect fails (no autopilot yet)
    overrides = {**tiny_fleet_overrides(1, port_base), 'flight.takeoff_altitude_m': 20.0,
                 'flight.connect_timeout_s': 3.0, 'learning.min_samples_to_train': 4}
    params = write_params_file(overrides, tmp_path / 'params.yaml')
    args = ['--ros-args', '-r', '__ns:=/uav0', '--params-file', str(params),
            '-p', 'drone_id:=0']
    sim = _simulator(port_base)
    handle = None
    try:
        with node_with_probe(DroneNode, args) as (node, probe, executor):
            uploads, model_pub = _uploads_and_model_pub(probe)
            poses: list = []
            probe.create_subscription(PoseStamped, names.drone_topic(0, names.POSE_TOPIC),
                                      poses.append, names.TELEMETRY_QOS)
            camera = probe.create_publisher(Image, names.drone_topic(0, names.IMAGE_TOPIC),
                                            names.IMAGE_QOS)
            pilot = node.pilot
            first_connect_over = spin_until(
                executor, lambda: pilot._lock is not None and not pilot._lock.locked()
                and not pilot.state.connected, 20.0)
            assert first_connect_over, 'the first connect did not fail as arranged'
            # Act: the autopilot comes up; a round arrives and connects
            handle = sim.run_in_thread()
            plan = [[HOME[0] + 40.0, HOME[1], 20.0], [HOME[0] + 40.0, HOME[1] + 40.0, 20.0]]
            model_pub.publish(frame_msg(_round_frame(1, plan)))
            rng = np.random.default_rng(0)

            def fly_and_film() -> bool:
                image = rng.integers(0, 255, (64, 64, 3), np.uint8)
                camera.publish(rgb_to_image(image, 'uav0/camera_optical', time.time()))
                return bool(uploads)

            uploaded = spin_until(executor, fly_and_film, 120.0)
            # Assert: telemetry runs, so frames were kept and trained on
            assert uploaded, f'no update uploaded; pilot state {pilot.state}'
            update = decode_frame(uploads[0])
            assert update.round_index == 1 and update.metadata['num_samples'] > 0
            assert poses, 'no /uav0/pose published'
            assert node.agent.buffered_samples > 0
    finally:
        if handle is not None:
            handle.stop()


def test_shutdown_in_flight_returns_to_launch_without_a_traceback(tmp_path, port_base, caplog,
                                                                  capfd, monkeypatch):
    # Arrange: a long mission under way
    overrides = {'flight.takeoff_altitude_m': 20.0, 'flight.speed_m_s': 5.0}
    with drone_under_test(tmp_path, port_base, HOME, overrides, {}) as (sim, node, probe,
                                                                       executor):
        _, model_pub = _uploads_and_model_pub(probe)
        statuses: list = []
        probe.create_subscription(DiagnosticArray, names.DIAGNOSTICS_TOPIC,
                                  lambda m: statuses.extend(m.status), names.DIAGNOSTICS_QOS)
        far = [[HOME[0] + 400.0, HOME[1], 20.0], [HOME[0] + 400.0, HOME[1] + 400.0, 20.0]]
        model_pub.publish(frame_msg(_round_frame(1, far)))
        assert spin_until(executor, lambda: sim.events_of(0, 'mission_started'), 60.0)
        # the operator's view on /diagnostics: this drone, round 1, flying, link up, in the air
        def in_air(st) -> bool:
            return {kv.key: kv.value for kv in st.values}.get('in_air') == 'true'

        flying = spin_until(executor, lambda: any(
            st.name == 'fl_uav: uav0' and 'round 1 flying' in st.message and in_air(st)
            for st in statuses), 10.0)
        assert flying, [st.message for st in statuses]
        status = next(st for st in statuses if 'round 1 flying' in st.message and in_air(st))
        values = {kv.key: kv.value for kv in status.values}
        assert status.level == DiagnosticStatus.OK, status.message
        assert (values['autopilot_link'], values['armed'], values['round']) == ('up', 'true',
                                                                                 '1')
        # a status that cannot be built (state read while another thread writes it) is
        # skipped, never raised out of the node's timer
        monkeypatch.setattr(drone_node_module, 'drone_status', _broken_status)
        node._on_status_tick()
        # Act: Ctrl-C: rclpy's signal handler shuts the context down, then run_node calls
        # shutdown() (the return to launch streams poses that can no longer be published)
        capfd.readouterr()
        rclpy.try_shutdown()
        with caplog.at_level(logging.ERROR):
            node.shutdown()
        # Assert: the autopilot flew home and landed; no callback raised
        events = [e['event'] for e in sim.events_of(0)]
        assert 'rtl' in events[events.index('mission_started'):]
        assert 'landed' in events[events.index('rtl'):]
        snapshot = sim.snapshots()[0]
        assert not snapshot.armed
        assert np.hypot(snapshot.position_enu_m[0] - HOME[0],
                        snapshot.position_enu_m[1] - HOME[1]) < 3.0
        assert not [r for r in caplog.records if 'CancelledError' in r.getMessage()
                    or (r.exc_info and 'CancelledError' in repr(r.exc_info[1]))
                    or r.name == 'concurrent.futures']
        # ... and the telemetry ended quietly: no error, no failed /rosout publication
        assert node._telemetry.done() and node._telemetry.exception() is None
        printed = capfd.readouterr().err
        assert 'telemetry stopped' not in printed and 'rosout' not in printed, printed


def test_rounds_of_a_restarted_station_are_taken_and_a_forged_round_is_rejected(tmp_path,
                                                                               port_base):
    # Arrange: rounds without a plan (nothing flown: the drone trains and uploads at once)
    with drone_under_test(tmp_path, port_base, HOME, {}, {}) as (sim, node, probe, executor):
        uploads, model_pub = _uploads_and_model_pub(probe)

        def rounds_uploaded() -> list[int]:
            return [decode_frame(f).round_index for f in uploads]

        model_pub.publish(frame_msg(_round_frame(3, [])))
        assert spin_until(executor, lambda: rounds_uploaded() == [3], 30.0)
        # Act: a forged round far beyond the run, then round 1 of a new run
        model_pub.publish(frame_msg(_round_frame(4_000_000_000, [])))
        assert spin_until(executor, lambda: node.rounds.ignored['beyond_run'] == 1, 15.0)
        model_pub.publish(frame_msg(_round_frame(1, [])))
        new_run = spin_until(executor, lambda: rounds_uploaded() == [3, 1], 30.0)
        # Assert
        assert new_run, f'uploads for rounds {rounds_uploaded()}'
        assert node.rounds.events['new_run'] == 1 and node.rounds.last_round == 1
        assert rounds_uploaded() == [3, 1]       # the forged round was never run


def test_a_new_run_id_starts_over_and_a_replay_of_the_run_left_is_ignored(tmp_path,
                                                                          port_base):
    # Arrange: a drone in round 3 of run A
    run_a, run_b = 'aaaaaaaaaaaaaaaa', 'bbbbbbbbbbbbbbbb'
    with drone_under_test(tmp_path, port_base, HOME, {}, {}) as (sim, node, probe, executor):
        uploads, model_pub = _uploads_and_model_pub(probe)

        def uploaded() -> list[tuple[int, str]]:
            return [(f.round_index, f.metadata.get('run_id')) for f in map(decode_frame,
                                                                            uploads)]

        model_pub.publish(frame_msg(_round_frame(3, [], run_id=run_a)))
        assert spin_until(executor, lambda: uploaded() == [(3, run_a)], 30.0)
        # Act: run B starts at round 2 (a late joiner), then run A's round 4 is replayed
        model_pub.publish(frame_msg(_round_frame(2, [], run_id=run_b)))
        assert spin_until(executor, lambda: len(uploads) == 2, 30.0), uploaded()
        model_pub.publish(frame_msg(_round_frame(4, [], run_id=run_a)))
        ignored = spin_until(executor, lambda: node.rounds.ignored['old_run'] == 1, 15.0)
        # Assert: run B's upload echoes B; the agent's state started over once; A is left
        assert ignored and uploaded() == [(3, run_a), (2, run_b)]
        assert node.rounds.run_id == run_b and node.agent.runs_started == 1


@pytest.mark.parametrize('factory, key, value, message', [
    (DroneNode, 'drone_id', 'abc', "'drone_id': expected an integer"),
    (DroneNode, 'drone_id', '5', r'drone_id must be in \[0, 0\] \(num_drones 1\)'),
    (DroneNode, 'camera_transport', 'theora',
     r"camera_transport 'theora' unknown; choices: raw, compressed"),
    (DroneNode, 'camera_topic', 'camera/image raw',
     r"camera_topic 'camera/image raw' is no valid ROS topic name: topic name must not "
     r'contain characters other than'),
    (DroneNode, 'camera_topic', 'camera/', r"camera_topic 'camera/' is no valid ROS topic "
                                          r'name: topic name must not end with a forward'),
    (GroundStationNode, 'tick_period_s', '-1.0', r'tick_period_s must be in \(0, 60\]'),
    (AutopilotSimNode, 'ground_truth_rate_hz', '0.0',
     r'ground_truth_rate_hz must be in \(0, 1000\]'),
    # secure by default: no keys and not security.insecure
    (DroneNode, 'security.insecure', 'false',
     r'drone 0 has no keys \(security.keys_dir is empty\).*security.insecure: true'),
    (GroundStationNode, 'security.insecure', 'false',
     r'the ground station has no keys \(security.keys_dir is empty\)'),
])
def test_a_bad_node_parameter_stops_the_node_with_an_error_naming_it(tmp_path, port_base,
                                                                     factory, key, value,
                                                                     message):
    # Arrange
    params = write_params_file(tiny_fleet_overrides(1, port_base), tmp_path / 'params.yaml')
    rclpy.init(args=['--ros-args', '--params-file', str(params), '-p', f'{key}:={value}'])
    try:
        # Act / Assert
        with pytest.raises(ConfigError, match=message):
            factory()
    finally:
        rclpy.try_shutdown()


def test_a_raster_without_a_crs_stops_the_drone_node_naming_the_file(tmp_path, port_base):
    # Arrange: world.map_file a GeoTIFF that cannot be placed on the ground
    path = tmp_path / 'no_crs.tif'
    with rasterio.open(path, 'w', driver='GTiff', width=8, height=8, count=1, dtype='uint8',
                       transform=Affine(5.0, 0.0, 0.0, 0.0, -5.0, 0.0)) as out:
        out.write(np.full((8, 8), 10, np.uint8), 1)
    params = write_params_file({**tiny_fleet_overrides(1, port_base),
                                'world.map_file': str(path)}, tmp_path / 'params.yaml')
    rclpy.init(args=['--ros-args', '--params-file', str(params), '-p', 'drone_id:=0'])
    try:
        # Act / Assert
        with pytest.raises(ConfigError, match=r"world\.map_file: .*no_crs\.tif' has no CRS"):
            DroneNode()
    finally:
        rclpy.try_shutdown()


class _StandInStation:
    """A ground station stand-in in the test process: a node named ``ground_station`` that
    subscribes to the updates (on the ROS graph as the real one is) and publishes a
    heartbeat every ``period_s`` (signed by ``signer``, as the station node signs them) until
    :meth:`hang`, after which it stays on the graph silent, as a hung station process does
    (the drone looks at beats and frames, not the graph)."""

    def __init__(self, executor, period_s: float, signer: HeartbeatSigner | None = None
                 ) -> None:
        self.node = rclpy.create_node(names.GROUND_STATION_NODE_NAME)
        self.node.create_subscription(UInt8MultiArray, names.UPDATES_TOPIC, lambda m: None,
                                      names.UPDATES_QOS)
        beats = self.node.create_publisher(DiagnosticArray, names.STATION_HEARTBEAT_TOPIC,
                                           names.STATION_HEARTBEAT_QOS)
        clock = PhaseClock('a1b2', RUN_ROUNDS, period_s, self._now())

        def beat() -> None:
            now, heartbeat = self._now(), clock.beat(self._now())
            beats.publish(heartbeat_to_msg(heartbeat, now, None if signer is None
                                           else signer.sign(heartbeat)))

        self._timer = self.node.create_timer(period_s, beat)
        self._executor = executor
        executor.add_node(self.node)

    def _now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    def hang(self) -> None:
        """No beat any more; the node stays on the graph."""
        self._timer.cancel()

    def close(self) -> None:
        self._executor.remove_node(self.node)
        self.node.destroy_node()


def test_a_drone_returns_when_the_station_hangs_on_the_graph_and_takes_off_again(tmp_path,
                                                                                 port_base):
    # Arrange: rounds of 3 s, the station watchdog at 6 s; a stand-in station that beats
    # every 0.5 s and sends no frame (the test sends the round frames); round 1 flown
    timeout_s = 6.0
    overrides = {'flight.takeoff_altitude_m': 20.0, 'rounds.deadline_s': 3.0,
                 'rounds.first_round_extra_s': 0.0, 'flight.station_timeout_s': timeout_s,
                 'status.period_s': 0.5}
    with drone_under_test(tmp_path, port_base, HOME, overrides, {}) as (sim, node, probe,
                                                                         executor):
        station = _StandInStation(executor, period_s=0.5)
        try:
            uploads, model_pub = _uploads_and_model_pub(probe)
            near = [[HOME[0] + 30.0, HOME[1], 20.0]]
            assert spin_until(executor, lambda: node.watchdog.last_beat is not None, 20.0)
            model_pub.publish(frame_msg(_round_frame(1, near)))
            assert spin_until(executor, lambda: bool(uploads), 60.0), 'round 1 not uploaded'
            # Act (0): no frame for longer than the timeout, but heartbeats (a station waiting
            # or planning for long): no return
            returned_early = spin_until(executor, lambda: sim.events_of(0, 'rtl'), 8.0)
            # Act (a): the station hangs: no beat, but it stays on the ROS graph
            station.hang()
            hung_at = time.monotonic()
            commanded = spin_until(executor, lambda: sim.events_of(0, 'rtl'), 12.0)
            commanded_after_s = time.monotonic() - hung_at
            on_graph = any(info.node_name == names.GROUND_STATION_NODE_NAME for info in
                           node.get_subscriptions_info_by_topic(names.UPDATES_TOPIC))
            returned = spin_until(executor, lambda: sim.events_of(0, 'landed')
                                  and not sim.snapshots()[0].armed, 60.0)
            # Assert (0), (a): heard by its heartbeats only; the return commanded within the
            # timeout and a margin, while the silent station was still on the graph; back
            # home, landed and disarmed
            assert not returned_early, 'returned while the station sent heartbeats'
            assert node.watchdog.last_beat.phase == StationPhase.WAITING
            assert commanded, f'no return {commanded_after_s:.0f} s after the station hung'
            assert commanded_after_s >= timeout_s - 1.0, commanded_after_s   # not before it
            assert on_graph, 'the silent station had left the graph: the test proves nothing'
            assert returned, [e['event'] for e in sim.events_of(0)]
            snapshot = sim.snapshots()[0]
            assert np.hypot(snapshot.position_enu_m[0] - HOME[0],
                            snapshot.position_enu_m[1] - HOME[1]) < 3.0
            # Act (b): the station is back with round 2
            takeoffs = len(sim.events_of(0, 'takeoff'))
            model_pub.publish(frame_msg(_round_frame(2, near)))
            flown = spin_until(executor, lambda: len(uploads) >= 2, 60.0)
            # Assert (b): armed and took off again for round 2
            assert flown and len(sim.events_of(0, 'takeoff')) == takeoffs + 1
        finally:
            station.close()


def _status_values(status) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_a_rogue_beating_for_a_killed_station_does_not_keep_a_drone_from_returning(tmp_path,
                                                                                    port_base):
    # Arrange: keys, signatures required; rounds of 3 s, the station watchdog at 6 s, beats
    # older than 2 s stale; a stand-in station signing its beats with station.key every 0.5 s
    # (captured by the probe as a rogue would capture them off the air); round 1 flown
    timeout_s, max_age_s = 6.0, 2.0
    keys = tmp_path / 'keys'
    generate_fleet_keys(keys, 1)
    overrides = {'flight.takeoff_altitude_m': 20.0, 'rounds.deadline_s': 3.0,
                 'rounds.first_round_extra_s': 0.0, 'flight.station_timeout_s': timeout_s,
                 'status.period_s': 0.5, 'security.keys_dir': str(keys),
                 'security.require_signatures': True,
                 'security.heartbeat_max_age_s': max_age_s}
    station_auth = load_frame_auth(SecurityConfig(str(keys)), GROUND_STATION_ID, [0])
    with drone_under_test(tmp_path, port_base, HOME, overrides, {}) as (sim, node, probe,
                                                                         executor):
        station = _StandInStation(executor, 0.5, heartbeat_signer(station_auth))
        captured: list[DiagnosticArray] = []
        probe.create_subscription(DiagnosticArray, names.STATION_HEARTBEAT_TOPIC,
                                  captured.append, names.STATION_HEARTBEAT_QOS)
        statuses: list = []
        probe.create_subscription(DiagnosticArray, names.DIAGNOSTICS_TOPIC,
                                  lambda m: statuses.extend(m.status), names.DIAGNOSTICS_QOS)
        uploads, model_pub = _uploads_and_model_pub(probe)
        near = [[HOME[0] + 30.0, HOME[1], 20.0]]
        assert spin_until(executor, lambda: node.watchdog.last_beat is not None, 20.0)
        model_pub.publish(frame_msg(station_auth.seal(_round_frame(1, near))))
        assert spin_until(executor, lambda: bool(uploads), 60.0), 'round 1 not uploaded'
        # Act (0): no frame for longer than the timeout, but the station's signed beats
        returned_early = spin_until(executor, lambda: sim.events_of(0, 'rtl'), 8.0)
        refused_while_alive = dict(node.heartbeats.refused)
        # Act (a): the station is killed (it leaves the graph); a rogue publishes in its name
        # every 0.1 s: unsigned beats, beats signed with its own key, the capture played back
        # in a loop, and a message that is no heartbeat
        station.close()
        killed_at, killed_at_node_s = time.monotonic(), node._now()
        capture = list(captured)
        rogue_clock = PhaseClock('a1b2', RUN_ROUNDS, 0.5, 0.0)
        forger = HeartbeatSigner(Ed25519PrivateKey.generate())

        def unsigned() -> DiagnosticArray:
            return heartbeat_to_msg(rogue_clock.beat(1.0), 0.0)

        def self_signed() -> DiagnosticArray:
            beat = rogue_clock.beat(1.0)
            return heartbeat_to_msg(beat, 0.0, forger.sign(beat))

        sent = iter(range(1_000_000))
        kinds = [unsigned, self_signed, lambda: capture[next(sent) % len(capture)],
                 lambda: DiagnosticArray()]
        rogue = probe.create_publisher(DiagnosticArray, names.STATION_HEARTBEAT_TOPIC,
                                       names.STATION_HEARTBEAT_QOS)
        beat_count = iter(range(1_000_000))
        probe.create_timer(0.1, lambda: rogue.publish(kinds[next(beat_count) % len(kinds)]()))
        commanded = spin_until(executor, lambda: sim.events_of(0, 'rtl'), 15.0)
        commanded_after_s = time.monotonic() - killed_at
        heard_after_kill_s = node.watchdog.last_heard_s - killed_at_node_s
        counted = spin_until(executor, lambda: statuses and all(
            f'{reason}=' in _status_values(statuses[-1])['heartbeats_refused']
            for reason in ('malformed', 'unsigned', 'forged', 'replayed')), 5.0)
        returned = spin_until(executor, lambda: sim.events_of(0, 'landed')
                              and not sim.snapshots()[0].armed, 60.0)
        # Assert (0): the genuine beats kept it up, none refused
        assert not returned_early, 'returned while the station sent signed heartbeats'
        assert refused_while_alive == {}, refused_while_alive
        # Assert (a): the return commanded after the timeout: no rogue beat was heard (at
        # most a genuine beat the drone had missed, played back within heartbeat_max_age_s)
        assert len(capture) >= 10, len(capture)
        assert commanded, (f'no return {commanded_after_s:.0f} s after the station was '
                           f'killed; refused {dict(node.heartbeats.refused)}')
        assert timeout_s - 1.0 <= commanded_after_s <= timeout_s + max_age_s + 2.0, \
            commanded_after_s
        assert heard_after_kill_s <= max_age_s, heard_after_kill_s
        # ... counted by reason on /diagnostics, as the drone counts them
        assert counted, [_status_values(st)['heartbeats_refused'] for st in statuses[-3:]]
        refused = dict(node.heartbeats.refused)
        assert set(refused) == {'malformed', 'unsigned', 'forged', 'replayed'}, refused
        assert min(refused.values()) >= 10, refused
        assert returned, [e['event'] for e in sim.events_of(0)]


def test_a_round_arriving_while_the_previous_still_flies_ends_that_flight(tmp_path, port_base):
    # Arrange: round 1's mission is long (400 m legs at 5 m/s)
    overrides = {'flight.takeoff_altitude_m': 20.0, 'flight.speed_m_s': 5.0}
    with drone_under_test(tmp_path, port_base, HOME, overrides, {}) as (sim, node, probe,
                                                                       executor):
        uploads, model_pub = _uploads_and_model_pub(probe)
        far = [[HOME[0] + 400.0, HOME[1], 20.0], [HOME[0] + 400.0, HOME[1] + 400.0, 20.0]]
        near = [[HOME[0] + 20.0, HOME[1], 20.0]]
        model_pub.publish(frame_msg(_round_frame(1, far)))
        assert spin_until(executor, lambda: sim.events_of(0, 'mission_started'), 60.0)
        first_round = node._round
        # Act: round 2 comes (the station closed round 1)
        model_pub.publish(frame_msg(_round_frame(2, near)))
        flown = spin_until(executor, lambda: any(
            decode_frame(u).round_index == 2 for u in uploads), 60.0)
        # Assert: round 1's flight was ended, round 2's mission replaced it; round 1 uploaded
        # nothing
        assert flown, [e['event'] for e in sim.events_of(0)]
        assert first_round.cancelled()
        assert [decode_frame(u).round_index for u in uploads] == [2]
        assert len(sim.events_of(0, 'mission_started')) == 2
        assert np.hypot(sim.snapshots()[0].position_enu_m[0] - near[0][0],
                        sim.snapshots()[0].position_enu_m[1] - near[0][1]) < 5.0

