"""A closed round's numbers, for live plots and the metrics topic.

The ground station publishes them twice per closed round: as one DiagnosticStatus
``fl_uav/round`` on ``/fl/metrics`` (text: ``ros2 topic echo``, Foxglove's raw view) and each
number alone as std_msgs/Float64 on ``/fl/metrics/<key>`` (rqt_plot ``/fl/metrics/accuracy/data``,
Foxglove's Plot ``/fl/metrics/accuracy.data``, PlotJuggler), which a plot can draw: a
DiagnosticStatus carries strings only. ROS-free: the node converts.
"""

from __future__ import annotations

from fl_uav.fleet.ground_station import RoundRecord

ROUND_METRIC_KEYS = ('round', 'accuracy', 'loss', 'participants', 'late', 'rejected',
                     'bytes_up', 'bytes_down_per_drone')
"""The numbers of a round, in the order the text shows them: the round's index, the global
model's test accuracy (0..1) and loss after it, the drones whose update was applied, the drones
late or missing, the frames rejected, the bytes all drones uploaded and the bytes of the
global model each drone received."""
TEXT_DECIMALS = 4     # accuracy and loss in the text; the Float64 topics carry them unrounded


def round_metrics(record: RoundRecord) -> dict[str, float]:
    """The round's numbers as floats, keyed as :data:`ROUND_METRIC_KEYS` (NaN accuracy and
    loss stay NaN: a plot leaves a gap)."""
    return {
        'round': float(record.round_index),
        'accuracy': float(record.accuracy),
        'loss': float(record.loss),
        'participants': float(len(record.participants)),
        'late': float(len(record.late_or_missing)),
        'rejected': float(sum(record.rejected.values())),
        'bytes_up': float(sum(record.bytes_up.values())),
        'bytes_down_per_drone': float(record.bytes_down_per_drone),
    }


def metrics_text(values: dict[str, float]) -> dict[str, str]:
    """The numbers as the text status shows them: whole numbers without a decimal point, the
    others rounded to TEXT_DECIMALS."""
    return {key: (str(int(value)) if value.is_integer() else str(round(value, TEXT_DECIMALS)))
            for key, value in values.items()}
