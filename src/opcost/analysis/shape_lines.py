"""Interpolation between measured configurations on one shape line, for the cost model
(:mod:`opcost.analysis.costmodel`, method ``interpolated``).

A configuration's *line* is everything of its call but the sizes of its tensors: op type, mode, phase, the
non-tensor arguments but those a tensor's size repeats (:data:`SIZE_PARAMS`: a Linear's ``out_features`` is its
output's last size), each tensor's dtype and rank, and whether a matrix product's output rows are misaligned
(:func:`opcost.analysis.features.misaligned`: they run at 0.7 times the rate of aligned ones). Its *dims* are its
input and output tensors' sizes in order. Two measured configurations of a line *bracket* an unmeasured one when the
three differ at the same positions of their dims, the sizes at those positions scale by one factor from each point
to the unmeasured one (one size varies: a length, a batch), and the unmeasured one lies strictly between the two: a
decode step's attention over a cache of 2,048 tokens between sweep points at 1,024 and 4,096 (the keys' and values'
lengths differ, nothing else), a Linear at batch 2 between batches 1 and 4, a language model's head over a
vocabulary of 50,256 between heads of 32,000 and 65,536. Its cost is interpolated between the nearest such pair,
linearly in log cost against log bytes (log FLOPs where the two have the same bytes): the measured costs' own curve,
a last-level-cache crossing included, at the resolution of the points, which one roofline law fitted over the whole
op type misses. Never extrapolated: outside every bracket, the cost model's law answers. A measured cost enters as
its line's *envelope*: the highest cost measured at sizes no larger in any position (in a workload no busier),
so that an interpolated cost never falls as a size grows, whatever the noise of its neighbours. GPT-2's head over
50,257 logits costs more than one over 65,536: misaligned, it lies on the line of heads over 30,522 and 65,537
logits, not of 32,000 and 65,536.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from opcost.analysis.features import contiguous, misaligned
from opcost.model.tensors import specs

ONE_SIZE = 1.02  # the sizes that differ scale by one factor, within this (a cache of L + 1 keys and one of L)
# module arguments that an input's or output's size repeats: part of the dims, not of the line (an embedding's
# num_embeddings is not: its table is no input, and a lookup's cost depends on it)
SIZE_PARAMS = frozenset({"in_features", "out_features", "in_channels", "out_channels", "num_features",
                         "normalized_shape", "embedding_dim"})


def _strip(value, top: bool = True):
    """``value`` (decoded params) with each tensor spec reduced to its dtype and rank and, at the top level, the
    :data:`SIZE_PARAMS` left out."""
    if isinstance(value, dict):
        if "T" in value:
            return {"dtype": value.get("dtype"), "rank": len(value.get("T") or [])}
        return {k: _strip(v, False) for k, v in value.items() if not (top and k in SIZE_PARAMS)}
    if isinstance(value, list):
        return [_strip(v, False) for v in value]
    return value


def line_of(op_type: str, mode: str, phase: str, params, inputs, outputs=None) -> tuple[str, tuple[int, ...]]:
    """(line, dims) of one configuration (``params``, ``inputs`` and ``outputs``: the `layers` JSON columns); line
    "" where its inputs say no sizes."""
    try:
        ins, outs = specs(inputs), specs(outputs)
        call = json.loads(params) if isinstance(params, str) else None
    except ValueError:
        return "", ()
    if not any(spec["T"] for spec in ins):
        return "", ()
    tensors = ins + outs
    dims = tuple(int(d) for spec in tensors for d in spec["T"] or [])
    # a strided tensor takes another kernel path (a reshape or contiguous() of one copies; of a contiguous one, not)
    ranks = [(spec.get("dtype"), len(spec["T"] or []), contiguous(spec)) for spec in tensors]
    return json.dumps([op_type, mode, phase, _strip(call), ranks, misaligned(op_type, outs)], sort_keys=True,
                      default=str), dims


def lines(rows: pd.DataFrame, mode: pd.Series) -> tuple[list[str], list[tuple]]:
    """(lines, dims) of `layers`-like rows (``op_type``, ``phase``, ``params``, ``inputs``, ``outputs``) in mode
    ``mode``."""
    if rows.empty or "inputs" not in rows:
        return [""] * len(rows), [()] * len(rows)
    none = pd.Series([None] * len(rows), index=rows.index)
    pairs = [line_of(t, m, p, c, i, o) for t, m, p, c, i, o in
             zip(rows["op_type"], mode, rows["phase"], rows.get("params", none), rows["inputs"],
                 rows.get("outputs", none))]
    return [p[0] for p in pairs], [p[1] for p in pairs]


SAME_CONTEXT = 0.25  # decades of a workload's bytes within which two measured calls are of one context


@dataclass
class Lines:
    """The measured configurations by line: their dims, log bytes, log FLOPs and log cost."""

    # line -> list of (dims, log bytes, log flops, log seconds, context, log envelope seconds): the envelope is the
    # highest cost measured at dims no larger in any position (in a workload no busier), what the point's own
    # cost would be were the line's costs monotone; interpolation and lower bounds use it, so that an estimate
    # between noisy neighbours never falls as a size of them grows
    points: dict = field(default_factory=dict)

    @classmethod
    def of(cls, line, dims, nbytes, flops, seconds, context=None) -> "Lines":
        """``context``: per point, the log10 bytes its workload moves (missing: unknown)."""
        out = cls()
        context = [math.nan] * len(seconds) if context is None else list(context)
        for ln, d, b, f, y, c in zip(line, dims, nbytes, flops, seconds, context):
            if ln and y > 0:
                out.points.setdefault(ln, []).append((tuple(d), math.log(max(b, 1.0)), math.log(max(f, 1.0)),
                                                      math.log(y), float(c) if c is not None else math.nan))
        for ln, pts in out.points.items():
            out.points[ln] = [(*p, max(q[3] for q in pts if len(q[0]) == len(p[0]) and _no_busier(q[4], p[4])
                                       and all(a <= b for a, b in zip(q[0], p[0])))) for p in pts]
        return out

    def estimate(self, line: str, dims, nbytes: float, flops: float) -> float:
        """Seconds interpolated between the nearest bracketing pair of ``line`` (see the module); NaN: none."""
        pts = self.points.get(line) if line else None
        if not pts or len(pts) < 2:
            return math.nan
        dims = tuple(dims)
        below, above = [], []  # (the positions that differ, point), on each side
        for p in pts:
            if len(p[0]) != len(dims) or p[0] == dims:
                continue
            side = _one_size(p[0], dims)
            if side is None:
                continue  # not one size varying: the differing sizes do not scale together
            diff = tuple(i for i, (a, b) in enumerate(zip(p[0], dims)) if a != b)
            (below if side == "below" else above).append((diff, p))
        best = None
        xb, xf = math.log(max(nbytes, 1.0)), math.log(max(flops, 1.0))
        for diff_a, a in below:
            for diff_b, b in above:
                if diff_a != diff_b:
                    continue
                use = 1 if a[1] != b[1] else 2  # bytes, else FLOPs
                if a[use] == b[use]:
                    continue
                x = xb if use == 1 else xf
                gap = abs(b[use] - a[use])
                if best is None or gap < best[0]:
                    w = (x - a[use]) / (b[use] - a[use])
                    best = (gap, a[5] + min(max(w, 0.0), 1.0) * (b[5] - a[5]))
        return math.exp(best[1]) if best is not None else math.nan

    def bounds(self, line: str, dims, context: float = math.nan) -> tuple[float, float]:
        """(the highest measured cost of a configuration of ``line`` that differs from ``dims`` by one size, smaller
        (a batch, a sequence, a context...), measured in a workload no busier than ``context`` (its log10 bytes at
        most :data:`SAME_CONTEXT` decades above; any, where either is unknown), the lowest of one larger measured
        in a workload no less busy): a cost at ``dims`` outside them would fall as that size grows, or as the
        traffic around the operator grows (a decode step's Linears at a longer context). (0, inf) where none is."""
        lo, hi = 0.0, math.inf
        dims = tuple(dims)
        for p in (self.points.get(line) or []) if line else []:
            if len(p[0]) != len(dims) or p[0] == dims:
                continue
            side = _one_size(p[0], dims)
            if side == "below" and _no_busier(p[4], context):
                lo = max(lo, math.exp(p[5]))
            elif side == "above" and _no_busier(context, p[4]):
                hi = min(hi, math.exp(p[3]))
        return lo, hi


def _no_busier(a: float, b: float) -> bool:
    """Whether a workload moving 10^``a`` bytes is no busier than one moving 10^``b``, within :data:`SAME_CONTEXT`
    decades (either unknown: it may be)."""
    return not a - b > SAME_CONTEXT  # NaN compares False: unknown contexts pass


def _one_size(at, dims) -> str | None:
    """Whether the measured ``at`` differs from ``dims`` by one size (the sizes that differ scale together, within
    :data:`ONE_SIZE`): ``below`` where it is the smaller, ``above`` the larger; None otherwise."""
    diff = [i for i, (a, b) in enumerate(zip(at, dims)) if a != b]
    ratios = [dims[i] / at[i] for i in diff if at[i] > 0]
    if not diff or len(ratios) < len(diff) or max(ratios) > ONE_SIZE * min(ratios) or min(ratios) < 1 < max(ratios):
        return None
    return "below" if ratios[0] > 1 else "above"
