"""``hf:<architecture>``: a Hugging Face transformers model built from its config class, random weights, nothing
downloaded.

``<architecture>`` is a model class (``BertModel``, ``GPT2LMHeadModel``, ``T5EncoderModel``, ``ViTModel``...) or a
model type (``bert``, ``gpt2``, ``llama``...: the ``AutoModel`` of that type). The entry's ``kwargs`` override the
config's defaults (``num_hidden_layers``, ``hidden_size``, ``vocab_size``...); ``use_cache`` is off unless set, so a
decoder's forward pass is one step over the whole sequence without a key/value cache (the ``inference`` mode at
``seq_len`` L is a prefill of L tokens).

A decoder (:func:`decoder_problem` says which models are) also steps a key/value cache, for the ``decode<L>`` modes
(:mod:`opcost.model.workload`): :meth:`HFModel.start_decode` fills a transformers ``DynamicCache`` with a prefill of L
tokens (untimed) and from then on each forward call is one generation step of one token per sequence over that
cache, called as ``generate()`` calls it (the token ids, their positions, the cache, ``use_cache``), after which the
cache is put back to its L tokens. Why ``DynamicCache`` and how it is put back: see :class:`DecodeState`.

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


def cache_argument(model) -> str | None:
    """The name of the key/value cache argument of a model's (or model class's) forward: ``cache`` (transformers 5),
    ``past_key_values`` (earlier), or None when it takes none."""
    params = inspect.signature(model.forward).parameters
    return next((n for n in ("cache", "past_key_values") if n in params), None)


class DecodeState:
    """The key/value cache a decoder steps, held at exactly ``context`` tokens.

    The cache is a ``DynamicCache``, what ``generate()`` builds by default (``cache_implementation`` unset;
    ``StaticCache`` is an opt-in, for compiled generation). Each layer's update concatenates the step's keys and values
    to the cached ones (``torch.cat``: reads the L cached tokens, writes L + 1 to fresh memory): that copy is part of a
    real step's cost, and the extracted step records it as an operator whose inputs are the cache tensors. After the
    step, :meth:`restore` puts every layer's attributes back as the prefill left them: its updates replace the
    tensors rather than writing into them, so the prefill's contiguous L-token tensors are intact, and the next step
    sees the cache exactly as a generation step at context L does (a contiguous tensor, the output of the previous
    step's ``cat``). ``DynamicCache.crop(-1)`` (transformers 5: a negative count of tokens to remove) would also leave
    L tokens, but as a strided view of the L + 1 token tensors, a layout generation never hands to the next step,
    and as two slicing operators per layer that a generation step does not run; restoring runs no operator.
    """

    def __init__(self, cache, argument: str, names: tuple[str, ...], prefill: torch.Tensor):
        self.cache, self.argument, self.names = cache, argument, names
        self.prefill = prefill  # the token ids the cache holds, (batch, context)
        self.context = int(prefill.shape[1])
        self.saved = [dict(vars(layer)) for layer in cache.layers]

    def kwargs(self) -> dict:
        return {self.argument: self.cache, "use_cache": True}

    def restore(self) -> None:
        for layer, saved in zip(self.cache.layers, self.saved):
            vars(layer).update(saved)

    def tensors(self) -> list[torch.Tensor]:
        """The cache's tensors (keys and values of every layer)."""
        return [t for layer in self.cache.layers for t in vars(layer).values() if isinstance(t, torch.Tensor)
                and t.dim() > 1]


class PrefillState:
    """``generate()``'s first call, repeated: a prompt of ``prompt`` tokens per sequence into a fresh, empty
    ``DynamicCache`` (the cache generate() builds), with the attention mask of ones a caller passes and, where the
    forward takes it, ``logits_to_keep=1`` (generate() asks for the last token's logits alone)."""

    def __init__(self, config, argument: str, names: tuple[str, ...], logits_to_keep: bool):
        self.config, self.argument, self.names = config, argument, names
        self.logits_to_keep = logits_to_keep

    def kwargs(self) -> dict:
        from transformers import DynamicCache

        return {self.argument: DynamicCache(config=self.config), "use_cache": True,
                **({"logits_to_keep": 1} if self.logits_to_keep else {})}

    def restore(self) -> None:
        pass

    def tensors(self) -> list[torch.Tensor]:
        return []


class HFModel(nn.Module):
    """A transformers model called with its inputs by keyword (transformers' positional order differs between
    architectures); returns the model's output (a ``ModelOutput``). After :meth:`start_decode`, each call is one
    decode step over a key/value cache of fixed length (``decoding``: the :class:`DecodeState`); after
    :meth:`start_prefill`, one prefill of a prompt into an empty cache (a :class:`PrefillState`)."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...], vocab: int = 1000):
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.vocab = vocab
        self.decoding: DecodeState | None = None

    def forward(self, *inputs):
        if self.decoding is None:
            return self.model(**dict(zip(self.input_names, inputs)))
        state = self.decoding
        try:
            return self.model(**dict(zip(state.names, inputs)), **state.kwargs())
        finally:
            state.restore()

    def _decoder(self):
        """(the cache argument's name, the decoder's text config); ValueError when the model is no decoder."""
        argument = cache_argument(self.model)
        if argument is None or self.model.main_input_name != "input_ids":
            raise ValueError(f"{type(self.model).__name__} is no decoder: its forward takes no key/value cache")
        config = self.model.config
        return argument, config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config

    def start_prefill(self, batch: int, prompt: int) -> Callable[[int, int], tuple]:
        """Make every later call ``generate()``'s prefill of ``prompt`` random tokens per sequence
        (:class:`PrefillState`); returns its ``make_inputs(batch, seed)``: the token ids and, where the forward takes
        one, an attention mask of ones. ValueError when the model is no decoder."""
        argument, text = self._decoder()
        params = inspect.signature(self.model.forward).parameters
        names = ("input_ids", "attention_mask") if "attention_mask" in params else ("input_ids",)
        self.decoding = PrefillState(text, argument, names, "logits_to_keep" in params)
        device = next(self.model.parameters()).device
        vocab = self.vocab

        def make_inputs(step_batch: int, seed: int = 0) -> tuple:
            ids = torch.randint(0, vocab, (step_batch, prompt), generator=torch.Generator().manual_seed(seed))
            ids = ids.to(device)
            return (ids, torch.ones_like(ids))[:len(names)]

        return make_inputs

    def start_decode(self, batch: int, context: int) -> Callable[[int, int], tuple]:
        """Fill a key/value cache with a prefill of ``context`` random tokens per sequence (untimed, under
        ``torch.inference_mode()``) and make every later call one decode step over it; returns the steps'
        ``make_inputs(batch, seed)``: one token id per sequence and, where the forward takes them, its position
        (``context``), as ``generate()`` passes them (it drops an attention mask of ones). ValueError when the model
        is no decoder or its cache does not fill."""
        from transformers import DynamicCache

        argument, text = self._decoder()
        self.decoding = None
        device = next(self.model.parameters()).device
        cache = DynamicCache(config=text)
        ids = torch.randint(0, self.vocab, (batch, context), generator=torch.Generator().manual_seed(0)).to(device)
        with torch.inference_mode():
            self.model(input_ids=ids, **{argument: cache, "use_cache": True})
        if cache.get_seq_length() != context:
            raise ValueError(f"{type(self.model).__name__} left {cache.get_seq_length()} tokens in its key/value "
                             f"cache after a prefill of {context}: it does not decode with a cache")
        params = inspect.signature(self.model.forward).parameters
        names = ("input_ids", "position_ids") if "position_ids" in params else ("input_ids",)
        self.decoding = DecodeState(cache, argument, names, ids)
        vocab = self.vocab

        def make_inputs(step_batch: int, seed: int = 0) -> tuple:
            if step_batch != batch:
                raise ValueError(f"the cache holds {batch} sequences, not {step_batch}")
            ids = torch.randint(0, vocab, (batch, 1), generator=torch.Generator().manual_seed(seed)).to(device)
            return (ids, torch.full((batch, 1), context, device=device))[:len(names)]

        return make_inputs

    def carried_tensors(self, inputs=()) -> list[torch.Tensor]:
        """The key/value cache while decoding (:meth:`DecodeState.tensors`), else none: what a decode step reads that
        the step before it (or the prefill) wrote (:meth:`opcost.model.workload.Workload.carried`)."""
        return self.decoding.tensors() if self.decoding is not None else []

    def stop_decode(self) -> None:
        """Back to plain forward passes over the inputs, without a cache."""
        self.decoding = None


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
    for key in overrides:
        if key != "use_cache" and not hasattr(config, key):
            raise ValueError(f"{type(config).__name__} has no setting {key!r}")
    for key, value in overrides.items():  # a count or size below zero builds, then fails far from its cause
        default = getattr(config, key, None)
        if (isinstance(default, int) and not isinstance(default, bool) and default > 0 and isinstance(value, int)
                and not isinstance(value, bool) and value < 0):
            raise ValueError(f"{type(config).__name__} setting {key!r} is {value}: it counts or sizes something "
                             f"(default {default}), so it must be 0 or more")
    # built by its config class from the kwargs, as transformers builds LlamaConfig(hidden_size=256, ...): settings
    # derived from others follow them (Llama's and Mistral's head_dim, hidden_size / num_attention_heads, stayed at
    # the full-size model's 128 when the kwargs were set on a default config)
    try:
        return cls, type(config)(**overrides)
    except Exception as e:  # noqa: BLE001  transformers' own validation (a str for an int, an inconsistent set)
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise ValueError(f"{type(config).__name__}: {lines[-1] if lines else type(e).__name__}: check its "
                         "kwargs") from None


def _built_class(cls, config):
    """The class :func:`build` builds: ``cls``, or the ``AutoModel`` class of the config's model type (None where
    transformers does not say)."""
    if cls is not None:
        return cls
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(getattr(config, "model_type", None))
    return getattr(transformers, name, None) if isinstance(name, str) else None


def generate_problem(arch: str, entry: dict) -> str | None:
    """Why Hugging Face ``generate()`` cannot run ``hf:<arch>`` (config ``generate``, ``--mode generate``): a class
    without a language-model head (a model type's ``AutoModel``, e.g. ``LlamaModel``); None when it can."""
    cls, config = configured(arch, entry)
    built = _built_class(cls, config)
    if built is None or not callable(getattr(built, "can_generate", None)) or not built.can_generate():
        name = built.__name__ if built is not None else arch
        return (f"hf:{arch} builds {name}, which has no language-model head to generate() with: name its causal-LM "
                "class (e.g. hf:LlamaForCausalLM, hf:GPT2LMHeadModel)")
    return None


def decoder_problem(arch: str, entry: dict) -> str | None:
    """Why ``hf:<arch>`` cannot be stepped as a decoder over a key/value cache (the ``decode`` mode), from its class
    and config without building it; None when it can. A decoder: a model type transformers has a causal LM of
    (an encoder such as BERT only with ``is_decoder: true`` in its kwargs), not an encoder-decoder, taking token ids
    and a cache."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    cls, config = configured(arch, entry)
    built = _built_class(cls, config)
    name = built.__name__ if built is not None else arch
    kind = getattr(config, "model_type", None)
    if getattr(config, "is_encoder_decoder", False) and not name.endswith("ForCausalLM"):
        return f"{name} is an encoder-decoder model; decode steps a decoder (gpt2, llama, a *ForCausalLM class...)"
    if built is not None and getattr(built, "main_input_name", "input_ids") != "input_ids":
        return f"{name} takes {built.main_input_name}, not token ids: it is no text decoder"
    if built is not None and cache_argument(built) is None:
        return f"{name}'s forward takes no key/value cache: it is no decoder"
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return f"{name} is no decoder (transformers has no causal language model of type {kind!r})"
    if kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False):
        return f"{name} is an encoder (kwargs is_decoder: true makes it a decoder)"
    return None


def sequence_limits(arch: str, entry: dict) -> dict:
    """What bounds a sequence of ``hf:<arch>`` built from ``entry``, from its config without building it:
    ``positions``, the longest sequence a model of learned absolute positions takes (None: rotary or relative
    positions, no fixed limit); ``kv_elements``, elements of key/value cache per token (None: not said); ``params``
    and ``attention``, FLOPs per token of its matrix products and per token and context token of its attention
    (estimates from its widths, for bounding a prefill's time)."""
    _, config = configured(arch, entry)
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config

    def first(*names):
        return next((v for v in (getattr(cfg, n, None) for n in names) if isinstance(v, int) and v > 0), None)

    rotary = any(getattr(cfg, a, None) for a in ("rope_theta", "rope_parameters", "rope_scaling", "rotary_dim"))
    layers, hidden = first("num_hidden_layers", "n_layer", "num_layers"), first("hidden_size", "n_embd", "d_model")
    heads = first("num_attention_heads", "n_head")
    head_dim = first("head_dim") or (hidden // heads if hidden and heads else None)
    kv_heads = first("num_key_value_heads") or heads
    known = bool(layers and hidden and heads and head_dim)
    return {"positions": None if rotary else first("n_positions", "max_position_embeddings"),
            "kv_elements": 2 * layers * kv_heads * head_dim if known else None,
            "params": 2 * 12 * layers * hidden * hidden if known else None,
            "attention": 4 * layers * heads * head_dim if known else None}


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
    return HFModel(model, tuple(names), int(getattr(config, "vocab_size", None) or 1000)), example_inputs
