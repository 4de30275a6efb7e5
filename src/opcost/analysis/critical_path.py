"""An iteration on a GPU as two timelines: the CPU issuing operators and the device running their kernels.

The CPU runs ahead of the device: it issues each operator (the Python and dispatch work before it, its gap T1; its
host work, T2 + L x T4 + (L - 1) x T5 + T3 for L kernel launches, Lin et al. HiPC'22) and goes on while the kernels
queue. A kernel starts when it has been launched and the device has finished the kernels before it. The device idles
when the CPU falls behind (a launch-bound model: many small operators), the CPU waits where it must see a result
(a synchronising call: ``.item()``, a copy to the host, the end of the iteration). :func:`walk` replays that over a
workload's call sequence, so one prediction answers for launch-bound and device-bound models alike and says which
side bounds the iteration; summing ``max(host, device)`` per call instead, as a per-operator approximation does, lets
neither side run ahead of the other.

On a CPU there is one timeline: the sum of gaps and costs (:func:`opcost.analysis.overhead.predict`).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

BOUND_SHARE = 0.9  # a side busy for at least this share of the iteration bounds it


@dataclass(frozen=True)
class Call:
    """One operator call: ``gap_s`` of CPU work before it (T1), ``host_s`` of CPU work issuing it, of which the
    first ``launch_s`` come before its first kernel is queued (None: at the end of its host work), ``device_s`` of
    kernel time, ``sync`` whether the CPU waits for the device after it."""

    gap_s: float
    host_s: float
    device_s: float
    launch_s: float | None = None
    sync: bool = False


@dataclass(frozen=True)
class Walk:
    """The walked iteration: ``iteration_s`` (both timelines done), the CPU's busy seconds (gaps and host work) and
    its seconds waiting for the device, the device's busy and idle seconds, and ``bound``: ``device`` or ``launch``
    where that side is busy for at least :data:`BOUND_SHARE` of the iteration, else ``mixed``."""

    iteration_s: float
    cpu_busy_s: float
    cpu_wait_s: float
    device_busy_s: float
    device_idle_s: float
    bound: str


def walk(calls: Iterable[Call], tail_s: float = 0.0) -> Walk:
    """Both timelines over ``calls`` in order, then the iteration's final synchronisation and ``tail_s`` of CPU
    work after it (T1 ``<end>``: from the later of the last call's end and its last kernel's end)."""
    cpu = dev = busy_cpu = busy_dev = wait = 0.0
    for c in calls:
        start = cpu + c.gap_s
        launch = start + (c.host_s if c.launch_s is None else min(c.launch_s, c.host_s))
        if c.device_s > 0:
            dev = max(dev, launch) + c.device_s
            busy_dev += c.device_s
        cpu = start + c.host_s
        busy_cpu += c.gap_s + c.host_s
        if c.sync and dev > cpu:
            wait += dev - cpu
            cpu = dev
    wait += max(0.0, dev - cpu)
    end = max(cpu, dev) + tail_s
    busy_cpu += tail_s
    if end <= 0:
        return Walk(0.0, 0.0, 0.0, 0.0, 0.0, "mixed")
    bound = "device" if busy_dev >= BOUND_SHARE * end else "launch" if busy_cpu >= BOUND_SHARE * end else "mixed"
    return Walk(end, busy_cpu, wait, busy_dev, end - busy_dev, bound)


def workload_calls(costed: pd.DataFrame, host_s: float, gap_s: float) -> list[Call]:
    """One workload's calls in the model's call order (its `layers` rows' `positions`; rows without them after the
    rest, ``count`` calls each) from its costed layer rows (:func:`opcost.analysis.predict.costed_layers`): each
    call's device time its configuration's isolated cost (0 where unmeasured), its CPU time ``host_s`` or the row's
    own ``host_s`` where the measurements give one, and ``gap_s`` before it."""
    own = costed["host_s"] if "host_s" in costed else pd.Series(float("nan"), index=costed.index)
    placed, rest = [], []
    for pos, n, cost, host in zip(costed.get("positions", pd.Series(None, index=costed.index)), costed["count"],
                                  costed["cost_s"], own):
        call = Call(gap_s, float(host) if pd.notna(host) else host_s, float(cost) if pd.notna(cost) else 0.0)
        at = json.loads(pos) if isinstance(pos, str) and pos else None
        if at:
            placed += [(int(p), call) for p in at]
        else:
            rest += [call] * int(n)
    return [c for _, c in sorted(placed, key=lambda pc: pc[0])] + rest
