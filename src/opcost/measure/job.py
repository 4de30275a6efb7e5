"""A measuring job's process: the allocator, threads and pinning its config asks for, the device check, and the
job's energy meter (its idle power measured at the start and checked for drift at the end)."""
from __future__ import annotations

import logging
from collections.abc import Mapping

from opcost.errors import OpcostError

log = logging.getLogger("opcost")


def prepare_process(config: Mapping, measuring: bool = True) -> None:
    """The process as the config asks: the allocator keeping freed memory, and, for a ``measuring`` stage, the
    config's ``threads`` (at most the CPUs the process may run on) and ``affinity``; the config's CUDA device must
    exist. A stage that measures nothing (extraction) leaves threads and pinning alone: they do not shape its output,
    and its rule's params leave them out."""
    import torch

    from opcost.measure.memory import keep_freed_memory

    keep_freed_memory()  # same allocator behaviour for operator and end-to-end timing (see opcost.measure.memory)
    if measuring:
        _threads(config)
    device = config["device"]
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OpcostError("config: device", f"{device!r} requested but torch finds no CUDA device on this host")


def measuring_process(threads: int | None = None) -> None:
    """A process that was not started as a measuring job (a short trace taken for ``opcost predict``) set up as the
    measuring jobs are: glibc keeping freed memory and the ``threads`` of the costs it goes with (where given)."""
    import torch

    from opcost.measure.memory import keep_freed_memory

    keep_freed_memory()
    if threads:
        torch.set_num_threads(int(threads))


def _threads(config: Mapping) -> None:
    import torch

    from opcost.measure.hostinfo import allowed_cpus, pin_threads

    threads, cpus = int(config["threads"]), allowed_cpus()
    if threads > cpus:  # more threads than CPUs would time the OS's time slicing; rows record what really ran
        log.warning("config: threads: %d requested but this process may run on %d CPU(s): measuring with %d threads",
                    threads, cpus, cpus)
        threads = cpus
    torch.set_num_threads(threads)
    if config["affinity"] == "pin":
        log.info("pinned to CPUs %s", pin_threads(threads))


class JobEnergy:
    """The job's energy meter, its idle power (measured at the start, checked for drift at the end), and the
    per-callable measurement the timing stages use."""

    def __init__(self, config: Mapping):
        from opcost.measure.energy import EnergySettings, detect, idle_power

        self.settings = EnergySettings.from_config(config["energy"])
        self.meter = detect(config["device"], self.settings.meter)
        self.device = config["device"]
        self.idle_w = idle_power(self.meter, self.settings.idle_s) if self.meter.available else None
        if self.meter.available:
            log.info("energy meter %s, idle power %.2f W", self.meter.name, self.idle_w)

    def __call__(self, fn) -> dict:
        from opcost.measure.energy import measure_energy, missing

        if not self.meter.available:
            return missing(self.meter)
        import torch

        sync = torch.cuda.synchronize if self.device.startswith("cuda") else (lambda: None)
        return measure_energy(fn, self.meter, self.settings, self.idle_w, sync)

    def close(self) -> None:
        from opcost.measure.energy import idle_power

        if self.meter.available:
            end = idle_power(self.meter, self.settings.idle_s)
            if abs(end - self.idle_w) > self.settings.drift * self.idle_w:
                log.warning("idle power drifted from %.2f W to %.2f W during the job: active energy is suspect",
                            self.idle_w, end)
