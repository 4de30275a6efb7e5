"""Operator sweep points where the cost model is least certain, chosen from a candidate grid.

nn-Meter samples kernel configurations adaptively: it fits its predictor, finds the configurations it predicts
worst and samples more around them. A candidate sweep point has no measurement yet, so here its uncertainty is the
error the cost model is expected to make on it: held-out errors grow with the distance to the nearest measured
configuration of the same op type (2026-11-26, eleven models and 120 sweep points: median |log error| 0.17 within
0.05 decades, 0.20 at 0.2-0.4, 0.27 at 0.4-0.8, 0.42 beyond), and :meth:`CostModel.uncertainty
<opcost.analysis.costmodel.CostModel.uncertainty>` is that line fitted to the model's own cross-validation.
Disagreement of the cross-validation's fold models (query by committee) was tried first: the roofline laws
extrapolate alike, so the fold models agreed more on Linear layers 16 times wider than any measured than on
layers inside the measured range, and it was dropped.

:func:`choose` takes, from every point of a sweep entry's whole grid, the ``n`` points whose costliest
configuration is least certain, one at a time (a greedy maximin design): a point chosen will be measured, so the
next candidates' distances count it, and the choice is not ``n`` neighbours in one uncertain corner.
``opcost sweep suggest`` prints the choice as a ``sweeps:`` config fragment (explicit ``points``).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from opcost.analysis.costmodel import CostModel


def candidate_layers(sweep: dict, batch_sizes: list[int], mode: str) -> pd.DataFrame:
    """`layers` rows (extracted, not timed) of every point of the sweep entry's whole grid (``samples`` ignored) at
    each of its batch sizes; ``point`` holds the point's parameters (JSON, batch included)."""
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.sweep_points import model_entries
    from opcost.model.workload import make_workload

    entries = model_entries([{k: v for k, v in sweep.items() if k != "samples"}], batch_sizes, [mode])
    out = []
    for name, entry in entries.items():
        shape = {k: v for k, v in entry["kwargs"].items() if k not in ("op", "depth")}
        for b in entry["batch_sizes"]:
            layers = extract(make_workload(load_model(name, entry), b, mode))
            out.append(layers.assign(point=json.dumps({**shape, "batch": int(b)}, sort_keys=True)))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def choose(model: CostModel, candidates: pd.DataFrame, n: int, measured: set | None = None) -> list[str]:
    """The ``point`` values of the ``n`` candidates (rows of :func:`candidate_layers`) where ``model`` is least
    certain, one at a time: the point whose costliest configuration (forward) is farthest from every measured
    configuration of its op type and from the points already chosen (an op type never measured first), the order
    of :meth:`~opcost.analysis.costmodel.CostModel.uncertainty`; a point whose costliest configuration is in
    ``measured`` (configuration ids) is not chosen."""
    if candidates.empty or n <= 0:
        return []
    rows = candidates.assign(phase="forward")
    est = model.estimate(rows)["estimate"].to_numpy(dtype=float)
    main = rows.assign(total=rows["count"].astype(float).to_numpy() * est)
    main = main.sort_values("total").groupby("point").tail(1)
    main = main[~main["config_id"].isin(measured or set())].reset_index(drop=True)
    data = model.features_of(main)
    dist = np.nan_to_num(model.distance(data), nan=np.inf)
    at = data[["log_flops", "log_bytes"]].to_numpy(dtype=float)
    kind = list(zip(main["op_type"], main["mode"]))
    chosen: list[int] = []
    while len(chosen) < min(n, len(main)):
        left = [i for i in range(len(main)) if i not in chosen]
        pick = max(left, key=lambda i: (dist[i], -i))
        chosen.append(pick)
        for i in left:  # the chosen point will be measured: a neighbour of it is no longer far
            if kind[i] == kind[pick]:
                dist[i] = min(dist[i], float(np.abs(at[i] - at[pick]).max()))
    return [main["point"].iloc[i] for i in chosen]
