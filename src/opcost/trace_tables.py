"""The data contracts of Kineto traces of whole model iterations (:mod:`opcost.analysis.trace_parse`,
:mod:`opcost.analysis.trace_analysis`); times inside parsed traces keep the trace's microseconds."""
from __future__ import annotations

from opcost.table_types import MODEL_KEY, Table
from opcost.table_types import column as _c

_TRACE_KEY = MODEL_KEY + (
    _c("device", "string", "`cpu` or `cuda[:N]`: where the traced model ran"),
)

TRACE_EVENTS = Table(
    "trace_events", "{trace}.events.parquet (cache of opcost.analysis.trace_parse.parse, next to the trace)",
    "Host-side events of a Kineto trace (categories cpu_op, user_annotation, cuda_runtime, cuda_driver).",
    (
        _c("id", "Int64", "event id: rank in time order (start, longer first)"),
        _c("name", "string", "event name (`aten::addmm`, `cudaLaunchKernel`, `opcost_iteration`)"),
        _c("cat", "string", "Kineto category"),
        _c("ts_us", "Float64", "start, microseconds on the trace's clock"),
        _c("dur_us", "Float64", "duration, microseconds"),
        _c("pid", "string", "process id as in the trace"),
        _c("tid", "string", "thread id as in the trace"),
        _c("correlation", "Int64", "runtime calls: correlation id linking them to their device activity"),
        _c("shapes", "string", "JSON list of the input shapes (`Input Dims`, recorded with record_shapes)"),
        _c("parent", "Int64", "id of the innermost event of the same pid/tid enclosing it in time; missing at "
                              "the root"),
        _c("depth", "Int64", "number of cpu_op ancestors (top-level ops: 0; annotations do not count)"),
        _c("top_op", "Int64", "id of its top-level op (the cpu_op ancestor-or-self of depth 0); missing outside ops"),
        _c("iteration", "Int64", "index of the iteration marker containing its start (any thread); missing outside "
                                 "iterations"),
        _c("launch", "boolean", "a runtime call that launches device work (a kernel-launch or async memcpy/memset "
                                "API, or correlated with a device activity)"),
    ),
)

TRACE_KERNELS = Table(
    "trace_kernels", "{trace}.kernels.parquet (cache of opcost.analysis.trace_parse.parse, next to the trace)",
    "Device activities of a Kineto trace (categories kernel, gpu_memcpy, gpu_memset); empty for CPU-only traces.",
    (
        _c("id", "Int64", "activity id: rank in time order"),
        _c("name", "string", "kernel (or memcpy/memset) name"),
        _c("cat", "string", "Kineto category"),
        _c("ts_us", "Float64", "start, microseconds on the trace's clock"),
        _c("dur_us", "Float64", "duration, microseconds"),
        _c("pid", "string", "process id as in the trace (the device)"),
        _c("tid", "string", "thread id as in the trace (the stream)"),
        _c("correlation", "Int64", "correlation id of the launching runtime call"),
        _c("device", "Int64", "device index"),
        _c("stream", "Int64", "stream id"),
        _c("launch_id", "Int64", "`trace_events` id of the launching runtime call (by correlation, else by the "
                                 "ac2g flow)"),
        _c("top_op", "Int64", "`trace_events` id of the launching top-level op"),
        _c("iteration", "Int64", "iteration of the launching call"),
    ),
)

TRACE_OP_TYPES = Table(
    "trace_op_types", "results/trace/{model}/{mode}_b{batch}.op_types.parquet",
    "Per workload and top-level op type (aten name), from its trace: means per iteration.",
    _TRACE_KEY + (
        _c("op_type", "string", "top-level op name (`aten::conv2d`)"),
        _c("calls", "Float64", "calls per iteration"),
        _c("cpu_s", "Float64", "inclusive CPU seconds per iteration"),
        _c("device_s", "Float64", "seconds per iteration of the device activities the calls launched; missing "
                                  "without device activity"),
        _c("launches", "Float64", "launching runtime calls per iteration"),
    ),
)

