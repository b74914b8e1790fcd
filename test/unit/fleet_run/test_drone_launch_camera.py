"""drone.launch.py's camera:=opencv: the camera node beside the drone node, in its namespace
(the launch file on stand-ins for launch and launch_ros, as test_launch_plan.py loads it)."""

from __future__ import annotations

import types

import pytest

from fl_uav.configschema import ConfigError
from test.unit.fleet_run.test_launch_plan import REPO, _launch_file_module

DRONE_YAML = str(REPO / 'config' / 'drone.yaml')


def _launch(monkeypatch, **arguments):
    """The Node actions drone.launch.py makes for drone 1 with ``arguments``."""
    made: list = []
    module = _launch_file_module(monkeypatch, 'drone.launch.py', made)
    context = types.SimpleNamespace(launch_configurations={
        'config': DRONE_YAML, 'drone_id': '1', **arguments}, is_shutdown=False)
    module._nodes(context)
    return made


def test_without_a_camera_argument_only_the_drone_node_starts(monkeypatch):
    # Act
    made = _launch(monkeypatch)
    # Assert
    assert [node['executable'] for node in made] == ['drone_node']


def test_camera_opencv_starts_the_camera_node_in_the_drones_namespace(monkeypatch):
    # Act
    made = _launch(monkeypatch, camera='opencv', camera_source='/dev/video0',
                   camera_rate_hz='15', camera_width='320', camera_height='240',
                   camera_loop='false', camera_info_url='')
    # Assert: same namespace (/uav1/camera/image_raw is what the drone reads), the drone's
    # config (camera.fov_deg, status.period_s), the camera's own parameters typed
    (camera,) = [node for node in made if node['executable'] == 'camera_node']
    assert (camera['name'], camera['namespace']) == ('camera', '/uav1')
    config, params = camera['parameters']
    assert config == DRONE_YAML
    assert params == {'source': '/dev/video0', 'rate_hz': 15.0, 'width': 320, 'height': 240,
                      'loop': False}
    assert camera['ros_arguments'] == ['--log-file-name', 'uav1_camera']
    assert sorted(node['executable'] for node in made) == ['camera_node', 'drone_node']


def test_camera_transport_raw_goes_with_the_camera_node(monkeypatch):
    made = _launch(monkeypatch, camera='opencv', camera_source='0', camera_transport='raw')
    assert sorted(node['executable'] for node in made) == ['camera_node', 'drone_node']


def test_a_video_file_source_keeps_the_nodes_defaults_for_what_is_not_given(monkeypatch):
    made = _launch(monkeypatch, camera='opencv', camera_source='/data/flight.mp4',
                   camera_loop='true')
    (camera,) = [node for node in made if node['executable'] == 'camera_node']
    assert camera['parameters'][1] == {'source': '/data/flight.mp4', 'loop': True}


def test_camera_config_gives_the_camera_node_a_parameter_file_of_its_own(monkeypatch,
                                                                        tmp_path):
    # Arrange
    own = tmp_path / 'camera.yaml'
    own.write_text('/**:\n  ros__parameters:\n    reconnect_period_s: 5.0\n')
    # Act
    made = _launch(monkeypatch, camera='opencv', camera_source='rtsp://10.0.0.5/cam',
                   camera_config=str(own))
    # Assert: after the drone's config, before the launch arguments; not the drone's
    by_executable = {node['executable']: node for node in made}
    assert by_executable['camera_node']['parameters'] == [
        DRONE_YAML, str(own), {'source': 'rtsp://10.0.0.5/cam'}]
    assert str(own) not in by_executable['drone_node']['parameters']


@pytest.mark.parametrize(('arguments', 'match'), [
    ({'camera': 'usb'}, r"launch argument camera:='usb': expected one of none, opencv"),
    ({'camera': 'opencv'}, r'camera:=opencv needs camera_source:='),
    ({'camera_source': '/dev/video0'}, r"camera_source:='/dev/video0' needs camera:=opencv"),
    ({'camera': 'opencv', 'camera_source': '0', 'camera_rate_hz': 'fast'},
     r"launch argument camera_rate_hz:='fast': expected a number"),
    ({'camera': 'opencv', 'camera_source': '0', 'camera_width': '-5'},
     r'launch argument camera_width:=-5: must be >= 0'),
    ({'camera': 'opencv', 'camera_source': '0', 'camera_loop': 'maybe'},
     r"launch argument camera_loop:='maybe': expected true or false"),
    ({'camera': 'opencv', 'camera_source': '0', 'camera_config': '/no/camera.yaml'},
     r"launch argument camera_config:='/no/camera.yaml': no such config file"),
    ({'camera': 'opencv', 'camera_source': '0', 'camera_transport': 'compressed'},
     r"launch argument camera_transport:='compressed' with camera:=opencv: .* leave "
     r'camera_transport out'),
    ({'camera': 'opencv', 'camera_source': '0', 'camera_topic': '/usb_cam/image_raw'},
     r"camera_topic:='/usb_cam/image_raw' with camera:=opencv: the camera node publishes raw "
     r'frames on /uav1/camera/image_raw'),
])
def test_a_bad_camera_argument_is_refused_naming_it_before_any_node(monkeypatch, arguments,
                                                                    match):
    made: list = []
    module = _launch_file_module(monkeypatch, 'drone.launch.py', made)
    context = types.SimpleNamespace(launch_configurations={
        'config': DRONE_YAML, 'drone_id': '1', **arguments})
    with pytest.raises(ConfigError, match=match):
        module._nodes(context)
    assert made == []
