"""PyTorch's fused inference fast paths, kept as the model runs them.

``nn.TransformerEncoderLayer``, ``nn.MultiheadAttention`` and ``nn.TransformerEncoder`` run one fused kernel
(``aten::_transformer_encoder_layer_fwd``, ``aten::_native_multi_head_attention``, nested tensors) in inference when
their conditions hold (eval mode, no gradients, ``batch_first``...), unless a ``__torch_function__`` or dispatch mode
is active: the observers extraction and in-situ profiling run under would switch the fast path off and record the
slow path's dozens of operators in its place.

:func:`probe` runs one plain inference iteration under the profiler (which switches nothing off), with a marker
around each call of those modules, and finds the instances that dispatched a fused kernel. :func:`mark` remembers
them: :func:`opcost.model.extract.is_leaf` then treats each as a leaf module, recorded and profiled as one call, and
the observers step aside while it runs (:func:`watch_calls` wraps its forward instead of hooking it: PyTorch also
switches the fast path off when a module or any module inside it has hooks), so that it runs the path it runs
without them.
Training never takes a fast path (it needs no gradients), so training workloads are left as they are.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sys
import tempfile
import weakref

import torch
from torch import nn

# module class -> the aten operators that show it ran its fused fast path
FAST_PATHS: dict[type, tuple[str, ...]] = {
    nn.TransformerEncoderLayer: ("aten::_transformer_encoder_layer_fwd",),
    nn.MultiheadAttention: ("aten::_native_multi_head_attention",),
    nn.TransformerEncoder: ("aten::_nested_tensor_from_mask", "aten::_nested_tensor_from_mask_left_aligned"),
}
FUSED_OPS = frozenset(op for ops in FAST_PATHS.values() for op in ops)
MARKER = "opcost.fastpath::"
log = logging.getLogger(__name__)

_FUSED: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()


KINETO_NOISE = re.compile(r"^(USDT|STAGE):\S+ \S+ \d+:\d+ \S+\.cpp:\d+\]|^ERROR:.*gpuGetDeviceCount failed")


@contextlib.contextmanager
def kineto_quiet():
    """Kineto's own lines (``USDT: ... profiler_start``, a CPU-only host's failed GPU count) left out of standard
    error while the block runs, which no setting silences; every other line written there is kept, in order, once
    the block ends (a crash inside loses nothing: they are written back on the way out)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [ln for ln in held.read().decode(errors="replace").splitlines(keepends=True)
                    if not KINETO_NOISE.match(ln)]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


