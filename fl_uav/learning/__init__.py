"""fl_uav learning."""
