"""One entry point for every node's ``main``: init, spin, and always clean up.

A node that ends by itself (the station and the drones with ``exit_on_finish``) exposes a
``done`` event; the loop then spins in short slices until it is set. A node with a
``shutdown()`` method (stop threads, write logs) gets it called before it is destroyed, on a
normal end, on Ctrl-C and on an external shutdown alike. A node whose config or parameters
are wrong (ConfigError at construction) ends with the error logged, without a traceback, and
exit status CONFIG_ERROR_EXIT_STATUS. A Ctrl-C or SIGTERM ends a node with exit status 0,
also when rclpy's handler shuts the context down under a running callback or wait (an
RCLError then, which used to end the node with exit status 1).

Once a node stops, its clean-up (a drone in flight returns to launch first) is not cut short by
the same Ctrl-C arriving twice: a terminal's Ctrl-C reaches every process of ``ros2 launch``'s
group, and ros2 launch then forwards a SIGINT of its own to each node. So while a node cleans
up, a further SIGINT is that same stop and changes nothing; a SIGTERM (ros2 launch's escalation
after the node's ``sigterm_timeout``, a service manager's, ``fl-uav sim``'s) ends the clean-up
at once, and the process exits 0 without waiting for its worker threads (:class:`StopSignals`,
installed before rclpy.init, whose own handlers call it after shutting the context down).
A node whose parent dies (ros2 launch ends at once on SIGTERM, leaving its processes behind, by
its own account) gets a SIGINT from the kernel and stops as at a Ctrl-C
(:func:`stop_with_parent`), so no node outlives its launcher by more than its clean-up.
A stop that takes longer than the node's ``stop_budget_s`` (default DEFAULT_STOP_BUDGET_S)
prints every thread's stack to stderr (:func:`faulthandler.dump_traceback_later`, from a C
thread that needs neither the GIL nor the main thread), so a stop that hangs says where before
ros2 launch's SIGKILL ends it.

While a node runs, the Python ``logging`` records of the fleet's code (the ``fl_uav.*`` and
``mavsdk`` loggers: pilot, vehicle, agent, MAVSDK's own lines) go to the node's rclpy logger at
the matching severity (:class:`RosLogHandler`), so they reach the console with a timestamp and
level, the node's file in ~/.ros/log and /rosout, once each; the handler is removed when the
node ends.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.logging import LoggingSeverity
from rclpy.node import Node

from fl_uav.configschema import ConfigError

SPIN_SLICE_S = 0.1   # how often a node with a ``done`` event checks it
#: a node's stop (its ``shutdown()``, its destruction, rclpy's shutdown) that takes longer
#: than this prints every thread's stack (nodes with a longer clean-up set ``stop_budget_s``)
DEFAULT_STOP_BUDGET_S = 10.0
CONFIG_ERROR_EXIT_STATUS = 2
#: Python loggers whose records a running node forwards to its rclpy logger.
FORWARDED_LOGGERS = ('fl_uav', 'mavsdk')
_PYTHON_LEVELS = {LoggingSeverity.DEBUG: logging.DEBUG, LoggingSeverity.INFO: logging.INFO,
                  LoggingSeverity.WARN: logging.WARNING, LoggingSeverity.ERROR: logging.ERROR,
                  LoggingSeverity.FATAL: logging.CRITICAL}


def node_logger(node: Node) -> RcutilsLogger:
    """The node's logger while its context is up; after a shutdown (Ctrl-C shuts the context
    down before the node's ``shutdown()`` runs) a logger of the same name plus ``.shutdown``,
    which writes the console and the log file but not /rosout, whose publisher is gone (the
    node's own logger would add "Failed to publish log message to rosout" to every line)."""
    if node.context.ok():
        return node.get_logger()
    return rclpy.logging.get_logger(f'{node.get_logger().name}.shutdown')


class RosLogHandler(logging.Handler):
    """Forwards Python log records to an rclpy logger: DEBUG, INFO, WARNING, ERROR and
    CRITICAL as DEBUG, INFO, WARN, ERROR and FATAL, each line prefixed with the Python
    logger's last name part (``[drone_pilot] ...``), a traceback appended. Before
    :meth:`attach` it writes to the rclpy logger ``fl_uav`` (console and log file)."""

    def __init__(self) -> None:
        super().__init__()
        self._node: Node | None = None
        self._plain = rclpy.logging.get_logger('fl_uav')
        self.setFormatter(logging.Formatter('%(message)s'))

    def attach(self, node: Node | None) -> None:
        """From now on, log as ``node`` (:func:`node_logger`; None: as before attach)."""
        self._node = node

    def emit(self, record: logging.LogRecord) -> None:
        try:
            logger = self._plain if self._node is None else node_logger(self._node)
            text = f'[{record.name.rsplit(".", 1)[-1]}] {self.format(record)}'
            # One call site per severity: rclpy refuses a call site whose severity changes.
            if record.levelno >= logging.CRITICAL:
                logger.fatal(text)
            elif record.levelno >= logging.ERROR:
                logger.error(text)
            elif record.levelno >= logging.WARNING:
                logger.warning(text)
            elif record.levelno >= logging.INFO:
                logger.info(text)
            else:
                logger.debug(text)
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


@contextlib.contextmanager
def forward_python_logs(handler: RosLogHandler,
                        loggers: tuple[str, ...] = FORWARDED_LOGGERS) -> Iterator[None]:
    """``handler`` on each logger in ``loggers`` inside the block, instead of propagating to
    the root logger (no line printed twice); a logger without a level of its own logs from the
    rclpy ``fl_uav`` logger's level (INFO unless ``--log-level`` says otherwise). Everything
    is put back on exit."""
    severity = rclpy.logging.get_logger('fl_uav').get_effective_level()
    level = _PYTHON_LEVELS.get(LoggingSeverity(severity), logging.INFO)
    saved = []
    for name in loggers:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET:
            logger.setLevel(level)
    try:
        yield
    finally:
        for logger, old_level, propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
            logger.propagate = propagate


PR_SET_PDEATHSIG = 1   # linux/prctl.h
#: the PID of the launcher that started this node (set by fleet_run/launcher.py's
#: ProcessGroup, which cannot import this module: the same name is defined there)
LAUNCHER_PID_ENV = 'FL_UAV_LAUNCHER_PID'


class _ReaderSafeStream:
    """sys.stdout or sys.stderr of a node: a write to a console whose reader has gone (ros2
    launch ended by a service manager's SIGTERM, its nodes left to finish their clean-up) is
    dropped and the descriptor pointed at /dev/null, instead of a BrokenPipeError that would
    end the node's return to launch with exit code 1. The node's ROS log file keeps every
    line (rcutils writes the console in C and ignores the broken pipe)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def reader_safe_console() -> Iterator[None]:
    """sys.stdout and sys.stderr as :class:`_ReaderSafeStream` inside; flushed through it
    (a lost reader then points the descriptor at /dev/null) before they are restored, so the
    interpreter's own flush at exit cannot fail either."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ReaderSafeStream(sys.stdout), _ReaderSafeStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams


def stop_with_parent(sig: int = signal.SIGINT) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent ends (Linux
    prctl PR_SET_PDEATHSIG). False: the parent is already gone, so the node must not start:
    it ended before the request took effect, or, for a node ``fl-uav sim`` started (its PID
    in ``LAUNCHER_PID_ENV``), while this interpreter was still starting (the parent is then
    init or a subreaper). True where the kernel cannot be asked (not Linux)."""
    launcher = os.environ.pop(LAUNCHER_PID_ENV, None)   # not handed on to our own children
    if not sys.platform.startswith('linux'):
        return True
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    return os.getppid() == parent and launcher in (None, str(parent))


class Hurried(BaseException):
    """A SIGTERM while the node was already stopping: end the clean-up now."""


class StopSignals:
    """The node's SIGINT and SIGTERM, from before rclpy.init on (rclpy's own handlers shut
    the context down and then call these): the first of either stops the node (a
    KeyboardInterrupt into the spin); once it is stopping, a SIGINT is that same stop and is
    only counted, a SIGTERM raises :class:`Hurried` (main thread only)."""

    def __init__(self) -> None:
        self.stopping = False
        self.signalled = False
        self.repeated_sigints = 0
        self.stop_budget_s = DEFAULT_STOP_BUDGET_S
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        self.signalled = True
        if not self.stopping:
            self.stopping = True
            watch_stop(self.stop_budget_s)
            raise KeyboardInterrupt
        if signum == signal.SIGTERM:
            raise Hurried
        self.repeated_sigints += 1

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle)
                              for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._previous and self.signalled:
            # a node stopped by a signal ends its process: the same Ctrl-C arriving late (a
            # node with a short clean-up ends before ros2 launch's SIGINT) must not kill the
            # interpreter on its way out (exit -2 from SIGINT's default action)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._previous = {}


def watch_stop(budget_s: float) -> None:
    """From now on, if the process is still here after ``budget_s``, print every thread's
    stack to stderr (once; the process goes on). Replaces an earlier watch."""
    with contextlib.suppress(ValueError, RuntimeError, OSError):   # e.g. stderr closed
        faulthandler.dump_traceback_later(budget_s, exit=False)


def _clean_up(node: Node, handler: RosLogHandler, signals: StopSignals) -> None:
    """The node's ``shutdown()`` then its destruction; a SIGTERM meanwhile ends the process at
    once with status 0 (what is left, e.g. a drone's return to launch, is the autopilot's)."""
    signals.stopping = True
    watch_stop(signals.stop_budget_s)
    try:
        shutdown = getattr(node, 'shutdown', None)
        if callable(shutdown):
            shutdown()
        handler.attach(None)
        node.destroy_node()
    except Hurried:
        node_logger(node).warning('SIGTERM while stopping: ending now, without waiting for '
                                  'the clean-up')
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)   # the worker threads (a drone's pilot) would hold the exit


def run_node(factory: Callable[[], Node], args: list[str] | None = None) -> None:
    """Create the node with ``factory`` and run it until shutdown (or until ``node.done``);
    Python log records of the fleet's code go to its rclpy logger meanwhile. A node whose
    launcher has already ended does not start."""
    if not stop_with_parent():
        print('fl_uav: not starting: the launcher that started this node has ended',
              file=sys.stderr, flush=True)
        return
    with reader_safe_console(), StopSignals() as signals:
        rclpy.init(args=args)
        handler = RosLogHandler()
        with forward_python_logs(handler):
            try:
                node = factory()
            except ConfigError as exc:
                rclpy.logging.get_logger('fl_uav').fatal(f'bad configuration: {exc}')
                rclpy.try_shutdown()
                raise SystemExit(CONFIG_ERROR_EXIT_STATUS) from None
            except KeyboardInterrupt:    # stopped while it was being built
                rclpy.try_shutdown()
                return
            handler.attach(node)
            signals.stop_budget_s = float(getattr(node, 'stop_budget_s', DEFAULT_STOP_BUDGET_S))
            done = getattr(node, 'done', None)
            try:
                if done is None:
                    rclpy.spin(node)
                else:
                    while rclpy.ok() and not done.is_set():
                        rclpy.spin_once(node, timeout_sec=SPIN_SLICE_S)
            except (KeyboardInterrupt, ExternalShutdownException):
                pass
            except _rclpy.RCLError:
                # rclpy's signal handler shuts the context down under a running callback
                # (its publish) or spin_once (its wait set): that is the Ctrl-C, not a failure
                if node.context.ok():
                    raise
            finally:
                _clean_up(node, handler, signals)
        rclpy.try_shutdown()
        faulthandler.cancel_dump_traceback_later()
