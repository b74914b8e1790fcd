"""Federated learning for UAV fleets over ROS 2 and MAVLink."""

__version__ = '0.1.0'
