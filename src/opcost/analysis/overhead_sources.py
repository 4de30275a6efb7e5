"""What a predicted workload costs between its operators, and how far the method is off where nothing is estimated.

The overhead between operators (:func:`overhead_of`, nearest evidence first; :data:`OVERHEAD_FROM` names each
source): a workload's own trace (the `overheads` table, :func:`traced_overheads`); of a decode step whose model's
steps were traced at other contexts or batches, a fit in the key/value cache bytes over every model's traced steps
(:func:`decode_overhead`); of a model traced at other batch sizes (a prefill: or prompt lengths), the median per call
of those traces; of a model never traced, a short trace of its own taken at predict time (:func:`overhead_now`);
else the median per call over the database's workloads (:func:`overhead_per_call`). A decode step beyond its
model's measured memory level loses :func:`memory_level_shift` on top.

The evidence an interval rests on: :func:`method_error` (the fully measured workloads' predictions against every
end-to-end time their runs took) and :func:`timing_spread` (the spread of those times, which no interval can be
narrower than).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from opcost.analysis.predict import REFERENCES, STATISTICS, one_run, references
from opcost.database import latest, of_workload, runs
from opcost.measure.engine import engine_cost
from opcost.model.modes import decode_context, is_decode, prefill_length
from opcost.model.sweep_points import PREFIX as SWEEP_PREFIX


def on_conditions(table: pd.DataFrame, used: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``table`` on the device, host and thread count of ``used`` (one set of conditions)."""
    for key in ("device", "host", "threads"):
        if key in table and key in used and len(used):
            table = table[table[key].astype(str) == str(used[key].iloc[0])]
    return table


def traced_overheads(db: dict, used: pd.DataFrame, mode: str,
                     run: str | None = None) -> dict[tuple[str, int], tuple[float, float]]:
    """(model, batch) -> (overhead seconds per iteration its trace models, its calls) for the database's model
    workloads of ``mode`` on the conditions of ``used`` (the `overheads` table, the newest row of each, a row of
    ``run`` before any other; not the sweep chains, whose few calls are not a model's glue)."""
    traced = on_conditions(db.get("overheads", pd.DataFrame()), used)
    if len(traced):
        traced = traced[(traced["mode"] == mode) & ~traced["model"].str.startswith(SWEEP_PREFIX)
                        & (traced["calls"] > 0)]
    if not len(traced):
        return {}
    own = None if run is None else (runs(traced) == run)
    traced = latest(traced, ("model", "batch", "mode"), preferred=own)
    return {(r.model, int(r.batch)): (float(r.overhead_s), float(r.calls)) for r in traced.itertuples()}


def _traced_decode_steps(db: dict, used: pd.DataFrame, run: str | None = None) -> dict[tuple, tuple[float, float]]:
    """(model, batch, mode) -> (overhead seconds per step its trace models, its calls) of every decode step the
    database traced, at any context length (:func:`traced_overheads` of each ``decode<L>`` mode)."""
    return traced_kind(db, used, is_decode, run)


def traced_kind(db: dict, used: pd.DataFrame, kind, run: str | None = None) -> dict[tuple, tuple[float, float]]:
    """(model, batch, mode) -> (overhead seconds per iteration its trace models, its calls) of every workload the
    database traced in a mode for which ``kind(mode)`` holds (:func:`traced_overheads` of each)."""
    held = set(db.get("overheads", pd.DataFrame(columns=["mode"]))["mode"])
    return {(m, b, mode): v for mode in sorted(filter(kind, held))
            for (m, b), v in traced_overheads(db, used, mode, run).items()}


def is_prefill(mode: str) -> bool:
    return prefill_length(mode) is not None


def overhead_per_call(db: dict, used: pd.DataFrame, mode: str, statistic: str) -> tuple[float, float, float]:
    """(median, 10th, 90th percentile) seconds of overhead per operator call on the conditions of ``used``, over
    the database's model workloads of ``mode``: the overhead their traces model (:func:`traced_overheads`) where the
    database holds it; else (end-to-end time − Σ measured isolated costs) / calls of its fully measured workloads
    with an end-to-end time; 0 when neither. A decode step at a context length never traced: the decode steps traced
    at the others; a prefill at a prompt length never traced: the prefills traced at the others."""
    traced = list(traced_overheads(db, used, mode).values())
    if not traced and (is_decode(mode) or is_prefill(mode)):
        traced = list(traced_kind(db, used, is_decode if is_decode(mode) else is_prefill).values())
    if traced:
        gaps = np.array([overhead / calls for overhead, calls in traced])
    else:
        gaps = _residual_per_call(db, used, mode, statistic)
    if not len(gaps):
        return 0.0, 0.0, 0.0
    g = np.clip(gaps, 0, None)
    return float(np.median(g)), float(np.quantile(g, 0.1)), float(np.quantile(g, 0.9))


