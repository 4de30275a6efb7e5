"""Layer extraction: every leaf-module call and every aten operator that runs outside a leaf module.

One iteration of the workload (see :mod:`opcost.model.workload`) runs under three observers:

* forward pre/post hooks on every module keep the module stack; a call of a *leaf* module (one without children,
  or one that runs a fused fast path: :mod:`opcost.model.fastpath`) is one record: class, constructor parameters
  read from the module, input/output tensor specs;
* a ``TorchDispatchMode`` records every aten operator that runs while no leaf module is executing (residual
  ``add_``, ``flatten``, ``cat``, functional activations, the attention inside ``nn.MultiheadAttention``, the loss);
* a ``TorchFunctionMode`` labels those aten records with the Python-level API call that issued them (``api``).

A leaf module of a class the op table does not list (:func:`opcost.analysis.optypes.unlisted`: timm's
``EvoNorm2dS0``, a decoder's ``...RMSNorm``, a model's own activation), of a class it lists as written in Python
over aten calls (:func:`opcost.analysis.optypes.python_composed`: Llama's RMSNorm, GPT-2's tanh GELU), or of a
subclass with a ``forward`` of its own (timm's ``StdConv2d``), also keeps the aten operators one call of it
dispatches (``inside``): what its estimate is composed from where nothing measured its class or a twin
(:mod:`opcost.analysis.composed`).

In training mode the backward pass runs after the forward capture; each autograd node that executes is attributed
to the forward record that created it (by autograd sequence number; parameter gradient accumulation to the record
that used the parameter), so every configuration carries the backward work it causes (column ``backward``).

Records are deduplicated into operator configurations (:func:`opcost.model.opspec.config_id`) with a call count per
iteration. The table's columns are :data:`opcost.tables.LAYERS`.
"""
from __future__ import annotations

import bisect
import inspect
import json
import weakref
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd
import torch
from torch._C._autograd import _get_sequence_nr
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from opcost.model import fastpath
from opcost.model.opspec import canonical_json, config_id, describe, dtype_name, strip_replay, tensors_in
from opcost.model.replay import tensors_of
from opcost.model.workload import Workload, loss_of
from opcost.tables import CARRIED, LAYERS, frame

LOSS_PATH = "<loss>"


@dataclass
class Call:
    op: str
    op_type: str
    scope: str  # "module" | "functional"
    api: str | None
    params: dict
    inputs: list
    path: str
    replay: dict
    outputs: list = field(default_factory=list)
    seq_after: int = -1
    # per tensor input (the order of opcost.model.replay.tensor_inputs): [position, output index] of the record whose
    # output it is (the latest, for an output an in-place op returned again), or None (a model input, a parameter)
    feeds: list = field(default_factory=list)
    inside: list | None = None  # the aten calls one call of an unlisted leaf module dispatched (module docstring)


def is_leaf(m: torch.nn.Module) -> bool:
    """A module without children, or one that runs a fused inference fast path (:mod:`opcost.model.fastpath`):
    its calls are the workload's leaf-module calls."""
    return next(m.children(), None) is None or fastpath.is_fused(m)


