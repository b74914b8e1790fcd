"""The boundary to the autopilot: the Vehicle protocol the pilot flies through, its MAVSDK
4.x implementation (the only package that imports mavsdk) and an in-memory fake for tests.
Imports only fl_uav.world (geodesy)."""
