"""Memory settings for a process that runs the experiment engine: glibc malloc, Python's GC.

Each stacked step of the vectorised trainer (fl_uav.learning.vectorized) allocates blocks of
tens of MB and frees them at the end of the step: for a chunk of 32 drones x 32 samples of
FMNIST through the small CNN, conv1's output and its gradient are 1024 x 16 x 28 x 28 float32 =
51 MB each. When its heap has no free chunk that large, glibc maps such a block afresh (its
mmap threshold is 128 KiB, raised on frees to at most 32 MiB) and unmaps it on free, and it
trims the heap top above its trim threshold, so the pages are faulted in and zero-filled again
every step. Measured (strace, /usr/bin/time) on 2 rounds of the 1000-drone run: 3.7 to 4.3 M
minor page faults and 7 to 8 s of kernel time, out of ~54 s. Other runs of the same code took
~0.3 M faults: their heap happened to hold such chunks (it depends on the heap's layout). With
both thresholds at 1 GiB, every run measured took ~0.3 M faults and ~1 s of kernel time; peak
RSS grows by ~0.1 GB (the heap is kept, not returned).

What is computed does not depend on where memory comes from: results are bit-identical. The
setting is process-wide (a process that runs experiments: ``fl-uav experiment`` applies it).
"""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1   # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
KEEP_HEAP_BYTES = 1 << 30


def keep_large_allocations(threshold_bytes: int = KEEP_HEAP_BYTES) -> bool:
    """Serve blocks below ``threshold_bytes`` from the heap and keep up to that much free heap.

    True when glibc accepted both settings; False elsewhere (musl, macOS, Windows), where
    nothing changes.
    """
    if not 0 < threshold_bytes < 1 << 31:
        raise ValueError(f'threshold_bytes must be in (0, 2**31), got {threshold_bytes}')
    if not sys.platform.startswith('linux'):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return (mallopt(M_MMAP_THRESHOLD, threshold_bytes) == 1
            and mallopt(M_TRIM_THRESHOLD, threshold_bytes) == 1)


@contextmanager
def collector_paused_for_imports() -> Iterator[bool]:
    """Import torch and the engine without cyclic garbage collection, then freeze what exists.

    ``import torch`` creates several hundred thousand long-lived objects (modules, functions,
    op schemas); while they are created, the allocation counter keeps triggering collections
    that walk all of them, and every later full collection (and the one at interpreter exit)
    walks them again. Measured on this machine: ``import fl_uav.engine.experiment, fl_uav.cli``
    takes 1.48-1.61 s of CPU as is and 1.07-1.11 s with the collector off during the imports
    and ``gc.freeze()`` after them (frozen objects are still freed by reference counting; only
    cycles among them are left to the end of the process).

    Acts only in a fresh process (torch not imported yet, as under the ``fl-uav`` command);
    elsewhere (a test process calling the CLI) it changes nothing. Yields whether it acted.
    """
    fresh = 'torch' not in sys.modules and gc.isenabled()
    if fresh:
        gc.disable()
    try:
        yield fresh
    finally:
        if fresh:
            gc.freeze()
            gc.enable()


def skip_exit_collection() -> None:
    """Freeze every object alive now, so the collection at interpreter exit does not walk
    them (0.3-0.4 s with torch loaded: ``python -c 'import torch'`` 1.57-1.67 s of wall time
    against 1.25-1.45 s with ``gc.freeze()``). Only for a process that is about to end."""
    gc.freeze()
