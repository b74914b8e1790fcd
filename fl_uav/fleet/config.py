"""The fleet's config tree: every key the nodes, the launcher and the tests read.

Sections map one-to-one to the parameter groups of config/fleet.yaml (``world.seed``,
``learning.lr``...). Algorithm-layer sections are the algorithm modules' own frozen configs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from fl_uav.aggregation.config import AggregationConfig
from fl_uav.autopilot_sim.config import AutopilotSimConfig
from fl_uav.compression.config import CompressionConfig
from fl_uav.configschema import require_choice
from fl_uav.learning.buffer import BufferConfig
from fl_uav.learning.config import LearningConfig
from fl_uav.netmodel.config import SystemConfig
from fl_uav.planning.config import ResourcesConfig, check_planner_procedures
from fl_uav.planning.coverage import CoverageConfig, sector_of
from fl_uav.planning.express import ExpressConfig
from fl_uav.planning.geofence import Geofence, GeofenceConfig, resolve_geofence
from fl_uav.world.camera import CameraConfig
from fl_uav.world.landcover import WorldConfig


@dataclass(frozen=True)
class StationAggregationConfig(AggregationConfig):
    """The engine's aggregation section, plus what the ground station does when the strategy
    fails (a plug-in that raises or returns a broken model, fl_uav.aggregation.strategy
    checked_aggregate): it closes the round on the model it kept, with a warning.

    max_failed_rounds: consecutive rounds whose aggregation failed after which the station
    ends the run as failed and sends the drones the finish command (0 = never stop; the
    experiment engine stops at the first).
    """

    max_failed_rounds: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_failed_rounds < 0:
            raise ValueError(f'max_failed_rounds must be >= 0 (0 = never stop), got '
                             f'{self.max_failed_rounds}')


@dataclass(frozen=True)
class RoundConfig:
    """num_rounds: rounds to run; deadline_s: wall seconds a round stays open;
    first_round_extra_s: extra time in round 1 for connect, arm and take-off;
    start_timeout_s: how long the station waits for drones to subscribe before round 1;
    eval_samples: size of the held-out set the station evaluates on; eval_seed: seed of the
    frames rendered for that held-out set."""

    num_rounds: int = 10
    deadline_s: float = 60.0
    first_round_extra_s: float = 60.0
    start_timeout_s: float = 60.0
    eval_samples: int = 1000
    eval_seed: int = 12345

    def __post_init__(self) -> None:
        if self.num_rounds < 1:
            raise ValueError(f'num_rounds must be >= 1, got {self.num_rounds}')
        if self.deadline_s <= 0 or self.first_round_extra_s < 0 or self.start_timeout_s <= 0:
            raise ValueError('deadline_s and start_timeout_s must be > 0, '
                             'first_round_extra_s >= 0')
        if self.eval_samples < 10:
            raise ValueError(f'eval_samples must be >= 10, got {self.eval_samples}')


@dataclass(frozen=True)
class FlightConfig:
    """How drones fly: connection URL template (``{port}`` = port_base + drone id), speed,
    take-off altitude and timeouts. A round's flight is cut short train_reserve_s before the
    round's deadline (but allowed at least min_flight_budget_s) so the drone can still train
    and upload in time. A drone node shut down (Ctrl-C) while its vehicle is in flight
    commands return to launch and waits at most shutdown_rtl_timeout_s for the landing before
    it closes the link (the autopilot goes on with the return). Before arming, the autopilot's
    home must lie within max_home_offset_up_m of the ENU origin's altitude
    (autopilot.origin_alt_amsl_m): every altitude and the geofence band are metres above the
    origin, so a wrong origin altitude would shift them all by the difference; on sloped
    ground raise it to the site's relief. A drone in flight between rounds that hears neither a
    frame nor a heartbeat from the ground station for station_timeout_s returns to launch and
    lands (0: never; fl_uav/fleet/station_watchdog.py); at least twice the longest round and
    STATION_TIMEOUT_HEARTBEATS x status.heartbeat_period_s (the station's period, which each
    heartbeat carries: a drone warns when its timeout is shorter).

    url_template: MAVLink URL of a drone's autopilot as MAVSDK takes it (``serial://...``,
        ``udpin://...``); ``{port}`` is replaced by port_base + drone id.
    port_base: the port drone 0's url_template gets (drone i: port_base + i).
    speed_m_s: horizontal speed of the drones' missions.
    takeoff_altitude_m: take-off altitude, metres above the ENU origin.
    connect_timeout_s: how long a drone node waits for its autopilot link.
    land_on_finish: at the end of the run return to launch and land (false: stay in the air).
    train_reserve_s: a round's flight ends this long before the round's deadline, leaving time
        to train and upload.
    min_flight_budget_s: the least flight time a round gets however little time is left.
    shutdown_rtl_timeout_s: how long a drone node stopped in flight waits for the landing of
        the return to launch it commands before it closes the link.
    max_home_offset_up_m: largest height of the autopilot's home above or below the ENU
        origin (autopilot.origin_alt_amsl_m) at which a drone still arms.
    station_timeout_s: a drone in the air between rounds that hears nothing from the ground
        station (no frame, no heartbeat) this long returns to launch and lands (0 = never;
        at least twice the longest round and 5 station heartbeat periods).
    mavlink_signing: sign the autopilot link (MAVLink 2 signing; PX4 >= 1.17 holding the same
        key): the drone signs all it sends and takes only what is signed with the key, and
        the autopilot drops unsigned commands from anyone else on the link. The drone then
        refuses to start without mavlink_key_file. False: unsigned; anyone who reaches the
        link (a second client on a UDP port, a radio) can command the vehicle.
    mavlink_key_file: this drone's MAVLink signing key (``fl-uav mavlink-key new``; put on the
        autopilot with ``fl-uav mavlink-key provision``); ``{drone}`` in it becomes the drone
        id. '' with mavlink_signing in fl-uav sim: keys made for the run.
    """

    url_template: str = 'udpin://127.0.0.1:{port}'
    port_base: int = 14540
    speed_m_s: float = 12.0
    takeoff_altitude_m: float = 30.0
    connect_timeout_s: float = 60.0
    land_on_finish: bool = True
    train_reserve_s: float = 20.0
    min_flight_budget_s: float = 5.0
    shutdown_rtl_timeout_s: float = 30.0
    max_home_offset_up_m: float = 10.0
    station_timeout_s: float = 300.0
    mavlink_signing: bool = False
    mavlink_key_file: str = ''

    def __post_init__(self) -> None:
        if '{' in self.mavlink_key_file.replace('{drone}', ''):
            raise ValueError(f'mavlink_key_file may only use {{drone}}, got '
                             f'{self.mavlink_key_file!r}')
        if not 0.0 <= self.station_timeout_s < math.inf:
            raise ValueError(f'station_timeout_s must be >= 0 s (0: never return), got '
                             f'{self.station_timeout_s}')
        if '{port}' not in self.url_template and '{' in self.url_template:
            raise ValueError(f'url_template may only use {{port}}, got {self.url_template!r}')
        if not (1 <= self.port_base <= 65000):
            raise ValueError(f'port_base must be in [1, 65000], got {self.port_base}')
        if not (0.5 <= self.speed_m_s <= 25.0):
            raise ValueError(f'speed_m_s must be in [0.5, 25], got {self.speed_m_s}')
        if self.train_reserve_s < 0 or self.min_flight_budget_s <= 0:
            raise ValueError('train_reserve_s must be >= 0 and min_flight_budget_s > 0')
        if not (0.0 < self.shutdown_rtl_timeout_s <= 600.0):
            raise ValueError(f'shutdown_rtl_timeout_s must be in (0, 600], got '
                             f'{self.shutdown_rtl_timeout_s}')
        if not (0.0 <= self.max_home_offset_up_m <= 500.0):
            raise ValueError(f'max_home_offset_up_m must be in [0, 500], got '
                             f'{self.max_home_offset_up_m}')
        if not (2.0 <= self.takeoff_altitude_m <= 120.0):
            raise ValueError(f'takeoff_altitude_m must be in [2, 120], got '
                             f'{self.takeoff_altitude_m}')

    def url_for(self, drone_id: int) -> str:
        """MAVLink connection URL of one drone's autopilot."""
        return self.url_template.format(port=self.port_base + drone_id)

    def mavlink_key_for(self, drone_id: int) -> str:
        """One drone's MAVLink signing key file ('' = none set)."""
        return self.mavlink_key_file.replace('{drone}', str(drone_id))


