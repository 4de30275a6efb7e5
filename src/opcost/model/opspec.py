"""Canonical, JSON-able descriptions of operator arguments, stable ids, and synthesis of replay inputs.

An argument structure is described recursively:

* a tensor becomes ``{"T": shape, "dtype": "float32", "stride": [...], "grad": bool}`` (plus ``"values"`` for small
  integer/bool tensors, or ``"lo"/"hi"/"sorted"`` for large ones, so that indices and offsets replay validly, and
  ``"offset"``, its storage offset, for a view that does not start its buffer);
* lists/tuples become lists, dicts become ``{"D": {...}}``, dtypes/devices/layouts their string form;
* other scalars (int, float, bool, str, None) stay as they are.

The identity of an operator configuration is the hash of its canonical form *without* the replay-only fields
(``values``/``lo``/``hi``/``sorted``/``offset``), see :func:`config_id`.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

from opcost.model.modes import op_mode

REPLAY_ONLY_KEYS = ("values", "lo", "hi", "sorted", "offset")
MAX_STORED_INT_VALUES = 4096


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def tensor_spec(t: torch.Tensor) -> dict:
    spec = {
        "T": list(t.shape),
        "dtype": dtype_name(t.dtype),
        "stride": list(t.stride()) if t.layout == torch.strided else None,
        "grad": bool(t.requires_grad),
    }
    if t.layout == torch.strided and t.storage_offset():
        spec["offset"] = int(t.storage_offset())  # a view into a larger buffer (replay-only: not in the id)
    if not (t.is_floating_point() or t.is_complex()) and t.numel() > 0:
        flat = t.detach().reshape(-1).cpu()
        if flat.numel() <= MAX_STORED_INT_VALUES:
            spec["values"] = flat.tolist()
        else:
            spec["lo"], spec["hi"] = int(flat.min()), int(flat.max())
            spec["sorted"] = bool((flat[1:] >= flat[:-1]).all())
    return spec


def describe(obj: Any) -> Any:
    """Describe an argument structure (see module docstring)."""
    if isinstance(obj, torch.Tensor):
        return tensor_spec(obj)
    if isinstance(obj, (list, tuple)):
        return [describe(o) for o in obj]
    if isinstance(obj, dict):
        return {"D": {str(k): describe(v) for k, v in obj.items()}}
    if isinstance(obj, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return {"S": str(obj)}
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return {"F": "nan"}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.nn.Module):
        return {"S": type(obj).__qualname__}
    if callable(obj):  # activation functions held as attributes: a stable name, never an address
        return {"S": f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"}
    return {"S": str(obj)}


def strip_replay(desc: Any) -> Any:
    """The identity-relevant part of a description (drops stored integer values)."""
    if isinstance(desc, list):
        return [strip_replay(d) for d in desc]
    if isinstance(desc, dict):
        return {k: strip_replay(v) for k, v in desc.items() if k not in REPLAY_ONLY_KEYS}
    return desc


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def config_id(op: str, params: Any, inputs: Any, mode: str) -> str:
    """Stable 12-hex-digit id of an operator configuration, usable as a file name or wildcard (``mode``: a
    workload's, taken as its :func:`op_mode`)."""
    key = canonical_json({"op": op, "params": strip_replay(params), "inputs": strip_replay(inputs),
                          "mode": op_mode(mode)})
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def tensors_in(desc: Any):
    """Yield every tensor description in a structure."""
    if isinstance(desc, list):
        for d in desc:
            yield from tensors_in(d)
    elif isinstance(desc, dict):
        if "T" in desc:
            yield desc
        elif "D" in desc:
            for v in desc["D"].values():
                yield from tensors_in(v)


def _synth_tensor(spec: dict, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    """A tensor with the recorded shape, dtype, strides and storage offset (any layout: transposed, channels-last,
    expanded with stride 0, overlapping, a view into a larger buffer) and real values: random floats, the stored
    integers, or integers within the recorded bounds."""
    dtype = dtype_from_name(spec["dtype"])
    shape = spec["T"]
    stride = spec.get("stride")
    offset = int(spec.get("offset") or 0)
    if "values" in spec:
        t = torch.tensor(spec["values"], dtype=dtype).reshape(shape)
    elif "lo" in spec:
        t = torch.randint(spec["lo"], spec["hi"] + 1, (max(1, _numel(shape)),), generator=generator)
        if spec.get("sorted"):
            t = t.sort().values
        t = t[: _numel(shape)].to(dtype).reshape(shape)
    elif dtype.is_floating_point or dtype.is_complex:
        t = torch.randn(shape, generator=generator).to(dtype)
    elif dtype == torch.bool:
        t = torch.zeros(shape, dtype=torch.bool)
    else:
        t = torch.zeros(shape, dtype=dtype)
    if stride is not None and t.numel() > 0 and (list(stride) != list(t.stride()) or offset):
        t = _with_layout(t, list(stride), offset, generator)
    t = t.to(device)
    if spec.get("grad") and (dtype.is_floating_point or dtype.is_complex):
        t.requires_grad_(True)
    return t


def _with_layout(values: torch.Tensor, stride: list, offset: int, generator: torch.Generator) -> torch.Tensor:
    """``values`` laid out with ``stride`` at ``offset`` in a buffer of its own: each view element is written to
    the storage element it maps to (where several share one, as in an expanded tensor, it holds one of their
    values: the recorded integers of such a layout agree there); the buffer's other elements hold random floats,
    or zeros for integer dtypes, never uninitialised memory."""
    shape = list(values.shape)
    size = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride))
    if values.is_floating_point() or values.is_complex():
        buf = torch.randn(size, generator=generator).to(values.dtype)
    else:
        buf = torch.zeros(size, dtype=values.dtype)
    where = torch.arange(size).as_strided(shape, stride, offset)
    buf[where.reshape(-1)] = values.reshape(-1)
    return buf.as_strided(shape, stride, offset)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def synthesize(desc: Any, device: torch.device | str = "cpu", seed: int = 0) -> Any:
    """Build concrete arguments from a description: random floats, stored or bounded integers, same strides."""
    gen = torch.Generator().manual_seed(seed)
    device = torch.device(device)

    def build(d: Any) -> Any:
        if isinstance(d, list):
            return [build(x) for x in d]
        if isinstance(d, dict):
            if "T" in d:
                return _synth_tensor(d, device, gen)
            if "D" in d:
                return {k: build(v) for k, v in d["D"].items()}
            if "F" in d:
                return float(d["F"])
            if "S" in d:
                return _parse_special(d["S"])
        return d

    return build(desc)


def _parse_special(s: str) -> Any:
    if s.startswith("torch."):
        obj = getattr(torch, s.removeprefix("torch."), None)
        if obj is not None:
            return obj
    try:
        return torch.device(s)
    except (RuntimeError, TypeError):
        return s
