"""Kineto (torch.profiler) traces of whole model iterations: recording, a table model, analyses, overhead model.

Recording (:func:`record`) profiles N iterations of a workload after a warm-up, each wrapped in a
``record_function("opcost_iteration")`` marker, and exports Chrome-trace JSON (opens in Perfetto; ``.json.gz`` is
gzipped). :func:`parse` turns a trace into two tables (see `trace_events` and `trace_kernels` in
:mod:`opcost.tables`):

* events: the host-side events (categories ``cpu_op``, ``user_annotation``, ``cuda_runtime``, ``cuda_driver``;
  others, e.g. ``python_function``, are ignored) with their parent by time containment on their (pid, tid), their
  ``depth`` (number of ``cpu_op`` ancestors: user annotations such as the iteration marker do not count), the
  iteration whose marker contains them in time (any thread), and ``top_op``: the id of their top-level op, the
  ``cpu_op`` ancestor-or-self with depth 0;
* kernels: device activities (``kernel``, ``gpu_memcpy``, ``gpu_memset``), each linked to the runtime call that
  launched it by ``args.correlation`` (falling back to the ``ac2g`` flow events), hence to its top-level op and
  iteration.

Iterations are the ``opcost_iteration`` markers, or the ``ProfilerStep#N`` markers in traces recorded elsewhere.

Analyses work on top-level ops (the aten calls the model's Python code issues; their children are the op's own
implementation). CPU overheads follow Lin et al., "Building a performance model for deep learning recommendation
model training on GPUs" (HiPC 2022):

* T1: gap before a top-level op: from the end of the previous top-level op of the iteration (or the iteration start)
  to its start. The gap from the iteration's last op (or last kernel, on GPU) to the iteration end is a T1 of the
  pseudo op type ``<end>``. On a single-threaded CPU trace, sum of T1 + sum of top-level op time = iteration span.
* T2: from a top-level op's start to its first launch (a runtime call with a device activity, or a kernel-launch API);
* T3: from its last launch's end to the op's end;  T4: each launch's duration;
* T5: from one launch's end to the next launch's start within one top-level op.

CPU-only traces have T1 only. Statistics (:func:`overheads`) drop the samples that differ from the same call's
samples in the other iterations by more than 3 robust standard deviations (:func:`outliers`) and report mean, std
and count of the rest.

Overhead-aware prediction (:class:`OverheadModel`, :func:`predict`): an iteration costs, per top-level call, its
modelled gap T1 plus its cost, plus the ``<end>`` gap; on GPU the cost of a call is ``max(host side, device time)``
with host side ``T2 + L*T4 + (L-1)*T5 + T3`` for L launches per call (a per-op critical-path approximation).

What to add to *isolated* costs: an isolated call is timed through the same Python entry points as in the model
(module ``__call__``, the Python binding), so part of every gap T1 is already inside the isolated cost. The
replay trace (:func:`replay_runner`: the workload's operator configurations replayed one after the other in the
model's call order, each as the profiler calls it) has exactly that part as its gaps, ``T1r``. The glue the model
adds per call of an op type is then ``T1 - T1r``: container modules, the parent's ``forward`` code. Both traces
carry the same profiler bookkeeping per top-level call, which cancels in the difference, provided both are
recorded at the same moments: :func:`record` with ``paired`` interleaves model and replay iterations in one
profiler session (markers :data:`MARKER` and :data:`REPLAY_MARKER`).

Backward nodes (training; op types starting :data:`ENGINE_NODE`) have no replay: the replay calls forward
operators. Against isolated costs (a paired trace), the gap before a backward node is the autograd engine's work
between two nodes, with no Python glue, which an isolated backward row already holds (the engine's per-call cost is
taken out of it, its per-node cost is not, see :mod:`opcost.measure.engine`), so it adds nothing; netting it of the
forward replay's pooled gap, as an op type the replay lacks, took about 7 µs per backward node out of the
prediction (docs/methodology.md, section 7).
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from opcost.errors import OpcostError
from opcost.tables import (
    TRACE_EVENTS,
    TRACE_ITERATIONS,
    TRACE_KERNELS,
    TRACE_OP_KERNELS,
    TRACE_OP_TYPES,
    TRACE_OVERHEAD_SAMPLES,
    TRACE_OVERHEADS,
    frame,
)

log = logging.getLogger("opcost")

MARKER = "opcost_iteration"
WARM_MARKER = "opcost_iteration_after_replay"  # paired traces: the unanalysed model iteration after a replay
REPLAY_MARKER = "opcost_replay"  # the paired replay iterations recorded with the model's (see record)
HOST_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_NAMES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaMemcpyAsync", "cudaMemsetAsync", "cudaGraphLaunch", "hipLaunchKernel", "hipExtLaunchKernel",
    "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync", "hipMemsetAsync",
})
END = "<end>"  # pseudo op type: the gap from an iteration's last op (or kernel) to its end
ALL_TYPES = "<all>"  # pooled statistics over every op type (T1: without <end>)
PROFILER = "<profiler>"  # the profiler's own cost per top-level call, calibrated (see profiler_dilation)
REPLAY_KIND = "T1r"  # T1 statistics of the replay trace (see module docstring)
ENGINE_NODE = "autograd::engine::evaluate_function: "  # the prefix of a backward node's top-level op type
_STEP = re.compile(r"ProfilerStep#\d+$")


# ---------------------------------------------------------------------------------------------------- recording


def record(runner, path, iterations: int = 5, warmup: int = 2, device: str | None = None,
           record_shapes: bool = True, paired: Callable[[], object] | None = None) -> Path:
    """Profile ``iterations`` iterations after ``warmup`` unrecorded ones and write the Chrome trace to ``path``.

    ``runner`` is a :class:`opcost.model.workload.Workload` (its ``step()``: forward under inference_mode, or forward +
    loss + backward) or any zero-argument callable (then ``device`` says where it runs, default cpu). Activities:
    CPU, plus CUDA on a cuda device, where each iteration ends with ``torch.cuda.synchronize()`` inside its marker
    so that the marker spans the device work too. ``record_shapes=True``. The file is written atomically.

    ``paired``: a second zero-argument callable (e.g. :func:`replay_runner`) recorded in the same profiler session,
    one call per iteration inside a :data:`REPLAY_MARKER` marker. Each step then runs the runner twice, then the
    replay: the first runner iteration (:data:`WARM_MARKER`, not analysed) finds the state the replay left, the
    second (:data:`MARKER`) follows an iteration, as in a run of the model (after a replay, the model's gaps T1
    read up to twice as long), the same state as the rotation's reference iteration (`profile.e2e_every`). Both
    then run in the same seconds of the machine's life: on a shared host its speed and the profiler's own cost per
    op change between recordings seconds apart, which a difference of two separate traces would take for glue
    (docs/methodology.md, section 7). Read them with ``parse(path)`` and ``parse(path).with_marker(REPLAY_MARKER)``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    if iterations < 1 or warmup < 0:
        raise OpcostError(str(path), f"need iterations >= 1 and warmup >= 0, got {iterations} and {warmup}")
    if hasattr(runner, "step"):
        step = runner.step
        tensors = [t for t in getattr(runner, "inputs", ()) if isinstance(t, torch.Tensor)]
        device = device or (str(tensors[0].device) if tensors else "cpu")
    else:
        step, device = runner, device or "cpu"
    cuda = str(device).startswith("cuda")
    if not cuda:  # Kineto probes for GPUs whatever the activities, and logs an ERROR line where a CUDA build has none
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sched = schedule(wait=0, warmup=warmup, active=iterations, repeat=1)

    def marked(name: str, fn: Callable[[], object]) -> None:
        with record_function(name):
            fn()
            sync()

    with profile(activities=activities, record_shapes=record_shapes, schedule=sched) as prof:
        for _ in range(-warmup, iterations):  # recorded from the first non-warm-up step
            if paired is not None:  # the model's own iteration first, so the recorded one follows an iteration
                marked(WARM_MARKER, step)
            marked(MARKER, step)
            if paired is not None:
                marked(REPLAY_MARKER, paired)
            prof.step()
    from opcost.io import atomic

    path = Path(path)
    suffix = ".json.gz" if path.name.endswith(".gz") else ".json"  # torch gzips when the name ends in .gz
    atomic(path, lambda tmp: prof.export_chrome_trace(str(tmp)), suffix)
    return path


