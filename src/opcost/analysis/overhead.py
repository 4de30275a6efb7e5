"""The CPU overhead model of a traced workload, and the traced workload's tables.

Overhead-aware prediction (:class:`OverheadModel`, :func:`predict`): an iteration costs, per top-level call, its
modelled gap T1 (see :mod:`opcost.analysis.trace_analysis`) plus its cost, plus the ``<end>`` gap; on GPU the cost
of a call is ``max(host side, device time)`` with host side ``T2 + L*T4 + (L-1)*T5 + T3`` for L launches per call
(a per-op critical-path approximation).

What to add to *isolated* costs: an isolated call is timed through the same Python entry points as in the model
(module ``__call__``, the Python binding), so part of every gap T1 is already inside the isolated cost. The
replay trace (:func:`opcost.measure.trace.replay_runner`: the workload's operator configurations replayed one after
the other in the model's call order, each as the profiler calls it) has exactly that part as its gaps, ``T1r``. The
glue the model adds per call of an op type is then ``T1 - T1r``: container modules, the parent's ``forward`` code.
Both traces carry the same profiler bookkeeping per top-level call, which cancels in the difference, provided both
are recorded at the same moments: :func:`opcost.measure.trace.record` with ``paired`` interleaves model and replay
iterations in one profiler session (markers ``MARKER`` and ``REPLAY_MARKER``).
:func:`opcost.analysis.tracing.trace_workload` is that sequence (recording, :func:`opcost.measure.trace.
record_workload`; then parsing and these tables), for the trace stage and for ``opcost predict``'s short trace of a
model never traced (:func:`opcost.analysis.tracing.trace_now`, in a process of its own, set up as the measuring ones by
:func:`opcost.measure.job.measuring_process`).

What a trace cannot see: at microseconds per call the profiler's own bookkeeping between two calls is as large as
the glue and touches memory too, so the replay it records runs as cold as the model, and the operators' own
slowdown inside the model (the caches its glue leaves cold) falls out of the difference. The trace of a workload
therefore also has the model's step and the replay timed without the profiler (:mod:`opcost.measure.glue`), and the
model takes that difference, the glue per iteration, where the traced gaps' sum misses it by more than its noise.

Backward nodes (training; op types starting :data:`ENGINE_NODE`) have no replay: the replay calls forward
operators. Against isolated costs (a paired trace), the gap before a backward node is the autograd engine's work
between two nodes, with no Python glue, which an isolated backward row already holds (the engine's per-call cost is
taken out of it, its per-node cost is not, see :mod:`opcost.measure.engine`), so it adds nothing; netting it of the
forward replay's pooled gap, as an op type the replay lacks, took about 7 µs per backward node out of the
prediction (docs/methodology.md, section 7).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from opcost.analysis.trace_analysis import (
    ALL_TYPES,
    END,
    iterations,
    op_calls,
    op_kernels,
    op_types,
    overhead_samples,
    overheads,
)
from opcost.analysis.trace_parse import TraceTables
from opcost.tables import frame
from opcost.trace_tables import (
    TRACE_ITERATIONS,
    TRACE_OP_KERNELS,
    TRACE_OP_TYPES,
    TRACE_OVERHEAD_SAMPLES,
    TRACE_OVERHEADS,
)

log = logging.getLogger(__name__)


PROFILER = "<profiler>"  # the profiler's own cost per top-level call (opcost.analysis.tracing.profiler_dilation)
REPLAY_KIND = "T1r"  # T1 statistics of the replay trace (see module docstring)
GLUE_KIND = "G"  # the glue per iteration timed without the profiler, model minus replay (opcost.measure.glue)
GLUE_Z = 2.0  # the timed glue replaces the traced gaps' sum where they differ by more than this many standard errors
ENGINE_NODE = "autograd::engine::evaluate_function: "  # the prefix of a backward node's top-level op type


@dataclass(frozen=True)
class OverheadModel:
    """The modelled CPU overheads of one traced workload, seconds.

    ``t1``: op type -> mean gap before a call; ``t1_default``: the pooled mean (for op types the trace lacks);
    ``tail``: the ``<end>`` gap per iteration (gaps net of the calibrated profiler cost per call, a
    ``<profiler>`` T1 row of the statistics, where present; where the statistics have replay rows, kind ``T1r``,
    every gap is instead net of the replay's gap before the same op type, or of its pooled gap: the glue that
    isolated costs lack, see the module docstring; with a ``G`` row as well, the glue timed without the profiler,
    every gap is shifted by one amount per call where their sum misses it beyond its noise, see
    :func:`_with_glue`); ``host``: op type -> host-side time per call on GPU (``T2 + L*T4 + (L-1)*T5 + T3`` for
    L >= 1 launches per call, else the op's mean CPU time); ``gpu``: whether the trace has device activity (then
    :func:`predict` takes the per-call maximum of host and device time)."""

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
        glue = mean.pop((ALL_TYPES, GLUE_KIND), None)
        t1 = {t: v for (t, k), v in mean.items() if k == "T1" and t not in (END, ALL_TYPES)}
        if replay:  # what isolated costs lack: not the backward nodes' gaps (see the module docstring)
            t1.update({t: 0.0 for t in t1 if t.startswith(ENGINE_NODE)})
        t1_default, tail = float(mean.get((ALL_TYPES, "T1"), 0.0)), float(mean.get((END, "T1"), 0.0))
        if replay and glue is not None:
            t1, t1_default = _with_glue(t1, t1_default, tail, types, glue, _glue_se(stats))
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
        return cls(t1, t1_default, tail, host, host_default, gpu)

    def gap_s(self, calls: Mapping[str, float]) -> float:
        """Modelled T1 seconds per iteration for ``calls`` (op type -> calls per iteration), ``<end>`` included.
        Net of a replay, a type's gap may come out negative (two noisy means), but not the iteration's: the model
        runs every entry point the replay runs plus its containers' code, so a negative sum is noise and counts 0."""
        return max(0.0, sum(n * self.t1.get(t, self.t1_default) for t, n in calls.items()) + self.tail)


