"""Operator sweeps: operator configurations chosen independently of any model (config ``sweeps``), measured under
the same conditions as the models' operators so that their costs are interchangeable.

Each sweep point is a small model, a **chain** of ``depth`` identical layers that keep their shape (stride 1,
"same" padding; a point whose layer changes the shape is a chain of one), so that every layer reads its
producer's freshly written output, as inside a model. The point becomes an ordinary model entry
(``model: opcost.model.sweeps:chain``) named ``sweep-<op>-<values>``: it is extracted, catalogued and profiled in
rotation like any workload's operators, but is not a validation workload (no end-to-end, in-situ or trace jobs;
:func:`opcost.config.workloads` leaves it out). Its configurations are profiled in the loop's first iteration
whatever their op type.

In training, a chain's input requires grad, as the activations inside a model do: a chain of parameter-free
layers (ReLU, pooling, concat, attention) would otherwise have nothing to back-propagate.

Sampling: a sweep's ``grid`` (parameter -> values) is taken whole, or, with ``samples: N``, as N points drawn
without replacement with a fixed seed; or its ``points`` are listed. ``opcost sweep suggest`` lists the points of a
grid where a database's cost model is least certain (:mod:`opcost.analysis.sampling`), to be pasted as ``points``:
the choice depends on a database, so it is made between runs, never silently inside one.

Operators (parameters; default value): ``Conv2d`` (channels 32, kernel 3, stride 1, groups 1, size 28, ratio 1:
with a ratio, each layer is a pair that widens to ratio x channels and narrows back, as the 1x1 convolutions of a
MobileNet block do),
``Linear`` (features 256, rows 1), ``mlp`` (features 256, rows 64, ratio 4: Linear to ratio x features, GELU,
Linear back, as in a transformer's feed-forward block; the Linear layers of other widths that a chain of identical
shape-keeping layers cannot hold), ``attention`` (seq 128, heads 4, head_dim 32: q, k and v three interleaved
slices of a packed input, as a fused qkv projection writes them in ViTs and BERTs, one
``scaled_dot_product_attention``; with q = k = v the call read a third of the memory and measured 373 µs where
vit_tiny's call of the same shape measured 602 µs), ``LayerNorm`` (features 256, rows 64), ``BatchNorm2d``,
``ReLU``, ``GELU``, ``add`` (x + x; channels 32, size 28 for these four), ``MaxPool2d`` (also kernel 3, stride 1;
padding kernel // 2), ``cat`` (also parts 2: the input's channels in ``parts`` chunks concatenated again, the
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
LayerNorm leaves its output so). The batch size of a point is its grid's ``batch`` values
(default: the config's ``batch_sizes``).
"""
from __future__ import annotations

import itertools
import random

import torch
from torch import nn
from torch.nn import functional as F

from opcost.errors import OpcostError

MODEL = "opcost.model.sweeps:chain"
PREFIX = "sweep-"
_SPATIAL = {"channels": 32, "size": 28, "channels_last": 0}
DEFAULTS = {
    "Conv2d": {"channels": 32, "kernel": 3, "stride": 1, "groups": 1, "size": 28, "ratio": 1, "channels_last": 0},
    "Linear": {"features": 256, "rows": 1},
    "mlp": {"features": 256, "rows": 64, "ratio": 4},
    "attention": {"seq": 128, "heads": 4, "head_dim": 32},
    "LayerNorm": {"features": 256, "rows": 64},
    "BatchNorm2d": dict(_SPATIAL),
    "ReLU": dict(_SPATIAL),
    "GELU": dict(_SPATIAL),
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
          "channels_last": "nhwc"}
_FLOAT = {"p"}  # parameters that are not integers


def _differentiable(module: nn.Module, x):
    """``x``, made to require grad in training: inside a model, the activations these layers read require grad (the
    layers before them have parameters), and a chain of parameter-free layers (ReLU, pooling, concat) would
    otherwise have nothing to back-propagate. The input is a leaf the workload made; the flag is set in place."""
    if module.training and torch.is_grad_enabled() and x.is_floating_point() and not x.requires_grad:
        x.requires_grad_(True)
    return x


class _Chain(nn.Sequential):
    """Identical layers in sequence (:func:`_differentiable` input)."""

    def forward(self, x):
        return super().forward(_differentiable(self, x))


class _Bags(nn.Module):
    """``depth`` sum-pooled EmbeddingBag tables, each called with the flat ids and bag offsets of ``x`` (ids, one
    bag per row), their vectors stacked per sample."""

    def __init__(self, num: int, dim: int, depth: int):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(num, dim, mode="sum") for _ in range(depth))

    def forward(self, x):
        ids, offsets = x.reshape(-1), torch.arange(0, x.numel(), x.shape[-1], device=x.device)
        return torch.stack([bag(ids, offsets) for bag in self.bags], dim=1)


