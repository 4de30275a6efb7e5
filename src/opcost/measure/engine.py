"""The autograd engine's fixed cost per backward call, and its accounting in training predictions.

A training iteration runs its whole backward in one call of the autograd engine; isolated profiling runs the
backward of each configuration in a call of its own, so every isolated backward row holds the engine's fixed cost
per call (graph task set-up, ready queue, thread hand-off; tens of microseconds on a CPU, see
``benchmarks/autograd_engine.py``) once more than the model pays it. A rotation measures that cost among its own
calls, in the same rounds (two :func:`engine_probes` called in turn at the end of each round,
:func:`opcost.measure.rotation.with_engine_probes`), and each backward row it measures is taken net of it
(:func:`net_of_engine`; column ``engine_s`` of `measurements` says how much): the engine's cost per call drifts
with the process and the machine (39–85 µs between processes on one VM), and a cost measured minutes apart, times
one backward call per row, moved a small model's training sum by ±30% (docs/methodology.md, section 8). Backward rows
measured outside a rotation take a measurement of the engine made alone by the profiling job (:func:`engine_call_s`,
:func:`without_engine_calls`). :func:`engine_rows` counts the engine once per training iteration in every
prediction, as a pseudo operator type of its own (:data:`ENGINE_OP_TYPE`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

ENGINE_OP_TYPE = "autograd engine"  # op_type of the once-per-iteration row predictions add
ENGINE_ID = "autograd-engine"  # its config_id
ENGINE_STATS = ("median_s", "trimmed_mean_s", "ci_low_s", "ci_high_s")  # the statistics netted of the engine


PROBE_NODES = 16  # nodes of the longer engine probe


def engine_probes(device: str, nodes: int = PROBE_NODES) -> tuple[Callable[[], object], Callable[[], object]]:
    """Two backward calls whose per-call times give the engine's fixed cost (:func:`engine_intercept`): over one
    node and over a chain of ``nodes`` nodes (``x * 2`` on 8 elements), each on a retained graph."""
    import torch

    x = torch.randn(8, device=device, requires_grad=True)

    def backward_of(k: int):
        y = x
        for _ in range(k):
            y = y * 2
        grad = torch.ones_like(y)
        return lambda: torch.autograd.grad([y], [x], [grad], retain_graph=True)

    return backward_of(1), backward_of(nodes)


def engine_intercept(one_s: float, many_s: float, nodes: int = PROBE_NODES) -> float:
    """The engine's fixed cost per call from the times of the two :func:`engine_probes`: the intercept of the
    per-call time against the number of nodes, never below 0."""
    return max(0.0, one_s - (many_s - one_s) / (nodes - 1))


def engine_call_s(device: str, settings, nodes: int = PROBE_NODES, pairs: int = 7, warmup_s: float = 1.0) -> float:
    """Seconds the autograd engine costs per backward call beyond its nodes, measured alone, for backward rows
    measured outside a rotation (a rotation measures it among its own calls,
    :func:`opcost.measure.rotation.with_engine_probes`): :func:`engine_intercept` from ``pairs`` alternating
    measurements of the two :func:`engine_probes` (the timing core under ``settings``, each capped at 0.2 s) after
    ``warmup_s`` of both, the median of the pairs' intercepts. Alternating keeps the machine's drift out of each
    difference; the first backward calls of a process run slower, hence the warm-up (docs/methodology.md,
    section 8)."""
    import dataclasses
    import time

    from opcost.measure.timing import measure

    one, many = engine_probes(device, nodes)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:  # the first second of backward calls in a process runs slower
        one()
        many()
    short = dataclasses.replace(settings, max_seconds=min(settings.max_seconds, 0.2))
    estimates = [engine_intercept(measure(one, short, device).median, measure(many, short, device).median, nodes)
                 for _ in range(pairs)]
    return float(np.median(estimates))


def net_of_engine(stats: dict, samples: list[float], engine_s: float) -> tuple[dict, list[float]]:
    """An isolated backward measurement's statistics (``stats``: columns of `measurements`) and samples less one
    engine call each, floored at 0, with ``engine_s`` recorded (column `engine_s`)."""
    out = {**stats, "engine_s": engine_s}
    for col in ENGINE_STATS:
        if out.get(col) is not None:
            out[col] = max(0.0, out[col] - engine_s)
    return out, [max(0.0, x - engine_s) for x in samples]


def _isolated_backward(df: pd.DataFrame) -> pd.Series:
    """Rows of `measurements` or `samples` that are isolated backward timings."""
    return (df["source"] == "isolated") & (df["phase"] == "backward")


def needs_engine(measurements: pd.DataFrame) -> bool:
    """Whether some isolated backward row still holds its engine call (no `engine_s`: measured outside a rotation,
    e.g. other placements or back-to-back cache states), for :func:`without_engine_calls`."""
    return bool((_isolated_backward(measurements) & (measurements["status"] == "ok")
                 & measurements["engine_s"].isna()).any())


def without_engine_calls(measurements: pd.DataFrame, samples: pd.DataFrame, engine_s: float
                         ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The isolated backward rows that still hold their engine call (no `engine_s`, :func:`needs_engine`) and their
    samples, less ``engine_s`` each, floored at 0; ``engine_s`` recorded on those rows. A row the engine's cost
    masks (a transpose's backward on a GPU) comes out 0: no floor is known for a node's own cost (a view's backward
    costs less than the ``x * 2`` node the engine measurement chains; flooring at that node's cost raised
    tiny_bert's training sum by 11%, benchmarks/records/measurements.md)."""
    meas = measurements.copy()
    rows = _isolated_backward(meas) & (meas["status"] == "ok") & meas["engine_s"].isna()
    for col in ENGINE_STATS:
        meas.loc[rows, col] = (meas.loc[rows, col] - engine_s).clip(lower=0.0)
    meas.loc[rows, "engine_s"] = engine_s
    smp = samples.copy()
    ids = set(meas.loc[rows, "config_id"])
    hit = _isolated_backward(smp) & smp["key"].isin(ids)
    smp.loc[hit, "seconds"] = (smp.loc[hit, "seconds"] - engine_s).clip(lower=0.0)
    return meas, smp


