"""Recording Kineto (torch.profiler) traces of whole model iterations, and the replay recorded beside them.

:func:`record` profiles N iterations of a workload after a warm-up, each wrapped in a ``record_function`` marker
(:data:`MARKER`), and exports Chrome-trace JSON (opens in Perfetto; ``.json.gz`` is gzipped). With ``paired`` it
records a second callable in the same profiler session, each call inside a :data:`REPLAY_MARKER` marker: the
:func:`replay_runner`, the workload's operator configurations replayed one after the other in the model's call
order, each as isolated profiling calls it (a model without the glue between its operators). Reading and analysing
the traces is :mod:`opcost.analysis.trace_parse`, :mod:`opcost.analysis.trace_analysis` and
:mod:`opcost.analysis.overhead`, as HolisticTraceAnalysis separates its parser from its analyzers.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opcost.errors import OpcostError

log = logging.getLogger("opcost")

MARKER = "opcost_iteration"
WARM_MARKER = "opcost_iteration_after_replay"  # paired traces: the unanalysed model iteration after a replay
REPLAY_MARKER = "opcost_replay"  # the paired replay iterations recorded with the model's (see record)


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
    (docs/methodology.md, section 7). Read them with :func:`opcost.analysis.trace_parse.parse` (``parse(path)`` and
    ``parse(path).with_marker(REPLAY_MARKER)``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    from opcost.model.fastpath import kineto_quiet

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

    with kineto_quiet(), profile(activities=activities, record_shapes=record_shapes, schedule=sched) as prof:
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


@dataclass
class Recorded:
    """A workload's trace as :func:`record_workload` wrote it: its ``path``, the configurations left out of the
    replay ({config_id: (op_type, reason)}) and the glue timed without the profiler (an
    :func:`opcost.measure.glue.time_glue` result; None where it is not timed)."""

    path: Path
    left_out: dict[str, tuple[str, str]]
    glue: object | None


def record_workload(wl, models: dict, path, device: str = "cpu", dtype: str = "float32", iterations: int = 5,
                    warmup: int = 2, e2e_every: int | None = None) -> Recorded:
    """Trace workload ``wl`` (a :class:`opcost.model.workload.Workload` built from its config entry in ``models``)
    into ``path``: its operator configurations replayed (:func:`replay_runner`), ``iterations`` model iterations
    recorded after ``warmup`` with the replay paired in the same profiler session (:func:`record`); on a CPU,
    outside training (whose replay holds no backward), the model's step then timed without the profiler against its
    operators as isolated profiling times them (:func:`opcost.measure.glue.time_glue` with
    :func:`opcost.measure.operator_round.operator_round`: the model's reference iteration closing every
    ``e2e_every``-th round, the config's ``profile.e2e_every``). In the calling process, as it is: the caller sets
    it up as a measuring process. Reading the trace is :func:`opcost.analysis.tracing.trace_workload`'s."""
    from opcost.database import catalog
    from opcost.measure.glue import time_glue
    from opcost.measure.operator_round import operator_round
    from opcost.model.extract import extract

    paired, left_out = replay_runner(wl, models, device, dtype)
    record(wl, path, iterations=iterations, warmup=warmup, device=device, paired=paired)
    glue = None
    if str(device) == "cpu" and wl.mode != "training":
        operators, _ = operator_round(catalog(extract(wl)), models, device, dtype, e2e_every)
        glue = time_glue(wl.step, operators)
    return Recorded(Path(path), left_out, glue)
