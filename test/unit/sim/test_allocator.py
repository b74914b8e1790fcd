"""glibc malloc settings for experiment processes (run in a child: they are process-wide)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from fl_uav.sim.allocator import keep_large_allocations


def test_glibc_accepts_the_settings_in_a_fresh_process():
    code = ('from fl_uav.sim.allocator import keep_large_allocations; '
            'print(keep_large_allocations())')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout.strip()
    expected = sys.platform.startswith('linux') and platform.libc_ver()[0] == 'glibc'
    assert out == str(expected)


@pytest.mark.parametrize('threshold_bytes', [0, -1, 1 << 31])
def test_thresholds_outside_a_c_int_are_rejected(threshold_bytes):
    with pytest.raises(ValueError, match='threshold_bytes'):
        keep_large_allocations(threshold_bytes)
