"""Do transformers add up? The profiled study of benchmarks/prediction_accuracy.py on the transformer models of
benchmarks/configs/transformers.yaml (Hugging Face decoders, an encoder, an encoder-decoder, timm vision
transformers, a model on PyTorch's fused fast path), and where the time the operators miss goes.

Per workload: isolated+overhead against the rotation's reference (`err_rot`) and against the mean of the dedicated
runs before and after profiling (`err_ded`, with their drift `drift`: what the machine's speed did meanwhile).
Then the attribution: from the trace in which each model iteration is paired with its operators replayed in model
order, per top-level aten op type the CPU milliseconds per iteration inside the model minus those of the replay
(positive: the op costs more inside the model than isolated), and the idle time between top-level ops in the model
minus in the replay (the glue the modelled overhead must hold); the repeat probe: per leaf-module class, its call
in the model against the same call repeated at once (`repeat_extra_ms`: what the model's glue leaves its operators
to pay per iteration, cold caches). `glue_ms`: the model's step minus the replay timed
without the profiler (opcost.measure.glue), which the modelled overhead (`overhead_ms`) takes where the trace's own
model (`traced_ms`, its error `err_rot_traced`) misses it beyond its noise. Ends with a SUMMARY line.

    python benchmarks/transformer_accuracy.py [--models gpt2 llama] [--batches 1] [--modes inference training]
                                              [--threads 1] [--top 6] [--config FILE]
    python benchmarks/transformer_accuracy.py --smoke     # one-layer llama and bert: a functional check
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import ROOT, model_entries, prepare, summary
from prediction_accuracy import measure_workload

CONFIG = Path(__file__).resolve().parent / "configs" / "transformers.yaml"
SMOKE_MODELS = {  # --smoke: one layer, 32 wide, 16 tokens
    "llama": {"seq_len": 16, "kwargs": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
                                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}},
    "bert": {"seq_len": 16, "kwargs": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
                                       "num_attention_heads": 4, "vocab_size": 128}},
}
if str(ROOT) not in sys.path:  # `tests.tiny_models:make_fast_encoder` is a module:callable model
    sys.path.insert(0, str(ROOT))


def attribution(traces: dict, top: int) -> tuple[pd.DataFrame, float]:
    """(per top-level op type: model ms, replay ms, model - replay, the `top` largest by size; the idle ms per
    iteration in the model minus in the replay)."""
    model = traces["trace_op_types"].set_index("op_type")["cpu_s"]
    replay = traces["replay_op_types"].set_index("op_type")["cpu_s"]
    both = pd.DataFrame({"model_ms": model * 1e3, "replay_ms": replay * 1e3}).fillna(0.0)
    both["extra_ms"] = both["model_ms"] - both["replay_ms"]
    both = both.reindex(both["extra_ms"].abs().sort_values(ascending=False).index).head(top)
    idle = float(traces["trace_iterations"]["cpu_idle_s"].mean() - traces["replay_iterations"]["cpu_idle_s"].mean())
    return both, idle * 1e3


def glue_columns(row: dict, traces: dict) -> dict:
    """The glue per iteration timed without the profiler (`glue_ms`, the `G` row), the overhead the trace alone
    models without it (`traced_ms`, milliseconds) and the isolated+overhead error against the rotation with that
    overhead instead (`err_rot_traced`), for a :func:`measure_workload` row and its trace tables."""
    from opcost.analysis.overhead import GLUE_KIND
    from opcost.analysis.predict import trace_overhead

    ov, types = traces["trace_overheads"], traces["trace_op_types"]
    g = ov.loc[ov["kind"] == GLUE_KIND, "mean_s"]
    traced = list(trace_overhead(ov[ov["kind"] != GLUE_KIND], types).values())
    traced_ms = traced[0] * 1e3 if traced else float("nan")
    return {"err_rot_traced": row["err_isolated_ov"] + (traced_ms - row["overhead_ms"]) / row["e2e_rotation_ms"],
            "traced_ms": traced_ms, "glue_ms": float(g.iloc[0]) * 1e3 if len(g) else float("nan")}


def repeat_probe(wl, iterations: int = 30) -> pd.DataFrame:
    """Per leaf-module class of the workload's model: its call inside the model's iteration (median µs) against the
    same call repeated at once on the same input (the operator's own cost with its weights and input just touched),
    and the milliseconds per iteration by which the first exceeds the second: what the model's glue and neighbours
    leave the operator to pay (cold caches), which isolated timing in rotation does not see in full."""
    import time

    import torch

    first: dict[str, list] = {}
    again: dict[str, list] = {}
    leaves = [m for m in wl.model.module.modules() if not list(m.children())]
    originals = {}

    def wrap(m):
        fwd = m.forward

        def timed(*a, **kw):
            t0 = time.perf_counter()
            out = fwd(*a, **kw)
            t1 = time.perf_counter()
            fwd(*a, **kw)
            t2 = time.perf_counter()
            name = type(m).__name__
            first.setdefault(name, []).append(t1 - t0)
            again.setdefault(name, []).append(t2 - t1)
            return out
        return timed

    for _ in range(3):
        wl.step()
    for m in leaves:
        originals[m] = m.__dict__.get("forward")
        m.forward = wrap(m)
    try:
        with torch.inference_mode():
            for _ in range(iterations):
                wl.step()
    finally:
        for m, f in originals.items():
            if f is None:
                del m.forward
            else:
                m.forward = f
    rows = [{"module": k, "calls": len(v) // iterations, "in_model_us": float(np.median(v)) * 1e6,
             "repeat_us": float(np.median(again[k])) * 1e6,
             "extra_ms": (float(np.median(v)) - float(np.median(again[k]))) * len(v) / iterations * 1e3}
            for k, v in first.items()]
    return pd.DataFrame(rows).sort_values("extra_ms", ascending=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=[], help="default: every model of the config")
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--batches", nargs="+", type=int, help="default: each model's batch sizes in the config")
    ap.add_argument("--modes", nargs="+", choices=["inference", "training"],
                    help="default: each model's modes in the config")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=6, help="op types shown per workload in the attribution")
    ap.add_argument("--no-probe", dest="probe", action="store_false",
                    help="skip the repeat probe (each leaf module's call in the model against its immediate repeat)")
    ap.add_argument("--smoke", action="store_true", help="one-layer llama and bert, sequence 16, tiny timing "
                                                         "settings: a functional check (< 1 min)")
    args = ap.parse_args()
    args.cache, args.order = "fresh", "model"
    prepare(args.threads)
    cfg = model_entries(args.models or (list(SMOKE_MODELS) if args.smoke else []), args.config)
    if args.smoke:
        from _common import SMOKE_TIMING

        for name, entry in cfg["models"].items():
            entry.update(SMOKE_MODELS.get(name, {}))
        for stage, timing in SMOKE_TIMING.items():
            cfg[stage]["timing"] = {**cfg[stage]["timing"], **timing}
    rows, t0 = [], time.perf_counter()
    from opcost.config import workloads

    runs = []  # the config's workloads, with --modes and --batches in place of their own
    for name, mode, batch in workloads(cfg, "models"):
        for run in ((name, m, b) for m in args.modes or [mode] for b in args.batches or [batch]):
            if run not in runs:
                runs.append(run)
    for name, args.mode, batch in runs:
        row, traces = measure_workload(name, batch, cfg, args)
        ops, idle = attribution(traces, args.top)
        ded = (row["e2e_before_ms"] + row["e2e_after_ms"]) / 2
        label = f"{name}/b{batch}" + ("" if args.mode == "inference" else f"/{args.mode}")
        rows.append({"workload": label, "e2e_rot_ms": row["e2e_rotation_ms"], "e2e_ded_ms": ded,
                     "drift": abs(row["e2e_after_ms"] / row["e2e_before_ms"] - 1),
                     "err_rot": row["err_isolated_ov"], "err_ded": row["err_isolated_ov_vs_dedicated"],
                     "err_vs_plain": row["err_isolated_ov_vs_plain"], "plain_vs_opcost": row["plain_vs_opcost"],
                     "err_rot_plain": row["err_isolated"], "overhead_ms": row["overhead_ms"],
                     **glue_columns(row, traces), "idle_extra_ms": idle})
        print(pd.DataFrame([rows[-1]]).to_string(index=False, float_format="{:.3f}".format))
        print(ops.to_string(float_format="{:.3f}".format), "\n", flush=True)
        if args.probe and args.mode == "inference":
            from opcost.model.sources import load_model
            from opcost.model.workload import make_workload

            probe = repeat_probe(make_workload(load_model(name, cfg["models"][name]), batch, args.mode))
            rows[-1]["repeat_extra_ms"] = float(probe["extra_ms"].sum())
            print(probe.head(args.top).to_string(index=False, float_format="{:.2f}".format), "\n", flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format="{:.3f}".format))
    rot, ded, user = table["err_rot"].abs(), table["err_ded"].abs(), table["err_vs_plain"].abs()
    traced = table["err_rot_traced"].abs()
    summary(workloads=len(table), median_abs_err_rot=float(np.median(rot)), max_abs_err_rot=float(rot.max()),
            median_abs_err_rot_traced=float(np.median(traced)),
            median_abs_err_ded=float(np.median(ded)), max_abs_err_ded=float(ded.max()),
            median_abs_err_vs_plain=float(np.median(user)), max_abs_err_vs_plain=float(user.max()),
            median_drift=float(table["drift"].median()), within_8pct_rot=int((rot <= 0.08).sum()),
            wall_s=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
