"""Resolve a configured model to an ``nn.Module`` and its example inputs.

A model entry's ``model`` field (default: the entry's name) is, in this order of lookup:

* ``timm:<name>`` — a timm model (:mod:`opcost.model.sources.timm_models`), ``kwargs`` passed to ``timm.create_model``;
* ``hf:<architecture>`` — a Hugging Face transformers model from its config class
  (:mod:`opcost.model.sources.hf_models`), ``kwargs`` overriding the config;
* ``package.module:callable`` — imported (from the working directory, ``PYTHONPATH`` or the installed packages)
  and called with ``kwargs``;
* a built-in model name (:data:`opcost.model.sources.builtin.BUILTIN`);
* a torchvision model name (``torchvision.models.list_models()``), built with random weights (``weights=None``).

Every model is built with random weights; nothing is downloaded. Inputs come from the entry's ``input_shapes`` when
it sets them (per-sample shapes; the batch dimension is prepended; ``input_dtype``, integer inputs drawn from
``input_range``), else from the source's own example inputs (timm's input size, token ids and attention mask or
pixel values for transformers) or the module's ``example_inputs(batch, generator)``, else ``[[3, 224, 224]]``.
With ``memory_format: channels_last`` the module's 4-D weights and its 4-D inputs are in NHWC order; with
``token_major`` its 4-D inputs are made as a transformer's tokens viewed as an image (``[B, H x W, C]`` transposed to
``[B, C, H, W]``), its weights left in NCHW order.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from opcost.errors import OpcostError
from opcost.model.opspec import dtype_from_name
from opcost.model.sources import hf_models, timm_models
from opcost.model.sources.builtin import BUILTIN


@dataclass
class LoadedModel:
    name: str
    module: nn.Module
    make_inputs: Callable[[int, int], tuple]  # (batch, seed) -> inputs on the model's device


def available_memory(device: str = "cpu") -> int | None:
    """Bytes of memory free for a model on ``device``: the host's available memory (``MemAvailable``), a CUDA
    device's free memory; None where unknown."""
    if device.startswith("cuda"):
        try:
            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except Exception:  # no driver, no such device: the build itself will say so
            return None
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def _check_size(name: str, target: str, build: Callable, device: str) -> None:
    """Refuse, in one line, a model whose parameters and buffers alone exceed the memory free on ``device``
    (a transformers model type's default configuration is the full-size model: ``hf:llama`` is 6.6 billion
    parameters, 26 GB in float32), before building it for real would exhaust the host's memory. The model is first
    built on the meta device, which allocates nothing (the random generators left as they were); one that cannot be
    is left to its real build. Every model is built in the host's memory first, then moved to ``device``."""
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            module = build()[0]
    except Exception:
        return
    tensors = [*module.parameters(), *module.buffers()]
    need = sum(t.numel() * t.element_size() for t in tensors)
    for where in dict.fromkeys(("cpu", device)):
        free = available_memory(where)
        if free is not None and need > free:
            params = sum(p.numel() for p in module.parameters())
            raise OpcostError(f"model {name}", f"{target} has {params / 1e9:.2f} billion parameters, "
                                               f"{need / 1e9:.1f} GB as built, more than the {free / 1e9:.1f} GB free "
                                               f"on {where}; make it smaller with its kwargs (transformers: "
                                               f"num_hidden_layers, hidden_size...)")


def _import_callable(name: str, target: str) -> Callable:
    """``package.module:callable`` imported from the working directory, ``PYTHONPATH`` or the installed packages."""
    mod_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path:  # as `python -m` would: the working directory's modules, after the rest
        sys.path.append(os.getcwd())
    try:
        fn = getattr(importlib.import_module(mod_name), attr)
    except Exception as e:  # ImportError, AttributeError, or whatever the module raises as it is imported
        raise OpcostError(f"model {name}", f"cannot import {target!r} (from the working directory "
                                           f"{os.getcwd()}, PYTHONPATH or installed packages): "
                                           f"{type(e).__name__}: {e}") from None
    if not callable(fn):
        raise OpcostError(f"model {name}", f"{target} is a {type(fn).__name__}, not a callable returning a model")
    return fn


def _torchvision_factory(name: str, target: str) -> Callable:
    import torchvision

    if target not in torchvision.models.list_models():
        raise OpcostError(
            f"model {name}",
            f"unknown model {target!r}: not 'module:callable', not built-in ({', '.join(sorted(BUILTIN))}), "
            f"not a torchvision model name",
        )

    def fn(**kw):
        return torchvision.models.get_model(target, weights=None, **kw)

    return fn


def _library(target: str):
    """The library source (timm, transformers) a ``timm:``/``hf:`` target names, else None."""
    return next((s for s in (timm_models, hf_models) if target.startswith(s.PREFIX)), None)


