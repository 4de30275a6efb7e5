"""How well does `opcost predict` answer for what the database never measured?

Reads the database of a finished run (default results/db; for the study, run the workflow on
benchmarks/configs/generalisation.yaml: eleven models of several families at batch 1 and 4, with operator
sweeps; in training, generalisation_training.yaml and ``--mode training``) and, for every workload with an
end-to-end time:

* leave-one-model-out: the database without that model (its layers, and the measurements of every configuration
  that no other workload or sweep point has) predicts each of its workloads;
* leave-one-batch-size-out: the database without that workload (the same, for one model and batch) predicts it;

each compared with the workload's end-to-end time measured in the run (the isolated prediction's reference:
`opcost.analysis.predict.references`), and with the prediction from the whole database (every configuration
measured: `measured_db_ms`), which separates the estimates' own error (`vs_full`) from the method's error where
nothing is estimated (`full_vs_e2e`, the same for every variant). Also: the cost model's held-out errors over the
whole database (its own K-fold cross-validation, whole profiling workloads held out: per configuration and per
workload sum, and the method it chose), and the study's wall time against the seconds the run spent timing the
held-out configurations. Each held-out workload is predicted by the rule and by variants with one part replaced,
side by side on the same database (:data:`VARIANTS`: each of the cost model's methods for every estimate, and the
overhead from end-to-end residuals), and how far each workload's end-to-end time moved between the rotations that
timed it (``ref_spread``, :func:`opcost.analysis.predict.reference_spread`: the reference's own noise, a floor
for estimates measured in other minutes). Targets:
held-out models median |error| <= 10% and 90% within ±15%; held-out batch sizes median <= 5%. Ends with one
SUMMARY line (the rule's figures).

Models the run never profiled (its config's `predict_only`: the study's config lists nine of torchvision, timm and
transformers beside the eleven) were predicted by the run from its whole database and timed end to end in it
(`results/validation/unseen.parquet`, beside the database): the benchmark reports their errors as well, the test
of a user's model that no leave-one-out stands in for (``unseen_*`` in the SUMMARY line).

    python benchmarks/generalisation.py [--db results/db] [--mode inference] [--unseen PATH]
    python benchmarks/generalisation.py --smoke --db DIR   # the rule alone, no variants: a functional check (e.g. on
                                                           # the database of a run on tests/data/tiny.yaml)
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import summary


def _without(db: dict, drop: pd.Series) -> dict:
    """``db`` without the `layers` rows ``drop``, the isolated measurements of configurations only they have, and
    the trace-modelled overheads of their workloads."""
    layers = db["layers"][~drop]
    kept = set(layers["config_id"])
    meas = db["measurements"]
    gone = set(zip(*(db["layers"].loc[drop, k] for k in ("model", "batch", "mode"))))
    ov = db["overheads"]
    ov_kept = [k not in gone for k in zip(ov["model"], ov["batch"], ov["mode"])]
    return {**db, "layers": layers, "overheads": ov[ov_kept] if len(ov) else ov,
            "measurements": meas[meas["config_id"].isin(kept) | (meas["source"] != "isolated")]}


VARIANTS = ("rule", "law", "law+trees", "law+trees+context", "overhead from e2e residuals")


def _predict(estimate, db: dict, wl: pd.DataFrame, variant: str):
    """``estimate.predict_workload`` as the rule does it (the estimation method its cross-validation chose), with
    one estimation method of :data:`opcost.analysis.costmodel.METHODS` for every configuration, or with the overhead
    per call from end-to-end residuals instead of the traces (the rule before the `overheads` table)."""
    from opcost.analysis.costmodel import METHODS

    if variant == "overhead from e2e residuals":
        db = {**db, "overheads": db["overheads"].iloc[0:0]}
    return estimate.predict_workload(db, wl, method=variant if variant in METHODS else None)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="results/db")
    ap.add_argument("--mode", default="inference")
    ap.add_argument("--unseen", help="the run's predict_only predictions (default: validation/unseen.parquet beside "
                                     "the database's folder)")
    ap.add_argument("--smoke", action="store_true", help="the rule alone, without the variants (a functional check)")
    return ap


def _held_out(db: dict, used: pd.DataFrame, mode: str, variants) -> pd.DataFrame:
    """One row per profiled workload of ``mode``, study (its model held out, its batch held out) and variant: the
    prediction from the database without it against its end-to-end time and the whole database's prediction."""
    from opcost.analysis import estimate
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.model.sweep_points import PREFIX

    layers = db["layers"][db["layers"]["mode"] == mode]
    col = STATISTICS[DEFAULT_STATISTIC]
    rows = []
    for (model, batch), wl in layers.groupby(["model", "batch"]):
        if model.startswith(PREFIX):
            continue  # sweep points: database content, not models to predict
        full = estimate.predict_workload(db, wl.reset_index(drop=True))
        if not full.measured_s:
            continue  # no end-to-end time
        for study, drop in (("model", db["layers"]["model"] == model),
                            ("batch", (db["layers"]["model"] == model) & (db["layers"]["batch"] == batch)
                             & (db["layers"]["mode"] == mode))):
            held_db = _without(db, drop)
            timed = used[used["config_id"].isin(wl["config_id"])]
            timed_s = float((timed["n"].astype(float) * timed["calls_per_sample"].astype(float).fillna(1)
                             * timed[col].astype(float)).sum())
            for variant in variants:
                t = time.perf_counter()
                p = _predict(estimate, held_db, wl.reset_index(drop=True), variant)
                took = time.perf_counter() - t
                rows.append({"study": study, "variant": variant, "model": model, "batch": int(batch),
                             "measured_ms": full.measured_s * 1e3, "measured_db_ms": full.predicted_s * 1e3,
                             "predicted_ms": p.predicted_s * 1e3, "low_ms": p.low_s * 1e3, "high_ms": p.high_s * 1e3,
                             "overhead_ms": p.overhead_s * 1e3, "estimated_share": p.estimated_share,
                             "error": p.predicted_s / full.measured_s - 1,
                             "vs_full": p.predicted_s / full.predicted_s - 1,
                             "in_interval": p.low_s <= full.measured_s <= p.high_s,
                             "predict_s": took, "timed_s": timed_s})
                print(f"{study:5s} {variant:28s} {model} b{batch}: predicted {p.predicted_s * 1e3:.3f} ms, measured "
                      f"{full.measured_s * 1e3:.3f} ms ({rows[-1]['error']:+.1%}), {p.estimated_share:.0%} estimated",
                      flush=True)
    return pd.DataFrame(rows)


