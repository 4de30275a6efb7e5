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


def fault_cost_s(threads: int = 1, pages: int = 16384, repeats: int = 5) -> float:
    """Seconds one minor page fault adds to an operator on this host, with ``threads`` threads: the median over
    ``repeats`` of fresh anonymous memory of ``pages`` pages mapped, filled by torch (a fault and the kernel's zeroing
    per page, taken by the op's threads in parallel as an operator writing a fresh output buffer takes them) and
    unmapped, less the same fill once the pages are there, per page: what glibc's default allocator makes a plain
    process pay for each page of a large activation it maps fresh and returns at every iteration."""
    import mmap
    import time

    import numpy as np
    import torch

    size = pages * mmap.PAGESIZE
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    extra = []
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            region = mmap.mmap(-1, size)
            buf = torch.frombuffer(region, dtype=torch.uint8)
            buf.fill_(1)
            t1 = time.perf_counter()
            buf.fill_(2)
            t2 = time.perf_counter()
            del buf
            region.close()
            t3 = time.perf_counter()
            extra.append(max(0.0, (t1 - t0) - (t2 - t1) + (t3 - t2)) / pages)
    finally:
        torch.set_num_threads(before)
    return float(np.median(extra))


def faults_per_call(step, calls: int = 3) -> float:
    """Minor page faults per call of ``step`` over ``calls`` calls (after the caller's warm-up)."""
    before = minor_faults()
    for _ in range(calls):
        step()
    return (minor_faults() - before) / calls
