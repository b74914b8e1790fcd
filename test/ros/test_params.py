"""A node's fl_uav parameters are read once into a frozen config: a runtime change (what
`ros2 param set` sends, the node's set_parameters service) is refused with a reason, instead of
being accepted and ignored; ROS's own parameters still change."""

from __future__ import annotations

import pytest
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters

from fl_uav.config_reference import key_descriptions
from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet_run.launch_plan import write_params_file
from fl_uav.ros.sim_camera_node import SimCameraNode
from test.conftest import tiny_fleet_overrides
from test.ros.rosutil import node_with_probe, spin_until

pytestmark = pytest.mark.ros


def _set(executor, client, name: str, value: ParameterValue):
    future = client.call_async(SetParameters.Request(parameters=[
        ParameterMsg(name=name, value=value)]))
    assert spin_until(executor, future.done, 10.0), 'no answer from set_parameters'
    return future.result().results[0]


def test_ros2_param_set_is_refused_with_a_reason_and_changes_nothing(tmp_path):
    # Arrange: the camera simulator (no torch, quick to start) and a parameter client
    params = write_params_file(tiny_fleet_overrides(1, 14540), tmp_path / 'params.yaml')
    with node_with_probe(SimCameraNode, ['--ros-args', '--params-file', str(params)]) as (
            node, probe, executor):
        client = probe.create_client(SetParameters, f'{node.get_fully_qualified_name()}'
                                     '/set_parameters')
        assert spin_until(executor, client.service_is_ready, 10.0)
        before = node.get_parameter('rounds.num_rounds').value
        # Act
        ours = _set(executor, client, 'rounds.num_rounds',
                    ParameterValue(type=ParameterType.PARAMETER_INTEGER,
                                   integer_value=before + 7))
        ros_own = _set(executor, client, 'use_sim_time',
                       ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=False))
        # Assert
        assert not ours.successful
        assert 'rounds.num_rounds' in ours.reason and 'Restart the node' in ours.reason
        assert node.get_parameter('rounds.num_rounds').value == before
        assert ros_own.successful, ros_own.reason


def test_every_parameter_carries_its_meaning_from_the_config_reference(tmp_path):
    # Arrange: one key set by the parameter file, one left at its default
    overrides = tiny_fleet_overrides(1, 14540)
    params = write_params_file(overrides, tmp_path / 'params.yaml')
    meanings = key_descriptions(FleetConfig)
    from_file = 'num_drones'
    default = next(k for k in meanings if k not in overrides and meanings[k])
    assert from_file in overrides and meanings[from_file]
    with node_with_probe(SimCameraNode, ['--ros-args', '--params-file', str(params)]) as (
            node, _, _):
        # Act
        described = {key: node.describe_parameter(key) for key in (from_file, default)}
    # Assert: what `ros2 param describe` and rqt show
    for key, descriptor in described.items():
        assert descriptor.description == meanings[key], key
