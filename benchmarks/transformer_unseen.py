"""Transformers never profiled: how far is `opcost predict` off their end-to-end time?

Reads the database of a finished run (default results/db; for the study, run the workflow on
benchmarks/configs/transformer_sweeps.yaml: the default study's models plus transformer operator sweeps, and six
transformers under `predict_only`, never profiled) and, for each never-profiled transformer at each batch size:

* its prediction as `opcost predict` makes it (:func:`opcost.analysis.estimate.predict_workload` on the workload's
  layers, with the overhead between operators from a short trace of its own taken now: ``overhead_from``);
* its end-to-end time taken now, in turn with profiled models' (``--ref``, default resnet18 and tiny_bert at batch
  1) in the same minutes: ``--rounds`` rounds, each timing all, the order rotated every round, in a process set up as
  the measuring jobs were (glibc keeping freed memory, the database's threads, pinned). Each reference gives the
  model's time in the database's minutes, ``T_now x ref_db / T_ref_now``, where ``ref_db`` is the reference's
  end-to-end time in the database and ``T_now / T_ref_now`` the median of the rounds' ratios: the machine's drift
  between the run and now cancels (a separate run drifts 10% or more on a shared VM). The error is
  ``predicted / (the median of those times) - 1`` (``err_ref0``: with the first reference alone); how far the
  references' times disagree (``ref_spread``, max / min - 1) is the noise of the anchor itself (one reference timed
  in a slow minute of the run moves every error);
* the error against the run's own end-to-end time of the model (``err_run``: its dedicated job, other minutes,
  from the run's `validation/unseen.parquet`);
* the estimate alone against measurements (``est_vs_measured``): where the database measured some of the workload's
  configurations (a sweep point of the same shape, a profiled model's), their estimated cost with every
  configuration of the never-profiled workloads taken out of the database, against their measured cost
  (``measured_share``: their part of the operators' predicted time);
* the estimate alone against every configuration measured (``est_vs_all``, unless ``--no-measure``): each
  workload's configurations profiled now, in rotation as the profiling jobs profile them (the config's `profile`
  settings), each workload's rotation between two of the first reference's, whose configurations the database
  measured: their Σ count x cost now over the database's is the drift between the run and now, and each workload's
  costs are divided by the geometric mean of the two around it (``drift_step``: how far the drift moved between
  them, the noise of this anchor). ``est_vs_all`` is the workload's Σ count x estimated cost
  (the prediction's operators, every configuration estimated) over Σ count x the drift-cancelled measured cost, - 1;
  ``err_all``: the prediction with every configuration measured (plus the same overhead) against the drift-cancelled
  end-to-end time, the method's own error on the workload, apart from the cost model's;
* whether the 90% interval holds the time (``in_interval``), and the run's own end-to-end time
  (``in_interval_run``), and its width relative to the prediction.

Prints a table per workload (its top operator types, estimated or measured) and one of all; ends with a SUMMARY line.
Targets (issue 42): every transformer within ±15%, median |error| <= 10%; the estimate alone within 5% median
(``est_vs_all``).

    python benchmarks/transformer_unseen.py [--config benchmarks/configs/transformer_sweeps.yaml] [--db results/db]
        [--models llama gpt2] [--batches 1 4] [--ref resnet18 tiny_bert] [--ref-batch 1] [--rounds 5]
        [--seconds 1.0] [--no-measure]
    python benchmarks/transformer_unseen.py --smoke --db <a tiny run's results/db>   # a tiny decoder, seconds
"""
from __future__ import annotations

import argparse
import copy
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from _common import ROOT, interleaved_ratios, prepare, summary

CONFIG = ROOT / "benchmarks" / "configs" / "transformer_sweeps.yaml"
SMOKE_CONFIG = ROOT / "tests" / "data" / "tiny.yaml"  # the tiny run's config: its profiled models, the reference
# a tiny Qwen2 decoder: grouped-query attention; its query projection (12 -> 12, bias) over 3 tokens is the tiny run's
# Linear sweep point of that shape, a configuration measured where the rest is estimated
SMOKE_MODELS = {"tiny_qwen2": {"model": "hf:qwen2", "seq_len": 3, "kwargs": {
    "num_hidden_layers": 1, "hidden_size": 12, "intermediate_size": 24, "num_attention_heads": 2,
    "num_key_value_heads": 1, "vocab_size": 64}}}
MODE = "inference"


def _workload(name: str, spec: dict, batch: int):
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    return make_workload(load_model(name, spec), batch, MODE)


