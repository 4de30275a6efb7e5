"""One iteration of a model: what end-to-end timing, extraction and in-situ profiling all run.

* ``inference``: ``model.eval()``, the forward pass under ``torch.inference_mode()``.
* ``training``: ``model.train()``, gradients reset to ``None``, forward, a scalar loss (mean of the output), backward.
  No optimizer step: opcost costs the forward and backward work of the operators.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch

from .errors import OpcostError
from .models import LoadedModel

MODES = ("inference", "training")


def workload_key(model: str, mode: str, batch: int) -> str:
    """How tables name a workload: ``model/mode/b{batch}``."""
    return f"{model}/{mode}/b{int(batch)}"


def parse_workload_key(key: str) -> tuple[str, str, int]:
    """(model, mode, batch) of a :func:`workload_key`."""
    model, mode, batch = key.rsplit("/", 2)
    return model, mode, int(batch.removeprefix("b"))


def loss_of(out) -> torch.Tensor:
    """The scalar that training mode back-propagates: the mean of the (first) floating output."""
    if isinstance(out, (tuple, list)):
        out = next(o for o in out if isinstance(o, torch.Tensor) and o.is_floating_point())
    elif isinstance(out, dict):
        out = next(o for o in out.values() if isinstance(o, torch.Tensor) and o.is_floating_point())
    return out.float().mean()


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
            loss_of(self.model.module(*self.inputs)).backward()

    def sync(self) -> Callable[[], None]:
        dev = next(iter(self.inputs)).device if self.inputs else torch.device("cpu")
        return torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)


def make_workload(model: LoadedModel, batch: int, mode: str, seed: int = 0) -> Workload:
    if mode not in MODES:
        raise OpcostError(f"model {model.name}", f"unknown mode {mode!r} (expected one of {', '.join(MODES)})")
    model.module.train(mode == "training")
    inputs = model.make_inputs(batch, seed)
    wl = Workload(model, batch, mode, inputs)
    try:
        wl.step()  # also a first warm-up; fails early and clearly when the input does not fit the model
    except Exception as e:
        shapes = [tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)]
        raise OpcostError(f"model {model.name}", f"{mode} at batch {batch} with inputs {shapes} failed: "
                                                 f"{type(e).__name__}: {e}") from None
    return wl
