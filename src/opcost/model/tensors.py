"""The tensors a workload holds, for placing them (:mod:`opcost.analysis.advise`): its parameters and buffers,
grouped by the recorded calls that read them, and the bytes of its activations.

A leaf module's calls read its own parameters and buffers (a fused leaf, its children's); a functional call reads
those its enclosing module holds directly whose shape is one of its inputs' (a ViT's position embedding, added
outside any leaf module). Tensors read by the same calls form one :class:`ParamGroup` (a leaf module's tensors, or a
tensor several modules read, such as tied weights); a tensor no recorded call reads is a group of its own module.
In training a parameter's gradient lives with it, so its footprint counts twice.

The activations' bytes: the model's inputs plus the peak of the operator outputs alive at once over the iteration,
from the `layers` positions and releases (outputs of in-place and view operators alias their inputs: not counted).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from opcost.tables import CARRIED

_ALIAS_WORK = ("view", "slice", "expand", "copy_if_strided")  # outputs that are (usually) their input's memory
NOWHERE = 1 << 30  # the first use of a tensor no recorded call reads


@dataclass
class ParamGroup:
    """Tensors read by the same calls: their names, footprint bytes and the position of their first read."""

    name: str
    tensors: tuple[str, ...]
    bytes: int
    first_use: int
    calls: frozenset  # (config_id, module path) of the calls that read them


def spec_bytes(spec: dict) -> int:
    """Bytes of a tensor spec (`layers` JSON: shape ``T`` and ``dtype``)."""
    import torch

    from opcost.model.opspec import dtype_from_name

    numel = 1
    for d in spec.get("T") or []:
        numel *= int(d)
    return numel * torch.empty(0, dtype=dtype_from_name(spec.get("dtype") or "float32")).element_size()


def specs(text) -> list[dict]:
    """The tensor specs of a `layers` JSON list column (``inputs``, ``outputs``), or of that list already parsed."""
    items = json.loads(text) if isinstance(text, str) and text else text if isinstance(text, list) else []
    return [s for s in items if isinstance(s, dict) and "T" in s]


def _json(text, default):
    return json.loads(text) if isinstance(text, str) and text else default


def _aliases(row) -> bool:
    from opcost.analysis.optypes import work

    inplace = isinstance(row.params, str) and '"inplace":true' in row.params.replace(" ", "")
    return inplace or (row.scope == "functional" and str(row.op_type).endswith("_")) or \
        work(str(row.op_type)) in _ALIAS_WORK


def activation_bytes(layers: pd.DataFrame) -> int:
    """The model's inputs plus the peak bytes of operator outputs alive at once over one workload's iteration."""
    events, inputs = [], {}
    for r in layers.itertuples():
        pos, rel, feeds = _json(r.positions, []), _json(r.releases, []), _json(r.feeds, [])
        if r.scope == "module":  # a null or carried feed of a leaf module call: a model input (not a parameter)
            for spec, src in zip(specs(r.inputs), feeds[0] if feeds else []):
                if src is None or src == CARRIED:
                    inputs[json.dumps(spec, sort_keys=True)] = spec_bytes(spec)
        if _aliases(r):
            continue
        size = sum(spec_bytes(s) for s in specs(r.outputs))
        for p, q in zip(pos, rel or pos):
            events += [(p, size), (max(p, q) + 0.5, -size)]
    live = peak = 0
    for _, d in sorted(events):
        live += d
        peak = max(peak, live)
    return int(peak + sum(inputs.values()))


def _readers(module, layers: pd.DataFrame) -> tuple[dict, dict]:
    """(tensor name -> {(config_id, path): first position}, tensor name -> bytes read per call)."""
    names, read = {}, {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        names.setdefault(id(t), name)
        read[name] = t.numel() * t.element_size()
    readers = {name: {} for name in read}
    for r in layers.drop_duplicates("config_id").itertuples():
        paths, pos = _json(r.module_paths, []), _json(r.positions, [])
        shapes = {tuple(s["T"]) for s in specs(r.inputs)}
        for k, path in enumerate(paths):
            try:
                sub = module.get_submodule(path)
            except AttributeError:
                continue
            first = pos[k] if len(pos) == len(paths) else (pos[0] if pos else 0)
            held = list(sub.named_parameters()) + list(sub.named_buffers()) if r.scope == "module" else [
                (n, t) for n, t in list(sub.named_parameters(recurse=False)) + list(sub.named_buffers(recurse=False))
                if tuple(t.shape) in shapes]
            for _, t in held:
                if id(t) in names:
                    readers[names[id(t)]].setdefault((r.config_id, path), first)
    return readers, read


def param_groups(module, layers: pd.DataFrame) -> tuple[list[ParamGroup], dict]:
    """The parameter groups of one workload, in order of first read, and per call (config_id, module path): (bytes
    its calls read, {index in the list: share of those bytes})."""
    training = bool((layers["mode"] == "training").any())
    readers, read = _readers(module, layers)
    grads = {n for n, p in module.named_parameters() if p.requires_grad} if training else set()
    by_key: dict = {}
    for name, who in readers.items():
        by_key.setdefault(frozenset(who) if who else ("unread", name.rpartition(".")[0]), []).append(name)
    keyed = sorted(by_key.items(), key=lambda kv: (min(readers[kv[1][0]].values(), default=NOWHERE), kv[1][0]))
    groups, calls = [], {}
    for key, tensors in keyed:
        base = tensors[0].rpartition(".")[0] or tensors[0]
        name = base if all(g.name != base for g in groups) else f"{base}#{len(groups)}"
        who = key if isinstance(key, frozenset) else frozenset()
        groups.append(ParamGroup(name, tuple(tensors), int(sum(read[t] * (2 if t in grads else 1) for t in tensors)),
                                 int(min(readers[tensors[0]].values(), default=NOWHERE)), who))
        for call in who:
            calls.setdefault(call, {})[len(groups) - 1] = sum(read[t] for t in tensors)
    out = {}
    for call, held in calls.items():
        total = sum(held.values())
        out[call] = (total, {g: v / total if total > 0 else 1 / len(held) for g, v in held.items()})
    return groups, out