def _measured_workloads(db: dict, used: pd.DataFrame, mode: str,
                        statistic: str) -> list[tuple[tuple[str, int], float, float, float]]:
    """((model, batch), end-to-end time, Σ count × isolated cost + the autograd engine's call, calls) of each fully
    measured model workload of ``mode`` with an end-to-end time on the conditions of ``used`` (not the sweep
    chains); the end-to-end time is its reference (:func:`~opcost.analysis.predict.references`)."""
    col = STATISTICS[statistic]
    e2e = on_conditions(db["e2e"], used)
    refs = references(e2e, str(used["device"].iloc[0]), "isolated", statistic) if len(used) else {}
    cost = used.groupby("config_id")[col].sum()
    # training: the one autograd engine call per iteration is a row of its own, not overhead
    engine = (engine_cost(used) or 0.0) if mode == "training" else 0.0
    out = []
    layers = db["layers"]
    for (model, batch, mo), (ref, _) in refs.items():
        if mo != mode or model.startswith(SWEEP_PREFIX):
            continue
        wl = of_workload(layers, model, batch, mo)
        c = cost.reindex(wl["config_id"])
        if wl.empty or c.isna().any():
            continue
        out.append(((model, int(batch)), ref, engine + float((wl["count"].to_numpy() * c.to_numpy()).sum()),
                    float(wl["count"].sum())))
    return out


def every_time(db: dict, used: pd.DataFrame, statistic: str) -> dict[tuple, list[float]]:
    """(model, batch, mode) -> every end-to-end time its run took of the workload on the conditions of ``used``,
    seconds per iteration: each rotation's, each dedicated and interleaved run's (the reference methods of
    isolated costs; not the plain process, whose allocator differs), taken in other minutes than one another."""
    col = STATISTICS[statistic]
    e2e = one_run(on_conditions(db["e2e"], used))
    e2e = e2e[e2e["method"].isin(REFERENCES["isolated"]) & e2e[col].notna()]
    return {(m, int(b), mo): g[col].astype(float).tolist()
            for (m, b, mo), g in e2e.groupby(["model", "batch", "mode"])}


def _residual_per_call(db: dict, used: pd.DataFrame, mode: str, statistic: str) -> list[float]:
    """Per fully measured model workload of ``mode`` with an end-to-end time on the conditions of ``used``:
    (end-to-end time − Σ count × isolated cost − the autograd engine's call) / calls."""
    return [(ref - ops) / calls for _, ref, ops, calls in _measured_workloads(db, used, mode, statistic)]


def method_error(db: dict, used: pd.DataFrame, mode: str, statistic: str, per_call: float,
                 times: dict | None = None) -> tuple[float, float] | None:
    """(5th, 95th percentile) of end-to-end time / prediction − 1 over the database's fully measured model
    workloads of ``mode`` with an end-to-end time, each predicted as :func:`~opcost.analysis.estimate.predict_workload`
    predicts it (Σ count × isolated cost + its overhead by :func:`overhead_of`, ``per_call`` the median per call of
    all), against each end-to-end time its run took of it (:func:`every_time`: a time taken in other minutes than the
    costs moves with the machine, and the interval is to hold such a time too), i.e. how far the method is off where
    nothing is estimated; None with fewer than 3 such workloads. ``times``: :func:`every_time`'s, where the caller has
    them."""
    traced = traced_overheads(db, used, mode)
    times = every_time(db, used, statistic) if times is None else times
    rel, workloads = [], 0
    for (model, batch), ref, ops, calls in _measured_workloads(db, used, mode, statistic):
        predicted = ops + overhead_of(traced, model, batch, calls, per_call)[0]
        if predicted > 0:
            rel += [t / predicted - 1 for t in times.get((model, batch, mode), [ref])]
            workloads += 1
    if workloads < 3:
        return None
    return float(np.quantile(rel, 0.05)), float(np.quantile(rel, 0.95))


