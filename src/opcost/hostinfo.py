"""Facts about the machine recorded with every measurement."""
from __future__ import annotations

import datetime as _dt
import functools
import platform
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


def host_facts(device: str) -> dict:
    """Columns shared by every measurement row (see tables._HOST)."""
    gpu_name = gpu_driver = None
    if str(device).startswith("cuda") and torch.cuda.is_available():
        gpu_name = torch.cuda.get_device_name(torch.device(device))
        gpu_driver = _nvidia_driver()
    return {
        "device": str(device), "threads": torch.get_num_threads(), "host": socket.gethostname(),
        "cpu_model": cpu_model(), "gpu_name": gpu_name, "gpu_driver": gpu_driver,
        "torch_version": torch.__version__,
    }


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _nvidia_driver() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as f:
            first = f.readline()
        return first.split("Kernel Module")[1].split()[0] if "Kernel Module" in first else first.strip()
    except (OSError, IndexError):
        return None
