"""In-situ (simultaneous) profiling: every operator configuration timed inside real model iterations, in one pass.

The call sequence of one iteration comes from extraction (:func:`opcost.model.extract.record_calls`), so each timed call
maps to its configuration id by position. Two kinds of iterations alternate, so no observer sits inside another's
timed region:

* module iterations: forward hooks on leaf modules time each leaf-module call (no dispatch mode is active, so the
  module's own aten ops run untouched); in training, hooks on the autograd nodes time the backward pass, each node
  attributed to the call that created it by its autograd sequence number relative to the iteration's start;
* functional iterations: a ``TorchDispatchMode`` times each aten op that runs outside leaf modules;
* plain iterations: no observer at all, the whole iteration timed; they give an end-to-end figure (``method =
  interleaved``) taken in the same minutes, hence the same machine state, as the in-situ operator times (on the
  project's VMs the machine's speed drifts by 10-50% over tens of seconds, which a separate e2e job cannot see).

Timestamps are marks of :class:`opcost.measure.timing.Clock`, read after each iteration: on CUDA, events recorded on
the stream, so no timed region synchronises the device. On a launch-bound GPU each span also holds the hooks' own
CPU work (docs/methodology.md, section 6). Rows share the `measurements` schema with ``source = insitu``; samples
are single calls.
"""
from __future__ import annotations

import bisect
import time
from collections import defaultdict

import numpy as np
import torch
from torch._C._autograd import _get_sequence_nr
from torch.utils._python_dispatch import TorchDispatchMode

from opcost.errors import OpcostError
from opcost.measure.e2e import e2e_frames
from opcost.measure.energy import NoMeter, missing
from opcost.measure.hostinfo import host_facts, now
from opcost.measure.timing import Clock, Measurement, TimingSettings, clock_for
from opcost.model import fastpath
from opcost.model.extract import Capture, graph_nodes, leaf_modules, param_nodes, record_calls
from opcost.model.workload import Workload, loss_of, workload_key
from opcost.tables import MEASUREMENTS, SAMPLES, frame


class _LeafDepth:
    """Forward hooks on leaf modules: keep the leaf depth, optionally mark the span of each outermost leaf call."""

    def __init__(self, module: torch.nn.Module, clock: Clock, timed: bool):
        self.depth, self.mark, self.timed = 0, clock.mark, timed
        self.spans: list[tuple] = []  # (start mark, end mark), read by _seconds after the iteration
        self._t0 = None
        self.handles = []
        for m in leaf_modules(module):
            self.handles += fastpath.watch_calls(m, self._pre, self._post)

    def _pre(self, mod, args):
        if self.depth == 0 and self.timed:
            self._t0 = self.mark()
        self.depth += 1

    def _post(self, mod, args, out):
        self.depth -= 1
        if self.depth == 0 and self.timed:
            self.spans.append((self._t0, self.mark()))

    def close(self):
        for h in self.handles:
            h.remove()


class _TimeOutsideLeaves(TorchDispatchMode):
    def __init__(self, leaves: _LeafDepth, clock: Clock):
        super().__init__()
        self.leaves, self.mark = leaves, clock.mark
        self.spans: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.leaves.depth > 0:
            return func(*args, **(kwargs or {}))
        t0 = self.mark()
        out = func(*args, **(kwargs or {}))
        self.spans.append((t0, self.mark()))
        return out


def _seconds(clock: Clock, spans: list[tuple]) -> list[float]:
    return [clock.seconds(a, b) for a, b in spans]


def _forward(wl: Workload):
    out = wl.forward()
    return loss_of(out, wl.model.name) if wl.mode == "training" else None


def _timed_backward(loss, bounds: list[int], seq0: int, owners: dict, clock: Clock) -> dict[int, float]:
    """Backward with per-node timing; returns call index -> seconds of backward work it caused. The spans tile the
    backward pass: a node's span runs from the end of the node before it (the pass's start, for the first) to its own
    end, so that the engine's work between nodes is in the node it prepares, as in an isolated backward row (whose
    per-node engine work is not taken out, :mod:`opcost.measure.engine`), and the engine's start of the pass in the
    first node's span (isolated rows count it once per iteration as a row of its own)."""
    spans: dict[int, list[tuple]] = defaultdict(list)
    mark = clock.mark
    last = [None]  # the end mark of the latest node
    handles = []
    for node in graph_nodes(loss.grad_fn):
        seq = node._sequence_nr()
        if id(node) in owners:
            idx = owners[id(node)]
        elif seq < 2**63:
            idx = bisect.bisect_right(bounds, seq - seq0)
        else:
            continue

        def post(grad_inputs, grad_outputs, idx=idx):
            end = mark()
            spans[idx].append((last[0], end))
            last[0] = end

        handles.append(node.register_hook(post))
    try:
        last[0] = mark()
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return {idx: sum(clock.seconds(a, b) for a, b in sp) for idx, sp in spans.items()}


