"""What a sweep point's cost is inside a model: what an operator's call costs more in model order (after its real
predecessor, as the profiled workloads are measured) than alone (after a call of itself, as a sweep point's chain of
identical layers measures it), measured on this host.

The cost model learns the operators no profiled model has from sweep points, and a model never profiled calls them
among other operators: without this, every estimate that rests on sweep points inherits their warm caches. Inside a
model a call finds its code, its weights and the thread pool as other operators left them. The profiled workloads'
configurations timed both ways in one job (:mod:`opcost.measure.alone`: in model order, then each alone) give, per
op type, mode and phase, how the extra grows with the call's time alone (:func:`extras`); a plain sweep point's
measured time takes its type's extra before the cost model is fitted (:func:`opcost.analysis.training.training_data`).
A type that no profiled workload has takes its family's extra (:func:`opcost.analysis.optypes.family`), else the
mode and phase's over every type; without any, nothing is added. Only plain sweep points are translated: a ``block``
point already measures its operator inside a CNN block and an ``evict`` point after the caches were flushed
(:mod:`opcost.model.sweep_points`).

The extra is a power of the time alone, ``scale x alone ** power`` with the power between 0 (a constant per call)
and 1 (a ratio), fitted in log space by Theil-Sen's median of slopes (robust to a configuration a busy moment
slowed), never above the largest extra measured (:class:`Extra`). On this project's 2-core VM ResNet-18's
convolutions cost 32-360 µs more in model order at batch 1 (weights of 0.03-9.4 MB fetched again) and up to 1.8 ms
at batch 8: a power of 0.53. A constant per call (their median, 145 µs) put a 16-channel 1x1 sweep point of 20 µs
at 165 µs, the Conv2d law's floor followed, and a squeeze-excitation block's 1x1 convolutions on one pixel came out
at 200 µs against 32-92 µs in model (RepGhostNet +66%, MobileOne-S0 +49%); a ratio (the median extra over the time
alone) scaled the large, compute-bound Linear sweep points of a transformer's shapes by ResNet-18's classifier
(0.62) and its predictions with them (+38% median over the transformers of a random draw). The Linear's extras
fit a power of 0.05: about 12 µs per call, whatever its size. What it does not carry: a large memory-bound call in
model order (a classifier's weights fetched again)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from opcost.analysis import optypes
from opcost.model.modes import op_mode

MIN_CONFIGS = 3  # configurations of a type timed both ways for an extra of its own (else its family's)


FLOOR = 0.01  # an extra measured below this share of the time alone (none, or noise below 0) counts as this share


@dataclass(frozen=True)
class Extra:
    """What a call of one op type costs more in model order than alone: ``exp(log_scale) x alone ** power`` seconds
    (``power`` between 0 and 1), at most ``top``, the largest extra measured (module docstring)."""

    power: float
    log_scale: float
    top: float

    def of(self, alone_s: float) -> float:
        """The extra of a call that takes ``alone_s`` seconds alone."""
        return min(math.exp(self.log_scale) * max(float(alone_s), 1e-12) ** self.power, self.top)

    @classmethod
    def fit(cls, alone, extra) -> "Extra":
        """The power law of ``extra`` seconds over ``alone`` seconds, per configuration (module docstring): Theil-Sen's
        slope of log extra on log alone, clipped to [0, 1] (one size alone: 0), the scale the median residual."""
        from scipy.stats import theilslopes

        a = np.asarray(alone, float)
        e = np.asarray(extra, float)
        x, y = np.log(a), np.log(np.maximum(e, FLOOR * a))
        power = float(np.clip(theilslopes(y, x)[0], 0.0, 1.0)) if np.ptp(x) > 0 else 0.0
        return cls(power, float(np.median(y - power * x)), max(float(e.max()), 0.0))


def extras(rows: pd.DataFrame, layers: pd.DataFrame, column: str) -> dict:
    """``(level, key, mode, phase) -> Extra`` (level ``type``: key the op type; ``family``: its family; ``all``:
    None), over the configurations of ``rows`` (`measurements` rows of the sources alone and in order,
    :func:`opcost.analysis.estimate.alone_rows`) timed both ways; ``layers``: their description."""
    from opcost.measure.alone import IN_ORDER, SOURCE

    if rows is None or rows.empty:
        return {}
    key = ["config_id", "phase"]
    a = rows[rows["source"] == SOURCE].groupby(key)[column].median().rename("alone")
    m = rows[rows["source"] == IN_ORDER].groupby(key)[column].median().rename("model")
    both = pd.concat([a, m], axis=1, join="inner").reset_index()
    desc = layers.drop_duplicates("config_id").set_index("config_id")
    both = both[both["config_id"].isin(desc.index) & (both["alone"] > 0)]
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
                out[(level, *(k if by else (None, *k)))] = Extra.fit(g["alone"], g["extra"])
    return out


def extra_of(table: dict, op_type: str, family: str | None, mode: str, phase: str, alone_s: float) -> float:
    """Seconds a call of ``op_type`` that takes ``alone_s`` alone costs more inside a model (:func:`extras`'
    ``table``, :meth:`Extra.of`): its type's, else its family's, else its mode and phase's over every type, else 0."""
    mode = op_mode(mode)
    for level, key in (("type", op_type), ("family", family), ("all", None)):
        extra = table.get((level, key, mode, phase))
        if extra is not None:
            return extra.of(alone_s)
    return 0.0
