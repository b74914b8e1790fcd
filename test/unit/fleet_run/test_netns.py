"""The lossy-link harness's pure parts: which namespace a node runs in and with which peer,
what a run's report adds up, and that ProcessGroup.start puts a prefix before each node's
command (without root: nothing here creates a namespace)."""

from __future__ import annotations

import sys

import pytest

from fl_uav.fleet_run.launch_plan import NodeSpec
from fl_uav.fleet_run.launcher import ProcessGroup, ros_environment
from fl_uav.fleet_run.netns import LinkShape, NetnsLink, _udp_rcvbuf_errors, link_report


def test_the_station_runs_on_the_ground_and_every_other_node_in_the_air():
    link = NetnsLink('fllx1', subnet=(230, 4))
    station = link.command_prefix(NodeSpec('ground_station_node', 'ground_station'))
    drone = link.command_prefix(NodeSpec('drone_node', 'drone', namespace='/uav0'))
    autopilot = link.command_prefix(NodeSpec('autopilot_sim_node', 'autopilot_sim'))
    assert station == ['ip', 'netns', 'exec', 'fllx1g', 'env', 'ROS_STATIC_PEERS=10.230.4.1']
    assert drone == autopilot == ['ip', 'netns', 'exec', 'fllx1a', 'env',
                                  'ROS_STATIC_PEERS=10.230.4.2']


def test_a_tag_too_long_for_an_interface_name_is_refused():
    with pytest.raises(ValueError, match='12 characters'):
        NetnsLink('a' * 13)


def test_shapes_describe_themselves():
    assert LinkShape().describe() == 'lossless'
    assert LinkShape(loss_pct=20, rate_mbit=20).describe() == '20 % loss, 20 Mbit/s'


def test_the_report_counts_rounds_late_updates_and_bytes():
    summary = {'status': 'finished', 'num_rounds_configured': 3, 'final_accuracy': 0.5,
               'initial_accuracy': 0.1, 'wall_time_s': 12.34,
               'rejected_total': {'wrong_round': 1},
               'rounds': [{'participants': [0, 1], 'late_or_missing': [],
                           'bytes_up_total': 100, 'bytes_down_total': 300},
                          {'participants': [0], 'late_or_missing': [1],
                           'bytes_up_total': 50, 'bytes_down_total': 300}]}
    zero = {'tx_bytes': 0, 'tx_packets': 0, 'lost_bytes': 0, 'lost_packets': 0,
            'outage_bytes': 0, 'outage_packets': 0, 'tbf_dropped_packets': 0,
            'udp_rcvbuf_errors': 0}
    before = {'air': dict(zero, tx_bytes=10), 'ground': dict(zero)}
    after = {'air': dict(zero, tx_bytes=1010, lost_bytes=5),
             'ground': dict(zero, tx_bytes=2000, outage_bytes=7, tbf_dropped_packets=2,
                            udp_rcvbuf_errors=3)}
    report = link_report(summary, before, after)
    assert report['participants'] == [2, 1] and report['rounds_completed'] == 2
    assert report['missing_at_close'] == 1 and report['late_arrivals'] == 1
    assert report['payload_bytes'] == 750 and report['wire_bytes'] == 3000
    assert report['wire_up_bytes'] == 1000 and report['dropped_bytes'] == 12
    assert report['tbf_dropped_packets'] == 2 and report['udp_rcvbuf_errors'] == 3


def test_udp_receive_buffer_errors_are_read_from_proc_net_snmp():
    snmp = ('Ip: Forwarding DefaultTTL\nIp: 1 64\n'
            'Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n'
            'Udp: 10 0 4 12 4 0\n')
    assert _udp_rcvbuf_errors(snmp) == 4 and _udp_rcvbuf_errors('') == 0


def test_the_process_group_puts_the_prefix_before_each_node(tmp_path):
    group = ProcessGroup(ros_environment(78, tmp_path / 'ros_logs'), tmp_path / 'logs')
    spec = NodeSpec('drone_node', 'drone', namespace='/uav0')
    marker = tmp_path / 'argv'
    # `python -c` as the prefix: it runs instead of the node, writing the argv it was given
    prefix = [sys.executable, '-c',
              f'import sys; open({str(marker)!r}, "w").write(" ".join(sys.argv[1:]))']
    group.start([spec], tmp_path / 'params.yaml', lambda s: prefix if s is spec else [])
    group.nodes[0].process.wait(timeout=30)
    words = marker.read_text().split()
    assert words[:2] == [sys.executable, '-m'] and words[2] == 'fl_uav.ros.drone_node'
    assert group.nodes[0].argv[:len(prefix)] == tuple(prefix)
