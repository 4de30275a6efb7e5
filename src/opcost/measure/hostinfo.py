"""Facts about the machine recorded with every measurement."""
from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import re
import socket

import torch


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def llc_bytes(sysfs: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size of the last-level (highest level) data/unified cache of CPU 0, or None where sysfs does not say."""
    import glob

    best = (0, None)
    for d in glob.glob(f"{sysfs}/index*"):
        try:
            with open(f"{d}/level") as f:
                level = int(f.read())
            with open(f"{d}/type") as f:
                kind = f.read().strip()
            with open(f"{d}/size") as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1:], 1)
        value = int(size.rstrip("KMG")) * mult
        if level > best[0]:
            best = (level, value)
    return best[1]


def cpus() -> str:
    """The CPUs this process may run on (its affinity), as a list: `0-1`."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return ""
    runs, start = [], None
    for i, c in enumerate(allowed):
        if start is None:
            start = c
        if i + 1 == len(allowed) or allowed[i + 1] != c + 1:
            runs.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(runs)


def allowed_cpus() -> int:
    """How many CPUs this process may run on (its affinity: what a batch scheduler or taskset gave it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def pin_threads(threads: int) -> str:
    """Restrict this process to ``threads`` CPUs (the first ones it may use) so the OS cannot migrate the intra-op
    threads onto fewer or other cores mid-measurement; returns the CPU list (unchanged where it has no more)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) > threads:
            os.sched_setaffinity(0, allowed[:threads])
    except (AttributeError, OSError):
        pass
    return cpus()


def host_facts(device: str) -> dict:
    """Columns shared by every measurement row (see tables._HOST)."""
    gpu_name = gpu_driver = None
    if str(device).startswith("cuda") and torch.cuda.is_available():
        gpu_name = torch.cuda.get_device_name(torch.device(device))
        gpu_driver = _nvidia_driver()
    return {
        "device": str(device), "threads": torch.get_num_threads(), "cpus": cpus(), "host": socket.gethostname(),
        "cpu_model": cpu_model(), "gpu_name": gpu_name, "gpu_driver": gpu_driver,
        "torch_version": torch.__version__,
    }


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@functools.lru_cache(maxsize=1)  # one driver per process: NVML is asked once
def _nvidia_driver() -> str | None:
    """The NVIDIA driver version (``580.159.04``), from NVML where installed, else the kernel module's banner
    (``NVRM version: NVIDIA UNIX [Open Kernel Module for] x86_64  580.159.04  Release Build ...``)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML (not installed, no driver library): the kernel module's banner
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            return driver_version_of(f.readline())
    except OSError:
        return None


def driver_version_of(banner: str) -> str | None:
    """The version number in the first line of ``/proc/driver/nvidia/version``, whatever words precede it."""
    found = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", banner.split("Kernel Module", 1)[-1])
    return found.group(1) if found else None


def parallel_speedup(threads: int, elements: int = 1 << 17, calls: int = 400) -> float:
    """How much faster ``threads`` intra-op threads run one small elementwise kernel than one thread, now: the
    median time of ``calls`` multiplications of ``elements`` floats on one thread over that on ``threads`` (about
    20 ms). A VM's virtual CPUs may share a physical core for minutes at a time: on a 2-vCPU VM it read 1.9-2.1 in
    some minutes and 1.4-1.5 in others, and a transformer of sub-millisecond operators ran 30% slower in the second
    state where ResNet-18 ran 8% slower, so one reference's ratio cannot cancel such drift for another model. 1.0 with
    one thread; the thread count is restored."""
    import time

    if threads <= 1:
        return 1.0
    x = torch.ones(elements)
    before = torch.get_num_threads()

    def median_s(n: int) -> float:
        torch.set_num_threads(n)
        x.mul(2.0)  # the pool's threads started
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            x.mul(2.0)
            times.append(time.perf_counter() - t)
        return sorted(times)[calls // 2]

    try:
        with torch.inference_mode():
            return median_s(1) / median_s(threads)
    finally:
        torch.set_num_threads(before)