def write_empty(path) -> Path:
    """An empty Chrome trace (no events), gzipped when the name ends in ``.gz``: what a workload that could not be
    traced leaves, so that the run goes on."""
    from opcost.io import atomic

    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open

    def write(tmp):
        with opener(tmp, "wt") as f:
            json.dump({"traceEvents": []}, f)

    atomic(path, write)
    return path


def profiler_dilation(path, calls: int = 2000, repeats: int = 7, record_shapes: bool = True) -> float:
    """Seconds the profiler adds per top-level op call, measured: a loop of ``calls`` cheap aten calls (an add of
    one-element tensors under inference_mode) timed without the profiler and under :func:`record` (same settings;
    its trace written to ``path``), the fastest of ``repeats`` loops each: noise on a shared host only lengthens a
    loop, and a median of unprofiled loops that a neighbour slowed down can exceed the profiled one (the plain loops
    run before and after the recording, so a slow spell on either side does not decide). Gaps T1 in a trace include this
    bookkeeping (the end of one op's record and the start of the next), which the unprofiled model never pays;
    :class:`OverheadModel` subtracts it."""
    import time

    import torch

    a, b = torch.ones(1), torch.ones(1)

    def loop():
        with torch.inference_mode():
            for _ in range(calls):
                torch.add(a, b)

    def plain() -> float:
        fastest = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            loop()
            fastest = min(fastest, time.perf_counter() - t0)
        return fastest

    loop()
    before = plain()
    record(loop, path, iterations=repeats, warmup=1, record_shapes=record_shapes)
    traced = float(iterations(parse(path))["span_s"].min())
    return max(0.0, (traced - min(before, plain())) / calls)


