"""What a cost model reads from an operator configuration: work (FLOPs), traffic (bytes) and shape, from the
`layers`/`configs` columns ``op_type``, ``params``, ``inputs`` and ``outputs`` alone (no torch, no replay).

Counts are per call, of the phase costed (forward unless a ``phase`` column says ``backward``). Each op type's
work rule is a line of :data:`opcost.analysis.optypes.TABLE`; in short:

* FLOPs (multiply-adds count 2): convolutions ``2 x output elements x in_channels / groups x kernel volume``;
  linear layers and matrix products ``2 x output elements x reduced dimension`` (``Linear``: in_features;
  transformers' ``Conv1D``: nx; ``mm``/``bmm``/``matmul``/``linear``: the first operand's last dimension; ``addmm``:
  the second's, after the added term);
  ``scaled_dot_product_attention`` ``4 x batch x heads x query length x key length x head dimension`` (causal:
  the query-key pairs the mask keeps, ``L (L + 1) / 2`` of ``L x L``; grouped-query attention: the query's heads,
  keys' and values' bytes at their fewer heads); windowed
  pooling ``output elements x kernel volume``; every other operator the larger of its largest input's and its
  outputs' element counts (elementwise work).
* Bytes: every tensor input and output at its dtype's size, plus the parameter bytes of the module types whose
  parameter shapes follow from their constructor arguments (convolutions, linear layers, normalisations: weight
  and bias over the normalised shape, a weight alone for an RMSNorm; embeddings: the rows touched, and in
  backward the whole table, whose dense gradient is zeroed and accumulated); other modules' parameters are not
  counted.
* No work, 0 FLOPs and 0 bytes, for calls that only make a view (``view``, ``permute``, ``unsqueeze``...; and
  ``select``, ``split``, ``expand``... in forward: their backward writes or reduces a gradient of the input's
  size), for ``contiguous``, ``reshape`` and ``flatten`` that return a view (a contiguous input, or a strided
  output: else they copy, bytes), and for dropout in inference or at ``p = 0`` (an identity): their cost is a
  per-call constant whatever the tensor's size.

* Misaligned (:func:`misaligned`): a matrix product whose output rows are no multiple of 16 bytes (a head over
  GPT-2's 50,257 logits) runs at about 0.7 times the rate of an aligned one; a feature of the trees, and part of a
  shape line (:mod:`opcost.analysis.shape_lines`).

* Layout (:func:`layout`): a 2-D convolution whose input or weights are in channels-last order runs other kernels
  than the plain NCHW one, at other rates; the cost model keeps a law per layout (:mod:`opcost.analysis.costmodel`).

The numbers are hand-checkable (``tests/test_costmodel.py``); :data:`NUMERIC` are the columns a learned model uses.
"""
from __future__ import annotations

import json
import math
import re

import pandas as pd

from opcost.analysis import optypes
from opcost.model.tensors import specs

_DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}
NUMERIC = ("log_flops", "log_bytes", "log_param_bytes", "log_out_numel", "log_in_numel", "n_inputs", "batch",
           "kernel", "stride", "groups", "channels", "reduce_dim", "contiguous", "intensity", "misaligned")
ALIGN_BYTES = 16  # a matrix product's output rows of a multiple of this many bytes: its kernels' aligned path


def _numel(spec: dict) -> int:
    return math.prod(spec.get("T") or [1])


def _nbytes(spec: dict) -> int:
    return _numel(spec) * _DTYPE_BYTES.get(str(spec.get("dtype", "float32")), 4)


def contiguous(spec: dict) -> bool:
    """Whether a tensor spec's strides (``stride``; none: contiguous) are those of a contiguous tensor."""
    shape, stride = spec.get("T") or [], spec.get("stride")
    if stride is None:
        return True
    expect = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1 and st != expect:
            return False
        expect *= size
    return True