def without_configs(db: dict, config_ids: set) -> dict:
    """``db`` without the isolated measurements of ``config_ids``: what the cost model estimates them from."""
    m = db["measurements"]
    return {**db, "measurements": m[~(m["config_id"].isin(config_ids) & (m["source"] == "isolated"))]}


def estimate_vs_measured(full, alone) -> tuple[float, float]:
    """(estimated / measured - 1 over the configurations ``full`` (a prediction) took measured, with their costs in
    ``alone``, the prediction from a database without them; their share of ``full``'s operator time)."""
    rows, est = full.layers, alone.layers
    measured = rows["method"] == "measured"
    if not measured.any():
        return float("nan"), 0.0
    key = ["config_id", "phase"]
    cost = est.set_index(key)["cost_s"]
    on = rows[measured]
    estimated = (on["count"].astype(float) * cost.reindex(pd.MultiIndex.from_frame(on[key])).to_numpy()).sum()
    got = float(on["total_s"].sum())
    return float(estimated / got - 1), got / float(rows["total_s"].sum())


def measure_now(layers: pd.DataFrame, specs: dict, profiling, stat: str) -> pd.Series:
    """config_id -> seconds per call (column ``stat``) of each configuration of ``layers`` (one workload's rows),
    profiled now in rotation with ``profiling`` (:class:`opcost.measure.profile.ProfileSettings`) as the profiling
    jobs profile them; failed ones left out."""
    from opcost.database import catalog
    from opcost.measure.profile import profile_configs

    iso, _ = profile_configs(catalog(layers), specs, "cpu", "float32", profiling, on_e2e=lambda *_: None)
    ok = iso[(iso["status"] == "ok") & (iso["phase"] == "forward") & iso["baseline"].fillna(True).astype(bool)]
    return ok.groupby("config_id")[stat].first().astype(float)


def weighted(layers: pd.DataFrame, cost: pd.Series) -> float:
    """Σ count x ``cost`` (config_id -> seconds) over the configurations of ``layers`` that ``cost`` holds."""
    calls = layers.groupby("config_id")["count"].sum().astype(float)
    on = calls.index.intersection(cost.index)
    return float((calls[on] * cost[on]).sum())