def replay_runner(wl, models_cfg: dict, device: str = "cpu",
                  dtype: str = "float32") -> tuple[Callable[[], None], dict[str, tuple[str, str]]]:
    """One iteration of ``wl``'s operator configurations replayed in the model's call order, each call exactly as
    isolated profiling makes it (:func:`opcost.model.replay.build`, its own synthesized inputs): a model without the
    glue between its operators. Each output is dropped at once: holding each until the call the model drops it at
    (as the rotation does) would lengthen every replay gap by Python bookkeeping and costlier frees, which the
    modelled overhead would then lack (docs/methodology.md, section 7).
    Returns the runner and the configurations left out of it, {config_id: (op_type, reason)}: those that cannot be
    built or fail on a first call (the replayed iteration goes on without them).
    Training workloads replay their forward calls with autograd recording, as isolated forward rows are timed; the
    backward has no per-call Python glue to pair (the engine runs it), so its gaps are netted with the pooled
    replay gap."""
    import torch  # noqa: F401

    from opcost.failures import failure
    from opcost.model.extract import extract, record_calls
    from opcost.model.replay import ModelCache, build, mode_context

    capture = record_calls(wl)
    layers = extract(wl, capture)
    sequence = capture.config_ids(wl.mode)
    rows = {r["config_id"]: r for r in layers.drop_duplicates("config_id").to_dict("records")}
    cache = ModelCache(models_cfg, device, dtype)
    fns, failed = {}, {}
    for cid in dict.fromkeys(sequence):
        try:
            fn = build(rows[cid], cache, device).phases["forward"]
            with mode_context(wl.mode):
                fn()
            fns[cid] = fn
        except Exception as e:  # one configuration that cannot be replayed must not cost the workload its trace
            failed[cid] = (rows[cid]["op_type"], failure(e))
            log.warning("%s %s left out of the replay: %s", cid, rows[cid]["op_type"], failed[cid][1])
    calls = [fns[cid] for cid in sequence if cid in fns]

    def run():
        with mode_context(wl.mode):
            for fn in calls:
                fn()

    return run, failed


# ---------------------------------------------------------------------------------------------------- parsing


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
        """The same trace with iterations delimited by ``marker`` annotations instead (e.g. :data:`REPLAY_MARKER`:
        the paired iterations of :func:`record`)."""
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


# ---------------------------------------------------------------------------------------------------- analyses


