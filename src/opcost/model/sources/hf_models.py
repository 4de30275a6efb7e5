"""``hf:<architecture>``: a Hugging Face transformers model built from its config class, random weights, nothing
downloaded.

``<architecture>`` is a model class (``BertModel``, ``GPT2LMHeadModel``, ``T5EncoderModel``, ``ViTModel``...) or a
model type (``bert``, ``gpt2``, ``llama``...: the ``AutoModel`` of that type). The entry's ``kwargs`` override the
config's defaults (``num_hidden_layers``, ``hidden_size``, ``vocab_size``...); ``use_cache`` is off unless set, so a
decoder's forward pass is one step over the whole sequence without a key/value cache.

Inputs follow the model's ``main_input_name``: text models get token ids in ``[0, vocab_size)`` and an attention mask
of ones, ``seq_len`` tokens per sample (entry key ``seq_len``); encoder-decoder models get the same ids as decoder
inputs; vision models get pixel values of the config's ``num_channels`` × ``image_size``²; audio models taking raw
``input_values`` get ``seq_len`` samples. The model is wrapped in :class:`HFModel`, which passes the inputs by name,
so its module paths start with ``model.``.
"""
from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import nn

PREFIX = "hf:"
DEFAULT_SEQ_LEN = 128


class HFModel(nn.Module):
    """A transformers model called with its inputs by keyword (transformers' positional order differs between
    architectures); returns the model's output (a ``ModelOutput``)."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.input_names = input_names

    def forward(self, *inputs):
        return self.model(**dict(zip(self.input_names, inputs)))


def _model_class(arch: str):
    import transformers

    cls = getattr(transformers, arch, None)
    if isinstance(cls, type) and issubclass(cls, nn.Module) and getattr(cls, "config_class", None) is not None:
        return cls, cls.config_class()
    try:
        config = transformers.AutoConfig.for_model(arch)
    except ValueError:
        raise ValueError(f"{arch!r} is neither a transformers model class (BertModel, GPT2LMHeadModel...) nor a "
                         "model type (bert, gpt2, llama...)") from None
    return None, config


def configured(arch: str, entry: dict):
    """(model class or None for the type's AutoModel, its config with the entry's ``kwargs`` set); ValueError
    naming what does not exist."""
    cls, config = _model_class(arch)
    overrides = {"use_cache": False, **(entry.get("kwargs") or {})}
    for key, value in overrides.items():
        if key != "use_cache" and not hasattr(config, key):
            raise ValueError(f"{type(config).__name__} has no setting {key!r}")
        setattr(config, key, value)
    return cls, config


def check(arch: str, entry: dict) -> None:
    """Raise ValueError when ``arch`` is no transformers class or model type, or a kwarg no setting of its config."""
    configured(arch, entry)


def build(arch: str, entry: dict) -> tuple[nn.Module, Callable]:
    """The wrapped model of config entry ``entry`` and its ``example_inputs(batch, generator)``."""
    import transformers

    cls, config = configured(arch, entry)
    model = cls(config) if cls is not None else transformers.AutoModel.from_config(config)
    main = getattr(model, "main_input_name", "input_ids")
    params = inspect.signature(model.forward).parameters
    seq = int(entry.get("seq_len") or DEFAULT_SEQ_LEN)
    if main == "input_ids":
        vocab = int(getattr(config, "vocab_size", None) or 1000)
        names = ["input_ids"] + (["attention_mask"] if "attention_mask" in params else [])
        if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
            names.append("decoder_input_ids")

        def example_inputs(batch: int, generator: torch.Generator) -> tuple:
            ids = torch.randint(0, vocab, (batch, seq), generator=generator)
            extra = {"attention_mask": torch.ones_like(ids), "decoder_input_ids": ids}
            return (ids, *(extra[n] for n in names[1:]))
    elif main == "pixel_values":
        names = ["pixel_values"]
        size = getattr(config, "image_size", 224)
        size = tuple(size) if isinstance(size, (list, tuple)) else (size, size)
        channels = int(getattr(config, "num_channels", 3))

        def example_inputs(batch: int, generator: torch.Generator) -> tuple:
            return (torch.randn((batch, channels, *size), generator=generator),)
    elif main == "input_values":
        names = ["input_values"]

        def example_inputs(batch: int, generator: torch.Generator) -> tuple:
            return (torch.randn((batch, seq), generator=generator),)
    else:
        raise ValueError(f"{type(model).__name__} takes {main!r}, which opcost cannot synthesize: wrap it in a "
                         "module:callable whose module defines example_inputs(batch, generator)")
    return HFModel(model, tuple(names)), example_inputs
