"""Does a decode step's cache update cost in isolation what it costs in the model? The key/value cache a step reads
was written a whole step before (by the prefill or the step before it): a long context's step moves the weights and
the cache through the last-level cache in between, and evicts it. The rotation (``cache: fresh``) gives each call
of a carried input (`feeds` "carried") its own copy, never rewritten, so that a round moves the step's bytes
between two reads of it; the former handling rewrote it just before each call, as any input no recorded call
produced, which left it in cache.

Per decode workload of benchmarks/configs/decode.yaml: its configurations profiled in isolation both ways
(`carried`; `rewritten`: the same configurations with their carried inputs unmarked), alternately, `--rounds`
times, and in the same minutes the step's operators timed inside the model (torch.profiler self time of the aten
kernels, `in_model`), per step: the cache updates (`cat` of the cached tokens and the step's one) and attention
(SDPA, whose keys and values the update just wrote). Median over rounds; each way's error against the model.

    python benchmarks/carried_inputs.py [--models gpt2 llama] [--contexts 512 2048] [--batches 1 4] [--rounds 3]
    python benchmarks/carried_inputs.py --smoke     # a one-layer Llama, context 16, batch 1: a functional check
"""
from __future__ import annotations

import argparse
from dataclasses import replace
import time

import numpy as np
import pandas as pd
from _common import model_entries, prepare, summary, workload_configs
from _common import SMOKE_TIMING
from decode import CONFIG, SMOKE_MODELS

ATEN = {"cat": "aten::cat", "scaled_dot_product_attention": "aten::_scaled_dot_product_flash_attention_for_cpu"}
STEPS = 50  # profiled steps of the model per round


def rewritten(configs: pd.DataFrame) -> pd.DataFrame:
    """``configs`` with their carried inputs unmarked: profiled as any input no recorded call produced (rewritten
    just before each call, one tensor shared by every call of the configuration)."""
    from opcost.tables import CARRIED

    return configs.assign(feeds=configs["feeds"].str.replace(f'"{CARRIED}"', "null"))


def per_step(configs: pd.DataFrame, layers: pd.DataFrame, cfg: dict, settings) -> pd.Series:
    """Isolated microseconds per step of each op type (Σ count x cost)."""
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.measure.profile import profile_configs

    iso, _ = profile_configs(configs, cfg["models"], "cpu", "float32", settings, on_e2e=lambda *_: None)
    iso = iso[(iso["phase"] == "forward") & (iso["status"] == "ok")].set_index("config_id")
    calls = layers.groupby("config_id")["count"].sum().reindex(iso.index)
    return (iso[STATISTICS[DEFAULT_STATISTIC]] * calls).groupby(iso["op_type"]).sum() * 1e6


def in_model(wl) -> pd.Series:
    """Self microseconds per step of the aten kernels of :data:`ATEN`, inside the model's steps."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(STEPS // 5):
        wl.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            wl.step()
    seen = {e.key: e.self_cpu_time_total / STEPS for e in prof.key_averages()}
    return pd.Series({op: seen.get(kernel, np.nan) for op, kernel in ATEN.items()})


def main() -> None:
    from opcost.config import workloads
    from opcost.measure.profile import ProfileSettings
    from opcost.model.modes import decode_context

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["gpt2", "llama"])
    ap.add_argument("--contexts", nargs="+", type=int, default=[512, 2048])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="a one-layer Llama at context 16, batch 1 (seconds)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    prepare(args.threads)
    if args.smoke:
        args.models, args.contexts, args.batches, args.rounds = ["llama"], [16], [1], 1
    cfg = model_entries(args.models, str(CONFIG))
    if args.smoke:
        cfg["models"]["llama"]["kwargs"] = SMOKE_MODELS["llama"]
        cfg["profile"]["timing"] = {**cfg["profile"]["timing"], **SMOKE_TIMING["profile"]}
    cfg["context_lens"], cfg["batch_sizes"] = args.contexts, args.batches
    for entry in cfg["models"].values():
        entry.pop("context_lens", None)
        entry.pop("batch_sizes", None)
    settings = replace(ProfileSettings.from_config(cfg), cache="fresh", order="model")
    rows = []
    for model, mode, batch in workloads(cfg, "models"):
        if decode_context(mode) is None:
            continue
        wl, layers, configs = workload_configs(model, batch, mode, cfg["models"][model])
        ways = {"carried": configs, "rewritten": rewritten(configs)}
        got = {way: [] for way in (*ways, "in_model")}
        for _ in range(args.rounds):
            for way, table in ways.items():
                got[way].append(per_step(table, layers, cfg, settings))
            got["in_model"].append(in_model(wl))
        med = {way: pd.concat(s, axis=1).median(axis=1) for way, s in got.items()}
        for op in ATEN:
            rows.append({"workload": f"{model}/{mode}/b{batch}", "op": op, "in_model_us": med["in_model"].get(op),
                         **{f"{way}_us": med[way].get(op) for way in ways},
                         **{f"err_{way}": med[way].get(op) / med["in_model"].get(op) - 1 for way in ways}})
        print(pd.DataFrame(rows[-len(ATEN):]).to_string(index=False, header=len(rows) == len(ATEN),
                                                        float_format="{:.3f}".format), flush=True)
    table = pd.DataFrame(rows)
    print()
    print(table.to_string(index=False, float_format="{:.3f}".format))
    upd, att = table[table["op"] == "cat"], table[table["op"] == "scaled_dot_product_attention"]
    med = lambda s: float(np.median(s.abs())) if len(s) else float("nan")  # noqa: E731
    summary(workloads=len(upd), median_abs_err_update_carried=med(upd["err_carried"]),
            median_abs_err_update_rewritten=med(upd["err_rewritten"]),
            max_abs_err_update_carried=float(upd["err_carried"].abs().max()),
            max_abs_err_update_rewritten=float(upd["err_rewritten"].abs().max()),
            median_abs_err_attention_carried=med(att["err_carried"]),
            median_abs_err_attention_rewritten=med(att["err_rewritten"]), wall_s=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