def _union(starts, ends) -> float:
    """Total length covered by the intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(zip(starts, ends)):
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0.0)


def _f(col) -> np.ndarray:
    return col.to_numpy(dtype=float, na_value=np.nan)


def _spans(tt: TraceTables) -> pd.DataFrame:
    m = tt.markers
    start, dur = _f(m["ts_us"]), _f(m["dur_us"])
    return pd.DataFrame({"iteration": m["iteration"].astype(int).to_numpy(), "start": start, "dur": dur,
                         "end": start + dur}).set_index("iteration")


def op_calls(tt: TraceTables) -> pd.DataFrame:
    """One row per top-level op call inside an iteration: id, iteration, op_type (the aten name), shapes, ts_us,
    cpu_s (inclusive CPU time), device_s (its kernels' summed duration; missing in traces without device
    activity), launches, t1_s, t2_s, t3_s (missing without launches)."""
    ev = tt.events
    ops = ev[(ev["cat"] == "cpu_op") & (ev["depth"] == 0) & ev["iteration"].notna()].sort_values("ts_us")
    ts, dur = _f(ops["ts_us"]), _f(ops["dur_us"])
    end = ts + dur
    out = pd.DataFrame({"id": ops["id"].astype(int).to_numpy(), "iteration": ops["iteration"].astype(int).to_numpy(),
                        "op_type": ops["name"].to_numpy(), "shapes": ops["shapes"].to_numpy(), "ts_us": ts,
                        "cpu_s": dur * 1e-6})
    kn = tt.kernels.dropna(subset=["top_op"])
    dev = pd.Series(_f(kn["dur_us"]) * 1e-6).groupby(kn["top_op"].astype(int).to_numpy()).sum()
    out["device_s"] = out["id"].map(dev).fillna(0.0).to_numpy(float) if tt.has_device else np.nan
    lau = ev[ev["launch"] & ev["top_op"].notna()]
    lau = pd.DataFrame({"top": lau["top_op"].astype(int).to_numpy(), "ts": _f(lau["ts_us"]),
                        "end": _f(lau["ts_us"]) + _f(lau["dur_us"])})
    g = lau.groupby("top")
    out["launches"] = out["id"].map(g.size()).fillna(0).astype(int)
    out["t2_s"] = (out["id"].map(g["ts"].min()).to_numpy(float) - ts) * 1e-6
    out["t3_s"] = (end - out["id"].map(g["end"].max()).to_numpy(float)) * 1e-6
    # T1: from the latest end of the iteration's earlier top-level ops (or the iteration start) to this op's start
    spans = _spans(tt)
    t1 = np.empty(len(out))
    prev_end: dict[int, float] = {}
    for j, (it, s, e) in enumerate(zip(out["iteration"], out["ts_us"], end)):
        before = prev_end.get(it, spans.at[it, "start"])
        t1[j] = max(0.0, s - before) * 1e-6
        prev_end[it] = max(before, e)
    out["t1_s"] = t1
    return out


def overhead_samples(tt: TraceTables, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every T1..T5 sample: iteration, op_id (missing for ``<end>``), op_type, kind, seconds."""
    calls = op_calls(tt) if calls is None else calls
    parts = [calls.assign(kind="T1", seconds=calls["t1_s"])]
    launching = calls[calls["launches"] > 0]
    parts += [launching.assign(kind=k, seconds=launching[f"t{k[1]}_s"]) for k in ("T2", "T3")]
    # <end>: from the later of the last top-level op's end and the last kernel's end to the iteration end
    spans = _spans(tt)
    last = (calls["ts_us"] + calls["cpu_s"] * 1e6).groupby(calls["iteration"]).max()
    kn = tt.kernels.dropna(subset=["iteration"])
    klast = pd.Series(_f(kn["ts_us"]) + _f(kn["dur_us"])).groupby(kn["iteration"].astype(int).to_numpy()).max()
    busy_end = pd.concat([last, klast], axis=1).max(axis=1).reindex(spans.index)
    tail = ((spans["end"] - busy_end.fillna(spans["start"])).clip(lower=0) * 1e-6)
    parts.append(pd.DataFrame({"iteration": spans.index, "id": pd.NA, "op_type": END, "kind": "T1",
                               "seconds": tail.to_numpy()}))
    ev = tt.events
    lau = ev[ev["launch"] & ev["top_op"].notna() & ev["iteration"].notna()].sort_values("ts_us")
    if len(lau):
        names = ev.set_index("id")["name"]
        lau = lau.assign(op_type=lau["top_op"].astype(int).map(names).to_numpy(), ts_us=_f(lau["ts_us"]),
                         dur_us=_f(lau["dur_us"]))
        lau = lau.assign(end=lau["ts_us"] + lau["dur_us"])
        parts.append(pd.DataFrame({"iteration": lau["iteration"], "id": lau["top_op"], "op_type": lau["op_type"],
                                   "kind": "T4", "seconds": lau["dur_us"] * 1e-6}))
        gap = lau["ts_us"] - lau.groupby("top_op")["end"].shift()
        q = lau[gap.notna()]
        parts.append(pd.DataFrame({"iteration": q["iteration"], "id": q["top_op"], "op_type": q["op_type"],
                                   "kind": "T5", "seconds": gap[gap.notna()] * 1e-6}))
    out = pd.concat([p[["iteration", "id", "op_type", "kind", "seconds"]] for p in parts], ignore_index=True)
    out = out.rename(columns={"id": "op_id"}).astype({"iteration": "Int64", "op_id": "Int64"})
    return out.sort_values(["kind", "iteration", "op_id"], kind="stable", ignore_index=True)


