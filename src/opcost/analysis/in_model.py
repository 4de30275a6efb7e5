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

The extra takes one of two forms per op type (:func:`fit`), whichever predicts the type's own configurations better,
each left out in turn (mean |log error| of the time in model order; the power where they tie):

- a **power of the time alone**, ``scale x alone ** power`` with the power between 0 (a constant per call) and 1 (a
  ratio), fitted in log space by Theil-Sen's median of slopes (robust to a configuration a busy moment slowed)
  (:class:`Extra`). On this project's 2-core VM ResNet-18's convolutions cost 32-360 µs more in model order at batch
  1 and up to 1.8 ms at batch 8, a power of about 0.7: a constant per call (their median, 145 µs) put a 16-channel 1x1
  sweep point of 20 µs at 165 µs (RepGhostNet +66%, MobileOne-S0 +49%).
- a **cold roofline**, ``constant + max(0, weights / bandwidth - alone)`` (:class:`ColdExtra`): in model order a
  call fetches its parameters again from farther out (the operators since its last call evicted them; its input is
  what its predecessor just wrote), at ``bandwidth``, overlapped with its work; a call whose time alone already
  covers that pays the constant only. ResNet-18's classifier at batch 1 (2 MB of weights, 20 µs alone, 158 µs in
  model order) and tiny_bert's compute-bound Linears (110 µs alone, +10 µs) are one Linear law of this form (about
  11 GB/s, a microsecond per call); as a power of the time alone they made a ratio (+23% on every Linear sweep point),
  and the transformers of eight random draws, never profiled, came out a median 30% over their time (their Linears
  1.3x their time in model order), 14% with the form chosen. The bytes are the parameters' (:data:`FETCHED`), not
  every operand's: the convolutions of MobileNetV2, EfficientNet-B0, RegNetY-400MF and ConvNeXt-Atto, profiled, cost
  2-40 µs more in model order than alone (1.0-1.4x), where their 0.2-2.5 MB of activations at 11 GB/s said 20-230
  µs; with every operand's bytes, a convolution law that chose this form put those models' convolutions at 1.1-2.4x
  their time in model order.

Either form is capped at the largest extra measured."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from opcost.analysis import optypes
from opcost.analysis.features import features
from opcost.model.modes import op_mode

MIN_CONFIGS = 3  # configurations of a type timed both ways for an extra of its own (else its family's)


FLOOR = 0.01  # an extra measured below this share of the time alone (none, or noise below 0) counts as this share
FETCHED = "param_bytes"  # what a call fetches again in model order (ColdExtra): its parameters' bytes (features)


@dataclass(frozen=True)
class Extra:
    """What a call of one op type costs more in model order than alone: ``exp(log_scale) x alone ** power`` seconds
    (``power`` between 0 and 1), at most ``top``, the largest extra measured (module docstring)."""

    power: float
    log_scale: float
    top: float

    def of(self, alone_s: float, nbytes: float = 0.0) -> float:
        """The extra of a call that takes ``alone_s`` seconds alone (whatever its ``nbytes``)."""
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


@dataclass(frozen=True)
class ColdExtra:
    """What a call costs more in model order when it fetches its parameters again from farther out: ``constant_s +
    max(0, bytes / bandwidth - alone)`` seconds (``bytes``: its parameters', :data:`FETCHED`), at most ``top``
    (module docstring)."""

    constant_s: float
    bandwidth: float  # bytes per second
    top: float

    def of(self, alone_s: float, nbytes: float) -> float:
        """The extra of a call that takes ``alone_s`` seconds alone and fetches ``nbytes`` (:data:`FETCHED`)."""
        return min(self.constant_s + max(0.0, float(nbytes) / self.bandwidth - float(alone_s)), self.top)

    @classmethod
    def fit(cls, alone, nbytes, model) -> "ColdExtra":
        """The law fitted to the times ``model`` in model order of calls taking ``alone`` seconds alone and fetching
        ``nbytes``: least squares on log time (soft-L1, so that one busy moment does not pull it)."""
        from scipy.optimize import least_squares

        a, b, m = (np.asarray(v, float) for v in (alone, nbytes, model))
        b = np.maximum(b, 1.0)

        def residual(theta):
            c, bw = np.exp(theta)
            return np.log(a + c + np.maximum(0.0, b / bw - a)) - np.log(m)

        res = least_squares(residual, np.log([2e-6, 2e10]), loss="soft_l1", f_scale=0.2,
                            bounds=(np.log([1e-9, 1e8]), np.log([1e-3, 1e13])))
        c, bw = np.exp(res.x)
        return cls(float(c), float(bw), max(float((m - a).max()), 0.0))


