"""The thin rclpy layer: one node per role (drone, ground_station, ground_client,
autopilot_sim, sim_camera, recorder), topic names and QoS (names.py), message conversions,
parameters into frozen configs, and run_node (spin.py: signals, clean-up). The only package
that imports rclpy and the message packages; it may import every layer below it."""
