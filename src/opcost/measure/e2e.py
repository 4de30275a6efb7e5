"""End-to-end measurement of whole model iterations with the operators' timing core."""
from __future__ import annotations

import pandas as pd
import torch

from opcost.measure.energy import NoMeter, missing
from opcost.measure.hostinfo import host_facts, now
from opcost.measure.timing import Measurement, TimingSettings, measure
from opcost.model.workload import Workload, workload_key
from opcost.tables import E2E, SAMPLES, frame


def e2e_frames(workload: tuple[str, int, str], m: Measurement, method: str, device: str,
               energy: dict | None = None, timed_s: float | None = None, placement: str = "default",
               verified: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(`e2e` row frame, `samples` frame) of one Measurement of whole iterations of ``workload`` (model, batch,
    mode) taken by ``method`` (`e2e` table); ``energy``: the energy columns (default: missing, meter none);
    ``timed_s``, ``placement`` and ``verified`` (`placement_verified`): see the `e2e` table."""
    model, batch, mode = workload
    row = {"model": model, "batch": batch, "mode": mode, "method": method, "placement": placement,
           **host_facts(device), **m.stats(), **(energy or missing(NoMeter())), "attempts": 1, "timestamp": now(),
           "timed_s": timed_s, "placement_verified": verified}
    key = workload_key(model, mode, batch)
    samples = [{"key": key, "source": "e2e", "placement": placement, "phase": "iteration", "i": i,
                "seconds": float(s)} for i, s in enumerate(m.samples)]
    return frame(E2E, [row]), frame(SAMPLES, samples)


def measure_e2e(wl: Workload, settings: TimingSettings, device: str, energy=None):
    """Returns (`e2e` row frame, `samples` frame) for one workload, method `dedicated`. ``energy(fn)`` gives the
    energy columns (default: missing, meter none)."""
    m = measure(wl.step, settings, device)
    return e2e_frames((wl.model.name, wl.batch, wl.mode), m, "dedicated", device, energy(wl.step) if energy else None)


def measure_on_tier(wl: Workload, settings: TimingSettings, device: str, placer, tier: str, fast: str,
                    params: str = "fixed"):
    """(`e2e` row frame, `samples` frame) of one workload whose process was bound to ``tier`` before torch started
    (:func:`opcost.measure.numa.bind_process`: its inputs and activations are there), method `tier`: its
    parameters and buffers moved to the ``fast`` tier first (``params: fixed``, as the isolated placements hold
    them) or left on ``tier`` (``vary``); ``placer``: a :class:`opcost.measure.placement.Placer` of the usable tiers.
    After timing, one more forward pass locates the inputs, the parameters and every leaf module's output
    (`placement_verified`)."""
    from opcost.measure.placement import Placement
    from opcost.model import fastpath
    from opcost.model.extract import leaf_modules
    from opcost.model.replay import place_params, tensors_of

    module = wl.model.module
    weights = tier if params == "vary" else fast
    if weights != tier:
        place_params(module, fast, placer)
    has_params = any(True for _ in module.parameters()) or any(True for _ in module.buffers())
    inputs = [t for t in wl.inputs if isinstance(t, torch.Tensor)]
    requested = Placement(tuple(tier for _ in inputs), weights if has_params else None, tier)
    m = measure(wl.step, settings, device)
    outputs = []
    hooks = [h for mod in leaf_modules(module)
             for h in fastpath.watch_calls(mod, post=lambda _m, _a, out: outputs.extend(tensors_of(out)))]
    try:
        with wl.grad_context():
            wl.forward()
    finally:
        for h in hooks:
            h.remove()
    found = [f"in:{','.join(placer.where(t) for t in inputs)}"] if inputs else []
    if has_params:
        found.append(f"w:{placer.where_all([*module.parameters(), *module.buffers()])}")
    found.append(f"out:{placer.where_all(outputs)}")
    return e2e_frames((wl.model.name, wl.batch, wl.mode), m, "tier", device, placement=str(requested),
                      verified=";".join(found))
