"""Flight logic of one simulated vehicle, stepped by hand on a fake clock (no sockets)."""

import math

import pytest
from pymavlink.dialects.v20 import common as mavlink

from fl_uav.autopilot_sim.flight import (
    CommandResult,
    FlightController,
    FlightMode,
    LandedState,
    ParamStore,
)
from fl_uav.autopilot_sim.mission import MissionItem
from fl_uav.autopilot_sim.physics import BatteryModel
from fl_uav.world.geo import GeoOrigin, enu_to_geodetic

ORIGIN = GeoOrigin()
DT_S = 0.05


class _Sim:
    """One controller, a clock and an event list."""

    def __init__(self, battery_fraction: float = 1.0, **params: float) -> None:
        self.t_s = 0.0
        self.events: list[tuple[str, dict]] = []
        battery = BatteryModel(capacity_wh=100.0, energy_wh=100.0 * battery_fraction)
        self.ctl = FlightController(0, ORIGIN, 10.0, -5.0, ParamStore(params), battery,
                                    lambda: self.t_s,
                                    lambda _i, name, details: self.events.append((name, details)))

    def run(self, seconds: float, until=None) -> bool:
        for _ in range(int(round(seconds / DT_S))):
            self.t_s += DT_S
            self.ctl.step(DT_S, self.t_s)
            if until is not None and until():
                return True
        return until is None

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def fly_up(self, altitude_m: float = 10.0) -> None:
        assert self.ctl.arm() == CommandResult.ACCEPTED
        assert self.ctl.takeoff(ORIGIN.alt_amsl_m + altitude_m) == CommandResult.ACCEPTED
        assert self.run(30.0, lambda: self.ctl.mode == FlightMode.HOLD)


def _item(seq: int, command: int, east_m: float = 0.0, north_m: float = 0.0,
          rel_alt_m: float = 10.0, param1: float = 0.0, param2: float = 0.0) -> MissionItem:
    lat_deg, lon_deg, _ = enu_to_geodetic(ORIGIN, east_m, north_m, 0.0)
    return MissionItem(seq, mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT, command, 0, 1, param1,
                       param2, 0.0, math.nan, round(lat_deg * 1e7), round(lon_deg * 1e7),
                       rel_alt_m)


def test_takeoff_without_altitude_uses_mis_takeoff_alt_then_holds():
    # Prepare
    sim = _Sim(MIS_TAKEOFF_ALT=7.0)
    sim.ctl.arm()
    # Execute
    result = sim.ctl.takeoff(math.nan)
    climbing = sim.run(1.0) and sim.ctl.landed_state
    sim.run(10.0, lambda: sim.ctl.mode == FlightMode.HOLD)
    # Assert
    assert result == CommandResult.ACCEPTED
    assert climbing == LandedState.TAKEOFF
    assert sim.ctl.position_enu_m == pytest.approx((10.0, -5.0, 7.0))
    assert sim.ctl.landed_state == LandedState.IN_AIR
    assert sim.names()[:2] == ['armed', 'takeoff']


def test_takeoff_is_denied_when_disarmed_and_disarm_is_denied_in_the_air():
    sim = _Sim()
    assert sim.ctl.takeoff() == CommandResult.DENIED
    sim.fly_up()
    assert sim.ctl.disarm() == CommandResult.DENIED
    assert sim.ctl.armed


def test_armed_on_the_ground_disarms_after_com_disarm_prflt():
    sim = _Sim(COM_DISARM_PRFLT=3.0)
    sim.ctl.arm()
    assert sim.run(2.9, lambda: not sim.ctl.armed) is False
    assert sim.run(0.2, lambda: not sim.ctl.armed)
    assert sim.events[-1] == ('disarmed', {'reason': 'auto_preflight'})


