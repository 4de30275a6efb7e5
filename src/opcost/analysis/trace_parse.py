"""Parsing Kineto (torch.profiler) Chrome traces into two tables (the parser half of the split HolisticTraceAnalysis
makes between its trace parser and its analyzers; the analyses are :mod:`opcost.analysis.trace_analysis`).

:func:`parse` turns a trace (``.json`` or ``.json.gz``, recorded by :func:`opcost.measure.trace.record` or
elsewhere) into a :class:`TraceTables` (see `trace_events` and `trace_kernels` in :mod:`opcost.tables`):

* events: the host-side events (categories ``cpu_op``, ``user_annotation``, ``cuda_runtime``, ``cuda_driver``;
  others, e.g. ``python_function``, are ignored) with their parent by time containment on their (pid, tid), their
  ``depth`` (number of ``cpu_op`` ancestors: user annotations such as the iteration marker do not count), the
  iteration whose marker contains them in time (any thread), and ``top_op``: the id of their top-level op, the
  ``cpu_op`` ancestor-or-self with depth 0;
* kernels: device activities (``kernel``, ``gpu_memcpy``, ``gpu_memset``), each linked to the runtime call that
  launched it by ``args.correlation`` (falling back to the ``ac2g`` flow events), hence to its top-level op and
  iteration.

Iterations are the ``opcost_iteration`` markers (:data:`opcost.measure.trace.MARKER`), or the ``ProfilerStep#N``
markers in traces recorded elsewhere; :meth:`TraceTables.with_marker` reads the same trace through another marker
(the paired replay's).
"""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from opcost.errors import OpcostError
from opcost.measure.trace import MARKER
from opcost.tables import frame
from opcost.trace_tables import TRACE_EVENTS, TRACE_KERNELS

HOST_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_NAMES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaMemcpyAsync", "cudaMemsetAsync", "cudaGraphLaunch", "hipLaunchKernel", "hipExtLaunchKernel",
    "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync", "hipMemsetAsync",
})
_STEP = re.compile(r"ProfilerStep#\d+$")


@dataclass
class TraceTables:
    """A parsed trace: `trace_events` and `trace_kernels` rows (see :mod:`opcost.tables`), their `iteration`
    column numbering the spans of the ``marker`` annotations."""

    events: pd.DataFrame
    kernels: pd.DataFrame
    path: str = ""
    marker: str = MARKER

    @property
    def markers(self) -> pd.DataFrame:
        """The iteration markers, one row per iteration, in iteration order."""
        ev = self.events
        return ev[_marker_mask(ev, self.marker) & ev["iteration"].notna()].sort_values("iteration")

    def with_marker(self, marker: str) -> TraceTables:
        """The same trace with iterations delimited by ``marker`` annotations instead (e.g.
        :data:`opcost.measure.trace.REPLAY_MARKER`: the paired iterations of :func:`opcost.measure.trace.record`)."""
        ev = self.events.assign(iteration=_iterations(self.events, marker))
        kn = self.kernels.assign(iteration=self.kernels["launch_id"].map(ev.set_index("id")["iteration"]))
        return TraceTables(frame(TRACE_EVENTS, ev), frame(TRACE_KERNELS, kn), self.path, marker)

    @property
    def n_iterations(self) -> int:
        return len(self.markers)

    @property
    def has_device(self) -> bool:
        return len(self.kernels) > 0


def _marker_mask(ev: pd.DataFrame, marker: str = MARKER) -> pd.Series:
    """The annotations that delimit iterations: ``marker``; for :data:`MARKER` in a trace without it (recorded
    elsewhere), the ``ProfilerStep#N`` steps."""
    ann = ev["cat"] == "user_annotation"
    ours = ann & (ev["name"] == marker)
    if ours.any() or marker != MARKER:
        return ours
    return ann & ev["name"].str.match(_STEP).fillna(False).astype(bool)


