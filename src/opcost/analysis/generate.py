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


def _load(model: str, spec: dict, dtype: str):
    from opcost.model.sources import load_model

    target = (spec or {}).get("model") or model
    if not str(target).startswith("hf:"):
        raise OpcostError(f"model {model}", "generate() is Hugging Face's: give a transformers causal language model "
                                            "(hf:GPT2LMHeadModel, hf:LlamaForCausalLM...)")
    hf = load_model(model, spec or {}, "cpu", dtype).module.model
    if not callable(getattr(hf, "generate", None)) or not getattr(hf, "can_generate", lambda: False)():
        raise OpcostError(f"model {model}", f"{target} builds {type(hf).__name__}, which has no language-model head "
                                            "to generate() with: name its causal-LM class (e.g. hf:LlamaForCausalLM, "
                                            "hf:GPT2LMHeadModel)")
    return hf.eval()


def predict(db: dict, q: Question, spec: dict | None = None, db_dir=None, statistic: str | None = None,
            trace_now: bool = True, loop=None, bandwidth: dict | None = None, dtype: str = "float32",
            **chosen) -> dict:
    """The prediction of ``generate()`` (:class:`Question`) from the database ``db`` on the conditions ``chosen``
    (``host``, ``device``, ``threads``), as a JSON-ready dict (the module's doc says what each part is).
    ``loop``: a :class:`opcost.measure.generation.LoopOverhead` (default: measured now with the model's stand-in);
    ``bandwidth``: a read-bandwidth curve (default: this host's, :func:`opcost.measure.bandwidth.curve`)."""
    from opcost.analysis import decode, estimate
    from opcost.measure import bandwidth as bw
    from opcost.measure.generation import loop_overhead

    hf = _load(q.model, spec, dtype) if loop is None else None  # refused before anything is predicted

    def one(mode):
        layers = estimate.workload_layers(db, q.model, q.batch, mode, spec)
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
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(int(cond.get("threads") or before))
        try:
            loop = loop_overhead(hf, q.batch, q.prompt, q.new)
        finally:
            torch.set_num_threads(before)
    curve = bandwidth or bw.curve(str(cond.get("host")), str(cond.get("device")), cond.get("threads"))
    return assemble(q, prefill, steps, loop, curve)


def assemble(q: Question, prefill, steps: list[dict], loop, curve: dict) -> dict:
    """:func:`predict`'s answer from its parts: the prefill's :class:`~opcost.analysis.estimate.Prediction`, the
    decode steps predicted (``steps``, one dict per context), generate()'s loop and the bandwidth curve."""
    from opcost.measure import bandwidth as bw

    every = q.contexts
    if steps:
        at = np.array([s["context"] for s in steps], dtype=float)
        series = {k: np.interp(every, at, [s[k] for s in steps]) for k in ("step_s", "low_s", "high_s")}
        weights = steps[0]["weight_bytes"]
        per_token = np.interp(every, at, [s["kv_cache_bytes"] / s["context"] for s in steps])
        reads = weights + per_token * every
        bound = reads / np.array([bw.at(curve, r) for r in reads])
        ops = np.interp(every, at, [s["operators_s"] for s in steps])
        shares = np.interp(every, at, [s["estimated_share"] for s in steps])
        for s in steps:
            s["bound_s"] = float((s["weight_bytes"] + s["kv_cache_bytes"]) /
                                 bw.at(curve, s["weight_bytes"] + s["kv_cache_bytes"]))
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
            "decode_bound_s": float(bound.sum()), "decode_operators_s": ops_total,
            "bound_fraction": float(bound.sum()) / ops_total if ops_total > 0 else None,
            "bandwidth": {"bytes": curve["bytes"], "bytes_per_s": curve["bytes_per_s"]}}
