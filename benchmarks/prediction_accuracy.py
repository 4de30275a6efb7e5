"""Does Σ count × operator cost predict the end-to-end time? Isolated and in-situ sources, default models.

For each model and batch (inference): extract, measure end to end, profile every configuration in isolation, time
every configuration in situ, measure end to end again. The isolated prediction is checked, as in the pipeline,
against the model iterations timed inside its own rotation (every `profile.e2e_every`-th round: same minutes, same
machine state; `e2e_rotation_ms`), and also against the mean of the two dedicated end-to-end runs taken before
and after the operator measurements (`_vs_dedicated`; their drift is in the table) and against the interleaved
end-to-end time (colder iterations: they alternate with instrumented ones), and against a plain process's (the
user's own script: `_vs_plain`, the rotation's reference times the ratio of blocks the two processes timed in turn,
opcost.measure.plain; `_vs_plain_faults`: the prediction plus that process's page faults beyond opcost's, counted,
times the host's cost of one, a diagnostic); the in-situ prediction against the
end-to-end time of the unobserved iterations interleaved with its timed ones (same minutes, same machine state).
Every error is computed from the same measurements with each per-call statistic (config `statistic`): the
3-sigma-trimmed mean (the default; unsuffixed columns) and the median (`_median` columns), the same statistic for
costs and end-to-end times. Each source is also shown overhead-aware (`+ov`): plus the CPU overhead modelled from
one Kineto trace in which each analysed model iteration follows another and precedes its operators replayed in
model order (calls per top-level op type x (mean gap T1 in the model - mean gap T1r in the replay), plus the tail
gap's difference; opcost.analysis.overhead). Prints the error table and one SUMMARY line.

    python benchmarks/prediction_accuracy.py [--models resnet18 tiny_bert] [--config FILE] [--batches 1 8] [--threads 2]
                                             [--cache fresh|rotation|warm|cold] [--order model|shuffled]
    python benchmarks/prediction_accuracy.py --smoke   # a tiny model, short caps: a functional check
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import DEFAULT_MODELS, model_entries, prepare, summary, workload_configs
import _smoke


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=None, help=f"default: {' '.join(DEFAULT_MODELS)}, or every model "
                                                               "of --config")
    ap.add_argument("--config", help="a config file whose `models` entries describe the models (zoo models, kwargs)")
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mode", default="inference")
    ap.add_argument("--cache", default="fresh", choices=["fresh", "rotation", "warm", "cold"],
                    help="isolated profiling cache state (config profile.cache)")
    ap.add_argument("--order", default="model", choices=["model", "shuffled"],
                    help="rotation order (config profile.order)")
    ap.add_argument("--smoke", action="store_true", help="a tiny model at batch 1, caps of milliseconds (a "
                                                         "functional check, in seconds)")
    args = ap.parse_args()
    if args.smoke:
        args.batches = [1]
    prepare(args.threads)

    cfg = _smoke.config() if args.smoke else model_entries(args.models or ([] if args.config else DEFAULT_MODELS),
                                                           args.config)
    rows = []
    t0 = time.perf_counter()
    for model in cfg["models"]:
        for batch in args.batches:
            row, _ = measure_workload(model, batch, cfg, args)
            rows.append(row)
            print(pd.DataFrame([rows[-1]]).to_string(index=False, header=len(rows) == 1, float_format="%.3f"),
                  flush=True)
    table = pd.DataFrame(rows)
    print()
    print(table.to_string(index=False, float_format="%.3f"))
    errs = {c: table[c].abs() for c in table.columns if c.startswith("err_")}
    drift = ((table["e2e_after_ms"] - table["e2e_before_ms"]) / table["e2e_before_ms"]).abs()
    stats = {}
    for c, e in errs.items():
        stats[f"median_abs_{c}"] = float(np.median(e))
        stats[f"max_abs_{c}"] = float(e.max())
    summary(workloads=len(table), **stats, median_e2e_drift=float(np.median(drift)), wall_s=time.perf_counter() - t0)


@dataclass
class Timed:
    """What one workload's measurements hold, for its errors (:func:`_error_row`)."""
    layers: pd.DataFrame
    measurements: pd.DataFrame  # isolated and in situ
    e_before: pd.DataFrame  # the dedicated end-to-end runs before and after profiling
    e_after: pd.DataFrame
    e2e_interleaved: pd.DataFrame
    rotation_e2e: list  # the rotation's end-to-end rows
    overhead: object  # the trace's overhead between operators
    engine_s: float | None  # training: the autograd engine's cost per backward call, measured in the rotation
    alone: float | None  # the same, measured alone (the former rule)
    vs_opcost: float  # the plain process's time over opcost's (NaN: not timed)
    faults: float
    fault_extra: float  # seconds of the plain process's extra page faults