def check_source(name: str, spec: dict, device: str = "cpu") -> None:
    """What can be known of a model entry without building it, in one line (:class:`OpcostError`): the source
    resolves (a timm name timm knows, a transformers class or model type and settings its config has, an importable
    callable, a built-in or torchvision name) and a timm or transformers model's parameters fit the memory free
    (built on the meta device). What only running the model can show (a constructor or forward pass that raises)
    is left to the run."""
    target = spec.get("model") or name
    source = _library(target)
    if source is not None:
        try:
            source.check(target.removeprefix(source.PREFIX), spec)
        except ImportError as e:
            raise OpcostError(f"model {name}", f"{target}: {e.name or e} is not installed") from None
        except ValueError as e:
            raise OpcostError(f"model {name}", f"{target}: {e}") from None
        _check_size(name, target, lambda: source.build(target.removeprefix(source.PREFIX), spec), device)
    elif ":" in target:
        _import_callable(name, target)
    else:
        _check_kwargs(name, target, BUILTIN.get(target) or _torchvision_factory(name, target), spec)


def _check_kwargs(name: str, target: str, fn: Callable, spec: dict) -> None:
    """Refuse, in one line, a kwarg a torchvision or built-in constructor does not take (a typo such as
    ``num_classs``): the model built on the meta device, which allocates nothing. Anything else its build raises
    is left to the run."""
    kwargs = dict(spec.get("kwargs") or {})
    if not kwargs:
        return
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            fn(**kwargs)
    except TypeError as e:
        if "keyword argument" in str(e):
            raise OpcostError(f"model {name}", f"{target}: {e}: check its kwargs") from None
    except Exception:  # noqa: BLE001  a constructor may raise anything on the meta device: the run shows it
        return


def _build(name: str, spec: dict, device: str = "cpu") -> tuple[nn.Module, Callable | None]:
    """The module and, where its source knows them, its example inputs ``(batch, generator) -> tuple``. A timm or
    transformers model too large for the memory free on ``device`` is refused before it is built."""
    target = spec.get("model") or name
    kwargs = dict(spec.get("kwargs") or {})
    source = _library(target)
    if source is not None:
        def build():
            return source.build(target.removeprefix(source.PREFIX), spec)

        _check_size(name, target, build, device)
        try:
            return build()
        except ImportError as e:
            raise OpcostError(f"model {name}", f"{target}: {e.name or e} is not installed") from None
        except Exception as e:  # a model constructor may raise anything
            raise OpcostError(f"model {name}", f"{target}: {type(e).__name__}: {e}") from None
    if ":" in target:
        fn = _import_callable(name, target)
    elif target in BUILTIN:
        fn = BUILTIN[target]
    else:
        fn = _torchvision_factory(name, target)

    try:
        module = fn(**kwargs)
    except Exception as e:  # a user callable may raise anything
        raise OpcostError(f"model {name}", f"{target} raised {type(e).__name__}: {e}") from None
    if not isinstance(module, nn.Module):
        raise OpcostError(f"model {name}", f"{target} returned {type(module).__name__}, not a torch.nn.Module")
    example = getattr(module, "example_inputs", None)
    return module, example if callable(example) else None


def load_model(name: str, spec: dict, device: str = "cpu", dtype: str = "float32") -> LoadedModel:
    """Build model ``name`` from its config entry, with random weights, on ``device`` in ``dtype``."""
    torch.manual_seed(0)
    module, example = _build(name, spec, device)
    float_dtype = dtype_from_name(dtype)
    module = module.to(device=device, dtype=float_dtype)
    dev = torch.device(device)
    fmt = spec.get("memory_format")
    layout = torch.channels_last if fmt == "channels_last" else None
    if fmt == "channels_last":  # 4-D weights and images in NHWC order, as PyTorch's CPU performance guide advises
        module = module.to(memory_format=layout)

    shapes = spec.get("input_shapes")
    if shapes:
        example = None  # the entry's shapes win over the source's own inputs
    shapes = shapes or [[3, 224, 224]]
    in_dtype = dtype_from_name(spec.get("input_dtype") or dtype)
    lo, hi = spec.get("input_range") or [0, 2]

    def make_inputs(batch: int, seed: int = 0) -> tuple:
        gen = torch.Generator().manual_seed(seed)
        if example is not None:
            raw = example(batch, gen)
        elif in_dtype.is_floating_point:
            raw = tuple(torch.randn([batch, *s], generator=gen) for s in shapes)
        else:
            raw = tuple(torch.randint(lo, hi, [batch, *s], generator=gen) for s in shapes)
        out = tuple(t.to(dev, float_dtype) if t.is_floating_point() else t.to(dev) for t in raw)
        if fmt == "token_major":  # [B, C, H, W] as a view of [B, H x W, C] tokens, transposed
            return tuple(t.flatten(2).transpose(1, 2).contiguous().transpose(1, 2).view(t.shape) if t.dim() == 4
                         else t for t in out)
        return tuple(t.contiguous(memory_format=layout) if layout is not None and t.dim() == 4 else t for t in out)

    return LoadedModel(name, module, make_inputs)
