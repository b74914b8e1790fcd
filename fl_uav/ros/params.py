"""Declare the config schema as ROS parameters and read it back into a frozen config."""

from __future__ import annotations

import dataclasses
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.exceptions import InvalidTopicNameException
from rclpy.expand_topic_name import expand_topic_name
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.validate_full_topic_name import validate_full_topic_name

from fl_uav.config_reference import key_descriptions
from fl_uav.configschema import ConfigError, build_config, default_flat

_ROS_BUILTIN = {'use_sim_time', 'start_type_description_service'}


def declare_config(node: Node, config_cls: type, node_params: dict[str, Any] | type
                   ) -> tuple[Any, Any]:
    """Declare every schema key (and the node's own keys), then validate all of them.

    ``node_params`` is the node's own parameters: a dict of defaults (returned as a dict,
    unchecked) or a frozen dataclass whose fields are the keys (returned as an instance, built
    and checked like the config: a ConfigError names the key and what is allowed). Such a
    dataclass may have a ``check(config)`` method for rules that need the config (e.g. a
    drone id below ``num_drones``).

    The node must be created with ``automatically_declare_parameters_from_overrides=True`` so
    that keys from parameter files that are not in the schema surface here and fail loudly.

    The config is read once: afterwards a change (``ros2 param set``, the set_parameters
    service) is refused with a reason saying so, instead of being accepted and ignored
    (:func:`refuse_parameter_changes`).
    """
    own_defaults = (default_flat(node_params) if dataclasses.is_dataclass(node_params)
                    else node_params)
    meanings = {**key_descriptions(config_cls), **(key_descriptions(node_params)
                                                    if dataclasses.is_dataclass(node_params)
                                                    else {})}
    for key, default in {**default_flat(config_cls), **own_defaults}.items():
        # The key's meaning from the config reference: `ros2 param describe`, rqt tooltips.
        descriptor = ParameterDescriptor(dynamic_typing=True, description=meanings.get(key, ''))
        if node.has_parameter(key):       # set by a parameter file or -p: describe it too
            node.set_descriptor(key, descriptor)
        elif default not in ((), []):
            # Empty lists have no ROS type; such keys are settable from parameter files only.
            node.declare_parameter(key, _ros_default(default), descriptor)
    values = {name: p.value for name, p in node.get_parameters_by_prefix('').items()
              if name not in _ROS_BUILTIN}
    own = {key: values.pop(key) for key in own_defaults if key in values}
    config = build_config(config_cls, values)
    node.add_on_set_parameters_callback(refuse_parameter_changes)
    if not dataclasses.is_dataclass(node_params):
        return config, own
    own_params = build_config(node_params, own)
    check = getattr(own_params, 'check', None)
    if callable(check):
        try:
            check(config)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return config, own_params


def topic_parameter(node: Node, key: str, topic: str) -> str:
    """``topic`` (the value of parameter ``key``) as the node resolves it (its namespace,
    ``~``); ConfigError naming the key if it is no valid ROS topic name."""
    try:
        full = expand_topic_name(topic, node.get_name(), node.get_namespace())
        validate_full_topic_name(full)
    except (ValueError, InvalidTopicNameException) as exc:
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        reason = first.split(', at /')[0].rstrip(':').split(': ', 1)[-1]   # rcl's own words
        raise ConfigError(f'{key} {topic!r} is no valid ROS topic name: {reason}') from None
    return full


def _ros_default(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value


def refuse_parameter_changes(parameters: list[Parameter]) -> SetParametersResult:
    """Refuse a runtime change of any fl_uav parameter (ROS's own, e.g. use_sim_time, pass):
    the node read them once into a frozen config, so a new value would be accepted and
    silently ignored."""
    ours = sorted(p.name for p in parameters if p.name not in _ROS_BUILTIN)
    if not ours:
        return SetParametersResult(successful=True)
    return SetParametersResult(successful=False, reason=(
        f'{", ".join(ours)}: fl_uav nodes read their parameters once, at start-up, into a '
        f'frozen config; a change while the node runs would be ignored. Restart the node with '
        f'the new value (its parameter file, or --ros-args -p KEY:=VALUE)'))
