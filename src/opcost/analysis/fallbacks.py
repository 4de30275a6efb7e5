"""The estimate of an operator configuration before the trees correct it: interpolated on its shape line, its op
type's roofline law, or the labelled fallback that answers for a type without a law of its own
(:mod:`opcost.analysis.costmodel`'s docstring says which, in which order)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from opcost.analysis import optypes


def baseline(model, data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(estimate, method) per row of a feature frame ``data`` by the fitted
    :class:`~opcost.analysis.costmodel.CostModel` ``model``, without its trees: interpolated between two measured
    configurations of the row's shape line, else its op type's law, else the fallbacks in their order (``twin``,
    ``family``, ``nearest``, ``global``; the cost model's module docstring says each); missing (method ``none``)
    where nothing answers."""
    est = np.full(len(data), np.nan)
    method = np.array(["none"] * len(data), dtype=object)
    for i, r in enumerate(data.itertuples(index=False)):
        answers = lambda law: law is not None and law.answers(r.flops, r.bytes)  # noqa: E731
        if model.lines is not None and getattr(r, "line", ""):
            between = model.lines.estimate(r.line, r.dims, r.bytes, r.flops)
            if np.isfinite(between):
                est[i], method[i] = between, "interpolated"
                continue
        law = model.laws.get((r.op_type, r.mode, r.phase))
        if answers(law):
            est[i], method[i] = float(law(r.flops, r.bytes)), "law"
            continue
        same = (model.points["mode"] == r.mode) & (model.points["phase"] == r.phase)
        if r.flops >= 1 or r.bytes >= 1:  # calls without work (views) say nothing of the cost of a call that has
            same &= (model.points["flops"] >= 1) | (model.points["bytes"] >= 1)
        pts = model.points[same & (model.points["op_type"] == r.op_type)]
        if pts.empty:
            twin = next((law for t in optypes.twins(r.op_type, r.base)
                         if answers(law := model.laws.get((t, r.mode, r.phase)))), None)
            if twin is not None:
                est[i], method[i] = float(twin(r.flops, r.bytes)), "twin"
                continue
        fam = optypes.family(r.op_type, r.base)
        law = model.family_laws.get((fam, r.mode, r.phase))
        law = law if answers(law) else None
        call = model.family_calls.get((fam, r.mode, r.phase))
        if pts.empty and call is not None and r.flops < 1 and r.bytes < 1:
            est[i], method[i] = call, "family"
            continue
        if pts.empty and law is not None:
            est[i], method[i] = float(law(r.flops, r.bytes)), "family"
            continue
        if pts.empty and fam is not None:  # a family with one or two measured configurations: its nearest
            pts = model.points[same & (model.points["family"] == fam)]
        if len(pts):
            d = (pts["log_flops"] - r.log_flops) ** 2 + (pts["log_bytes"] - r.log_bytes) ** 2
            near = pts.loc[d.idxmin()]
            g = law or model.global_laws.get((r.mode, r.phase))
            if answers(g):  # scaled along the family's or the phase's law: its floor keeps small calls from 0
                scale = float(g(r.flops, r.bytes)) / float(g(near["flops"], near["bytes"]))
            else:
                by = "flops" if fam in optypes.COMPUTE_FAMILIES else "bytes"
                scale = max(float(getattr(r, by)), 1.0) / max(float(near[by]), 1.0)
            est[i] = float(near["y"]) * scale
            method[i] = "nearest" if near["op_type"] == r.op_type else "family"
            continue
        law = model.global_laws.get((r.mode, r.phase))
        if answers(law):
            est[i], method[i] = float(law(r.flops, r.bytes)), "global"
    return est, method