def leaf_modules(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The leaf modules of ``module`` (:func:`is_leaf`), in ``modules()`` order; none inside a fused one. Watch
    their calls with :func:`opcost.model.fastpath.watch_calls`, not with hooks."""
    return [m for _, m in fastpath.named_outside(module) if is_leaf(m)]


def module_params(m: torch.nn.Module) -> dict:
    """Constructor parameters read back from a module's attributes (tensors become 'present' flags); of a class the
    op table does not name, also its nearest base's that it names (:func:`opcost.analysis.optypes.base_class`, under
    :data:`opcost.analysis.optypes.BASE`) and that base's constructor parameters (what its cost is counted from);
    ``weight_format: channels_last`` where its 4-D weight is in channels-last order."""
    from opcost.analysis import optypes  # the op table's names: no torch, no measurement

    out = {}
    base = optypes.base_class(type(m))
    params = {k: v for cls in (type(m), base) if cls for k, v in inspect.signature(cls.__init__).parameters.items()}
    for name, p in params.items():
        if name in ("self", "device", "dtype") or name.startswith("_"):
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or not hasattr(m, name):
            continue
        v = getattr(m, name)
        if isinstance(v, torch.Tensor) or (v is None and name == "bias"):
            v = v is not None
        out[name] = describe(v)
    if base:
        out[optypes.BASE] = base.__name__
    weight = getattr(m, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 4 and weight.is_contiguous(
            memory_format=torch.channels_last) and weight.stride() != _contiguous_strides(weight.shape):
        out["weight_format"] = "channels_last"  # what a convolution's kernel choice reads (features.layout)
    dtypes = sorted({dtype_name(p.dtype) for p in m.parameters(recurse=False)})
    if dtypes:
        out["param_dtype"] = dtypes
    if fastpath.is_fused(m):  # a module with children, recorded as one call
        out.update(fastpath.params(m))
    return out


def _contiguous_strides(shape) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``, by arithmetic: no tensor is made while the model's calls
    are recorded (one would be recorded as the model's)."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return tuple(reversed(out))


def overload_name(func) -> str:
    """'aten.add_.Tensor', 'aten.relu.default', 'torchvision.roi_align.default': namespace.op.overload."""
    ns, _, rest = func.name().partition("::")
    return f"{ns}.{rest}" if "." in rest else f"{ns}.{rest}.default"


TRAINING_SUFFIX = "_training"  # an aten call's op type where its `training` argument is true (functional_type)


def functional_type(func, args, kwargs) -> str:
    """The op type of an aten call: its name without namespace and overload (``aten.relu.default``: ``relu``), with
    :data:`TRAINING_SUFFIX` where the op has a ``training`` argument and it is true: a batch norm that computes its
    statistics from its input (``batch_norm`` in training, or on a weight in any mode, as timm's
    ``ScaledStdConv2d`` standardises its weight) does another computation than one that reads stored ones, 3 to 12
    times its time on the same tensor on a CPU."""
    name = overload_name(func).split(".")[1]
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == "training":
            value = args[i] if i < len(args) else (kwargs or {}).get("training", False)
            return name + TRAINING_SUFFIX if value is True else name
    return name


class _Recorder:
    def __init__(self, model_name: str, module: torch.nn.Module, carried: list | None = None):
        self.model_name = model_name
        self.carried = {id(t) for t in carried or ()}  # tensors the workload carries between iterations
        self.calls: list[Call] = []
        self.stack: list[str] = []
        self.leaf_depth = 0
        self.recording = True
        self.suspended = 0  # >0 while opcost itself reads tensors (describe): those ops are not the model's
        self.api: str | None = None
        self.inside: list | None = None  # the running unlisted leaf call's aten calls (module docstring)
        self.params = {id(p): p for p in module.parameters()}
        self.param_owner: dict[int, int] = {}  # id(param) -> index of the first record that used it
        self.released: dict[int, int] = {}  # record index -> index of the record during or after which its
        self.watchers: list = []            # outputs' last Python reference went away (see watch)
        self.producer: dict[int, tuple[int, int]] = {}  # id(live output tensor) -> (record index, output index)
        self.handles = []
        for path, m in fastpath.named_outside(module):
            leaf = is_leaf(m)
            self.handles += fastpath.watch_calls(m, self._pre(path, m, leaf), self._post(leaf), pre_kwargs=True,
                                          post_kwargs=True)

    def close(self):
        for h in self.handles:
            h.remove()
        for w in self.watchers:  # outputs the model keeps beyond the iteration must not keep the recorder alive
            w.detach()

    def describe(self, obj):
        self.suspended += 1
        try:
            return describe(obj)
        finally:
            self.suspended -= 1

    def active(self) -> bool:
        return self.recording and self.leaf_depth == 0 and self.suspended == 0

    def watch(self, out) -> None:
        """Note when the model drops the outputs ``out`` of the latest record (see :attr:`Capture.released`), and
        that they are that record's outputs (see :meth:`feeds`)."""
        idx = len(self.calls) - 1
        for k, t in enumerate(tensors_of(out)):
            self.producer[id(t)] = (idx, k)
            w = weakref.finalize(t, self._dropped, idx, id(t))
            w.atexit = False
            self.watchers.append(w)

    def _dropped(self, idx: int, key: int) -> None:
        self.released[idx] = max(self.released.get(idx, idx), len(self.calls) - 1)
        self.producer.pop(key, None)  # the id may be reused by a later tensor

    def feeds(self, args, kwargs) -> list:
        """Per tensor input of a call about to be recorded: [position, output index] of the record that produced
        it, :data:`opcost.tables.CARRIED` for a tensor the workload carries from one iteration to the next
        (:meth:`opcost.model.workload.Workload.carried`), or None."""
        def source(t):
            made = self.producer.get(id(t))
            return list(made) if made is not None else CARRIED if id(t) in self.carried else None
        return [source(t) for t in tensors_of(list(args)) + tensors_of(list((kwargs or {}).values()))]

    def enclosing(self) -> str:
        return self.stack[-1] if self.stack else ""

    def _own(self, tensors):
        for t in tensors:
            if isinstance(t, torch.Tensor) and id(t) in self.params:
                self.param_owner.setdefault(id(t), len(self.calls) - 1)

    def _pre(self, path, m, leaf):
        def hook(mod, args, kwargs):
            self.stack.append(path)
            if leaf:
                if self.active():
                    op = f"{type(m).__module__}.{type(m).__qualname__}"
                    inputs = self.describe(list(args))
                    kw = self.describe(kwargs) if kwargs else None
                    self.calls.append(Call(
                        op=op, op_type=type(m).__name__, scope="module", api=None,
                        params={**module_params(m), **({"kwargs": kw} if kw else {})}, inputs=inputs, path=path,
                        replay={"model": self.model_name, "path": path, "args": inputs, "kwargs": kw},
                        feeds=self.feeds(args, kwargs)))
                    self._own(m.parameters(recurse=False))
                    if _keeps_calls(m, self.calls[-1].params):
                        self.inside = self.calls[-1].inside = []
                self.leaf_depth += 1
        return hook

    def _post(self, leaf):
        def hook(mod, args, kwargs, out):
            self.stack.pop()
            if leaf:
                self.leaf_depth -= 1
                if self.leaf_depth == 0:
                    self.inside = None
                if self.active() and self.calls and self.calls[-1].seq_after < 0:
                    self.calls[-1].outputs = list(tensors_in(self.describe(out)))
                    self.calls[-1].seq_after = _get_sequence_nr()
                    self.watch(out)
        return hook


