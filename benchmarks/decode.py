"""Does a decode step add up, and can it be predicted where it was never measured? One generation step (mode
decode<L>: one new token per sequence over a key/value cache held at L tokens) of the Hugging Face decoders of
benchmarks/configs/decode.yaml, at each of its context lengths and batch sizes.

Measured workloads: each measured as benchmarks/prediction_accuracy.py measures a workload (its `measure_workload`:
extract, dedicated end-to-end steps before and after, every configuration profiled in isolation in rotations that
also time the model, in situ, a trace for the overhead between operators). Per workload, isolated+overhead against
the rotation's reference (`err_rot`, the pipeline's check) and against the dedicated timed generation steps (the
mean of the runs before and after profiling: a loop of steps from context L, the cache put back to L after each,
as the workload's step does; `err_ded`, with `drift`, how far the two runs moved apart).

Never measured: from a database built in memory of the measured workloads (their layers, isolated costs,
end-to-end times and traced overheads) and of the config's sweep points (`decode_attention`: a step's cache update
and attention at other context lengths, profiled in isolation as the workflow profiles sweep points; `--no-sweeps`
leaves them out), `opcost.analysis.estimate.predict_workload` predicts each model at 4x and 16x
the largest measured context (`context`, `context16`), at a batch between two measured ones (`batch`), and at both
(`both`, 4x), as `opcost predict --mode decode --no-trace` does: measured costs where the step's configurations
were measured (the Linears, shared across context lengths), the cost model's estimates for the rest (attention and
the cache update at the new context, every operator at the new batch), the overhead between operators from the
traced decode steps (fitted in the key/value cache bytes: `opcost.analysis.overhead_sources.decode_overhead`), and
what a working set beyond the measured steps' memory level costs (`level_ms`:
`opcost.analysis.overhead_sources.memory_level_shift`).
Each against its time in the database's minutes (`err`): the step timed alternately with a measured step of the
same model (`ref`: at the same context where measured, else the largest, the nearest batch), in `--rounds` rounds,
the median ratio times that step's time in the database (`then_ms`; `spread`: how far the rounds' ratios lie
apart), so that the machine's drift between the measuring and now cancels, as in benchmarks/transformer_unseen.py;
`err_ded`: against the step's dedicated timing now, drift included; `err_now`: with the overhead from a short
trace of the step taken now instead (what `opcost predict` does for a model it never traced); `err_no_sweeps`: from
the database without the sweep points. Prints the tables, the median |error| of each group, and one SUMMARY line.

    python benchmarks/decode.py [--models gpt2 llama] [--contexts 128 512] [--batches 1 4] [--threads 1] [--rounds 5]
    python benchmarks/decode.py --smoke     # one-layer models of two families, one context, the first one's
                                            # never-measured steps: a functional check
"""
from __future__ import annotations

import argparse
from dataclasses import replace
import pickle
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from _common import SMOKE_TIMING, model_entries, prepare, summary, workload_configs
from prediction_accuracy import measure_workload
from transformer_accuracy import glue_columns

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "configs" / "decode.yaml"
SMOKE_MODELS = {  # --smoke: one layer, 32 wide
    "llama": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 128},
    "gpt2": {"n_layer": 1, "n_embd": 32, "n_head": 4, "vocab_size": 128, "n_positions": 512},
}
SMOKE_SWEEPS = [{"op": "decode_attention", "grid": {"context": [32], "heads": [4], "heads_kv": [2], "head_dim": [8],
                                                  "batch": [1]},
                 "depth": 1}]


def configs(models: list[str], config_file: str, smoke: bool) -> tuple[dict, dict]:
    """(the validated config of ``models`` of ``config_file``, the config of its sweep points); ``smoke``: the
    models one layer deep (:data:`SMOKE_MODELS`), :data:`SMOKE_SWEEPS`, and :data:`SMOKE_TIMING`'s caps."""
    from opcost.config import validate

    cfg = model_entries(models, config_file)
    raw = yaml.safe_load(Path(config_file).read_text())
    sweeps = validate({**raw, "sweeps": SMOKE_SWEEPS} if smoke else raw)
    if smoke:
        for name, entry in cfg["models"].items():
            entry["kwargs"] = SMOKE_MODELS.get(name, entry.get("kwargs"))
        for stage, timing in SMOKE_TIMING.items():
            cfg[stage]["timing"] = {**cfg[stage]["timing"], **timing}
    return cfg, sweeps