def _side_by_side(table: pd.DataFrame, db: dict, used: pd.DataFrame, mode: str) -> tuple[pd.Series, pd.Series]:
    """Prints each study and variant's rows and their figures side by side; (the whole database's error per
    workload, the end-to-end reference's own spread per workload)."""
    from opcost.analysis.predict import reference_spread
    from opcost.model.sweep_points import PREFIX

    pd.set_option("display.width", 220)
    for (study, variant), g in table.groupby(["study", "variant"], sort=False):
        print(f"\nheld out: {study}, {variant}")
        print(g.drop(columns=["study", "variant"]).to_string(index=False, float_format="%.3f"))
    print("\nside by side (against the end-to-end time: median |error|, share within ±15%, measured inside the "
          "interval; against the whole database's prediction: median |error|, share within ±15%):")
    for (study, variant), g in table.groupby(["study", "variant"], sort=False):
        e, f = g["error"].abs(), g["vs_full"].abs()
        print(f"  {study:5s} {variant:28s} {np.median(e):6.1%}  {(e <= 0.15).mean():6.1%}  "
              f"{g['in_interval'].mean():6.1%}    {np.median(f):6.1%}  {(f <= 0.15).mean():6.1%}")
    floor = (table.drop_duplicates(["model", "batch"]).eval("measured_db_ms / measured_ms") - 1).abs()
    print(f"  the whole database's prediction against the end-to-end time: median |error| {np.median(floor):.1%}, "
          f"{(floor <= 0.15).mean():.1%} within ±15%")
    spread = pd.Series({(m, b): v for (m, b, mo), v in reference_spread(db["e2e"], str(used["device"].iloc[0])).items()
                        if mo == mode and not m.startswith(PREFIX)}, dtype=float)
    if len(spread):
        print(f"  the end-to-end time itself between the rotations that timed it (largest / smallest - 1): median "
              f"{spread.median():.1%}, {(spread > 0.15).mean():.1%} of the workloads above 15% "
              f"({', '.join(f'{m} b{b} {v:+.0%}' for (m, b), v in spread[spread > 0.15].items())})")
    return floor, spread