def _same_kind(mode: str, other: str) -> bool:
    """Whether workloads of ``other`` mode rest on the same evidence as ``mode``'s: the same mode, or both decode
    steps (at any context), or both prefills (of any prompt)."""
    return other == mode or (is_decode(mode) and is_decode(other)) or (is_prefill(mode) and is_prefill(other))


def timing_spread(times: dict, model: str, mode: str) -> tuple[float, float] | None:
    """(5th, 95th percentile) of how far each end-to-end time of ``model``'s measured workloads of ``mode``'s kind
    (:func:`_same_kind`) lies from its workload's median time (``times``: :func:`every_time`'s, every run that
    timed it), i.e. the spread of the timings a prediction of that model rests on and is checked against, which no
    interval can be narrower than; of every model's such workloads where ``model`` has none with two times; None
    where no workload of that kind has two. (Not :func:`opcost.analysis.predict.reference_spread`: one workload's
    rotations, largest over smallest.)"""
    for mine in (True, False):
        rel = [t / float(np.median(ts)) - 1 for (name, _, m), ts in times.items()
               if (name == model or not mine) and _same_kind(mode, m) and len(ts) >= 2 for t in ts]
        if rel:
            return float(np.quantile(rel, 0.05)), float(np.quantile(rel, 0.95))
    return None


OVERHEAD_FROM = {"own trace": "its trace", "trace now": "a short trace of its own, taken now",
                 "decode steps": "the traced decode steps, linear in the key/value cache bytes (its model's intercept)",
                 "same model": "per call, its model's traces at other batch sizes (a prefill: and prompt lengths)",
                 "all models": "median per call of the traced workloads"}  # Prediction.overhead_from -> its meaning


def decode_overhead(db: dict, used: pd.DataFrame, layers: pd.DataFrame, mode: str,
                    run: str | None = None) -> float | None:
    """Seconds per step of overhead of the decode step ``layers`` (one workload's rows) at the context of ``mode``
    (``decode<L>``), from the database's traced decode steps: a least-squares fit of their overheads in the bytes
    of key/value cache a step reads (:func:`opcost.analysis.decode.cache_bytes`), one slope shared by every model
    (what a byte of cache costs a step around its operators: the operators finding their weights and code evicted
    by the cache's traffic, the update's bookkeeping) and an intercept per model (its glue without a cache), floored
    at 0. A median per call cannot follow that growth to a longer context; one slope from every model's steps moves
    less with one trace's noise than a line through one model's two or three. None where ``mode`` is no decode
    step, the model has no traced decode step, or no model's traced steps hold two cache sizes. The slope is held
    at 0 or above in the fit itself (:func:`cache_line`)."""
    from opcost.analysis.decode import cache_bytes

    context = decode_context(mode)
    if context is None or layers.empty:
        return None
    model = str(layers["model"].iloc[0])
    points = []  # (model, cache bytes, overhead seconds) of each traced decode step
    for (name, b, m), (overhead, _) in _traced_decode_steps(db, used, run).items():
        wl = of_workload(db["layers"], name, b, m)
        if len(wl):
            points.append((name, cache_bytes(wl, decode_context(m)), overhead))
    names = sorted({n for n, _, _ in points})
    sizes = {n: {c for m, c, _ in points if m == n} for n in names}
    if model not in names or max(len(v) for v in sizes.values()) < 2:
        return None
    return max(float(cache_line(points, names, model)(cache_bytes(layers, context))), 0.0)