def image_format(spec: dict) -> str:
    """The memory order of a 4-D tensor spec as PyTorch reads it from the strides (``suggest_memory_format``, its
    ``is_channels_last_strides_2d`` rule): ``nchw`` (contiguous, or no strides recorded), ``nhwc`` (channels last: a
    model converted to it, a channels-last LayerNorm's output) or ``strided`` (anything else: a transformer's tokens
    ``[1, N, C]`` transposed and viewed as an image keep the stride of their one-sample batch, which PyTorch does not
    read as channels last, and a convolution first copies them to NCHW order); ``""`` for another rank."""
    shape, stride = list(spec.get("T") or []), spec.get("stride")
    if len(shape) != 4:
        return ""
    if stride is None:
        return "nchw"
    low, channels_last = 0, stride[1] != 0
    for d in (1, 3, 2, 0):
        if not channels_last or shape[d] == 0 or stride[d] < low or (d == 0 and low == stride[1]):
            channels_last = False
            break
        low = stride[d] * (shape[d] if shape[d] > 1 else 1)
    return "nhwc" if channels_last else "nchw" if contiguous(spec) else "strided"


def layout(params: dict, ins: list) -> str:
    """A 2-D convolution's memory layout when it is not the plain one (its input and weights in NCHW order), as
    PyTorch picks its kernels: ``nhwc`` (the input or the weights channels last: the channels-last kernels) or
    ``strided`` (an input in neither order, copied to NCHW first: the depthwise convolutions of PVT-v2, SegFormer,
    CoaT and XCiT on a one-sample batch of token-major activations, several times the plain time on a CPU);
    ``""`` for the plain layout and for anything else. Its weights' order is the `params` key ``weight_format``
    (:func:`opcost.model.extract.module_params`)."""
    fmt = image_format(ins[0]) if ins else ""
    if fmt == "nhwc" or (params.get("weight_format") == "channels_last" and fmt in ("nchw", "nhwc")):
        return "nhwc"
    return "strided" if fmt == "strided" else ""


def _pair(v, default=1) -> list[int]:
    if v is None:
        return [default]
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _args(p: dict) -> list:
    """The positional arguments of an aten op's ``params`` (``{"args": [...]}``); none for a module's."""
    return p.get("args") or []


def _kernel_volume(op_type: str, p: dict) -> int:
    """A pooling window's element count: a module's ``kernel_size``, an aten op's second argument; an int is a side
    of a square (cubic) window of the op's dimensionality."""
    k = p.get("kernel_size") if "kernel_size" in p else (_args(p)[1:2] or [1])[0]
    if isinstance(k, (list, tuple)):
        return max(math.prod(int(v) for v in k), 1)
    dims = 1 if "1d" in op_type else 3 if "3d" in op_type else 2
    return max(int(k or 1), 1) ** dims


def _dropout_p(p: dict) -> float:
    """A dropout's probability: a module's ``p`` (timm's ``DropPath``: ``drop_prob``), an aten op's second argument."""
    v = p["p"] if "p" in p else p["drop_prob"] if "drop_prob" in p else (_args(p)[1:2] or [0.5])[0]
    return float(v) if isinstance(v, (int, float)) else 0.5


def _is_causal(op_type: str, p: dict) -> bool:
    """Whether an attention call masks the future (``is_causal``: a keyword, or the positional argument of
    ``scaled_dot_product_attention`` (6th) or of the CPU flash kernel a training call dispatches (5th))."""
    kwargs = p.get("kwargs") or {}
    kwargs = kwargs.get("D", kwargs) if isinstance(kwargs, dict) else {}
    if "is_causal" in kwargs:
        return bool(kwargs["is_causal"])
    at = 4 if op_type.startswith("_scaled_dot_product_flash") else 5
    args = _args(p)
    return len(args) > at and args[at] is True


def _attended(lq: int, lk: int, causal: bool) -> int:
    """Query-key pairs an attention computes: all ``lq x lk``, or with a causal mask (aligned at the top left, as
    SDPA aligns it) the ``min(i + 1, lk)`` keys of each query ``i``: the CPU kernels skip the masked blocks."""
    if not causal:
        return lq * lk
    full = min(lq, lk)  # queries i < lk see i + 1 keys, the rest all lk
    return full * (full + 1) // 2 + (lq - full) * lk


