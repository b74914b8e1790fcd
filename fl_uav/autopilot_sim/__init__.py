"""The PX4 stand-in: a MAVLink 2 autopilot simulator that an unmodified MAVSDK client flies.

N multirotors in one asyncio process, each on its own UDP port as PX4 SITL (``autopilot.py``
runs them; ``link.py`` speaks the protocol; ``flight.py`` is the flight controller and its
modes; ``mission.py`` and ``fence.py`` the mission and geofence items; ``physics.py`` motion
and battery; ``stop_hold.py`` landing the vehicles before a stop; ``config.py`` its settings).
It imports only fl_uav.world (geodesy) and pymavlink: it knows nothing of the fleet it serves,
as PX4 does not.
"""
