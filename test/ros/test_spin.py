"""run_node: every node's main. Ends when the node's ``done`` event is set, and always calls
the node's ``shutdown()`` and destroys it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import rclpy
from rcl_interfaces.msg import Log
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from fl_uav.configschema import ConfigError
from fl_uav.fleet_run import launcher
from fl_uav.ros.spin import (
    CONFIG_ERROR_EXIT_STATUS,
    FORWARDED_LOGGERS,
    LAUNCHER_PID_ENV,
    RosLogHandler,
    run_node,
)

pytestmark = pytest.mark.timeout(30)
REPO = Path(__file__).resolve().parents[2]


class _FinishingNode(Node):
    """Sets ``done`` from a timer after a few ticks; records its lifecycle."""

    events: list[str] = []

    def __init__(self) -> None:
        super().__init__('spin_test_node')
        self.done = threading.Event()
        self.ticks = 0
        self.create_timer(0.01, self._tick)

    def _tick(self) -> None:
        self.ticks += 1
        if self.ticks == 3:
            self.events.append('finished')
            self.done.set()

    def shutdown(self) -> None:
        self.events.append('shutdown')

    def destroy_node(self) -> None:
        self.events.append('destroyed')
        super().destroy_node()


class _FailingNode(_FinishingNode):
    def _tick(self) -> None:
        raise KeyboardInterrupt


def test_run_node_returns_when_done_and_cleans_up_in_order():
    # Arrange
    _FinishingNode.events = []
    # Act
    run_node(_FinishingNode, args=[])
    # Assert
    assert _FinishingNode.events == ['finished', 'shutdown', 'destroyed']
    assert not rclpy.ok()


def test_run_node_cleans_up_on_ctrl_c():
    # Arrange
    _FailingNode.events = []
    # Act
    run_node(_FailingNode, args=[])
    # Assert
    assert _FailingNode.events == ['shutdown', 'destroyed']
    assert not rclpy.ok()


class _ShutDownUnderACallbackNode(_FinishingNode):
    """A Ctrl-C while a timer callback runs, as rclpy's signal handler delivers it: the rcl
    context is shut down under the callback (rcl_shutdown, the nodes left alive), whose next
    publish raises RCLError. (A real signal also sets Python's KeyboardInterrupt, which wins
    or loses the race by timing; here it loses, every time.)"""

    def __init__(self) -> None:
        super().__init__()
        self._pub = self.create_publisher(String, 'spin_test_topic', 1)

    def _tick(self) -> None:
        rcl_context = self.context.handle
        with rcl_context:
            rcl_context.shutdown()
        self._pub.publish(String(data='after the signal'))


class _ShutDownUnderACallbackNoDoneNode(_ShutDownUnderACallbackNode):
    """The same, for a node spun by rclpy.spin (no ``done`` event, e.g. autopilot_sim)."""

    def __init__(self) -> None:
        super().__init__()
        del self.done


@pytest.mark.parametrize('factory', ['_ShutDownUnderACallbackNode',
                                     '_ShutDownUnderACallbackNoDoneNode'])
def test_run_node_ends_cleanly_when_the_signal_shuts_the_context_under_a_callback(factory):
    # Arrange: a process of its own (the shut-down rcl context is never cleaned up in it)
    code = (f'from test.ros.test_spin import {factory} as node_class, _FinishingNode\n'
            f'from fl_uav.ros.spin import run_node\n'
            f'run_node(node_class, args=[])\n'
            f'print("events", _FinishingNode.events)\n')
    # Act: used to raise the RCLError out of main, exit status 1 after a Ctrl-C
    ended = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                           timeout=25.0, cwd=REPO)
    # Assert
    assert ended.returncode == 0, ended.stderr[-2000:]
    assert "events ['shutdown', 'destroyed']" in ended.stdout
    assert 'RCLError' not in ended.stderr


def _misconfigured_node() -> Node:
    raise ConfigError("config key 'drone_id': expected an integer, got 'abc'")


def test_run_node_ends_a_misconfigured_node_with_its_error_and_no_traceback():
    # Act
    with pytest.raises(SystemExit) as ended:
        run_node(_misconfigured_node, args=[])
    # Assert
    assert ended.value.code == CONFIG_ERROR_EXIT_STATUS and ended.value.__cause__ is None
    assert not rclpy.ok()


class _PythonLoggingNode(Node):
    """Logs through Python ``logging`` as the fleet's modules do, and listens to /rosout
    until its own lines come back (or ``wait_s`` passes)."""

    heard: list[Log] = []
    wait_s = 10.0

    def __init__(self) -> None:
        super().__init__('python_logging_node')
        self.done = threading.Event()
        self._started_s = time.monotonic()
        self._logged = False
        rosout_qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.create_subscription(Log, '/rosout', self.heard.append, rosout_qos)
        self.create_timer(0.01, self._tick)

    def _tick(self) -> None:
        if not self._logged:
            module_log = logging.getLogger('fl_uav.fleet.spin_probe')
            module_log.info('connected, home %s', (47.0, 8.0))
            module_log.warning('autopilot link lost')
            logging.getLogger('mavsdk').error('Sending message failed')
            self._logged = True
        mine = [m for m in self.heard if m.name == self.get_logger().name]
        if len(mine) >= 3 or time.monotonic() - self._started_s > self.wait_s:
            self.done.set()


def test_python_log_records_of_the_fleet_reach_rosout_once_at_their_severity(caplog):
    # Arrange: pytest's own handler on the root logger stands for any other output
    _PythonLoggingNode.heard = []
    # Act
    with caplog.at_level(logging.DEBUG):
        run_node(_PythonLoggingNode, args=[])
    # Assert: through the node's rclpy logger (console, ~/.ros/log, /rosout)
    mine = [(m.level, m.msg) for m in _PythonLoggingNode.heard
            if m.name == 'python_logging_node']
    assert mine == [(Log.INFO, '[spin_probe] connected, home (47.0, 8.0)'),
                    (Log.WARN, '[spin_probe] autopilot link lost'),
                    (Log.ERROR, '[mavsdk] Sending message failed')], mine
    # ... and not printed a second time through the root logger's handlers
    assert not [r for r in caplog.records if r.name.startswith(FORWARDED_LOGGERS)]
    # ... and the handler is gone once the node has ended
    for name in FORWARDED_LOGGERS:
        logger = logging.getLogger(name)
        assert logger.propagate and logger.level == logging.NOTSET
        assert not [h for h in logger.handlers if isinstance(h, RosLogHandler)]


# A node whose shutdown() prints (as a library might) once its console's reader is gone;
# argv[1] 'run_node': through run_node, 'bare': the same prints without it
_PRINTS_AFTER_READER_GONE = """
import os, sys, threading, time
import rclpy
from rclpy.node import Node
from fl_uav.ros.spin import run_node

