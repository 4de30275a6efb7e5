"""A module class the op table does not list, estimated as the aten operators its calls run.

A leaf module of a model's own class (timm's ``EvoNorm2dS0``, Apertus's ``XIELUActivation``, a decoder's
``...RMSNorm``: no line of its own or of a base class in :data:`opcost.analysis.optypes.TABLE`) is one call in the
workload, but each call runs several aten operators: a group normalisation's reshape, variance, square root and
division; an activation's dozen elementwise steps. Never measured, the cost model can answer it only from a
family (a :data:`~opcost.analysis.optypes.SUFFIXES` rule puts a ``...RMSNorm`` among the normalisations, whose
measured members are fused kernels) or from the ``global`` law fitted to every op type at once, which sees one
elementwise pass where the module makes ten: timm's EvoNorm2dS0 in ``ese_vovnet39b_evos`` came out at 0.05 of its
in-model time, a ``...RMSNorm`` of a small decoder at 0.32.

A class the table lists as written in Python over aten calls (:func:`opcost.analysis.optypes.python_composed`:
Llama's ``LlamaRMSNorm``, GPT-2's ``NewGELUActivation``) is the same where nothing measured it or its twins: its
family's law is a fused kernel's (GPT-2-shaped, 2 layers: its two tanh GELUs estimated at 0.06 ms from the
activations' law, 0.37 ms in model order).

Extraction keeps the aten calls one call of such a module dispatches (the `layers` column ``inside``:
:func:`opcost.model.extract.inside_json`). :func:`compose` costs each of them as a functional call of the workload
would be (measured where the database holds that configuration, else the cost model's estimate, whose law for a
`mul` or a `mean` rests on measurements of those op types or their family) and gives the module their sum,
``count x cost`` per call, with ``method = composed``; its low and high ends are the parts' ends added (the parts of
one module err together). The Python of the module's own ``forward`` between those calls is not in the sum: the
overhead between operators covers it as it covers any model's glue.

A subclass of a class the table lists whose ``forward`` is its own (timm's ``StdConv2d`` and ``ScaledStdConv2d``,
transformers' ``WeightStandardizedConv2d``: the weight standardised by a batch norm over it, then the convolution;
timm's ``Conv2dSame``: a padding, then the convolution) keeps its calls too, and its composition replaces the
answer of its base's twin law, which sees only the base's part. BiT and NF-ResNet-50, never profiled, came out at
0.59 and 0.63 of their time from the convolution's law alone, 0.69 and 0.66 composed: in situ such a module takes
1.6-2x its calls timed in sequence alone. Otherwise only the answers of :data:`REPLACES` are replaced: a class the
database measured keeps its law, one with a measured twin its twin's. Every phase but the forward keeps the cost
model's answer (the backward of a module's aten calls is not recorded), and so does the energy where a meter
measured it. A module of many small calls (RecurrentGemma's ``RecurrentGemmaRglru``: a scan of 1,313 aten calls per
call) comes out high: each call's estimate holds a per-call cost measured between other operators, about 9 µs where
such a loop spends about 3.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from opcost.analysis.costmodel import CONTEXT
from opcost.analysis.optypes import BASE
from opcost.model.opspec import canonical_json, config_id

METHOD = "composed"
# the cost model's answers a composition replaces: none rests on a measurement of the module's class or of a twin
REPLACES = ("family", "global")


def parts(rows: pd.DataFrame) -> pd.DataFrame:
    """One functional row per aten call inside each forward row of ``rows`` that has an ``inside`` composition,
    with the `layers` columns the cost model reads, ``count`` per module call and ``parent`` (the row's index)."""
    out = []
    for i, row in rows[rows["inside"].notna() & (rows["phase"] == "forward")].iterrows():
        for e in json.loads(row["inside"]):
            out.append({**{c: row[c] for c in ("model", "batch", "mode", "phase") if c in row},
                        "config_id": config_id(e["op"], e["params"], e["inputs"], row["mode"]), "op": e["op"],
                        "op_type": e["op_type"], "scope": "functional", "params": canonical_json(e["params"]),
                        "inputs": canonical_json(e["inputs"]), "outputs": canonical_json(e["outputs"]),
                        "count": int(e["count"]), "parent": i,
                        **({CONTEXT: row[CONTEXT]} if CONTEXT in row else {})})
    return pd.DataFrame(out)


def compose(rows: pd.DataFrame, measured: pd.Series, estimate) -> None:
    """In place on ``rows`` (costed per configuration and phase: ``cost_s``, ``low_s``, ``high_s``, ``method``): each
    row the cost model answered with a fallback of :data:`REPLACES` and that has an ``inside`` composition gets the
    sum of its aten calls' costs, ``method`` :data:`METHOD` (module docstring). ``measured``: cost per
    (config_id, phase) the database holds; ``estimate``: the cost model's :meth:`~opcost.analysis.costmodel.
    CostModel.estimate` bound to its method."""
    if "inside" not in rows:
        return
    twin = rows["inside"].notna() & (rows["method"] == "twin")
    twin[twin] = rows.loc[twin, "params"].map(lambda s: bool(json.loads(s).get(BASE)) if isinstance(s, str)
                                              else False).astype(bool)
    p = parts(rows[(rows["method"].isin(REPLACES) & rows["inside"].notna()) | twin])
    if p.empty:
        return
    key = pd.MultiIndex.from_arrays([p["config_id"], p["phase"]])
    cost = np.array(measured.reindex(key), dtype=float)  # a copy: written below
    low, high = cost.copy(), cost.copy()
    est = ~np.isfinite(cost)
    if est.any():
        e = estimate(p[est])
        cost[est], low[est], high[est] = (e[c].to_numpy(dtype=float) for c in ("estimate", "low", "high"))
    ok = np.isfinite(cost)  # a module with a part nothing estimates keeps the fallback's answer
    use = ok & ~p["parent"].isin(set(p.loc[~ok, "parent"])).to_numpy()
    n = p["count"].to_numpy(dtype=float)[use]
    sums = pd.DataFrame({"parent": p["parent"].to_numpy()[use], "cost_s": n * cost[use], "low_s": n * low[use],
                         "high_s": n * high[use]}).groupby("parent").sum()
    for col in ("cost_s", "low_s", "high_s"):
        rows.loc[sums.index, col] = sums[col].to_numpy()
    rows.loc[sums.index, "method"] = METHOD
