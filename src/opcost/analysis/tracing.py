"""Traces taken: a workload traced and read in this process (:func:`trace_workload`, the trace stage's), or in a
process of its own set up as the measuring ones are (:func:`trace_now`, ``opcost predict``'s short trace of a model
never traced), and the profiler's own cost per call measured (:func:`profiler_dilation`). What the traces' tables
mean, and the overhead model computed from them, is :mod:`opcost.analysis.overhead`'s."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opcost.analysis.overhead import summarize
from opcost.analysis.trace_analysis import iterations
from opcost.analysis.trace_parse import TraceTables, parse
from opcost.errors import OpcostError
from opcost.measure.trace import REPLAY_MARKER, record, record_workload
from opcost.trace_tables import PER_WORKLOAD as _TABLES

log = logging.getLogger(__name__)


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


@dataclass
class WorkloadTrace:
    """A workload's trace, read: the model's iterations (``tables``), the paired replay's (``replay``), the
    per-workload tables keyed by table name (``parts``, see :func:`summarize`) and the configurations left out of
    the replay, {config_id: (op_type, reason)}."""

    tables: TraceTables
    replay: TraceTables
    parts: dict[str, pd.DataFrame]
    left_out: dict[str, tuple[str, str]]


def trace_workload(wl, models: dict, path, device: str = "cpu", dtype: str = "float32", iterations: int = 5,
                   warmup: int = 2, e2e_every: int | None = None) -> WorkloadTrace:
    """Trace workload ``wl`` into ``path`` (:func:`opcost.measure.trace.record_workload`: the model's iterations
    with its operators' replay paired, and on a CPU outside training the glue timed without the profiler) and read
    it: the trace parsed and summarized with the replay's gaps as its ``T1r`` rows and the timed glue as its ``G``
    row. In the calling process, as it is: the caller sets it up as a measuring process."""
    rec = record_workload(wl, models, path, device, dtype, iterations, warmup, e2e_every)
    tt = parse(path)
    replay = tt.with_marker(REPLAY_MARKER)
    return WorkloadTrace(tt, replay, summarize(tt, wl.model.name, wl.mode, wl.batch, device, None, replay, rec.glue),
                         rec.left_out)


TRACE_NOW = {"iterations": 3, "warmup": 1}  # the short trace of a workload never traced: seconds, not minutes


@dataclass(frozen=True)
class KeptTrace:
    """Where :func:`trace_now` keeps a short trace for a later call asking the same: ``folder``, and what else the
    trace must match to be reused (``of``: the workload's operator calls, say)."""
    folder: Path
    of: str = ""


def trace_now(model: tuple, batch: int, mode: str, conditions: dict, dtype: str = "float32",
              keep: KeptTrace | None = None) -> dict[str, pd.DataFrame]:
    """The per-workload trace tables (:func:`summarize`) of a short trace (:data:`TRACE_NOW`) of workload ``model``
    (its name and config entry) at ``batch`` in ``mode``, taken now by :func:`trace_workload` in a process of its
    own set up as the measuring ones are (``conditions``: the device and threads of the costs it goes with; glibc
    keeping freed memory), so that the caller's process keeps its own allocator settings and thread count: a fork of
    the warm process where one serves (:mod:`opcost.warm`), else a new interpreter; not a multiprocessing child, which
    re-runs the caller's main script (under Snakemake's ``script:``, the rule's script). A refusal there
    (:class:`OpcostError`) is raised here as it was. ``keep`` (:class:`KeptTrace`): where the tables are kept, a
    subfolder per workload and what shapes its trace (config entry, batch, mode, conditions, dtype, ``keep.of``); a
    later call asking the same reads them instead of tracing again (the workload's others are discarded)."""
    import tempfile

    if keep is None:
        with tempfile.TemporaryDirectory(prefix="opcost-trace-") as tmp:
            return _trace_into(model, batch, mode, conditions, dtype, Path(tmp))
    import json
    import shutil

    from opcost import io
    from opcost.journal import settings_key

    name = f"{model[0]}_{mode}_b{int(batch)}"
    key = settings_key(model[1] or {}, int(batch), mode, dict(conditions), dtype, TRACE_NOW, keep.of)
    folder = Path(keep.folder) / f"{name}_{key}"
    for other in Path(keep.folder).glob(f"{name}_*"):
        if other != folder and other.name[len(name) + 1:].isalnum():  # this workload's, at other settings
            shutil.rmtree(other, ignore_errors=True)
    done = folder / "complete.json"
    if done.exists():
        log.info("%s %s b%d: the short trace of an earlier run at the same settings reused (%s)", model[0], mode,
                 batch, folder)
        return {t: io.read_parquet(folder / f"{t}.parquet", _TABLES[t]) for t in json.loads(done.read_text())}
    shutil.rmtree(folder, ignore_errors=True)  # an interrupted one
    folder.mkdir(parents=True)
    parts = _trace_into(model, batch, mode, conditions, dtype, folder)
    io.write_json(sorted(parts), done)
    return parts


def _trace_into(model: tuple, batch: int, mode: str, conditions: dict, dtype: str,
                out: Path) -> dict[str, pd.DataFrame]:
    """:func:`trace_now`'s process, its tables written into the folder ``out`` and read back."""
    import json
    import subprocess

    from opcost import io, warm

    request = {"model": list(model), "batch": int(batch), "mode": mode, "conditions": dict(conditions),
               "dtype": dtype, "out": str(out)}
    proc = subprocess.run(warm.command("opcost.analysis.tracing:_child", str(conditions.get("device") or "cpu")),
                          input=json.dumps(request), capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    if proc.returncode == _REFUSED:
        refusal = json.loads(lines[-1])
        raise OpcostError(refusal["culprit"], refusal["cause"])
    if proc.returncode != 0:
        raise OpcostError(f"model {model[0]}", f"its short trace failed: {lines[-1] if lines else proc.returncode}")
    return {name: io.read_parquet(out / f"{name}.parquet", _TABLES[name]) for name in json.loads(proc.stdout)}


_REFUSED = 3  # the exit status of a short trace refused with an OpcostError (its last line on stderr says why)


def _child() -> None:
    """The process :func:`trace_now` starts: the request as JSON on stdin, the tables written as Parquet into its
    ``out`` folder, their names as JSON on stdout."""
    import json
    import sys

    from opcost import io

    req = json.loads(sys.stdin.read())
    try:
        parts = _traced_now(tuple(req["model"]), req["batch"], req["mode"], req["conditions"], req["dtype"])
    except OpcostError as e:
        print(json.dumps({"culprit": e.culprit, "cause": e.cause}), file=sys.stderr)
        sys.exit(_REFUSED)
    for name, table in parts.items():
        io.write_parquet(table, Path(req["out"]) / f"{name}.parquet", _TABLES[name])
    print(json.dumps(list(parts)))


def _traced_now(model: tuple, batch: int, mode: str, conditions: dict, dtype: str) -> dict[str, pd.DataFrame]:
    import tempfile

    from opcost.measure.job import measuring_process
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    name, spec = model
    spec = spec or {}
    device = str(conditions.get("device") or "cpu")
    measuring_process(conditions.get("threads"))
    wl = make_workload(load_model(name, spec, device, dtype), batch, mode)
    with tempfile.TemporaryDirectory(prefix="opcost-trace-") as tmp:
        return trace_workload(wl, {name: spec}, Path(tmp) / "trace.json.gz", device, dtype, **TRACE_NOW).parts