def _glue_se(stats: pd.DataFrame) -> float:
    from opcost.measure.glue import standard_error

    row = stats[(stats["op_type"] == ALL_TYPES) & (stats["kind"] == GLUE_KIND)].iloc[0]
    return standard_error(float(row["std_s"]) if pd.notna(row["std_s"]) else 0.0, int(row["n"]))


def _with_glue(t1: dict[str, float], t1_default: float, tail: float, types: pd.DataFrame, glue: float,
               se: float) -> tuple[dict[str, float], float]:
    """(t1, t1_default) shifted by the same amount per call so that the workload's own calls cost ``glue`` per
    iteration, where the traced gaps' sum differs from the glue timed without the profiler (kind ``G``, standard
    error ``se``) by more than :data:`GLUE_Z` standard errors; else as they are. The shift is what the trace cannot
    see: the operators' own slowdown inside the model (the caches the glue leaves cold) and glue the profiler's
    bookkeeping hides (:mod:`opcost.measure.glue`). A glue below zero (the replay slower than the model) counts as
    zero: the overhead between operators cannot take back what the operators' own costs hold, and on a noisy host a
    negative median of a few rounds (a 30 ms model: −0.9 ms in one short trace, +0.7 ms in the next) is noise that
    would otherwise wipe out gaps the trace did see."""
    calls = dict(zip(types["op_type"], types["calls"]))
    total = float(sum(calls.values()))
    traced = sum(n * t1.get(t, t1_default) for t, n in calls.items()) + tail
    glue = max(glue, 0.0)
    if total <= 0 or abs(glue - traced) <= GLUE_Z * se:
        return t1, t1_default
    shift = (glue - traced) / total
    return {t: v + shift for t, v in t1.items()}, t1_default + shift


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


SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal"})


