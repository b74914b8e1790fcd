"""Restart a node that dies, for the launch files: launch actions, no rclpy.

launch's own ``Node(respawn=True)`` restarts a process whatever its exit code, so a drone node
that ends cleanly at the end of a run (``exit_on_finish``) would be started again. Here a node
is restarted only when it *dies* (a non-zero exit code or a signal: SIGKILL, a crash) while
the launch is not shutting down, after ``delay_s``, at most ``max_restarts`` times; a clean
exit, and the last death once the restarts are used up, go to ``on_final_exit``. The new
process is a new ``Node`` action from the same factory, so it has the same name, namespace
and parameters, and joins the run the others are in (fl_uav.fleet.round_gate).
"""

from __future__ import annotations

from collections.abc import Callable

from launch.actions import DeclareLaunchArgument, LogInfo, RegisterEventHandler, TimerAction
from launch.event_handlers import OnProcessExit
from launch_ros.actions import Node

from fl_uav.fleet_run.launch_plan import Respawn, launch_bool, launch_float, launch_int

#: a process's end the launch file still acts on: (ros2 launch's exit event, launch context)
FinalExit = Callable[[object, object], list | None]


def respawn_arguments(default: bool = True) -> list[DeclareLaunchArgument]:
    """The launch arguments of :class:`Respawn`: respawn, respawn_delay, respawn_max_retries
    (launch's own names)."""
    policy = Respawn(enabled=default)
    return [
        DeclareLaunchArgument('respawn', default_value=str(policy.enabled).lower(),
                              description='restart a drone node that dies (non-zero exit or '
                              'a signal); it rejoins the run in progress'),
        DeclareLaunchArgument('respawn_delay', default_value=f'{policy.delay_s:g}',
                              description='seconds before a dead drone node is restarted'),
        DeclareLaunchArgument('respawn_max_retries', default_value=str(policy.max_restarts),
                              description='restarts per drone node at most'),
    ]


def respawn_policy(args) -> Respawn:
    """:class:`Respawn` from the launch configurations (ConfigError naming a bad one)."""
    default = Respawn()
    return Respawn(enabled=launch_bool('respawn', args.get('respawn', 'true')),
                   delay_s=launch_float('respawn_delay', args.get('respawn_delay',
                                                                  str(default.delay_s))),
                   max_restarts=launch_int('respawn_max_retries', args.get(
                       'respawn_max_retries', str(default.max_restarts))))


def respawning(make_node: Callable[[], Node], policy: Respawn, label: str,
               on_final_exit: FinalExit | None = None, restarts: int = 0) -> list:
    """A node from ``make_node`` and the handler that restarts it when it dies (``label``
    names it in the log line of each restart)."""
    node = make_node()

    def _exited(event, context):
        code = event.returncode
        if (code != 0 and policy.enabled and restarts < policy.max_restarts
                and not context.is_shutdown):
            line = (f'{label} died (exit code {code}): restarting it in {policy.delay_s:g} s '
                    f'(restart {restarts + 1} of at most {policy.max_restarts})')
            return [LogInfo(msg=line),
                    TimerAction(period=policy.delay_s, actions=respawning(
                        make_node, policy, label, on_final_exit, restarts + 1))]
        final = list((on_final_exit(event, context) if on_final_exit is not None else None)
                     or [])
        if code != 0 and policy.enabled and not context.is_shutdown:
            final.insert(0, LogInfo(msg=f'{label} died (exit code {code}) after {restarts} '
                                        f'restarts: not restarted again'))
        return final or None

    return [node, RegisterEventHandler(OnProcessExit(target_action=node, on_exit=_exited))]