def memory_level_shift(db: dict, e2e: pd.DataFrame, rows: pd.DataFrame, layers: pd.DataFrame,
                       picked: dict) -> float:
    """Seconds per step a decode step (``layers``; ``rows``: its per-configuration costs) loses to a slower memory
    level than its model's measured steps ran in (:func:`opcost.analysis.decode.level_shift`): its working set
    against the largest of its model's decode steps with an end-to-end time in ``e2e`` (the conditions'), on this
    host's read-bandwidth curve (:func:`opcost.analysis.decode.bandwidth_curve`). The measured costs and the
    overhead fitted to those steps hold the rates of their own memory level; a step at a longer context or larger
    batch whose cache no longer fits that level reads every byte at the next one's. 0 where ``layers`` is no
    decode step, its model has no measured decode step, or the database is of another host (whose bandwidth this
    one's cannot stand for)."""
    from opcost.analysis.decode import bandwidth_curve, footprint, level_shift

    context = decode_context(layers["mode"].iloc[0])
    model = layers["model"].iloc[0]
    if context is None:
        return 0.0
    steps = e2e.loc[e2e["model"] == model, ["batch", "mode"]].drop_duplicates()
    held = [footprint(of_workload(db["layers"], model, int(b), m), decode_context(m))
            for b, m in zip(steps["batch"], steps["mode"]) if decode_context(m) is not None]
    held = [f for f in held if f > 0]
    step = footprint(layers, context)
    if not held or step <= max(held):
        return 0.0
    curve = bandwidth_curve(picked)
    return level_shift(rows, step, max(held), curve) if curve else 0.0


def cache_line(points: list, names: list, model: str):
    """The decode overhead's line in cache bytes for ``model``, fitted to ``points`` (model, cache bytes, overhead
    seconds) by least squares with the shared slope held at 0 or above *in the fit* (``scipy.optimize.lsq_linear``):
    a step never gets cheaper as its cache grows, and the intercepts are fitted under that constraint, not floored
    after an unconstrained fit that two noisy points tilted downwards."""
    from scipy.optimize import lsq_linear

    x = np.array([[c / 1e6] + [float(n == k) for k in names] for n, c, _ in points])
    lower = np.r_[0.0, np.full(len(names), -np.inf)]
    coef = lsq_linear(x, np.array([o for _, _, o in points]), bounds=(lower, np.inf), method="bvls").x
    return lambda nbytes: coef[0] * nbytes / 1e6 + coef[1 + names.index(model)]


def overhead_of(traced: dict, model: str, batch: int, calls: float, per_call: float,
                 now: float | None = None, steps: float | None = None, kin: dict | None = None) -> tuple[float, str]:
    """(overhead seconds per iteration, where from: a key of :data:`OVERHEAD_FROM`) of a workload of ``calls``
    calls, the nearest evidence first, as for operator costs: the workload's own trace (:func:`traced_overheads`,
    as its validation's `+overhead` row); else the median per call of its model's traced workloads at other batch
    sizes (the same Python glue between the same calls); else, for a model never traced, ``now``, the overhead of a
    short trace of its own taken at predict time (:func:`overhead_now`); else ``per_call``, the median per call of
    all. A decode step whose model was traced at other context lengths or batches: ``steps``
    (:func:`decode_overhead`), after its own trace. ``kin``: (model, batch, mode) -> (overhead, calls) of traced
    workloads of the same kind in other modes (a prefill's at other prompt lengths), which count as its model's
    traces at other batch sizes do."""
    own = traced.get((model, batch))
    if own is not None:
        return own[0], "own trace"
    if steps is not None:
        return steps, "decode steps"
    sibling = [max(o / c, 0.0) for (m, _), (o, c) in traced.items() if m == model]
    sibling += [max(o / c, 0.0) for (m, _, _), (o, c) in (kin or {}).items() if m == model]
    if sibling:
        return float(np.median(sibling)) * calls, "same model"
    if now is not None:
        return now, "trace now"
    return per_call * calls, "all models"


def overhead_now(model: tuple, batch: int, mode: str, conditions: dict, dtype: str = "float32",
                 keep=None) -> float:
    """Seconds per iteration of overhead between operators of the workload (``model``: its name and config entry)
    at ``batch`` in ``mode``, modelled from a short trace of its own taken now, as the trace stage models a
    profiled workload's (:func:`opcost.analysis.predict.trace_overhead`: each gap before a call, less the gap its
    isolated replay already includes), in a process of its own set up as the measuring ones were (``conditions``:
    the database's device and threads; glibc keeping freed memory): :func:`opcost.analysis.tracing.trace_now`
    (``keep``: its folder of traces kept for a later call asking the same)."""
    from opcost.analysis.tracing import trace_now
    from opcost.analysis.predict import trace_overhead

    parts = trace_now(model, batch, mode, conditions, dtype, keep=keep)
    return float(trace_overhead(parts["trace_overheads"], parts["trace_op_types"])[(model[0], int(batch), mode)])