@dataclass(frozen=True)
class SimCameraConfig:
    """The embedded camera (fl-uav sim's sim_camera node).

    rate_hz: frames rendered per second for each drone. seed: seed of the frames' random
    nuisances (sensor noise, blur, illumination).
    """

    rate_hz: float = 10.0
    seed: int = 3

    def __post_init__(self) -> None:
        if not (0.1 <= self.rate_hz <= 60.0):
            raise ValueError(f'rate_hz must be in [0.1, 60], got {self.rate_hz}')


@dataclass(frozen=True)
class CodecConfig:
    """Bounds the ground station enforces on incoming frames.

    max_frame_bytes: the largest frame accepted, in bytes (a longer one is rejected).
    """

    max_frame_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_frame_bytes < 1024:
            raise ValueError(f'max_frame_bytes must be >= 1024, got {self.max_frame_bytes}')


@dataclass(frozen=True)
class SecurityConfig:
    """``security.*``: signed frames (Ed25519 envelope, docs/wire_format.md, version 4).

    keys_dir: directory of this machine's keys as ``fl-uav keygen`` writes them
        (fl_uav/fleet/keys.py): the station reads ``station.key`` and every ``drone<i>.pub``,
        drone i reads ``drone<i>.key`` and ``station.pub`` (in ``mode: express`` also every
        ground client's ``gc<j>.pub``), ground client j reads ``gc<j>.key`` and every
        ``drone<i>.pub``. '' = no keys: frames and heartbeats go out unsigned. With keys, a
        node signs every global-model, control, update and express visit frame it sends (the
        station also its heartbeats) and verifies every signed frame (and heartbeat) it
        receives.
    require_signatures: with keys, reject (count by reason ``unsigned``) plain v1/v2 frames
        and unsigned station heartbeats. The shipped configs say true; false accepts them as
        before signing existed (anyone can write a plain frame's sender id). Without keys
        (insecure) nothing is signed and it does not apply.
    insecure: a drone, station or ground client node starts without keys (keys_dir ''):
        its frames and beats go out unsigned and it takes unsigned ones, whose sender anyone
        can claim to be; a bench, never a field. False (the default): such a node refuses to
        start, naming keys_dir and this key (fl_uav/fleet/keys.py require_keys).
    max_frame_age_s: a signed frame issued longer ago than this (on the receiver's clock) is
        rejected as ``stale``: a recording replayed later. Longer than a round (a drone that
        joins late takes the latched model of the round in progress).
    max_clock_skew_s: a signed frame or station heartbeat issued further in the future than
        this is ``stale`` too (the sender's clock is ahead). Node clocks must agree to within
        it (GPS time, chrony).
    heartbeat_max_age_s: a drone refuses a signed station heartbeat signed longer ago than
        this on its clock (``stale``: a capture played back; fl_uav/fleet/heartbeat_auth.py).
        The clock skew between drone and station plus a beat's delivery must fit in it; it is
        also the most a genuine beat played back late can delay a drone's return to launch.
    """

    keys_dir: str = ''
    require_signatures: bool = False
    insecure: bool = False
    max_frame_age_s: float = 300.0
    max_clock_skew_s: float = 10.0
    heartbeat_max_age_s: float = 15.0

    def __post_init__(self) -> None:
        for name in ('max_frame_age_s', 'max_clock_skew_s', 'heartbeat_max_age_s'):
            value = getattr(self, name)
            if not 0.0 < value < math.inf:
                raise ValueError(f'security.{name} must be a positive number of seconds, '
                                 f'got {value}')


