"""Models nobody chose: N models drawn at random from timm's registry and transformers' model types, never profiled,
predicted from a database, each timed in turn with profiled models so that the machine's drift cancels.

The protocol cannot be tuned to: the seed is printed and changes every run (``--seed`` repeats a draw). Half the draws
are timm models (``pretrained=False``, timm's own input size), half transformers model types built from their
config at a small size (:data:`SMALL`: 2 layers, hidden 256, 4 heads, FFN 1,024, vocabulary 8,192; sequence
``--seq-len``). A drawn model is kept only by what fits the machine: its parameters (at most ``--max-params``, on the
meta device, before anything is allocated) and its iteration time (at most ``--max-ms``, one timed iteration).
A model opcost cannot build, extract or predict is a failure, counted and named, not skipped. The architectures of
the config's `predict_only` models are never drawn: the interval of a model never profiled rests on their errors
(:mod:`opcost.analysis.calibration`).

For each model kept: its prediction as ``opcost predict`` makes it (:func:`opcost.analysis.estimate.predict_workload`
with the overhead between operators from a short trace of its own, unless ``--no-trace``), then its end-to-end time
taken now in turn with the references (``--ref``, profiled workloads of the database with an end-to-end time; the
order rotated every round, ``--rounds`` rounds), in a process set up as the measuring jobs were. Each reference turns
the model's time now into its time in the database's minutes (``T_now x ref_db / T_ref_now``); the error is the
prediction over the median of those, - 1 (and, beside it, against each reference alone). Also per model: the
host's parallel speedup while it was timed (:func:`opcost.measure.hostinfo.parallel_speedup`, before and after its
rounds: where it changed since the database's minutes, references of unlike parallel efficiency disagree), whether
the 90% interval holds that time, the interval's width (high / low - 1), the share of the operators' time estimated
and by which method, and the op type whose estimate widens the interval most.

Targets (issue 56), on N >= 30: median |error| <= 10%, 80% within ±15%, the interval holding the time in >= 85%.

``--keep DIR`` also writes what each model's figures rest on (its extracted layers, the overhead its short trace
gave, its times over each reference's): ``--replay DIR`` predicts the same models again from another database (or
with another cost model) and scores them against the times kept, each turned into that database's minutes by its
own references, without timing anything: a change of the estimates judged on one draw and two databases. The kept
times are this host's: replay them against databases measured on the same host.

    python benchmarks/unseen_random.py [--db results/db] [--n 30] [--seed S] [--batch 1] [--max-params 3e7]
        [--max-ms 300] [--ref resnet18 tiny_bert] [--ref-batch 1] [--rounds 4] [--seconds 0.5] [--no-trace]
        [--keep DIR] [--method M] [--models timm:NAME hf:TYPE ...]
    python benchmarks/unseen_random.py --replay DIR [--db results/db] [--method M]   # the kept draw, predicted again
    python benchmarks/unseen_random.py --smoke --db <a tiny run's results/db>   # two tiny models, seconds
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import ROOT, interleaved_ratios, prepare, summary

MODE = "inference"
SMOKE_CONFIG = ROOT / "tests" / "data" / "tiny.yaml"  # the tiny run's config: its profiled models, the reference
# the smoke check's two draws: timm's smallest test model and a one-layer GPT-2
SMOKE_POOL = [("timm_test_vit", {"model": "timm:test_vit"}),
              ("hf_gpt2", {"model": "hf:gpt2", "kwargs": {"n_layer": 1, "n_embd": 32, "n_head": 2,
                                                          "vocab_size": 64}})]
SMALL = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024,
         "vocab_size": 8192}  # transformers' generic names; configs with other names map them (attribute_map)
# transformers model types that are no single-input model (multimodal, speech, retrieval, composite configs)
HF_SKIP = ("encoder-decoder", "vision-encoder-decoder", "speech-encoder-decoder", "vision-text-dual-encoder", "rag",
           "clip", "blip", "llava", "idefics", "whisper", "wav2vec", "hubert", "sew", "unispeech", "speecht5",
           "musicgen", "bark", "encodec", "seamless", "mimi", "timm", "auto")


def candidates(exclude=frozenset()) -> list[tuple[str, dict]]:
    """Every model the draw may pick: (name, config entry), timm's registry and transformers' model types, less
    the architectures named in ``exclude`` (:func:`calibration_archs`)."""
    import timm
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    pool = [(f"timm_{n}", {"model": f"timm:{n}"}) for n in timm.list_models() if n not in exclude]
    pool += [(f"hf_{t}", {"model": f"hf:{t}", "kwargs": dict(SMALL)}) for t in CONFIG_MAPPING_NAMES
             if not any(s in t for s in HF_SKIP) and t not in exclude]
    return pool


def named(models: list[str]) -> list[tuple[str, dict]]:
    """The pool of ``--models`` (``timm:NAME`` or ``hf:TYPE``, as a draw would build them): a check of chosen
    families, not the protocol's figure."""
    out = []
    for m in models:
        source, _, name = m.partition(":")
        if source not in ("timm", "hf") or not name:
            raise SystemExit(f"--models {m}: timm:NAME or hf:TYPE")
        out.append((f"{source}_{name}", {"model": m, **({"kwargs": dict(SMALL)} if source == "hf" else {})}))
    return out


