"""fl_uav world."""