class _ApiLabels(TorchFunctionMode):
    def __init__(self, rec: _Recorder):
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.rec.api is not None or not self.rec.active():
            return func(*args, **kwargs)
        self.rec.api = getattr(func, "__name__", str(func))
        try:
            return func(*args, **kwargs)
        finally:
            self.rec.api = None


class _AtenOutsideLeaves(TorchDispatchMode):
    def __init__(self, rec: _Recorder):
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = self.rec
        if not rec.active():
            if rec.inside is not None and rec.recording and rec.suspended == 0 and rec.leaf_depth == 1:
                return self._inside(func, args, kwargs)
            return func(*args, **kwargs)
        op = overload_name(func)
        params = {"args": rec.describe(list(args)), "kwargs": rec.describe(kwargs) if kwargs else None}
        call = Call(op=op, op_type=functional_type(func, args, kwargs), scope="functional", api=rec.api,
                    params=params, inputs=list(tensors_in([params["args"], params["kwargs"]])), path=rec.enclosing(),
                    replay=params, feeds=rec.feeds(args, kwargs))
        rec.calls.append(call)
        rec._own(list(args) + list(kwargs.values()))
        out = func(*args, **kwargs)
        call.outputs = list(tensors_in(rec.describe(out)))
        call.seq_after = _get_sequence_nr()
        rec.watch(out)
        return out

    def _inside(self, func, args, kwargs):
        """Run an aten call of the unlisted leaf module running now, kept in its record's ``inside``."""
        rec = self.rec
        params = {"args": rec.describe(list(args)), "kwargs": rec.describe(kwargs) if kwargs else None}
        out = func(*args, **kwargs)
        op = overload_name(func)
        rec.inside.append({"op": op, "op_type": functional_type(func, args, kwargs), "params": params,
                           "inputs": strip_replay(list(tensors_in([params["args"], params["kwargs"]]))),
                           "outputs": strip_replay(list(tensors_in(rec.describe(out))))})
        return out