def calibration_archs(config_path) -> set[str]:
    """The architectures of a config's `predict_only` models (timm names, transformers model types, torchvision
    names): the database's interval of a model never profiled rests on their errors, so none is drawn."""
    from opcost.config import load

    entries = load(config_path).get("predict_only") or {}
    return {str(e.get("model") or name).split(":", 1)[-1] for name, e in entries.items()}


def draw(pool: list, n: int, seed: int) -> list[tuple[str, dict]]:
    """``n`` candidates in a random order of ``seed``, half from timm and half from transformers where both have
    enough; more are drawn as kept models fall short (the caller walks the list)."""
    rng = random.Random(seed)
    timm_, hf = [c for c in pool if c[0].startswith("timm_")], [c for c in pool if c[0].startswith("hf_")]
    rng.shuffle(timm_)
    rng.shuffle(hf)
    out = []
    for a, b in zip(timm_, hf):
        out += [a, b]
    return out + timm_[len(hf):] + hf[len(timm_):]


def entry(name: str, raw: dict, seq_len: int, validate) -> tuple[dict, int]:
    """(the validated config entry, its parameter count) of a drawn model: a transformers type gets ``seq_len`` and
    those of :data:`SMALL`'s settings its config has (a vision config has no vocabulary)."""
    import re

    hf = raw["model"].startswith("hf:")
    kwargs = dict(raw.get("kwargs") or {})
    while True:
        try:
            spec = validate({"models": {name: {**raw, "kwargs": kwargs, "seq_len": seq_len} if hf else raw}})
            spec = spec["models"][name]
            return spec, parameters(name, spec)
        except Exception as e:  # noqa: BLE001
            unknown = re.search(r"has no setting '(\w+)'", str(e))
            if not hf or unknown is None or unknown.group(1) not in kwargs:
                raise
            kwargs.pop(unknown.group(1))


def parameters(name: str, spec: dict) -> int:
    """The model's parameter count, built on the meta device (nothing allocated)."""
    import torch

    from opcost.model.sources import hf_models, timm_models

    target = spec["model"]
    source = timm_models if target.startswith(timm_models.PREFIX) else hf_models
    with torch.device("meta"):
        module, _ = source.build(target.removeprefix(source.PREFIX), spec)
    return sum(p.numel() for p in module.parameters())