def profile_insitu(wl: Workload, settings: TimingSettings, device: str, capture: Capture | None = None):
    """Time every configuration of ``wl`` inside model iterations. Returns (`measurements` rows, `samples` rows,
    the interleaved `e2e` row)."""
    cap = capture or record_calls(wl)
    ids = cap.config_ids(wl.mode)
    scopes = [c.scope for c in cap.calls]
    mod_idx = [i for i, s in enumerate(scopes) if s == "module"]
    fn_idx = [i for i, s in enumerate(scopes) if s == "functional"]
    bounds = cap.relative_bounds()
    module = wl.model.module
    clock = clock_for(device)
    mark = clock.mark
    params = {id(p): p for p in module.parameters()}
    samples: dict[tuple[int, str], list[float]] = defaultdict(list)  # (call index, phase) -> seconds
    training = wl.mode == "training"
    t_start = time.perf_counter()
    iterations = 0
    warmup = max(1, settings.warmup_calls)
    plain: list[float] = []
    while True:
        if iterations >= warmup:
            t0 = mark()
            wl.step()
            plain.append(clock.seconds(t0, mark()))
        for kind in ("module", "functional"):
            if training:
                module.zero_grad(set_to_none=True)
            leaves = _LeafDepth(module, clock, timed=kind == "module")
            try:
                seq0 = _get_sequence_nr()
                with wl.grad_context():
                    if kind == "module":
                        loss = _forward(wl)
                        spans, expect = leaves.spans, mod_idx
                    else:
                        with _TimeOutsideLeaves(leaves, clock) as mode:
                            loss = _forward(wl)
                        spans, expect = mode.spans, fn_idx
                times = _seconds(clock, spans)
            finally:
                leaves.close()
            if len(times) != len(expect):
                raise OpcostError(f"model {wl.model.name}", f"{kind} calls per iteration changed from "
                                  f"{len(expect)} to {len(times)} (data-dependent control flow?)")
            if iterations >= warmup:
                for i, t in zip(expect, times):
                    samples[(i, "forward")].append(t)
            if training and kind == "module":
                owners = param_nodes(params, cap.param_owner)  # after forward: the nodes the graph holds
                per_call = _timed_backward(loss, bounds, seq0, owners, clock)
                if iterations >= warmup:
                    for i, t in per_call.items():
                        if i < len(ids):
                            samples[(i, "backward")].append(t)
            elif training:
                loss.backward()
        iterations += 1
        elapsed = time.perf_counter() - t_start
        if iterations >= warmup + settings.min_samples and (
                elapsed >= settings.max_seconds or iterations >= warmup + settings.max_samples):
            break
    meas, raw = _rows(wl, ids, cap, samples, settings, device)
    m = Measurement(np.asarray(plain), 1, time.perf_counter() - t_start, settings)
    e2e, _ = e2e_frames((wl.model.name, wl.batch, wl.mode), m, "interleaved", device)
    return meas, raw, e2e


def _rows(wl: Workload, ids: list[str], cap: Capture, samples: dict, settings: TimingSettings, device: str):
    by_config: dict[tuple[str, str], list[float]] = defaultdict(list)
    op_type = {}
    for (i, phase), ts in samples.items():
        by_config[(ids[i], phase)].extend(ts)
        op_type[ids[i]] = cap.calls[i].op_type
    facts = host_facts(device)
    rows, raw = [], []
    for (cid, phase), ts in by_config.items():
        m = Measurement(np.asarray(ts), 1, 0.0, settings)
        rows.append({"config_id": cid, "op_type": op_type[cid], "mode": wl.mode, "source": "insitu",
                     "phase": phase, "workload": workload_key(wl.model.name, wl.mode, wl.batch), "status": "ok",
                     "placement": "default", "placement_verified": None, "placement_ok": None, "baseline": True,
                     "cache": None, "engine_s": None,
                     **facts, **m.stats(),
                     **missing(NoMeter()), "attempts": 1, "timestamp": now()})
        raw += [{"key": cid, "source": "insitu", "placement": "default", "phase": phase, "i": k, "seconds": float(t)}
                for k, t in enumerate(ts)]
    return frame(MEASUREMENTS, rows), frame(SAMPLES, raw)

