"""Profiling cost and reproducibility: opcost's timing core vs torch.utils.benchmark, side by side, one run.

For the operator configurations of resnet18 and mobilenet_v3_small (inference), every configuration is timed twice
by each tool, same threads, same callables (opcost's replay of the configuration):

* opcost_fresh: the default isolated method (`profile.cache: fresh`, `profile.order: model`): all configurations of
  the model in one rotation, each round the model's call sequence with its repeats
  (`opcost.measure.rotation.measure_rotation`, each call reading its producer's output of the same round, other large
  inputs rewritten before it), default profile settings (95% CI of each median within 2% or 0.2 us, cap 1 s per
  configuration, or stopped once the medians still short of it could not get there before the cap); its wall time is
  divided among the configurations;
* opcost_warm: `opcost.measure.profile.profile_configs` with `profile.cache: warm` (the baselines' conditions:
  back-to-back calls reading the same inputs), same settings, default `profile.visits` (passes over the model's
  configurations until two visits of each agree) and `profile.remeasure`; its wall time, model loading included, is
  divided among the configurations;
* torch adaptive: `Timer.adaptive_autorange(threshold=0.05, max_run_time=1)`;
* torch blocked: `Timer.blocked_autorange(min_run_time=1)`.

Prints wall seconds per configuration (all, and per model) and the p90 over configurations of |Δmedian|/median
between a tool's two runs (reproducibility), then one SUMMARY line with each opcost method's wall time relative to
the better baseline and whether it met the target (<= 0.5x that wall time at equal or better p90): `warm_*` compares
like with like (back-to-back calls on one input, as the baselines time); `fresh_*` is the default rotation, whose
single-call samples of an operator in its model's sequence no baseline takes (it costs rounds of the whole model).

The machine's own drift is shown beside it: before each run's rotation the model's end-to-end iteration is timed
(opcost's e2e settings), and `p90_rel_diff_vs_e2e` is the same p90 for median / that run's e2e median. A tool whose
spread is the model's own (the machine ran the model slower too) has a small one; on a shared host the e2e time of
one model moves by 10-20% between runs minutes apart. opcost's rotation also runs two model iterations after every
`profile.e2e_every`-th round and times the second, as the pipeline does (their cost is in opcost's wall time);
`p90_rel_diff_vs_own_e2e` divides opcost's medians by that e2e time of their own minutes (other tools: by
the dedicated one, as in `p90_rel_diff_vs_e2e`).

    python benchmarks/profiling_efficiency.py [--models resnet18] [--batch 1] [--threads 2] [--limit N]
                                              [--save medians.parquet]
    python benchmarks/profiling_efficiency.py --smoke   # a tiny model, short caps: a functional check
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

import _smoke
import pandas as pd
from _common import p90, prepare, summary, workload_configs


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v3_small"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="at most N configurations per model (0: all)")
    ap.add_argument("--save", help="write every tool's per-configuration medians of both runs to this Parquet file")
    ap.add_argument("--smoke", action="store_true", help="a tiny model, three configurations, caps of milliseconds "
                                                         "(a functional check, in seconds)")
    return ap


def _baselines(run_s: float) -> dict:
    """torch.utils.benchmark's two autoranges, each at most ``run_s`` per configuration: name -> median of fn."""
    import torch
    from torch.utils.benchmark import Timer

    def adaptive(fn):
        t = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
        return t.adaptive_autorange(threshold=0.05, max_run_time=run_s).median

    def blocked(fn):
        t = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
        return t.blocked_autorange(min_run_time=run_s).median

    return {"torch_adaptive": adaptive, "torch_blocked": blocked}


@dataclass
class Runs:
    """What the two runs over every model measured: per-configuration rows, end-to-end times per (model, run)."""
    rows: list = field(default_factory=list)
    e2e: dict = field(default_factory=dict)  # (model, run) -> its end-to-end median
    rotation_e2e: dict = field(default_factory=dict)  # (model, run) -> its iteration in opcost's rotation
    op_type: dict = field(default_factory=dict)  # config_id -> op type


