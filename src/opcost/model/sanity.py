"""What a model does that makes its measured costs suspect, although it runs: checked once per workload at
extraction, reported as warnings in the run's summary (never a failure: the workload is still measured).

* **Non-finite outputs**: a floating-point output holding NaN or infinity (an overflow, a division by zero in the
  model's code): kernels on NaN may take other paths than on numbers.
* **Inputs changed in place**: the iteration writes into its own inputs, so consecutive iterations, which opcost
  times, see other values than the first.
* **Operators that change between iterations**: data-dependent control flow (early exits, routing, loops bounded by
  the data) makes the operator calls of an iteration depend on its inputs. The iteration is run on two sets of
  inputs (seeds 0 and 1) and the aten operator calls each dispatches are counted; where they differ, the calls opcost
  extracted (seed 0) are not those of every iteration, and the warning says by how many calls they differ.
* **A path the observers change**: the aten operators a plain iteration dispatches (seen by the profiler, which
  switches nothing off) against those of the iteration extraction records. PyTorch's own fused fast paths are kept
  (:mod:`opcost.model.fastpath`); any other path that hooks or ``__torch_function__``/dispatch modes switch off is
  named here.
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from opcost.model.workload import Workload, floating_outputs


class _CountAten(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def aten_calls(workload: Workload, inputs: tuple) -> Counter:
    """The aten operators one iteration of ``workload`` dispatches on ``inputs`` (name -> calls)."""
    counter = _CountAten()
    run = Workload(workload.model, workload.batch, workload.mode, inputs)
    with counter:
        run.step()
    return counter.calls


def _non_finite(workload: Workload) -> str | None:
    with torch.no_grad():
        out = workload.forward()
    bad = [t for t in floating_outputs(out) if not bool(torch.isfinite(t).all())]
    if not bad:
        return None
    share = sum(int((~torch.isfinite(t)).sum()) for t in bad) / sum(t.numel() for t in bad)
    return (f"its output holds NaN or infinite values ({share:.0%} of {len(bad)} output tensor(s)): kernels may take "
            "other paths on them than on numbers; check the model's inputs and initialisation")


def _mutated_inputs(workload: Workload) -> str | None:
    before = [t.detach().clone() if isinstance(t, torch.Tensor) else None for t in workload.inputs]
    workload.step()
    changed = [i for i, (b, t) in enumerate(zip(before, workload.inputs))
               if b is not None and not torch.equal(b, t.detach()) and not (
                   b.is_floating_point() and torch.allclose(b, t.detach(), rtol=0, atol=0, equal_nan=True))]
    if not changed:
        return None
    return (f"an iteration changes its input(s) {changed} in place: the iterations opcost times see other values "
            "than the first")


def _control_flow(workload: Workload) -> str | None:
    first = aten_calls(workload, workload.model.make_inputs(workload.batch, 0))
    second = aten_calls(workload, workload.model.make_inputs(workload.batch, 1))
    if first == second:
        return None
    n0, n1 = sum(first.values()), sum(second.values())
    differ = sorted((first - second) + (second - first))
    return (f"its operators change with its inputs (data-dependent control flow): {n0} aten calls per iteration on "
            f"the inputs opcost extracted, {n1} on others ({', '.join(differ[:4])}"
            f"{', ...' if len(differ) > 4 else ''} differ); the extracted operators hold for those inputs only")


# aten operators opcost's own observers dispatch while they read tensors (describe, autograd bookkeeping)
VIEW_OPS = frozenset({"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::expand", "aten::as_strided"})
OBSERVER_OPS = frozenset({"aten::detach", "aten::resolve_neg", "aten::resolve_conj", "aten::to", "aten::_to_copy",
                          "aten::view_as", "aten::alias", "aten::lift_fresh"})


def aten_ops(step) -> set[str]:
    """The aten operators the profiler sees while ``step()`` runs (the profiler switches no fast path off)."""
    from opcost.model.fastpath import cpu_profiler

    with cpu_profiler() as prof:
        step()
    return {ev.name for ev in prof.events() if ev.name.startswith("aten::")}


def _instrumented_path(workload: Workload) -> str | None:
    """The operators of a plain iteration against those of the iteration extraction records: where observers
    switch a fast path off (opcost.model.fastpath keeps PyTorch's own), the two differ."""
    from opcost.model.extract import record_calls

    plain = aten_ops(workload.step)
    observed = aten_ops(lambda: record_calls(workload))
    lost, added = sorted(plain - observed), sorted(observed - plain - OBSERVER_OPS)
    if not lost and set(added) <= VIEW_OPS:  # views an observer's reading adds (argmax's reshape): no path lost
        return None
    return (f"the iteration opcost records runs other operators than a plain one (a fast path its observers switch "
            f"off?): {', '.join(lost[:10]) or 'none'} only in a plain iteration, {', '.join(added[:4]) or 'none'} "
            "only under observation; its costs are those of the observed path")


CHECKS = (_non_finite, _mutated_inputs, _control_flow, _instrumented_path)


def warnings(workload: Workload) -> list[str]:
    """One line per suspect behaviour of ``workload`` (empty: none found). The model's state (gradients) is left as
    an iteration leaves it."""
    found = []
    for check in CHECKS:
        try:
            why = check(workload)
        except Exception:  # a model that fails here fails in extraction too, which names the error
            why = None
        if why:
            found.append(why)
    return found