def trace_walk(tt: TraceTables, calls: pd.DataFrame | None = None) -> list:
    """Per iteration of a GPU trace, its calls walked on two timelines (:func:`opcost.analysis.critical_path.walk`):
    each top-level call with its own gap T1, CPU time, kernel time and first launch (T2), the calls of
    :data:`SYNC_OPS` synchronising, then the iteration's ``<end>`` gap."""
    from opcost.analysis.critical_path import Call, walk

    calls = op_calls(tt) if calls is None else calls
    samples = overhead_samples(tt, calls)
    tails = samples[(samples["op_type"] == END) & (samples["kind"] == "T1")].groupby("iteration")["seconds"].sum()
    out = []
    for it, c in calls.groupby("iteration", sort=True):
        seq = [Call(gap, host, dev if pd.notna(dev) else 0.0, t2 if pd.notna(t2) else None, op in SYNC_OPS)
               for gap, host, dev, t2, op in zip(c["t1_s"], c["cpu_s"], c["device_s"], c["t2_s"], c["op_type"])]
        out.append(walk(seq, float(tails.get(it, 0.0))))
    return out


def trace_prediction(tt: TraceTables) -> dict:
    """The trace checked against itself: measured_s (median iteration span), plain_s (median over iterations of
    the summed top-level op time: CPU, or device time on GPU), and predicted_s from :func:`predict` with the
    trace's own mean cost per call of each op type and its own overhead model; error = predicted / measured - 1,
    plain_error likewise. On a GPU trace, predicted_s is instead the median over iterations of their calls walked
    on the CPU's and the device's timelines (:func:`trace_walk`), and ``bound`` says which side bounds them."""
    calls = op_calls(tt)
    types = op_types(tt, calls)
    model = OverheadModel.from_tables(overheads(overhead_samples(tt, calls)), types)
    col = "device_s" if tt.has_device else "cpu_s"
    measured = float(iterations(tt, calls)["span_s"].median())
    plain = float(calls.groupby("iteration")[col].sum().reindex(range(tt.n_iterations), fill_value=0.0).median())
    p = predict(dict(zip(types["op_type"], types["calls"])),
                dict(zip(types["op_type"], types[col] / types["calls"])), model)
    predicted, bound = float(p["predicted_s"]), None
    if tt.has_device and len(calls):
        walks = trace_walk(tt, calls)
        predicted = float(np.median([w.iteration_s for w in walks]))
        bound = pd.Series([w.bound for w in walks]).mode().iloc[0]
    return {"measured_s": measured, "plain_s": plain, "predicted_s": predicted,
            "overhead_s": predicted - float(p["ops_s"]), "error": predicted / measured - 1,
            "plain_error": plain / measured - 1, "iterations": tt.n_iterations, "calls": p["calls"], "bound": bound}


def summarize(tt: TraceTables, model: str, mode: str, batch: int, device: str | None = None,
              dilation: float | None = None, replay: TraceTables | None = None, glue=None) -> dict:
    """The per-workload trace tables, keyed by table name, ready for :func:`opcost.io.write_parquet`:
    `trace_op_types`, `trace_iterations`, `trace_op_kernels`, `trace_overheads`, `trace_overhead_samples`;
    ``dilation`` (:func:`opcost.analysis.tracing.profiler_dilation`) becomes the ``<profiler>`` row of
    `trace_overheads`; the T1 statistics of ``replay`` (the trace of :func:`opcost.measure.trace.replay_runner`)
    become its ``T1r`` rows;
    ``glue`` (a :class:`opcost.measure.glue.GlueTiming`) its ``G`` row."""
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
    if glue is not None:
        stats = pd.concat([stats, pd.DataFrame([{"op_type": ALL_TYPES, "kind": GLUE_KIND, "mean_s": glue.glue_s,
                                                 "std_s": glue.std_s, "n": glue.rounds, "outliers": 0}])],
                          ignore_index=True)
    parts = {TRACE_OP_TYPES: op_types(tt, calls), TRACE_ITERATIONS: iterations(tt, calls),
             TRACE_OP_KERNELS: op_kernels(tt), TRACE_OVERHEADS: stats, TRACE_OVERHEAD_SAMPLES: samples}
    return {t.name: frame(t, df.assign(**key)) for t, df in parts.items()}