class _Functional(nn.Module):
    """A chain of an operator called outside leaf modules (attention, cat, add); its child makes it a non-leaf."""

    def __init__(self, op: str, depth: int, heads: int = 1, parts: int = 2):
        super().__init__()
        self.op, self.depth, self.heads, self.parts = op, depth, heads, parts
        self.keep = nn.Identity()

    def forward(self, x):
        x = self.keep(_differentiable(self, x))
        for _ in range(self.depth):
            if self.op == "attention":  # x: packed q, k, v per token, as a fused qkv projection writes them
                b, n, e3 = x.shape
                q, k, v = x.view(b, n, 3, self.heads, e3 // (3 * self.heads)).permute(2, 0, 3, 1, 4).unbind(0)
                out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, e3 // 3)
                x = out.repeat(1, 1, 3)  # the next layer's q, k and v: three tensors' worth of memory, as in a model
            elif self.op == "cat":
                x = torch.cat(x.chunk(self.parts, dim=1), dim=1)
            else:
                x = x + x
        return x


def chain(op: str, depth: int = 4, **p) -> nn.Module:
    """The sweep point's model: ``depth`` identical ``op`` layers with parameters ``p`` (see :data:`DEFAULTS`)."""
    p = {**DEFAULTS[op], **p}
    if op in ("Conv2d", "MaxPool2d") and p["stride"] != 1:
        depth = 1  # the layer changes the shape: a chain of one
    if op == "Conv2d":
        c, k, s, g, r = p["channels"], p["kernel"], p["stride"], p["groups"], p["ratio"]

        def conv(cin, cout, stride=1):
            return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=g)

        # with a ratio, a layer widens to ratio x channels and narrows back, as a MobileNet block's 1x1 convolutions
        layer = (lambda: conv(c, c, s)) if r == 1 else (lambda: nn.Sequential(conv(c, c * r, s), conv(c * r, c)))
        return _Chain(*(layer() for _ in range(depth)))
    if op == "Linear":
        return _Chain(*(nn.Linear(p["features"], p["features"]) for _ in range(depth)))
    if op == "Embedding":  # token ids in, vectors out: a chain of one
        return _Chain(nn.Embedding(p["num"], p["dim"]))
    if op == "EmbeddingBag":
        return _Bags(p["num"], p["dim"], depth)
    if op == "LayerNorm":
        return _Chain(*(nn.LayerNorm(p["features"]) for _ in range(depth)))
    if op == "mlp":  # a transformer's feed-forward block: the one Linear pair a shape-keeping chain can hold
        f, wide = p["features"], p["features"] * p["ratio"]
        return _Chain(*(nn.Sequential(nn.Linear(f, wide), nn.GELU(), nn.Linear(wide, f))
                        for _ in range(depth)))
    layer = {"BatchNorm2d": lambda: nn.BatchNorm2d(p["channels"]), "ReLU": nn.ReLU, "GELU": nn.GELU,
             "MaxPool2d": lambda: nn.MaxPool2d(p["kernel"], stride=p["stride"], padding=p["kernel"] // 2),
             "Dropout": lambda: nn.Dropout(p["p"])}.get(op)
    if layer is not None:
        return _Chain(*(layer() for _ in range(depth)))
    return _Functional(op, depth, p.get("heads", 1), p.get("parts", 2))


def input_shape(op: str, p: dict) -> list[int]:
    """Per-sample input shape of a point."""
    p = {**DEFAULTS[op], **p}
    if op in ("Linear", "LayerNorm", "mlp"):
        return [p["rows"], p["features"]]
    if op == "attention":
        return [p["seq"], 3 * p["heads"] * p["head_dim"]]
    if op in _LOOKUPS:
        return [p["rows"]]
    return [p["channels"], p["size"], p["size"]]


def points(sweep: dict) -> list[dict]:
    """The parameter sets of one sweep entry (``batch`` included where the grid has it): its ``points`` as listed,
    or its ``grid`` (whole, or ``samples`` of it)."""
    if sweep.get("points"):
        return [dict(p) for p in sweep["points"]]
    grid = sweep.get("grid") or {}
    keys = sorted(grid)
    combos = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    if sweep.get("op") == "Conv2d":  # groups must divide the channels
        combos = [c for c in combos if c.get("channels", 32) % c.get("groups", 1) == 0]
    n = sweep.get("samples")
    if n is not None and n < len(combos):
        combos = random.Random(0).sample(combos, n)
    return combos


def model_entries(sweeps: list, batch_sizes: list[int], modes: list[str]) -> dict[str, dict]:
    """Config model entries, one per point of every sweep (``name -> entry``)."""
    out = {}
    for sweep in sweeps or []:
        op, depth = sweep["op"], int(sweep.get("depth", 4))
        for p in points(sweep):
            unknown = sorted(set(p) - set(DEFAULTS[op]) - {"batch"})
            if unknown:
                raise OpcostError(f"config: sweeps: {op}", f"unknown parameter(s) {', '.join(unknown)} (it takes "
                                                           f"{', '.join([*DEFAULTS[op], 'batch'])})")
            batch = p.pop("batch", None)
            shape = {k: float(v) if k in _FLOAT else int(v) for k, v in p.items()}
            name = PREFIX + op + "-" + "-".join(f"{_SHORT.get(k, k)}{v}" for k, v in sorted(shape.items()))
            entry = out.setdefault(name, {"model": MODEL, "kwargs": {"op": op, "depth": depth, **shape},
                                          "input_shapes": [input_shape(op, shape)],
                                          "modes": list(sweep.get("modes") or modes), "batch_sizes": []})
            if op in _LOOKUPS:  # token ids below the table's size
                entry.update(input_dtype="int64", input_range=[0, {**DEFAULTS[op], **shape}["num"]])
            if shape.get("channels_last"):
                entry["memory_format"] = "channels_last"
            for b in ([batch] if batch is not None else batch_sizes):
                if int(b) not in entry["batch_sizes"]:
                    entry["batch_sizes"].append(int(b))
    return out


def is_sweep(entry: dict) -> bool:
    """Whether a config model entry is a sweep point."""
    return entry.get("model") == MODEL
