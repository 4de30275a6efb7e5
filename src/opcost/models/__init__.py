"""Resolve a configured model to an ``nn.Module`` and its example inputs.

A model entry's ``model`` field (default: the entry's name) is, in this order of lookup:

* ``package.module:callable`` — imported and called with ``kwargs``;
* a built-in model name (:data:`opcost.models.builtin.BUILTIN`);
* a torchvision model name (``torchvision.models.list_models()``), built with random weights (``weights=None``).

Inputs come from the model's ``example_inputs(batch, generator)`` when it has one, else from ``input_shapes``
(per-sample shapes; the batch dimension is prepended) and ``input_dtype`` (integer inputs draw from ``input_range``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..errors import OpcostError
from ..opspec import dtype_from_name
from .builtin import BUILTIN


@dataclass
class LoadedModel:
    name: str
    module: nn.Module
    make_inputs: Callable[[int, int], tuple]  # (batch, seed) -> inputs on the model's device


def _build(name: str, spec: dict) -> nn.Module:
    target = spec.get("model") or name
    kwargs = dict(spec.get("kwargs") or {})
    if ":" in target:
        mod_name, _, attr = target.partition(":")
        try:
            fn = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as e:
            raise OpcostError(f"model {name}", f"cannot import {target!r}: {e}") from None
    elif target in BUILTIN:
        fn = BUILTIN[target]
    else:
        import torchvision

        if target not in torchvision.models.list_models():
            raise OpcostError(
                f"model {name}",
                f"unknown model {target!r}: not 'module:callable', not built-in ({', '.join(sorted(BUILTIN))}), "
                f"not a torchvision model name",
            )

        def fn(**kw):
            return torchvision.models.get_model(target, weights=None, **kw)

    try:
        module = fn(**kwargs)
    except Exception as e:  # a user callable may raise anything
        raise OpcostError(f"model {name}", f"{target} raised {type(e).__name__}: {e}") from None
    if not isinstance(module, nn.Module):
        raise OpcostError(f"model {name}", f"{target} returned {type(module).__name__}, not a torch.nn.Module")
    return module


def load_model(name: str, spec: dict, device: str = "cpu", dtype: str = "float32") -> LoadedModel:
    """Build model ``name`` from its config entry, with random weights, on ``device`` in ``dtype``."""
    torch.manual_seed(0)
    module = _build(name, spec)
    float_dtype = dtype_from_name(dtype)
    module = module.to(device=device, dtype=float_dtype)
    dev = torch.device(device)

    example = getattr(module, "example_inputs", None)
    shapes = spec.get("input_shapes") or [[3, 224, 224]]
    in_dtype = dtype_from_name(spec.get("input_dtype") or dtype)
    lo, hi = spec.get("input_range") or [0, 2]

    def make_inputs(batch: int, seed: int = 0) -> tuple:
        gen = torch.Generator().manual_seed(seed)
        if callable(example):
            raw = example(batch, gen)
        elif in_dtype.is_floating_point:
            raw = tuple(torch.randn([batch, *s], generator=gen) for s in shapes)
        else:
            raw = tuple(torch.randint(lo, hi, [batch, *s], generator=gen) for s in shapes)
        return tuple(t.to(dev, float_dtype) if t.is_floating_point() else t.to(dev) for t in raw)

    return LoadedModel(name, module, make_inputs)
