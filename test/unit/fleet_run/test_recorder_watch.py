"""fl-uav sim --record watches its recorder: a recorder killed (by its PID) while the fleet
runs is reported at once and the run's summary says the recording is incomplete."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fl_uav.fleet.recording import READY_LINE, BagWriter, QosOffer
from fl_uav.fleet_run import run as fleet_run
from fl_uav.fleet_run.launch_plan import NodeSpec
from fl_uav.fleet_run.launcher import ProcessGroup, RunningNode, ros_environment
from fl_uav.fleet_run.recorder_watch import RecorderWatch, exit_text, recording_summary
from fl_uav.fleet_run.run import FleetRunOptions, run_fleet
from test.conftest import tiny_fleet_overrides

FLEET_YAML = Path(__file__).resolve().parents[3] / 'config' / 'fleet.yaml'
TIMEOUT_S = 30.0
TOPIC = '/fl/metrics/accuracy'
FLOAT64 = 'std_msgs/msg/Float64'
CDR_ZERO = b'\x00\x01\x00\x00' + bytes(8)     # a Float64 0.0: CDR header, then the double
# A recorder stand-in (no ROS): a real bag with two flushed messages, then it waits to be killed.
FAKE_RECORDER = f"""
import sys, threading
from fl_uav.fleet.recording import BagWriter, QosOffer
writer = BagWriter(sys.argv[1])
writer.add_topic({TOPIC!r}, {FLOAT64!r}, [QosOffer(True, True, 50)])
for _ in range(2):
    writer.write({TOPIC!r}, {CDR_ZERO!r}, 1)