def test_mission_flies_every_waypoint_applies_speed_and_holds_at_the_end():
    # Prepare
    sim = _Sim()
    sim.fly_up()
    mission = [_item(0, mavlink.MAV_CMD_DO_CHANGE_SPEED, param1=1.0, param2=40.0),
               _item(1, mavlink.MAV_CMD_NAV_WAYPOINT, 150.0, 0.0),
               _item(2, mavlink.MAV_CMD_NAV_WAYPOINT, 150.0, 150.0, 20.0),
               _item(3, mavlink.MAV_CMD_NAV_LOITER_TIME, 0.0, 150.0, param1=2.0)]
    sim.ctl.set_mission(mission)
    top_speed = []
    # Execute
    assert sim.ctl.set_mode(FlightMode.MISSION) == CommandResult.ACCEPTED
    done = sim.run(120.0, lambda: top_speed.append(math.hypot(*sim.ctl.velocity_enu_m_s[:2]))
                   or sim.ctl.mission_state == mavlink.MISSION_STATE_COMPLETE)
    sim.run(5.0)
    # Assert: DO_CHANGE_SPEED 40 m/s is capped at MPC_XY_VEL_MAX (15 m/s).
    assert done
    assert sim.ctl.mission_items_reached == [0, 1, 2, 3]
    assert max(top_speed) == pytest.approx(15.0)
    assert sim.ctl.position_enu_m == pytest.approx((0.0, 150.0, 10.0), abs=0.05)
    assert sim.ctl.mode == FlightMode.MISSION and sim.ctl.armed
    assert sim.names().count('mission_item_reached') == 4
    assert 'mission_complete' in sim.names()


def test_mission_from_the_ground_takes_off_first_and_ends_landed():
    # Prepare
    sim = _Sim(MIS_TAKEOFF_ALT=5.0)
    sim.ctl.set_mission([_item(0, mavlink.MAV_CMD_NAV_WAYPOINT, 10.0, 20.0),
                         _item(1, mavlink.MAV_CMD_NAV_LAND, 10.0, 30.0, 0.0)])
    sim.ctl.arm()
    # Execute
    sim.ctl.set_mode(FlightMode.MISSION)
    sim.run(60.0, lambda: not sim.ctl.armed)
    # Assert
    assert sim.ctl.position_enu_m == pytest.approx((10.0, 30.0, 0.0), abs=0.05)
    assert sim.ctl.mission_items_reached == [0, 1]
    names = sim.names()
    assert names.index('takeoff') < names.index('landed') < names.index('disarmed')


def test_leaving_mission_mode_pauses_and_mission_mode_resumes():
    sim = _Sim()
    sim.fly_up()
    sim.ctl.set_mission([_item(0, mavlink.MAV_CMD_NAV_WAYPOINT, 100.0, 0.0)])
    sim.ctl.set_mode(FlightMode.MISSION)
    sim.run(2.0)
    sim.ctl.set_mode(FlightMode.HOLD)
    assert sim.ctl.mission_state == mavlink.MISSION_STATE_PAUSED
    sim.ctl.set_mode(FlightMode.MISSION)
    assert sim.run(60.0, lambda: sim.ctl.mission_state == mavlink.MISSION_STATE_COMPLETE)


def test_critical_battery_triggers_rtl_and_landing_at_home():
    # Prepare: just above BAT_CRIT_THR (7 %), so hovering crosses it; arming allowed.
    sim = _Sim(battery_fraction=0.075, RTL_RETURN_ALT=12.0, BAT_LOW_THR=0.0,
               BAT_EMERGEN_THR=0.0)
    sim.fly_up()
    sim.ctl.reposition(*enu_to_geodetic(ORIGIN, 40.0, 0.0, 10.0))
    # Execute
    sim.run(200.0, lambda: not sim.ctl.armed)
    # Assert
    assert 'battery_critical_rtl' in sim.names()
    assert sim.ctl.position_enu_m[:2] == pytest.approx((10.0, -5.0), abs=1e-6)
    assert not sim.ctl.airborne


class _Texts:
    """A FlightListener that keeps the STATUSTEXTs (severity, text)."""

    def __init__(self) -> None:
        self.texts: list[tuple[int, str]] = []

    def on_state_changed(self) -> None:
        pass

    def on_mission_changed(self) -> None:
        pass

    def on_mission_item_reached(self, seq: int) -> None:
        pass

    def on_status_text(self, severity: int, text: str) -> None:
        self.texts.append((severity, text))

    def on_home_changed(self) -> None:
        pass


def test_battery_levels_in_flight_are_announced_once_with_px4_status_texts():
    # Arrange: airborne just above BAT_LOW_THR (15 %); hovering, then the RTL's long climb
    # drain it through low, critical (7 %) and emergency (5 %)
    sim = _Sim(battery_fraction=0.152, RTL_RETURN_ALT=150.0)
    listener = _Texts()
    sim.ctl.listener = listener
    sim.fly_up(altitude_m=20.0)
    # Act
    sim.run(900.0, lambda: sim.ctl.mode == FlightMode.LAND)
    # Assert: PX4's texts, in order, each once; the failsafe is announced as it acts
    assert listener.texts == [
        (mavlink.MAV_SEVERITY_CRITICAL, 'Low battery'),
        (mavlink.MAV_SEVERITY_CRITICAL, 'Critical battery'),
        (mavlink.MAV_SEVERITY_CRITICAL, 'Failsafe activated'),
        (mavlink.MAV_SEVERITY_EMERGENCY, 'Emergency battery level'),
        (mavlink.MAV_SEVERITY_CRITICAL, 'Failsafe activated')], listener.texts
    assert [n for n in sim.names() if n.startswith('battery_')] == [
        'battery_low', 'battery_critical_rtl', 'battery_emergency_land']


