"""Start a node set as processes, watch them, and stop every one of them (by PID) on exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fl_uav.fleet_run.launch_plan import NodeSpec, Respawn

#: how long a node has to exit after SIGTERM, and after SIGKILL
_ESCALATION_WAIT_S = 5.0


@dataclass
class RunningNode:
    """A started node process and its log file."""

    spec: NodeSpec
    process: subprocess.Popen
    log_path: Path
    argv: tuple[str, ...] = ()

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


#: set in each started process's environment: its launcher's PID, so a node whose launcher
#: ended while the node's interpreter was still starting (its parent is then init) ends too
#: (fl_uav/ros/spin.py ``stop_with_parent``, which defines the same name: ros/ sits above)
LAUNCHER_PID_ENV = 'FL_UAV_LAUNCHER_PID'


class ProcessGroup:
    """The processes one launcher started; it ends only these."""

    def __init__(self, env: Mapping[str, str], log_dir: Path) -> None:
        self._env = dict(env)
        self._log_dir = log_dir
        self.nodes: list[RunningNode] = []

    def start(self, specs: Sequence[NodeSpec], params_file: Path,
              prefix: Callable[[NodeSpec], Sequence[str]] | None = None,
              stopping: Callable[[], bool] = lambda: False) -> None:
        """Start each spec as ``python -m fl_uav.ros.<executable> --ros-args ...``, after
        ``prefix(spec)`` if given: a wrapper that execs the node in the same process (e.g.
        ``ip netns exec NS env ROS_STATIC_PEERS=...``: its PID stays the node's, which
        :meth:`stop` signals). Once ``stopping()`` is true no further node is started."""
        for spec in specs:
            if stopping():
                return
            self.start_command(spec, [*(prefix(spec) if prefix else ()), sys.executable, '-m',
                                      spec.module, *spec.ros_args(params_file)])

    def start_command(self, spec: NodeSpec, argv: Sequence[str]) -> RunningNode:
        """Start ``argv`` as the process of ``spec`` (its label names the log file)."""
        self._log_dir.mkdir(parents=True, exist_ok=True)
        label = f'{spec.namespace.strip("/")}_{spec.name}'.strip('_')
        log_path = self._log_dir / f'{label}.log'
        self.nodes.append(RunningNode(spec, self._popen(argv, log_path, 'wb'), log_path,
                                      tuple(argv)))
        return self.nodes[-1]

    def restart(self, node: RunningNode, argv: Sequence[str] | None = None) -> RunningNode:
        """Start an ended node's command (or ``argv``) again, in its place; its log goes on
        in the same file after a line that says so."""
        argv = tuple(argv) if argv is not None else node.argv
        with open(node.log_path, 'a') as log:
            log.write(f'--- fl-uav sim: {node.label} exited with code '
                      f'{node.process.returncode}; restarted ---\n')
        again = RunningNode(node.spec, self._popen(argv, node.log_path, 'ab'),
                            node.log_path, node.argv)
        self.nodes[self.nodes.index(node)] = again
        return again

    def _popen(self, argv: Sequence[str], log_path: Path, mode: str) -> subprocess.Popen:
        with open(log_path, mode) as log:
            return subprocess.Popen(list(argv), env={**self._env,
                                                     LAUNCHER_PID_ENV: str(os.getpid())},
                                    stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

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


class Respawner:
    """Restarts the nodes of some executables (the drone nodes, the ground station) of a
    :class:`ProcessGroup` that die, as ``policy`` says (a clean exit is never restarted), and
    keeps the record: each death, its round, and when the node came back. ``restart_argv``
    may give a node's command for its restart (the station's: resume from its checkpoint)."""

    def __init__(self, group: ProcessGroup, policy: Respawn,
                 executables: Collection[str] = ('drone_node',),
                 restart_argv: Callable[[RunningNode], Sequence[str]] | None = None) -> None:
        self._group = group
        self._policy = policy
        self._executables = tuple(executables)
        self._restart_argv = restart_argv
        self._due: dict[int, tuple[float, RunningNode, dict]] = {}   # pid: when, what
        self._seen: set[int] = set()     # pids of the deaths recorded
        #: one per death: node, exit_code, died_s, round (open at the death), restarted_s
        #: (None: not restarted)
        self.deaths: list[dict] = []

    def pending(self, node: RunningNode) -> bool:
        """``node`` died and will be restarted."""
        return node.process.pid in self._due

    def poll(self, now_s: float, round_index: int) -> list[str]:
        """Schedule the restart of each newly dead node, restart those due; lines to show."""
        lines = []
        for node in self._group.exited():
            code = node.process.returncode
            if (node.spec.executable not in self._executables or code == 0
                    or node.process.pid in self._seen):
                continue
            self._seen.add(node.process.pid)
            restarts = sum(d['node'] == node.label and d['restarted_s'] is not None
                           for d in self.deaths)
            death = {'node': node.label, 'exit_code': code, 'died_s': round(now_s, 1),
                     'round': round_index, 'restarted_s': None}
            self.deaths.append(death)
            if self._policy.enabled and restarts < self._policy.max_restarts:
                self._due[node.process.pid] = (now_s + self._policy.delay_s, node, death)
                lines.append(f'{node.label} exited with code {code} in round {round_index}: '
                             f'restarting it in {self._policy.delay_s:g} s (restart '
                             f'{restarts + 1} of at most {self._policy.max_restarts})')
        for key, (due_s, node, death) in list(self._due.items()):
            if now_s >= due_s:
                del self._due[key]
                argv = self._restart_argv(node) if self._restart_argv is not None else None
                self._group.restart(node, argv)
                death['restarted_s'] = round(now_s, 1)
                resumed = argv is not None and tuple(argv) != node.argv
                if resumed:    # the station, resuming from its checkpoint
                    death['resumed'] = True
                lines.append(f'{node.label} restarted' + (', resuming from its checkpoint'
                                                          if resumed else ''))
        return lines
