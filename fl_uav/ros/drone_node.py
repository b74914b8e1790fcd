"""drone node (one per UAV, namespace /uav<i>): flies its plan, samples the camera, trains.

With ``trajectory.planner: 2ceoafl`` the drone plans its own trajectory onboard
(:class:`~fl_uav.fleet.onboard_planner.OnboardPlanner`) and publishes it, latched, as
nav_msgs/Path on ``trajectory`` and as a MarkerArray (fitted class regions and the path) on
``trajectory/markers``; with ``output_dir`` set it writes the planner's record there after every
round.

In ``mode: express`` it is a FedEx transporter instead: it flies the station's tour, hovers
over each ground client for the exchange (model out on /gc<j>/express/model, CLU back on
/uav<i>/express/clu) and uploads its running sum u_k; the camera is not used. With keys it
signs its deliveries with ``drone<i>.key`` and verifies CLUs with every ``gc<j>.pub``.

Which rounds it takes (:mod:`fl_uav.fleet.round_gate`): frames carry the station's run id.
A round ahead of the last one taken in the run is taken; the same round again, or one behind,
is ignored; an unseen run id that started after the run in progress starts a new run (the
station was restarted), logged, and the drone's learning state (SCAFFOLD's c_k, LGC's
residual, the upload awaiting its ack) starts over at its next training; a run id the drone
has left, or one that started earlier, is ignored (a replayed recording), as is a finish of
another run. A round that arrives while the previous one still flies ends that flight; one
that arrives while the previous one trains (or waits for the training thread) makes the pilot
drop that training at its next step: the station has closed that round, so nothing is sent
for it and the new round trains at once (the drone catches up; DronePilot.run_round). The same
holds for a round of a new run. An express tour in flight is cancelled (the carrier is the new
tour's). A round outside
1..num_rounds (the run length the frame announces, capped by the drone's own
rounds.num_rounds) is rejected as implausible, counted by reason and logged, and never moves
the gate (a forged round 4000000000 neither runs nor locks the drone out). Signed frames
older than ``security.max_frame_age_s`` are refused before any of this (``stale``).

The station's heartbeats on /fl/station_heartbeat keep its station watchdog from returning it
to launch between rounds; with keys it verifies them (fl_uav/fleet/heartbeat_auth.py), and a
beat it refuses (``malformed``, ``unsigned``, ``forged``, ``replayed``, ``stale``) never counts
as the station heard: counted by reason (its status' ``heartbeats_refused``) and logged, the
first of each reason at once, then at most every HEARTBEAT_LOG_THROTTLE_S.

Telemetry (/uav<i>/pose, /uav<i>/battery and the poses the camera frames are labelled with)
starts whenever the autopilot link is established: at start-up, or later when a round connects
(an autopilot that comes up after the node). Shut down (Ctrl-C) while the vehicle is in flight,
the node commands return to launch, waits at most ``flight.shutdown_rtl_timeout_s`` for the
landing, then closes the link.

Its own parameters (:class:`~fl_uav.fleet.config.DroneNodeParams`) are checked at start-up like
the config: a bad ``drone_id`` (not an integer, or not in 0..num_drones-1), ``camera_transport``
(not raw or compressed) or ``camera_topic`` (no ROS topic name) stops the node with an error
naming the key.

The camera: sensor_msgs/Image on ``camera_topic`` (``camera_transport: raw``; mono8, rgb8, bgr8,
rgba8, bgra8, uyvy/yuv422, yuyv/yuv422_yuy2) or sensor_msgs/CompressedImage (jpeg, png) on
``<camera_topic>/compressed`` (``compressed``), decoded by :mod:`fl_uav.fleet.camera_frames`. A
frame it cannot read is dropped, counted by reason (its status' ``camera_frames_rejected``) and
logged: the first of each reason at once, then at most every CAMERA_LOG_THROTTLE_S.
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path as PathLib

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path
from rclpy.node import Node
from sensor_msgs.msg import BatteryState, CompressedImage, Image
from std_msgs.msg import UInt8MultiArray
from visualization_msgs.msg import MarkerArray

from fl_uav.fleet.config import DroneNodeParams, FleetConfig
from fl_uav.fleet.drone_agent import DroneAgent, UpdateReport
from fl_uav.fleet.drone_pilot import DronePilot
from fl_uav.fleet.drone_status import drone_status
from fl_uav.fleet.express_carrier import CluInbox, ExpressCarrier
from fl_uav.fleet.heartbeat_auth import MALFORMED, HeartbeatRefused, heartbeat_verifier
from fl_uav.fleet.keys import require_keys
from fl_uav.fleet.mavlink_keys import drone_mavlink_key
from fl_uav.fleet.messages import EXPRESS_KNOB, FinishCommand, PoseSample, RoundTask
from fl_uav.fleet.onboard_planner import (
    OnboardPlanner,
    OnboardTrajectory,
    map_geotags,
    record_file_name,
)
from fl_uav.fleet.round_gate import NEW_RUN, REOPENED, REPEAT, RoundGate
from fl_uav.fleet.station_watchdog import StationWatchdog
from fl_uav.fleet.world_setup import map_labeler
from fl_uav.fleet_run.launch_plan import drone_stop_grace_s
from fl_uav.ros import names
from fl_uav.ros.conversions import (
    ImageFormatError,
    battery_to_msg,
    bytes_to_msg,
    compressed_to_rgb,
    image_to_rgb,
    msg_to_bytes,
    msg_to_heartbeat_fields,
    plan_to_path,
    pose_to_msg,
    stamp_to_s,
)
from fl_uav.ros.diagnostics import publish_status, status_publisher
from fl_uav.ros.markers import class_region_markers, clear_markers, planned_path_markers
from fl_uav.ros.params import declare_config, topic_parameter
from fl_uav.ros.spin import node_logger, run_node
from fl_uav.vehicle.interface import BatteryStatus
from fl_uav.vehicle.mavsdk_vehicle import MavsdkVehicle
from fl_uav.vehicle.runner import VehicleRunner
from fl_uav.world.geo import GeoOrigin

NODE_PARAMS = DroneNodeParams
IGNORED_LOG_THROTTLE_S = 5.0   # the latched model topic may re-deliver a round: log it rarely
HEARTBEAT_LOG_THROTTLE_S = 60.0   # refused heartbeats (one a second): said once a minute
CAMERA_LOG_THROTTLE_S = 5.0       # unreadable camera frames (tens a second): said every 5 s
#: camera_transport -> the message it carries and its decoder to RGB
CAMERA_TRANSPORTS = {'raw': (Image, image_to_rgb), 'compressed': (CompressedImage,
                                                                   compressed_to_rgb)}


class RosExpressLink:
    """The UAV's radio to ground clients over ROS: one publisher per client, and CLU
    frames heard on this UAV's topic queued on the vehicle loop (the tour awaits them)."""

    def __init__(self, node: Node, num_clients: int, inbox: CluInbox) -> None:
        self._inbox = inbox
        self._pubs = {j: node.create_publisher(
            UInt8MultiArray, names.ground_client_topic(j, names.EXPRESS_MODEL_TOPIC),
            names.EXPRESS_QOS) for j in range(num_clients)}
        node.create_subscription(UInt8MultiArray, names.EXPRESS_CLU_TOPIC, self._on_clu,
                                 names.EXPRESS_QOS)

    def _on_clu(self, msg: UInt8MultiArray) -> None:
        self._inbox.put_threadsafe(msg_to_bytes(msg))

    def send(self, client: int, frame: bytes) -> None:
        self._pubs[client].publish(bytes_to_msg(frame))

    async def receive(self, timeout_s: float) -> bytes | None:
        return await self._inbox.get(timeout_s)


