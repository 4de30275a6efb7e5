"""Operator sweeps: operator configurations chosen independently of any model (config ``sweeps``), measured under
the same conditions as the models' operators so that their costs are interchangeable.

Each sweep point is a small model, a **chain** of ``depth`` identical layers that keep their shape (stride 1,
"same" padding; a point whose layer changes the shape is a chain of one), so that every layer reads its
producer's freshly written output, as inside a model. The point becomes an ordinary model entry
(``model: opcost.model.sweeps:chain``) named ``sweep-<op>-<values>``: it is extracted, catalogued and profiled in
rotation like any workload's operators, but is not a validation workload (no end-to-end, in-situ or trace jobs;
:func:`opcost.config.workloads` leaves it out). Its configurations are profiled in the loop's first iteration
whatever their op type.

A point of a sweep with ``evict: true`` (its name ends in ``-evict``) ends each iteration of its chain with one
more layer, ``SweepEvict``, which writes twice the last-level cache: inside a model whose weights exceed the caches
a layer's weights are gone from them by its next call, and so they are in the chain's rotation (a 256 -> 256 Linear
over 128 rows on one thread: 172 µs when called again at once, 270 µs after 64 MiB of other traffic). Its own
configuration is measured too, under its own op type, which no model has.

A point of a sweep with ``block: true`` (its name ends in ``-block``) builds each layer of its chain as a CNN block
around its operator (:data:`opcost.model.sweeps.BLOCK_OPS`): a normalisation or an activation after a 1x1
convolution (and a normalisation), a convolution before a normalisation and a ReLU. Inside a CNN a small operator
follows a convolution, whose threads and caches it inherits; after another call of itself it costs a third to a
half of that (a ReLU6 of 64 x 28 x 28 on two threads: about 3.6 times as long after a convolution and a
normalisation as after itself; benchmarks/records/measurements.md). The block's other operators are measured too.

In training, a chain's input requires grad, as the activations inside a model do: a chain of parameter-free
layers (ReLU, pooling, concat, attention) would otherwise have nothing to back-propagate.

Sampling: a sweep's ``grid`` (parameter -> values) is taken whole, or, with ``samples: N``, as N points drawn
without replacement with a fixed seed; or its ``points`` are listed. ``opcost sweep suggest`` lists the points of a
grid where a database's cost model is least certain (:mod:`opcost.analysis.sampling`), to be pasted as ``points``:
the choice depends on a database, so it is made between runs, never silently inside one.

Operators (parameters; default value): ``Conv2d`` (channels 32, kernel 3, stride 1, groups 1, size 28, ratio 1:
with a ratio, each layer is a pair that widens to ratio x channels and narrows back, as the 1x1 convolutions of a
MobileNet block do),
``Linear`` (features 256, rows 1), ``mlp`` (features 256, rows 64, ratio 4, act 0: Linear to ratio x features,
GELU, Linear back, as in a transformer's feed-forward block; the Linear layers of other widths that a chain of
identical shape-keeping layers cannot hold; ``act`` 1: GELU's tanh approximation computed in Python as GPT-2's
``NewGELUActivation`` computes it, :class:`TanhGELU`), ``gated_mlp`` (features 256, rows 64, inter 688: the gated
feed-forward block of Llama, Qwen2 and Mistral, gate and up Linears to ``inter``, SiLU, ``mul``, down Linear, no
biases), ``lm_head`` (features 256, rows 64, vocab 32000: a language-model head, one Linear from ``features`` to
``vocab`` logits without bias, a chain of one; at 128 rows and vocabulary 32000 its output is 16 MiB per sample and
its weight 32 MiB at 256 features, beyond a 32 MiB last-level cache from batch 2 or 512 features on),
``attention`` (seq 128, heads 4, head_dim 32, heads_kv 0, causal 0: q, k and v three interleaved slices of a
packed input, as a fused qkv projection writes them in ViTs and BERTs, one ``scaled_dot_product_attention``; with
q = k = v the call read a third of the memory and measured 373 µs where vit_tiny's call of the same shape
measured 602 µs; with ``heads_kv`` below ``heads`` (grouped-query attention: it must divide ``heads``; 0 means
``heads``) or ``causal`` 1, q, k and v are consecutive slices, each viewed and transposed to [batch, heads, seq,
head_dim] as the separate projections of a Hugging Face decoder leave them, and SDPA is called as transformers 5's
``sdpa_attention_forward`` calls it without a mask: ``is_causal``, ``scale``, and ``enable_gqa`` where ``heads_kv``
< ``heads``, keys and values at ``heads_kv`` heads, no ``repeat_kv`` copy), ``decode_attention`` (context 512,
heads 4, head_dim 64, heads_kv 0: a generation step's attention over a key/value cache, as a Hugging Face decoder
runs it with transformers' ``DynamicCache``: per layer, the step's one new token's keys and values concatenated to
the layer's ``context`` cached ones (``torch.cat`` along the tokens, the cache's update) and SDPA of its queries
over them, not causal, ``enable_gqa`` where ``heads_kv`` < ``heads``; each layer's cache is an input of the point,
made by no operator of the step, as a prefill's is; its points are inference workloads, a decode step's operators
being inference operators), ``rotary`` (seq 128, heads 4, head_dim
64: rotary position embeddings as ``apply_rotary_pos_emb`` applies them to a decoder layer's queries or keys, the
aten ops mul, slice, neg, cat, mul, add at [batch, heads, seq, head_dim] on a head-split (strided) view, ``depth``
times, after one :class:`SweepRotaryEmbedding` call that computes the cosines and sines as
``LlamaRotaryEmbedding`` does), ``LayerNorm`` and ``RMSNorm`` (features 256, rows 64; ``RMSNorm``:
:class:`SweepRMSNorm`, computed as ``LlamaRMSNorm`` computes it), ``BatchNorm2d``,
``ReLU``, ``GELU``, ``SiLU``, ``Hardswish``, ``Sigmoid``, ``Hardsigmoid``, ``add`` (x + x; channels 32, size 28
for these), ``AdaptiveAvgPool2d`` (to one value per channel, a chain of one), ``se`` (torchvision's
``SqueezeExcitation`` as MobileNetV3 and EfficientNet run it: adaptive average pool, a 1x1 convolution to channels /
``squeeze``, activation, a 1x1 convolution back, a gate, the input times the gate (an ``aten::mul``); ``act`` 0:
ReLU and Hardsigmoid (MobileNetV3), 1: SiLU and Sigmoid (EfficientNet); squeeze 4), ``MaxPool2d`` (also kernel 3,
stride 1; padding kernel // 2), ``cat`` (also parts 2: the input's channels in ``parts`` chunks concatenated again, the
channel concat of a block's branches as in SqueezeNet's fire modules, Inception or DenseNet), ``Dropout`` (also p
0.1; an identity in inference, a random mask in training), ``Embedding`` (num 1000, dim 128, rows 64: ``rows``
token ids per sample looked up in a ``num`` x ``dim`` table, a chain of one; in training its backward writes the
table's dense gradient) and ``EmbeddingBag`` (num 1000, dim 32, rows 4: a bag of ``rows`` ids per sample, summed,
passed as DLRM and TorchRec pass them: the ids of the batch in one flat tensor and the offsets where each bag
starts; ``depth`` tables looked up one after the other and their vectors stacked, as a recommender's sparse
features are: the lookups are microseconds, and a lone call in a rotation measured 9 to 32 µs for the work that
took 12 to 14 µs per call among tiny_dlrm's eight). The image operators (``Conv2d`` and those with ``channels`` and
``size``) also take ``channels_last`` (0; 1: the chain's weights and input in NHWC order, the model entry's
``memory_format: channels_last``, as in a model converted to it or in ConvNeXt's blocks, whose channels-last
LayerNorm leaves its output so; 2: its input token-major, ``memory_format: token_major``, weights in NCHW order: a
transformer's tokens ``[B, N, C]`` transposed and viewed as an image, as the depthwise convolutions of PVT-v2,
SegFormer, CoaT and XCiT read them; at batch 1 PyTorch reads that view as neither order and copies it to NCHW first,
at batch 8 as channels last; only a chain's first layer reads it, the others their predecessor's output). The
batch size of a point is its grid's ``batch`` values (default: the config's ``batch_sizes``).
"""
from __future__ import annotations