def _error_row(model: str, batch: int, t: Timed) -> dict:
    """The workload's row of errors, per statistic (the default's without a suffix)."""
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS, predict

    row = {"model": model, "batch": batch}
    for stat, col in STATISTICS.items():
        e2e = t.e_before.assign(**{col: (t.e_before[col] + t.e_after[col]) / 2})
        measured = pd.concat([e2e, t.e2e_interleaved, *t.rotation_e2e], ignore_index=True)
        by = predict(t.layers, t.measurements, measured, "cpu", overhead=t.overhead,
                     statistic=stat).set_index("source")
        dedicated = float(e2e[col].iloc[0])
        sfx = "" if stat == DEFAULT_STATISTIC else f"_{stat}"
        if not sfx:
            row.update({"e2e_before_ms": float(t.e_before[col].iloc[0]) * 1e3,
                        "e2e_after_ms": float(t.e_after[col].iloc[0]) * 1e3,
                        "e2e_interleaved_ms": float(t.e2e_interleaved[col].iloc[0]) * 1e3,
                        "plain_vs_opcost": t.vs_opcost, "plain_faults": t.faults,
                        "fault_extra_ms": t.fault_extra * 1e3,
                        "e2e_rotation_ms": float(by.loc["isolated", "measured_s"]) * 1e3,
                        "reference": by.loc["isolated", "reference"],
                        "isolated_ms": float(by.loc["isolated", "predicted_s"]) * 1e3,
                        "insitu_ms": float(by.loc["insitu", "predicted_s"]) * 1e3,
                        "overhead_ms": float(by.loc["isolated+overhead", "overhead_s"]) * 1e3,
                        "engine_us": t.engine_s * 1e6 if t.engine_s is not None else None})
        if t.alone is not None:  # the same rows with the engine measured alone (rows floored at 0 stay 0)
            again = predict(t.layers, engine_alone(t.measurements, t.alone), measured, "cpu", overhead=t.overhead,
                            statistic=stat).set_index("source")
            row[f"err_isolated_engine_alone{sfx}"] = float(again.loc["isolated", "error"])
            if not sfx:
                row["engine_alone_us"] = t.alone * 1e6
        row.update({
            f"err_isolated{sfx}": float(by.loc["isolated", "error"]),
            f"err_isolated_vs_interleaved{sfx}": float(by.loc["isolated", "predicted_s"]
                                                       / t.e2e_interleaved[col].iloc[0] - 1),
            f"err_isolated_vs_dedicated{sfx}": float(by.loc["isolated", "predicted_s"] / dedicated - 1),
            f"err_isolated_ov_vs_dedicated{sfx}": float(by.loc["isolated+overhead", "predicted_s"]
                                                        / dedicated - 1),
            f"err_isolated_ov{sfx}": float(by.loc["isolated+overhead", "error"]),
            f"err_isolated_ov_vs_plain{sfx}": float((1 + by.loc["isolated+overhead", "error"]) / t.vs_opcost - 1),
            # a diagnostic: the prediction plus the plain process's page faults x the host's cost of one
            f"err_isolated_ov_vs_plain_faults{sfx}": float((1 + by.loc["isolated+overhead", "error"] + t.fault_extra
                                                            / by.loc["isolated+overhead", "measured_s"])
                                                           / t.vs_opcost - 1),
            f"err_insitu{sfx}": float(by.loc["insitu", "error"]),
            f"err_insitu_ov{sfx}": float(by.loc["insitu+overhead", "error"])})
    return row