def _norm_params(op_type: str, p: dict, first: list) -> int:
    """Parameter elements a normalisation reads: weight and bias over ``normalized_shape`` (LayerNorm; one vector
    without a bias, none without ``elementwise_affine``), two vectors of ``num_features`` or ``num_channels``
    (batch and group norms), else over the input's last dimension (channels for a ``...2d`` class: timm's
    LayerNorm2d), one vector for an RMSNorm (Llama's and its twins: a weight, no bias), two for others."""
    if p.get("normalized_shape"):
        n = math.prod(int(v) for v in _pair(p["normalized_shape"]))
        return n * (1 + bool(p.get("bias"))) if p.get("elementwise_affine", True) else 0
    if p.get("num_features") or p.get("num_channels"):
        return 2 * int(p.get("num_features") or p.get("num_channels"))
    n = int(first[1] if op_type.endswith("2d") and len(first) > 1 else first[-1])
    return n * (1 if optypes.lookup(op_type, p.get(optypes.BASE)).twin == "rms_norm_py" else 2)


def misaligned(op_type: str, outputs, base: str | None = None) -> bool:
    """Whether a matrix product (family ``matmul``) writes output rows whose bytes are not a multiple of
    :data:`ALIGN_BYTES`: a Linear over 32,001 or 50,257 logits runs at 0.7 times the FLOP rate of one over 32,000 or
    32,004 (one thread, 64 rows, output beyond the last-level cache), whatever its input rows; any other op type,
    never."""
    if optypes.family(op_type, base) != "matmul":
        return False
    outs = specs(outputs)
    shape = (outs[0].get("T") or []) if outs else []
    return bool(shape) and int(shape[-1]) * _DTYPE_BYTES.get(str(outs[0].get("dtype", "float32")), 4) % \
        ALIGN_BYTES != 0


_DEVICE = re.compile(r'"S":\s*"(cpu|cuda|mps|xpu|meta)')


def _returns_input(p: dict, ins: list, outs: list) -> bool:
    """Whether a ``to`` returns its input: its output has the input's dtype and it names no device (a copy to
    another device keeps the dtype; specs do not say where a tensor lives)."""
    return bool(ins and outs) and ins[0].get("dtype") == outs[0].get("dtype") and not _DEVICE.search(json.dumps(p))


