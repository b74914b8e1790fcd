"""fl_uav sim."""
