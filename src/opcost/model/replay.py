"""Rebuild one operator configuration as a zero-argument callable for the timing core.

* ``module`` scope: the model is rebuilt from its config entry (random weights; the same code path as extraction)
  and the leaf module is taken by its path, so any module class works, user-defined ones included; its inputs are
  synthesized from the recorded specs (same shapes, dtypes, strides; stored integer indices).
* ``functional`` scope: the aten overload is called with arguments synthesized from the recorded description.

Inference configurations run under ``torch.inference_mode()``. Training configurations are timed in two phases:
``forward`` (with autograd recording, as in the model) and ``backward`` (one forward, then backward with a gradient
of ones for each differentiable output, repeated on the retained graph); parameter gradients are reset to ``None``
per call as in the model iteration. In training, an in-place op's mutated argument is cloned per call (a leaf
that requires grad cannot be modified in place), and so is the input of a module with ``inplace=True``; inside the
model that input is a producer's output, written in place without a copy, so the clone is made by the phase's
``prepare`` step, which the rotation runs untimed before each call (a call made without it clones inside itself:
back-to-back blocks, first calls).
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Callable

import torch

from opcost.errors import OpcostError
from opcost.model.opspec import synthesize
from opcost.model.sources import LoadedModel, load_model


@dataclass
class Replay:
    """Callables per phase (``forward``; in training also ``backward``, whose entry is a setup function that runs
    one forward and returns the repeatable backward call, or None when nothing is differentiable), the tensors the
    call reads (inputs; parameters and buffers of a module) and a ``close`` that undoes parameter placement."""

    phases: dict[str, Callable]
    context: Callable[[], contextlib.AbstractContextManager]
    inputs: list = field(default_factory=list)
    params: list = field(default_factory=list)
    close: Callable[[], None] = lambda: None
    # per entry of ``inputs``: a function that makes the call read another tensor in its place (None: that input
    # cannot be replaced, e.g. inputs rotating over a pool); see :func:`slots`
    slots: list = field(default_factory=list)
    # per phase: an untimed step to run before each call (the clones of an in-place call in training); see _caller
    prepare: dict = field(default_factory=dict)

    def outputs(self) -> list[torch.Tensor]:
        """The tensors one forward call returns (call inside ``context()``)."""
        return tensors_of(self.phases["forward"]())

    def callables(self):
        """(phase, zero-argument callable) pairs, ready to time; call inside ``context()``."""
        for phase, fn in self.phases.items():
            if phase == "backward":
                fn = fn()
                if fn is None:
                    continue
            yield phase, fn


def op_overload(op: str):
    """'aten.add_.Tensor' -> torch.ops.aten.add_.Tensor (any registered namespace, e.g. torchvision)."""
    try:
        ns, name, overload = op.split(".", 2)
        if ns == "torchvision":
            import torchvision  # noqa: F401  (registers its operators)
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (ValueError, AttributeError, RuntimeError):
        raise OpcostError(f"operator {op}", "not an operator overload known to this torch") from None


_BINDING_NAMESPACES = ("_C._nn", "_C._VariableFunctions", "_C._fft", "_C._linalg", "_C._special", "nn.functional")


def python_binding(op, args: list, kwargs: dict):
    """The Python entry point a model calls for aten operator ``op`` (``Tensor.<name>`` for a method on ``self``,
    else ``torch.<name>`` or the same name in torch's native namespaces), checked on ``args``/``kwargs`` to return
    outputs of the same shapes and dtypes as the overload; else the overload itself. A model reaches an aten op
    through these bindings (``x.view(...)``, ``torch.cat(...)``), whose argument parsing costs less than calling
    the ``torch.ops`` overload from Python: the overload would overstate every microsecond-scale operator
    (docs/methodology.md, section 1)."""
    name = op._schema.name.split("::", 1)[1]
    first = op._schema.arguments[0] if op._schema.arguments else None
    spaces = ([torch.Tensor] if first is not None and first.name == "self" and str(first.type) == "Tensor" else [])
    spaces += [torch] + [_getpath(torch, ns) for ns in _BINDING_NAMESPACES]
    candidates = [getattr(ns, name) for ns in spaces if ns is not None and callable(getattr(ns, name, None))]
    if not candidates:
        return op
    try:
        ref = _meta(op(*args, **kwargs))
    except Exception:
        return op
    for fn in candidates:
        try:
            if _meta(fn(*args, **kwargs)) == ref:
                return fn
        except Exception:
            continue
    return op


def _getpath(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


def _meta(out) -> list[tuple]:
    return [(tuple(t.shape), t.dtype) for t in tensors_of(out)]


def tensors_of(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensors_of(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in tensors_of(o)]
    return []


def _phases(forward: Callable[[], object], zero: Callable[[], None], training: bool) -> dict[str, Callable]:
    """``forward`` alone; in training also ``backward`` alone (repeated on one retained graph). The backward
    computes the gradient of every leaf its graph reaches (the call's inputs and parameters) and keeps none: inside
    the model the inputs' gradients flow on to their producers, whereas accumulating them into ``.grad`` of the
    replay's leaf inputs would add an elementwise add per input and call that no iteration runs."""
    if not training:
        return {"forward": forward}

    def backward_setup():
        zero()
        outs = [t for t in tensors_of(forward()) if t.requires_grad and t.grad_fn is not None]
        grads = [torch.ones_like(t) for t in outs]
        leaves = graph_leaves(outs)

        def backward():
            torch.autograd.grad(outs, leaves, grads, retain_graph=True, allow_unused=True)

        return backward if outs and leaves else None

    return {"forward": forward, "backward": backward_setup}


def graph_leaves(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The leaf tensors (requiring grad) that the autograd graph of ``outs`` reaches, each once."""
    leaves, seen, stack = {}, set(), [t.grad_fn for t in outs]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # an AccumulateGrad node: its leaf
        if variable is not None:
            leaves[id(variable)] = variable
        else:
            stack.extend(fn for fn, _ in node.next_functions)
    return list(leaves.values())


class ModelCache:
    """Models rebuilt for module replay, one per name, in the process that profiles."""

    def __init__(self, models_cfg: dict, device: str, dtype: str):
        self.models_cfg, self.device, self.dtype = models_cfg, device, dtype
        self._cache: dict[str, LoadedModel] = {}

    def get(self, name: str) -> LoadedModel:
        if name not in self._cache:
            if name not in self.models_cfg:
                raise OpcostError(f"model {name}", "needed to replay a module but not in config `models`")
            self._cache[name] = load_model(name, self.models_cfg[name], self.device, self.dtype)
        return self._cache[name]


def tensor_inputs(args, kwargs) -> list[torch.Tensor]:
    """A call's tensor inputs in order: positional arguments, then keyword values (containers walked)."""
    return tensors_of(list(args)) + tensors_of(list(kwargs.values()))


def slots(args, kwargs) -> list[Callable[[torch.Tensor], None]]:
    """Per tensor input of a call (the order of :func:`tensor_inputs`): a setter that puts another tensor in its
    place in the (mutable, list or dict) argument structure the call reads; None where it sits in a tuple."""
    out: list = []

    def walk(container, keys):
        for k in keys:
            x = container[k]
            if isinstance(x, torch.Tensor):
                out.append(_setter(container, k) if isinstance(container, (list, dict)) else None)
            elif isinstance(x, (list, tuple)):
                walk(x, range(len(x)))
            elif isinstance(x, dict):
                walk(x, list(x))

    walk(args, range(len(args)))
    walk(kwargs, list(kwargs))
    return out


def _setter(container, key) -> Callable[[torch.Tensor], None]:
    def put(t: torch.Tensor) -> None:
        container[key] = t
    return put


def map_tensors(obj, fn):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _arguments(replay: dict, device: str, placement=None, placer=None) -> tuple[list, dict]:
    """Synthesized (args, kwargs); with a placement, input tensor i is copied onto tier ``placement.inputs[i]``."""
    args = synthesize(replay["args"], device)
    kwargs = synthesize(replay.get("kwargs") or {"D": {}}, device)
    if placement is None:
        return args, kwargs
    tiers = iter(placement.inputs)
    return map_tensors(args, lambda t: placer.place(t, next(tiers))), \
        map_tensors(kwargs, lambda t: placer.place(t, next(tiers)))


def place_params(module: torch.nn.Module, tier: str, placer) -> Callable[[], None]:
    """Put the module's parameters and buffers on ``tier``; returns the function that puts the originals back."""
    saved = [(t, t.data) for t in list(module.parameters()) + list(module.buffers())]

    def restore():
        for t, data in saved:
            t.data = data

    try:
        for t, data in saved:
            t.data = placer.place(data, tier)
    except BaseException:
        restore()  # the module is shared by every configuration replayed from it
        raise
    return restore


def _rotation(sets: list[tuple[list, dict]]) -> Callable[[], tuple[list, dict]]:
    """The argument set of the next call: always the same one (warm cache), or the next of a pool (cold cache)."""
    if len(sets) == 1:
        only = sets[0]
        return lambda: only
    state = {"i": -1}

    def next_set():
        state["i"] = (state["i"] + 1) % len(sets)
        return sets[state["i"]]

    return next_set


def _caller(fn: Callable, sets: list[tuple[list, dict]], clone=None
            ) -> tuple[Callable[[], object], Callable[[], None] | None]:
    """(a zero-argument call of ``fn`` on the next argument set (see :func:`_rotation`), its prepare step or None).
    ``clone(i, x)`` says which positional arguments each call needs cloned (in-place ops on autograd leaves): the
    prepare step makes the clones for the next call, untimed; a call that finds none prepared clones inside itself.
    With one set and nothing to clone the arguments are bound directly: the call costs what the model's own call of
    ``fn`` costs."""
    if clone is None and len(sets) == 1:
        a, kw = sets[0]
        return ((lambda: fn(*a, **kw)) if kw else (lambda: fn(*a))), None
    next_set = _rotation(sets)
    if clone is None:
        def call():
            a, kw = next_set()
            return fn(*a, **kw)
        return call, None

    prepared: list[tuple[list, dict]] = []

    def cloned() -> tuple[list, dict]:
        a, kw = next_set()
        return [x.clone() if clone(i, x) else x for i, x in enumerate(a)], kw

    def prepare() -> None:
        prepared[:] = [cloned()]

    def call_cloning():
        a, kw = prepared.pop() if prepared else cloned()
        return fn(*a, **kw)
    return call_cloning, prepare


def input_bytes(row: dict) -> int:
    """Bytes of the tensor inputs of configuration ``row`` (what a cold-cache pool must multiply)."""
    return sum(t.untyped_storage().nbytes() for t in tensor_inputs(*_arguments(json.loads(row["replay"]), "cpu")))


def mode_context(mode: str) -> contextlib.AbstractContextManager:
    """The autograd context a configuration of ``mode`` runs in: inference_mode, or grad enabled in training."""
    return torch.enable_grad() if mode == "training" else torch.inference_mode()


PARALLEL_NUMEL = 32768  # ATen's at::internal::GRAIN_SIZE: elementwise CPU kernels split larger tensors over threads


def refresher(tensors: list) -> Callable[[], None] | None:
    """A function that rewrites ``tensors`` in place with their own values (x * 1, integers | 0, through ``.data``:
    no autograd version bump), so that a call made right after finds them freshly written in cache, as an operator
    finds the output its producer just wrote inside a model. None when there is nothing to rewrite.

    On CPUs only tensors of at least :data:`PARALLEL_NUMEL` elements are rewritten: their rewrite runs on all
    threads with the static partition the producer's and the consumer's elementwise kernels use, so each thread's
    part lands in its own core's cache, as in the model. A smaller tensor would be rewritten by the calling thread
    alone, leaving its lines in that core's cache where the model's parallel producer spreads them, and the rewrite
    itself runs an extra operator before the timed call, which overstated the small inputs' consumers, while small
    inputs stay cached between rounds anyway (docs/methodology.md, section 3)."""
    ts = [t.data for t in tensors if t.numel() and t.layout == torch.strided
          and (t.device.type != "cpu" or t.numel() >= PARALLEL_NUMEL)]
    floats = [t for t in ts if t.is_floating_point() or t.is_complex()]
    ints = [t for t in ts if not (t.is_floating_point() or t.is_complex())]
    if not ts:
        return None

    def refresh():
        for t in floats:
            t.mul_(1)
        for t in ints:
            t.bitwise_or_(False if t.dtype == torch.bool else 0)

    return refresh


def build(row: dict, models: ModelCache, device: str, placement=None, placer=None, pool: int = 1) -> Replay:
    """A callable that performs one call of configuration ``row`` (a `configs` table row); with a
    :class:`opcost.measure.placement.Placement` (and its ``placer``) inputs and parameters are on the requested tiers
    (call ``close()`` after measuring to restore the shared model's parameters). ``pool`` > 1: that many copies of the
    inputs, used in turn (cold cache: each call reads inputs the previous calls did not touch)."""
    replay = json.loads(row["replay"])
    training = row["mode"] == "training"
    ctx = lambda: mode_context(row["mode"])  # noqa: E731
    close = lambda: None  # noqa: E731
    sets = [_arguments(replay, device, placement, placer) for _ in range(max(1, pool))]
    args, kwargs = sets[0]
    if row["scope"] == "module":
        module = models.get(replay["model"]).module.get_submodule(replay["path"])
        module.train(training)
        if placement is not None and placement.params is not None:
            close = place_params(module, placement.params, placer)
        params = list(module.parameters()) + list(module.buffers())
        inplace = training and getattr(module, "inplace", False)
        forward, prepare = _caller(module, sets, (lambda i, x: isinstance(x, torch.Tensor) and x.requires_grad)
                                   if inplace else None)

        zero = lambda: module.zero_grad(set_to_none=True)  # noqa: E731
    else:
        overload = op_overload(row["op"])
        params = []
        mutated = [i for i, a in enumerate(overload._schema.arguments)
                   if a.alias_info is not None and a.alias_info.is_write]
        with torch.no_grad() if training else ctx():  # no_grad: in-place ops on leaves may run once
            op = python_binding(overload, *sets[0])
        leaves = [t for a, kw in sets for t in tensor_inputs(a, kw) if t.requires_grad]
        forward, prepare = _caller(op, sets, (lambda i, x: i in mutated and isinstance(x, torch.Tensor)
                                              and x.requires_grad) if training and mutated else None)

        def zero():
            for t in leaves:
                t.grad = None
    return Replay(_phases(forward, zero, training), ctx, tensor_inputs(args, kwargs), params, close,
                  slots(args, kwargs) if len(sets) == 1 else [], {"forward": prepare} if prepare else {})
