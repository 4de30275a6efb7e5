"""What a cost model reads from an operator configuration: work (FLOPs), traffic (bytes) and shape, from the
`layers`/`configs` columns ``op_type``, ``params``, ``inputs`` and ``outputs`` alone (no torch, no replay).

Counts are per call and per forward pass; a phase multiplier is the cost model's business. The rules:

* FLOPs (multiply-adds count 2): convolutions ``2 x output elements x in_channels / groups x kernel volume``;
  linear layers and matrix products ``2 x output elements x reduced dimension`` (``Linear``: in_features;
  transformers' ``Conv1D``: nx; ``mm``/``bmm``/``matmul``/``addmm``/``linear``: the first operand's last dimension);
  ``scaled_dot_product_attention`` ``4 x batch x heads x query length x key length x head dimension``; every other
  operator the larger of its largest input's and its outputs' element counts (elementwise work).
* Bytes: every tensor input and output at its dtype's size, plus the parameter bytes of the module types whose
  parameter shapes follow from their constructor arguments (convolutions, linear layers, embeddings: the rows
  touched, normalisations); other modules' parameters are not counted.
* No work, 0 FLOPs and 0 bytes, for calls that only make a view (:data:`VIEW_OPS`: ``select``, ``permute``,
  ``unsqueeze``...), for ``contiguous``, ``reshape`` and ``flatten`` of contiguous inputs (else they copy: bytes),
  and for dropout in inference (an identity): their cost is a per-call constant whatever the tensor's size.

The numbers are hand-checkable (``tests/test_costmodel.py``); :data:`NUMERIC` are the columns a learned model uses.
"""
from __future__ import annotations

import json
import math

import pandas as pd

_DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}
_MATMUL_OPS = {"mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "linear", "einsum"}
_CONV_MODULES = {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"}
_NORM_MODULES = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm2d",
                 "LayerNorm2d", "RMSNorm", "LlamaRMSNorm", "T5LayerNorm", "FrozenBatchNorm2d"}

VIEW_OPS = frozenset({"select", "squeeze", "unsqueeze", "permute", "transpose", "t", "expand", "expand_as", "view",
                      "view_as", "_unsafe_view", "unbind", "unflatten", "narrow", "slice", "split", "split_with_sizes",
                      "chunk", "as_strided", "detach", "alias", "diagonal", "movedim", "Identity", "Unflatten"})
_COPY_IF_STRIDED = frozenset({"contiguous", "reshape", "flatten", "Flatten"})
_DROPOUT = frozenset({"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "dropout", "DropPath"})

NUMERIC = ("log_flops", "log_bytes", "log_param_bytes", "log_out_numel", "log_in_numel", "n_inputs", "batch",
           "kernel", "stride", "groups", "channels", "reduce_dim", "contiguous", "intensity")


def _numel(spec: dict) -> int:
    return math.prod(spec.get("T") or [1])


def _nbytes(spec: dict) -> int:
    return _numel(spec) * _DTYPE_BYTES.get(str(spec.get("dtype", "float32")), 4)


def _specs(text) -> list[dict]:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    out = json.loads(text) if isinstance(text, str) else text
    return [s for s in out if isinstance(s, dict) and "T" in s]


def _contiguous(spec: dict) -> bool:
    shape, stride = spec.get("T") or [], spec.get("stride")
    if stride is None:
        return True
    expect = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1 and st != expect:
            return False
        expect *= size
    return True


def _pair(v, default=1) -> list[int]:
    if v is None:
        return [default]
    return list(v) if isinstance(v, (list, tuple)) else [v]


def configuration_features(op_type: str, params, inputs, outputs, mode: str | None = None) -> dict:
    """The features of one configuration (see the module docstring); ``params``/``inputs``/``outputs`` are the
    JSON strings of a `layers` row (or already decoded), ``mode`` its mode (dropout is an identity in inference)."""
    p = json.loads(params) if isinstance(params, str) and params else (params or {})
    ins, outs = _specs(inputs), _specs(outputs)
    in_numel = sum(_numel(s) for s in ins)
    out_numel = sum(_numel(s) for s in outs)
    first = (ins[0].get("T") if ins else None) or [1]
    kernel, stride, groups, channels, reduce_dim = 1, 1, 1, first[1] if len(first) > 1 else 1, 0
    param_bytes = 0
    elt = _DTYPE_BYTES.get(str((p.get("param_dtype") or ["float32"])[0]), 4) if isinstance(p, dict) else 4
    if op_type in _CONV_MODULES:
        k = _pair(p.get("kernel_size"))
        kernel, stride, groups = math.prod(k), math.prod(_pair(p.get("stride"))), int(p.get("groups", 1))
        cin, cout = int(p.get("in_channels", channels)), int(p.get("out_channels", 1))
        reduce_dim = cin // groups * kernel
        flops = 2 * out_numel * reduce_dim
        param_bytes = (cout * cin // groups * kernel + (cout if p.get("bias") else 0)) * elt
        channels = cin
    elif op_type == "Linear":
        reduce_dim = int(p.get("in_features", first[-1]))
        flops = 2 * out_numel * reduce_dim
        param_bytes = (reduce_dim * int(p.get("out_features", 1)) + (int(p.get("out_features", 1))
                                                                      if p.get("bias") else 0)) * elt
    elif op_type == "Conv1D":  # transformers' GPT-2 projection: a Linear with transposed weight
        reduce_dim = int(p.get("nx", first[-1]))
        flops = 2 * out_numel * reduce_dim
        param_bytes = (reduce_dim + 1) * int(p.get("nf", 1)) * elt
    elif op_type in _MATMUL_OPS and ins:
        reduce_dim = int(first[-1])
        flops = 2 * out_numel * reduce_dim
    elif op_type == "scaled_dot_product_attention" and len(ins) >= 2:
        q, k = ins[0]["T"], ins[1]["T"]
        reduce_dim = int(q[-1])
        flops = 4 * math.prod(q[:-1]) * int(k[-2]) * reduce_dim
    else:
        flops = max(max((_numel(s) for s in ins), default=0), out_numel)
        if op_type in ("Embedding", "EmbeddingBag"):
            dim = int(p.get("embedding_dim", 1))
            param_bytes = sum(_numel(s) for s in ins if "int" in str(s.get("dtype"))) * dim * elt
        elif op_type in _NORM_MODULES:
            param_bytes = 2 * (int(p.get("num_features") or p.get("num_channels") or channels or 1)) * elt
    nbytes = sum(_nbytes(s) for s in ins) + sum(_nbytes(s) for s in outs) + param_bytes
    contiguous = all(_contiguous(s) for s in ins)
    if (op_type in VIEW_OPS or (op_type in _COPY_IF_STRIDED and contiguous)
            or (op_type in _DROPOUT and mode == "inference")):
        flops = nbytes = 0
    log = lambda v: math.log10(max(float(v), 1.0))  # noqa: E731
    return {"flops": float(flops), "bytes": float(nbytes), "param_bytes": float(param_bytes),
            "log_flops": log(flops), "log_bytes": log(nbytes), "log_param_bytes": log(param_bytes),
            "log_out_numel": log(out_numel), "log_in_numel": log(in_numel), "n_inputs": len(ins),
            "batch": int(first[0]) if first else 1, "kernel": kernel, "stride": stride, "groups": groups,
            "channels": int(channels), "reduce_dim": reduce_dim,
            "contiguous": int(contiguous),
            "intensity": float(flops) / max(float(nbytes), 1.0)}


def features(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`configuration_features` of each row of a `layers` or `configs` frame (same index)."""
    if rows.empty:
        return pd.DataFrame(columns=["flops", "bytes", "param_bytes", *NUMERIC], index=rows.index)
    n = len(rows)
    out = [configuration_features(t, p, i, o, m) for t, p, i, o, m in
           zip(rows["op_type"], rows["params"], rows["inputs"], rows.get("outputs", [None] * n),
               rows.get("mode", [None] * n))]
    return pd.DataFrame(out, index=rows.index)