writer.flush()
print({READY_LINE!r}, sys.argv[1], flush=True)
threading.Event().wait()
"""


def _start_fake_recorder(recorder: ProcessGroup, bag: Path) -> RunningNode:
    node = recorder.start_command(NodeSpec('recorder_node', 'recorder'),
                                  [sys.executable, '-c', FAKE_RECORDER, str(bag)])
    deadline = time.monotonic() + TIMEOUT_S
    while READY_LINE not in node.log_path.read_text() and time.monotonic() < deadline:
        assert node.process.poll() is None, node.log_path.read_text()
        time.sleep(0.05)
    assert READY_LINE in node.log_path.read_text()
    return node


def _kill(node: RunningNode) -> None:
    os.kill(node.process.pid, signal.SIGKILL)
    node.process.wait(timeout=TIMEOUT_S)


def test_a_recorder_killed_by_its_pid_is_reported_once_and_its_bag_read_as_far_as_it_goes(
        tmp_path):
    # Arrange: a recorder that flushed two messages, watched from a run that began 42 s ago
    recorder = ProcessGroup(ros_environment(78, tmp_path / 'ros_logs'), tmp_path / 'logs')
    bag = tmp_path / 'bag'
    node = _start_fake_recorder(recorder, bag)
    watch = RecorderWatch(node, bag, run_start_s=100.0)
    assert watch.poll(now_s=110.0) is None          # alive: nothing to say
    # Act
    _kill(node)
    message = watch.poll(now_s=142.0)
    again = watch.poll(now_s=143.0)
    recording = recording_summary(bag, watch, recorder.stop()['recorder'],
                                  echo=lambda _: None)
    # Assert: what died, how, when, its log, that the bag ends there; said once
    assert message is not None and again is None
    assert f'the recorder (PID {node.process.pid}) died 42 s into the run' in message
    assert 'killed by SIGKILL' in message and 'exit code -9' in message
    assert f'The bag {bag} ends there' in message and 'the run goes on' in message
    assert f'Its log: {tmp_path / "logs" / "recorder.log"}' in message
    assert recording['complete'] is False and recording['closed'] is False
    assert recording['topics'] == {TOPIC: {'type': FLOAT64, 'messages': 2}}
    assert 'the recorder died 42 s into the run' in recording['incomplete']
    assert 'the bag was not closed (no metadata.yaml, no MCAP summary)' in recording['incomplete']
    assert '2 messages on 1 topics can be read' in recording['incomplete']
    assert watch.log_tail(recorder.tail) == ''      # a kill leaves nothing in its log


@pytest.mark.parametrize(('code', 'said', 'tail'), [
    ("raise SystemExit('OSError: [Errno 28] No space left on device')",   # a full disk
     'died 7 s into the run, at', 'No space left on device'),
    ('pass',         # exit 0, as fl-uav record ends at a SIGTERM fl-uav sim did not send
     'stopped 7 s into the run, at', ''),
])
def test_a_recorder_that_ended_on_its_own_is_reported_with_how(tmp_path, code, said, tail):
    # Arrange
    recorder = ProcessGroup(ros_environment(78, tmp_path / 'ros_logs'), tmp_path / 'logs')
    node = recorder.start_command(NodeSpec('recorder_node', 'recorder'),
                                  [sys.executable, '-c', code])
    node.process.wait(timeout=TIMEOUT_S)
    watch = RecorderWatch(node, tmp_path / 'bag', run_start_s=0.0)
    # Act
    message = watch.poll(now_s=7.0)
    # Assert
    assert message is not None and said in message
    assert 'exit code 1.' in message if tail else 'it closed the bag' in message
    assert tail in watch.log_tail(recorder.tail)


def _watch_of_a_recorder_still_running(bag: Path, log: Path) -> RecorderWatch:
    process = SimpleNamespace(pid=4242, poll=lambda: None)
    return RecorderWatch(RunningNode(NodeSpec('recorder_node', 'recorder'), process, log), bag,
                         run_start_s=0.0)


def _closed_bag(path: Path) -> Path:
    writer = BagWriter(path)
    writer.add_topic(TOPIC, FLOAT64, [QosOffer(True, True, 50)])
    writer.close()
    return path


def test_a_recorder_that_ran_to_the_end_and_exited_0_made_a_complete_recording(tmp_path):
    # Arrange
    bag = _closed_bag(tmp_path / 'bag')
    watch = _watch_of_a_recorder_still_running(bag, tmp_path / 'recorder.log')
    # Act
    recording = recording_summary(bag, watch, 0, echo=lambda _: None)
    # Assert
    assert recording['complete'] is True and 'incomplete' not in recording
    assert recording['topics'] == {TOPIC: {'type': FLOAT64, 'messages': 0}}


@pytest.mark.parametrize(('code', 'said'), [(1, 'exit code 1'), (None, 'did not exit')])
def test_a_recorder_that_failed_when_stopped_made_an_incomplete_recording(tmp_path, code, said):
    # Arrange
    bag = _closed_bag(tmp_path / 'bag')
    watch = _watch_of_a_recorder_still_running(bag, tmp_path / 'recorder.log')
    # Act
    recording = recording_summary(bag, watch, code, echo=lambda _: None)
    # Assert
    assert recording['complete'] is False
    assert f'the recorder, stopped after the fleet, {said}' in recording['incomplete']


def test_exit_text_names_the_signal_that_killed_a_process():
    # Act / Assert
    assert exit_text(2) == 'exit code 2'
    assert exit_text(-15) == 'killed by SIGTERM, exit code -15'
    assert exit_text(-9) == 'killed by SIGKILL, exit code -9'
    assert exit_text(-9, why=True).startswith('killed by SIGKILL (the OOM killer')


def test_fl_uav_sim_says_at_once_that_its_recorder_died_and_its_summary_says_so(
        tmp_path, port_base, monkeypatch):
    # Arrange: no fleet nodes (the run times out); the recorder is killed by its PID just as
    # the fleet would start
    started: list[RunningNode] = []

    def start_recorder(recorder: ProcessGroup, bag: Path) -> None:
        started.append(_start_fake_recorder(recorder, bag))

    def start_fleet_killing_the_recorder(_group, _specs, _params_file, _prefix=None,
                                         _stopping=None):
        _kill(started[0])

    monkeypatch.setattr(fleet_run, '_start_recorder', start_recorder)
    monkeypatch.setattr(ProcessGroup, 'start', start_fleet_killing_the_recorder)
    out = tmp_path / 'run'
    options = FleetRunOptions(config_files=[FLEET_YAML], out_dir=out, timeout_s=1.0,
                              overrides=tiny_fleet_overrides(1, port_base), record=True)
    lines: list[str] = []
    # Act
    summary = run_fleet(options, echo=lines.append)
    # Assert: said at once (before the run's end), with the warning and the final line
    died = next(i for i, line in enumerate(lines) if 'the recorder (PID' in line)
    timeout = next(i for i, line in enumerate(lines) if line.startswith('timeout after'))
    assert died < timeout
    assert 'killed by SIGKILL' in lines[died] and str(out / 'logs' / 'recorder.log') in lines[died]
    assert summary['recording']['complete'] is False
    assert summary['recording']['topics'] == {TOPIC: {'type': FLOAT64, 'messages': 2}}
    assert any(w.startswith('the recording is incomplete: the recorder died')
               for w in summary['warnings'])
    assert f'the recording in {out / "bag"} is incomplete' in lines[-1]
    assert summary['exit_codes']['recorder'] == -signal.SIGKILL
