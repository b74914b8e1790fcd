"""Models, datasets and loaders, the onboard buffer, local training (plain and vectorised over
many drones), the client algorithms of the papers, pruning and the data top-up: the torch
models live here. ROS-free; imports fl_uav.compression (a model's fingerprint) and
fl_uav.aggregation (the update metadata keys)."""