def configuration_features(op_type: str, params, inputs, outputs, mode: str | None = None,
                           phase: str | None = None) -> dict:
    """The features of one configuration (see the module docstring); ``params``/``inputs``/``outputs`` are the
    JSON strings of a `layers` row (or already decoded), ``mode`` its mode (dropout is an identity in inference),
    ``phase`` the phase costed (``backward`` changes the work of views and embeddings:
    :mod:`opcost.analysis.optypes`)."""
    p = json.loads(params) if isinstance(params, str) and params else (params or {})
    p = p if isinstance(p, dict) else {}
    ins, outs = specs(inputs), specs(outputs)
    in_numel = sum(_numel(s) for s in ins)
    out_numel = sum(_numel(s) for s in outs)
    first = (ins[0].get("T") if ins else None) or [1]
    kernel, stride, groups, channels, reduce_dim = 1, 1, 1, first[1] if len(first) > 1 else 1, 0
    param_bytes = 0
    elt = _DTYPE_BYTES.get(str((p.get("param_dtype") or ["float32"])[0]), 4)
    base = p.get(optypes.BASE)
    work = optypes.work(op_type, base)
    backward = phase == "backward"
    io_bytes = sum(_nbytes(s) for s in ins) + sum(_nbytes(s) for s in outs)
    elementwise = max(max((_numel(s) for s in ins), default=0), out_numel)
    order = ""
    if work == "conv":
        order = layout(p, ins)
        k = _pair(p.get("kernel_size"))
        kernel, stride, groups = math.prod(k), math.prod(_pair(p.get("stride"))), int(p.get("groups", 1))
        cin, cout = int(p.get("in_channels", channels)), int(p.get("out_channels", 1))
        reduce_dim = cin // groups * kernel
        flops = 2 * out_numel * reduce_dim
        param_bytes = (cout * cin // groups * kernel + (cout if p.get("bias") else 0)) * elt
        channels = cin
    elif work == "linear":
        reduce_dim = int(p.get("in_features", first[-1]))
        flops = 2 * out_numel * reduce_dim
        param_bytes = (reduce_dim * int(p.get("out_features", 1)) + (int(p.get("out_features", 1))
                                                                      if p.get("bias") else 0)) * elt
    elif work == "conv1d_gpt":
        reduce_dim = int(p.get("nx", first[-1]))
        flops = 2 * out_numel * reduce_dim
        param_bytes = (reduce_dim + 1) * int(p.get("nf", 1)) * elt
    elif work in ("matmul", "addmm") and ins:
        operand = ins[1] if work == "addmm" and len(ins) > 1 else ins[0]  # addmm(bias, x, w): x's columns
        reduce_dim = int(operand["T"][-1])
        flops = 2 * out_numel * reduce_dim
    elif work == "attention" and len(ins) >= 2:
        q, k = ins[0]["T"], ins[1]["T"]  # grouped-query attention: k and v at fewer heads than q (their bytes)
        reduce_dim = int(q[-1])
        pairs = _attended(int(q[-2]), int(k[-2]), _is_causal(op_type, p))
        flops = 4 * math.prod(q[:-2]) * pairs * reduce_dim
    elif work == "pool":
        kernel = _kernel_volume(op_type, p)
        flops = out_numel * kernel
    else:
        flops = elementwise
        if work == "embedding":
            dim = int(p.get("embedding_dim", 1))
            param_bytes = sum(_numel(s) for s in ins if "int" in str(s.get("dtype"))) * dim * elt
            if backward and not p.get("sparse"):  # the dense gradient of the whole table, zeroed and accumulated
                param_bytes += int(p.get("num_embeddings", 0)) * dim * elt
        elif work == "norm":
            param_bytes = _norm_params(op_type, p, first) * elt
    nbytes = io_bytes + param_bytes
    dense = all(contiguous(s) for s in ins)
    # a reshape, flatten or contiguous() copies only where no view can serve: its input strided and its output
    # contiguous (a view of a strided input keeps its strides: GPT-2's reshape of a transposed tensor to its own shape)
    viewed = dense or not all(contiguous(s) for s in outs)
    if (work == "view" or (work in ("slice", "expand") and not backward)
            or (work == "copy_if_strided" and viewed)
            or (work == "dropout" and (mode != "training" or _dropout_p(p) == 0))
            or (work == "cast" and _returns_input(p, ins, outs))):
        flops = nbytes = 0
    log = lambda v: math.log10(max(float(v), 1.0))  # noqa: E731
    return {"flops": float(flops), "bytes": float(nbytes), "param_bytes": float(param_bytes),
            "log_flops": log(flops), "log_bytes": log(nbytes), "log_param_bytes": log(param_bytes),
            "log_out_numel": log(out_numel), "log_in_numel": log(in_numel), "n_inputs": len(ins),
            "batch": int(first[0]) if first else 1, "kernel": kernel, "stride": stride, "groups": groups,
            "channels": int(channels), "reduce_dim": reduce_dim,
            "contiguous": int(dense), "misaligned": int(misaligned(op_type, outs, base)),
            "intensity": float(flops) / max(float(nbytes), 1.0), "base": base, "layout": order}


def features(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`configuration_features` of each row of a `layers` or `configs` frame (same index)."""
    if rows.empty:
        return pd.DataFrame(columns=["flops", "bytes", "param_bytes", *NUMERIC, "base", "layout"], index=rows.index)
    n = len(rows)
    out = [configuration_features(t, p, i, o, m, ph) for t, p, i, o, m, ph in
           zip(rows["op_type"], rows["params"], rows["inputs"], rows.get("outputs", [None] * n),
               rows.get("mode", [None] * n), rows.get("phase", [None] * n))]
    return pd.DataFrame(out, index=rows.index)
