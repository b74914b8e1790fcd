"""fl-uav's argument checks that stop before anything starts."""

from pathlib import Path

import pytest

from fl_uav.cli import main, sim_exit_code


@pytest.mark.parametrize('value', ['500', '-1', 'abc'])
def test_sim_refuses_a_domain_id_dds_cannot_use_before_starting_nodes(tmp_path, capsys, value):
    # Act
    with pytest.raises(SystemExit) as stop:
        main(['sim', '--out', str(tmp_path / 'run'), '--domain-id', value])
    # Assert: argparse's usage error, nothing written
    assert stop.value.code == 2
    assert f"'{value}' is not a ROS 2 domain ID in [0, 232]" in capsys.readouterr().err
    assert not (tmp_path / 'run').exists()


def test_keygen_writes_the_station_and_each_drone_key_pair(tmp_path, capsys):
    # Arrange
    out = tmp_path / 'keys'
    # Act
    code = main(['keygen', '--out', str(out), '--drones', '3'])
    again = main(['keygen', '--out', str(out), '--drones', '3'])
    # Assert
    assert code == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f'{n}.{s}' for n in ('station', 'drone0', 'drone1', 'drone2')
                           for s in ('key', 'pub'))
    assert all((out / n).stat().st_mode & 0o777 == 0o600 for n in names if n.endswith('.key'))
    assert again == 1 and 'not overwritten' in capsys.readouterr().err


def test_sim_makes_run_keys_and_requires_signatures_unless_keys_are_given(tmp_path):
    # Arrange
    from fl_uav.fleet_run.launch_plan import run_keys
    flat = {'num_drones': 2}
    # Act
    made = run_keys(tmp_path, flat, {})
    remade = run_keys(tmp_path, flat, {'security.require_signatures': False})
    given = run_keys(tmp_path, {**flat, 'security.keys_dir': '/elsewhere'}, {})
    # Assert: fresh keys per run (the previous run's replaced), required by default
    assert made['security.require_signatures'] is True
    assert remade['security.require_signatures'] is False
    assert (tmp_path / 'keys' / 'drone1.key').is_file()
    assert made['security.keys_dir'] == str((tmp_path / 'keys').resolve())
    assert given == {}


def test_keygen_writes_ground_client_key_pairs_when_asked(tmp_path):
    # Arrange
    out = tmp_path / 'keys'
    # Act
    code = main(['keygen', '--out', str(out), '--drones', '1', '--ground-clients', '2'])
    # Assert
    assert code == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f'{n}.{s}' for n in ('station', 'drone0', 'gc0', 'gc1')
                           for s in ('key', 'pub'))
    assert all((out / n).stat().st_mode & 0o777 == 0o600 for n in names if n.endswith('.key'))


def test_sim_run_keys_include_the_ground_clients_in_express_mode_only(tmp_path):
    # Arrange
    from fl_uav.fleet_run.launch_plan import run_keys
    express = {'num_drones': 2, 'mode': 'express', 'ground_clients.num_clients': 3}
    # Act
    run_keys(tmp_path / 'express', express, {})
    run_keys(tmp_path / 'standard', {'num_drones': 2}, {})
    # Assert: gc<j> pairs for every client in express mode, none otherwise
    made = sorted(p.name for p in (tmp_path / 'express' / 'keys').glob('gc*'))
    assert made == sorted(f'gc{j}.{s}' for j in range(3) for s in ('key', 'pub'))
    assert not list((tmp_path / 'standard' / 'keys').glob('gc*'))


def test_sim_refuses_a_directory_holding_a_run_and_a_bad_key_touches_nothing(tmp_path, capsys):
    # Arrange: a finished fleet run's files
    out = tmp_path / 'run'
    out.mkdir()
    (out / 'summary.json').write_text('{"status": "finished"}')
    (out / 'ground_station.json').write_text('{}')
    # Act
    refused = main(['sim', '--out', str(out), '--domain-id', '50'])
    message = capsys.readouterr().err
    typo = main(['sim', '--out', str(out), '--overwrite', '--domain-id', '50', '--set',
                 'learning.lrr=0.02'])
    # Assert: refused, naming --overwrite; the typo stopped before anything was removed
    assert refused == 1 and 'holds a fleet run already' in message and '--overwrite' in message
    assert typo == 2 and "did you mean 'learning.lr'" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ['ground_station.json', 'summary.json']