@contextlib.contextmanager
def cpu_profiler():
    """``torch.profiler.profile`` of CPU activity, without Kineto's noise on standard error (:func:`kineto_quiet`)
    (the profiler switches no fast path off: what a plain iteration runs is what it sees)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    with kineto_quiet(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        yield prof


def candidates(module: nn.Module) -> dict[str, nn.Module]:
    """The submodules (path -> module) of classes with a fused fast path."""
    kinds = tuple(FAST_PATHS)
    return {path: m for path, m in module.named_modules() if isinstance(m, kinds)}


def probe(workload) -> list[str]:
    """Paths of the modules of ``workload`` that ran a fused fast path in one plain inference iteration."""
    if workload.mode == "training":
        return []
    cands = candidates(workload.model.module)
    if not cands:
        return []
    open_markers = []

    def pre(mod, args):
        rf = torch.autograd.profiler.record_function(MARKER + paths[mod])
        rf.__enter__()
        open_markers.append(rf)

    def post(mod, args, out):
        open_markers.pop().__exit__(None, None, None)

    paths = {m: path for path, m in cands.items()}
    handles = [_ForwardWrap(m, pre, post) for m in cands.values()]  # hooks would switch the fast path off
    try:
        with cpu_profiler() as prof:
            workload.step()
    finally:
        for h in reversed(handles):
            h.remove()
    fused = set()
    for ev in prof.events():
        if ev.name not in FUSED_OPS:
            continue
        parent = ev.cpu_parent
        while parent is not None and not parent.name.startswith(MARKER):
            parent = parent.cpu_parent
        if parent is not None:  # the innermost candidate around the fused kernel ran it
            fused.add(parent.name.removeprefix(MARKER))
    return [p for p in cands if p in fused]


def mark(module: nn.Module, paths) -> None:
    """Remember the submodules of ``module`` at ``paths`` as running a fused fast path (:func:`is_fused`), and no
    other (a model probed again in another mode is marked anew)."""
    paths = set(paths)
    for path, m in candidates(module).items():
        (_FUSED.add if path in paths else _FUSED.discard)(m)
    if paths:
        log.info("PyTorch's fused inference fast path runs in %s: each recorded, profiled and timed as one call, "
                 "as it runs", ", ".join(sorted(paths)))


def is_fused(m: nn.Module) -> bool:
    """Whether ``m`` was found running a fused fast path (:func:`mark`)."""
    return m in _FUSED


def params(m: nn.Module) -> dict:
    """What a fused module's constructor parameters, read back from its attributes, leave out but its cost depends
    on: its attention heads and the shapes of its weights (``dim_feedforward``...)."""
    attn = m if isinstance(m, nn.MultiheadAttention) else getattr(m, "self_attn", None)
    if attn is None and isinstance(m, nn.TransformerEncoder) and len(m.layers):
        attn = getattr(m.layers[0], "self_attn", None)
    out = {"weights": {name: list(p.shape) for name, p in m.named_parameters()}}
    if attn is not None:
        out["num_heads"] = int(attn.num_heads)
    return out


class _ForwardWrap:
    """``pre``/``post`` called around a module's calls, as forward hooks would (a value they return replaces the
    arguments or the output; ``post`` also runs when the call raises), by wrapping its ``forward``; while it runs, no
    ``__torch_function__`` or dispatch mode is active. ``remove()`` restores the forward it wrapped."""

    def __init__(self, m: nn.Module, pre=None, post=None, pre_kwargs: bool = False, post_kwargs: bool = False):
        from torch.utils._python_dispatch import _disable_current_modes

        self.m, self.prev = m, m.__dict__.get("forward")
        inner = m.forward

        @functools.wraps(inner)
        def run(*args, **kwargs):
            if pre is not None:
                new = pre(m, args, kwargs) if pre_kwargs else pre(m, args)
                if new is not None:
                    args, kwargs = new if pre_kwargs else (new if isinstance(new, tuple) else (new,), kwargs)
            out, done = None, False
            try:
                with torch._C.DisableTorchFunction(), _disable_current_modes():
                    out = inner(*args, **kwargs)
                done = True
            finally:
                if post is not None:
                    new = post(m, args, kwargs, out) if post_kwargs else post(m, args, out)
                    if done and new is not None:
                        out = new
            return out

        self.run = run
        m.forward = run

    def remove(self) -> None:
        if self.m.__dict__.get("forward") is self.run:
            if self.prev is None:
                del self.m.forward
            else:
                self.m.forward = self.prev


def watch_calls(m: nn.Module, pre=None, post=None, pre_kwargs: bool = False, post_kwargs: bool = False) -> list:
    """Handles (``.remove()``) of ``pre(module, args[, kwargs])`` and ``post(module, args[, kwargs], output)`` called
    around every call of ``m``: forward hooks (``post`` always called), except on a fused module
    (:func:`is_fused`), whose fast path any hook on it or inside it switches off: its forward is wrapped instead,
    and runs with no observer mode active, as it runs in a plain iteration."""
    if is_fused(m):
        return [_ForwardWrap(m, pre, post, pre_kwargs, post_kwargs)]
    handles = []
    if pre is not None:
        handles.append(m.register_forward_pre_hook(pre, with_kwargs=pre_kwargs))
    if post is not None:
        handles.append(m.register_forward_hook(post, with_kwargs=post_kwargs, always_call=True))
    return handles


def named_outside(module: nn.Module):
    """``named_modules()`` of ``module`` without the modules inside a fused one (never called on its fast path;
    a hook on one would switch the fast path off)."""
    inside = set()
    for path, m in module.named_modules():
        if id(m) in inside:
            continue
        if is_fused(m):
            inside.update(id(c) for c in m.modules() if c is not m)
        yield path, m