@dataclass(frozen=True)
class StatusConfig:
    """``status.*``: each drone's and the ground station's status on ``/diagnostics``
    (fl_uav/fleet/drone_status.py, fl_uav/fleet/station_status.py).

    period_s: how often each drone node and the station node publish their status.
    battery_warn_fraction: remaining battery (0..1) at or below which a drone's status turns
        WARN (display only: PX4's own battery failsafe acts on its BAT_LOW_THR, set that on
        the autopilot).
    battery_error_fraction: remaining battery (0..1) at or below which a drone's status
        turns ERROR (display only: PX4 acts on BAT_CRIT_THR).
    heartbeat_period_s: how often, in [0.1, 60] s, the ground station publishes its
        heartbeat on /fl/station_heartbeat (fl_uav/fleet/station_heartbeat.py), which the
        drones' station watchdog counts as the station heard; flight.station_timeout_s must
        be at least 5 of these periods (STATION_TIMEOUT_HEARTBEATS: heartbeats are best
        effort, a few lost on Wi-Fi must not return the fleet). Checked within one config
        (fleet.yaml); in the field the station reads ground_station.yaml and the drones
        drone.yaml (which does not set it): each beat carries the station's period, and a
        drone whose own timeout is shorter warns on /diagnostics and in its log.
    """

    period_s: float = 1.0
    battery_warn_fraction: float = 0.3
    battery_error_fraction: float = 0.15
    heartbeat_period_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0.1 <= self.period_s <= 60.0:
            raise ValueError(f'status.period_s must be in [0.1, 60] s, got {self.period_s}')
        if not 0.1 <= self.heartbeat_period_s <= 60.0:
            raise ValueError(f'status.heartbeat_period_s must be in [0.1, 60] s, got '
                             f'{self.heartbeat_period_s}')
        if not 0.0 <= self.battery_error_fraction <= self.battery_warn_fraction <= 1.0:
            raise ValueError(f'status: need 0 <= battery_error_fraction <= '
                             f'battery_warn_fraction <= 1, got '
                             f'{self.battery_error_fraction} and {self.battery_warn_fraction}')


#: flight.station_timeout_s must be at least this many longest rounds (FleetConfig).
STATION_TIMEOUT_ROUNDS = 2
#: flight.station_timeout_s must be at least this many station heartbeat periods (FleetConfig).
STATION_TIMEOUT_HEARTBEATS = 5
FLEET_MODES = ('standard', 'express')
RANGE_POSE_SOURCES = ('ground_truth', 'telemetry')


@dataclass(frozen=True)
class GroundClientConfig:
    """``ground_clients.*``: the FedEx ground clients of ``mode: express`` (fleet only).

    num_clients: N ground clients (ids 0..N-1, namespaces /gc<j>), placed by
        ``express.*``'s rule (FedEx Sec. VII-A blocks) in an area centred on the station.
    data_radius_m: radius around a client's position within which its frames are rendered.
    data_seed: seed of the clients' frames (with the client id).
    samples_per_client: camera frames each client holds, rendered from the land-cover world
        at random poses within data_radius_m of its position (labels from the map), seeded
        by data_seed and the client id: location-correlated data as FedEx's non-IID type 2,
        and nothing to download.
    max_local_steps: cap on the local SGD steps a client trains per delivered model (the
        station asks for one per slot of Delta, ceil(Delta / express.step_time_s), as the
        engine: FedEx Sec. IV-A).
    exchange_timeout_s: how long a hovering UAV waits for a client's CLU before it moves on.
    delivery_attempts: how many times within that wait the UAV sends its delivery (again
        every exchange_timeout_s / delivery_attempts while no CLU came: a radio retries); a
        client answers a repeated delivery with the same CLU frame.
    range_pose: whose pose the client's radio-range check trusts: ground_truth (the
        simulator's /uav<k>/ground_truth/pose, the default in the embedded fleet) or
        telemetry (/uav<k>/pose, what the UAV reports, e.g. with PX4 SITL).
    pose_max_age_s: a pose older than this (wall seconds) counts as no pose: refused.
    pickup_margin_s: a client stops training this long before it expects its UAV back (its
        last measured revisit interval after the visit that started the training), so the
        CLU is ready when the UAV hovers (fl_uav/fleet/ground_client.py); at least one step
        is always taken, and a visit that comes earlier stops the training at once.
    """

    num_clients: int = 4
    samples_per_client: int = 200
    data_radius_m: float = 40.0
    data_seed: int = 11
    max_local_steps: int = 50
    exchange_timeout_s: float = 5.0
    delivery_attempts: int = 3
    range_pose: str = 'ground_truth'
    pose_max_age_s: float = 1.0
    pickup_margin_s: float = 2.0

    def __post_init__(self) -> None:
        require_choice('range_pose', self.range_pose, RANGE_POSE_SOURCES)
        for key in ('num_clients', 'samples_per_client', 'max_local_steps',
                    'delivery_attempts'):
            if getattr(self, key) < 1:
                raise ValueError(f'{key} must be >= 1, got {getattr(self, key)}')
        for key in ('data_radius_m', 'exchange_timeout_s', 'pose_max_age_s'):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'{key} must be finite and > 0, got {value}')
        if not (math.isfinite(self.pickup_margin_s) and self.pickup_margin_s >= 0):
            raise ValueError(f'pickup_margin_s must be finite and >= 0, got '
                             f'{self.pickup_margin_s}')


