"""``tune_malloc()``: keep freed NumPy temporaries in the process instead of handing them
back to the OS. An explicit call, never made by ``import tfscratch``: it changes the C
allocator of the whole process, so it is made by :func:`tfscratch.train.train` (the long
loop that profits) and by the benchmarks, and by you if you want it.

glibc returns large freed blocks (above ``M_MMAP_THRESHOLD``, 128 KiB at first) to the
kernel at once; the next training step asks for the same sizes again and pays a page fault
for every 4 KiB page it touches. Measured here, that was 30-50% of a training step (the
table in ``benchmarks/README.md`` shows the step with and without it). Raising the mmap and
trim thresholds keeps those blocks in the heap for reuse; the price is that memory freed by
the process is kept for reuse, not returned to the OS, so a kernel's resident memory stays
at its peak.

Linux/glibc only; a no-op elsewhere. Opt out with the environment variable
``TFSCRATCH_NO_MALLOPT=1``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 1 << 30  # 1 GiB: larger arrays still get their own mapping


def tune_malloc() -> bool:
    """Raise glibc's mmap/trim thresholds for this process; returns True when the setting
    took effect (False on other platforms, or with ``TFSCRATCH_NO_MALLOPT=1``)."""
    if os.environ.get("TFSCRATCH_NO_MALLOPT") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl): nothing to tune
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok_mmap = mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)
    ok_trim = mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES)
    return bool(ok_mmap and ok_trim)
