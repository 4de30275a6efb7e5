"""Rebuild one operator configuration as a zero-argument callable for the timing core.

* ``module`` scope: the model is rebuilt from its config entry (random weights; the same code path as extraction)
  and the leaf module is taken by its path, so any module class works, user-defined ones included; its inputs are
  synthesized from the recorded specs (same shapes, dtypes, strides; stored integer indices).
* ``functional`` scope: the aten overload is called with arguments synthesized from the recorded description.

Inference configurations run under ``torch.inference_mode()``. Training configurations are timed in two phases:
``forward`` (with autograd recording, as in the model) and ``backward`` (one forward, then backward with a gradient
of ones for each differentiable output, repeated on the retained graph); parameter gradients are reset to ``None``
per call as in the model iteration. In training, an in-place op's mutated argument is cloned per call (a leaf
that requires grad cannot be modified in place), and so is the input of a module with ``inplace=True``; the clone
is inside the timed call.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Callable

import torch

from .errors import OpcostError
from .models import LoadedModel, load_model
from .opspec import synthesize


@dataclass
class Replay:
    """Callables per phase (``forward``; in training also ``backward``, whose entry is a setup function that runs
    one forward and returns the repeatable backward call, or None when nothing is differentiable)."""

    phases: dict[str, Callable]
    context: Callable[[], contextlib.AbstractContextManager]

    def callables(self):
        """(phase, zero-argument callable) pairs, ready to time; call inside ``context()``."""
        for phase, fn in self.phases.items():
            if phase == "backward":
                fn = fn()
                if fn is None:
                    continue
            yield phase, fn


def op_overload(op: str):
    """'aten.add_.Tensor' -> torch.ops.aten.add_.Tensor (any registered namespace, e.g. torchvision)."""
    try:
        ns, name, overload = op.split(".", 2)
        if ns == "torchvision":
            import torchvision  # noqa: F401  (registers its operators)
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (ValueError, AttributeError, RuntimeError):
        raise OpcostError(f"operator {op}", "not an operator overload known to this torch") from None


def _outputs(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _outputs(o)]
    return []


def _phases(forward: Callable[[], object], zero: Callable[[], None], training: bool) -> dict[str, Callable]:
    """``forward`` alone; in training also ``backward`` alone (repeated on one retained graph)."""
    if not training:
        return {"forward": forward}

    def backward_setup():
        zero()
        outs = [t for t in _outputs(forward()) if t.requires_grad and t.grad_fn is not None]
        grads = [torch.ones_like(t) for t in outs]

        def backward():
            zero()
            torch.autograd.backward(outs, grads, retain_graph=True)

        return backward if outs else None

    return {"forward": forward, "backward": backward_setup}


class ModelCache:
    """Models rebuilt for module replay, one per name, in the process that profiles."""

    def __init__(self, models_cfg: dict, device: str, dtype: str):
        self.models_cfg, self.device, self.dtype = models_cfg, device, dtype
        self._cache: dict[str, LoadedModel] = {}

    def get(self, name: str) -> LoadedModel:
        if name not in self._cache:
            if name not in self.models_cfg:
                raise OpcostError(f"model {name}", "needed to replay a module but not in config `models`")
            self._cache[name] = load_model(name, self.models_cfg[name], self.device, self.dtype)
        return self._cache[name]


def build(row: dict, models: ModelCache, device: str) -> Replay:
    """A callable that performs one call of configuration ``row`` (a `configs` table row)."""
    replay = json.loads(row["replay"])
    training = row["mode"] == "training"
    ctx = (lambda: torch.enable_grad()) if training else (lambda: torch.inference_mode())
    if row["scope"] == "module":
        module = models.get(replay["model"]).module.get_submodule(replay["path"])
        module.train(training)
        args = synthesize(replay["args"], device)
        kwargs = synthesize(replay.get("kwargs") or {"D": {}}, device)
        if training and getattr(module, "inplace", False):
            def forward():
                return module(*[a.clone() if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args],
                              **kwargs)
        else:
            def forward():
                return module(*args, **kwargs)

        zero = lambda: module.zero_grad(set_to_none=True)  # noqa: E731
    else:
        op = op_overload(row["op"])
        args = synthesize(replay["args"], device)
        kwargs = synthesize(replay.get("kwargs") or {"D": {}}, device)
        mutated = [i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
        leaves = [t for t in _outputs(args) + _outputs(list(kwargs.values())) if t.requires_grad]
        if training and mutated:
            def forward():
                call_args = [a.clone() if i in mutated and isinstance(a, torch.Tensor) and a.requires_grad else a
                             for i, a in enumerate(args)]
                return op(*call_args, **kwargs)
        else:
            def forward():
                return op(*args, **kwargs)

        def zero():
            for t in leaves:
                t.grad = None
    return Replay(_phases(forward, zero, training), ctx)