TRAJECTORY_PLANNERS = ('coverage', '2ceoafl')
# trajectory.sampling: what a planned round flies after q_t (fl_uav/fleet/onboard_planner.py).
SAMPLING_PATTERNS = ('sweep', 'diamond')
# trajectory.priorities: ψ of 2CEOAFL eq. (2) as the paper draws it, or from the buffer's need.
PRIORITY_MODES = ('paper', 'deficit')
# trajectory.regions: where the eq. (1) class regions are fitted from.
REGION_SOURCES = ('map', 'survey')
# The sampling diamond flown around q_t: q → E → N → W → S → q, radius r.
SAMPLING_DIAMOND_LENGTH_PER_RADIUS = 2.0 + 3.0 * math.sqrt(2.0)


def sampling_pattern_length_m(radius_m: float) -> float:
    """Length of the sampling diamond around q_t (out r, three sides r√2, back r)."""
    return SAMPLING_DIAMOND_LENGTH_PER_RADIUS * radius_m


@dataclass(frozen=True)
class TrajectoryConfig:
    """Where each drone flies (fl_uav/fleet/onboard_planner.py).

    planner: 'coverage' (fly the station's lawnmower sweep every round) or '2ceoafl' (fly the
    sweep for survey_rounds rounds, then plan onboard one waypoint q_t per remaining round with
    2CEOAFL eqs. (1)-(5), and fly q_t plus a sampling pattern).
    sampling: 'sweep' (after q_t, a lawnmower over the target class region for the rest of the
    round's flight length: as far as the station's sweep of the round, at least the reach) or
    'diamond' (q_t and a diamond of sample_radius_m around it).
    priorities: 'paper' (eq. (2)'s random time-varying ψ, planned once) or 'deficit' (re-plan
    every round; ψ = 1 and the buffer's class counts enter eq. (4) as held mass, so the plan
    goes for the classes the buffer lacks). 'paper' is the default: it measured as well or
    better in the fleet (docs/benchmarks.md) and plans once.
    regions: 'map' (fit eq. (1) to labels of the onboard land-cover raster the drone labels its
    frames with, one per camera footprint: every class, from round survey_rounds + 1) or
    'survey' (fit it to the drone's own geo-tagged samples: only the classes it has seen).
    components_per_class: Gaussians per class of the fitted mixture (2CEOAFL eq. (1));
    min_samples_per_class: classes with fewer geo-tagged samples get no region.
    zeta: ζ of 2CEOAFL eq. (3) (association radius ζ λ).
    round_flight_time_s: autopilot seconds a round's flight may take (0: rounds.deadline_s less
    flight.train_reserve_s, exact in the field, conservative in the sim with time_factor > 1);
    reach_fraction: share of flight.speed_m_s x that time a plan may use per round (the rest
    absorbs acceleration, turns and the mission upload).
    battery_wh, battery_reserve_fraction, cruise_power_w, hover_power_w: the energy budget of
    the plan (pack energy, share kept in reserve, power in level flight at flight.speed_m_s and
    hovering).
    The planner's work is bounded by counts, so a plan is a deterministic function of its
    inputs (fl_uav/planning/trajectory.py): window_passes: passes of the windowed SCA (each:
    window sweeps, detours to missed classes, the whole-horizon MILP; fewer passes, cheaper
    plans); horizon_iterations: SCA iterations (HiGHS root-node MILPs over all T x R
    binaries) of the whole-horizon stage per pass, the costliest stage (0: skip it).
    Wall-clock safety caps, not meant to bind (if one does, the plan depends on the CPU's load
    and the record's plan.time_capped is true): plan_time_budget_s per plan (a re-planning
    drone, priorities deficit, plans within its round), solver_time_limit_s per window MILP.

    survey_rounds: rounds that fly the station's sweep before 2ceoafl plans (at least 1: the
    regions are fitted from them). sample_radius_m: radius of the sampling diamond around q_t.
    plan_time_budget_s: wall-clock safety cap on one plan, in seconds.
    solver_time_limit_s: wall-clock safety cap on one window MILP, in seconds.
    """

    planner: str = 'coverage'
    sampling: str = 'sweep'
    priorities: str = 'paper'
    regions: str = 'map'
    survey_rounds: int = 1
    # A generated world has num_regions 24 warped blobs over 7 classes (3.4 per class) plus the
    # background: one Gaussian per class would centre between a class's blobs.
    components_per_class: int = 8
    min_samples_per_class: int = 10
    zeta: float = 1.0
    round_flight_time_s: float = 0.0
    reach_fraction: float = 0.8
    sample_radius_m: float = 15.0
    battery_wh: float = 300.0
    battery_reserve_fraction: float = 0.2
    cruise_power_w: float = 300.0
    hover_power_w: float = 250.0
    solver_time_limit_s: float = 5.0
    plan_time_budget_s: float = 28.0
    window_passes: int = 2
    horizon_iterations: int = 1

    def __post_init__(self) -> None:
        for name, choices in (('planner', TRAJECTORY_PLANNERS), ('sampling', SAMPLING_PATTERNS),
                              ('priorities', PRIORITY_MODES), ('regions', REGION_SOURCES)):
            require_choice(f'trajectory.{name}', getattr(self, name), choices)
        if self.survey_rounds < 1:
            raise ValueError(f'survey_rounds must be >= 1 (the regions are fitted from the '
                             f"survey's samples), got {self.survey_rounds}")
        if self.components_per_class < 1 or self.min_samples_per_class < 1:
            raise ValueError('components_per_class and min_samples_per_class must be >= 1')
        if not 0.0 < self.zeta <= 1.0:
            raise ValueError(f'zeta must be in (0, 1], got {self.zeta}')
        if not 0.0 < self.reach_fraction <= 1.0:
            raise ValueError(f'reach_fraction must be in (0, 1], got {self.reach_fraction}')
        if not 0.0 <= self.battery_reserve_fraction < 1.0:
            raise ValueError(f'battery_reserve_fraction must be in [0, 1), got '
                             f'{self.battery_reserve_fraction}')
        for name in ('round_flight_time_s', 'sample_radius_m'):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}')
        for name in ('battery_wh', 'cruise_power_w', 'hover_power_w', 'solver_time_limit_s'):
            if not getattr(self, name) > 0.0:
                raise ValueError(f'{name} must be > 0, got {getattr(self, name)}')
        if not (math.isfinite(self.plan_time_budget_s) and self.plan_time_budget_s > 0.0):
            raise ValueError(f'trajectory.plan_time_budget_s must be finite and > 0 (a safety '
                             f'cap on one plan, in s), got {self.plan_time_budget_s}')
        for name in ('window_passes', 'horizon_iterations'):
            if getattr(self, name) < 0:
                raise ValueError(f'trajectory.{name} must be >= 0, got {getattr(self, name)}')


