"""Memory settings for experiment processes (run in a child: they are process-wide)."""

from __future__ import annotations

import gc
import platform
import subprocess
import sys

import pytest

from fl_uav.engine.allocator import collector_paused_for_imports, keep_large_allocations


def test_glibc_accepts_the_settings_in_a_fresh_process():
    code = ('from fl_uav.engine.allocator import keep_large_allocations; '
            'print(keep_large_allocations())')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout.strip()
    expected = sys.platform.startswith('linux') and platform.libc_ver()[0] == 'glibc'
    assert out == str(expected)


@pytest.mark.parametrize('threshold_bytes', [0, -1, 1 << 31])
def test_thresholds_outside_a_c_int_are_rejected(threshold_bytes):
    with pytest.raises(ValueError, match='threshold_bytes'):
        keep_large_allocations(threshold_bytes)


def test_imports_run_without_the_collector_in_a_fresh_process_only():
    # Arrange: a fresh interpreter, as under the fl-uav command
    code = ('import gc\n'
            'from fl_uav.engine.allocator import collector_paused_for_imports\n'
            'with collector_paused_for_imports() as fresh:\n'
            '    during = gc.isenabled()\n'
            '    import torch\n'
            'print(fresh, during, gc.isenabled(), gc.get_freeze_count() > 100000)\n')
    # Act
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout.split()
    # Assert: off while importing, on again after, torch's objects frozen
    assert out == ['True', 'False', 'True', 'True']


def test_collector_is_left_alone_where_torch_is_already_imported():
    import torch  # noqa: F401  (this test process has it)

    frozen = gc.get_freeze_count()
    with collector_paused_for_imports() as fresh:
        assert gc.isenabled()
    assert not fresh and gc.isenabled() and gc.get_freeze_count() == frozen
