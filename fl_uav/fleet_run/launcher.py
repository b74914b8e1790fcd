"""Start a node set as processes, watch them, and stop every one of them (by PID) on exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fl_uav.fleet_run.launch_plan import NodeSpec

#: how long a node has to exit after SIGTERM, and after SIGKILL
_ESCALATION_WAIT_S = 5.0


@dataclass
class RunningNode:
    """A started node process and its log file."""

    spec: NodeSpec
    process: subprocess.Popen
    log_path: Path

    @property
    def label(self) -> str:
        """namespace/name, for messages."""
        return f'{self.spec.namespace}/{self.spec.name}'.lstrip('/')


def ros_environment(domain_id: int, log_dir: Path, base: Mapping[str, str] | None = None
                    ) -> dict[str, str]:
    """Environment for the fleet's processes: own domain, localhost-only discovery; a node
    that crashes in native code (a signal) writes every thread's Python stack to its log
    (PYTHONFAULTHANDLER)."""
    env = dict(base if base is not None else os.environ)
    env.update({'ROS_DOMAIN_ID': str(domain_id), 'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST',
                'ROS_LOG_DIR': str(log_dir), 'PYTHONUNBUFFERED': '1', 'PYTHONFAULTHANDLER': '1',
                'AMENT_PREFIX_PATH': env.get('AMENT_PREFIX_PATH', sys.prefix)})
    env.pop('ROS_STATIC_PEERS', None)
    return env


class ProcessGroup:
    """The processes one launcher started; it ends only these."""

    def __init__(self, env: Mapping[str, str], log_dir: Path) -> None:
        self._env = dict(env)
        self._log_dir = log_dir
        self.nodes: list[RunningNode] = []

    def start(self, specs: Sequence[NodeSpec], params_file: Path) -> None:
        """Start each spec as ``python -m fl_uav.ros.<executable> --ros-args ...``."""
        for spec in specs:
            self.start_command(spec, [sys.executable, '-m', spec.module,
                                      *spec.ros_args(params_file)])

    def start_command(self, spec: NodeSpec, argv: Sequence[str]) -> RunningNode:
        """Start ``argv`` as the process of ``spec`` (its label names the log file)."""
        self._log_dir.mkdir(parents=True, exist_ok=True)
        label = f'{spec.namespace.strip("/")}_{spec.name}'.strip('_')
        log_path = self._log_dir / f'{label}.log'
        with open(log_path, 'wb') as log:
            process = subprocess.Popen(
                list(argv), env=self._env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        self.nodes.append(RunningNode(spec, process, log_path))
        return self.nodes[-1]

    def exited(self, executable: str | None = None) -> list[RunningNode]:
        """Nodes (of one executable, or all) whose process has ended."""
        return [n for n in self.nodes if n.process.poll() is not None
                and (executable is None or n.spec.executable == executable)]

    def alive(self) -> list[RunningNode]:
        """Nodes still running."""
        return [n for n in self.nodes if n.process.poll() is None]

    def stop(self, grace_s: float = 10.0, *, last: Collection[str] = ()
             ) -> dict[str, int | None]:
        """SIGINT, then SIGTERM, then SIGKILL, each to our own processes only; exit codes.
        Each node has ``grace_s`` or its own ``spec.stop_grace_s``, the longer, to exit after
        SIGINT. The nodes of the executables in ``last`` are stopped only once the others
        have ended: the simulated autopilots outlive the drone nodes, whose shutdown commands
        a return to launch and waits for the landing."""
        _stop_nodes([n for n in self.nodes if n.spec.executable not in last], grace_s)
        _stop_nodes([n for n in self.nodes if n.spec.executable in last], grace_s)
        return {n.label: n.process.poll() for n in self.nodes}

    def tail(self, node: RunningNode, lines: int = 20) -> str:
        """Last lines of a node's log."""
        try:
            text = node.log_path.read_text(errors='replace')
        except OSError:
            return ''
        return '\n'.join(text.splitlines()[-lines:])


def _stop_nodes(nodes: Sequence[RunningNode], grace_s: float) -> None:
    """SIGINT (then the longest of ``grace_s`` and the nodes' ``stop_grace_s`` to exit),
    SIGTERM (5 s), SIGKILL (5 s) to each node's own process group, escalating only for those
    still running."""
    first_wait_s = max([grace_s, *(n.spec.stop_grace_s for n in nodes)])
    for sig, wait_s in ((signal.SIGINT, first_wait_s), (signal.SIGTERM, _ESCALATION_WAIT_S),
                        (signal.SIGKILL, _ESCALATION_WAIT_S)):
        alive = [n for n in nodes if n.process.poll() is None]
        if not alive:
            break
        for node in alive:
            try:
                os.killpg(node.process.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        for node in alive:
            try:
                node.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