def outliers(samples: pd.DataFrame, k: float = 3.0, min_iterations: int = 5) -> np.ndarray:
    """Boolean mask of the samples (an `overhead_samples` frame) more than ``k`` robust standard deviations
    (1.4826 x the median absolute deviation) from the median of the same sample in the other iterations: same kind,
    same call position in its iteration (rank of the top-level op; ``<end>`` last) and same rank within the op
    (T4/T5). An iteration repeats the same calls, so what differs from the other iterations at one position is an
    interruption (a preemption, the profiler flushing a buffer), while gaps that differ between positions (the
    code before a particular call) are kept. A 3-sigma rule on the pooled samples cannot do this: one outlier among
    n <= 10 iterations is never beyond 3 standard deviations of the mean (the largest possible z is
    (n - 1) / sqrt(n)). Positions with fewer than ``min_iterations`` samples keep them all: the median absolute
    deviation of 3 or 4 samples is too unsteady to call any of them an outlier."""
    if samples.empty:
        return np.zeros(0, dtype=bool)
    s = samples.reset_index(drop=True)
    op = pd.to_numeric(s["op_id"], errors="coerce").astype(float).fillna(np.inf)
    it = pd.to_numeric(s["iteration"], errors="coerce").astype(float).fillna(-1)
    rank = op.groupby([s["kind"], it]).rank(method="dense")
    within = pd.Series(0, index=s.index).groupby([s["kind"], it, op]).cumcount()
    x = pd.to_numeric(s["seconds"], errors="coerce").astype(float)
    keys = [s["kind"], rank, within]
    dev = (x - x.groupby(keys).transform("median")).abs()
    mad = dev.groupby(keys).transform("median")
    enough = x.groupby(keys).transform("count") >= min_iterations
    return ((dev > k * 1.4826 * mad) & (mad > 0) & enough).to_numpy()


def overheads(samples: pd.DataFrame) -> pd.DataFrame:
    """Per (op_type, kind): mean_s, std_s, n of the samples that are not :func:`outliers`, and outliers (samples
    dropped); plus op_type ``<all>`` pooling every op type of a kind (T1: without ``<end>``)."""
    samples = samples.reset_index(drop=True)
    samples = samples.assign(_outlier=outliers(samples))
    pooled = samples[samples["op_type"] != END].assign(op_type=ALL_TYPES)
    rows = []
    for (op_type, kind), g in pd.concat([samples, pooled]).groupby(["op_type", "kind"], sort=True):
        g = g[g["seconds"].notna()]
        x = g["seconds"].to_numpy(dtype=float)
        kept = x[~g["_outlier"].to_numpy(dtype=bool)]
        rows.append({"op_type": op_type, "kind": kind, "mean_s": float(np.mean(kept)) if len(kept) else np.nan,
                     "std_s": float(np.std(kept)) if len(kept) else np.nan, "n": len(kept),
                     "outliers": len(x) - len(kept)})
    return pd.DataFrame(rows, columns=["op_type", "kind", "mean_s", "std_s", "n", "outliers"])


