"""The harness behind ``fl-uav sim`` and the fleet launch files: starts a fleet of ROS 2
node processes, watches them, and writes the run's summary.

``launch_plan.py`` turns the fleet config into node specs (shared with launch/*.launch.py);
``launcher.py`` starts and stops process groups; ``run.py`` is ``fl-uav sim``;
``recorder_watch.py`` watches the recorder. It may import fl_uav.fleet, fl_uav.autopilot_sim's
config and the algorithm layers; only fl_uav.ros and the CLI import it.
"""
