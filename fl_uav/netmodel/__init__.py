"""Radio, computation and flight cost models from the seed papers (pure numpy, no ROS).

Papers: FedDPQ (Hou et al., "Energy-Efficient FL for Edge Real-Time Vision", digest 001),
FedEx (Bian, Shen, Xu, "Joint Client Assignment and UAV Route Planning", digest 003),
2CEOAFL (Pervej et al., "Computation- and Communication-Efficient Online FL", digest 000),
LGC (Du et al., "Layered Gradient Compression over multi-channel links", digest 002).

=======================================  ===============================================
name                                     paper and equation
=======================================  ===============================================
radio.path_gain                          FedDPQ eq. (15); FedEx h = beta_0 / H^2
radio.free_space_ref_gain                Friis beta_0 (FedEx gives no value)
radio.rayleigh_power_gain                FedDPQ eq. (15), zeta ~ Exp(1)
radio.snr                                FedDPQ eq. (14) argument; FedEx eq. (2)
radio.shannon_rate_bit_s                 FedEx eq. (2); FedDPQ eq. (14) per realisation
radio.ergodic_rate_rayleigh_bit_s        FedDPQ eq. (14)
radio.packet_error_prob                  FedDPQ eq. (16), fixed channel
radio.packet_error_prob_rayleigh         FedDPQ eq. (16), E over zeta
radio.snr_for_packet_error               FedDPQ eq. (16) inverted (digest Sec. 1.6)
radio.power_for_packet_error_w           FedDPQ p_u(q) (digest Sec. 1.6)
radio.sample_upload_success              FedDPQ eq. (17)
radio.rate_outage_prob_rayleigh          capacity outage (textbook; not in the seeds)
radio.airtime_s                          FedDPQ eq. (38); FedEx eq. (3)
radio.tx_energy_j                        FedDPQ eq. (37); FedEx eq. (4)
radio.los_probability,                   Al-Hourani 2014 air-to-ground (not in the seeds)
radio.air_to_ground_path_loss_db
radio.RadioLink                          FedDPQ eqs. (14)-(17), (37)-(38), Table I defaults
compute.cpu_power_w                      FedDPQ eqs. (33), (35): varrho f^gamma
compute.compute_time_s / _energy_j       FedDPQ eqs. (33)-(36)
compute.training_time_s / _energy_j      FedDPQ eqs. (36) / (35)
compute.generation_time_s / _energy_j    FedDPQ eqs. (34) / (33)
compute.feddpq_total_energy_j            FedDPQ eq. (39)
compute.round_latency_s                  FedDPQ Sec. 1.8 gap (no equation)
compute.two_ceoafl_local_cost            2CEOAFL Sec. IV-B table
compute.CpuDevice                        FedDPQ eqs. (33)-(36), Table I defaults
payload.feddpq_payload_bits              FedDPQ eq. (13)
payload.two_ceoafl_payload_bits          2CEOAFL Sec. IV payload s_u^t
payload.lgc_comm_energy_j                LGC Table 1
payload.lgc_round_cost                   LGC eq. (10a)
flight.ConstantPower                     FedEx Sec. VII-A (30 W flight, 20 W hover)
flight.FixedWing                         FedEx eq. (7)
flight.RotaryWing                        Zeng, Xu & Zhang 2019 (not in FedEx)
flight.flight_time_s                     FedEx eq. (5)
flight.flight_energy_j                   FedEx eq. (7)
flight.hover_energy_j                    FedEx eq. (8)
flight.tour_cost, flight.fedex_tour_cost FedEx eqs. (4), (5), (7), (8), (9)
flight.fits_energy_budget                FedEx eqs. (26)/(28)
flight.max_tour_length_m                 FedEx eq. (26) solved for the length
=======================================  ===============================================

Each submodule's docstring lists the ambiguities it resolved and how.
"""

from fl_uav.netmodel.compute import (
    CpuDevice,
    compute_energy_j,
    compute_time_s,
    cpu_power_w,
    feddpq_total_energy_j,
    generation_energy_j,
    generation_time_s,
    round_latency_s,
    training_energy_j,
    training_time_s,
    two_ceoafl_local_cost,
)
from fl_uav.netmodel.flight import (
    ConstantPower,
    FixedWing,
    PropulsionModel,
    RotaryWing,
    TourCost,
    fedex_tour_cost,
    fits_energy_budget,
    flight_energy_j,
    flight_time_s,
    hover_energy_j,
    max_tour_length_m,
    segment_lengths_m,
    tour_cost,
    tour_length_m,
)
from fl_uav.netmodel.payload import (
    LGC_CHANNEL_ENERGY_J_PER_MB,
    feddpq_payload_bits,
    lgc_comm_energy_j,
    lgc_round_cost,
    two_ceoafl_expected_payload_bits,
    two_ceoafl_payload_bits,
)
from fl_uav.netmodel.radio import (
    RadioLink,
    air_to_ground_path_loss_db,
    airtime_s,
    db_to_linear,
    dbm_to_w,
    ergodic_rate_rayleigh_bit_s,
    free_space_ref_gain,
    linear_to_db,
    los_probability,
    noise_power_w,
    packet_error_prob,
    packet_error_prob_rayleigh,
    path_gain,
    power_for_packet_error_w,
    rate_outage_prob_rayleigh,
    rayleigh_power_gain,
    sample_upload_success,
    shannon_rate_bit_s,
    snr,
    snr_for_packet_error,
    tx_energy_j,
    w_to_dbm,
)

__all__ = [
    'LGC_CHANNEL_ENERGY_J_PER_MB',
    'ConstantPower',
    'CpuDevice',
    'FixedWing',
    'PropulsionModel',
    'RadioLink',
    'RotaryWing',
    'TourCost',
    'air_to_ground_path_loss_db',
    'airtime_s',
    'compute_energy_j',
    'compute_time_s',
    'cpu_power_w',
    'db_to_linear',
    'dbm_to_w',
    'ergodic_rate_rayleigh_bit_s',
    'feddpq_payload_bits',
    'feddpq_total_energy_j',
    'fedex_tour_cost',
    'fits_energy_budget',
    'flight_energy_j',
    'flight_time_s',
    'free_space_ref_gain',
    'generation_energy_j',
    'generation_time_s',
    'hover_energy_j',
    'lgc_comm_energy_j',
    'lgc_round_cost',
    'linear_to_db',
    'los_probability',
    'max_tour_length_m',
    'noise_power_w',
    'packet_error_prob',
    'packet_error_prob_rayleigh',
    'path_gain',
    'power_for_packet_error_w',
    'rate_outage_prob_rayleigh',
    'rayleigh_power_gain',
    'round_latency_s',
    'sample_upload_success',
    'segment_lengths_m',
    'shannon_rate_bit_s',
    'snr',
    'snr_for_packet_error',
    'tour_cost',
    'tour_length_m',
    'training_energy_j',
    'training_time_s',
    'two_ceoafl_expected_payload_bits',
    'two_ceoafl_local_cost',
    'two_ceoafl_payload_bits',
    'tx_energy_j',
    'w_to_dbm',
]
