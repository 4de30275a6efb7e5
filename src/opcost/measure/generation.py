"""Hugging Face ``generate()`` timed as a user calls it, and the cost of its own loop around the model's forwards.

``generate()`` of N new tokens from a prompt of P tokens is the prefill (one forward of P tokens into an empty
key/value cache, the last token's logits alone: the workload ``prefill<P>``) and N − 1 decode steps at contexts P …
P + N − 2 (the workloads ``decode<L>``), around which its loop does work of its own: before the prefill, the
generation config's validation, the logits processors' and stopping criteria's construction, the cache's; around
every forward, ``prepare_inputs_for_generation``, the logits' copy to float32, the logits processors, the token's
choice (argmax, greedy), the growing ``input_ids`` and attention mask, the stopping criteria. That work is Python
and small tensor operators of the batch and vocabulary's size, independent of the model's depth, so
:func:`loop_overhead` measures it on this host with a **stand-in**: the model's class and config with one layer
(:func:`stand_in`), the same batch, prompt, vocabulary and new tokens, timing ``generate()`` alternately with the
same forwards called as opcost's workloads call them (:func:`forwards`); the differences are the loop's. What
:func:`time_generate` times is the call a user makes: greedy, ``min_new_tokens = max_new_tokens = N``, the default
cache (``DynamicCache``), an attention mask of ones.
"""
from __future__ import annotations

import copy
import inspect
import time
from dataclasses import dataclass

import numpy as np
import torch

LOOP_STEPS = 16  # decode steps the loop's per-step overhead is measured over (fewer when fewer are asked)


def _generate_kwargs(new: int) -> dict:
    # use_cache: generate()'s default, a DynamicCache (opcost builds models with it off, for passes without one)
    return {"do_sample": False, "min_new_tokens": new, "max_new_tokens": new, "num_beams": 1, "use_cache": True}


def run_generate(hf, ids: torch.Tensor, new: int) -> torch.Tensor:
    """``generate()`` of the transformers model ``hf`` from the prompts ``ids`` (batch × P), ``new`` tokens each,
    greedy, under ``torch.inference_mode()``; the generated ids (batch × (P + new))."""
    from transformers import GenerationConfig

    gc = copy.deepcopy(getattr(hf, "generation_config", None) or GenerationConfig())
    for k, v in _generate_kwargs(new).items():
        setattr(gc, k, v)
    if gc.pad_token_id is None:  # a random model has no tokenizer: any id pads, none is ever needed
        gc.pad_token_id = 0
    vocab = _vocab(hf)
    if gc.eos_token_id is not None and any(int(e) >= vocab for e in np.atleast_1d(gc.eos_token_id)):
        gc.eos_token_id = None  # a config's default end-of-text id beyond a shrunk vocabulary: no end of text
    with torch.inference_mode():
        return hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)


def _vocab(hf) -> int:
    config = hf.config.get_text_config(decoder=True) if hasattr(hf.config, "get_text_config") else hf.config
    return int(getattr(config, "vocab_size", None) or 1000)


def forwards(hf, ids: torch.Tensor, new: int) -> None:
    """The forwards ``generate()`` of ``new`` tokens calls, as opcost's workloads call them: the prefill of ``ids``
    into a fresh ``DynamicCache`` (:class:`~opcost.model.sources.hf_models.PrefillState`), then ``new`` − 1 steps
    of one token each at contexts P … P + new − 2 (:class:`~opcost.model.sources.hf_models.DecodeState`'s call, the
    cache growing as generation grows it)."""
    from opcost.model.sources.hf_models import HFModel

    wrapped = HFModel(hf, ("input_ids", "attention_mask"), _vocab(hf))
    batch, prompt = ids.shape
    with torch.inference_mode():
        make = wrapped.start_prefill(batch, prompt)
        state = wrapped.decoding
        kwargs = state.kwargs()
        args = make(batch)
        hf(**dict(zip(state.names, (ids, *args[1:]))), **kwargs)
        cache = kwargs[state.argument]
        params = inspect.signature(hf.forward).parameters
        tok = ids[:, -1:]
        for step in range(new - 1):
            pos = {"position_ids": torch.full((batch, 1), prompt + step, device=ids.device)} \
                if "position_ids" in params else {}
            hf(input_ids=tok, **pos, **{state.argument: cache, "use_cache": True})
    wrapped.stop_decode()