@dataclass(frozen=True)
class PlanningModelConfig:
    """What the ground station's resource planner assumes about the drones' radio link and
    companion computer (SI units; the engine's ``system`` keys of the same names and
    defaults): FedDPQ eqs. (14)-(17) link (bandwidth_hz, tx_power_w as the LGC planners'
    power, interference_w), the model download at downlink_rate_bit_s (LGC's round time), and
    FedDPQ eqs. (33)-(36) compute (cpu_freq_hz, train_cycles_per_sample,
    gen_cycles_per_sample). The fleet itself has no radio or energy model (frames travel over
    DDS): set these to the hardware flown. Distances come from the drones' upload poses.

    bandwidth_hz: uplink bandwidth. tx_power_w: a drone's transmit power. interference_w:
    interference plus noise power at the station. downlink_rate_bit_s: rate of the model
    download. cpu_freq_hz: the companion computer's CPU frequency. train_cycles_per_sample:
    CPU cycles to train on one sample. gen_cycles_per_sample: CPU cycles to generate one
    top-up sample.
    """

    bandwidth_hz: float = SystemConfig.bandwidth_hz
    tx_power_w: float = SystemConfig.tx_power_w
    interference_w: float = SystemConfig.interference_w
    downlink_rate_bit_s: float = SystemConfig.downlink_rate_bit_s
    cpu_freq_hz: float = SystemConfig.cpu_freq_hz
    train_cycles_per_sample: float = SystemConfig.train_cycles_per_sample
    gen_cycles_per_sample: float = SystemConfig.gen_cycles_per_sample

    def __post_init__(self) -> None:
        try:
            self.system()
        except ValueError as exc:
            raise ValueError(f'planning_model.{exc}') from None

    def system(self) -> SystemConfig:
        """The engine's system section with these constants (the planners take that)."""
        return SystemConfig(**dataclasses.asdict(self))