def between(values: list[int]) -> list[int]:
    """A value between each two neighbouring ``values`` that has room for one (their midpoint, rounded down)."""
    v = sorted(set(values))
    return [(a + b) // 2 for a, b in zip(v, v[1:]) if b - a >= 2]


def database(kept: list[dict], traces: list[dict]) -> dict:
    """The database tables (:data:`opcost.database.DB_TABLES`) of the measured workloads, as the workflow's database
    stage writes them: their layers and configurations, isolated and in-situ costs, end-to-end times, and the
    overhead between operators each one's trace models."""
    from opcost import tables
    from opcost.analysis.predict import overhead_rows
    from opcost.database import catalog

    layers = pd.concat([k["layers"] for k in kept], ignore_index=True)
    e2e = pd.concat([k["e2e"] for k in kept if "e2e" in k], ignore_index=True)  # sweep points: none
    overheads = overhead_rows(pd.concat([t["trace_overheads"] for t in traces], ignore_index=True),
                              pd.concat([t["trace_op_types"] for t in traces], ignore_index=True), layers, e2e)
    return {"configs": catalog(layers), "layers": layers,
            "measurements": pd.concat([k["measurements"] for k in kept], ignore_index=True), "e2e": e2e,
            "overheads": overheads if len(overheads) else tables.frame(tables.OVERHEADS, [])}


def profile_sweeps(cfg: dict, args) -> list[dict]:
    """The config's sweep points (its ``sweeps``: attention over a cache at other context lengths), each profiled in
    isolation as the workflow's profile stage profiles them: their layers and isolated costs, which the cost model
    learns from. Sweep points have no end-to-end time and no trace."""
    from opcost.config import workloads
    from opcost.measure.profile import ProfileSettings, profile_configs

    settings = replace(ProfileSettings.from_config(cfg), cache=args.cache, order=args.order)
    kept = []
    for model, mode, batch in workloads(cfg, "sweeps"):
        _, layers, configs = workload_configs(model, batch, mode, cfg["models"][model])
        iso, _ = profile_configs(configs, cfg["models"], "cpu", "float32", settings, on_e2e=lambda *_: None)
        kept.append({"layers": layers, "measurements": iso})
        print(f"sweep point {model}/{mode}/b{batch}: {len(configs)} configurations profiled", flush=True)
    return kept


def timed_step(model: str, spec: dict, batch: int, mode: str, cfg: dict):
    """(the workload, its layers, seconds per step timed as the dedicated end-to-end run times it)."""
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.measure.e2e import measure_e2e
    from opcost.measure.timing import TimingSettings
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    wl = make_workload(load_model(model, spec), batch, mode)
    layers = extract(wl)
    e2e, _ = measure_e2e(wl, TimingSettings.from_config(cfg["e2e"]["timing"]), "cpu")
    return wl, layers, float(e2e[STATISTICS[DEFAULT_STATISTIC]].iloc[0])


def reference(by: dict, context: int, batch: int) -> tuple[int, int]:
    """(context, batch) of the measured workload a never-measured step is timed alternately with: the step's own
    context where it was measured, else the largest measured; there, the measured batch nearest (the smaller on a
    tie)."""
    at = context if context in by else max(by)
    return at, min(by[at], key=lambda b: (abs(b - batch), b))


def in_run_minutes(wl, ref_wl, ref_s: float, cfg: dict, rounds: int) -> tuple[float, float]:
    """(seconds per step of ``wl`` in the minutes the database measured its reference, the spread of the rounds'
    ratios): ``wl`` and the measured workload ``ref_wl`` timed alternately
    (:func:`_common.interleaved_ratios`), the median ratio times the reference's time in the database
    (``ref_s``, its rotation's). The machine's drift between the measuring and now cancels, as in
    benchmarks/transformer_unseen.py."""
    from _common import interleaved_ratios

    from opcost.measure.timing import TimingSettings

    settings = TimingSettings.from_config(cfg["e2e"]["timing"]).in_turn()
    [ratio], _, _, [ratios] = interleaved_ratios(wl, [ref_wl], rounds, settings)
    return ratio * ref_s, max(ratios) / min(ratios) - 1


def extrapolate(db: dict, cfg: dict, plan: dict, without: dict | None = None, rounds: int = 5) -> pd.DataFrame:
    """Each model of ``plan`` (model -> measured context length -> its measured batch sizes) at 4x its largest
    measured context (at the batches measured there), at each batch between two measured at a context (there), and
    at both: predicted from ``db``, against its time in the database's minutes (`err`: timed alternately with a
    measured step of the same model, :func:`reference`, scaled by that step's time in the database:
    :func:`in_run_minutes`) and against its own dedicated timing now (`err_ded`, the machine's drift included);
    with ``without`` (the database without the sweep points), also that database's prediction (`err_no_sweeps`)."""
    from opcost.analysis.decode import attention_share
    from opcost.analysis.estimate import predict_workload
    from opcost.database import of_workload
    from opcost.model.modes import decode_mode
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    refs = {}  # (model, mode, batch) -> (a measured workload, its time in the database): built once

    def reference_of(model: str, spec: dict, mode: str, batch: int):
        if (model, mode, batch) not in refs:
            ran = predict_workload(db, of_workload(db["layers"], model, batch, mode), None).measured_s
            refs[(model, mode, batch)] = make_workload(load_model(model, spec), batch, mode), ran
        return refs[(model, mode, batch)]

    rows = []
    for model, by in plan.items():
        far = 4 * max(by)
        targets = ([("context", far, b) for b in sorted(by[max(by)])]
                   + [("context16", 16 * max(by), b) for b in sorted(by[max(by)])]
                   + [("batch", c, b) for c, bs in sorted(by.items()) for b in between(bs)]
                   + [("both", far, b) for b in between(by[max(by)])])
        spec = cfg["models"][model]
        for kind, context, batch in targets:
            mode = decode_mode(context)
            ref_context, ref_batch = reference(by, context, batch)
            ref_mode = decode_mode(ref_context)
            try:
                wl, layers, timed = timed_step(model, spec, batch, mode, cfg)
                pred = predict_workload(db, layers, None)  # the cost model fitted in memory, never saved
                # as for a model never traced: the overhead from a short trace of the step taken now
                untraced = {**db, "overheads": db["overheads"][db["overheads"]["model"] != model]}
                now = predict_workload(untraced, layers, None, trace_now=(model, spec))
                bare = predict_workload(without, layers, None) if without is not None else None
                then, spread = in_run_minutes(wl, *reference_of(model, spec, ref_mode, ref_batch), cfg, rounds)
            except Exception as e:  # e.g. a context beyond the model's positions: the other targets stand
                print(f"{model}/{mode}/b{batch}: skipped: {type(e).__name__}: {e}", flush=True)
                continue
            rows.append({"workload": f"{model}/{mode}/b{batch}", "kind": kind, "ref": f"{ref_mode}/b{ref_batch}",
                         "then_ms": then * 1e3, "spread": spread, "timed_ms": timed * 1e3,
                         "predicted_ms": pred.predicted_s * 1e3, "low_ms": pred.low_s * 1e3,
                         "high_ms": pred.high_s * 1e3, "estimated": pred.estimated_share,
                         "attention": attention_share(pred.layers, context), "overhead_ms": pred.overhead_s * 1e3,
                         "level_ms": pred.level_s * 1e3, "err": pred.predicted_s / then - 1,
                         "err_ded": pred.predicted_s / timed - 1,
                         "err_now": now.predicted_s / then - 1, "in_interval": pred.low_s <= then <= pred.high_s,
                         "err_no_sweeps": bare.predicted_s / then - 1 if bare is not None else float("nan")})
            print(pd.DataFrame([rows[-1]]).to_string(index=False, header=len(rows) == 1,
                                                     float_format="{:.3f}".format), flush=True)
    return pd.DataFrame(rows)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=[], help="default: every model of the config")
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--contexts", nargs="+", type=int, help="context lengths measured (default: the config's)")
    ap.add_argument("--batches", nargs="+", type=int, help="batch sizes measured (default: the config's)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-sweeps", action="store_true", help="leave the config's sweep points out of the database "
                                                             "(the cost model learns from the models alone)")
    ap.add_argument("--smoke", action="store_true", help="one-layer llama and gpt2, context 16, batches 1 "
                                                         "and 3, tiny timing settings: a functional check (< 1 min)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds of a never-measured step timed alternately with a measured one")
    ap.add_argument("--dump", metavar="PATH", help="pickle the database the never-measured steps are predicted from "
                                                   "(its tables, with the sweep points) to PATH, to examine")
    return ap


def _plan(cfg: dict) -> dict:
    """model -> {context length: [batch sizes]} of its decode workloads in ``cfg``."""
    from opcost.config import workloads
    from opcost.model.modes import decode_context

    plan = {}
    for model, mode, batch in workloads(cfg, "models"):
        if decode_context(mode) is not None:
            plan.setdefault(model, {}).setdefault(decode_context(mode), []).append(batch)
    return plan


def _measured(plan: dict, cfg: dict, args) -> tuple[list, list, list]:
    """(rows, kept, traces): each measured decode step profiled as the workflow does, its row printed as it ends."""
    rows, kept, traces = [], [], []
    for model, by in plan.items():
        for context, batches in sorted(by.items()):
            for batch in batches:
                args.mode = f"decode{context}"
                keep = {}
                row, trace = measure_workload(model, batch, cfg, args, keep=keep, plain=False)
                kept.append(keep)
                traces.append(trace)
                ded = (row["e2e_before_ms"] + row["e2e_after_ms"]) / 2
                rows.append({"workload": f"{model}/{args.mode}/b{batch}", "e2e_rot_ms": row["e2e_rotation_ms"],
                             "e2e_ded_ms": ded, "drift": abs(row["e2e_after_ms"] / row["e2e_before_ms"] - 1),
                             "overhead_ms": row["overhead_ms"], "err_rot": row["err_isolated_ov"],
                             "err_ded": row["err_isolated_ov_vs_dedicated"], "err_rot_plain": row["err_isolated"],
                             **glue_columns(row, trace)})
                print(pd.DataFrame([rows[-1]]).to_string(index=False, header=len(rows) == 1,
                                                         float_format="{:.3f}".format), flush=True)
    return rows, kept, traces


def _summary(table: pd.DataFrame, extra: pd.DataFrame, wall_s: float) -> None:
    """The medians printed and the SUMMARY line."""
    rot, ded = table["err_rot"].abs(), table["err_ded"].abs()
    groups = {kind: extra.loc[extra["kind"] == kind, "err"].abs()
              for kind in ("context", "context16", "batch", "both")}
    med = lambda s: float(np.median(s)) if len(s) else float("nan")  # noqa: E731
    worst = lambda s: float(s.max()) if len(s) else float("nan")  # noqa: E731
    print("\nmedian |error|: measured vs rotation {:.1%}, vs dedicated {:.1%}; never measured: context 4x {:.1%}, "
          "16x {:.1%}, batch {:.1%}, both {:.1%}, all {:.1%} (overhead traced now: {:.1%}; against the dedicated "
          "steps timed "
          "now: {:.1%})".format(med(rot), med(ded), *(med(g) for g in groups.values()), med(extra["err"].abs()),
                                med(extra["err_now"].abs()), med(extra["err_ded"].abs())))
    summary(workloads=len(table), median_abs_err_rot=med(rot), max_abs_err_rot=float(rot.max()),
            median_abs_err_rot_traced=med(table["err_rot_traced"].abs()),
            median_abs_err_ded=med(ded), max_abs_err_ded=float(ded.max()), median_drift=med(table["drift"]),
            extrapolated=len(extra), median_abs_err_context=med(groups["context"]),
            max_abs_err_context=worst(groups["context"]), median_abs_err_context16=med(groups["context16"]),
            max_abs_err_context16=worst(groups["context16"]),
            median_level_ms=med(extra["level_ms"]),
            median_abs_err_batch=med(groups["batch"]), median_abs_err_both=med(groups["both"]),
            median_abs_err_extrap=med(extra["err"].abs()), max_abs_err_extrap=float(extra["err"].abs().max()),
            median_abs_err_extrap_now=med(extra["err_now"].abs()),
            median_abs_err_extrap_ded=med(extra["err_ded"].abs()),
            median_spread_extrap=med(extra["spread"]),
            median_abs_err_context_no_sweeps=med(extra.loc[extra["kind"] == "context", "err_no_sweeps"].abs()),
            median_abs_err_extrap_no_sweeps=med(extra["err_no_sweeps"].abs()),
            in_interval=int(extra["in_interval"].sum()),
            wall_s=wall_s)


def main() -> None:
    args = _parser().parse_args()
    args.cache, args.order = "fresh", "model"
    t0 = time.perf_counter()
    prepare(args.threads)
    cfg, sweeps = configs(args.models or (list(SMOKE_MODELS) if args.smoke else []), args.config, args.smoke)
    if args.smoke:
        args.contexts, args.batches = args.contexts or [16], args.batches or [1, 3]
    for key, given in (("context_lens", args.contexts), ("batch_sizes", args.batches)):
        if given:  # --contexts, --batches: for every model
            cfg[key] = given
            for entry in cfg["models"].values():
                entry.pop(key, None)
    plan = _plan(cfg)
    rows, kept, traces = _measured(plan, cfg, args)
    swept = []
    if not args.no_sweeps:
        sweeps["profile"]["timing"] = cfg["profile"]["timing"]
        swept = profile_sweeps(sweeps, args)
    table = pd.DataFrame(rows)
    print("\nmeasured context lengths and batches: isolated+overhead against the rotation (err_rot) and the "
          "dedicated steps (err_ded)")
    print(table.to_string(index=False, float_format="{:.3f}".format))
    print("\nnever measured: predicted from the measured workloads, against their time in the database's minutes "
          "(timed beside a measured step: err) and their dedicated timing now (err_ded)", flush=True)
    db = database(kept + swept, traces)
    if args.dump:
        Path(args.dump).write_bytes(pickle.dumps(db))
    # --smoke: the first model's never-measured steps only (each takes a short trace in a process of its own)
    extra = extrapolate(db, cfg, dict(list(plan.items())[:1]) if args.smoke else plan,
                        without=database(kept, traces) if swept else None,
                        rounds=min(args.rounds, 2) if args.smoke else args.rounds)
    print()
    print(extra.to_string(index=False, float_format="{:.3f}".format))
    _summary(table, extra, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
