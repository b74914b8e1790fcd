"""ground_station node: publishes the global model and plans, collects updates, aggregates.

Every ``status.heartbeat_period_s`` it publishes its heartbeat (run, round, phase and seconds
in it: fl_uav/fleet/station_heartbeat.py; with keys signed with ``station.key``:
fl_uav/fleet/heartbeat_auth.py) on /fl/station_heartbeat from a timer on the executor thread;
closing a round and the resource planner run on the worker thread, so the beats go on while it
aggregates or plans, and stop when the process hangs. No executor callback waits for the lock
the worker holds while it aggregates: an update arriving meanwhile goes to a bounded inbox
(fl_uav/fleet/update_inbox.py) that the worker takes in right after the close.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Path
from rclpy.node import Node
from std_msgs.msg import Float64, UInt8MultiArray
from visualization_msgs.msg import MarkerArray

from fl_uav.fleet import station_checkpoint
from fl_uav.fleet.config import FleetConfig, GroundStationNodeParams
from fl_uav.fleet.ground_station import GroundStation, RoundRecord
from fl_uav.fleet.heartbeat_auth import heartbeat_signer
from fl_uav.fleet.keys import require_keys
from fl_uav.fleet.round_metrics import ROUND_METRIC_KEYS, metrics_text, round_metrics
from fl_uav.fleet.run_log import RunLog
from fl_uav.fleet.station_heartbeat import PhaseClock, StationPhase
from fl_uav.fleet.station_status import station_status
from fl_uav.fleet.update_inbox import (
    INBOX_FULL,
    UpdateInbox,
    inbox_capacity_bytes,
    inbox_capacity_frames,
)
from fl_uav.fleet.world_setup import fleet_world
from fl_uav.ros import names
from fl_uav.ros.conversions import (
    bytes_to_msg,
    heartbeat_to_msg,
    metrics_to_msg,
    msg_to_bytes,
    plan_to_path,
)
from fl_uav.ros.diagnostics import publish_status, status_publisher
from fl_uav.ros.markers import station_markers
from fl_uav.ros.params import declare_config
from fl_uav.ros.spin import run_node
from fl_uav.world.dataset import heldout_set, to_model_input

NODE_PARAMS = GroundStationNodeParams


class GroundStationNode(Node):
    """Thin wrapper around :class:`GroundStation`; time is the node's wall clock."""

    def __init__(self) -> None:
        super().__init__(names.GROUND_STATION_NODE_NAME,
                         automatically_declare_parameters_from_overrides=True)
        self.config, self.own = declare_config(self, FleetConfig, NODE_PARAMS)
        cfg: FleetConfig = self.config
        require_keys(cfg.security, 'the ground station')   # or security.insecure: true
        images, labels = heldout_set(fleet_world(cfg), cfg.camera,
                                     n=cfg.rounds.eval_samples, seed=cfg.rounds.eval_seed)
        self.station = GroundStation(cfg, to_model_input(images, cfg.learning.input_px), labels)
        resumed = self._resume()
        self.log = RunLog(self.own.output_dir or None)
        self._lock = threading.Lock()
        self._inbox = UpdateInbox(inbox_capacity_frames(cfg.num_drones), inbox_capacity_bytes(
            cfg.num_drones, sum(int(np.size(w)) for w in self.station.weights.values())))
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix='aggregate')
        self._closing = False
        self._started_s = self._now()
        self._finished_s: float | None = None
        self.done = threading.Event()
        self.phase = PhaseClock(self.station.run_id, cfg.rounds.num_rounds,
                                cfg.status.heartbeat_period_s, self._started_s)
        self._heartbeat_signer = heartbeat_signer(self.station.auth)   # None: no keys
        self._heartbeat_pub = self.create_publisher(DiagnosticArray,
                                                    names.STATION_HEARTBEAT_TOPIC,
                                                    names.STATION_HEARTBEAT_QOS)
        self.create_timer(cfg.status.heartbeat_period_s, self._beat)
        self._model_pub = self.create_publisher(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC,
                                                names.GLOBAL_MODEL_QOS)
        self._metrics_pub = self.create_publisher(DiagnosticArray, names.METRICS_TOPIC,
                                                  names.METRICS_QOS)
        self._metric_pubs = {key: self.create_publisher(Float64, names.metric_topic(key),
                                                        names.METRICS_QOS)
                             for key in ROUND_METRIC_KEYS}
        self._markers_pub = self.create_publisher(MarkerArray, names.MARKERS_TOPIC,
                                                  names.MARKERS_QOS)
        self._regions = fleet_world(cfg).regions
        self._plan_pubs = {d: self.create_publisher(Path, names.drone_topic(d, names.PLAN_TOPIC),
                                                    names.PLAN_QOS)
                           for d in self.station.drone_ids}
        self.create_subscription(UInt8MultiArray, names.UPDATES_TOPIC, self._on_update,
                                 names.UPDATES_QOS)
        self._ground_clients = (range(cfg.ground_clients.num_clients) if self.station.express
                         else range(0))
        self.create_timer(self.own.tick_period_s, self._tick)
        self._status_pub = status_publisher(self)
        self.create_timer(cfg.status.period_s, self._publish_status)
        if resumed is not None:
            self.get_logger().info(
                f'resumed run {self.station.run_id} from {resumed} after round '
                f'{len(self.station.records)} (accuracy {self.station.records[-1].accuracy:.3f}'
                f'): round {self.station.next_round_index} next' if self.station.records
                else f'resumed run {self.station.run_id} from {resumed}: no round closed')
            if self.station.finished:
                self._finish()
        self.get_logger().info(
            f'ground station: run {self.station.run_id}, {cfg.num_drones} drones, '
            f'{cfg.rounds.num_rounds} rounds, '
            f'initial accuracy {self.station.initial_accuracy:.3f}'
            + (f', FedEx tours {self.station.express.summary()["tours"]}'
               if self.station.express else ''))

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _resume(self) -> str | None:
        """With ``resume``, the station takes over the checkpoint's run (ConfigError, one
        line, when it cannot: the node ends); the checkpoints of this run go to output_dir."""
        self._checkpoint_snapshot = station_checkpoint.plugin_snapshot(self.station)
        self._checkpoint_off = station_checkpoint.unsupported(self.station)
        if not self.own.resume:
            return None
        station_checkpoint.resume(self.station, self.own.resume)
        self.station.plan_pending()     # a planner the checkpoint had built, built again
        return str(station_checkpoint.checkpoint_path(self.own.resume))

    def _write_checkpoint(self) -> None:
        """DIR/station_checkpoint.npz after a closed round (call with ``self._lock``); a
        failure is logged, the run goes on."""
        if not self.own.output_dir or self._checkpoint_off:
            return
        try:
            station_checkpoint.save(self.station, self.own.output_dir,
                                    self._checkpoint_snapshot)
        except (OSError, ValueError) as exc:
            self.get_logger().error(f'station checkpoint not written: {exc}')

    def _on_update(self, msg: UInt8MultiArray) -> None:
        """Into the inbox, then taken in now unless the worker holds the lock (aggregating):
        the executor, and so the heartbeat, never waits for it."""
        if not self._inbox.put(msg_to_bytes(msg)):
            self.get_logger().warning(
                f'rejected update frame: {INBOX_FULL} ({len(msg.data)} bytes; '
                f'{self._inbox.capacity_frames} frames or {self._inbox.capacity_bytes} bytes wait '
                f'at most while the round closes)')
        self._take_updates_if_free()

    def _take_updates_if_free(self) -> None:
        if self._lock.acquire(blocking=False):
            try:
                self._take_updates()
            finally:
                self._lock.release()

    def _take_updates(self) -> None:
        """The inbox's frames to the station, in arrival order (call with ``self._lock``)."""
        frames, refused = self._inbox.take_all()
        if refused:
            self.station.count_rejected(INBOX_FULL, refused)
        for frame in frames:
            verdict = self.station.receive_update(frame)
            if verdict.accepted:
                self.get_logger().info(f'update from drone {verdict.sender} accepted')
            else:
                self.get_logger().warning(
                    f'rejected update frame (sender {verdict.sender}): {verdict.reason}'
                    + (f' ({verdict.detail})' if verdict.detail else ''))

    def _beat(self) -> None:
        """The heartbeat: never waits for the station's lock (the worker may hold it)."""
        now = self._now()
        beat = self.phase.beat(now)
        signer = self._heartbeat_signer
        self._heartbeat_pub.publish(heartbeat_to_msg(
            beat, now, None if signer is None else signer.sign(beat)))

    def _tick(self) -> None:
        now = self._now()
        if self._closing:   # the worker closes the round under the lock: do not wait for it
            self._take_updates_if_free()     # (it plans off the lock: updates go in)
            return
        with self._lock:
            self._take_updates()
            if self._closing:
                return
            if self.station.finished:
                self._linger(now)
                return
            if not self.station.round_open:
                ready = (self._everyone_listens()
                         or now - self._started_s >= self.config.rounds.start_timeout_s)
                if ready:
                    self._open_round(now)
                return
            if self.station.should_close(now):
                self.phase.enter(StationPhase.AGGREGATING, now)
                self._closing = True
                self._worker.submit(self._close_round, now)

    def _publish_status(self) -> None:
        """The station's status on /diagnostics, beside the drones'; skipped while the worker
        aggregates under the lock (the executor, and so the heartbeat, must not wait for it:
        the heartbeat says 'aggregating' meanwhile)."""
        now = self._now()
        listening = self._drones_listening()
        if not self._lock.acquire(blocking=False):
            return
        try:
            publish_status(self, self._status_pub,
                           lambda: station_status(self.station, listening, now), now)
        finally:
            self._lock.release()

    def _everyone_listens(self) -> bool:
        """Every drone subscribes to the global model (and, in express mode, every ground
        client to its delivery topic, so no UAV hovers over a client that cannot hear it).

        Counted by who subscribes, not how many: a viewer (``ros2 topic echo``, rviz, a
        Foxglove bridge) is no drone, so only drone i's own node (see :meth:`_listening`)
        counts for drone i."""
        if len(self._drones_listening()) < len(self.station.drone_ids):
            return False
        return all(self._listening(names.ground_client_topic(j, names.EXPRESS_MODEL_TOPIC),
                                   names.GROUND_CLIENT_NODE_NAME,
                                   names.ground_client_namespace(j))
                   for j in self._ground_clients)

    def _drones_listening(self) -> list[int]:
        """The drones whose node subscribes to the global model now."""
        subscribers = self._subscribers(names.GLOBAL_MODEL_TOPIC)
        return [d for d in self.station.drone_ids
                if (names.DRONE_NODE_NAME, names.drone_namespace(d)) in subscribers]

    def _listening(self, topic: str, node_name: str, namespace: str) -> bool:
        """A node ``node_name`` in ``namespace`` (a drone: 'drone' in /uav<i>) subscribes to
        ``topic``."""
        return (node_name, namespace) in self._subscribers(topic)

    def _subscribers(self, topic: str) -> set[tuple[str, str]]:
        """(node name, namespace) of every subscriber of ``topic``, from one query of the ROS
        graph (as DDS discovery sees it): one query per tick, not one per drone."""
        return {(info.node_name, info.node_namespace)
                for info in self.get_subscriptions_info_by_topic(topic)}

    def _open_round(self, now: float) -> None:
        opening = self.station.open_round(now)
        self.phase.enter(StationPhase.ROUND_OPEN, now, opening.round_index)
        for drone, plan in opening.plans.items():
            self._plan_pubs[drone].publish(plan_to_path(plan, names.MAP_FRAME, now))
        self._model_pub.publish(bytes_to_msg(opening.frame))
        self._write_knobs()
        self._markers_pub.publish(station_markers(
            opening.plans, self._regions, names.MAP_FRAME, now, self.station.express,
            self.config.express.altitude_m))
        self.get_logger().info(f'round {opening.round_index} open '
                               f'({len(opening.frame)} bytes, deadline in '
                               f'{opening.deadline_s - now:.0f} s)')

    def _close_round(self, now: float) -> None:
        """Close the round, report it (progress.jsonl, /fl/metrics, the log), then build the
        resource planner; the next round opens only after all of it (``_closing``), so its
        'open' line never comes before this round's 'closed' line."""
        try:
            with self._lock:
                try:
                    record = self.station.close_round(now)
                except Exception as exc:  # noqa: BLE001 - the station must keep serving
                    self.get_logger().error(f'closing the round failed: {exc!r}')
                    return
                finally:
                    self._take_updates()    # those that came while it aggregated: late
                self._write_checkpoint()
            self._report_round(record)
            # The resource planner (seconds per drone for lgc_ddpg) off the lock: updates and
            # ticks are served meanwhile; the next round opens once it is built. None is
            # needed after the last round.
            if not self.station.finished:
                self.phase.enter(StationPhase.PLANNING, self._now())
                try:
                    self.station.plan_pending()
                except Exception as exc:  # noqa: BLE001 - the run goes on without knobs
                    self.get_logger().error(f'resource planning failed: {exc!r}')
            with self._lock:    # the tick thread writes it too, when it opens a round
                self._write_knobs()
            if self.station.finished:
                self._finish()
            self.phase.enter(StationPhase.FINISHED if self.station.finished
                             else StationPhase.WAITING, self._now())
        finally:
            with self._lock:
                self._closing = False

    def _report_round(self, record: RoundRecord) -> None:
        """A closed round in progress.jsonl, on /fl/metrics and in the log."""
        row = record.to_dict()
        self.log.append_round(row)
        for warning in record.warnings:   # a diverged model or one at chance level
            self.get_logger().warning(warning)
        if record.knobs_rejected:
            self.get_logger().warning(f'round {record.round_index}: drones rejected resource '
                                      f'knobs {record.knobs_rejected}')
        values = round_metrics(record)
        self._metrics_pub.publish(metrics_to_msg('fl_uav/round', metrics_text(values),
                                                 self._now()))
        for key, value in values.items():
            self._metric_pubs[key].publish(Float64(data=value))
        self.get_logger().info(f'round {record.round_index} closed: accuracy '
                               f'{record.accuracy:.3f}, participants {record.participants}, '
                               f'late or missing {record.late_or_missing}'
                               + (f', flight errors {record.flight_errors}'
                                  if record.flight_errors else ''))

    def _write_knobs(self) -> None:
        """DIR/knobs.json: the resource planner's inputs, plan and knobs sent so far (call
        with ``self._lock`` held: the report is read while rounds open and close)."""
        resources = self.station.resources
        if resources.enabled:
            self.log.write_knobs(resources.report())

    def _finish(self) -> None:
        """The finish command to the drones (they land), then DIR/report.json and the log:
        every round done, or the run ended as failed (aggregation.max_failed_rounds)."""
        self._model_pub.publish(bytes_to_msg(self.station.finish_frame()))
        self._finished_s = self._now()
        self.log.write_report(self.station.report())
        if self.station.failure:
            self.get_logger().error(f'{self.station.failure}; finish sent')
        else:
            self.get_logger().info('all rounds done; finish sent')

    def _linger(self, now: float) -> None:
        if not self.own.exit_on_finish or self._finished_s is None:
            return
        drones_gone = not self._drones_listening()   # viewers may stay subscribed
        if drones_gone or now - self._finished_s >= self.own.finish_linger_s:
            self.done.set()


def main(args: list[str] | None = None) -> None:
    """Run the node until shutdown (or until the run is over with exit_on_finish)."""
    run_node(GroundStationNode, args)


if __name__ == '__main__':
    main()
