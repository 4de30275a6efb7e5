"""One iteration of a model: what end-to-end timing, extraction and in-situ profiling all run.

* ``inference``: ``model.eval()``, the forward pass under ``torch.inference_mode()``.
* ``training``: ``model.train()``, gradients reset to ``None``, forward, a scalar loss (mean of the output), backward.
  No optimizer step: opcost costs the forward and backward work of the operators.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from opcost.errors import OpcostError
from opcost.model import fastpath
from opcost.model.sources import LoadedModel

MODES = ("inference", "training")


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
        return torch.inference_mode() if self.mode == "inference" else contextlib.nullcontext()

    def forward(self):
        return self.model.module(*self.inputs)

    def step(self) -> None:
        """One full iteration in this workload's mode."""
        if self.mode == "inference":
            with torch.inference_mode():
                self.model.module(*self.inputs)
        else:
            self.model.module.zero_grad(set_to_none=True)
            loss_of(self.model.module(*self.inputs), self.model.name).backward()

    def sync(self) -> Callable[[], None]:
        dev = next(iter(self.inputs)).device if self.inputs else torch.device("cpu")
        return torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)


def make_workload(model: LoadedModel, batch: int, mode: str, seed: int = 0) -> Workload:
    if mode not in MODES:
        raise OpcostError(f"model {model.name}", f"unknown mode {mode!r} (expected one of {', '.join(MODES)})")
    model.module.train(mode == "training")
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
