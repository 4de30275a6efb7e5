"""Prediction = sum over a workload's operator configurations of count x measured cost; validation against e2e.

A configuration's cost per call is the sum over its phases (forward; in training also backward) of one statistic
of its per-call samples (config `statistic`): the 3-sigma-trimmed mean (the default) or the median. The end-to-end
reference uses the same statistic of its iteration times. Means add up: the expected time of an iteration is the
sum of the expected times of its calls, whereas the median of a sum is not the sum of medians when the per-call
times are skewed (single calls on a shared CPU: a long right tail, and regimes of different speed). Isolated costs
come from the configuration's microbenchmark (shared by every workload that has the configuration); in-situ costs
from the same workload's own model iterations.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from opcost.database import latest, of_workload, runs
from opcost.measure.engine import engine_rows
from opcost.measure.timing import ROTATION_STATES
from opcost.model.workload import workload_keys
from opcost.tables import CONSISTENCY, DEFAULT_STATISTIC, OVERHEADS, PREDICTIONS, STATISTICS, frame

SOURCES = ("isolated", "insitu")
# the end-to-end time each source is checked against, in order of preference (`e2e` column `method`): isolated
# costs against the model iterations timed inside their own rotations, in-situ costs against the iterations
# interleaved with their timed ones; each in the same minutes, under the same machine state, as the costs
REFERENCES = {"isolated": ("rotation", "dedicated", "interleaved"),
              "insitu": ("interleaved", "dedicated", "rotation")}


def baseline(measurements: pd.DataFrame) -> pd.Series:
    """Rows measured with the default placement or with every tensor on the fast tier (see `measurements`)."""
    default = measurements["placement"] == "default"
    if "baseline" not in measurements:
        return default
    return measurements["baseline"].astype("boolean").fillna(default).astype(bool)


def _baseline_ok(measurements: pd.DataFrame, device: str) -> pd.DataFrame:
    """The `ok` baseline-placement rows of ``device``: one row per source, workload, configuration and phase, by
    :func:`rotation_first` (merged databases may hold both `default` and fast-tier rows of a configuration)."""
    ok = measurements[(measurements["status"] == "ok") & (measurements["device"] == device)
                      & baseline(measurements)]
    return rotation_first(ok, ("config_id", "source", "phase", "workload", "device"))


def rotation_first(rows: pd.DataFrame, keys: tuple[str, ...], run: str | None = None) -> pd.DataFrame:
    """One row per ``keys``: a row measured in rotation (cache `fresh`/`rotation`: the state inside a model) before
    a back-to-back one (the all-fast-tier reference of placement measurements), then the newest; with ``run`` (a
    merged database's run, see :func:`opcost.database.runs`), a row of that run before any other."""
    rotated = rows["cache"].isin(ROTATION_STATES).fillna(False).astype(int) if "cache" in rows else None
    if run is None:
        return latest(rows, keys, preferred=rotated)
    own = (runs(rows) == run).astype(int) * 2
    return latest(rows, keys, preferred=own + (rotated if rotated is not None else 0))


def one_run(e2e: pd.DataFrame, run: str | None = None) -> pd.DataFrame:
    """The end-to-end rows of one run per workload, so that a merged database's runs are never pooled into one
    reference: ``run``'s rows where given, else those of the run of the workload's newest row of a reference method
    (:data:`REFERENCES`; of any where it has none)."""
    if run is not None:
        return e2e[runs(e2e) == run]
    if e2e.empty:
        return e2e
    named = e2e.assign(_run=runs(e2e), _ref=e2e["method"].isin(REFERENCES["isolated"]).fillna(False))
    named = named.sort_values(["_ref", "timestamp"], na_position="first")
    newest = named.groupby(["model", "batch", "mode"], sort=False)["_run"].transform("last")
    return e2e[runs(e2e) == newest.reindex(e2e.index)]


def _column(statistic: str) -> str:
    try:
        return STATISTICS[statistic]
    except KeyError:
        raise ValueError(f"statistic {statistic!r}: expected one of {', '.join(STATISTICS)}") from None


def _sum_present(values: pd.Series) -> float:
    """Sum of the values present; missing (never 0) when none is."""
    return values.sum(min_count=1)


def costed_layers(layers: pd.DataFrame, measurements: pd.DataFrame, device: str, source: str = "isolated",
                  statistic: str = DEFAULT_STATISTIC) -> pd.DataFrame:
    """Layer rows with their cost per call (cost_s: ``statistic`` summed over phases; missing when unmeasured or
    failed; backward_s: its backward part, training only) and count x cost (total_s), from the baseline-placement
    measurements of one source and device; a training workload whose isolated backward costs had the autograd
    engine's fixed cost taken out gets it back once, as a row of op type :data:`~opcost.measure.engine.ENGINE_OP_TYPE`
    (count 1)."""
    col = _column(statistic)
    ok = _baseline_ok(measurements, device)
    ok = ok[ok["source"] == source]
    keys = ["workload", "config_id"] if source == "insitu" else ["config_id"]
    out = layers.assign(workload=workload_keys(layers))
    cost = ok.groupby(keys, as_index=False).agg(cost_s=(col, _sum_present), energy_j=("energy_j", _sum_present))
    backward = ok[ok["phase"] == "backward"].groupby(keys, as_index=False).agg(backward_s=(col, _sum_present))
    out = out.merge(cost, on=keys, how="left").merge(backward, on=keys, how="left")
    out = out.assign(total_s=out["count"] * out["cost_s"], total_j=out["count"] * out["energy_j"])
    engine = engine_rows(out, ok)  # training: the one autograd engine call per iteration (opcost.measure.engine)
    return pd.concat([out, engine], ignore_index=True) if len(engine) else out


def _traced(overheads: pd.DataFrame, op_types: pd.DataFrame):
    """((model, batch, mode), its :class:`opcost.analysis.overhead.OverheadModel`, its `trace_op_types` rows) per
    traced workload."""
    from opcost.analysis.overhead import OverheadModel

    for key, ov in overheads.groupby(["model", "batch", "mode"]):
        types = of_workload(op_types, *key)
        yield (key[0], int(key[1]), key[2]), OverheadModel.from_tables(ov, types), types


def trace_overhead(overheads: pd.DataFrame, op_types: pd.DataFrame) -> dict[tuple, float]:
    """(model, batch, mode) -> modelled CPU overhead seconds per iteration from the workload's trace: its calls per
    top-level op type x that type's mean gap T1 before a call, plus the gap after the last op (see
    :class:`opcost.analysis.overhead.OverheadModel`)."""
    return from_traces(overheads, op_types)[0]


def from_traces(overheads: pd.DataFrame, op_types: pd.DataFrame) -> tuple[dict[tuple, float], dict]:
    """(:func:`trace_overhead`, the walks) of the same traces, each workload's model built once. The walks:
    (model, batch, mode) -> the :class:`opcost.analysis.overhead.OverheadModel` of each workload's GPU trace (the
    host time per call and the gaps that :func:`predict` walks beside the device's costs)."""
    gaps, walks = {}, {}
    for key, model, types in _traced(overheads, op_types):
        gaps[key] = model.gap_s(dict(zip(types["op_type"], types["calls"])))
        if model.gpu:
            walks[key] = model
    return gaps, walks


def overhead_rows(overheads: pd.DataFrame, op_types: pd.DataFrame, layers: pd.DataFrame,
                  e2e: pd.DataFrame) -> pd.DataFrame:
    """The database's `overheads` table: per traced workload, its modelled overhead per iteration
    (:func:`trace_overhead`), its operator calls per iteration (Σ `count` of its `layers` rows), and the device,
    thread count, host (and run) of its newest end-to-end measurement on the trace's device (workloads without one
    are left out: their conditions are unknown)."""
    rows = []
    for (model, batch, mode), overhead in trace_overhead(overheads, op_types).items():
        mine = of_workload(overheads, model, batch, mode)
        wl = of_workload(layers, model, batch, mode)
        ran = of_workload(e2e, model, batch, mode)
        ran = ran[ran["device"] == mine["device"].iloc[0]]
        if wl.empty or ran.empty or not np.isfinite(overhead):
            continue
        r = ran.sort_values("timestamp").iloc[-1]
        rows.append({"model": model, "batch": batch, "mode": mode, "device": r["device"], "threads": r["threads"],
                     "host": r["host"], "calls": float(wl["count"].sum()), "overhead_s": float(overhead),
                     "timestamp": r["timestamp"], "run": r.get("run")})
    return frame(OVERHEADS, rows)


def references(e2e: pd.DataFrame, device: str, source: str, statistic: str = DEFAULT_STATISTIC,
               run: str | None = None) -> dict[tuple, tuple[float, str]]:
    """(model, batch, mode) -> (end-to-end seconds per iteration, `e2e` method) that ``source``'s prediction is
    checked against (:data:`REFERENCES`), as ``statistic`` of the iteration times: the newest row of a method; the
    `rotation` rows of all profiling jobs (one per rotation) pooled, their statistics averaged with weights
    `timed_s` (the part of the prediction each rotation measured: the reference is the model's time in the minutes
    the prediction was measured; weights n where a row lacks it). All from one run per workload (:func:`one_run`:
    ``run``, else its newest)."""
    col = _column(statistic)
    e2e = one_run(e2e[e2e["device"] == device], run)
    out: dict[tuple, tuple[float, str]] = {}
    for method in reversed(REFERENCES[source]):
        rows = e2e[(e2e["method"] == method) & e2e[col].notna()]
        if rows.empty:
            continue
        if method == "rotation":
            values = {}
            for k, g in rows.groupby(["model", "batch", "mode"]):
                timed = g["timed_s"] if "timed_s" in g else pd.Series(dtype=float)
                w = (timed if len(timed) and timed.notna().all() and timed.sum() > 0 else g["n"]).astype(float)
                if w.sum() > 0:
                    values[k] = float((w * g[col].astype(float)).sum() / w.sum())
        else:
            rows = latest(rows, ("model", "batch", "mode", "method", "device"))
            values = {(r.model, r.batch, r.mode): float(v) for r, v in zip(rows.itertuples(), rows[col])}
        out.update({(m, int(b), mo): (v, method) for (m, b, mo), v in values.items()})
    return out


def reference_range(e2e: pd.DataFrame, device: str,
                    statistic: str = DEFAULT_STATISTIC) -> dict[tuple, tuple[float, float]]:
    """(model, batch, mode) -> (the smallest, the largest) ``statistic`` of its end-to-end time among the rotations
    that timed it on ``device`` (its `rotation` rows, one per rotation); workloads timed in fewer than two rotations
    are left out. One run per workload, as :func:`references`."""
    col = _column(statistic)
    e2e = one_run(e2e[e2e["device"] == device])
    rows = e2e[(e2e["method"] == "rotation") & e2e[col].notna()]
    out = {}
    for (model, batch, mode), g in rows.groupby(["model", "batch", "mode"]):
        t = g[col].astype(float)
        if len(t) >= 2 and t.min() > 0:
            out[(model, int(batch), mode)] = (float(t.min()), float(t.max()))
    return out


def reference_spread(e2e: pd.DataFrame, device: str,
                     statistic: str = DEFAULT_STATISTIC) -> dict[tuple, float]:
    """(model, batch, mode) -> how far its end-to-end time moved between the rotations that timed it on ``device``:
    the largest over the smallest − 1 (:func:`reference_range`). The pooled `rotation` reference sits between those
    times, so a prediction from measurements of other minutes (an estimate) cannot be expected closer than about half
    of it."""
    return {k: hi / lo - 1 for k, (lo, hi) in reference_range(e2e, device, statistic).items()}


def predict(layers: pd.DataFrame, measurements: pd.DataFrame, e2e: pd.DataFrame, device: str,
            sources=SOURCES, overhead: dict[tuple, float] | None = None,
            statistic: str = DEFAULT_STATISTIC, walks: dict | None = None) -> pd.DataFrame:
    """One `predictions` row per workload and source that has any measurement; with ``overhead`` (from
    :func:`trace_overhead`) also a `<source>+overhead` row: the same sum plus the workload's modelled overhead; on
    a GPU, for the workloads of ``walks`` (:func:`from_traces`), the workload's calls walked on the CPU's and the
    device's timelines instead (:mod:`opcost.analysis.critical_path`: the trace's host time and gap per call
    beside each configuration's device cost). Costs and references are ``statistic`` (:data:`STATISTICS`) of their
    samples."""
    from opcost.analysis.critical_path import walk, workload_calls

    rows = []
    e2e = e2e[e2e["device"] == device]
    # energy: the e2e runs that measure it (dedicated), newest first
    metered = latest(e2e[e2e["method"] == "dedicated"], ("model", "batch", "mode", "method", "device"))
    measured_j = {(r.model, int(r.batch), r.mode): r.energy_j for r in metered.itertuples()}
    spread = reference_spread(e2e, device, statistic)
    for source in sources:
        if not (measurements["source"] == source).any():
            continue
        refs = references(e2e, device, source, statistic)
        costed = costed_layers(layers, measurements, device, source, statistic)
        placement = "baseline" if (measurements["placement"] != "default").any() else "default"
        for (model, batch, mode), g in costed.groupby(["model", "batch", "mode"], sort=True):
            measured, reference = refs.get((model, int(batch), mode), (None, None))
            have = g["cost_s"].notna()
            predicted = float(g.loc[have, "total_s"].sum())
            ratio = predicted / measured if measured else None
            row = {
                "model": model, "batch": int(batch), "mode": mode, "device": device, "source": source,
                "statistic": statistic, "placement": placement, "overhead_s": None,
                "predicted_s": predicted, "measured_s": measured, "reference": reference,
                "reference_spread": spread.get((model, int(batch), mode)) if reference == "rotation" else None,
                "ratio": ratio,
                "error": ratio - 1 if ratio is not None else None,
                "configs": len(g), "configs_measured": int(have.sum()),
                "calls_covered": float(g.loc[have, "count"].sum() / g["count"].sum()),
                "predicted_j": float(g["total_j"].sum()) if g["total_j"].notna().any() else None,
                "measured_j": measured_j.get((model, int(batch), mode)),
                "low_s": None, "high_s": None, "estimated_share": None,  # `estimated` rows only
            }
            rows.append(row)
            extra = (overhead or {}).get((model, int(batch), mode))
            gpu_model = (walks or {}).get((model, int(batch), mode)) if str(device).startswith("cuda") else None
            if gpu_model is not None:
                with_ov = walk(workload_calls(g, gpu_model.host_default, gpu_model.t1_default),
                               gpu_model.tail).iteration_s
                extra = with_ov - predicted
            elif extra is not None:
                with_ov = predicted + extra
            if extra is not None:
                rows.append({**row, "source": f"{source}+overhead", "overhead_s": extra, "predicted_s": with_ov,
                             "ratio": with_ov / measured if measured else None,
                             "error": with_ov / measured - 1 if measured else None})
    return frame(PREDICTIONS, rows)


def consistency(layers: pd.DataFrame, measurements: pd.DataFrame, device: str) -> pd.DataFrame:
    """Isolated vs in-situ per (workload, configuration, phase)."""
    ok = _baseline_ok(measurements, device)
    rel = (ok["iqr_s"] / ok["median_s"]).astype("Float64")
    ok = ok.assign(rel_iqr=rel)
    iso = ok[ok["source"] == "isolated"][["config_id", "phase", "median_s", "rel_iqr"]]
    ins = ok[ok["source"] == "insitu"][["workload", "config_id", "phase", "op_type", "median_s", "rel_iqr"]]
    counts = layers.assign(workload=workload_keys(layers))[["workload", "config_id", "count"]]
    both = ins.merge(iso, on=["config_id", "phase"], suffixes=("_insitu", "_isolated")).merge(
        counts, on=["workload", "config_id"])
    out = pd.DataFrame({
        "workload": both["workload"], "config_id": both["config_id"], "op_type": both["op_type"],
        "phase": both["phase"], "count": both["count"], "isolated_s": both["median_s_isolated"],
        "insitu_s": both["median_s_insitu"], "ratio": both["median_s_isolated"] / both["median_s_insitu"],
        "isolated_rel_iqr": both["rel_iqr_isolated"], "insitu_rel_iqr": both["rel_iqr_insitu"],
    })
    return frame(CONSISTENCY, out)