def test_sim_never_removes_a_bag_without_overwrite(tmp_path, capsys, monkeypatch):
    # Arrange: DIR/bag from a run killed before its summary (or from fl-uav record)
    import fl_uav.fleet_run.run as fleet_run

    def no_processes(*args, **kwargs):
        raise AssertionError('fl-uav sim made a process group')

    monkeypatch.setattr(fleet_run, 'ProcessGroup', no_processes)
    bag = tmp_path / 'run' / 'bag'
    bag.mkdir(parents=True)
    (bag / 'metadata.yaml').write_text('rosbag2_bagfile_information: {}')
    (bag / 'bag.mcap').write_bytes(b'recorded')
    # Act
    code = main(['sim', '--out', str(tmp_path / 'run'), '--domain-id', '50', '--record'])
    # Assert: refused, naming the bag and --overwrite; the bag as it was
    message = capsys.readouterr().err
    assert code == 1, message
    assert f'{bag} holds a recording already' in message and '--overwrite' in message
    assert (bag / 'bag.mcap').read_bytes() == b'recorded'


def test_sim_refuses_an_out_that_cannot_be_a_directory(tmp_path, capsys):
    # Arrange
    (tmp_path / 'file').write_text('')
    # Act
    code = main(['sim', '--out', str(tmp_path / 'file' / 'run'), '--record'])
    # Assert: a clear error, not a traceback from mkdir
    assert code == 2
    assert f"{str(tmp_path / 'file')!r} is not a directory" in capsys.readouterr().err


