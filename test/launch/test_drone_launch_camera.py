"""drone.launch.py camera:=opencv through the real `ros2 launch`: the camera node reads a video
file written here and publishes /uav0/camera/image_raw and camera_info, where the drone node
reads; a Ctrl-C ends both cleanly."""

from __future__ import annotations

import signal

import cv2
import numpy as np
import pytest

from test.launch.conftest import fleet_config, fleet_ports, node_exits, unclean_exits

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
WIDTH, HEIGHT = 64, 48
COMMAND_TIMEOUT_S = 60.0


def _video(path, frames: int = 30) -> str:
    """An MJPG .avi of solid blue frames (BGR), as a camera's recording would be."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), 10.0,
                             (WIDTH * 2, HEIGHT * 2))
    assert writer.isOpened()
    for _ in range(frames):
        writer.write(np.full((HEIGHT * 2, WIDTH * 2, 3), (200, 30, 10), np.uint8))
    writer.release()
    return str(path)


def _echo_once(start, name: str, topic: str, msg_type: str, field: str) -> str:
    """One message's ``field`` as `ros2 topic echo --once` prints it (the type given: the
    graph may not know the topic yet)."""
    handle = start(name, 'topic', 'echo', '--once', '--field', field, topic, msg_type)
    code = handle.wait(COMMAND_TIMEOUT_S)
    assert code == 0, f'exit {code}:\n{handle.text[-3000:]}'
    return handle.text


def test_camera_opencv_publishes_a_video_file_where_the_drone_reads(start, tmp_path):
    # Arrange: one drone's launch with the camera node on a looping video file
    config = fleet_config(tmp_path / 'fleet.yaml', 1, fleet_ports(1), security__insecure=True,
                          flight__mavlink_signing=False)
    video = _video(tmp_path / 'flight.avi')
    launch = start('launch', 'launch', 'fl_uav', 'drone.launch.py', 'drone_id:=0',
                   f'config:={config}', 'camera:=opencv', f'camera_source:={video}',
                   'camera_loop:=true', 'camera_rate_hz:=10', f'camera_width:={WIDTH}',
                   f'camera_height:={HEIGHT}', 'respawn:=false')
    launch.wait_for('publishing camera/image_raw', COMMAND_TIMEOUT_S)
    # Act: what a subscriber in the drone's namespace gets
    info = _echo_once(start, 'info', '/uav0/camera/camera_info', 'sensor_msgs/msg/CameraInfo',
                      'width')
    encoding = _echo_once(start, 'image', '/uav0/camera/image_raw', 'sensor_msgs/msg/Image',
                          'encoding')
    frame_id = _echo_once(start, 'frame', '/uav0/camera/image_raw', 'sensor_msgs/msg/Image',
                          'header.frame_id')
    launch.signal_group(signal.SIGINT)
    code = launch.wait(COMMAND_TIMEOUT_S)
    # Assert: the configured size and the drone's frame; both nodes end cleanly
    assert str(WIDTH) in info.split()
    assert 'bgr8' in encoding.split()
    assert 'uav0/camera_optical' in frame_id.split()
    text = launch.text
    assert code == 0, text[-3000:]
    exits = node_exits(text)
    assert set(exits) == {'camera_node-2', 'drone_node-1'}, text[-3000:]
    assert set(exits.values()) == {'finished cleanly'}, unclean_exits(text)
