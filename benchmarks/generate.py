"""Does `opcost predict --mode generate` predict Hugging Face generate() itself? Decoders of three families (GPT-2,
Llama with grouped-query attention, Qwen2: benchmarks/configs/generate.yaml), prompts and new-token counts the
database never measured.

Measured workloads, as benchmarks/decode.py measures them (`prediction_accuracy.measure_workload`: extract,
dedicated end-to-end runs, every configuration profiled in isolation in rotations, in situ, a trace for the
overhead between operators): each model's decode steps at the config's context lengths and its prefills
(`prefill<P>`: generate()'s first call) at the same lengths, at batch 1, plus the config's sweep points (attention
over a cache at other contexts). From that database, built in memory, `opcost.analysis.generate.predict` predicts
each question (`--questions P:N ...`: a prompt of P tokens, N new tokens; none at a measured prompt length) as
`opcost predict --mode generate --no-trace` does: the prefill, each decode step at its own context (a few
predicted, the rest interpolated), generate()'s own loop measured on a one-layer stand-in, the memory bound.

Each question's reference is generate() itself (greedy, min_new_tokens = max_new_tokens = N, the default cache,
random weights: `opcost.measure.generation.run_generate`), timed alternately with a measured step of the same
model (its decode step at the largest measured context) in `--rounds` rounds: the median ratio times that step's
time in the database (`then_ms`; `spread`: how far the rounds' ratios lie apart), so that the machine's drift
between the measuring and now cancels; the time to the first token is generate() of one token, timed the same
way (`ttft`), the time per output token (total − first) / (N − 1) (`tpot`). `err_ded`: the total against
generate() timed now without the control, drift included. Prints the table, the median |error| of total, TTFT and
TPOT, the interval's coverage, and one SUMMARY line.

    python benchmarks/generate.py [--models gpt2 llama qwen2] [--questions 96:64 300:200 640:32] [--rounds 5]
    python benchmarks/generate.py --smoke     # a one-layer llama, tiny timing settings: a functional check
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import prepare, summary
from decode import configs, database, profile_sweeps
from prediction_accuracy import measure_workload

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "configs" / "generate.yaml"
QUESTIONS = ("96:64", "300:200", "640:32")  # prompt:new; none at a measured prompt, the last beyond the longest
SMOKE_QUESTIONS = ("12:8", "40:16")


def question(text: str) -> tuple[int, int]:
    prompt, new = (int(v) for v in text.split(":"))
    return prompt, new


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["gpt2", "llama", "qwen2"])
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--contexts", nargs="+", type=int, help="decode contexts and prompt lengths measured "
                                                            "(default: the config's context_lens)")
    ap.add_argument("--questions", nargs="+", type=question, help="prompt:new pairs (default: "
                                                                  f"{' '.join(QUESTIONS)})")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a one-layer llama measured at context 16, two questions, "
                                                         "tiny timing settings: a functional check")
    return ap


def _questions(db: dict, cfg: dict, models: list, contexts: list, questions: list, args) -> pd.DataFrame:
    """One row per model and question: generate() predicted from ``db`` against generate() timed in turn with the
    model's measured step at the longest context (in the database's minutes); a question that fails is skipped."""
    from opcost.analysis import generate
    from opcost.analysis.estimate import predict_workload
    from opcost.database import of_workload
    from opcost.measure.generation import time_generate
    from opcost.measure.timing import TimingSettings
    from opcost.model.modes import decode_mode
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    settings = TimingSettings.from_config(cfg["e2e"]["timing"]).in_turn()
    rows = []
    for model in models:
        spec = cfg["models"][model]
        control_mode = decode_mode(max(contexts))
        control = make_workload(load_model(model, spec), 1, control_mode)
        control_s = predict_workload(db, of_workload(db["layers"], model, 1, control_mode), None).measured_s
        hf = control.model.module.model  # the same weights: generate() calls the model, not the step's wrapper
        for prompt, new in questions:
            try:
                g = generate.predict(db, generate.Question(model, 1, prompt, new), spec, None, trace_now=False)
                timed = time_generate(hf, control, prompt, new, args.rounds, settings).in_minutes_of(control_s)
            except Exception as e:  # one question failing leaves the others standing
                print(f"{model} {prompt}:{new}: skipped: {type(e).__name__}: {e}", flush=True)
                continue
            tpot = (timed["total_s"] - timed["first_s"]) / (new - 1) if new > 1 else float("nan")
            rows.append({"model": model, "prompt": prompt, "new": new, "then_ms": timed["total_s"] * 1e3,
                         "predicted_ms": g["total_s"] * 1e3, "low_ms": g["total_low_s"] * 1e3,
                         "high_ms": g["total_high_s"] * 1e3, "err": g["total_s"] / timed["total_s"] - 1,
                         "ttft_ms": g["ttft_s"] * 1e3, "then_ttft_ms": timed["first_s"] * 1e3,
                         "err_ttft": g["ttft_s"] / timed["first_s"] - 1,
                         "err_tpot": (g["tpot_s"] / tpot - 1) if g["tpot_s"] else float("nan"),
                         "err_ded": g["total_s"] / timed["now_s"] - 1, "spread": timed["spread"],
                         "estimated": g["estimated_share"], "loop_ms": g["loop_s"] * 1e3,
                         "bound_fraction": g["bound_fraction"],
                         "in_interval": g["total_low_s"] <= timed["total_s"] <= g["total_high_s"]})
            print(pd.DataFrame([rows[-1]]).to_string(index=False, header=len(rows) == 1,
                                                     float_format="{:.3f}".format), flush=True)
    return pd.DataFrame(rows)


def main() -> None:
    from opcost.model.modes import decode_mode, prefill_mode

    args = _parser().parse_args()
    args.cache, args.order = "fresh", "model"
    t0 = time.perf_counter()
    prepare(args.threads)
    models = ["llama"] if args.smoke else args.models
    cfg, sweeps = configs(models, args.config, args.smoke)
    contexts = args.contexts or ([16] if args.smoke else list(cfg["context_lens"]))
    questions = args.questions or [question(q) for q in (SMOKE_QUESTIONS if args.smoke else QUESTIONS)]
    kept, traces = [], []
    for model in models:
        for context in contexts:
            for mode in (decode_mode(context), prefill_mode(context)):
                args.mode = mode
                keep = {}
                row, trace = measure_workload(model, 1, cfg, args, keep=keep, plain=False)
                kept.append(keep)
                traces.append(trace)
                print(f"measured {model}/{mode}/b1: isolated+overhead {row['err_isolated_ov']:+.3f} against the "
                      "rotation", flush=True)
    sweeps["profile"]["timing"] = cfg["profile"]["timing"]
    db = database(kept + profile_sweeps(sweeps, args), traces)
    table = _questions(db, cfg, models, contexts, questions, args)
    print()
    print(table.to_string(index=False, float_format="{:.3f}".format))
    med = lambda s: float(np.median(np.abs(s.dropna()))) if s.notna().any() else float("nan")  # noqa: E731
    print(f"\ngenerate(): median |error| total {med(table['err']):.1%} (max {table['err'].abs().max():.1%}), "
          f"time to first token {med(table['err_ttft']):.1%}, per output token {med(table['err_tpot']):.1%}; "
          f"{int(table['in_interval'].sum())} of {len(table)} in their interval; against generate() timed now "
          f"without the control {med(table['err_ded']):.1%}")
    summary(questions=len(table), median_abs_err=med(table["err"]), max_abs_err=float(table["err"].abs().max()),
            median_abs_err_ttft=med(table["err_ttft"]), max_abs_err_ttft=float(table["err_ttft"].abs().max()),
            median_abs_err_tpot=med(table["err_tpot"]), max_abs_err_tpot=float(table["err_tpot"].abs().max()),
            median_abs_err_ded=med(table["err_ded"]), median_spread=med(table["spread"]),
            in_interval=int(table["in_interval"].sum()), wall_s=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
