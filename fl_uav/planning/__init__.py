"""fl_uav planning."""
