"""Declare the config schema as ROS parameters and read it back into a frozen config."""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node

from fl_uav.configschema import build_config, default_flat

_ROS_BUILTIN = {'use_sim_time', 'start_type_description_service'}


def declare_config(node: Node, config_cls: type, node_params: dict[str, Any]) -> tuple[Any, dict]:
    """Declare every schema key (and the node's own keys), then validate all of them.

    The node must be created with ``automatically_declare_parameters_from_overrides=True`` so
    that keys from parameter files that are not in the schema surface here and fail loudly.
    """
    descriptor = ParameterDescriptor(dynamic_typing=True)
    for key, default in {**default_flat(config_cls), **node_params}.items():
        if not node.has_parameter(key) and default not in ((), []):
            # Empty lists have no ROS type; such keys are settable from parameter files only.
            node.declare_parameter(key, _ros_default(default), descriptor)
    values = {name: p.value for name, p in node.get_parameters_by_prefix('').items()
              if name not in _ROS_BUILTIN}
    own = {key: values.pop(key) for key in node_params if key in values}
    return build_config(config_cls, values), own


def _ros_default(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value
