"""fl_uav fleet."""