def measure_workload(model: str, batch: int, cfg: dict, args, keep: dict | None = None,
                     plain: bool = True) -> tuple[dict, dict]:
    """One workload measured as the module docstring says: (its row of errors, its trace tables: `trace_<part>` of
    the model's iterations, and `replay_<part>` of its operators replayed in model order). ``keep``, where given,
    receives the workload's database rows: `layers`, `measurements` (isolated and in situ) and `e2e` (dedicated,
    interleaved and rotation rows); ``plain``: also time a plain process in turn (the `_vs_plain` errors)."""
    from opcost.analysis.overhead import summarize
    from opcost.analysis.tracing import trace_workload
    from opcost.analysis.predict import trace_overhead
    from opcost.measure.e2e import measure_e2e
    from opcost.measure.engine import engine_call_s, engine_cost
    from opcost.measure.insitu import profile_insitu
    from opcost.measure.plain import fault_extra_s, time_plain
    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.timing import TimingSettings

    op_settings = TimingSettings.from_config(cfg["profile"]["timing"])
    e2e_settings = TimingSettings.from_config(cfg["e2e"]["timing"])
    insitu_settings = TimingSettings.from_config(cfg["insitu"]["timing"])
    wl, layers, configs = workload_configs(model, batch, args.mode, cfg["models"][model])
    e_before, _ = measure_e2e(wl, e2e_settings, "cpu")
    rotation_e2e = []
    iso, _ = profile_configs(configs, cfg["models"], "cpu", "float32",
                             replace(ProfileSettings.from_config(cfg), cache=args.cache, order=args.order),
                             on_e2e=lambda row, _: rotation_e2e.append(row))
    engine_s = engine_cost(iso)  # training: measured in the rotation, counted once per iteration
    alone = engine_call_s("cpu", op_settings) if engine_s is not None else None  # the former rule, beside
    ins, _, e2e_interleaved = profile_insitu(wl, insitu_settings, "cpu")
    e_after, _ = measure_e2e(wl, e2e_settings, "cpu")
    # the user's clock: a plain process (the user's own script) timed in turn with this one
    vs_opcost, fault_extra, faults = math.nan, 0.0, math.nan
    if plain:
        plain_row, _ = time_plain(model, cfg["models"][model], batch, args.mode,
                                  {"device": "cpu", "dtype": "float32", "threads": args.threads}, e2e_settings,
                                  wl.step, int(e_after["calls_per_sample"].iloc[0]))
        vs_opcost = float(plain_row["vs_opcost"].iloc[0])
        faults, fault_extra = float(plain_row["faults"].iloc[0]), fault_extra_s(plain_row.iloc[0])
    # as the pipeline's trace stage: each iteration paired with a replay of its (forward) operators, whose
    # gaps isolated costs already hold
    path = Path(f"/tmp/opcost_bench_{model}_{args.mode}_b{batch}.json.gz")
    traced = trace_workload(wl, cfg["models"], path, iterations=10, warmup=3,
                            e2e_every=int(cfg["profile"]["e2e_every"]))
    parts = traced.parts
    overhead = trace_overhead(parts["trace_overheads"], parts["trace_op_types"])
    measurements = pd.concat([iso, ins], ignore_index=True)
    if keep is not None:
        keep.update(layers=layers, measurements=measurements,
                    e2e=pd.concat([e_before, e_after, e2e_interleaved, *rotation_e2e], ignore_index=True))
    row = _error_row(model, batch, Timed(layers, measurements, e_before, e_after, e2e_interleaved, rotation_e2e,
                                         overhead, engine_s, alone, vs_opcost, faults, fault_extra))
    replay = summarize(traced.replay, model, args.mode, batch, "cpu")
    return row, {**parts, **{k.replace("trace_", "replay_"): v for k, v in replay.items()}}


def engine_alone(measurements: pd.DataFrame, alone_s: float) -> pd.DataFrame:
    """``measurements`` with each isolated backward row netted of ``alone_s`` (the engine measured alone, before
    rotations measured it) instead of its rotation's `engine_s`."""
    from opcost.measure.engine import ENGINE_STATS

    m = measurements.copy()
    rows = (m["source"] == "isolated") & (m["phase"] == "backward") & m["engine_s"].notna()
    for col in ENGINE_STATS:
        m.loc[rows, col] = (m.loc[rows, col] + m.loc[rows, "engine_s"] - alone_s).clip(lower=0.0)
    m.loc[rows, "engine_s"] = alone_s
    return m


if __name__ == "__main__":
    main()