import itertools
import json
import random

from opcost.errors import OpcostError

MODEL = "opcost.model.sweeps:chain"
PREFIX = "sweep-"
EVICTED = "-evict"  # the name's suffix of a point whose chain ends each iteration by evicting the caches
BLOCKED = "-block"  # the name's suffix of a point whose chain's layers are CNN blocks (opcost.model.sweeps.BLOCK_OPS)
_SPATIAL = {"channels": 32, "size": 28, "channels_last": 0}
DEFAULTS = {
    "Conv2d": {"channels": 32, "kernel": 3, "stride": 1, "groups": 1, "size": 28, "ratio": 1, "channels_last": 0},
    "Linear": {"features": 256, "rows": 1},
    "mlp": {"features": 256, "rows": 64, "ratio": 4, "act": 0},
    "gated_mlp": {"features": 256, "rows": 64, "inter": 688},
    "lm_head": {"features": 256, "rows": 64, "vocab": 32000},
    "attention": {"seq": 128, "heads": 4, "head_dim": 32, "heads_kv": 0, "causal": 0},
    "decode_attention": {"context": 512, "heads": 4, "head_dim": 64, "heads_kv": 0},
    "rotary": {"seq": 128, "heads": 4, "head_dim": 64},
    "LayerNorm": {"features": 256, "rows": 64},
    "RMSNorm": {"features": 256, "rows": 64},
    "BatchNorm2d": dict(_SPATIAL),
    "batch_norm_stats": {"channels": 64, "features": 576},
    "ReLU": dict(_SPATIAL),
    "GELU": dict(_SPATIAL),
    "SiLU": dict(_SPATIAL),
    "Hardswish": dict(_SPATIAL),
    "Sigmoid": dict(_SPATIAL),
    "Hardsigmoid": dict(_SPATIAL),
    "AdaptiveAvgPool2d": dict(_SPATIAL),
    "se": {**_SPATIAL, "squeeze": 4, "act": 0},
    "MaxPool2d": {**_SPATIAL, "kernel": 3, "stride": 1},
    "add": dict(_SPATIAL),
    "cat": {**_SPATIAL, "parts": 2},
    "Dropout": {**_SPATIAL, "p": 0.1},
    "Embedding": {"num": 1000, "dim": 128, "rows": 64},
    "EmbeddingBag": {"num": 1000, "dim": 32, "rows": 4},
}
_LOOKUPS = ("Embedding", "EmbeddingBag")  # ops whose input is ids below the table's size
OPS = tuple(DEFAULTS)
_SHORT = {"channels": "c", "kernel": "k", "stride": "s", "groups": "g", "size": "h", "features": "f", "rows": "r",
          "seq": "l", "heads": "n", "head_dim": "d", "ratio": "x", "parts": "p", "p": "p", "num": "v", "dim": "e",
          "channels_last": "nhwc", "act": "a", "inter": "i", "vocab": "vocab", "heads_kv": "kv", "causal": "causal",
          "context": "ctx", "squeeze": "q"}