def _keeps_calls(m: torch.nn.Module, params: dict) -> bool:
    """Whether a leaf module's aten calls are kept (``inside``): one of a class the op table does not list
    (:func:`opcost.analysis.optypes.unlisted`; ``params``: its record's, which name its base class), of one it lists
    as written in Python over aten calls (:func:`opcost.analysis.optypes.python_composed`: GPT-2's tanh GELU), or of a
    subclass of one it lists with a ``forward`` of its own (timm's ``StdConv2d`` standardises its weight, then
    convolves); not a fused fast path (one call of several modules the table places)."""
    from opcost.analysis import optypes

    if fastpath.is_fused(m):
        return False
    if optypes.unlisted(type(m).__name__, params.get(optypes.BASE)) or optypes.python_composed(type(m).__name__):
        return True
    base = optypes.base_class(type(m))
    return base is not None and type(m).forward is not base.forward


def inside_json(inside: list | None) -> str | None:
    """The `inside` column of a configuration from its first call's aten calls: one entry per distinct call, with
    its ``count`` per module call (None: not an unlisted leaf module)."""
    if inside is None:
        return None
    seen: dict[str, dict] = {}
    for c in inside:
        key = canonical_json([c["op"], strip_replay(c["params"])])
        if key in seen:
            seen[key]["count"] += 1
        else:
            seen[key] = {**c, "count": 1}
    return canonical_json(list(seen.values()))


@dataclass
class Capture:
    """One observed iteration: the records in call order, their backward node counts, and autograd bookkeeping."""

    calls: list[Call]
    backward: list[Counter]
    unattributed: int  # executed autograd nodes not attributed to a record (0 unless something escaped)
    seq0: int  # autograd sequence number at the start of the iteration (record bounds are relative to it)
    param_owner: dict = field(default_factory=dict)  # id(parameter) -> index of the first record that used it
    # per record: the index of the record during or after which the model dropped the last Python reference to its
    # outputs (its own index when dropped at once; the last record's for outputs alive when the iteration ended)
    released: list = field(default_factory=list)

    def config_ids(self, mode: str) -> list[str]:
        return [config_id(c.op, c.params, c.inputs, mode) for c in self.calls]

    def relative_bounds(self) -> list[int]:
        return [c.seq_after - self.seq0 for c in self.calls]


def record_calls(workload: Workload) -> Capture:
    """Run one iteration under the observers (see module docstring)."""
    module = workload.model.module
    rec = _Recorder(workload.model.name, module, workload.carried())
    backward = []
    unattributed = 0
    try:
        if workload.mode == "training":
            module.zero_grad(set_to_none=True)
        seq0 = _get_sequence_nr()
        with workload.grad_context(), _ApiLabels(rec), _AtenOutsideLeaves(rec):
            out = workload.forward()
            if workload.mode == "training":
                rec.stack.append(LOSS_PATH)
                loss = loss_of(out, workload.model.name)
                rec.stack.pop()
            del out
        rec.recording = False
        last = len(rec.calls) - 1
        released = [rec.released.get(i, last) for i in range(len(rec.calls))]  # still alive: the iteration's end
        backward = [Counter() for _ in rec.calls]
        if workload.mode == "training":
            unattributed = _attribute_backward(rec, loss, backward)
    finally:
        rec.close()
    return Capture(rec.calls, backward, unattributed, seq0, dict(rec.param_owner), released)


