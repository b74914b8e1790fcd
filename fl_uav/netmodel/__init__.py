"""fl_uav netmodel."""