class DroneNode(Node):
    """Thin wrapper: messages in → DroneAgent / DronePilot → messages out."""

    def __init__(self) -> None:
        super().__init__(names.DRONE_NODE_NAME,
                         automatically_declare_parameters_from_overrides=True)
        self.config, self.own = declare_config(self, FleetConfig, NODE_PARAMS)
        cfg: FleetConfig = self.config
        require_keys(cfg.security, f'drone {self.own.drone_id}')   # or security.insecure: true
        self.camera_topic = topic_parameter(self, 'camera_topic', names.camera_transport_topic(
            self.own.camera_topic, self.own.camera_transport))
        camera_msg, self._camera_to_rgb = CAMERA_TRANSPORTS[self.own.camera_transport]
        self.drone_id = self.own.drone_id
        labeler = map_labeler(cfg.world, cfg.camera, cfg.autopilot.origin, cfg.geofence_enu())
        self.agent = DroneAgent(cfg, self.drone_id, labeler)
        origin = GeoOrigin(cfg.autopilot.origin_lat_deg, cfg.autopilot.origin_lon_deg,
                           cfg.autopilot.origin_alt_amsl_m)
        self.runner = VehicleRunner()
        self._train_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix='train')
        self._trajectory_pub = self.create_publisher(Path, names.TRAJECTORY_TOPIC,
                                                     names.PLAN_QOS)
        self._trajectory_markers_pub = self.create_publisher(
            MarkerArray, names.TRAJECTORY_MARKERS_TOPIC, names.MARKERS_QOS)
        self.onboard = OnboardPlanner(
            cfg, self.drone_id, self.agent.geotagged_samples, on_plan=self._publish_trajectory,
            map_samples=lambda: map_geotags(labeler, cfg.geofence_enu(), cfg.coverage.altitude_m))
        vehicle = MavsdkVehicle(cfg.flight.url_for(self.drone_id), origin,
                                signing_key=drone_mavlink_key(cfg.flight, self.drone_id))
        self.pilot = DronePilot(self.agent, vehicle,
                                cfg.flight, self._train_pool, geofence=cfg.geofence_enu(),
                                planner=self.onboard, geofence_config=cfg.geofence)
        self.rounds = RoundGate(cfg.rounds.num_rounds)
        self._round: Future | None = None
        self._tour: Future | None = None
        self.done = threading.Event()
        self._pose_pub = self.create_publisher(PoseStamped, names.POSE_TOPIC,
                                               names.TELEMETRY_PUB_QOS)
        self._battery_pub = self.create_publisher(BatteryState, names.BATTERY_TOPIC,
                                                  names.TELEMETRY_PUB_QOS)
        self._update_pub = self.create_publisher(
            UInt8MultiArray, names.UPDATES_TOPIC,
            names.updates_publisher_qos(cfg.compression.frames_per_update))
        self._battery: BatteryStatus | None = None
        self.watchdog = StationWatchdog(cfg.flight.station_timeout_s, self._now())
        self.heartbeats = heartbeat_verifier(self.agent.auth, cfg.security)   # station.pub
        self._return: Future | None = None
        self._status_pub = status_publisher(self)
        self.create_timer(cfg.status.period_s, self._on_status_tick)
        self.express = cfg.mode == 'express'
        if self.express:   # FedEx transporter: no camera training (the clients train)
            self.carrier = ExpressCarrier(cfg, self.drone_id, self.agent.shapes,
                                          self.agent.fingerprint, auth=self.agent.auth)
            self.link = RosExpressLink(self, cfg.ground_clients.num_clients, CluInbox(
                self.runner.loop, self.carrier.rejected))
        else:
            self.camera_topic = self.create_subscription(   # as remapped
                camera_msg, self.camera_topic, self._on_image, names.IMAGE_QOS).topic_name
        self.create_subscription(UInt8MultiArray, names.GLOBAL_MODEL_TOPIC, self._on_global,
                                 names.GLOBAL_MODEL_QOS)
        self.create_subscription(DiagnosticArray, names.STATION_HEARTBEAT_TOPIC,
                                 self._on_heartbeat, names.STATION_HEARTBEAT_QOS)
        self._telemetry = self.runner.submit(
            self.pilot.stream_telemetry(self._publish_pose, self._on_battery))
        self._telemetry.add_done_callback(self._on_telemetry_end)
        camera = ('' if self.express else f', camera {self.camera_topic} '
                                           f'({self.own.camera_transport})')
        self.get_logger().info(f'drone {self.drone_id}: autopilot at '
                               f'{cfg.flight.url_for(self.drone_id)}, geofence '
                               f'{self.pilot.geofence.describe()}{camera}')

    def _on_status_tick(self) -> None:
        """Every status.period_s: the station watchdog, then the status on /diagnostics."""
        now = self._now()
        if ((self._return is None or self._return.done())
                and self.watchdog.should_return(now, in_flight=self.pilot.in_flight,
                                                phase=self.pilot.state.phase)):
            silent_s = self.watchdog.silent_for_s(now)
            self.watchdog.fire()
            self._return = self.runner.submit(self.pilot.return_home(
                f'nothing from the ground station (no frame, no heartbeat) for '
                f'{silent_s:.0f} s '
                f'(flight.station_timeout_s {self.config.flight.station_timeout_s:g} s)'))
        publish_status(self, self._status_pub, lambda: drone_status(
            self.drone_id, self.pilot, self.agent, self.rounds, self._battery,
            self.config.status, self.watchdog.silent_for_s(now),
            self.watchdog.last_beat, self.watchdog.station_phase_age_s(now),
            self.heartbeats.refused), now)

    def _on_heartbeat(self, msg: DiagnosticArray) -> None:
        """The station's heartbeat: it is alive (a refused one does not count)."""
        try:
            name, values = msg_to_heartbeat_fields(msg)
        except ValueError as exc:
            self._refuse_heartbeat(self.heartbeats.refuse(MALFORMED, str(exc)))
            return
        try:
            beat = self.heartbeats.open(name, values)
        except HeartbeatRefused as exc:
            self._refuse_heartbeat(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a verifier's surprise must not end the node
            self._refuse_heartbeat(self.heartbeats.refuse(MALFORMED, repr(exc)))
            return
        period_problem = self.watchdog.heartbeat(self._now(), beat)
        if period_problem:
            self.get_logger().warning(period_problem)

    def _refuse_heartbeat(self, refused: HeartbeatRefused) -> None:
        """Say so: the first of each reason at once, the others throttled."""
        counts = self.heartbeats.refused
        message = (f'station heartbeat refused ({refused.reason}): {refused}; not counted as '
                   f'the station heard; refused so far, by reason: {dict(counts)}')
        if counts[refused.reason] == 1:
            self.get_logger().warning(message)
        else:
            self.get_logger().warning(message, throttle_duration_sec=HEARTBEAT_LOG_THROTTLE_S)

    def _on_battery(self, battery: BatteryStatus) -> None:
        self._battery = battery
        self.onboard.on_battery(battery.remaining_fraction)
        if not self.context.ok():    # shutting down (Ctrl-C): nothing to publish on
            return
        self._battery_pub.publish(battery_to_msg(battery.remaining_fraction,
                                                 battery.voltage_v, self._now()))

    def _on_telemetry_end(self, future: Future) -> None:
        # Telemetry that ends because the node shuts down is no error (and /rosout is gone).
        if (not future.cancelled() and future.exception() is not None
                and self.context.ok()):
            self.get_logger().error(f'telemetry stopped: {future.exception()!r}')

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _publish_pose(self, pose: PoseSample) -> None:
        if not self.context.ok():    # shutting down (Ctrl-C): nothing to publish on
            return
        self._pose_pub.publish(pose_to_msg(pose, names.MAP_FRAME))

    def _publish_trajectory(self, plan: OnboardTrajectory) -> None:
        """The drone's own plan: Path of q_t, markers of its fitted regions and the path."""
        now = self._now()
        self._trajectory_pub.publish(plan_to_path(plan.waypoints, names.MAP_FRAME, now))
        markers = MarkerArray()
        markers.markers = [clear_markers(names.MAP_FRAME, now),
                           *class_region_markers(plan.regions, names.MAP_FRAME, now).markers,
                           *planned_path_markers({self.drone_id: plan.waypoints},
                                                 names.MAP_FRAME, now).markers]
        self._trajectory_markers_pub.publish(markers)
        self.get_logger().info(f'2CEOAFL trajectory published: {len(plan.waypoints)} '
                               f'waypoints from round {plan.first_round}, '
                               f'{len(plan.regions)} fitted class regions')

    def _on_image(self, msg: Image | CompressedImage) -> None:
        """A camera frame: decoded to RGB and handed to the agent; an unreadable one is
        counted by reason and dropped (never raised: the node would end)."""
        try:
            image = self._camera_to_rgb(msg)
        except ImageFormatError as exc:
            self._drop_camera_frame(exc.reason, str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a decoder's surprise must not end the node
            self._drop_camera_frame('decode', repr(exc))
            return
        self.agent.on_camera_frame(image, stamp_to_s(msg.header.stamp))

    def _drop_camera_frame(self, reason: str, detail: str) -> None:
        """Count it; say so, the first of each reason at once, the others throttled."""
        self.agent.reject_camera_frame(reason)
        message = (f'camera frame dropped ({reason}): {detail}; dropped so far, by reason: '
                   f'{dict(self.agent.camera_frames_rejected)}')
        if self.agent.camera_frames_rejected[reason] == 1:
            self.get_logger().warning(message)
        else:
            self.get_logger().warning(message, throttle_duration_sec=CAMERA_LOG_THROTTLE_S)

    def _on_global(self, msg: UInt8MultiArray) -> None:
        work = self.agent.accept_global_frame(msg_to_bytes(msg))
        if work is not None:
            self.watchdog.heard(self._now())
        if work is None:
            self.get_logger().warning(f'rejected a global model frame; rejected so far, by '
                                      f'reason: {dict(self.agent.rejected_reasons)}')
        elif isinstance(work, FinishCommand):
            verdict = self.rounds.admit_finish(work.round_index, work.run_id)
            if not verdict.taken:
                self._log_ignored(verdict.action, verdict.detail)
                return
            self.get_logger().info('run finished: returning to launch')
            if self._tour is not None and not self._tour.done():
                self._tour.cancel()    # FedEx-Async: the run may end while a tour is out
            self.runner.submit(self.pilot.finish()).add_done_callback(self._on_finished)
        elif self.express and EXPRESS_KNOB not in work.knobs:
            return   # FedEx-Async: another UAV's departure; this one is still out
        else:
            verdict = self.rounds.admit_round(work.round_index, work.num_rounds, work.run_id,
                                              work.run_started_ms, work.opened_ms)
            if not verdict.taken:
                self._log_ignored(verdict.action, verdict.detail)
                return
            if verdict.action == REOPENED:
                self.get_logger().warning(verdict.detail)
            if verdict.action == NEW_RUN:
                self.get_logger().warning(verdict.detail)
                if self._tour is not None and not self._tour.done():
                    self._tour.cancel()    # its carrier state is the new tour's from now on
            # The run's learning state starts over with a new run (DroneAgent.start_run).
            self._start_round(dataclasses.replace(work, run_epoch=self.rounds.epoch))

    def _start_round(self, work: RoundTask) -> None:
        if self.express:
            self.get_logger().info(f'round {work.round_index}: express tour over '
                                   f'{max(0, len(work.plan) - 1)} clients')
            self._tour = self.runner.submit(self.pilot.run_express_tour(
                work, self.carrier, self.link, self.config.express.speed_m_s))
            self._tour.add_done_callback(self._on_tour_done)
            return
        previous = self._round
        if previous is not None and not previous.done() and self.pilot.flying_mission:
            # The station has closed that round: one mission at a time on the vehicle.
            self.get_logger().warning(f'round {work.round_index} arrived while the previous '
                                      f'round was still flying: that flight ends here')
            previous.cancel()
        self.get_logger().info(f'round {work.round_index}: flying {len(work.plan)} waypoints')
        self._round = self.runner.submit(self.pilot.run_round(work))
        self._round.add_done_callback(self._on_trained)

    def _log_ignored(self, reason: str, detail: str) -> None:
        message = (f'global frame ignored ({reason}): {detail}; ignored so far '
                   f'{dict(self.rounds.ignored)}')
        if reason == REPEAT:
            self.get_logger().info(message, throttle_duration_sec=IGNORED_LOG_THROTTLE_S)
        else:
            self.get_logger().warning(message)

    def _on_trained(self, future: Future) -> None:
        if future.cancelled():
            node_logger(self).info('round cancelled (a newer round arrived, or the node is '
                                   'shutting down)')
            return
        if future.exception() is not None:
            self.get_logger().error(f'round failed: {future.exception()!r}')
            return
        report: UpdateReport = future.result()
        if report.dropped:          # a newer round arrived: the station has closed this one
            self.get_logger().warning(f'round {report.round_index}: not uploaded, its work '
                                      f'was dropped ({report.dropped}: a newer round arrived, '
                                      f'the station closed this one); catching up; dropped '
                                      f'so far {self.agent.rounds_dropped}')
            return
        if report.flight_error:     # this round's, even if a newer round has begun since
            self.get_logger().warning(f'flight: round {report.round_index}: '
                                      f'{report.flight_error} '
                                      f'(plans rejected so far: '
                                      f'{dict(self.pilot.plans_rejected)})')
        for knob, (kind, detail) in report.knobs_rejected.items():
            self.get_logger().warning(f'round {report.round_index}: knob {knob} rejected '
                                      f'({kind}): {detail}; rejected so far '
                                      f'{dict(self.agent.knobs_rejected)}')
        for frame in report.frames:         # one frame, or one per LGC layer
            self._update_pub.publish(bytes_to_msg(frame))
        self._write_record()
        self.get_logger().info(
            f'round {report.round_index} ({self.onboard.describe_round(report.round_index)}): '
            f'uploaded {report.bytes_sent} bytes in '
            f'{len(report.frames)} frame(s), '
            f'{report.num_samples} samples, {report.steps} steps, loss {report.train_loss:.3f}'
            + (f' (+{report.probe_steps} mask-probe steps)' if report.probe_steps else '')
            + (f' (steps capped at {report.steps_cap} of {report.planned_steps} to meet the '
               'deadline)' if report.capped else '')
            + (' (stopped at the deadline: the steps taken were sent)' if report.stopped
               else ''))

    def _on_tour_done(self, future: Future) -> None:
        if future.cancelled():
            node_logger(self).info('express tour cancelled: the run is over')
            return
        if future.exception() is not None:
            self.get_logger().error(f'express tour failed: {future.exception()!r}')
            return
        self._update_pub.publish(bytes_to_msg(future.result()))
        tour = self.carrier.tour
        self.get_logger().info(
            f'round {tour.round_index}: uploaded u_k, exchanged with {tour.exchanged}, missed '
            f'{tour.missed}, CLU frames rejected {dict(self.carrier.rejected)}'
            + (f', error: {tour.error}' if tour.error else ''))

    def _write_record(self) -> None:
        if not self.own.output_dir:
            return
        try:
            self.onboard.write_record(PathLib(self.own.output_dir)
                                      / record_file_name(self.drone_id))
        except OSError as exc:
            self.get_logger().warning(f'trajectory record not written: {exc}',
                                      throttle_duration_sec=60.0)

    def _on_finished(self, future: Future) -> None:
        if future.cancelled():
            return
        log = node_logger(self)
        if future.exception() is not None:
            log.error(f'landing failed: {future.exception()!r}')
        elif self.pilot.in_flight:
            log.info('run finished: the vehicle stays in the air (flight.land_on_finish is '
                     'false)')
        elif self.pilot.state.landed_after_flight:
            log.info('landed')
        else:
            log.info('run finished: the vehicle was on the ground already')
        if self.own.exit_on_finish:
            self.done.set()

    @property
    def stop_budget_s(self) -> float:
        """How long its stop may take (the return to launch): longer is a hang
        (fl_uav.ros.spin.watch_stop)."""
        return drone_stop_grace_s(self.config.flight.shutdown_rtl_timeout_s)

    def shutdown(self) -> None:
        """Stop the round or tour in progress; a vehicle in flight returns to launch (waited
        for at most flight.shutdown_rtl_timeout_s); close the MAVLink connection, then stop
        the vehicle loop and the training thread (once; later calls do nothing)."""
        if not self.runner.running:
            return
        for work in (self._round, self._tour, self._return):
            if work is not None:
                work.cancel()
        flight = self.config.flight   # the pilot logs the return to launch
        ending = self.runner.submit(self.pilot.shutdown(flight.shutdown_rtl_timeout_s))
        try:
            ending.result(timeout=flight.shutdown_rtl_timeout_s + flight.connect_timeout_s)
        except Exception as exc:  # noqa: BLE001 - shutting down whatever happened
            node_logger(self).warning(f'vehicle shutdown failed: {exc!r}')
        self.runner.stop()
        self._train_pool.shutdown(wait=False, cancel_futures=True)


def main(args: list[str] | None = None) -> None:
    """Run the node until shutdown (or until the run is over with exit_on_finish)."""
    run_node(DroneNode, args)


if __name__ == '__main__':
    main()