def engine_cost(used: pd.DataFrame) -> float | None:
    """The engine's cost per backward call recorded on ``used`` measurement rows (median of `engine_s`), or None
    where no row records one (inference, older tables)."""
    if "engine_s" not in used or used["engine_s"].isna().all():
        return None
    return float(used["engine_s"].dropna().median())


def engine_rows(costed: pd.DataFrame, used: pd.DataFrame) -> pd.DataFrame:
    """One row per training workload of ``costed`` (layer rows with costs, see
    :func:`opcost.analysis.predict.costed_layers`) whose backward costs had the engine's cost taken out: count 1, cost
    the median ``engine_s`` of the ``used`` measurement rows of its configurations."""
    if "engine_s" not in used or used["engine_s"].isna().all():  # older or hand-made tables lack the column
        return costed.iloc[0:0]
    per_config = used.dropna(subset=["engine_s"]).groupby("config_id")["engine_s"].median()
    out = []
    for (model, batch, mode), g in costed[costed["mode"] == "training"].groupby(["model", "batch", "mode"]):
        values = per_config.reindex(g["config_id"].unique()).dropna()
        if len(values):
            e = float(np.median(values))
            out.append({"model": model, "batch": batch, "mode": mode, "workload": g["workload"].iloc[0],
                        "config_id": ENGINE_ID, "op_type": ENGINE_OP_TYPE, "scope": "engine", "count": 1,
                        "cost_s": e, "backward_s": e, "energy_j": np.nan, "total_s": e, "total_j": np.nan})
    return pd.DataFrame(out, columns=costed.columns) if out else costed.iloc[0:0]