@dataclass(frozen=True)
class FleetConfig:
    """Everything shared by the fleet's nodes.

    num_drones: drones in the fleet (ids 0..num_drones-1).
    mode: standard (every drone trains on its camera and uploads to the station) | express
    (FedEx UAV express delivery: the drones are transporters ferrying the model to
    ``ground_clients`` and their cumulative local updates back; ``express.*`` plans and
    sizes it, see :meth:`check_express`).
    resources: per-drone resource knobs the ground station plans and sends with each round
    (the engine's section, :class:`~fl_uav.engine.config.ResourcesConfig`; planner
    none | feddpq | lgc_fixed | lgc_heuristic | lgc_ddpg). The station builds the planner
    once every drone has reported a pose and a non-empty class histogram (after round 1) and
    sends its knobs from the next round on (fl_uav.fleet.ground_station); standard mode only.
    planning_model: the radio and compute constants that planner assumes.
    security: frame signing keys and whether signatures are required (SecurityConfig).
    status: how often each drone publishes its status on /diagnostics (StatusConfig).
    """

    num_drones: int = 4
    mode: str = 'standard'
    world: WorldConfig = field(default_factory=WorldConfig)
    camera: CameraConfig = field(default_factory=CameraConfig)
    sim_camera: SimCameraConfig = field(default_factory=SimCameraConfig)
    learning: LearningConfig = field(default_factory=LearningConfig)
    aggregation: StationAggregationConfig = field(
        default_factory=StationAggregationConfig)
    rounds: RoundConfig = field(default_factory=RoundConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    coverage: CoverageConfig = field(default_factory=CoverageConfig)
    trajectory: TrajectoryConfig = field(default_factory=TrajectoryConfig)
    geofence: GeofenceConfig = field(default_factory=GeofenceConfig)
    flight: FlightConfig = field(default_factory=FlightConfig)
    autopilot: AutopilotSimConfig = field(default_factory=AutopilotSimConfig)
    codec: CodecConfig = field(default_factory=CodecConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    express: ExpressConfig = field(default_factory=ExpressConfig)
    ground_clients: GroundClientConfig = field(default_factory=GroundClientConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    planning_model: PlanningModelConfig = field(default_factory=PlanningModelConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    status: StatusConfig = field(default_factory=StatusConfig)

    def __post_init__(self) -> None:
        if not (1 <= self.num_drones <= 250):
            raise ValueError(f'num_drones must be in [1, 250], got {self.num_drones}')
        require_choice('mode', self.mode, FLEET_MODES)
        self.check_express()
        longest_round_s = self.rounds.deadline_s + self.rounds.first_round_extra_s
        timeout_s = self.flight.station_timeout_s
        if 0 < timeout_s < STATION_TIMEOUT_ROUNDS * longest_round_s:
            # The silence between two round frames is a round plus its closing, evaluation
            # and the resource planner (seconds per drone for lgc_ddpg): leave it a round.
            raise ValueError(f'flight.station_timeout_s {timeout_s:g} s must be at least '
                             f'{STATION_TIMEOUT_ROUNDS} x the longest round, rounds.deadline_s '
                             f'+ rounds.first_round_extra_s = {longest_round_s:g} s (or 0: '
                             f'never return): drones would return to launch between normal '
                             f'rounds')
        heartbeat_s = self.status.heartbeat_period_s
        if 0 < timeout_s < STATION_TIMEOUT_HEARTBEATS * heartbeat_s:
            raise ValueError(f'flight.station_timeout_s {timeout_s:g} s must be at least '
                             f'{STATION_TIMEOUT_HEARTBEATS} x status.heartbeat_period_s '
                             f'({heartbeat_s:g} s): a few heartbeats lost on the radio link '
                             f'would return the drones')
        if self.security.keys_dir and self.security.max_frame_age_s <= longest_round_s:
            # A late joiner takes the latched model of the round in progress: it must be fresh.
            raise ValueError(f'security.max_frame_age_s {self.security.max_frame_age_s:g} s '
                             f'must exceed the longest round, rounds.deadline_s + '
                             f'rounds.first_round_extra_s = {longest_round_s:g} s')
        fence = self.geofence_enu()      # the take-off is flown too: it must be in the band
        for key, up_m in (('flight.takeoff_altitude_m', self.flight.takeoff_altitude_m),
                          ('coverage.altitude_m', self.coverage.altitude_m)):
            if not fence.min_up_m <= up_m <= fence.max_up_m:
                raise ValueError(f'{key} {up_m} m is outside the geofence altitude band '
                                 f'[geofence.min_up_m, geofence.max_up_m] = '
                                 f'[{fence.min_up_m}, {fence.max_up_m}] m')
        # SCAFFOLD in the fleet: c and Δc_k travel as extra dense tensors of v1 frames.
        client, strategy = self.learning.client_algorithm, self.aggregation.strategy
        if (client == 'scaffold') != (strategy == 'scaffold'):
            raise ValueError(f'learning.client_algorithm scaffold and aggregation.strategy '
                             f'scaffold go together in the fleet, got {client!r} and '
                             f'{strategy!r}')
        if client == 'scaffold' and self.compression.method != 'none':
            raise ValueError(f'learning.client_algorithm scaffold needs compression.method none '
                             f'in the fleet (Δc travels as dense tensors beside the update), got '
                             f'{self.compression.method!r}')

        if self.trajectory.planner == '2ceoafl':
            self._check_onboard_planning()
        if self.resources.planner != 'none' and self.mode != 'standard':
            raise ValueError(f'resources.planner {self.resources.planner} needs mode standard '
                             f'(the drones train and upload), got mode {self.mode}')
        check_planner_procedures(self.resources, self.learning, self.compression,
                                 self.aggregation)
        if self.resources.planner.startswith('lgc') and isinstance(
                self.resources.lgc_steps_scale, str):
            raise ValueError(f'resources.lgc_steps_scale {self.resources.lgc_steps_scale!r} is '
                             f"the engine's (it measures the fleet's loss against local steps); "
                             f'the fleet needs a number')
        for key in ('lgc_plateau_window', 'lgc_stall_window'):
            if getattr(self.resources, key) > 0:
                raise ValueError(f"resources.{key} is the engine's (it reads the per-round "
                                 f'test accuracy); the fleet needs 0')

    def check_express(self) -> None:
        """Keys that must agree with ``mode: express`` (each error names the key).

        ``express.mode`` sync runs FedEx-Sync (eq. (13)), async FedEx-Async (eqs. (14)-(15));
        ``express.enabled`` is the engine's switch and only ``mode`` selects express in the
        fleet. The station stands at UAV 0's home
        (``autopilot.home_*``), the client area is centred on it and must lie in the
        geofence, and the UAVs hover at ``express.altitude_m`` inside the altitude band.
        """
        e = self.express
        if self.mode != 'express':
            if e.enabled:
                raise ValueError("express.enabled is the experiment engine's switch; in the "
                                 'fleet set mode: express')
            return
        checks = (
            (e.num_uavs == self.num_drones, f'express.num_uavs ({e.num_uavs}) must equal '
                                            f'num_drones ({self.num_drones}) in the fleet'),
            (self.ground_clients.num_clients >= e.num_uavs,
             f'ground_clients.num_clients ({self.ground_clients.num_clients}) must be >= '
             f'express.num_uavs ({e.num_uavs})'),
            (self.aggregation.strategy == f'fedex_{e.mode}',
             f'aggregation.strategy must be fedex_{e.mode} with mode express and express.mode '
             f'{e.mode} (FedEx eqs. (13)-(15)), got {self.aggregation.strategy!r}'),
            (self.learning.client_algorithm == 'sgd',
             f'learning.client_algorithm must be sgd with mode express (FedEx eq. (10)), got '
             f'{self.learning.client_algorithm!r}'),
            (self.compression.method == 'none',
             f'compression.method must be none with mode express, got '
             f'{self.compression.method!r}'),
            (self.learning.structured_keep == 1.0,
             'learning.structured_keep must be 1.0 with mode express'),
            (self.trajectory.planner == 'coverage',
             f'trajectory.planner must be coverage with mode express (the UAVs fly the '
             f"station's FedEx tours), got {self.trajectory.planner!r}"),
            (e.station_east_m < 0 and e.station_north_m < 0,
             'express.station_east_m / station_north_m must be negative in the fleet: the '
             'station is where the UAVs take off (autopilot.home_*), the area is centred on it'),
            (e.speed_m_s <= self.autopilot.max_speed_m_s,
             f'express.speed_m_s ({e.speed_m_s}) exceeds autopilot.max_speed_m_s '
             f'({self.autopilot.max_speed_m_s})'),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        fence = self.geofence_enu()
        if not fence.min_up_m <= e.altitude_m <= fence.max_up_m:
            raise ValueError(f'express.altitude_m {e.altitude_m} m is outside the geofence '
                             f'altitude band [{fence.min_up_m}, {fence.max_up_m}] m')
        east_m, north_m = self.autopilot.home_enu_m(0)
        half_e, half_n = e.area_east_m / 2, e.area_north_m / 2
        corners = ((east_m - half_e, north_m - half_n), (east_m + half_e, north_m + half_n))
        if not all(fence.contains_en(x, y) for x, y in corners):
            raise ValueError(f'express.area_east_m x area_north_m ({e.area_east_m} x '
                             f'{e.area_north_m} m) centred on the station ({east_m}, '
                             f'{north_m}) leaves the geofence {fence.describe()}')

    def _check_onboard_planning(self) -> None:
        """2CEOAFL onboard: rounds are left after the survey, and a round's reach covers the
        sampling diamond around q_t."""
        traj = self.trajectory
        if traj.survey_rounds >= self.rounds.num_rounds:
            raise ValueError(f'trajectory.survey_rounds ({traj.survey_rounds}) leaves no round '
                             f'to plan: it must be < rounds.num_rounds '
                             f'({self.rounds.num_rounds}) with trajectory.planner 2ceoafl')
        pattern_m = sampling_pattern_length_m(traj.sample_radius_m)
        if self.round_reach_m() <= pattern_m:
            raise ValueError(f'a round reaches {self.round_reach_m():.1f} m (flight.speed_m_s x '
                             f'round flight time x trajectory.reach_fraction), not more than '
                             f'the {pattern_m:.1f} m sampling diamond of '
                             f'trajectory.sample_radius_m {traj.sample_radius_m} m')

    def round_flight_time_s(self) -> float:
        """Seconds of flight per round: trajectory.round_flight_time_s, or the round's deadline
        less the training reserve (as the pilot cuts a flight short)."""
        if self.trajectory.round_flight_time_s > 0.0:
            return self.trajectory.round_flight_time_s
        return max(self.flight.min_flight_budget_s,
                   self.rounds.deadline_s - self.flight.train_reserve_s)

    def round_reach_m(self) -> float:
        """Horizontal distance a drone may plan to fly in one round (speed x flight time x
        reach_fraction)."""
        return (self.flight.speed_m_s * self.round_flight_time_s()
                * self.trajectory.reach_fraction)

    def geofence_enu(self) -> Geofence:
        """The drones' geofence (ENU m): geofence.source 'world' is the world less
        coverage.margin_m, 'box' the geofence.*_m limits."""
        return resolve_geofence(self.geofence, self.world.size_m, self.coverage.margin_m)


# --- the nodes' own ROS parameters (beside the shared config; fl_uav.ros.params declares them)

MAX_TIMER_RATE_HZ = 1000.0     # a node timer faster than this is a typo, not a setting


def _require_positive(key: str, value: float, max_value: float) -> None:
    if not (math.isfinite(value) and 0.0 < value <= max_value):
        raise ValueError(f'{key} must be in (0, {max_value:g}], got {value}')


CAMERA_TRANSPORTS = ('raw', 'compressed')   # image_transport's names of the two


@dataclass(frozen=True)
class DroneNodeParams:
    """The drone node's own parameters: drone_id (0..num_drones-1: its autopilot port is
    flight.port_base + drone_id and the station plans for drones 0..num_drones-1 only),
    exit_on_finish (end the node once landed at the end of the run), output_dir (where the
    onboard planner's record is written; '' = nowhere), camera_topic (the camera's image
    topic, relative to the drone's namespace /uav<i> unless it starts with '/'),
    camera_transport (raw: sensor_msgs/Image on camera_topic; compressed:
    sensor_msgs/CompressedImage, jpeg or png, on camera_topic + '/compressed' as image_transport
    names it)."""

    drone_id: int = 0
    exit_on_finish: bool = False
    output_dir: str = ''
    camera_topic: str = 'camera/image_raw'
    camera_transport: str = 'raw'

    def __post_init__(self) -> None:
        require_choice('camera_transport', self.camera_transport, CAMERA_TRANSPORTS)

    def check(self, config: FleetConfig) -> None:
        """ValueError unless drone_id is one of the fleet's drones and, in standard mode, the
        sectors the station's sweeps put this drone in lie inside its geofence (else every
        plan would be rejected and the drone would fly nothing all run)."""
        if not 0 <= self.drone_id < config.num_drones:
            raise ValueError(f'drone_id must be in [0, {config.num_drones - 1}] (num_drones '
                             f'{config.num_drones}), got {self.drone_id}')
        if config.mode != 'standard':
            return
        coverage, fence = config.coverage, config.geofence_enu()
        sector_ids = ([self.drone_id] if coverage.assignment == 'fixed'
                      else range(config.num_drones))
        for sector_id in sector_ids:
            east_min, north_min, east_max, north_max = sector_of(
                sector_id, config.num_drones, config.world.size_m, coverage.margin_m)
            if not (fence.east_min_m <= east_min and east_max <= fence.east_max_m
                    and fence.north_min_m <= north_min and north_max <= fence.north_max_m):
                raise ValueError(
                    f'drone {self.drone_id} sweeps sector {sector_id} (east [{east_min:.1f}, '
                    f'{east_max:.1f}] m, north [{north_min:.1f}, {north_max:.1f}] m, '
                    f'coverage.assignment {coverage.assignment}), which is not inside its '
                    f'geofence ({fence.describe()}): every plan would be rejected. Widen '
                    f'geofence.* or shrink the survey area (world.size_m, coverage.margin_m)')


@dataclass(frozen=True)
class GroundStationNodeParams:
    """The ground station node's own parameters: output_dir (run log and, after every closed
    round, the station checkpoint; '' = none), exit_on_finish (end the node after the last
    round, once no drone listens any more or finish_linger_s has passed), tick_period_s (how
    often it checks deadlines and opens rounds, in (0, 60] s), finish_linger_s (how long it
    keeps publishing the finish command before it exits, >= 0), resume (a directory holding
    a station checkpoint, normally the crashed station's output_dir: go on with that run,
    same run id, from the round after the last one closed; a checkpoint of another model,
    fleet, strategy or key is refused; '' = a new run)."""

    output_dir: str = ''
    exit_on_finish: bool = False
    tick_period_s: float = 0.1
    finish_linger_s: float = 60.0
    resume: str = ''

    def __post_init__(self) -> None:
        _require_positive('tick_period_s', self.tick_period_s, 60.0)
        if not (math.isfinite(self.finish_linger_s) and self.finish_linger_s >= 0.0):
            raise ValueError(f'finish_linger_s must be finite and >= 0, got '
                             f'{self.finish_linger_s}')


@dataclass(frozen=True)
class AutopilotSimNodeParams:
    """The autopilot simulator node's own parameters: log_dir (directory of the event log
    written on shutdown; '' = none), ground_truth_rate_hz (ground-truth pose publishing rate,
    in (0, 1000] Hz)."""

    log_dir: str = ''
    ground_truth_rate_hz: float = 20.0

    def __post_init__(self) -> None:
        _require_positive('ground_truth_rate_hz', self.ground_truth_rate_hz,
                          MAX_TIMER_RATE_HZ)


CAMERA_ENCODINGS = ('bgr8', 'rgb8')
MAX_CAMERA_RATE_HZ = 120.0
MAX_CAMERA_SIDE_PX = 8192


@dataclass(frozen=True)
class CameraNodeParams:
    """The camera node's own parameters (fl_uav/ros/camera_node.py: a real camera through
    OpenCV, fl_uav/fleet/camera_capture.py).

    source: what the node reads, one of: a V4L2 device, by path ('/dev/video0') or index
        ('0'); a GStreamer pipeline (text with '!'; needs an OpenCV built with GStreamer,
        e.g. python3-opencv from apt; the opencv-python wheel has none); a network stream
        URL (rtsp://, http(s)://, udp://, tcp://, rtmp://, srt://; OpenCV's FFmpeg); else a
        video file, replayed at rate_hz. A file that is missing or does not decode stops the
        node at start; a live source that is not there yet or goes away is reopened every
        reconnect_period_s.
    rate_hz: frames published per second at most, in (0, 120] (a file is replayed at it).
    width: width of the published frames in pixels; the source's frames are resized (0 with
        height 0: the source's own size).
    height: height of the published frames in pixels (0 with width 0: the source's own).
    loop: a video file starts again at its end (false: the node then publishes no more frames
        and reports 'ended' on /diagnostics).
    frame_id: the frames' and camera_info's header frame_id ('' = '<namespace>/camera_optical',
        e.g. 'uav0/camera_optical' in /uav0, as the simulated camera's; 'camera_optical' at
        the root).
    encoding: the published Image encoding, bgr8 (OpenCV's own order) or rgb8.
    reconnect_period_s: a live source that cannot be opened or stops giving frames is
        closed and opened again this often, in [0.1, 600] s.
    timeout_s: how long a network stream may take to open or to give a frame before it counts
        as lost, in [0.5, 600] s.
    camera_info_url: the camera's calibration for camera/camera_info: a
        camera_calibration_parsers YAML file ('file:///path/camera.yaml' or a path), scaled
        to width x height; '' = an ideal pinhole camera of horizontal field of view
        camera.fov_deg, no distortion.
    """

    source: str = ''
    rate_hz: float = 10.0
    width: int = 640
    height: int = 480
    loop: bool = False
    frame_id: str = ''
    encoding: str = 'bgr8'
    reconnect_period_s: float = 2.0
    timeout_s: float = 5.0
    camera_info_url: str = ''

    def __post_init__(self) -> None:
        _require_positive('rate_hz', self.rate_hz, MAX_CAMERA_RATE_HZ)
        if (self.width == 0) != (self.height == 0) or not (
                0 <= self.width <= MAX_CAMERA_SIDE_PX and 0 <= self.height <= MAX_CAMERA_SIDE_PX):
            raise ValueError(f'width and height must both be in [1, {MAX_CAMERA_SIDE_PX}] px, or '
                             f'both 0 (the source size), got {self.width} and {self.height}')
        require_choice('encoding', self.encoding, CAMERA_ENCODINGS)
        if not (math.isfinite(self.reconnect_period_s) and 0.1 <= self.reconnect_period_s <= 600):
            raise ValueError(f'reconnect_period_s must be in [0.1, 600] s, got '
                             f'{self.reconnect_period_s}')
        if not (math.isfinite(self.timeout_s) and 0.5 <= self.timeout_s <= 600):
            raise ValueError(f'timeout_s must be in [0.5, 600] s, got {self.timeout_s}')