def stand_in(cls, config, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """A one-layer model of class ``cls`` and ``config`` otherwise (random weights, on ``device`` in ``dtype``),
    built without the model itself: what :func:`loop_overhead` measures generate()'s loop with."""
    config = copy.deepcopy(config)
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    text.num_hidden_layers = 1
    for name in ("layer_types", "mlp_only_layers"):  # per-layer lists: the first layer's
        if isinstance(getattr(text, name, None), list) and getattr(text, name):
            setattr(text, name, getattr(text, name)[:1])
    torch.manual_seed(0)
    return cls(config).to(device=device, dtype=dtype).eval()


@dataclass
class LoopOverhead:
    """generate()'s own loop on this host, seconds: ``setup_s`` once per call, before the prefill's token (part of
    the time to the first token), ``per_step_s`` around each later forward; each with the 10–90% range of its
    ``rounds`` rounds (``_low_s``, ``_high_s``)."""

    setup_s: float
    per_step_s: float
    per_step_low_s: float
    per_step_high_s: float
    setup_low_s: float
    setup_high_s: float
    rounds: int

    def as_dict(self) -> dict:
        return dict(vars(self))


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def loop_overhead(small, batch: int, prompt: int, new: int, rounds: int = 7, seed: int = 0,
                  threads: int | None = None) -> LoopOverhead:
    """generate()'s loop measured with ``small`` (a :func:`stand_in` of the model) at ``batch``, ``prompt`` and up
    to :data:`LOOP_STEPS` + 1 new tokens: per round, ``generate()`` of one token (the prefill alone) and of n tokens,
    each timed alternately with the same :func:`forwards`; the setup is the first difference, the per-step
    overhead (difference of n tokens − the setup) / (n − 1); medians over ``rounds`` rounds after a warm-up, and
    their 10–90% ranges. ``threads``: torch's threads while it is measured (those of the costs it goes with; the
    caller's are restored after; None: the caller's)."""
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads or before))
    try:
        return _loop_overhead(small, batch, prompt, new, rounds, seed)
    finally:
        torch.set_num_threads(before)


def _loop_overhead(small, batch: int, prompt: int, new: int, rounds: int, seed: int) -> LoopOverhead:
    device = next(small.parameters()).device
    ids = torch.randint(0, _vocab(small), (batch, prompt), generator=torch.Generator().manual_seed(seed)).to(device)
    n = max(2, min(int(new), LOOP_STEPS + 1))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed(fn):
        return _timed(lambda: (fn(), sync()))

    for _ in range(2):  # warm-up: allocator, lazy imports, first-call paths
        run_generate(small, ids, n)
        forwards(small, ids, n)
    setups, steps = [], []
    for _ in range(rounds):
        one = timed(lambda: run_generate(small, ids, 1)) - timed(lambda: forwards(small, ids, 1))
        many = timed(lambda: run_generate(small, ids, n)) - timed(lambda: forwards(small, ids, n))
        setups.append(one)
        steps.append((many - one) / (n - 1))
    q = lambda v, p: max(float(np.quantile(v, p)), 0.0)  # noqa: E731
    return LoopOverhead(setup_s=q(setups, 0.5), per_step_s=q(steps, 0.5), per_step_low_s=q(steps, 0.1),
                        per_step_high_s=q(steps, 0.9), setup_low_s=q(setups, 0.1), setup_high_s=q(setups, 0.9),
                        rounds=rounds)


@dataclass
class Timed:
    """generate() timed in turn with a measured workload, per round (seconds): ``total`` (``new`` tokens),
    ``first`` (one token: the time to the first token, the fastest of three) and ``control`` (the workload's
    iteration, the trimmed mean of a :func:`opcost.measure.timing.measure`)."""

    total: list
    first: list
    control: list

    def in_minutes_of(self, control_s: float) -> dict:
        """The times in the minutes the control took ``control_s`` (its time in the database): the median over the
        rounds of each time / the control's, times ``control_s``, so that the host's drift between the database's
        minutes and now cancels; ``spread``: how far the total's rounds lie apart (max / min − 1); ``now_s``: the
        median total as timed now."""
        from opcost.measure.control import in_minutes_of

        ratio = {k: np.array(getattr(self, k)) / np.array(self.control) for k in ("total", "first")}
        return {"total_s": float(np.median(in_minutes_of(ratio["total"], control_s))),
                "first_s": float(np.median(in_minutes_of(ratio["first"], control_s))),
                "spread": float(ratio["total"].max() / ratio["total"].min() - 1),
                "now_s": float(np.median(self.total))}


def time_generate(hf, control, prompt: int, new: int, rounds: int, settings, batch: int = 1,
                  seed: int = 1) -> Timed:
    """generate() of ``new`` tokens and of one token from random prompts (``batch`` × ``prompt``) by the
    transformers model ``hf``, each timed in turn with ``control`` (a measured :class:`~opcost.model.workload.
    Workload`, timed with ``settings``) over ``rounds`` rounds, the order rotated every round, after a warm-up."""
    from opcost.measure.control import rounds as in_turn
    from opcost.measure.timing import measure

    device = next(hf.parameters()).device
    ids = torch.randint(0, _vocab(hf), (batch, prompt), generator=torch.Generator().manual_seed(seed)).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def once(n):
        return _timed(lambda: (run_generate(hf, ids, n), sync()))

    once(new), once(1)  # warm-up
    parts = {"total": lambda: once(new), "first": lambda: min(once(1) for _ in range(3)),
             "control": lambda: measure(control.step, settings, device.type).trimmed_mean}
    return Timed(**in_turn(parts, rounds))
