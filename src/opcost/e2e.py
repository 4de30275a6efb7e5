"""End-to-end measurement of whole model iterations with the operators' timing core."""
from __future__ import annotations

from .energy import NoMeter, missing
from .hostinfo import host_facts, now
from .tables import E2E, SAMPLES, frame
from .timing import TimingSettings, measure
from .workload import Workload, workload_key


def measure_e2e(wl: Workload, settings: TimingSettings, device: str, energy=None):
    """Returns (`e2e` row frame, `samples` frame) for one workload. ``energy(fn)`` gives the energy columns
    (default: missing, meter none)."""
    m = measure(wl.step, settings, device)
    e = energy(wl.step) if energy else missing(NoMeter())
    row = {"model": wl.model.name, "batch": wl.batch, "mode": wl.mode, "method": "dedicated", "placement": "default",
           **host_facts(device), **m.stats(), **e, "attempts": 1, "timestamp": now()}
    key = workload_key(wl.model.name, wl.mode, wl.batch)
    samples = [{"key": key, "source": "e2e", "placement": "default", "phase": "iteration", "i": i, "seconds": float(s)}
               for i, s in enumerate(m.samples)]
    return frame(E2E, [row]), frame(SAMPLES, samples)
