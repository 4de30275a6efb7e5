"""How well does `opcost predict` answer for what the database never measured?

Reads the database of a finished run (default results/db; for the study, run the workflow on
benchmarks/configs/generalisation.yaml: eleven models of several families at batch 1 and 4, with operator
sweeps) and, for every workload with an end-to-end time:

* leave-one-model-out: the database without that model (its layers, and the measurements of every configuration
  that no other workload or sweep point has) predicts each of its workloads;
* leave-one-batch-size-out: the database without that workload (the same, for one model and batch) predicts it;

each compared with the workload's end-to-end time measured in the run (the isolated prediction's reference:
`opcost.analysis.predict.references`). Also: the cost model's held-out error per configuration (its own K-fold
cross-validation over the whole database), and the study's wall time against the seconds the run spent timing
the held-out configurations. Targets: held-out models median |error| <= 10% and 90% within ±15%;
held-out batch sizes median <= 5%. Ends with one SUMMARY line.

    python benchmarks/generalisation.py [--db results/db] [--mode inference]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _common import summary


def _without(db: dict, drop: pd.Series) -> dict:
    """``db`` without the `layers` rows ``drop`` and the isolated measurements of configurations only they have."""
    layers = db["layers"][~drop]
    kept = set(layers["config_id"])
    meas = db["measurements"]
    return {**db, "layers": layers,
            "measurements": meas[meas["config_id"].isin(kept) | (meas["source"] != "isolated")]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="results/db")
    ap.add_argument("--mode", default="inference")
    args = ap.parse_args()

    from opcost import database
    from opcost.analysis import estimate
    from opcost.analysis.costmodel import CostModel, training_data
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.model.sweeps import PREFIX

    t0 = time.perf_counter()
    db = database.read_db(args.db)
    used, _ = estimate.conditions(db["measurements"])
    layers = db["layers"][db["layers"]["mode"] == args.mode]
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
                             & (db["layers"]["mode"] == args.mode))):
            t = time.perf_counter()
            p = estimate.predict_workload(_without(db, drop), wl.reset_index(drop=True))
            took = time.perf_counter() - t
            timed = used[used["config_id"].isin(wl["config_id"])]
            timed_s = float((timed["n"].astype(float) * timed["calls_per_sample"].astype(float).fillna(1)
                             * timed[col].astype(float)).sum())
            rows.append({"study": study, "model": model, "batch": int(batch), "measured_ms": full.measured_s * 1e3,
                         "measured_db_ms": full.predicted_s * 1e3, "predicted_ms": p.predicted_s * 1e3,
                         "low_ms": p.low_s * 1e3, "high_ms": p.high_s * 1e3, "estimated_share": p.estimated_share,
                         "error": p.predicted_s / full.measured_s - 1,
                         "in_interval": p.low_s <= full.measured_s <= p.high_s,
                         "predict_s": took, "timed_s": timed_s})
            print(f"{study:5s} {model} b{batch}: predicted {p.predicted_s * 1e3:.3f} ms, measured "
                  f"{full.measured_s * 1e3:.3f} ms ({rows[-1]['error']:+.1%}), {p.estimated_share:.0%} estimated",
                  flush=True)
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    for study, g in table.groupby("study", sort=False):
        print(f"\nheld out: {study}")
        print(g.drop(columns="study").to_string(index=False, float_format="%.3f"))
    cm = CostModel.fit(training_data(db["layers"], used, col))
    held = cm.heldout_summary()
    print("\ncost model, held-out configurations (5-fold):", held)
    by = {s: g["error"].abs() for s, g in table.groupby("study")}
    m, b = by.get("model", pd.Series(dtype=float)), by.get("batch", pd.Series(dtype=float))
    summary(models=int(table.loc[table["study"] == "model", "model"].nunique()), workloads=len(m),
            median_abs_err_model=float(np.median(m)) if len(m) else float("nan"),
            within_15pct_model=float((m <= 0.15).mean()) if len(m) else float("nan"),
            median_abs_err_batch=float(np.median(b)) if len(b) else float("nan"),
            in_interval=float(table["in_interval"].mean()),
            config_median_abs_err=held.get(held.get("chosen", "law"), {}).get("median_abs_error", float("nan")),
            chosen=held.get("chosen", "none"),
            predict_s=float(table["predict_s"].sum()), timed_s=float(table["timed_s"].sum()),
            wall_s=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