def _load(path: Path) -> list:
    try:
        with (gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)) as f:
            doc = json.load(f)
    except (OSError, EOFError, ValueError) as e:  # JSONDecodeError, UnicodeDecodeError and BadGzipFile included
        raise OpcostError(str(path), f"not a readable Kineto trace: {type(e).__name__}: {e}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise OpcostError(str(path), "not a Chrome trace: no traceEvents list")
    return events


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def parse(path, cache: bool = False) -> TraceTables:
    """The event and kernel tables of the trace at ``path`` (``.json`` or ``.json.gz``).

    With ``cache``, the tables are kept next to the trace (``<path>.events.parquet``, ``<path>.kernels.parquet``)
    and read from there while they are newer than the trace. An unreadable trace raises :class:`OpcostError`
    naming the file."""
    from opcost import io

    path = Path(path)
    cached = (path.with_name(path.name + ".events.parquet"), path.with_name(path.name + ".kernels.parquet"))
    if cache and all(p.exists() and p.stat().st_mtime >= path.stat().st_mtime for p in cached):
        try:
            return TraceTables(io.read_parquet(cached[0], TRACE_EVENTS), io.read_parquet(cached[1], TRACE_KERNELS),
                               str(path))
        except (OpcostError, OSError):
            pass  # stale or foreign cache: parse again
    tt = _parse(path)
    if cache:
        io.write_parquet(tt.events, cached[0], TRACE_EVENTS)
        io.write_parquet(tt.kernels, cached[1], TRACE_KERNELS)
    return tt


def _parse(path: Path) -> TraceTables:
    host, dev = [], []
    flow_start, flow_end = {}, {}  # ac2g flows: id -> host position, device position -> id
    for e in _load(path):
        if not isinstance(e, dict) or not isinstance(e.get("ts"), (int, float)):
            continue
        ph, cat = e.get("ph"), e.get("cat")
        if ph in ("s", "f") and cat == "ac2g":
            pos = (str(e.get("pid")), str(e.get("tid")), float(e["ts"]))
            if ph == "s":
                flow_start[e.get("id")] = pos
            else:
                flow_end[pos] = e.get("id")
            continue
        if ph != "X" or (cat not in HOST_CATS and cat not in DEVICE_CATS):
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        row = (str(e.get("name", "")), cat, float(e["ts"]), float(e.get("dur") or 0.0), str(e.get("pid")),
               str(e.get("tid")), _int(args.get("correlation")))
        if cat in HOST_CATS:
            dims = args.get("Input Dims")
            host.append(row + (json.dumps(dims) if dims is not None else None,))
        else:
            dev.append(row + (_int(args.get("device")), _int(args.get("stream"))))

    cols = ["name", "cat", "ts_us", "dur_us", "pid", "tid", "correlation"]
    ev = pd.DataFrame(host, columns=cols + ["shapes"]).sort_values(["ts_us", "dur_us"], ascending=[True, False],
                                                                    kind="stable", ignore_index=True)
    ev.insert(0, "id", np.arange(len(ev)))
    parent, depth, top = _tree(ev)
    ev["parent"], ev["depth"], ev["top_op"] = parent, depth, top
    ev["iteration"] = _iterations(ev)

    kn = pd.DataFrame(dev, columns=cols + ["device", "stream"]).sort_values("ts_us", kind="stable",
                                                                             ignore_index=True)
    kn.insert(0, "id", np.arange(len(kn)))
    runtime = ev[ev["cat"].isin(RUNTIME_CATS)]
    by_corr = dict(zip(runtime["correlation"].dropna().astype(int), runtime.loc[runtime["correlation"].notna(), "id"]))
    by_pos = {(p, t, s): i for i, p, t, s in zip(runtime["id"], runtime["pid"], runtime["tid"], runtime["ts_us"])}
    launch = []
    for c, p, t, s in zip(kn["correlation"], kn["pid"], kn["tid"], kn["ts_us"]):
        i = by_corr.get(int(c)) if pd.notna(c) else None
        if i is None:  # no correlation: follow the flow arrow back to its runtime call
            i = by_pos.get(flow_start.get(flow_end.get((p, t, s)), ()))
        launch.append(i)
    kn["launch_id"] = pd.array(launch, dtype="Int64")
    links = ev.set_index("id")
    kn["top_op"] = kn["launch_id"].map(links["top_op"])
    kn["iteration"] = kn["launch_id"].map(links["iteration"])
    launched = set(kn["launch_id"].dropna().astype(int))
    ev["launch"] = ev["cat"].isin(RUNTIME_CATS) & (ev["name"].isin(LAUNCH_NAMES) | ev["id"].isin(launched))
    return TraceTables(frame(TRACE_EVENTS, ev), frame(TRACE_KERNELS, kn), str(path))


def _tree(ev: pd.DataFrame):
    """Parent (innermost enclosing event on the same pid/tid), cpu_op-ancestor depth and top-level op of each event;
    one sort and one stack pass, O(n log n)."""
    n = len(ev)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    top = np.full(n, -1, dtype=np.int64)
    ts, end = ev["ts_us"].to_numpy(), (ev["ts_us"] + ev["dur_us"]).to_numpy()
    is_op = (ev["cat"] == "cpu_op").to_numpy()
    order = ev.sort_values(["pid", "tid", "ts_us", "dur_us"], ascending=[True, True, True, False],
                           kind="stable").index.to_numpy()
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    stack: list[int] = []
    key = None
    for i in order:
        if (pid[i], tid[i]) != key:
            stack, key = [], (pid[i], tid[i])
        while stack and end[stack[-1]] <= ts[i]:
            stack.pop()
        if stack:
            p = stack[-1]
            parent[i], depth[i], top[i] = p, depth[p] + is_op[p], top[p]
        if is_op[i] and depth[i] == 0:
            top[i] = i
        stack.append(i)
    na = pd.NA
    return (pd.array([x if x >= 0 else na for x in parent], dtype="Int64"), depth,
            pd.array([x if x >= 0 else na for x in top], dtype="Int64"))


def _iterations(ev: pd.DataFrame, marker: str = MARKER) -> pd.array:
    """Index (in time order) of the iteration marker whose span contains each event's start, any thread."""
    m = ev[_marker_mask(ev, marker)].sort_values("ts_us")
    ts, starts, ends = ev["ts_us"].to_numpy(), m["ts_us"].to_numpy(), (m["ts_us"] + m["dur_us"]).to_numpy()
    k = np.full(len(ev), -1)
    if len(m):
        k = np.searchsorted(starts, ts, side="right") - 1
        k = np.where((k >= 0) & (ts < ends[np.clip(k, 0, None)]), k, -1)
    return pd.array([x if x >= 0 else pd.NA for x in k], dtype="Int64")
