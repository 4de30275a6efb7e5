"""One iteration of a model: what end-to-end timing, extraction and in-situ profiling all run.

* ``inference``: ``model.eval()``, the forward pass under ``torch.inference_mode()``.
* ``training``: ``model.train()``, gradients reset to ``None``, forward, a scalar loss (mean of the output), backward.
  No optimizer step: opcost costs the forward and backward work of the operators.
* ``decode<L>`` (e.g. ``decode512``): one generation step of a decoder, one new token per sequence over a key/value
  cache holding exactly L tokens, under ``torch.inference_mode()``. The cache is filled by an untimed prefill of L
  tokens when the workload is made, and every step leaves it at L tokens (its update, the copy of the cache a real
  step makes, is part of the step); see :class:`opcost.model.sources.hf_models.DecodeState`. The context length is
  part of the mode, so that every table, file and wildcard keyed by ``model/mode/b{batch}`` holds decode workloads
  as they are. A model decodes when its module has ``start_decode(batch, context)`` (transformers decoders, ``hf:``).
* ``prefill<P>`` (e.g. ``prefill512``): ``generate()``'s first call, a prompt of P tokens per sequence into an empty
  key/value cache, the last token's logits alone, under ``torch.inference_mode()``: the time to the first token
  without generate()'s own loop (:mod:`opcost.analysis.generate`). A model prefills when its module has
  ``start_prefill(batch, prompt)``.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from opcost.errors import OpcostError
from opcost.model import fastpath
# the mode helpers live without torch in opcost.model.modes; named here too, where workloads are made
from opcost.model.modes import (MODES, check_mode, decode_context, decode_mode, is_decode, op_mode,  # noqa: F401
                                prefill_length)
from opcost.model.sources import LoadedModel


def workload_key(model: str, mode: str, batch: int) -> str:
    """How tables name a workload: ``model/mode/b{batch}``."""
    return f"{model}/{mode}/b{int(batch)}"


def workload_keys(table):
    """The :func:`workload_key` of each row of a table with ``model``, ``mode`` and ``batch`` columns: a string
    Series on the table's index (also when the table is empty, so that it merges with other workload columns)."""
    import pandas as pd

    keys = [workload_key(m, mo, b) for m, mo, b in zip(table["model"], table["mode"], table["batch"])]
    return pd.Series(keys, index=table.index, dtype=object)


def parse_workload_key(key: str) -> tuple[str, str, int]:
    """(model, mode, batch) of a :func:`workload_key`."""
    model, mode, batch = key.rsplit("/", 2)
    return model, mode, int(batch.removeprefix("b"))


def floating_outputs(out) -> list[torch.Tensor]:
    """The floating-point tensors of a model's output, in order: tensors, tuples and lists, dicts (transformers'
    ``ModelOutput`` included) and dataclasses, walked depth first."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() or out.is_complex() else []
    if isinstance(out, dict):
        out = list(out.values())
    elif dataclasses.is_dataclass(out) and not isinstance(out, type):
        out = [getattr(out, f.name) for f in dataclasses.fields(out)]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in floating_outputs(o)]
    return []


def loss_of(out, model: str = "model") -> torch.Tensor:
    """The scalar that training mode back-propagates: the mean of the first floating-point output that requires
    grad (:func:`floating_outputs`; e.g. a transformers model's ``last_hidden_state`` or ``logits``)."""
    floats = floating_outputs(out)
    grads = [t for t in floats if t.requires_grad]
    if not grads:
        what = "no floating-point output" if not floats else "no output that requires grad"
        raise OpcostError(f"model {model}", f"training needs a differentiable output, but the model returned {what} "
                                            f"({type(out).__name__})")
    return grads[0].float().mean()


@dataclass
class Workload:
    model: LoadedModel
    batch: int
    mode: str
    inputs: tuple

    def grad_context(self):
        return contextlib.nullcontext() if self.mode == "training" else torch.inference_mode()

    def forward(self):
        return self.model.module(*self.inputs)

    def step(self) -> None:
        """One full iteration in this workload's mode (in decode: one step, the cache left at its context length)."""
        if self.mode != "training":
            with torch.inference_mode():
                self.model.module(*self.inputs)
        else:
            self.model.module.zero_grad(set_to_none=True)
            loss_of(self.model.module(*self.inputs), self.model.name).backward()

    def carried(self) -> list[torch.Tensor]:
        """Tensors the workload carries from one iteration to the next and reads in each (a decode step's key/value
        cache, written by the prefill or the step before): the model's ``carried_tensors(inputs)`` where it has
        one. Their inputs' entry in a configuration's `feeds` is :data:`opcost.tables.CARRIED`."""
        of = getattr(self.model.module, "carried_tensors", None)
        return list(of(self.inputs)) if of is not None else []

    def sync(self) -> Callable[[], None]:
        dev = next(iter(self.inputs)).device if self.inputs else torch.device("cpu")
        return torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)


def _start_decode(model: LoadedModel, batch: int, mode: str) -> LoadedModel:
    """``model`` with its key/value cache filled for ``mode`` (decode<L>) or set to prefill (prefill<P>), making the
    calls' inputs; for any other mode ``model``, out of any such state a former workload left it in."""
    context, prompt = decode_context(mode), prefill_length(mode)
    if context is None and prompt is None:
        getattr(model.module, "stop_decode", lambda: None)()
        return model
    start = getattr(model.module, "start_decode" if context else "start_prefill", None)
    if start is None:
        what = "steps a key/value cache" if context else "is generate()'s prefill"
        raise OpcostError(f"model {model.name}", f"{mode} {what}, which only transformers decoders (hf:gpt2, "
                                                 "hf:llama...) have")
    try:
        return dataclasses.replace(model, make_inputs=start(batch, context or prompt))
    except Exception as e:
        raise OpcostError(f"model {model.name}", f"{mode} at batch {batch}: the prefill of {context or prompt} tokens "
                                                 f"failed: {type(e).__name__}: {e}") from None


def make_workload(model: LoadedModel, batch: int, mode: str, seed: int = 0) -> Workload:
    check_mode(mode, model.name)
    model.module.train(mode == "training")
    model = _start_decode(model, batch, mode)
    inputs = ()
    try:
        inputs = model.make_inputs(batch, seed)
        wl = Workload(model, batch, mode, inputs)
        wl.step()  # also a first warm-up; fails early and clearly when the input does not fit the model
        fastpath.mark(model.module, fastpath.probe(wl))  # fused inference fast paths, recorded as they run
    except OpcostError:
        raise
    except Exception as e:
        shapes = [tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)]
        raise OpcostError(f"model {model.name}", f"{mode} at batch {batch} with inputs {shapes} failed: "
                                                 f"{type(e).__name__}: {e}") from None
    return wl