_FLOAT = {"p"}  # parameters that are not integers


def input_shapes(op: str, p: dict, depth: int) -> list[list[int]]:
    """Per-sample shapes of a point's inputs: its one input, and for ``decode_attention`` also each layer's cached
    keys and values (``2 x depth`` tensors of ``context`` tokens at ``heads_kv`` heads)."""
    p = {**DEFAULTS[op], **p}
    if op == "decode_attention":
        cached = [p["heads_kv"] or p["heads"], p["context"], p["head_dim"]]
        return [input_shape(op, p)] + [list(cached) for _ in range(2 * depth)]
    return [input_shape(op, p)]


def input_shape(op: str, p: dict) -> list[int]:
    """Per-sample shape of a point's (first) input."""
    p = {**DEFAULTS[op], **p}
    if op in ("Linear", "LayerNorm", "RMSNorm", "mlp", "gated_mlp", "lm_head"):
        return [p["rows"], p["features"]]
    if op == "batch_norm_stats":
        return [p["channels"], p["features"]]
    if op == "attention":
        return [p["seq"], (p["heads"] + 2 * (p["heads_kv"] or p["heads"])) * p["head_dim"]]
    if op == "decode_attention":  # one new token's queries, keys and values
        return [1, (p["heads"] + 2 * (p["heads_kv"] or p["heads"])) * p["head_dim"]]
    if op == "rotary":
        return [p["seq"], p["heads"] * p["head_dim"]]
    if op in _LOOKUPS:
        return [p["rows"]]
    return [p["channels"], p["size"], p["size"]]


