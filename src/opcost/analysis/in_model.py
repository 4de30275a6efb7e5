"""What a sweep point's cost is inside a model: what an operator's call costs more in model order (after its real
predecessor, as the profiled workloads are measured) than alone (after a call of itself, as a sweep point's chain of
identical layers measures it), measured on this host.

The cost model learns the operators no profiled model has from sweep points, and a model never profiled calls them
among other operators: without this, every estimate that rests on sweep points inherits their warm caches. Inside a
model a call finds its code, its weights and the thread pool as other operators left them. On this project's 2-core
VM the extra was about a constant per call of each type (BatchNorm2d 35-42 µs at 0.2-1.6 MB against 15-30 µs alone,
ReLU 9-12 µs against 3-10 µs), and grew with the bytes of a few calls that fetch their weights again
(ResNet-18's classifier, 2 MB of weights: 20 µs alone, 165 µs in model order). The profiled workloads'
configurations timed both ways in one job (:mod:`opcost.measure.alone`: in model order, then each alone) give, per
op type, mode and phase, the median extra per call (:func:`extras`: one configuration that a busy moment slowed, or
a classifier's weights, do not move it); a plain sweep point's measured time takes its type's extra before the cost
model is fitted (:func:`opcost.analysis.training.training_data`). A type that no profiled workload has takes its
family's extra (:func:`opcost.analysis.optypes.family`), else the mode and phase's over every type; without any,
nothing is added. Only plain sweep points are translated: a ``block`` point already measures its operator inside a
CNN block and an ``evict`` point after the caches were flushed (:mod:`opcost.model.sweep_points`).

An extra per call, not a ratio and not a line in bytes: the time-weighted ratio over the default study's profiled
models (Linear 0.62, from ResNet-18's classifier) scaled the large, compute-bound Linear sweep points of a
transformer's shapes up by 1.6 and its predictions with them (+38% median over the transformers of a random draw);
a median line in bytes was pulled by the same classifier (70 µs per MB), while most Linear calls add a few µs.
What it does not carry: a large memory-bound call in model order (a classifier's weights fetched again)."""
from __future__ import annotations

import pandas as pd

from opcost.analysis import optypes
from opcost.model.modes import op_mode

MIN_CONFIGS = 3  # configurations of a type timed both ways for an extra of its own (else its family's)


def extras(rows: pd.DataFrame, layers: pd.DataFrame, column: str) -> dict:
    """``(level, key, mode, phase) -> seconds``: the median over configurations of what a call costs more in model
    order than alone (at least 0; level ``type``: key the op type; ``family``: its family; ``all``: None), over the
    configurations of ``rows`` (`measurements` rows of the sources alone and in order,
    :func:`opcost.analysis.estimate.alone_rows`) timed both ways; ``layers``: their description."""
    from opcost.measure.alone import IN_ORDER, SOURCE

    if rows is None or rows.empty:
        return {}
    key = ["config_id", "phase"]
    a = rows[rows["source"] == SOURCE].groupby(key)[column].median().rename("alone")
    m = rows[rows["source"] == IN_ORDER].groupby(key)[column].median().rename("model")
    both = pd.concat([a, m], axis=1, join="inner").reset_index()
    desc = layers.drop_duplicates("config_id").set_index("config_id")
    both = both[both["config_id"].isin(desc.index)]
    if both.empty:
        return {}
    both["op_type"] = both["config_id"].map(desc["op_type"])
    both["mode"] = both["config_id"].map(desc["mode"]).map(op_mode)
    both["family"] = [optypes.family(t) for t in both["op_type"]]
    both["extra"] = both["model"] - both["alone"]
    out = {}
    for level, by in (("type", "op_type"), ("family", "family"), ("all", None)):
        for k, g in both.groupby([by, "mode", "phase"] if by else ["mode", "phase"], dropna=True):
            if len(g) >= MIN_CONFIGS:
                out[(level, *(k if by else (None, *k)))] = max(float(g["extra"].median()), 0.0)
    return out


def extra_of(table: dict, op_type: str, family: str | None, mode: str, phase: str) -> float:
    """Seconds a call of ``op_type`` costs more inside a model than alone (:func:`extras`' ``table``): its type's,
    else its family's, else its mode and phase's over every type, else 0."""
    mode = op_mode(mode)
    for level, key in (("type", op_type), ("family", family), ("all", None)):
        extra = table.get((level, key, mode, phase))
        if extra is not None:
            return extra
    return 0.0