def op_types(tt: TraceTables, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per top-level op type, per iteration (means over the iterations): calls, cpu_s, device_s (missing without
    device activity), launches; sorted by time, largest first."""
    calls = op_calls(tt) if calls is None else calls
    n = max(tt.n_iterations, 1)
    g = calls.groupby("op_type")
    out = pd.DataFrame({"calls": g.size() / n, "cpu_s": g["cpu_s"].sum() / n,
                        "device_s": g["device_s"].sum(min_count=1) / n, "launches": g["launches"].sum() / n})
    key = "device_s" if tt.has_device else "cpu_s"
    return out.sort_values(key, ascending=False).reset_index()


def iterations(tt: TraceTables, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per iteration: span_s (marker duration), ops (top-level calls), cpu_busy_s (union of top-level op time),
    cpu_idle_s = span - busy, device_busy_s (union of its kernels' time within the span) and device_idle_s
    (missing without device activity)."""
    calls = op_calls(tt) if calls is None else calls
    rows = []
    kn = tt.kernels.dropna(subset=["iteration"])
    for it, r in _spans(tt).iterrows():
        c = calls[calls["iteration"] == it]
        busy = _union(c["ts_us"], c["ts_us"] + c["cpu_s"] * 1e6) * 1e-6
        span = r["dur"] * 1e-6
        row = {"iteration": it, "span_s": span, "ops": len(c), "cpu_busy_s": busy, "cpu_idle_s": span - busy,
               "device_busy_s": np.nan, "device_idle_s": np.nan}
        if tt.has_device:
            k = kn[kn["iteration"] == it]
            s = np.clip(_f(k["ts_us"]), r["start"], r["end"])
            e = np.clip(_f(k["ts_us"]) + _f(k["dur_us"]), r["start"], r["end"])
            row["device_busy_s"] = _union(s, e) * 1e-6
            row["device_idle_s"] = span - row["device_busy_s"]
        rows.append(row)
    return pd.DataFrame(rows, columns=TRACE_ITERATIONS.names[4:])


def op_kernels(tt: TraceTables) -> pd.DataFrame:
    """Per (top-level op type, its input shapes, kernel name): count and total_s per iteration, mean_s per kernel.
    Empty for traces without device activity."""
    kn = tt.kernels.dropna(subset=["top_op", "iteration"])
    ops = tt.events.set_index("id")
    kn = kn.assign(op_type=ops.loc[kn["top_op"].astype(int), "name"].to_numpy(),
                   shapes=ops.loc[kn["top_op"].astype(int), "shapes"].to_numpy(), kernel=kn["name"])
    n = max(tt.n_iterations, 1)
    g = kn.groupby(["op_type", "shapes", "kernel"], dropna=False)["dur_us"]
    out = pd.DataFrame({"count": g.size() / n, "total_s": g.sum() * 1e-6 / n, "mean_s": g.mean() * 1e-6})
    return out.reset_index().sort_values("total_s", ascending=False, ignore_index=True)


# ---------------------------------------------------------------------------------------------------- GEMM / conv

_GEMM = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2),
         "aten::matmul": (0, 1), "aten::linear": (0, 1)}
_CONV = ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution",
         "aten::mkldnn_convolution", "aten::_nnpack_spatial_convolution")
DIMS = ("M", "N", "K", "batch", "C", "H", "W", "R", "S")


def dims(name: str, shapes) -> dict | None:
    """GEMM or convolution dimensions of an op call from its input shapes (a list, or its JSON), else None.

    GEMM (``kind = gemm``): output M x N, reduction K, ``batch`` independent products: ``mm(A[M,K], B[K,N])``,
    ``addmm(bias, A, B)``, ``bmm(A[b,M,K], B[b,K,N])``, ``baddbmm``, ``matmul`` (broadcast batch; 1-D operands
    give M or N = 1), ``linear(x[..., K], W[N, K])`` with M = product of x's leading dimensions.
    Convolution (``kind = conv``, 2-D only): input [N, C, H, W], weight [K, C/groups, R, S]; for a transposed
    convolution's ``aten::convolution`` the weight's first dimension is read as K all the same."""
    if isinstance(shapes, str):
        shapes = json.loads(shapes)
    if not shapes:
        return None
    try:
        if name in _GEMM:
            i, j = _GEMM[name]
            a, b = list(shapes[i]), list(shapes[j])
            if name == "aten::linear":
                return {"kind": "gemm", "M": int(np.prod(a[:-1])), "N": b[0], "K": b[1], "batch": 1}
            if not a or not b:
                return None
            m, k = (a[-2], a[-1]) if len(a) > 1 else (1, a[0])
            n = b[-1] if len(b) > 1 else 1
            lead = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
            return {"kind": "gemm", "M": m, "N": n, "K": k, "batch": int(np.prod(lead))}
        if name in _CONV:
            x, w = shapes[0], shapes[1]
            if len(x) != 4 or len(w) != 4:
                return None
            return {"kind": "conv", "N": x[0], "C": x[1], "H": x[2], "W": x[3], "K": w[0], "R": w[2], "S": w[3]}
    except (IndexError, TypeError, ValueError):
        return None
    return None


