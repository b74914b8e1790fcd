"""drone node over real rclpy/DDS and real MAVLink (the embedded autopilot simulator).

Malformed input first (a frame that is none, a model beyond float32, an image that is no
image): counted by reason on /diagnostics, then the round. Run once with a dense v1 upload
and once with LGC (one codec v2 frame per layer, each with the drone's counts in its metadata
section). The round carries resource knobs (a planner's H and, with LGC, its entries per
channel D_n), which the uploads must reflect.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.msg import Log
from sensor_msgs.msg import Image
from std_msgs.msg import UInt8MultiArray

from fl_uav.compression.codec import GROUND_STATION_ID, FrameKind, decode_frame, encode_frame
from fl_uav.compression.codec_v2 import (
    VERSION_V2,
    decode_v2,
    lgc_frame_bytes,
    metadata_section_bytes,
)
from fl_uav.learning.models import build_model
from fl_uav.learning.weights import architecture_fingerprint, get_weights
from fl_uav.ros import names
from fl_uav.ros.conversions import rgb_to_image
from fl_uav.world.landcover import CLASS_NAMES
from test.ros.rosutil import (
    ROSOUT_QOS,
    VIEWER_QOS,
    drone_under_test,
    frame_msg,
    spin_until,
)

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]
HOME = (585.0, 600.0)
LGC_CHANNEL_ENTRIES = [200, 800]
KNOB_STEPS = 2                       # local_steps knob (LGC eq. (13)'s H)
KNOB_ENTRIES = [300, 500]            # lgc_channel_entries knob (D_n), not the config's
KNOBS = {'none': {'local_steps': KNOB_STEPS},
         'lgc': {'local_steps': KNOB_STEPS, 'lgc_channel_entries': KNOB_ENTRIES}}
COMPRESSION = {
    'none': {},
    'lgc': {'compression.method': 'lgc', 'compression.lgc_channel_entries': LGC_CHANNEL_ENTRIES},
}


@pytest.fixture(params=sorted(COMPRESSION))
def drone(request, tmp_path, port_base):
    overrides = {'flight.takeoff_altitude_m': 20.0, 'learning.min_samples_to_train': 4,
                 **COMPRESSION[request.param]}
    with drone_under_test(tmp_path, port_base, HOME, overrides, {}) as (sim, node, probe,
                                                                       executor):
        yield sim, node, probe, executor, request.param


def test_drone_flies_samples_trains_uploads_and_lands(drone):
    # Prepare
    sim, node, probe, executor, method = drone
    expected_frames = 1 if method == 'none' else len(LGC_CHANNEL_ENTRIES)
    weights = get_weights(build_model('tiny_cnn', len(CLASS_NAMES)))
    fingerprint = architecture_fingerprint(weights)
    plan = [[HOME[0] + 40.0, HOME[1], 20.0], [HOME[0] + 40.0, HOME[1] + 40.0, 20.0]]
    model_frame = encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID, fingerprint, weights,
                               {'deadline_s': 60.0,
                                'knobs': {'0': {'plan': plan, **KNOBS[method]}}})
    uploads, poses = [], []
    probe.create_subscription(UInt8MultiArray, names.UPDATES_TOPIC,
                              lambda m: uploads.append(bytes(m.data)), names.UPDATES_QOS)
    # as rviz's Pose display subscribes by default (reliable): the pose must reach it
    probe.create_subscription(PoseStamped, names.drone_topic(0, names.POSE_TOPIC), poses.append,
                              VIEWER_QOS)
    model_pub = probe.create_publisher(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC,
                                       names.GLOBAL_MODEL_QOS)
    camera = probe.create_publisher(Image, names.drone_topic(0, names.IMAGE_TOPIC),
                                    names.IMAGE_QOS)
    lines: list[str] = []
    probe.create_subscription(Log, '/rosout', lambda m: lines.append(m.msg)
                              if m.name == node.get_logger().name else None, ROSOUT_QOS)
    rng = np.random.default_rng(0)

    def fly_and_film() -> bool:
        image = rng.integers(0, 255, (64, 64, 3), np.uint8)
        camera.publish(rgb_to_image(image, 'uav0/camera_optical', time.time()))
        return len(uploads) >= expected_frames

    statuses: list = []
    probe.create_subscription(DiagnosticArray, names.DIAGNOSTICS_TOPIC,
                              lambda m: statuses.extend(m.status), names.DIAGNOSTICS_QOS)
    wide = {n: np.full(w.shape, 1e300) for n, w in weights.items()}    # +inf in float32
    not_an_image = rgb_to_image(np.zeros((8, 8, 3), np.uint8), 'uav0/camera_optical', 0.0)
    not_an_image.encoding = 'bayer_rggb8'     # a ROS encoding the drone does not read

    def counted(key: str, value: str) -> bool:
        return any(dict((kv.key, kv.value) for kv in st.values).get(key) == value
                   for st in statuses)

    # Execute: malformed input first (must be counted and ignored), then the round
    model_pub.publish(frame_msg(b'not a frame'))
    assert spin_until(executor, lambda: node.agent.rejected_frames == 1, 15.0)
    model_pub.publish(frame_msg(encode_frame(FrameKind.GLOBAL_MODEL, 1, GROUND_STATION_ID,
                                             fingerprint, wide, {'deadline_s': 60.0})))
    camera.publish(not_an_image)
    assert spin_until(executor, lambda: node.agent.rejected_frames == 2, 15.0)
    assert spin_until(executor, lambda: counted('global_frames_rejected',
                                                'bad_magic=1, nonfinite=1')
                      and counted('camera_frames_rejected', 'encoding=1'), 15.0), [
        st.values for st in statuses[-1:]]
    model_pub.publish(frame_msg(model_frame))
    uploaded = spin_until(executor, fly_and_film, 120.0)
    # Assert: the update
    assert uploaded, f'no update uploaded; pilot state {node.pilot.state}'
    updates = [decode_v2(f) if f[4] == VERSION_V2 else decode_frame(f) for f in uploads]
    assert len(updates) == expected_frames
    for update in updates:
        assert update.round_index == 1 and update.sender == 0
        assert update.metadata['num_samples'] > 0 and update.metadata['steps'] == KNOB_STEPS
        assert update.metadata['knobs_applied'] == KNOBS[method]
        assert update.metadata['waypoints_reached'] == len(plan)
    if method == 'none':
        assert updates[0].kind == FrameKind.UPDATE
        assert any(np.any(t != 0) for t in updates[0].tensors.values())
    else:   # one frame per LGC layer, in layer order, each D_n (the knob's) + its metadata
        assert [u.update.layer.layer_id for u in updates] == [0, 1]
        assert [len(f) for f in uploads] == [
            lgc_frame_bytes(k) + metadata_section_bytes(u.metadata)
            for k, u in zip(KNOB_ENTRIES, updates)]
    # Assert: what the autopilot saw (ground truth), and the telemetry the node published
    kinds = [e['event'] for e in sim.events_of(0)]
    assert 'armed' in kinds and 'takeoff' in kinds and 'mission_complete' in kinds
    east_m, north_m, _ = sim.snapshots()[0].position_enu_m
    assert abs(east_m - plan[-1][0]) < 3.0 and abs(north_m - plan[-1][1]) < 3.0
    assert poses, 'no /uav0/pose published'
    # Execute + Assert: finish -> return to launch, land, node done
    finish = encode_frame(FrameKind.CONTROL, 1, GROUND_STATION_ID, fingerprint, {},
                          {'command': 'finish'})
    model_pub.publish(frame_msg(finish))
    assert spin_until(executor, node.done.is_set, 90.0)
    assert 'landed' in [e['event'] for e in sim.events_of(0)]
    # ... and the node's log says so after the finish
    assert spin_until(executor, lambda: 'landed' in lines, 10.0), lines
    assert lines.index('run finished: returning to launch') < lines.index('landed')
