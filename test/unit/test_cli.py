"""fl-uav's argument checks that stop before anything starts."""

import pytest

from fl_uav.cli import main


@pytest.mark.parametrize('value', ['500', '-1', 'abc'])
def test_sim_refuses_a_domain_id_dds_cannot_use_before_starting_nodes(tmp_path, capsys, value):
    # Act
    with pytest.raises(SystemExit) as stop:
        main(['sim', '--out', str(tmp_path / 'run'), '--domain-id', value])
    # Assert: argparse's usage error, nothing written
    assert stop.value.code == 2
    assert f"'{value}' is not a ROS 2 domain ID in [0, 232]" in capsys.readouterr().err
    assert not (tmp_path / 'run').exists()