def test_land_descends_slowly_near_the_ground():
    sim = _Sim()
    sim.fly_up(altitude_m=6.0)
    sim.ctl.land()
    sim.run(0.6)
    assert sim.ctl.velocity_enu_m_s[2] == pytest.approx(-1.5)
    sim.run(1.0)
    assert sim.ctl.velocity_enu_m_s[2] == pytest.approx(-0.7)
    assert sim.ctl.landed_state == LandedState.LANDING
    assert sim.run(20.0, lambda: not sim.ctl.armed)


def test_parameter_store_checks_ranges():
    params = ParamStore()
    assert params.set('MPC_XY_CRUISE', 8.0) and params['MPC_XY_CRUISE'] == 8.0
    assert not params.set('MPC_XY_CRUISE', -1.0)
    assert not params.set('NOT_A_PARAM', 1.0)
    with pytest.raises(ValueError, match='RTL_RETURN_ALT'):
        ParamStore({'RTL_RETURN_ALT': math.nan})


@pytest.mark.parametrize('mode', [FlightMode.RTL, FlightMode.LAND])
def test_arming_is_denied_in_return_and_land_as_px4(mode):
    # Arrange: on the ground, disarmed, Return or Land selected (PX4's mode_req_prevent_arming)
    sim = _Sim()
    listener = _Texts()
    sim.ctl.listener = listener
    assert sim.ctl.set_mode(mode) == CommandResult.ACCEPTED
    # Act
    result = sim.ctl.arm()
    # Assert: refused with PX4's texts; Hold arms
    assert result == CommandResult.TEMPORARILY_REJECTED and not sim.ctl.armed
    assert (mavlink.MAV_SEVERITY_CRITICAL,
            'Preflight Fail: Mode not suitable for arming') in listener.texts
    assert sim.ctl.set_mode(FlightMode.HOLD) == CommandResult.ACCEPTED
    assert sim.ctl.arm() == CommandResult.ACCEPTED


@pytest.mark.parametrize('before_rtl, after_disarm', [(FlightMode.HOLD, FlightMode.HOLD),
                                                      (FlightMode.MISSION, FlightMode.MISSION)])
def test_a_landed_return_goes_back_to_the_last_armable_mode_on_disarm(before_rtl,
                                                                      after_disarm):
    # Arrange: a flight in Hold, or ending in Mission, then a return to launch
    sim = _Sim(RTL_RETURN_ALT=12.0)
    sim.fly_up()
    if before_rtl == FlightMode.MISSION:
        sim.ctl.set_mission([_item(0, mavlink.MAV_CMD_NAV_WAYPOINT, 20.0, 0.0)])
        sim.ctl.set_mode(FlightMode.MISSION)
        assert sim.run(60.0, lambda: sim.ctl.mission_state == mavlink.MISSION_STATE_COMPLETE)
    sim.ctl.return_to_launch()
    # Act: landed and auto-disarmed (COM_DISARM_LAND)
    assert sim.run(200.0, lambda: not sim.ctl.armed)
    # Assert: PX4 leaves Return on disarm, so the vehicle can be armed again
    assert sim.ctl.mode == after_disarm
    assert sim.ctl.arm() == CommandResult.ACCEPTED


@pytest.mark.parametrize('delay_s', [0.0, 5.0])
def test_rtl_waits_rtl_land_delay_at_rtl_descend_alt_then_lands(delay_s):
    # Arrange: returning from 20 m, RTL_DESCEND_ALT 8 m
    sim = _Sim(RTL_RETURN_ALT=20.0, RTL_DESCEND_ALT=8.0, RTL_LAND_DELAY=delay_s)
    sim.fly_up(altitude_m=20.0)
    sim.ctl.return_to_launch()
    assert sim.run(60.0, lambda: 'rtl_loiter' in sim.names())
    loiter_s = sim.t_s
    # Act
    assert sim.run(60.0, lambda: sim.ctl.landed_state == LandedState.LANDING)
    # Assert: it waited the delay at 8 m above home before landing, then landed
    assert sim.t_s - loiter_s == pytest.approx(delay_s, abs=2 * DT_S)
    assert dict(sim.events)['rtl_loiter']['up_m'] == pytest.approx(8.0)
    assert sim.ctl.position_enu_m[2] == pytest.approx(8.0, abs=0.2)
    assert sim.run(60.0, lambda: not sim.ctl.armed)