FOLDS = 10  # at most this many folds when the two forms are compared on held-out configurations (fit)


def fit(alone, nbytes, model) -> Extra | ColdExtra:
    """The extra of calls taking ``alone`` seconds alone, fetching ``nbytes`` (:data:`FETCHED`), ``model`` seconds in
    model order: the form of the two (:class:`Extra`, :class:`ColdExtra`) whose fits to the others predict each
    configuration's time in model order better, each left out in turn (at most :data:`FOLDS` folds; mean |log
    error|); the power where they tie or there are too few configurations to leave one out."""
    a, b, m = (np.asarray(v, float) for v in (alone, nbytes, model))
    power = Extra.fit(a, m - a)
    if len(a) < MIN_CONFIGS + 1:
        return power
    errors = np.zeros(2)
    for held in np.array_split(np.arange(len(a)), min(FOLDS, len(a))):
        kept = np.setdiff1d(np.arange(len(a)), held)
        p, c = Extra.fit(a[kept], m[kept] - a[kept]), ColdExtra.fit(a[kept], b[kept], m[kept])
        for i in held:
            errors += [abs(math.log((a[i] + p.of(a[i])) / m[i])), abs(math.log((a[i] + c.of(a[i], b[i])) / m[i]))]
    return ColdExtra.fit(a, b, m) if errors[1] < errors[0] else power


def extras(rows: pd.DataFrame, layers: pd.DataFrame, column: str) -> dict:
    """``(level, key, mode, phase) -> Extra or ColdExtra`` (:func:`fit`; level ``type``: key the op type;
    ``family``: its family; ``all``: None), over the configurations of ``rows`` (`measurements` rows of the sources
    alone and in order, :func:`opcost.analysis.estimate.alone_rows`) timed both ways; ``layers``: their
    description."""
    from opcost.measure.alone import IN_ORDER, SOURCE

    if rows is None or rows.empty:
        return {}
    key = ["config_id", "phase"]
    a = rows[rows["source"] == SOURCE].groupby(key)[column].median().rename("alone")
    m = rows[rows["source"] == IN_ORDER].groupby(key)[column].median().rename("model")
    both = pd.concat([a, m], axis=1, join="inner").reset_index()
    desc = layers.drop_duplicates("config_id").set_index("config_id")
    both = both[both["config_id"].isin(desc.index) & (both["alone"] > 0) & (both["model"] > 0)]
    if both.empty:
        return {}
    described = desc.loc[both["config_id"]].assign(phase=both["phase"].to_numpy())
    both["bytes"] = features(described)[FETCHED].to_numpy(dtype=float)
    both["op_type"] = both["config_id"].map(desc["op_type"])
    both["mode"] = both["config_id"].map(desc["mode"]).map(op_mode)
    both["family"] = [optypes.family(t) for t in both["op_type"]]
    out = {}
    for level, by in (("type", "op_type"), ("family", "family"), ("all", None)):
        for k, g in both.groupby([by, "mode", "phase"] if by else ["mode", "phase"], dropna=True):
            if len(g) >= MIN_CONFIGS:
                out[(level, *(k if by else (None, *k)))] = fit(g["alone"], g["bytes"], g["model"])
    return out


def extra_of(table: dict, op_type: str, family: str | None, mode: str, phase: str, alone_s: float,
             nbytes: float) -> float:
    """Seconds a call of ``op_type`` that takes ``alone_s`` alone and fetches ``nbytes`` costs more inside a model
    (:func:`extras`' ``table``): its type's, else its family's, else its mode and phase's over every type, else 0."""
    mode = op_mode(mode)
    for level, key in (("type", op_type), ("family", family), ("all", None)):
        extra = table.get((level, key, mode, phase))
        if extra is not None:
            return extra.of(alone_s, nbytes)
    return 0.0