def row_of(name: str, n_params: int, p, ratio: list, tx: float, refs: dict, speedup: float = float("nan")) -> dict:
    """One model's figures: its prediction ``p`` against its time over each reference (``ratio``, in the order of
    ``refs``: reference -> its end-to-end time in the database) turned into the database's minutes; the error against
    each reference alone (``err_<reference>``) and the host's parallel speedup while it was timed (``speedup``)."""
    from opcost.measure.control import in_minutes_of

    by_ref = list(in_minutes_of(ratio, list(refs.values())))
    scaled = float(np.median(by_ref))
    methods = p.methods()
    ops = sum(methods.values()) or 1.0
    return {**{f"err_{r}": p.predicted_s / t - 1 for r, t in zip(refs, by_ref)}, "speedup": speedup,
            "model": name, "params_m": n_params / 1e6, "predicted_ms": p.predicted_s * 1e3,
            "low_ms": p.low_s * 1e3, "high_ms": p.high_s * 1e3, "timed_ms": scaled * 1e3, "now_ms": tx * 1e3,
            "error": p.predicted_s / scaled - 1, "ref_spread": max(by_ref) / min(by_ref) - 1,
            "in_interval": bool(p.low_s <= scaled <= p.high_s), "width": p.high_s / max(p.low_s, 1e-12) - 1,
            "estimated_share": p.estimated_share, "widest": p.widest or "",
            "by_method": ", ".join(f"{k} {v / ops:.0%}" for k, v in sorted(methods.items(), key=lambda kv: -kv[1])),
            "overhead_from": p.overhead_from}


def show(row: dict, batch: int) -> None:
    print(f"{row['model']} b{batch} ({row['params_m']:.1f}M params): predicted {row['predicted_ms']:.3f} ms "
          f"[{row['low_ms']:.3f}, {row['high_ms']:.3f}], timed {row['timed_ms']:.3f} ms: {row['error']:+.1%} "
          f"({'in' if row['in_interval'] else 'OUTSIDE'} the interval; references within {row['ref_spread']:.1%}, "
          f"parallel speedup {row['speedup']:.2f}"
          f"); {row['by_method']}; widest {row['widest'] or '-'}", flush=True)


def reference_times(db, names, batch: int, specs: dict, db_dir) -> dict:
    """Reference -> its end-to-end time in the database at ``batch`` (``specs``: config entries by name), refused
    where the database holds none."""
    from opcost.analysis import estimate
    from opcost.errors import OpcostError

    refs = {}
    for r in names:
        p = estimate.predict_workload(db, estimate.workload_layers(db, r, batch, MODE, specs.get(r, {})), db_dir)
        if not p.measured_s:
            raise OpcostError(f"--ref {r}", f"the database holds no end-to-end time of it at batch {batch}")
        refs[r] = p.measured_s
    return refs


def replay(args, db) -> tuple[list, list]:
    """(rows, failed) of the draw kept in ``args.replay`` predicted from ``db`` (module docstring)."""
    from opcost.analysis import estimate, overhead_sources

    kept = json.loads((Path(args.replay) / "kept.json").read_text())
    args.batch = kept["batch"]
    refs = reference_times(db, kept["refs"], kept["ref_batch"], kept["ref_specs"], args.db)
    rows, failed = [], []
    for m in kept["models"]:
        layers = pd.read_parquet(Path(args.replay) / f"{m['model']}.parquet")
        now = m["overhead_now_s"]
        estimate.overhead_now = lambda *a, _now=now, **k: _now  # the overhead its own trace gave, kept
        try:
            p = estimate.predict_workload(db, layers, args.db, method=args.method,
                                          trace_now=(m["model"], {}) if now is not None else None)
        except Exception as e:  # noqa: BLE001
            failed.append(m["model"])
            print(f"{m['model']}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        rows.append(row_of(m["model"], m["params"], p, m["ratio"], m["now_s"], refs,
                           m.get("speedup", float("nan"))))
        show(rows[-1], args.batch)
    estimate.overhead_now = overhead_sources.overhead_now
    return rows, failed


