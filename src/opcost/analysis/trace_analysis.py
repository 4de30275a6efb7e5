"""Analyses of a parsed trace (:class:`opcost.analysis.trace_parse.TraceTables`), the analyzer half of the split
HolisticTraceAnalysis makes: per top-level op call, per op type, per iteration, op -> kernel breakdowns, GEMM and
convolution dimensions, and the CPU overheads T1-T5 with their statistics.

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

The overhead model built from these statistics is :mod:`opcost.analysis.overhead`.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from opcost.analysis.trace_parse import TraceTables
from opcost.trace_tables import TRACE_ITERATIONS

END = "<end>"  # pseudo op type: the gap from an iteration's last op (or kernel) to its end
ALL_TYPES = "<all>"  # pooled statistics over every op type (T1: without <end>)


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
