"""Message conversions that need no node: the station's heartbeat."""

from __future__ import annotations

import pytest
from diagnostic_msgs.msg import DiagnosticArray

from fl_uav.fleet.drone_status import StatusReport
from fl_uav.fleet.station_heartbeat import Heartbeat, StationPhase
from fl_uav.ros.conversions import heartbeat_to_msg, msg_to_heartbeat, status_to_msg

pytestmark = pytest.mark.ros
BEAT = Heartbeat('a1b2', 3, 10, StationPhase.PLANNING, 42.0, 1.0)


def test_a_heartbeat_survives_its_message():
    # Act
    msg = heartbeat_to_msg(BEAT, 1700000000.5)
    # Assert: one status an operator can read, and the same heartbeat back
    assert len(msg.status) == 1 and msg.header.stamp.sec == 1700000000
    assert msg.status[0].message == 'run a1b2 round 3/10: planning for 42 s'
    assert msg_to_heartbeat(msg) == BEAT


@pytest.mark.parametrize('msg, message', [
    (DiagnosticArray(), r'heartbeat message with 0 statuses, not 1'),
    (status_to_msg(StatusReport('fl_uav: uav0', 'uav0', 0, 'round 1 waiting', ()), 0.0),
     r"status name 'fl_uav: uav0' is not"),
])
def test_another_message_on_the_topic_is_refused_naming_why(msg, message):
    with pytest.raises(ValueError, match=message):
        msg_to_heartbeat(msg)
