"""ground_client node (one per FedEx ground client, namespace /gc<j>): range-gated exchanges.

Listens for model deliveries on /gc<j>/express/model, checks the sender's distance from the
pose the config names (``ground_clients.range_pose``: the simulator's
/uav<k>/ground_truth/pose by default, never the frame's own claim), answers in range with its
CLU on /uav<k>/express/clu and trains from the delivered model off the executor thread; the
training stops in time for the UAV's return and when a newer delivery arrives (GroundClient's
StopCondition), and a UAV's retry of the visit just answered is answered at once.
With ``security.keys_dir`` it needs ``gc<j>.key`` and every ``drone<i>.pub`` (a missing key
stops it at start, naming the file): deliveries are verified, CLUs signed, and with
``require_signatures`` unsigned, forged or stale deliveries are rejected, counted and logged.
Writes its exchange log to ``output_dir/ground_clients/gc<j>.json`` after every visit.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from std_msgs.msg import UInt8MultiArray

from fl_uav.fleet.config import FleetConfig
from fl_uav.fleet.express_exchange import Delivery
from fl_uav.fleet.express_routes import express_layout
from fl_uav.fleet.ground_client import GroundClient, client_dataset
from fl_uav.fleet.keys import require_keys
from fl_uav.ros import names
from fl_uav.ros.conversions import bytes_to_msg, msg_to_bytes
from fl_uav.ros.params import declare_config
from fl_uav.ros.spin import run_node

NODE_PARAMS = {'client_id': 0, 'output_dir': ''}
LOG_SUBDIR = 'ground_clients'


class GroundClientNode(Node):
    """Thin wrapper: deliveries and UAV poses in → GroundClient → CLU frames out."""

    def __init__(self) -> None:
        super().__init__(names.GROUND_CLIENT_NODE_NAME,
                         automatically_declare_parameters_from_overrides=True)
        self.config, self.own = declare_config(self, FleetConfig, NODE_PARAMS)
        cfg: FleetConfig = self.config
        require_keys(cfg.security, f'ground client {self.own["client_id"]}')
        if cfg.mode != 'express':
            raise ValueError('ground_client needs mode: express')
        client_id = int(self.own['client_id'])
        layout = express_layout(cfg)
        if not 0 <= client_id < len(layout.clients_enu_m):
            raise ValueError(f'client_id {client_id} outside 0..{len(layout.clients_enu_m) - 1}'
                             f' (ground_clients.num_clients)')
        position = tuple(float(v) for v in layout.clients_enu_m[client_id])
        self.client = GroundClient(cfg, client_id, *client_dataset(cfg, client_id, position))
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix='train')
        # The warm-up has its own thread: a visit during it is answered at once, not after
        # it (one step that can take seconds while a fleet's processes start together).
        threading.Thread(target=self._warm_up, name='warm-up', daemon=True).start()
        # The FedEx state (base, local model) is touched by the worker thread only; gate()
        # reads poses and counters. The lock serialises the log file's writers.
        self._log_lock = threading.Lock()
        out = self.own['output_dir']
        self._log_path = (Path(out) / LOG_SUBDIR / f'gc{client_id}.json') if out else None
        pose_topic = (names.GROUND_TRUTH_POSE_TOPIC if cfg.ground_clients.range_pose
                      == 'ground_truth' else names.POSE_TOPIC)
        self._clu_pubs = {k: self.create_publisher(
            UInt8MultiArray, names.drone_topic(k, names.EXPRESS_CLU_TOPIC), names.EXPRESS_QOS)
            for k in range(cfg.num_drones)}
        for k in range(cfg.num_drones):
            self.create_subscription(PoseStamped, names.drone_topic(k, pose_topic),
                                     lambda msg, k=k: self._on_pose(k, msg),
                                     names.TELEMETRY_QOS)
        self.create_subscription(UInt8MultiArray, names.EXPRESS_MODEL_TOPIC, self._on_delivery,
                                 names.EXPRESS_QOS)
        self._write_log()
        east, north, _ = self.client.position_enu_m
        self.get_logger().info(
            f'ground client {client_id} at ({east:.1f}, {north:.1f}) m, radio range '
            f'{self.client.radio_range_m} m by {pose_topic}, '
            f'{cfg.ground_clients.samples_per_client} samples')

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_pose(self, uav: int, msg: PoseStamped) -> None:
        p = msg.pose.position
        # Stamped on receipt: freshness is judged on this node's clock, not the sender's.
        self.client.on_uav_pose(uav, p.x, p.y, p.z, self._now())

    def _on_delivery(self, msg: UInt8MultiArray) -> None:
        now = self._now()
        gated = self.client.gate(msg_to_bytes(msg), now)   # range at receipt time
        if gated is None:
            last = self.client.exchanges[-1] if self.client.exchanges else None
            self.get_logger().warning(
                f'delivery refused or rejected (refused {dict(self.client.refused)}, '
                f'rejected {dict(self.client.rejected)}, last {last})')
            self._write_log()
            return
        if self.client.is_repeat(gated[0]):   # a retry: answered now, not behind training
            self._serve(*gated, now)
            return
        self._worker.submit(self._serve, *gated, now)

    def _serve(self, delivery: Delivery, distance_m: float, now: float) -> None:
        try:
            repeat = self.client.is_repeat(delivery)   # answered again, nothing to train
            reply = self.client.exchange(delivery, distance_m, now)
            self._clu_pubs[delivery.uav].publish(bytes_to_msg(reply))
            self.get_logger().info(f'round {delivery.round_index}: exchanged with UAV '
                                   f'{delivery.uav} at {distance_m:.1f} m')
            self._write_log()
            if repeat:
                return
            steps = self.client.train()   # stops in time for the pickup, or on a newer visit
            self.get_logger().info(f'trained {steps} local steps from round '
                                   f"{delivery.round_index}'s model (stops so far "
                                   f'{dict(self.client.training_stops)})')
            self._write_log()
        except Exception as exc:  # noqa: BLE001 - a client must keep serving
            self.get_logger().error(f'exchange failed: {exc!r}')

    def _warm_up(self) -> None:
        try:
            self.client.warm_up()
        except Exception as exc:  # noqa: BLE001 - the first training is just slower
            self.get_logger().warning(f'training warm-up failed: {exc!r}')

    def _write_log(self) -> None:
        if self._log_path is None:
            return
        with self._log_lock:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._log_path.with_suffix('.tmp')
            tmp.write_text(json.dumps(self.client.report(), indent=1))
            tmp.replace(self._log_path)

    def shutdown(self) -> None:
        """Stop the training thread."""
        self._worker.shutdown(wait=False, cancel_futures=True)


def main(args: list[str] | None = None) -> None:
    """Spin until shutdown."""
    run_node(GroundClientNode, args)


if __name__ == '__main__':
    main()