def op_dims(tt: TraceTables, top_only: bool = True) -> pd.DataFrame:
    """GEMM/conv dimensions (see :func:`dims`) of the op calls inside iterations (only top-level ones by default):
    id, iteration, name, kind, M, N, K, batch, C, H, W, R, S (missing where they do not apply)."""
    ev = tt.events
    sel = ev[(ev["cat"] == "cpu_op") & ev["iteration"].notna() & ev["name"].isin(list(_GEMM) + list(_CONV))]
    if top_only:
        sel = sel[sel["depth"] == 0]
    rows = []
    for i, it, name, shapes in zip(sel["id"], sel["iteration"], sel["name"], sel["shapes"]):
        d = dims(name, shapes) if pd.notna(shapes) else None
        if d:
            rows.append({"id": i, "iteration": it, "name": name, **d})
    out = pd.DataFrame(rows, columns=["id", "iteration", "name", "kind", *DIMS])
    return out.astype({c: "Int64" for c in ("id", "iteration", *DIMS)})


# ---------------------------------------------------------------------------------------------------- prediction


@dataclass(frozen=True)
class OverheadModel:
    """The modelled CPU overheads of one traced workload, seconds.

    ``t1``: op type -> mean gap before a call; ``t1_default``: the pooled mean (for op types the trace lacks);
    ``tail``: the ``<end>`` gap per iteration (gaps net of the calibrated profiler cost per call, a
    ``<profiler>`` T1 row of the statistics, where present; where the statistics have replay rows, kind ``T1r``,
    every gap is instead net of the replay's gap before the same op type, or of its pooled gap: the glue that
    isolated costs lack, see the module docstring); ``host``: op type -> host-side time per call on GPU
    (``T2 + L*T4 + (L-1)*T5 + T3`` for L >= 1 launches per call, else the op's mean CPU time); ``gpu``: whether
    the trace has device activity (then :func:`predict` takes the per-call maximum of host and device time)."""

    t1: dict[str, float]
    t1_default: float
    tail: float
    host: dict[str, float] = field(default_factory=dict)
    host_default: float = 0.0
    gpu: bool = False

    @classmethod
    def from_trace(cls, tt: TraceTables) -> OverheadModel:
        calls = op_calls(tt)
        return cls.from_tables(overheads(overhead_samples(tt, calls)), op_types(tt, calls))

    @classmethod
    def from_tables(cls, stats: pd.DataFrame, types: pd.DataFrame) -> OverheadModel:
        """From a `trace_overheads` and a `trace_op_types` frame of one workload (extra columns are ignored)."""
        mean = {(t, k): v for t, k, v in zip(stats["op_type"], stats["kind"], stats["mean_s"]) if pd.notna(v)}
        dilation = float(mean.pop((PROFILER, "T1"), 0.0))  # the profiler's own cost in each gap
        replay = {t: v for (t, k), v in mean.items() if k == REPLAY_KIND}
        if replay:  # net of what isolated calls already include (the profiler's cost cancels too)
            pooled = replay.get(ALL_TYPES, 0.0)
            mean = {(t, k): v - replay.get(t, pooled) if k == "T1" else v for (t, k), v in mean.items()
                    if k != REPLAY_KIND}
        else:
            mean = {(t, k): max(0.0, v - dilation) if k == "T1" else v for (t, k), v in mean.items()}
        t1 = {t: v for (t, k), v in mean.items() if k == "T1" and t not in (END, ALL_TYPES)}
        if replay:  # what isolated costs lack: not the backward nodes' gaps (see the module docstring)
            t1.update({t: 0.0 for t in t1 if t.startswith(ENGINE_NODE)})
        gpu = bool(types["device_s"].notna().any()) if len(types) else False
        host = {}
        for t, calls, cpu, launches in zip(types["op_type"], types["calls"], types["cpu_s"], types["launches"]):
            per_call = float(cpu) / float(calls)
            n = float(launches) / float(calls)
            parts = [mean.get((t, k)) for k in ("T2", "T3", "T4", "T5")]
            if gpu and n >= 1 and all(p is not None for p in parts[:3]):
                t2, t3, t4, t5 = parts
                host[t] = t2 + n * t4 + (n - 1) * (t5 or 0.0) + t3
            else:
                host[t] = per_call
        total_calls = float(types["calls"].sum()) if len(types) else 0.0
        host_default = float(sum(host[t] * c for t, c in zip(types["op_type"], types["calls"])) / total_calls) \
            if total_calls else 0.0
        return cls(t1, float(mean.get((ALL_TYPES, "T1"), 0.0)), float(mean.get((END, "T1"), 0.0)), host,
                   host_default, gpu)

    def gap_s(self, calls: Mapping[str, float]) -> float:
        """Modelled T1 seconds per iteration for ``calls`` (op type -> calls per iteration), ``<end>`` included.
        Net of a replay, a type's gap may come out negative (two noisy means), but not the iteration's: the model
        runs every entry point the replay runs plus its containers' code, so a negative sum is noise and counts 0."""
        return max(0.0, sum(n * self.t1.get(t, self.t1_default) for t, n in calls.items()) + self.tail)


