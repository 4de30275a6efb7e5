"""Energy meters: a window (begin/end) gives joules, seconds and mean power, or says why it cannot.

* ``rapl``: Linux powercap sysfs (``/sys/class/powercap/intel-rapl:*``; package zones and their ``dram`` subzones
  where present). Counters are cumulative microjoules that wrap at ``max_energy_range_uj``; a window spanning one wrap
  is corrected. Reading needs root on most kernels since CVE-2020-8694; the error says so and how to fix it.
* ``nvml``: ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since driver load; Volta and newer), or, on older
  GPUs, power readings sampled in a thread and integrated over the window.
* ``none``: no meter; energy is recorded as missing (never 0).

``detect(device, choice)`` picks one per device (``auto``: NVML for CUDA devices, RAPL for the CPU, else none).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from opcost.errors import OpcostError

log = logging.getLogger(__name__)
POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class Window:
    joules: float
    seconds: float

    @property
    def watts(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else float("nan")


class Meter:
    name = "none"
    available = False
    reason = "no energy meter"

    def read(self) -> float:
        """Cumulative joules (monotonic within a window)."""
        raise OpcostError(f"meter {self.name}", self.reason)

    def begin(self):
        return (self.read(), time.perf_counter())

    def end(self, token) -> Window:
        j0, t0 = token
        return Window(self._delta(j0, self.read()), time.perf_counter() - t0)

    def _delta(self, a: float, b: float) -> float:
        return b - a


class NoMeter(Meter):
    def __init__(self, reason: str = "no energy meter"):
        self.reason = reason


class RaplMeter(Meter):
    """Sum of the top-level package zones (which include their cores) and of the DRAM subzones."""

    name = "rapl"

    def __init__(self, root: Path | str = POWERCAP):
        root = Path(root)
        packages = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
        drams = [p for pkg in packages for p in sorted(pkg.glob(f"{pkg.name}:*"))
                 if (p / "name").exists() and (p / "name").read_text().strip() == "dram"]
        self.zones = packages + drams
        if not self.zones:
            self.available, self.reason = False, f"no RAPL zones under {root} (virtual machine, or not Intel/AMD)"
            return
        self.ranges = {}
        for z in self.zones:
            try:
                self.ranges[z] = int((z / "max_energy_range_uj").read_text())
                int((z / "energy_uj").read_text())
            except PermissionError:
                self.available = False
                self.reason = (f"cannot read {z / 'energy_uj'}: permission denied (RAPL is root-only since "
                               f"CVE-2020-8694; run as root or `sudo chmod o+r {root}/intel-rapl:*/energy_uj`)")
                return
            except (OSError, ValueError) as e:
                self.available, self.reason = False, f"cannot read RAPL zone {z}: {e}"
                return
        self.available, self.reason = True, ""
        self._last: dict = {}

    def _raw(self) -> dict:
        return {z: int((z / "energy_uj").read_text()) for z in self.zones}

    def begin(self):
        return (self._raw(), time.perf_counter())

    def end(self, token) -> Window:
        start, t0 = token
        now, t1 = self._raw(), time.perf_counter()
        uj = 0
        for z, a in start.items():
            b = now[z]
            uj += b - a if b >= a else b + self.ranges[z] - a  # one wrap-around within the window
        return Window(uj / 1e6, t1 - t0)

    def read(self) -> float:
        return sum(self._raw().values()) / 1e6


class NvmlMeter(Meter):
    name = "nvml"

    def __init__(self, index: int = 0, sample_s: float = 0.01):
        try:
            import pynvml
        except ImportError:
            self.available, self.reason = False, "pynvml is not installed (pip install nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.nvml = pynvml
        except Exception as e:  # NVMLError subclasses: no driver, no device
            self.available, self.reason = False, f"NVML unavailable: {e}"
            return
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.counter = True
        except Exception:
            self.counter = False  # pre-Volta: integrate sampled power
        self.sample_s = sample_s
        self.available, self.reason = True, ""

    def read(self) -> float:
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1e3

    def begin(self):
        if self.counter:
            return super().begin()
        state = {"j": 0.0, "stop": False, "t": time.perf_counter()}

        def sample():
            while not state["stop"]:
                time.sleep(self.sample_s)
                now = time.perf_counter()
                state["j"] += self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3 * (now - state["t"])
                state["t"] = now

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        return (state, th, time.perf_counter())

    def end(self, token) -> Window:
        if self.counter:
            return super().end(token)
        state, th, t0 = token
        state["stop"] = True
        th.join()
        return Window(state["j"], time.perf_counter() - t0)


def detect(device: str, choice: str = "auto", rapl_root: Path | str = POWERCAP) -> Meter:
    """The meter for ``device``; ``choice`` is ``auto``, ``none``, ``rapl`` or ``nvml``. A meter asked for by name
    that is unavailable raises with the reason; ``auto`` falls back to ``none`` and logs why."""
    if choice == "none":
        return NoMeter("energy metering disabled in config (energy.meter: none)")
    cuda = str(device).startswith("cuda")
    if choice == "auto":
        meter = NvmlMeter(_cuda_index(device)) if cuda else RaplMeter(rapl_root)
        if not meter.available:
            log.info("energy unavailable: %s", meter.reason)
            return NoMeter(meter.reason)
        return meter
    meter = NvmlMeter(_cuda_index(device)) if choice == "nvml" else RaplMeter(rapl_root)
    if not meter.available:
        raise OpcostError(f"config: energy.meter: {choice}", meter.reason)
    return meter


def _cuda_index(device: str) -> int:
    return int(device.split(":")[1]) if ":" in str(device) else 0


@dataclass(frozen=True)
class EnergySettings:
    meter: str = "auto"
    trial_s: float = 1.0
    trials: int = 3
    idle_s: float = 1.0
    drift: float = 0.2

    @classmethod
    def from_config(cls, cfg: dict | None) -> "EnergySettings":
        from opcost.config import section

        return section(cls, cfg)


def idle_power(meter: Meter, seconds: float, max_windows: int = 10, patience: int = 2) -> float:
    """The device's idle power: the lowest of successive windows of ``seconds``, taken until ``patience`` windows in
    a row bring no new low (more than 2% below the lowest so far) or ``max_windows`` are done. A GPU leaves its
    high-power state only some time after work (a previous job's): on an H200 the idle power read in one window at
    the start of successive measuring jobs ranged from 78 to 140 W, above a small model's whole running power (114
    W), which made its active energy negative. A baseline still read too high understates active energy;
    :func:`measure_energy` records a negative one as missing."""
    lowest, calm = float("inf"), 0
    for _ in range(max_windows):
        token = meter.begin()
        time.sleep(seconds)
        watts = meter.end(token).watts
        if watts < lowest * 0.98:
            lowest, calm = watts, 0
        else:
            lowest, calm = min(lowest, watts), calm + 1
            if calm >= patience:
                break
    return lowest


def measure_energy(fn, meter: Meter, settings: EnergySettings, idle_w: float, sync=lambda: None) -> dict:
    """Joules per call of ``fn``: ``trials`` windows of back-to-back calls, each lasting at least ``trial_s``
    (counters update every 1-100 ms, so short windows are meaningless). Total and active (idle power subtracted)
    energy per call are the medians over trials; the spread is (max - min) / median."""
    import numpy as np

    per_call, active, watts = [], [], []
    for _ in range(settings.trials):
        calls = 0
        sync()
        token = meter.begin()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < settings.trial_s:
            fn()
            calls += 1
        sync()
        w = meter.end(token)
        per_call.append(w.joules / calls)
        active.append((w.joules - idle_w * w.seconds) / calls)
        watts.append(w.watts)
    med = float(np.median(per_call))
    med_active = float(np.median(active))
    if med_active < 0:  # running below the idle power measured before: the baseline moved, active energy unknown
        log.warning("power while running (%.1f W) below the idle power (%.1f W): active energy recorded as missing",
                    float(np.median(watts)), idle_w)
    return {"energy_j": med, "energy_active_j": med_active if med_active >= 0 else None,
            "power_w": float(np.median(watts)),
            "idle_w": idle_w, "energy_spread": float((max(per_call) - min(per_call)) / med) if med > 0 else None,
            "meter": meter.name}


def missing(meter: Meter) -> dict:
    """The energy columns of a row where no meter exists: missing values, never 0."""
    return {"energy_j": None, "energy_active_j": None, "power_w": None, "idle_w": None, "energy_spread": None,
            "meter": meter.name if meter.available else "none"}
