"""Decisions made before flying or training: coverage plans and geofences, 2CEOAFL
trajectories, FedEx routes and client placement (express.py), and the per-drone resource
decisions of FedDPQ and LGC (round_resources.py, ``resources.*`` in config.py). ROS-free;
imports the layers below it (learning, compression, aggregation, netmodel, world)."""