TRACE_ITERATIONS = Table(
    "trace_iterations", "results/trace/{model}/{mode}_b{batch}.iterations.parquet",
    "Per traced iteration: span, busy and idle time.",
    _TRACE_KEY + (
        _c("iteration", "Int64", "iteration index in the trace"),
        _c("span_s", "Float64", "iteration marker duration, seconds (on CUDA it includes a final synchronize)"),
        _c("ops", "Int64", "top-level op calls"),
        _c("cpu_busy_s", "Float64", "union of the top-level ops' CPU time, seconds"),
        _c("cpu_idle_s", "Float64", "span_s - cpu_busy_s"),
        _c("device_busy_s", "Float64", "union of the iteration's device activities within the span; missing "
                                       "without device activity"),
        _c("device_idle_s", "Float64", "span_s - device_busy_s"),
    ),
)

TRACE_OP_KERNELS = Table(
    "trace_op_kernels", "results/trace/{model}/{mode}_b{batch}.op_kernels.parquet",
    "Which kernels each top-level op type launches, per input shapes; empty for CPU-only traces.",
    _TRACE_KEY + (
        _c("op_type", "string", "top-level op name"),
        _c("shapes", "string", "JSON input shapes of the op calls"),
        _c("kernel", "string", "kernel (or memcpy/memset) name"),
        _c("count", "Float64", "launches per iteration"),
        _c("total_s", "Float64", "kernel seconds per iteration"),
        _c("mean_s", "Float64", "mean seconds per kernel"),
    ),
)

TRACE_OVERHEAD_SAMPLES = Table(
    "trace_overhead_samples", "results/trace/{model}/{mode}_b{batch}.overhead_samples.parquet",
    "CPU overhead samples T1-T5 (Lin et al. 2022; see `opcost.analysis.trace_analysis`) of the traced iterations.",
    _TRACE_KEY + (
        _c("iteration", "Int64", "iteration index in the trace"),
        _c("op_id", "Int64", "`trace_events` id of the top-level op; missing for `<end>`"),
        _c("op_type", "string", "top-level op name, or `<end>`: the gap from the last op (or kernel) to the "
                                "iteration end"),
        _c("kind", "string", "T1 gap before a top-level op; T2 op start to first launch; T3 last launch end to op "
                             "end; T4 launch duration; T5 gap between consecutive launches of one op"),
        _c("seconds", "Float64", "the sample, seconds"),
    ),
)

TRACE_OVERHEADS = Table(
    "trace_overheads", "results/trace/{model}/{mode}_b{batch}.overheads.parquet",
    "Statistics of `trace_overhead_samples` per op type and kind, after dropping outliers: samples more than 3 "
    "robust standard deviations (1.4826 x MAD) from the median of the same call position over the iterations "
    "(positions recorded in at least 5 iterations; `opcost.analysis.trace_analysis.outliers`).",
    _TRACE_KEY + (
        _c("op_type", "string", "as in `trace_overhead_samples`, or `<all>`: every op type pooled (without "
                                "`<end>`), or `<profiler>` (kind T1, CPU traces): the profiler's own cost per "
                                "top-level call, calibrated in the same job and subtracted from T1 in predictions"),
        _c("kind", "string", "T1 ... T5, or `T1r`: T1 of the workload's operator configurations replayed as "
                             "isolated profiling calls them, in the model's order, recorded in the same trace "
                             "(iterations marked `opcost_replay`, one after each analysed model iteration; "
                             "inference): the "
                             "part of each gap isolated costs already include; or `G` (op type `<all>`, CPU, "
                             "outside training): the glue per iteration, the model's step minus that replay timed "
                             "without the profiler, alternately (`mean_s` their median difference over `n` rounds, "
                             "`std_s` its spread; opcost.measure.glue)"),
        _c("mean_s", "Float64", "mean of the kept samples, seconds"),
        _c("std_s", "Float64", "standard deviation of the kept samples, seconds"),
        _c("n", "Int64", "kept samples"),
        _c("outliers", "Int64", "dropped samples"),
    ),
)

ALL = (TRACE_EVENTS, TRACE_KERNELS, TRACE_OP_TYPES, TRACE_ITERATIONS, TRACE_OP_KERNELS, TRACE_OVERHEAD_SAMPLES,
             TRACE_OVERHEADS)
# the tables a traced workload is summarized into (opcost.analysis.overhead.summarize), by name
PER_WORKLOAD = {t.name: t for t in (TRACE_OP_TYPES, TRACE_ITERATIONS, TRACE_OP_KERNELS, TRACE_OVERHEADS,
                                    TRACE_OVERHEAD_SAMPLES)}
