"""What ``generate()`` of N new tokens per sequence from a prompt of P tokens takes, as a serving planner asks it:
time to the first token (TTFT), time per output token (TPOT), the total and tokens per second, with intervals,
beside the bound memory bandwidth sets.

``generate()`` (greedy, the default cache) is one prefill and N − 1 decode steps, and a loop of its own around them
(:mod:`opcost.measure.generation`):

* **time to first token** = the prefill ``prefill<P>``'s prediction (:func:`opcost.analysis.estimate.predict_workload`:
  measured costs where the database holds its configurations, the cost model's estimates for the rest, the
  overhead between operators) + the loop's setup;
* **decode** = Σ over the contexts L = P … P + N − 2 of the step ``decode<L>``'s prediction + the loop's per-step
  overhead, each step at its own context (a step reads a cache that grows by one token per step: N steps are not
  N × one step). The step is predicted at a few contexts (:func:`step_contexts`: both ends, the contexts the
  database measured between them, and evenly spaced ones, :data:`POINTS` in all) and interpolated linearly between
  them, as its cost is linear in L between neighbouring points (attention and the cache's copy read L tokens; the
  Linears do not depend on L);
* **TPOT** = decode / (N − 1); **total** = TTFT + decode; **tokens/s** = batch × N / total.

Intervals: each part's ends add up (one database's costs and laws err the same way at neighbouring contexts); the
loop's from the 10–90% range of its rounds.

**The memory bound** of each step: the bytes it must read, every weight once and the key/value cache
(:func:`opcost.analysis.decode.weight_bytes`, :func:`~opcost.analysis.decode.cache_bytes`), over the host's read
bandwidth at that working-set size (:func:`opcost.measure.bandwidth.curve`); ``bound_fraction`` is the bound's
time over the predicted steps' operator time (1: as fast as memory allows).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opcost.errors import OpcostError
from opcost.model.modes import decode_context, decode_mode, prefill_mode

POINTS = 5  # decode contexts predicted per generate() (both ends included); the rest interpolated


@dataclass(frozen=True)
class Question:
    """``generate()`` of ``new`` tokens per sequence from prompts of ``prompt`` tokens, ``batch`` sequences."""

    model: str
    batch: int
    prompt: int
    new: int

    def __post_init__(self):
        for name in ("batch", "prompt", "new"):
            if int(getattr(self, name)) < 1:
                raise OpcostError(f"--{name} {getattr(self, name)}", "must be a positive integer")

    @property
    def contexts(self) -> np.ndarray:
        """The context of each decode step: P … P + N − 2 (none for one new token)."""
        return np.arange(self.prompt, self.prompt + self.new - 1)


def step_contexts(q: Question, measured=(), points: int = POINTS) -> list[int]:
    """The contexts at which :func:`predict` predicts a decode step: the first and last step's, the ``measured``
    contexts between them, and evenly spaced ones up to ``points`` in all (every step's when fewer)."""
    steps = q.contexts
    if len(steps) == 0:
        return []
    if len(steps) <= points:
        return [int(c) for c in steps]
    chosen = {int(steps[0]), int(steps[-1])} | {int(c) for c in measured if steps[0] <= int(c) <= steps[-1]}
    chosen |= {int(round(c)) for c in np.linspace(steps[0], steps[-1], points)}
    return sorted(chosen)


def stand_in(model: str, spec: dict | None, dtype: str = "float32"):
    """The one-layer stand-in (:func:`opcost.measure.generation.stand_in`) of the config model ``model`` (entry
    ``spec``), built from its class and config alone, on the CPU; a one-line error for a model generate() cannot
    run (no transformers model, no language-model head)."""
    from opcost.measure.generation import stand_in as one_layer
    from opcost.model.opspec import dtype_from_name
    from opcost.model.sources import hf_models

    target = str((spec or {}).get("model") or model)
    if not target.startswith(hf_models.PREFIX):
        raise OpcostError(f"model {model}", "generate() is Hugging Face's: give a transformers causal language model "
                                            "(hf:GPT2LMHeadModel, hf:LlamaForCausalLM...)")
    arch = target.removeprefix(hf_models.PREFIX)
    why = hf_models.generate_problem(arch, spec or {})
    if why is not None:
        raise OpcostError(f"model {model}", why)
    cls, config = hf_models.configured(arch, spec or {})
    return one_layer(cls, config, "cpu", dtype_from_name(dtype))


def predict(db: dict, q: Question, spec: dict | None = None, db_dir=None, statistic: str | None = None,
            trace_now: bool = True, loop=None, bandwidth: dict | None = None, dtype: str | None = None,
            **chosen) -> dict:
    """The prediction of ``generate()`` (:class:`Question`) from the database ``db`` on the conditions ``chosen``
    (``host``, ``device``, ``threads``), as a JSON-ready dict (the module's doc says what each part is).
    ``loop``: a :class:`opcost.measure.generation.LoopOverhead` (default: measured now with the model's stand-in);
    ``bandwidth``: a read-bandwidth curve (default: this host's, :func:`opcost.analysis.decode.bandwidth_curve`;
    none, and no bound, for a database of another host). ``dtype``: a user's config's (the prefill the database
    holds is checked against the entry built in it: :func:`opcost.analysis.estimate.workload_layers`)."""
    from opcost.analysis import decode, estimate
    from opcost.measure.generation import loop_overhead

    small = stand_in(q.model, spec, dtype or "float32") if loop is None else None  # refused before predicting

    def one(mode):
        checked = dtype if mode == prefill_mode(q.prompt) else None  # one check: the steps are the same model's
        layers = estimate.workload_layers(db, q.model, q.batch, mode, spec, checked)
        return layers, estimate.predict_workload(db, layers, db_dir, statistic,
                                                 trace_now=(q.model, spec or {}) if trace_now else None, **chosen)

    _, prefill = one(prefill_mode(q.prompt))
    held = db["layers"][(db["layers"]["model"] == q.model) & (db["layers"]["batch"] == q.batch)]["mode"]
    measured = sorted(c for c in map(decode_context, set(held)) if c is not None)
    steps = []
    for context in step_contexts(q, measured):
        layers, p = one(decode_mode(context))
        steps.append({"context": context, "step_s": p.predicted_s, "low_s": p.low_s, "high_s": p.high_s,
                      "estimated_share": p.estimated_share, "measured_s": p.measured_s,
                      "operators_s": p.predicted_s - p.overhead_s, "overhead_s": p.overhead_s,
                      "weight_bytes": decode.weight_bytes(layers),
                      "kv_cache_bytes": decode.cache_bytes(layers, context), "widest": p.widest})
    cond = prefill.conditions
    if loop is None:
        loop = loop_overhead(small, q.batch, q.prompt, q.new, threads=cond.get("threads"))
    curve = bandwidth or decode.bandwidth_curve(cond)
    return assemble(q, prefill, steps, loop, curve)


def assemble(q: Question, prefill, steps: list[dict], loop, curve: dict) -> dict:
    """:func:`predict`'s answer from its parts: the prefill's :class:`~opcost.analysis.estimate.Prediction`, the
    decode steps predicted (``steps``, one dict per context), generate()'s loop and the bandwidth curve (None: no
    bound)."""
    from opcost.measure import bandwidth as bw

    every = q.contexts
    if steps:
        at = np.array([s["context"] for s in steps], dtype=float)
        series = {k: np.interp(every, at, [s[k] for s in steps]) for k in ("step_s", "low_s", "high_s")}
        weights = steps[0]["weight_bytes"]
        per_token = np.interp(every, at, [s["kv_cache_bytes"] / s["context"] for s in steps])
        reads = weights + per_token * every
        rate = (lambda b: bw.at(curve, b)) if curve else (lambda b: np.nan)  # noqa: E731
        bound = reads / np.array([rate(r) for r in reads])
        ops = np.interp(every, at, [s["operators_s"] for s in steps])
        shares = np.interp(every, at, [s["estimated_share"] for s in steps])
        for s in steps:  # None without a bandwidth curve (a database of another host)
            nbytes = s["weight_bytes"] + s["kv_cache_bytes"]
            s["bound_s"] = float(nbytes / rate(nbytes)) if curve else None
    else:
        series = {k: np.zeros(0) for k in ("step_s", "low_s", "high_s")}
        bound = ops = shares = np.zeros(0)
    n_steps = len(every)
    ttft = prefill.predicted_s + loop.setup_s
    decode_s = float(series["step_s"].sum()) + loop.per_step_s * n_steps
    decode_low = float(series["low_s"].sum()) + loop.per_step_low_s * n_steps
    decode_high = float(series["high_s"].sum()) + loop.per_step_high_s * n_steps
    total = ttft + decode_s
    low = prefill.low_s + loop.setup_low_s + decode_low
    high = prefill.high_s + loop.setup_high_s + decode_high
    ops_total = float(ops.sum())
    prefill_ops = prefill.predicted_s - prefill.overhead_s
    estimated = prefill.estimated_share * prefill_ops + float((shares * ops).sum())
    rate = lambda s: q.batch * q.new / s if s > 0 else float("inf")  # noqa: E731
    return {"model": q.model, "batch": q.batch, "prompt": q.prompt, "new": q.new, "mode": "generate",
            **prefill.conditions,
            "total_s": total, "total_low_s": low, "total_high_s": high,
            "ttft_s": ttft, "ttft_low_s": prefill.low_s + loop.setup_low_s,
            "ttft_high_s": prefill.high_s + loop.setup_high_s,
            "tpot_s": decode_s / n_steps if n_steps else None,
            "tpot_low_s": decode_low / n_steps if n_steps else None,
            "tpot_high_s": decode_high / n_steps if n_steps else None,
            "decode_s": decode_s, "tokens_per_s": rate(total), "tokens_per_s_low": rate(high),
            "tokens_per_s_high": rate(low),
            "prefill_s": prefill.predicted_s, "prefill_estimated_share": prefill.estimated_share,
            "prefill_measured_s": prefill.measured_s,
            "loop": loop.as_dict(), "loop_s": loop.setup_s + loop.per_step_s * n_steps,
            "estimated_share": min(1.0, estimated / (prefill_ops + ops_total)) if prefill_ops + ops_total > 0 else 0.0,
            "steps": steps,
            "decode_bound_s": float(bound.sum()) if curve else None, "decode_operators_s": ops_total,
            "bound_fraction": float(bound.sum()) / ops_total if ops_total > 0 and curve else None,
            "bandwidth": {"bytes": curve["bytes"], "bytes_per_s": curve["bytes_per_s"]} if curve else None}


def check(db: dict, q: Question, spec: dict, config: dict, db_dir=None, host: str | None = None) -> dict:
    """One `generate` row (:data:`opcost.tables.GENERATE`): the question predicted from ``db`` (:func:`predict`, on
    the config's device and threads, the overhead from the database's traces) and generate() itself timed in turn
    with the model's measured decode step at the longest context the database measured at this batch (the control;
    its time in the database is the rotation's reference), ``generate.rounds`` rounds, on the config's device in its
    dtype (:func:`opcost.measure.generation.time_generate`)."""
    from opcost.analysis.estimate import predict_workload
    from opcost.database import of_workload
    from opcost.measure.generation import time_generate
    from opcost.measure.timing import TimingSettings
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    held = db["layers"][(db["layers"]["model"] == q.model) & (db["layers"]["batch"] == q.batch)]
    contexts = sorted(c for c in map(decode_context, set(held["mode"])) if c is not None)
    if not contexts:
        raise OpcostError(f"model {q.model}", f"generate() at batch {q.batch} is timed beside a measured decode step "
                                              "of it: give the model the mode decode")
    control_mode = decode_mode(contexts[-1])
    chosen = dict(device=config["device"], threads=config["threads"], host=host)
    control_s = predict_workload(db, of_workload(db["layers"], q.model, q.batch, control_mode), db_dir,
                                 config["statistic"], **chosen).measured_s
    if not control_s:
        raise OpcostError(f"model {q.model}", f"{control_mode} b{q.batch} has no end-to-end time in the database")
    g = predict(db, q, spec, db_dir, config["statistic"], trace_now=False, dtype=config["dtype"], **chosen)
    control = make_workload(load_model(q.model, spec, config["device"], config["dtype"]), q.batch, control_mode)
    settings = TimingSettings.from_config(config["e2e"]["timing"]).in_turn()
    hf = control.model.module.model  # the same weights: generate() calls the transformers model, not the step's wrapper
    timed = time_generate(hf, control, q.prompt, q.new, int((config.get("generate") or {}).get("rounds", 3)),
                          settings, batch=q.batch).in_minutes_of(control_s)
    return {"model": q.model, "batch": q.batch, "prompt": q.prompt, "new": q.new, "device": config["device"],
            "predicted_s": g["total_s"], "low_s": g["total_low_s"], "high_s": g["total_high_s"],
            "ttft_s": g["ttft_s"], "tpot_s": g["tpot_s"], "tokens_per_s": g["tokens_per_s"],
            "estimated_share": g["estimated_share"], "loop_s": g["loop_s"], "bound_s": g["decode_bound_s"],
            "measured_s": timed["total_s"], "measured_ttft_s": timed["first_s"], "measured_now_s": timed["now_s"],
            "spread": timed["spread"], "control": f"{q.model}/{control_mode}/b{q.batch}",
            "error": g["total_s"] / timed["total_s"] - 1}