def test_a_negative_rtl_land_delay_loiters_over_home_and_never_lands():
    # Arrange: PX4's RTL_LAND_DELAY -1
    sim = _Sim(RTL_RETURN_ALT=20.0, RTL_DESCEND_ALT=8.0, RTL_LAND_DELAY=-1.0)
    sim.fly_up(altitude_m=20.0)
    # Act
    sim.ctl.return_to_launch()
    sim.run(300.0)
    # Assert
    assert sim.ctl.armed and sim.ctl.airborne and sim.ctl.mode == FlightMode.RTL
    assert sim.ctl.position_enu_m == pytest.approx((10.0, -5.0, 8.0), abs=0.1)


@pytest.mark.parametrize('disarm_land_s', [0.0, -1.0])
def test_com_disarm_land_zero_or_negative_never_disarms_after_landing(disarm_land_s):
    # Arrange: PX4 disables the auto-disarm with COM_DISARM_LAND <= 0
    sim = _Sim(COM_DISARM_LAND=disarm_land_s)
    sim.fly_up(altitude_m=5.0)
    sim.ctl.land()
    assert sim.run(60.0, lambda: not sim.ctl.airborne)
    # Act
    sim.run(60.0)
    # Assert
    assert sim.ctl.armed and 'disarmed' not in sim.names()


def _offboard_then_lost(sim: _Sim) -> None:
    """Airborne in Offboard, then no more set-points: PX4's offboard-loss Hold."""
    sim.fly_up()
    sim.ctl.offboard_setpoint(sim.t_s, velocity_enu_m_s=None)
    assert sim.ctl.set_mode(FlightMode.OFFBOARD, sim.t_s) == CommandResult.ACCEPTED
    assert sim.run(10.0, lambda: sim.ctl.mode == FlightMode.HOLD)


def test_an_offboard_loss_hold_is_a_failsafe_until_the_user_commands_a_mode():
    # Arrange
    sim = _Sim(COM_OF_LOSS_T=1.0)
    sim.fly_up()
    before = sim.ctl.failsafe
    # Act
    _offboard_then_lost(sim)
    in_failsafe_hold = (sim.ctl.mode, sim.ctl.failsafe)
    sim.run(2.0)
    still = sim.ctl.failsafe
    result = sim.ctl.set_mode(FlightMode.HOLD, sim.t_s)     # the operator takes it over
    # Assert: PX4's vehicle_status.failsafe: set by the Hold action, cleared by a mode switch
    assert before is False
    assert in_failsafe_hold == (FlightMode.HOLD, True)
    assert still is True
    assert result == CommandResult.ACCEPTED and sim.ctl.failsafe is False
    assert ('failsafe', {'active': True, 'cause': 'offboard_lost'}) in sim.events


def test_a_critical_battery_return_is_a_failsafe_until_disarmed():
    # Arrange: just above BAT_CRIT_THR (7 %), so hovering crosses it
    sim = _Sim(battery_fraction=0.075, BAT_LOW_THR=0.0, BAT_EMERGEN_THR=0.0)
    sim.fly_up()
    # Act
    sim.run(200.0, lambda: sim.ctl.mode == FlightMode.RTL)
    returning = sim.ctl.failsafe
    sim.run(200.0, lambda: not sim.ctl.armed)
    # Assert
    assert returning is True
    assert sim.ctl.failsafe is False
    assert [d for n, d in sim.events if n == 'failsafe'] == [
        {'active': True, 'cause': 'battery_critical'}, {'active': False, 'reason': 'disarmed'}]


def test_a_return_or_land_commanded_during_a_failsafe_is_a_user_takeover():
    # Arrange
    sim = _Sim(COM_OF_LOSS_T=1.0)
    _offboard_then_lost(sim)
    # Act
    sim.ctl.return_to_launch()
    # Assert
    assert sim.ctl.mode == FlightMode.RTL and sim.ctl.failsafe is False
