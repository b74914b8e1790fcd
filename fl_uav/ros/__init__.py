"""fl_uav ros."""