def run(args, db, seed: int) -> tuple[list, list, list]:
    """(rows, failed, too large) of a fresh draw of ``seed``: each model kept predicted and timed (module
    docstring); with ``args.keep``, what the figures rest on kept for :func:`replay`."""
    from opcost.analysis import estimate
    from opcost.config import load, validate
    from opcost.errors import OpcostError
    from opcost.measure.hostinfo import parallel_speedup, pin_threads
    from opcost.measure.timing import TimingSettings, measure
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    traced = {}
    trace = estimate.overhead_now

    def recording(*a, **k):  # the overhead a model's short trace gave, kept for --replay
        traced["s"] = trace(*a, **k)
        return traced["s"]

    estimate.overhead_now = recording
    keep = Path(args.keep) if args.keep else None
    kept = []
    if args.smoke:
        args.n, args.rounds, args.seconds, args.seq_len = 2, 2, 0.05, 8
        args.config = args.config or str(SMOKE_CONFIG)
    print(f"seed {seed} (python benchmarks/unseen_random.py --seed {seed} repeats this draw)", flush=True)
    specs = load(args.config)["models"] if args.config else {}
    if args.ref is None and args.smoke:  # the tiny run's first profiled model with an end-to-end time
        e2e = db["e2e"][(db["e2e"]["mode"] == MODE) & db["e2e"]["model"].isin(list(specs))]
        args.ref, args.ref_batch = [str(e2e["model"].iloc[0])], int(e2e["batch"].iloc[0])
    refs = reference_times(db, args.ref or ["resnet18", "tiny_bert"], args.ref_batch, specs, args.db)
    threads = int(estimate.conditions(db["measurements"])[1].get("threads") or 1)
    prepare(threads)
    pin_threads(threads)
    settings = TimingSettings(target_rel_ci=0.01, max_seconds=args.seconds, warmup_s=min(0.3, args.seconds / 3),
                              min_samples=5, min_sample_s=0.001)
    ref_wls = [make_workload(load_model(r, specs.get(r, {})), args.ref_batch, MODE) for r in refs]
    rows, failed, too_big = [], [], []
    calibrated = calibration_archs(args.config or ROOT / "config" / "config.yaml")
    pool = SMOKE_POOL if args.smoke else named(args.models) if args.models else draw(candidates(calibrated), args.n,
                                                                                       seed)
    for name, raw in pool:
        if len(rows) >= args.n:
            break
        try:
            spec, n_params = entry(name, raw, args.seq_len, validate)
        except Exception as e:  # noqa: BLE001  a config this draw made that the source refuses: not the model's
            print(f"{name}: not drawn ({type(e).__name__}: {str(e)[:120]})", flush=True)
            continue
        if n_params > args.max_params:
            too_big.append(name)
            continue
        try:
            wl = make_workload(load_model(name, spec), args.batch, MODE)
            once = measure(wl.step, TimingSettings(max_seconds=0.05, warmup_s=0.0, min_samples=1), "cpu").median
            if once * 1e3 > args.max_ms:
                too_big.append(name)
                continue
            layers = estimate.workload_layers(db, name, args.batch, MODE, spec)
            p = estimate.predict_workload(db, layers, args.db, method=args.method,
                                          trace_now=None if args.no_trace else (name, spec))
            speedup = parallel_speedup(threads)
            ratio, tx, tr, ratios = interleaved_ratios(wl, ref_wls, args.rounds, settings)
            speedup = (speedup + parallel_speedup(threads)) / 2
        except (OpcostError, RuntimeError, ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
            failed.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        now = traced.pop("s", None)  # None: no short trace was taken for it
        rows.append(row_of(name, n_params, p, ratio, tx, refs, speedup))
        show(rows[-1], args.batch)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            layers.to_parquet(keep / f"{name}.parquet")
            kept.append({"model": name, "params": n_params, "ratio": ratio, "now_s": tx, "overhead_now_s": now,
                         "speedup": speedup})
            (keep / "kept.json").write_text(json.dumps(
                {"seed": seed, "batch": args.batch, "refs": list(refs), "ref_batch": args.ref_batch,
                 "ref_specs": {r: specs.get(r, {}) for r in refs}, "models": kept}, indent=1))
    estimate.overhead_now = trace
    return rows, failed, too_big


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="results/db")
    ap.add_argument("--n", type=int, default=30, help="models to predict and time")
    ap.add_argument("--seed", type=int, help="default: from the clock, printed")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--max-params", type=float, default=3e7)
    ap.add_argument("--max-ms", type=float, default=300.0, help="longest iteration kept, milliseconds")
    ap.add_argument("--ref", nargs="+", help="profiled models timed in turn with each one (default resnet18 "
                                             "tiny_bert; --smoke: the tiny run's first with an end-to-end time)")
    ap.add_argument("--ref-batch", type=int, default=1)
    ap.add_argument("--config", help="a config whose model entries the references are (default: plain names)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=0.5, help="timing cap of each measurement")
    ap.add_argument("--no-trace", action="store_true", help="overhead from the database instead of a short trace")
    ap.add_argument("--keep", help="a directory to keep the draw in, for --replay")
    ap.add_argument("--replay", help="a kept draw's directory: predicted again from --db, nothing timed")
    ap.add_argument("--method", help="the cost model's estimate for every configuration with a law (law, law+trees, "
                                     "law+trees+context; default: the one its cross-validation chose)")
    ap.add_argument("--models", nargs="+", help="named models (timm:NAME, hf:TYPE) instead of a draw: a check of "
                                                "chosen families, not the protocol's figure")
    ap.add_argument("--smoke", action="store_true", help="two tiny models (not drawn), short timings: a functional "
                                                         "check")
    args = ap.parse_args()

    from opcost import database

    t0 = time.perf_counter()
    db = database.read_db(args.db)
    if args.replay:
        import _common

        if _common.RECORD:  # a replay times nothing: its figures are no measurement of their own to show
            print("record: not written for a --replay run", file=sys.stderr)
            _common.RECORD = False
        seed = json.loads((Path(args.replay) / "kept.json").read_text())["seed"]
        print(f"the draw of seed {seed} kept in {args.replay}, predicted from {args.db}", flush=True)
        rows, failed = replay(args, db)
        too_big = []
    else:
        seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
        rows, failed, too_big = run(args, db, seed)
    table = pd.DataFrame(rows)
    if len(table):
        pd.set_option("display.width", 250)
        print("\n" + table.drop(columns=["by_method"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if failed:
        print(f"\nfailed ({len(failed)}): {', '.join(failed)}")
    print(f"left out as too large for this machine ({len(too_big)}): {', '.join(too_big[:20])}"
          f"{' ...' if len(too_big) > 20 else ''}")
    e = table["error"].abs() if len(table) else pd.Series(dtype=float)
    nan = float("nan")
    kind = table["model"].str.split("_").str[0] if len(table) else pd.Series(dtype=str)
    summary(seed=seed, models=len(table), failed=len(failed), too_big=len(too_big),
            median_abs_err=float(e.median()) if len(e) else nan, max_abs_err=float(e.max()) if len(e) else nan,
            within_15pct=float((e <= 0.15).mean()) if len(e) else nan,
            within_10pct=float((e <= 0.10).mean()) if len(e) else nan,
            median_abs_err_timm=float(e[kind == "timm"].median()) if (kind == "timm").any() else nan,
            median_abs_err_hf=float(e[kind == "hf"].median()) if (kind == "hf").any() else nan,
            in_interval=float(table["in_interval"].mean()) if len(table) else nan,
            median_width=float(table["width"].median()) if len(table) else nan,
            median_ref_spread=float(table["ref_spread"].median()) if len(table) else nan,
            **{f"median_abs_err_vs_{c.removeprefix('err_')}": float(table[c].abs().median())
               for c in table.columns if c.startswith("err_")},
            speedup_min=float(table["speedup"].min()) if len(table) else nan,
            speedup_max=float(table["speedup"].max()) if len(table) else nan,
            estimated_share=float(table["estimated_share"].median()) if len(table) else nan,
            wall_s=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
