"""Topic QoS (fl_uav.ros.names): what a viewer (rviz, rqt_plot, ``ros2 topic echo``) and the
fleet's own subscriptions get from each publisher; profiles only, no node."""

from __future__ import annotations

import pytest
from rclpy.qos import LivelinessPolicy, QoSCompatibility, QoSProfile, qos_check_compatible

from fl_uav.ros import names
from test.ros.rosutil import VIEWER_QOS

pytestmark = pytest.mark.ros

# Every topic a viewer opens, by the profile its publisher uses.
VIEWED_PUBLISHERS = {
    'pose, battery, ground truth': names.TELEMETRY_PUB_QOS,
    'camera image': names.IMAGE_PUB_QOS,
    'plan, trajectory': names.PLAN_QOS,
    'markers': names.MARKERS_QOS,
    'metrics': names.METRICS_QOS,
    'diagnostics': names.DIAGNOSTICS_QOS,
}


def _definite(profile: QoSProfile) -> QoSProfile:
    """The profile with liveliness spelled out (system default makes the check a warning)."""
    return QoSProfile(history=profile.history, depth=profile.depth,
                      reliability=profile.reliability, durability=profile.durability,
                      liveliness=LivelinessPolicy.AUTOMATIC)


@pytest.mark.parametrize('what', sorted(VIEWED_PUBLISHERS))
def test_a_viewer_with_default_qos_gets_every_viewed_topic(what):
    # Arrange
    publisher = _definite(VIEWED_PUBLISHERS[what])
    # Act
    compatibility, reason = qos_check_compatible(publisher, VIEWER_QOS)
    # Assert
    assert compatibility == QoSCompatibility.OK, reason


@pytest.mark.parametrize('publisher, subscription', [
    (names.TELEMETRY_PUB_QOS, names.TELEMETRY_QOS), (names.IMAGE_PUB_QOS, names.IMAGE_QOS)])
def test_the_fleets_best_effort_subscriptions_still_match_the_reliable_publishers(
        publisher, subscription):
    # Arrange
    pub, sub = _definite(publisher), _definite(subscription)
    # Act
    compatibility, reason = qos_check_compatible(pub, sub)
    # Assert
    assert compatibility == QoSCompatibility.OK, reason


@pytest.mark.parametrize('frames', [1, 3])
def test_the_station_matches_a_drones_update_publisher_and_gets_its_kept_frames(frames):
    # Arrange: the drone keeps its last update's frames for a station that matches it again
    pub = names.updates_publisher_qos(frames)
    # Act
    compatibility, reason = qos_check_compatible(_definite(pub), _definite(names.UPDATES_QOS))
    # Assert
    assert compatibility == QoSCompatibility.OK, reason
    assert pub.depth == frames and pub.durability == names.UPDATES_QOS.durability
    assert pub.durability.name == 'TRANSIENT_LOCAL'