def graph_nodes(root) -> list:
    """Every autograd node reachable from ``root``."""
    seen, order, todo = set(), [], [root]
    while todo:
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        order.append(n)
        todo.extend(nxt for nxt, _ in n.next_functions)
    return order


def param_nodes(rec_params: dict, owner: dict) -> dict:
    """id(AccumulateGrad node) -> record index, for parameters whose first user is known."""
    return {id(torch.autograd.graph.get_gradient_edge(rec_params[pid]).node): idx for pid, idx in owner.items()}


def _attribute_backward(rec: _Recorder, loss: torch.Tensor, backward: list[Counter]) -> int:
    bounds = [c.seq_after for c in rec.calls]
    owner_of_node = param_nodes(rec.params, rec.param_owner)
    unattributed = [0]
    handles = []

    def attribute(node):
        def hook(grad_outputs):
            if id(node) in owner_of_node:
                backward[owner_of_node[id(node)]][node.name()] += 1
                return
            idx = bisect.bisect_right(bounds, node._sequence_nr())
            if idx < len(backward) and node._sequence_nr() < 2**63:
                backward[idx][node.name()] += 1
            else:
                unattributed[0] += 1
        return hook

    nodes = graph_nodes(loss.grad_fn)
    for n in nodes:
        handles.append(n.register_prehook(attribute(n)))
    try:
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return unattributed[0]


def extract(workload: Workload, capture: Capture | None = None) -> pd.DataFrame:
    """The deduplicated operator configurations of one workload (columns :data:`opcost.tables.LAYERS`), from
    ``capture`` (:func:`record_calls` of the workload; recorded here when not given)."""
    cap = capture or record_calls(workload)
    groups: dict[str, dict] = {}
    for pos, (call, bwd, cid) in enumerate(zip(cap.calls, cap.backward, cap.config_ids(workload.mode))):
        g = groups.get(cid)
        if g is None:
            g = groups[cid] = {"call": call, "positions": [], "releases": [], "feeds": [], "paths": [],
                               "apis": Counter(), "backward": Counter()}
        g["positions"].append(pos)
        g["releases"].append(cap.released[pos])
        g["feeds"].append(call.feeds)
        if call.path not in g["paths"]:
            g["paths"].append(call.path)
        if call.api:
            g["apis"][call.api] += 1
        g["backward"].update(bwd)
    rows = []
    for order, (cid, g) in enumerate(groups.items()):
        c: Call = g["call"]
        rows.append({
            "model": workload.model.name, "batch": workload.batch, "mode": workload.mode,
            "config_id": cid, "op": c.op, "op_type": c.op_type, "scope": c.scope,
            "api": g["apis"].most_common(1)[0][0] if g["apis"] else None,
            "count": len(g["positions"]), "order": order, "positions": json.dumps(g["positions"]),
            "releases": json.dumps(g["releases"]), "feeds": json.dumps(g["feeds"]),
            "params": canonical_json(c.params), "inputs": canonical_json(strip_replay(c.inputs)),
            "outputs": canonical_json(strip_replay(c.outputs)),
            "module_paths": json.dumps(g["paths"]),
            "backward": canonical_json(dict(sorted(g["backward"].items()))) if workload.mode == "training" else None,
            "replay": canonical_json({**c.replay, "model": workload.model.name}),
            "inside": inside_json(c.inside),
        })
    return frame(LAYERS, rows)

