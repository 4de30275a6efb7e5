"""``timm:<name>``: a timm model by name, random weights (``pretrained=False``), nothing downloaded.

The entry's ``kwargs`` go to ``timm.create_model`` (``num_classes``, ``img_size``, ``drop_path_rate``...). Example
inputs are pixel tensors of the model's own input size (its pretrained config's ``input_size``; for a
patch-embedding model the image size it was built for, which ``img_size`` sets), unless the entry sets
``input_shapes``.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

PREFIX = "timm:"


def check(name: str, entry: dict) -> None:
    """Raise ValueError when timm has no model ``name`` (ImportError when timm is not installed)."""
    import timm

    if name not in timm.list_models():
        close = timm.list_models(f"*{name}*")[:5]
        raise ValueError(f"timm has no model {name!r}" + (f" (similar: {', '.join(close)})" if close else ""))


def build(name: str, entry: dict) -> tuple[nn.Module, Callable]:
    """The model of config entry ``entry`` and its ``example_inputs(batch, generator)``."""
    import timm

    kwargs = dict(entry.get("kwargs") or {})
    check(name, entry)
    module = timm.create_model(name, pretrained=False, **kwargs)
    size = tuple(timm.data.resolve_model_data_config(module)["input_size"])
    fixed = getattr(getattr(module, "patch_embed", None), "img_size", None)
    if fixed is not None:  # a patch-embedding model is built for one image size, which kwargs may change
        size = (size[0], *((fixed, fixed) if isinstance(fixed, int) else fixed))

    def example_inputs(batch: int, generator: torch.Generator) -> tuple:
        return (torch.randn((batch, *size), generator=generator),)

    return module, example_inputs
