"""The research experiment engine behind ``fl-uav experiment``: the learning code on a
simulated clock, hundreds of drones trained at once, no ROS and no processes.

``experiment.py`` runs the rounds; ``config.py`` is its config tree; ``express.py`` the FedEx
runtime; ``resources.py`` builds the resource planner from the engine's fleet; ``allocator.py``
the process's memory settings. It may import the algorithm layers and fl_uav.fleet (the world
set-up and defaults the fleet uses); nothing below it imports the engine.
"""
