"""fl_uav vehicle."""
