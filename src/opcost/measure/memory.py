"""Process memory behaviour that changes operator timings: the C allocator's return of memory to the OS.

glibc serves large allocations (above a dynamic threshold starting at 128 KiB) with fresh ``mmap`` pages and trims
freed heap memory back to the OS. A model iteration then pays a minor page fault for every 4 KiB page of every fresh
activation buffer (thousands per iteration), while an isolated operator loop reusing its buffers pays almost none, and
the dynamic threshold drifts with what the process allocated before, so identical runs differ. opcost pins the
allocator to "keep freed memory" in every measuring process, the same way for operators and end-to-end runs.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import resource

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's upper limit on 64-bit (larger values are rejected)


def keep_freed_memory() -> bool:
    """Ask glibc to serve large allocations from the heap and never trim it. Returns False where unsupported."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.warning("mallopt unavailable (not glibc): allocator behaviour left as is")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok_trim = mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
    ok_mmap = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1
    return ok_trim and ok_mmap


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