def main() -> None:
    args = _parser().parse_args()
    variants = VARIANTS[:1] if args.smoke else VARIANTS

    from opcost import database
    from opcost.analysis import estimate
    from opcost.analysis.costmodel import CostModel
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.analysis.training import training_data

    t0 = time.perf_counter()
    db = database.read_db(args.db)
    used, _ = estimate.conditions(db["measurements"])
    table = _held_out(db, used, args.mode, variants)
    floor, spread = _side_by_side(table, db, used, args.mode)
    full = table.drop_duplicates(["model", "batch"]).set_index(["model", "batch"])["measured_db_ms"] / 1e3
    unseen = _unseen(args.unseen or Path(args.db).resolve().parent / "validation" / "unseen.parquet", args.mode,
                     _versus_dedicated(full, db["e2e"], str(used["device"].iloc[0]), args.mode))
    alone = estimate.alone_rows(db["measurements"], used)
    cm = CostModel.fit(training_data(db["layers"], used, STATISTICS[DEFAULT_STATISTIC], db["configs"], alone))
    held = cm.heldout_summary()
    chosen = ",".join(cm.chosen_by_mode.get(args.mode, ("law",)))  # the methods averaged, one SUMMARY token
    print("\ncost model, held-out configurations (5 folds grouped by profiling workload):", held)
    rule = table[table["variant"] == "rule"]
    by = {s: g["error"].abs() for s, g in rule.groupby("study")}
    m, b = by.get("model", pd.Series(dtype=float)), by.get("batch", pd.Series(dtype=float))
    vs = {s: float(np.median(g["vs_full"].abs())) for s, g in rule.groupby("study")}
    summary(models=int(rule.loc[rule["study"] == "model", "model"].nunique()), workloads=len(m),
            median_abs_err_model=float(np.median(m)) if len(m) else float("nan"),
            within_15pct_model=float((m <= 0.15).mean()) if len(m) else float("nan"),
            median_abs_err_batch=float(np.median(b)) if len(b) else float("nan"),
            in_interval=float(rule["in_interval"].mean()),
            vs_full_model=vs.get("model", float("nan")), vs_full_batch=vs.get("batch", float("nan")),
            full_vs_e2e=float(np.median(floor)) if len(floor) else float("nan"),
            ref_spread=float(spread.median()) if len(spread) else float("nan"),
            config_median_abs_err=held.get("estimate", {}).get("median_abs_error", float("nan")), chosen=chosen,
            predict_s=float(rule["predict_s"].sum()), timed_s=float(rule["timed_s"].sum()),
            **unseen, wall_s=time.perf_counter() - t0)


def _versus_dedicated(full: pd.Series, e2e: pd.DataFrame, device: str, mode: str) -> pd.Series:
    """Per profiled workload (model, batch): its prediction from the whole database (``full``, seconds) against its
    dedicated end-to-end run, − 1: how far the reference of a model never profiled, which has no rotation to be timed
    in, is off a prediction with nothing estimated. The dedicated run is taken as the run takes a `predict_only`
    model's (:func:`opcost.analysis.predict.references` of the dedicated rows alone)."""
    from opcost.analysis.predict import DEFAULT_STATISTIC, references

    refs = references(e2e[e2e["method"] == "dedicated"], device, "isolated", DEFAULT_STATISTIC)
    ref = pd.Series({(m, b): v for (m, b, mo), (v, _) in refs.items() if mo == mode}, dtype=float)
    both = pd.concat([full.rename("full"), ref.rename("ref")], axis=1).dropna()
    return both["full"] / both["ref"] - 1


def _unseen(path, mode: str, versus_dedicated: pd.Series) -> dict:
    """Prints the run's `predict_only` workloads of ``mode`` (models never profiled, predicted from the whole
    database) against their end-to-end times, and beside them how far the profiled workloads' whole-database
    predictions are off the same kind of reference (``versus_dedicated``); their SUMMARY figures (none where the run
    had none)."""
    from opcost import io, tables

    if not Path(path).exists():
        return {}
    u = io.read_parquet(path, tables.PREDICTIONS)
    u = u[(u["mode"] == mode) & u["measured_s"].notna()].copy()
    if u.empty:
        return {}
    u["in_interval"] = (u["low_s"] <= u["measured_s"]) & (u["measured_s"] <= u["high_s"])
    print("\nnever profiled (the run's predict_only models, predicted from its whole database):")
    ms = {f"{k}_ms": u[f"{k}_s"].astype(float) * 1e3 for k in ("measured", "predicted", "low", "high")}
    shown = pd.DataFrame({"model": u["model"], "batch": u["batch"], **ms,
                          "estimated_share": u["estimated_share"].astype(float), "error": u["error"].astype(float),
                          "in_interval": u["in_interval"]})
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    e = u["error"].astype(float).abs()
    print(f"  median |error| {e.median():.1%}, {(e <= 0.15).mean():.1%} within ±15%, "
          f"{u['in_interval'].mean():.1%} inside the interval")
    v = versus_dedicated.abs()
    if len(v):
        print(f"  their reference is a dedicated end-to-end run (no rotation times them): the profiled workloads' "
              f"whole-database predictions against their own dedicated runs, median |error| {v.median():.1%}, "
              f"{(v <= 0.15).mean():.1%} within ±15%")
    return {"unseen_workloads": len(u), "median_abs_err_unseen": float(e.median()),
            "within_15pct_unseen": float((e <= 0.15).mean()), "unseen_in_interval": float(u["in_interval"].mean()),
            "full_vs_dedicated": float(v.median()) if len(v) else float("nan")}


if __name__ == "__main__":
    main()
