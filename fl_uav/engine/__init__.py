"""The research experiment engine behind ``fl-uav experiment``: the learning code on a
simulated clock, hundreds of drones trained at once, no ROS and no processes.

``experiment.py`` runs the rounds (ExperimentEngine, run_experiment) and builds the resource
planner from the engine's fleet; ``clients.py`` holds the drones' training and uploads,
``checkpoint.py`` checkpoint and resume, ``data.py`` the dataset and its partition;
``results.py`` the run directory's files (rounds.csv, summary.json, plots), ``compare.py``
``fl-uav compare``; ``config.py`` is its config tree; ``express.py`` the FedEx runtime;
``allocator.py`` the process's memory settings; ``faults.py`` the poisoned drones
(``faults.*``). It may import the algorithm layers and
fl_uav.fleet (the world set-up and defaults the fleet uses); nothing below it imports the
engine.
"""
