"""drone node with trajectory.planner 2ceoafl, over real rclpy/DDS and real MAVLink.

Round 1 is the survey (the station's sweep, camera frames labelled at the telemetry pose);
at round 2 the drone fits its class regions, plans its own 2CEOAFL trajectory, publishes it
latched as nav_msgs/Path on /uav0/trajectory (and markers), and flies q_2 as a mission.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import rclpy
from nav_msgs.msg import Path
from sensor_msgs.msg import Image
from std_msgs.msg import UInt8MultiArray
from visualization_msgs.msg import Marker, MarkerArray

from fl_uav.compression.codec import GROUND_STATION_ID, FrameKind, encode_frame
from fl_uav.learning.models import build_model
from fl_uav.learning.weights import architecture_fingerprint, get_weights
from fl_uav.ros import names
from fl_uav.ros.conversions import path_to_plan, rgb_to_image
from fl_uav.ros.markers import PATH_NS, REGION_NS
from fl_uav.world.landcover import CLASS_NAMES
from test.ros.rosutil import drone_under_test, frame_msg, spin_until

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]
HOME = (585.0, 600.0)
NUM_ROUNDS = 4
SURVEY = [[HOME[0] + 60.0, HOME[1], 20.0], [HOME[0] + 60.0, HOME[1] + 60.0, 20.0],
          [HOME[0] - 60.0, HOME[1] + 60.0, 20.0], [HOME[0] - 60.0, HOME[1], 20.0]]


@pytest.fixture
def drone(tmp_path, port_base):
    overrides = {'flight.takeoff_altitude_m': 20.0, 'coverage.altitude_m': 20.0,
                 'learning.min_samples_to_train': 4, 'rounds.num_rounds': NUM_ROUNDS,
                 'trajectory.planner': '2ceoafl', 'trajectory.min_samples_per_class': 3}
    with drone_under_test(tmp_path, port_base, HOME, overrides,
                          {'output_dir': tmp_path}) as handles:
        yield handles


def test_drone_plans_publishes_and_flies_its_own_trajectory(drone, tmp_path):
    # Prepare
    sim, node, probe, executor = drone
    weights = get_weights(build_model('tiny_cnn', len(CLASS_NAMES)))
    fingerprint = architecture_fingerprint(weights)

    def round_frame(index: int) -> bytes:
        return encode_frame(FrameKind.GLOBAL_MODEL, index, GROUND_STATION_ID, fingerprint,
                            weights, {'deadline_s': 60.0, 'knobs': {'0': {'plan': SURVEY}}})

    uploads: list[bytes] = []
    probe.create_subscription(UInt8MultiArray, names.UPDATES_TOPIC,
                              lambda m: uploads.append(bytes(m.data)), names.UPDATES_QOS)
    model_pub = probe.create_publisher(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC,
                                       names.GLOBAL_MODEL_QOS)
    camera = probe.create_publisher(Image, names.drone_topic(0, names.IMAGE_TOPIC),
                                    names.IMAGE_QOS)
    rng = np.random.default_rng(0)

    def film_until(count: int):
        def step() -> bool:
            image = rng.integers(0, 255, (64, 64, 3), np.uint8)
            camera.publish(rgb_to_image(image, 'uav0/camera_optical', time.time()))
            return len(uploads) >= count
        return step

    # Execute: the survey round, then round 2 (planning, publishing, flying q_2)
    model_pub.publish(frame_msg(round_frame(1)))
    assert spin_until(executor, film_until(1), 120.0), f'no round 1 upload: {node.pilot.state}'
    model_pub.publish(frame_msg(round_frame(2)))
    assert spin_until(executor, film_until(2), 120.0), f'no round 2 upload: {node.pilot.state}'
    # A late subscriber still gets the latched trajectory and markers
    paths: list[Path] = []
    marker_arrays: list[MarkerArray] = []
    late = rclpy.create_node('late_viewer')
    executor.add_node(late)
    late.create_subscription(Path, names.drone_topic(0, names.TRAJECTORY_TOPIC), paths.append,
                             names.PLAN_QOS)
    late.create_subscription(MarkerArray, names.drone_topic(0, names.TRAJECTORY_MARKERS_TOPIC),
                             marker_arrays.append, names.MARKERS_QOS)
    assert spin_until(executor, lambda: paths and marker_arrays, 15.0)
    # Assert: the Path is the drone's plan, one q_t per round after the survey, in ENU 'map'
    plan = node.onboard.trajectory
    assert plan is not None and plan.first_round == 2 and node.onboard.fallbacks == {}
    assert paths[0].header.frame_id == names.MAP_FRAME
    received = path_to_plan(paths[0])
    assert len(received) == NUM_ROUNDS - 1
    assert all(np.allclose((a.east_m, a.north_m, a.up_m), (b.east_m, b.north_m, b.up_m))
               for a, b in zip(received, plan.waypoints))
    namespaces = [m.ns for m in marker_arrays[0].markers]
    assert marker_arrays[0].markers[0].action == Marker.DELETEALL
    assert namespaces.count(REGION_NS) == len(plan.regions) > 0 and PATH_NS in namespaces
    # Assert: the autopilot (ground truth) reached q_2, the first item of the round 2 mission
    reached = sim.events_of(0, 'mission_item_reached')
    uploads_seen = [e for e in sim.events_of(0) if e['event'] == 'mission_uploaded']
    assert len(uploads_seen) == 2
    q_2 = plan.target_for(2)
    after = [e for e in reached if e['t_sim_s'] >= uploads_seen[1]['t_sim_s']]
    assert after and after[0]['seq'] == 0
    east_m, north_m, up_m = after[0]['position_enu_m']
    assert abs(east_m - q_2.east_m) < 3.0 and abs(north_m - q_2.north_m) < 3.0
    assert abs(up_m - q_2.up_m) < 3.0
    assert (tmp_path / 'trajectory_uav0.json').exists()
    # Execute + Assert: finish -> land
    finish = encode_frame(FrameKind.CONTROL, 2, GROUND_STATION_ID, fingerprint, {},
                          {'command': 'finish'})
    model_pub.publish(frame_msg(finish))
    assert spin_until(executor, node.done.is_set, 90.0)
    assert 'landed' in [e['event'] for e in sim.events_of(0)]
    late.destroy_node()
