"""fl_uav compression."""