def _measure_model(model: str, args, cfg: dict, tools: dict, runs: Runs) -> None:
    """Two runs of ``model``'s configurations: opcost's rotation (fresh, as the pipeline), its warm back-to-back
    profile and each baseline, interleaved, and the model's end-to-end time before each run."""
    import torch

    from opcost.measure.e2e import measure_e2e
    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.profiling import measurement_order
    from opcost.measure.rotation import Member, model_order, with_iterations
    from opcost.measure.timing import TimingSettings
    from opcost.model.replay import ModelCache, build, refresher

    settings = TimingSettings.from_config(cfg["profile"]["timing"])
    e2e_settings = TimingSettings.from_config(cfg["e2e"]["timing"])
    cache = ModelCache(cfg["models"], "cpu", "float32")
    every = int(cfg["profile"]["e2e_every"])
    wl, _, configs = workload_configs(model, args.batch, spec=cfg["models"][model])
    configs = measurement_order(configs)
    if args.limit:
        configs = configs.head(args.limit)
    configs = configs.sort_values("order")  # the rotation's rounds follow the model's call order (default)
    records = configs.to_dict("records")
    runs.op_type.update({r["config_id"]: r["op_type"] for r in records})
    reps = [(row["config_id"], build(row, cache, "cpu")) for row in records]
    with torch.inference_mode():
        calls = [Member(cid, phase, fn, refresher(rep.inputs)) for cid, rep in reps for phase, fn in rep.callables()]
        rotation = model_order(calls, records, dict(reps), feed=True)  # as the pipeline: cache fresh
        for rnd in (1, 2):
            runs.e2e[(model, rnd)] = float(measure_e2e(wl, e2e_settings, "cpu")[0]["median_s"].iloc[0])
            print(f"{model} run {rnd}: e2e {runs.e2e[(model, rnd)] * 1e3:.3f} ms", flush=True)
            t0 = time.perf_counter()
            n = len(calls)  # two model iterations close every e2e_every-th round, as in the pipeline
            ms = with_iterations(rotation, [wl.step], every).measure(settings, targets=range(n))  # operators
            wall = (time.perf_counter() - t0) / n
            runs.rotation_e2e[(model, rnd)] = ms[-1].median
            runs.rows += [{"model": model, "config_id": cid, "tool": "opcost_fresh", "round": rnd,
                           "median_s": m.median, "wall_s": wall} for (cid, _, _, _), m in zip(calls, ms)]
            t0 = time.perf_counter()
            warm, _ = profile_configs(configs, cfg["models"], "cpu", "float32",
                                      ProfileSettings(settings, cache="warm",
                                                      remeasure=int(cfg["profile"]["remeasure"]),
                                                      visits=int(cfg["profile"]["visits"])))
            wall = (time.perf_counter() - t0) / len(warm)
            runs.rows += [{"model": model, "config_id": r.config_id, "tool": "opcost_warm", "round": rnd,
                           "median_s": r.median_s, "wall_s": wall} for r in warm.itertuples()]
            for cid, _, fn, _ in calls:
                for name, tool in tools.items():  # per-configuration tools interleaved: drift hits all alike
                    t0 = time.perf_counter()
                    med = tool(fn)
                    runs.rows.append({"model": model, "config_id": cid, "tool": name, "round": rnd,
                                      "median_s": med, "wall_s": time.perf_counter() - t0})