def points(sweep: dict) -> list[dict]:
    """The parameter sets of one sweep entry (``batch`` included where the grid has it): its ``points`` as listed,
    or its ``grid`` (whole, or ``samples`` of it)."""
    if sweep.get("points") and (sweep.get("grid") or sweep.get("samples")):
        both = "grid" if sweep.get("grid") else "samples"
        raise OpcostError(f"config: sweeps: {sweep['op']}", f"gives both points and {both}: points are measured in "
                                                            "place of a grid, so give one (two entries for both)")
    if sweep.get("points"):
        return [dict(p) for p in sweep["points"]]
    grid = sweep.get("grid") or {}
    keys = sorted(grid)
    combos = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    if sweep.get("op") in DEFAULTS:  # combinations no layer can take (groups that do not divide the channels...)
        possible = [c for c in combos if impossible(sweep["op"], c) is None]
        if combos and not possible:  # a grid of nothing: said, never a sweep that silently measures nothing
            raise OpcostError(f"config: sweeps: {sweep['op']} grid {json.dumps(grid, sort_keys=True)}",
                              f"no combination can be built ({impossible(sweep['op'], combos[0])}): change its values")
        combos = possible
    n = sweep.get("samples")
    if n is not None and n < len(combos):
        combos = random.Random(0).sample(combos, n)
    return combos


def impossible(op: str, point: dict) -> str | None:
    """Why a listed point of ``op`` cannot be built (None: it can): groups that do not divide a convolution's
    channels, key/value heads that do not divide the heads (a grid leaves such combinations out), a
    ``channels_last`` other than 0, 1 or 2."""
    q = {**DEFAULTS[op], **point}
    if "channels_last" in q and q["channels_last"] not in (0, 1, 2):
        return f"channels_last {q['channels_last']}: 0 (NCHW), 1 (input and weights channels last) or 2 (input alone)"
    if op == "Conv2d":
        g, c = int(q["groups"]), int(q["channels"])
        if g < 1 or c % g:
            return f"groups {g} must divide channels {c}"
    if op in ("attention", "decode_attention"):
        h, kv = int(q["heads"]), int(q["heads_kv"]) or int(q["heads"])
        if kv < 1 or h % kv:
            return f"heads_kv {kv} must divide heads {h}"
    return None


def model_entries(sweeps: list, batch_sizes: list[int], modes: list[str]) -> dict[str, dict]:
    """Config model entries, one per point of every sweep (``name -> entry``)."""
    out = {}
    for sweep in sweeps or []:
        op, depth, evict = sweep["op"], int(sweep.get("depth", 4)), bool(sweep.get("evict", False))
        block = bool(sweep.get("block", False))
        for p in points(sweep):
            unknown = sorted(set(p) - set(DEFAULTS[op]) - {"batch"})
            if unknown:
                raise OpcostError(f"config: sweeps: {op}", f"unknown parameter(s) {', '.join(unknown)} (it takes "
                                                           f"{', '.join([*DEFAULTS[op], 'batch'])})")
            why = impossible(op, p)
            if why:
                raise OpcostError(f"config: sweeps: {op} point {json.dumps(p, sort_keys=True)}", why)
            batch = p.pop("batch", None)
            shape = {k: float(v) if k in _FLOAT else int(v) for k, v in p.items()}
            name = PREFIX + op + "-" + "-".join(f"{_SHORT.get(k, k)}{v}" for k, v in sorted(shape.items())) + \
                (BLOCKED if block else "") + (EVICTED if evict else "")
            entry = out.setdefault(name, {"model": MODEL, "kwargs": {"op": op, "depth": depth, **shape,
                                                                      **({"evict": 1} if evict else {}),
                                                                      **({"block": 1} if block else {})},
                                          "input_shapes": input_shapes(op, shape, depth),
                                          "modes": list(sweep.get("modes") or modes), "batch_sizes": []})
            if op in _LOOKUPS:  # token ids below the table's size
                entry.update(input_dtype="int64", input_range=[0, {**DEFAULTS[op], **shape}["num"]])
            if shape.get("channels_last"):
                entry["memory_format"] = "channels_last" if shape["channels_last"] == 1 else "token_major"
            for b in ([batch] if batch is not None else batch_sizes):
                if int(b) not in entry["batch_sizes"]:
                    entry["batch_sizes"].append(int(b))
    return out


def is_sweep(entry: dict) -> bool:
    """Whether a config model entry is a sweep point."""
    return entry.get("model") == MODEL