def predict(calls: Mapping[str, float], costs: Mapping[str, float], model: OverheadModel) -> dict:
    """Overhead-aware iteration time from op costs.

    ``calls``: op type -> calls per iteration; ``costs``: op type -> seconds per call (on GPU: device time per
    call); op types without a cost count their gaps (and, on GPU, host time) only. CPU: sum of calls x (cost + T1)
    + ``<end>``. GPU: sum of calls x (T1 + max(host, cost)) + ``<end>``. Returns predicted_s, ops_s (sum of calls x
    cost), overhead_s (the rest), calls and uncovered_calls (calls of op types without a cost)."""
    ops = sum(n * costs[t] for t, n in calls.items() if t in costs)
    if model.gpu:
        busy = sum(n * max(model.host.get(t, model.host_default), costs.get(t, 0.0)) for t, n in calls.items())
        predicted = busy + model.gap_s(calls)
    else:
        predicted = ops + model.gap_s(calls)
    return {"predicted_s": predicted, "ops_s": ops, "overhead_s": predicted - ops,
            "calls": float(sum(calls.values())), "uncovered_calls": float(sum(n for t, n in calls.items()
                                                                            if t not in costs))}


def trace_prediction(tt: TraceTables) -> dict:
    """The trace checked against itself: measured_s (median iteration span), plain_s (median over iterations of
    the summed top-level op time: CPU, or device time on GPU), and predicted_s from :func:`predict` with the
    trace's own mean cost per call of each op type and its own overhead model; error = predicted / measured - 1,
    plain_error likewise."""
    calls = op_calls(tt)
    types = op_types(tt, calls)
    model = OverheadModel.from_tables(overheads(overhead_samples(tt, calls)), types)
    col = "device_s" if tt.has_device else "cpu_s"
    measured = float(iterations(tt, calls)["span_s"].median())
    plain = float(calls.groupby("iteration")[col].sum().reindex(range(tt.n_iterations), fill_value=0.0).median())
    p = predict(dict(zip(types["op_type"], types["calls"])),
                dict(zip(types["op_type"], types[col] / types["calls"])), model)
    return {"measured_s": measured, "plain_s": plain, "predicted_s": float(p["predicted_s"]),
            "overhead_s": float(p["overhead_s"]), "error": float(p["predicted_s"] / measured - 1),
            "plain_error": plain / measured - 1, "iterations": tt.n_iterations, "calls": p["calls"]}


def summarize(tt: TraceTables, model: str, mode: str, batch: int, device: str | None = None,
              dilation: float | None = None, replay: TraceTables | None = None) -> dict:
    """The per-workload trace tables, keyed by table name, ready for :func:`opcost.io.write_parquet`:
    `trace_op_types`, `trace_iterations`, `trace_op_kernels`, `trace_overheads`, `trace_overhead_samples`;
    ``dilation`` (from :func:`profiler_dilation`) becomes the ``<profiler>`` row of `trace_overheads`; the T1
    statistics of ``replay`` (the trace of :func:`replay_runner`) become its ``T1r`` rows."""
    key = {"model": model, "mode": mode, "batch": batch,
           "device": device or ("cuda" if tt.has_device else "cpu")}
    calls = op_calls(tt)
    samples = overhead_samples(tt, calls)
    stats = overheads(samples)
    if dilation is not None:
        stats = pd.concat([stats, pd.DataFrame([{"op_type": PROFILER, "kind": "T1", "mean_s": dilation,
                                                 "std_s": np.nan, "n": 1, "outliers": 0}])], ignore_index=True)
    if replay is not None:
        r = overheads(overhead_samples(replay))
        stats = pd.concat([stats, r[r["kind"] == "T1"].assign(kind=REPLAY_KIND)], ignore_index=True)
    parts = {TRACE_OP_TYPES: op_types(tt, calls), TRACE_ITERATIONS: iterations(tt, calls),
             TRACE_OP_KERNELS: op_kernels(tt), TRACE_OVERHEADS: stats, TRACE_OVERHEAD_SAMPLES: samples}
    return {t.name: frame(t, df.assign(**key)) for t, df in parts.items()}