def _per_tool(runs: Runs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every row, with its op type and its ratio to the end-to-end time; per tool: wall time per configuration and
    the reproducibility between the two runs)."""
    df = pd.DataFrame(runs.rows)
    df["op_type"] = df["config_id"].map(runs.op_type)
    df["vs_e2e"] = df["median_s"] / [runs.e2e[(m, r)] for m, r in zip(df["model"], df["round"])]
    df["vs_own_e2e"] = df["vs_e2e"].where(df["tool"] != "opcost_fresh", df["median_s"] / [
        runs.rotation_e2e[(m, r)] for m, r in zip(df["model"], df["round"])])

    def rel_diff(col: str) -> pd.Series:
        wide = df.pivot_table(index=["config_id", "tool"], columns="round", values=col)
        return ((wide[1] - wide[2]).abs() / wide[[1, 2]].mean(axis=1)).groupby("tool")

    raw = rel_diff("median_s")
    out = pd.DataFrame({
        "wall_s_per_config": df.groupby("tool")["wall_s"].sum() / df.groupby("tool")["config_id"].nunique() / 2,
        "p90_rel_diff": raw.apply(p90),
        "median_rel_diff": raw.median(),
        "p90_rel_diff_vs_e2e": rel_diff("vs_e2e").apply(p90),
        "p90_rel_diff_vs_own_e2e": rel_diff("vs_own_e2e").apply(p90),
    })
    return df, out


def _report(df: pd.DataFrame, out: pd.DataFrame, runs: Runs, args) -> None:
    """The per-tool table, the end-to-end drift between the runs, and the SUMMARY line."""
    drift = {m: abs(runs.e2e[(m, 2)] - runs.e2e[(m, 1)]) / ((runs.e2e[(m, 1)] + runs.e2e[(m, 2)]) / 2)
             for m in args.models}
    print(f"{df['config_id'].nunique()} configurations, {args.threads} threads, batch {args.batch}")
    print(out.to_string(float_format="%.4f"))
    print("e2e |Δ|/mean between the runs: " + ", ".join(f"{m} {d:.1%}" for m, d in drift.items()))
    print("e2e in opcost's rotation, run 1 / run 2: " + ", ".join(
        f"{m} {runs.rotation_e2e[(m, 1)] * 1e3:.3f} / {runs.rotation_e2e[(m, 2)] * 1e3:.3f} ms" for m in args.models))
    per_model = df.groupby(["model", "tool"])["wall_s"].sum().unstack() / (
        2 * df.groupby("model")["config_id"].nunique().to_numpy()[:, None])
    print("wall s per configuration, per model:\n" + per_model.to_string(float_format="%.3f"))
    best = min(("torch_adaptive", "torch_blocked"), key=lambda t: out.loc[t, "wall_s_per_config"])

    def versus(tool: str) -> dict:
        ratio = float(out.loc[tool, "wall_s_per_config"] / out.loc[best, "wall_s_per_config"])
        p = float(out.loc[tool, "p90_rel_diff"])
        key = tool.removeprefix("opcost_")
        return {f"{key}_wall_ratio": ratio, f"{key}_p90": p,
                f"{key}_target_met": "yes" if ratio <= 0.5 and p <= out.loc[best, "p90_rel_diff"] else "no"}

    summary(configs=int(df["config_id"].nunique()), threads=args.threads, best_baseline=best,
            baseline_p90=float(out.loc[best, "p90_rel_diff"]), **versus("opcost_warm"), **versus("opcost_fresh"),
            fresh_p90_vs_own_e2e=float(out.loc["opcost_fresh", "p90_rel_diff_vs_own_e2e"]),
            baseline_p90_vs_e2e=float(out.loc[best, "p90_rel_diff_vs_e2e"]),
            blocked_p90=float(out.loc["torch_blocked", "p90_rel_diff"]), max_e2e_drift=float(max(drift.values())))


def main() -> None:
    args = _parser().parse_args()
    if args.smoke:
        args.models, args.limit = [_smoke.MODEL], args.limit or 3
    prepare(args.threads)
    from opcost.config import validate

    cfg = _smoke.config() if args.smoke else validate({"models": {m: {} for m in args.models}})
    tools = _baselines(0.02 if args.smoke else 1.0)  # the baselines' time per configuration
    runs = Runs()
    for model in args.models:
        _measure_model(model, args, cfg, tools, runs)
    df, out = _per_tool(runs)
    if args.save:
        df.to_parquet(args.save, index=False)
    _report(df, out, runs, args)


if __name__ == "__main__":
    main()