def test_experiment_without_out_or_resume_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    quick = Path(__file__).resolve().parents[2] / 'config' / 'experiments' / 'quick_digits.yaml'
    assert main(['experiment', str(quick)]) == 2
    assert 'give --out DIR' in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_experiment_sigterm_writes_an_interrupted_summary_like_ctrl_c(tmp_path):
    # Arrange: a run far longer than the test, in its own process (as `timeout` or SLURM
    # would stop it)
    import json
    import os
    import signal
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / 'run'
    env = {**os.environ, 'PYTHONPATH': str(repo), 'PYTHONUNBUFFERED': '1',
           'OMP_NUM_THREADS': '1'}
    proc = subprocess.Popen(
        [sys.executable, '-m', 'fl_uav.cli', 'experiment',
         str(repo / 'config' / 'experiments' / 'quick_digits.yaml'), '--out', str(out),
         '--set', 'num_drones=2', '--set', 'num_rounds=100000'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()   # the first round's progress line: the loop is running
        # Act
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    # Assert: Ctrl-C's outcome (summary with status interrupted, exit 1), no traceback
    summary = json.loads((out / 'summary.json').read_text())
    assert 'round 1/100000' in line
    assert proc.returncode == 1 and 'Traceback' not in stderr
    assert summary['status'] == 'interrupted' and summary['rounds_completed'] >= 1
    assert 'interrupted (SIGTERM) after round' in stdout


def test_sim_refuses_a_home_outside_the_geofence_before_anything_starts(tmp_path, capsys,
                                                                          monkeypatch):
    # Arrange: three drones in rows of two from north 1185 m: drone 2 stands at north 1195 m
    import fl_uav.fleet_run.run as fleet_run

    def no_processes(*args, **kwargs):
        raise AssertionError('fl-uav sim made a process group')

    monkeypatch.setattr(fleet_run, 'ProcessGroup', no_processes)
    out = tmp_path / 'run'
    # Act
    code = main(['sim', '--out', str(out), '--domain-id', '50', '--drones', '3',
                 '--set', 'autopilot.home_row_size=2', '--set', 'autopilot.home_north_m=1185'])
    # Assert: refused with the drone, its home and the fence; nothing made, nothing started
    message = capsys.readouterr().err
    assert code == 2, message
    assert ('drone 2: its simulated home (east 585.0 m, north 1195.0 m) is outside its '
            'geofence (east [10.0, 1190.0] m, north [10.0, 1190.0] m') in message
    assert not out.exists()


@pytest.mark.parametrize(('argv', 'message'), [
    (['--topics', '/uav[0-9'], "--topics '/uav[0-9' is not a regular expression"),
    (['--all', '--topics', '/fl/.*'], 'give --all or --topics REGEX, not both'),
])
def test_record_refuses_a_bad_selection_before_anything_is_written(tmp_path, capsys, argv,
                                                                   message):
    # Act
    code = main(['record', '--out', str(tmp_path / 'bag'), *argv])
    # Assert
    assert code == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / 'bag').exists()


def test_record_refuses_an_existing_bag_directory(tmp_path, capsys):
    # Arrange
    (tmp_path / 'bag').mkdir()
    # Act
    code = main(['record', '--out', str(tmp_path / 'bag')])
    # Assert
    assert code == 1
    assert 'exists already' in capsys.readouterr().err


@pytest.mark.parametrize(('summary', 'code'), [
    ({'status': 'finished'}, 0),
    ({'status': 'finished', 'recording': {'complete': True}}, 0),
    ({'status': 'finished', 'recording': {'complete': False}}, 3),
    ({'status': 'timeout', 'recording': {'complete': False}}, 1),
    ({'status': 'failed'}, 1),
])
def test_sim_exit_code_says_a_finished_run_whose_recording_is_incomplete(summary, code):
    # Act / Assert
    assert sim_exit_code(summary) == code


def test_map_describes_a_raster_and_how_it_sits_against_the_geofence(tmp_path, capsys):
    # Arrange: the test pattern in UTM 32N over the default 1200 m world and its fence
    from test.unit.world.test_raster import UTM_32N, write_raster
    path = write_raster(tmp_path / 'area.tif', UTM_32N, span_m=(-100.0, 1300.0))
    # Act
    code = main(['map', str(path)])
    out = capsys.readouterr().out
    # Assert
    assert code == 0
    assert 'CRS         WGS 84 / UTM zone 32N (EPSG:32632)' in out
    assert 'pixel size  5 x 5 metre' in out
    assert '            lat [47.39' in out                   # the extent in lat/lon too
    for row in ('10  ', '70  ', 'unknown (not in world.class_map)', 'nodata', 'forest'):
        assert row in out
    assert 'geofence    east [10, 1190] m, north [10, 1190] m: inside the raster' in out
    assert 'in fence    roof ' in out and out.rstrip().endswith('%')


def test_map_says_when_a_raster_does_not_cover_the_geofence(tmp_path, capsys):
    # Arrange: the raster ends 500 m east and north of the origin; the fence at 1190 m
    from test.unit.world.test_raster import UTM_32N, write_raster
    path = write_raster(tmp_path / 'small.tif', UTM_32N)
    # Act
    code = main(['map', str(path), '--set', 'geofence.source=box', '--set',
                 'geofence.east_max_m=600.0', '--set', 'geofence.north_max_m=300.0'])
    # Assert
    assert code == 1
    assert "NOT covered: land-cover raster '" + str(path) in capsys.readouterr().out


def test_map_says_when_no_code_inside_the_geofence_maps_to_a_class(tmp_path, capsys):
    # Arrange: WorldCover codes in the file, a class map of other codes
    from test.unit.world.test_raster import UTM_32N, write_raster
    path = write_raster(tmp_path / 'area.tif', UTM_32N, span_m=(-100.0, 1300.0))
    # Act
    code = main(['map', str(path), '--set', "world.class_map=['311:forest']"])
    out = capsys.readouterr().out
    # Assert
    assert code == 1
    assert 'inside the raster' in out and 'in fence    unknown 100.0 %' in out
    assert 'no cell inside the fence maps to a class' in out


def test_map_refuses_a_raster_without_a_crs_naming_it(tmp_path, capsys):
    # Arrange
    import numpy as np
    import rasterio
    from affine import Affine
    path = tmp_path / 'plain.tif'
    with rasterio.open(path, 'w', driver='GTiff', width=4, height=4, count=1, dtype='uint8',
                       transform=Affine(5.0, 0.0, 0.0, 0.0, -5.0, 0.0)) as out:
        out.write(np.full((4, 4), 10, np.uint8), 1)
    # Act
    code = main(['map', str(path)])
    # Assert
    assert code == 1
    assert f"fl-uav: land-cover raster '{path}' has no CRS" in capsys.readouterr().err
