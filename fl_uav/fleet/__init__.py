"""The fleet's two roles as plain Python, no rclpy: DroneAgent (camera samples, onboard
buffer, local training, compressed signed uploads) and GroundStation (rounds, deadlines,
aggregation, plans), the drone's pilot over the Vehicle interface, the station's resource
planner and watchdogs, and the fleet's config tree (config.py, read by every node). Imports
the algorithm layers, fl_uav.vehicle and fl_uav.autopilot_sim's config; the nodes in
fl_uav.ros wrap it."""