def run_times(db_dir) -> dict[tuple, float]:
    """(model, batch) -> the end-to-end time the run itself took of each never-profiled workload (its dedicated job:
    `validation/unseen.parquet` beside the database's folder, as benchmarks/generalisation.py reads it); none
    without that file."""
    from pathlib import Path

    from opcost import io, tables

    path = Path(db_dir).resolve().parent / "validation" / "unseen.parquet"
    if not path.exists():
        return {}
    u = io.read_parquet(path, tables.PREDICTIONS)
    u = u[(u["mode"] == MODE) & u["measured_s"].notna()]
    return {(m, int(b)): float(v) for m, b, v in zip(u["model"], u["batch"], u["measured_s"])}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help=f"config whose predict_only models are predicted (default {CONFIG.name}; with "
                                     "--smoke: a tiny decoder, and tests/data/tiny.yaml for the reference)")
    ap.add_argument("--db", default="results/db")
    ap.add_argument("--models", nargs="+", help="only these predict_only models")
    ap.add_argument("--batches", nargs="+", type=int, help="default: each model's batch sizes in the config")
    ap.add_argument("--ref", nargs="+", help="the profiled models timed in turn with each one (default resnet18 "
                                             "tiny_bert; --smoke: the first profiled model of the database with an "
                                             "end-to-end time)")
    ap.add_argument("--ref-batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="timing cap of each measurement")
    ap.add_argument("--no-trace", action="store_true", help="overhead from the database's traces or residuals "
                                                            "instead of a short trace of each model")
    ap.add_argument("--no-measure", action="store_true", help="skip profiling each workload's configurations now "
                                                              "(est_vs_all, err_all)")
    ap.add_argument("--smoke", action="store_true", help="a tiny decoder on a tiny run's database, in seconds")
    return ap


@dataclass
class Study:
    """What every workload of the study is predicted from and timed against."""
    args: argparse.Namespace
    db: dict
    unseen: dict  # model -> its config entry
    workloads: list  # (model, batch)
    layers: dict  # (model, batch) -> its layer rows
    ref_names: list
    ref_batch: int
    ref_specs: dict  # reference -> its config entry
    ref_preds: dict  # reference -> its prediction from the database (its measured costs and end-to-end time)
    ref_wls: list  # the references' workloads, timed in turn with each model
    ref_db: list  # the references' end-to-end times in the database
    alone_db: dict  # the database without the never-profiled workloads' configurations
    ran: dict  # (model, batch) -> the run's own end-to-end time
    settings: object  # the timing settings of the interleaved rounds


def _study(args, cfg) -> Study:
    """The study's database, workloads and references, the process set up as the measuring jobs' was."""
    from opcost import database
    from opcost.analysis import estimate
    from opcost.config import validate
    from opcost.errors import OpcostError
    from opcost.measure.hostinfo import pin_threads
    from opcost.measure.timing import TimingSettings

    if args.smoke:  # the tiny run's batch size; two short rounds
        valid = validate({"models": copy.deepcopy(SMOKE_MODELS)})["models"]  # validation fills in the defaults
        unseen = {m: valid[m] for m in SMOKE_MODELS}
        args.batches = args.batches or [2]
        args.rounds, args.seconds = min(args.rounds, 2), min(args.seconds, 0.05)
    else:
        unseen = dict(cfg["predict_only"])
    if args.models:
        unseen = {m: unseen[m] for m in args.models}
    db = database.read_db(args.db)
    workloads = [(m, b) for m, spec in unseen.items()
                 for b in (args.batches or spec.get("batch_sizes") or cfg["batch_sizes"])]
    layers = {(m, b): estimate.workload_layers(db, m, b, MODE, unseen[m]) for m, b in workloads}
    profiled = set(zip(db["layers"]["model"], db["layers"]["batch"]))
    shared = [(m, b) for m, b in workloads if (m, b) in profiled and db["measurements"]["config_id"].isin(
        layers[(m, b)]["config_id"]).all()]
    if shared:
        print(f"note: the database measured every configuration of {shared}: profiled, not never-profiled")
    # the references: profiled workloads with an end-to-end time in the database
    ref_names, ref_batch = args.ref or ["resnet18", "tiny_bert"], args.ref_batch
    if args.smoke and not args.ref:
        e2e = db["e2e"][db["e2e"]["mode"] == MODE]
        ref_name, ref_batch = next((m, int(b)) for m, b in zip(e2e["model"], e2e["batch"])
                                   if m in (cfg.get("models") or {}) and (m, b) in profiled)
        ref_names = [ref_name]
    ref_specs = {r: (cfg.get("models") or {}).get(r, {}) for r in ref_names}
    ref_preds = {r: estimate.predict_workload(db, estimate.workload_layers(db, r, ref_batch, MODE, ref_specs[r]),
                                              args.db) for r in ref_names}
    for r, ref_pred in ref_preds.items():
        if not ref_pred.measured_s:
            raise OpcostError(f"--ref {r}", f"the database holds no end-to-end time of it at batch {ref_batch}")
        print(f"reference: {r} b{ref_batch}, {ref_pred.measured_s * 1e3:.3f} ms in the database "
              f"({', '.join(f'{k} {v}' for k, v in ref_pred.conditions.items())})")
    threads = int(ref_preds[ref_names[0]].conditions.get("threads") or 1)
    prepare(threads)  # as the measuring jobs: glibc keeps freed memory, the database's threads
    pin_threads(threads)
    settings = TimingSettings(target_rel_ci=0.01, max_seconds=args.seconds, warmup_s=min(0.3, args.seconds / 3),
                              min_samples=5, min_sample_s=0.0002 if args.smoke else 0.001)
    unseen_ids = set().union(*(set(wl["config_id"]) for wl in layers.values()))
    return Study(args, db, unseen, workloads, layers, ref_names, ref_batch, ref_specs, ref_preds,
                 [_workload(r, ref_specs[r], ref_batch) for r in ref_names],
                 [ref_preds[r].measured_s for r in ref_names], without_configs(db, unseen_ids), run_times(args.db),
                 settings)


class Drift:
    """The first reference's configurations, measured now between workloads: their cost now over the database's is
    the drift between the run and now (:meth:`now`); ``before``, the drift measured last."""

    def __init__(self, study: Study, cfg: dict):
        import dataclasses

        from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
        from opcost.measure.profile import ProfileSettings

        self.profiling = dataclasses.replace(ProfileSettings.from_config(cfg), e2e_every=0)
        self.stat = STATISTICS[DEFAULT_STATISTIC]
        first = study.ref_names[0]
        ref0 = study.ref_preds[first].layers
        self.ref0 = ref0[(ref0["method"] == "measured") & (ref0["phase"] == "forward")]
        self.ref_cost_db = self.ref0.groupby("config_id")["cost_s"].first().astype(float)
        self.spec = {first: study.ref_specs[first]}
        self.before = self.now()
        print(f"drift: {first}'s configurations now at {self.before:.3f} x their cost in the database", flush=True)

    def now(self) -> float:
        now = measure_now(self.ref0, self.spec, self.profiling, self.stat)
        return weighted(self.ref0, now) / weighted(self.ref0, self.ref_cost_db.reindex(now.index).dropna())


NOT_NOW = {"est_vs_all": float("nan"), "err_all": float("nan"), "drift": float("nan"), "drift_step": float("nan"),
           "covered": float("nan"), "misses": None}  # a workload's figures of its configurations measured now, absent


def _measured_now(study: Study, drift: Drift, workload: tuple, p, alone, scaled: float) -> dict:
    """The workload's configurations profiled now (``est_vs_all``, ``err_all``, ``drift``, ``drift_step``,
    ``covered``, and ``misses`` per op type); NaN figures where they could not be measured."""
    from opcost.analysis.optypes import label
    from opcost.errors import OpcostError

    (model, batch), wl = workload, study.layers[workload]
    out = dict(NOT_NOW)
    try:
        now = measure_now(wl, {model: study.unseen[model]}, drift.profiling, drift.stat)
        drift_after = drift.now()
    except (OpcostError, RuntimeError, ValueError) as e:  # this workload's figures missing, the rest go on
        print(f"{model} b{batch}: its configurations not measured now: {e}", flush=True)
        return out
    d = float(np.sqrt(drift.before * drift_after))
    out["drift"], out["drift_step"] = d, drift_after / drift.before - 1  # how far the drift moved meanwhile
    drift.before = drift_after
    fwd = alone.layers[alone.layers["phase"] == "forward"]
    est = fwd.groupby("config_id")["cost_s"].first().astype(float).reindex(now.index).dropna()
    on_both = wl[wl["config_id"].isin(est.index)]
    calls = on_both.groupby("config_id")["count"].sum().astype(float)
    misses = pd.DataFrame({"estimated_ms": calls * est[calls.index] * 1e3,
                           "measured_ms": calls * (now / d)[calls.index] * 1e3})
    out["est_vs_all"] = misses["estimated_ms"].sum() / misses["measured_ms"].sum() - 1
    misses = misses.groupby(on_both.groupby("config_id")["op_type"].first()).sum()
    misses.index = [label(t) for t in misses.index]
    out["misses"] = misses
    calls_of = wl["count"].astype(float)
    out["covered"] = float(calls_of[wl["config_id"].isin(now.index)].sum() / calls_of.sum())  # calls measured
    out["err_all"] = (weighted(wl, now / d) + p.overhead_s) / scaled - 1
    return out


def _row(study: Study, drift: Drift | None, model: str, batch: int) -> tuple[dict, object, pd.DataFrame | None]:
    """One workload's prediction, its time in the database's minutes and its figures (the table's row), the
    prediction, and its misses per op type (None unless measured now)."""
    from opcost.analysis import estimate

    args, wl = study.args, study.layers[(model, batch)]
    t = time.perf_counter()
    p = estimate.predict_workload(study.db, wl, args.db,
                                  trace_now=None if args.no_trace else (model, study.unseen[model]))
    predict_s = time.perf_counter() - t
    alone = estimate.predict_workload(study.alone_db, wl)
    est_err, measured_share = estimate_vs_measured(p, alone)
    ratio, tx, tr, ratios = interleaved_ratios(_workload(model, study.unseen[model], batch), study.ref_wls,
                                               args.rounds, study.settings)
    by_ref = [q * t for q, t in zip(ratio, study.ref_db)]  # the model's time in the database's minutes, per reference
    scaled = float(np.median(by_ref))
    nan = float("nan")
    now = _measured_now(study, drift, (model, batch), p, alone, scaled) if drift is not None else NOT_NOW
    ran = study.ran.get((model, batch))
    row = {"model": model, "batch": batch, "predicted_ms": p.predicted_s * 1e3, "low_ms": p.low_s * 1e3,
           "high_ms": p.high_s * 1e3, "now_ms": tx * 1e3, "ref_now_ms": tr[0] * 1e3, "scaled_ms": scaled * 1e3,
           "error": p.predicted_s / scaled - 1, "err_ref0": p.predicted_s / by_ref[0] - 1,
           "err_run": p.predicted_s / ran - 1 if ran else nan,
           "ratio_spread": max(max(q) / min(q) for q in ratios) - 1,
           "ref_spread": max(by_ref) / min(by_ref) - 1, "estimated_share": p.estimated_share,
           "overhead_ms": p.overhead_s * 1e3, "overhead_from": p.overhead_from,
           "est_vs_measured": est_err, "measured_share": measured_share,
           **{k: now[k] for k in ("est_vs_all", "err_all", "drift", "drift_step", "covered")},
           "in_interval": bool(p.low_s <= scaled <= p.high_s),
           "in_interval_run": bool(p.low_s <= ran <= p.high_s) if ran else None,
           "width": (p.high_s - p.low_s) / p.predicted_s, "predict_s": predict_s}
    return row, p, now["misses"]


def _print_row(row: dict, p, misses: pd.DataFrame | None) -> None:
    """A workload's line, its misses per op type where measured now, and its top operator types."""
    from opcost.analysis import overhead_sources
    from opcost.analysis.optypes import label

    print(f"\n{row['model']} b{row['batch']}: predicted {row['predicted_ms']:.3f} ms [{row['low_ms']:.3f}, "
          f"{row['high_ms']:.3f}], timed {row['scaled_ms']:.3f} ms in the database's minutes (now {row['now_ms']:.3f} "
          f"ms, reference {row['ref_now_ms']:.3f} ms; rounds' ratios within {row['ratio_spread']:.1%}, references' "
          f"times within {row['ref_spread']:.1%}): {row['error']:+.1%}; {p.estimated_share:.0%} estimated, overhead "
          f"{row['overhead_ms']:.3f} ms ({overhead_sources.OVERHEAD_FROM.get(p.overhead_from, p.overhead_from)})",
          flush=True)
    if np.isfinite(row["est_vs_all"]):
        print(f"every configuration measured now ({row['covered']:.0%} of the calls; drift {row['drift']:.3f}): the "
              f"estimate alone {row['est_vs_all']:+.1%}, the prediction with them measured {row['err_all']:+.1%}; per "
              "op type, the largest misses:", flush=True)
        miss = (misses["estimated_ms"] - misses["measured_ms"]).abs().sort_values(ascending=False).index[:6]
        print(misses.loc[miss].to_string(float_format=lambda v: f"{v:.3f}"), flush=True)
    by = p.layers.groupby("op_type").agg(ms=("total_s", "sum"), method=("method", lambda s: ",".join(
        sorted(set(s)))))
    by["ms"] *= 1e3
    by.index = [label(t) for t in by.index]
    print(by.sort_values("ms", ascending=False).head(8).to_string(float_format=lambda v: f"{v:.3f}"))


def _summary(table: pd.DataFrame, study: Study, failed: list, wall_s: float) -> None:
    """The SUMMARY line of the study's table."""
    nan = float("nan")

    def agg(column: str, how: str = "median", absolute: bool = True) -> float:
        if not len(table) or column not in table or table[column].dropna().empty:
            return nan
        values = table[column].dropna().astype(float)
        return float(getattr(values.abs() if absolute else values, how)())

    e = table["error"].abs() if len(table) else pd.Series(dtype=float)
    summary(workloads=len(table), failed=len(failed), ref="+".join(f"{r}_b{study.ref_batch}" for r in study.ref_names),
            median_abs_err=agg("error"), max_abs_err=agg("error", "max"),
            within_15pct=float((e <= 0.15).mean()) if len(e) else nan,
            median_abs_err_run=agg("err_run"), median_ref_spread=agg("ref_spread", absolute=False),
            median_abs_err_ref0=agg("err_ref0"), in_interval=agg("in_interval", "mean", False),
            in_interval_run=agg("in_interval_run", "mean", False), median_width=agg("width", absolute=False),
            median_abs_est_vs_measured=agg("est_vs_measured"), median_abs_est_vs_all=agg("est_vs_all"),
            max_abs_est_vs_all=agg("est_vs_all", "max"), median_abs_err_all=agg("err_all"),
            median_abs_drift_step=agg("drift_step"), estimated_share=agg("estimated_share", absolute=False),
            wall_s=wall_s)


def main() -> None:
    args = _parser().parse_args()
    from opcost.config import load
    from opcost.errors import OpcostError

    t0 = time.perf_counter()
    cfg = load(args.config or (SMOKE_CONFIG if args.smoke else CONFIG))
    study = _study(args, cfg)
    drift = None if args.no_measure else Drift(study, cfg)
    rows, failed = [], []
    for model, batch in study.workloads:
        try:
            row, p, misses = _row(study, drift, model, batch)
        except (OpcostError, RuntimeError, ValueError) as e:
            failed.append(model)
            print(f"{model} b{batch}: FAILED {e}", flush=True)
            continue
        rows.append(row)
        _print_row(row, p, misses)
    table = pd.DataFrame(rows)
    if len(table):
        pd.set_option("display.width", 250)
        print("\n" + table.drop(columns=["overhead_from"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    _summary(table, study, failed, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
