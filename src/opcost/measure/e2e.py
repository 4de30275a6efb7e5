"""End-to-end measurement of whole model iterations with the operators' timing core."""
from __future__ import annotations

import pandas as pd

from opcost.measure.energy import NoMeter, missing
from opcost.measure.hostinfo import host_facts, now
from opcost.measure.timing import Measurement, TimingSettings, measure
from opcost.model.workload import Workload, workload_key
from opcost.tables import E2E, SAMPLES, frame


def e2e_frames(model: str, batch: int, mode: str, m: Measurement, method: str, device: str,
               energy: dict | None = None, timed_s: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(`e2e` row frame, `samples` frame) of one Measurement of whole iterations taken by ``method`` (`e2e`
    table); ``energy``: the energy columns (default: missing, meter none); ``timed_s``: see the `e2e` table."""
    row = {"model": model, "batch": batch, "mode": mode, "method": method, "placement": "default",
           **host_facts(device), **m.stats(), **(energy or missing(NoMeter())), "attempts": 1, "timestamp": now(),
           "timed_s": timed_s}
    key = workload_key(model, mode, batch)
    samples = [{"key": key, "source": "e2e", "placement": "default", "phase": "iteration", "i": i, "seconds": float(s)}
               for i, s in enumerate(m.samples)]
    return frame(E2E, [row]), frame(SAMPLES, samples)


def measure_e2e(wl: Workload, settings: TimingSettings, device: str, energy=None):
    """Returns (`e2e` row frame, `samples` frame) for one workload, method `dedicated`. ``energy(fn)`` gives the
    energy columns (default: missing, meter none)."""
    m = measure(wl.step, settings, device)
    return e2e_frames(wl.model.name, wl.batch, wl.mode, m, "dedicated", device, energy(wl.step) if energy else None)
