"""Point-mass kinematics and the battery model, without any networking."""

import math

import numpy as np
import pytest

from fl_uav.autopilot_sim.physics import (
    BatteryModel,
    KinematicState,
    MotionLimits,
    step_toward,
    turn_toward,
)

LIMITS = MotionLimits(horizontal_speed_m_s=5.0, climb_speed_m_s=3.0, descent_speed_m_s=1.5,
                      horizontal_accel_m_s2=3.0, yaw_rate_rad_s=math.radians(45.0))


def _fly(state, target, seconds, dt_s=0.02, limits=LIMITS):
    speeds = []
    for _ in range(int(round(seconds / dt_s))):
        step_toward(state, np.asarray(target, dtype=float), dt_s, limits)
        speeds.append(state.horizontal_speed_m_s)
    return speeds


def test_horizontal_speed_is_capped_and_the_vehicle_stops_on_target():
    # Prepare
    state = KinematicState.at_rest(0.0, 0.0, 10.0)
    # Execute
    speeds = _fly(state, (200.0, 0.0, 10.0), 60.0)
    # Assert
    assert max(speeds) == pytest.approx(5.0)
    assert state.position_enu_m == pytest.approx([200.0, 0.0, 10.0])
    assert state.horizontal_speed_m_s == 0.0


def test_acceleration_is_limited():
    state = KinematicState.at_rest(0.0, 0.0, 10.0)
    speeds = _fly(state, (200.0, 0.0, 10.0), 1.0)
    assert speeds[-1] == pytest.approx(3.0, abs=0.07)


def test_climb_and_descent_rates():
    # Prepare
    state = KinematicState.at_rest(0.0, 0.0, 0.0)
    # Execute / Assert: 3 m/s up, 1.5 m/s down.
    _fly(state, (0.0, 0.0, 30.0), 5.0)
    assert state.position_enu_m[2] == pytest.approx(15.0)
    _fly(state, (0.0, 0.0, 0.0), 4.0)
    assert state.position_enu_m[2] == pytest.approx(9.0)


def test_never_below_ground():
    state = KinematicState.at_rest(0.0, 0.0, 1.0)
    _fly(state, (0.0, 0.0, -50.0), 5.0)
    assert state.position_enu_m[2] == 0.0


@pytest.mark.parametrize(('target', 'yaw_deg'), [((0.0, 100.0), 90.0), ((-100.0, 0.0), 180.0),
                                                  ((0.0, -100.0), -90.0)])
def test_vehicle_turns_toward_its_direction_of_flight(target, yaw_deg):
    # Prepare: facing east.
    state = KinematicState.at_rest(0.0, 0.0, 10.0, yaw_rad=0.0)
    # Execute
    _fly(state, (*target, 10.0), 6.0)
    # Assert
    assert math.degrees(state.yaw_rad) % 360.0 == pytest.approx(yaw_deg % 360.0, abs=1e-6)


def test_yaw_rate_is_limited():
    state = KinematicState.at_rest(0.0, 0.0, 10.0, yaw_rad=0.0)
    _fly(state, (-100.0, 0.0, 10.0), 1.0)
    assert abs(math.degrees(state.yaw_rad)) == pytest.approx(45.0, abs=1e-6)
    assert turn_toward(0.0, math.radians(-170.0), math.radians(20.0)) == pytest.approx(
        math.radians(-20.0))


def test_battery_drains_at_the_state_dependent_power():
    # Prepare
    battery = BatteryModel(capacity_wh=100.0, energy_wh=100.0, hover_power_w=250.0,
                           idle_power_w=5.0, max_speed_power_w=350.0, max_speed_m_s=15.0)
    idle_w = battery.power_for(armed=False, airborne=False, horizontal_speed_m_s=0.0,
                               climb_rate_m_s=0.0)
    ground_w = battery.power_for(True, False, 0.0, 0.0)
    hover_w = battery.power_for(True, True, 0.0, 0.0)
    fast_w = battery.power_for(True, True, 15.0, 0.0)
    full_v = battery.voltage_v
    # Execute: 36 s of hover is 2.55 Wh.
    for _ in range(360):
        battery.drain(0.1, hover_w)
    # Assert
    assert idle_w < ground_w < hover_w < fast_w
    assert (hover_w, fast_w) == (255.0, 355.0)
    assert battery.remaining == pytest.approx(1.0 - 2.55 / 100.0)
    assert battery.consumed_wh == pytest.approx(2.55)
    assert battery.open_circuit_voltage_v < 4 * 4.2
    assert battery.voltage_v < full_v
    assert battery.time_remaining_s == pytest.approx(97.45 * 3600.0 / 255.0)