def wait_for_reader_gone():
    while os.read(int(sys.argv[2]), 1):
        pass

class Printing(Node):
    def __init__(self):
        super().__init__('printing_node')
        self.done = threading.Event()
        self.create_timer(0.05, self.done.set)

    def shutdown(self):
        wait_for_reader_gone()
        print('returning to launch', flush=True)
        print('landed', file=sys.stderr, flush=True)

if sys.argv[1] == 'run_node':
    run_node(Printing, args=[])
else:
    wait_for_reader_gone()
    print('returning to launch', flush=True)
"""


@pytest.mark.parametrize(('how', 'exit_code'), [('run_node', 0), ('bare', 1)])
def test_a_node_whose_console_reader_is_gone_still_exits_cleanly(tmp_path, how, exit_code):
    # Arrange: the node's console is a pipe; a second pipe tells the node when its reader
    # closed (as ros2 launch ended by SIGTERM leaves its nodes)
    console_read, console_write = os.pipe()
    told_read, told_write = os.pipe()
    process = subprocess.Popen([sys.executable, '-c', _PRINTS_AFTER_READER_GONE, how,
                                str(told_read)], stdout=console_write, stderr=console_write,
                               pass_fds=(told_read,), cwd=REPO)
    os.close(console_write)
    os.close(told_read)
    # Act: the reader goes, then the node prints
    os.close(console_read)
    os.close(told_write)
    code = process.wait(timeout=20)
    # Assert: run_node drops the lost console's lines; a bare print dies of the broken pipe
    assert code == exit_code


_HANGS_IN_SHUTDOWN = """
import threading, time
from rclpy.node import Node
from fl_uav.ros.spin import run_node

class Hanging(Node):
    stop_budget_s = 0.5

    def __init__(self):
        super().__init__('hanging_node')
        self.done = threading.Event()
        self.create_timer(0.05, self.done.set)

    def shutdown(self):
        a_stop_that_hangs()

def a_stop_that_hangs():
    time.sleep(HANG_S)

HANG_S = float(__import__('sys').argv[1])
run_node(Hanging, args=[])
print('ended', flush=True)
"""


@pytest.mark.parametrize(('hang_s', 'dumped'), [(3.0, True), (0.0, False)])
def test_a_stop_longer_than_the_node_budget_prints_where_it_hangs(hang_s, dumped):
    # Act: the node's clean-up takes 3 s (or nothing) against a budget of 0.5 s
    ended = subprocess.run([sys.executable, '-c', _HANGS_IN_SHUTDOWN, str(hang_s)],
                           capture_output=True, text=True, timeout=25.0, cwd=REPO)
    # Assert: the dump names the hanging function; the node still ends by itself, status 0
    assert ended.returncode == 0, ended.stderr[-2000:]
    assert 'ended' in ended.stdout
    assert ('in a_stop_that_hangs' in ended.stderr) is dumped, ended.stderr[-2000:]
    assert ('Timeout (0:00:00.500000)!' in ended.stderr) is dumped


_FINISHES_AFTER_A_SECOND = """
import threading
from rclpy.node import Node
from fl_uav.ros.spin import run_node

class Finishing(Node):
    def __init__(self):
        super().__init__('finishing_node')
        self.done = threading.Event()
        self.create_timer(1.0, self.done.set)

    def shutdown(self):
        print('ran and stopped', flush=True)

run_node(Finishing, args=[])
"""


@pytest.mark.parametrize('launcher_alive', [True, False])
def test_a_node_whose_launcher_ended_while_it_was_starting_does_not_start(launcher_alive):
    # Arrange: fl-uav sim names itself in the node's environment; a launcher that ended
    # while the node's interpreter started leaves the node's parent another process (init)
    launcher_pid = os.getpid() if launcher_alive else os.getpid() + 4_000_000
    env = {**os.environ, LAUNCHER_PID_ENV: str(launcher_pid), 'ROS_DOMAIN_ID': '97',
           'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}
    # Act
    ended = subprocess.run([sys.executable, '-c', _FINISHES_AFTER_A_SECOND], env=env,
                           capture_output=True, text=True, timeout=25.0, cwd=REPO)
    # Assert: with its launcher there it runs; without, it ends at once, saying why
    assert ended.returncode == 0, ended.stderr[-2000:]
    assert ('ran and stopped' in ended.stdout) is launcher_alive
    assert ('the launcher that started this node has ended' in ended.stderr) is not launcher_alive


def test_the_launcher_names_itself_under_the_name_the_nodes_read():
    assert launcher.LAUNCHER_PID_ENV == LAUNCHER_PID_ENV
