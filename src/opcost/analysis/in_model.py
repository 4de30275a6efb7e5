"""What a sweep point's cost is inside a model: what an operator's call costs more in model order (after its real
predecessor, as the profiled workloads are measured) than alone (after a call of itself, as a sweep point's chain of
identical layers measures it), measured on this host.

The cost model learns the operators no profiled model has from sweep points, and a model never profiled calls them
among other operators: without this, every estimate that rests on sweep points inherits their warm caches. Inside a
model a call finds its code, its weights and the thread pool as other operators left them. The profiled workloads'
configurations timed both ways in one job (:mod:`opcost.measure.alone`: in model order, then each alone) give, per
op type, mode and phase, what its calls cost more (:func:`fit`): a plain sweep point's measured time takes its type's
extra per call before the cost model is fitted (:func:`opcost.analysis.training.training_data`), and a model never
profiled its types' cost per iteration among its estimated calls (:func:`opcost.analysis.estimate.
per_iteration_share`). A type that no profiled workload has takes its family's (:func:`opcost.analysis.optypes.
family`), else the mode and phase's over every type; without any, nothing is added. Only plain sweep points are
translated: a ``block`` point already measures its operator inside a CNN block and an ``evict`` point after the
caches were flushed (:mod:`opcost.model.sweep_points`).

The extra has two parts, both measured on the profiled workloads' configurations timed both ways:

- **per call** (:class:`ColdExtra`): ``ratio x alone + max(0, weights / bandwidth - alone)``. In model order a call
  fetches its parameters again from farther out (the operators since its last call evicted them; its input is what
  its predecessor just wrote), at ``bandwidth``, overlapped with its work: ResNet-18's classifier at batch 1 (2 MB
  of weights, 20 µs alone, 158 µs in model order). The bytes are the parameters' (:data:`FETCHED`), not every
  operand's: the convolutions of MobileNetV2, EfficientNet-B0, RegNetY-400MF and ConvNeXt-Atto, profiled, cost 2-40
  µs more in model order than alone, where their 0.2-2.5 MB of activations at 11 GB/s said 20-230 µs. Beyond its
  weights a call pays a ratio of its time alone: the median over the type's calls that their workload makes more
  than once per iteration (a convolution's 7%, a batch norm's or an add's more).
- **per iteration, per op type** (:func:`per_iteration`): what an iteration's calls of one type cost more together
  beyond that, shared by however many calls of the type the model makes (the type's code and tables, cold after
  the other types' calls, are fetched again about once per iteration). On this project's 2-core VM a global average
  pool called once per iteration costs 43-51 µs more in model order than alone (ResNet-18, ConvNeXt-Atto,
  SqueezeNet), where seventeen squeeze-and-excitation pools cost 53-79 µs more together (RegNetY-400MF,
  EfficientNet-B0), 3-5 µs each: the same extra as a cost per call put them at 4.4x their time in model order. Per
  type, the smallest over each profiled model's workloads, then the median over models. A small model evicts
  little: a type's extra per iteration is at most its calls' own cost per iteration (:data:`opcost.analysis.
  estimate.ITERATION_CAP`). Both ways of six models timed (ResNet-18, a 2-layer encoder and a DLRM; EfficientNet-B0,
  MobileNetV2 and RegNetY-400MF), each trio's fit predicting the other trio's model order from its times alone:
  uncapped, the DLRM (0.23 ms an iteration) came out +183% and the encoder at batch 1 +35%; capped, +46% and +9%,
  the three CNNs from the first trio's fit within a point of uncapped (+6.0%, -8.6%, -21.8%).

Fitted on each of four default studies' databases and checked on the configurations of six models never profiled
there, timed both ways, their summed time in model order from their times alone came out a median 6-20% off with
a cost per call chosen among a power of the time alone and a cold roofline with a constant, 2-3% with these parts.
The cold roofline is capped at the largest extra measured."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from opcost.analysis import optypes
from opcost.analysis.features import features
from opcost.model.modes import op_mode

MIN_CONFIGS = 3  # configurations of a type timed both ways for a cold roofline of its own (else its family's)
FETCHED = "param_bytes"  # what a call fetches again in model order (ColdExtra): its parameters' bytes (features)
LEVELS = (("type", "op_type"), ("family", "family"), ("all", None))  # an op type's, its family's, every type's


@dataclass(frozen=True)
class ColdExtra:
    """What a call costs more in model order than alone, per call: ``ratio x alone + max(0, bytes / bandwidth -
    alone)`` seconds (``bytes``: its parameters', :data:`FETCHED`), at most ``top`` (module docstring)."""

    bandwidth: float  # bytes per second
    top: float
    ratio: float = 0.0

    def of(self, alone_s: float, nbytes: float) -> float:
        """The extra of a call that takes ``alone_s`` seconds alone and fetches ``nbytes`` (:data:`FETCHED`)."""
        return min(self.ratio * float(alone_s) + max(0.0, float(nbytes) / self.bandwidth - float(alone_s)), self.top)

    @classmethod
    def fit(cls, alone, nbytes, model, shared=None) -> "ColdExtra":
        """The roofline fitted to the times ``model`` in model order of calls taking ``alone`` seconds alone and
        fetching ``nbytes``: least squares on log time (soft-L1, so that one busy moment does not pull it); the ratio
        the median of what the calls beyond it cost more over their time alone, of those whose type the workload
        calls more than once (``shared``; at least :data:`MIN_CONFIGS`, else none), between 0 and 1."""
        from scipy.optimize import least_squares

        a, b, m = (np.asarray(v, float) for v in (alone, nbytes, model))
        b = np.maximum(b, 1.0)

        def residual(theta):
            return np.log(a + np.maximum(0.0, b / np.exp(theta[0]) - a)) - np.log(m)

        res = least_squares(residual, [np.log(2e10)], loss="soft_l1", f_scale=0.2,
                            bounds=([np.log(1e8)], [np.log(1e13)]))
        bw = float(np.exp(res.x[0]))
        many = np.asarray(shared if shared is not None else np.zeros(len(a)), bool)
        beyond = (m - a - np.maximum(0.0, b / bw - a)) / a
        ratio = float(np.clip(np.median(beyond[many]), 0.0, 1.0)) if many.sum() >= MIN_CONFIGS else 0.0
        return cls(bw, max(float((m - a).max()), 0.0), ratio)


@dataclass(frozen=True)
class InModel:
    """What calls cost more in model order than alone (module docstring): ``per_call``: ``(level, key, mode, phase)
    -> ColdExtra``; ``per_iteration``: ``(level, key, mode, phase) -> seconds`` an iteration's calls of one op type
    cost more together (level ``type``: key the op type; ``family``: its family; ``all``: None)."""

    per_call: dict
    per_iteration: dict

    def extra_of(self, op_type: str, family: str | None, mode: str, phase: str, alone_s: float,
                 nbytes: float) -> float:
        """Seconds a call of ``op_type`` that takes ``alone_s`` alone and fetches ``nbytes`` costs more per call."""
        got = _lookup(self.per_call, op_type, family, mode, phase)
        return got.of(alone_s, nbytes) if got is not None else 0.0

    def iteration_of(self, op_type: str, family: str | None, mode: str, phase: str) -> float:
        """Seconds an iteration's calls of ``op_type`` cost more together, however many they are."""
        got = _lookup(self.per_iteration, op_type, family, mode, phase)
        return float(got) if got is not None else 0.0


NONE = InModel({}, {})  # nothing timed both ways: sweep points as measured, no cost per iteration


def _lookup(table: dict, op_type: str, family: str | None, mode: str, phase: str):
    """The entry of ``op_type``, else its family's, else its mode and phase's over every type, else None."""
    mode = op_mode(mode)
    for level, key in (("type", op_type), ("family", family), ("all", None)):
        got = table.get((level, key, mode, phase))
        if got is not None:
            return got
    return None


def _both_ways(rows: pd.DataFrame, layers: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (workload, configuration, phase) timed both ways: ``alone``, ``model`` (seconds), ``bytes``
    (:data:`FETCHED`), ``count`` (calls per iteration in that workload), ``op_type``, ``family``, ``mode`` and the
    profiled ``model`` name as ``source``."""
    from opcost.measure.alone import IN_ORDER, SOURCE
    from opcost.model.workload import workload_keys

    key = ["config_id", "phase"]
    a = rows[rows["source"] == SOURCE].groupby(key)[column].median().rename("alone")
    m = rows[rows["source"] == IN_ORDER].groupby(key)[column].median().rename("model")
    both = pd.concat([a, m], axis=1, join="inner").reset_index()
    desc = layers.drop_duplicates("config_id").set_index("config_id")
    both = both[both["config_id"].isin(desc.index) & (both["alone"] > 0) & (both["model"] > 0)]
    if both.empty:
        return both
    described = desc.loc[both["config_id"]].assign(phase=both["phase"].to_numpy())
    both["bytes"] = features(described)[FETCHED].to_numpy(dtype=float)
    both["op_type"] = both["config_id"].map(desc["op_type"])
    both["mode"] = both["config_id"].map(desc["mode"]).map(op_mode)
    both["family"] = [optypes.family(t) for t in both["op_type"]]
    calls = layers.assign(workload=workload_keys(layers)).groupby(["workload", "model", "config_id"], as_index=False)[
        "count"].sum().rename(columns={"model": "source"})
    return both.merge(calls, on="config_id")


def fit(rows: pd.DataFrame, layers: pd.DataFrame, column: str) -> InModel:
    """The :class:`InModel` of the configurations of ``rows`` (`measurements` rows of the sources alone and in order,
    :func:`opcost.analysis.estimate.alone_rows`) timed both ways; ``layers``: their description (module docstring)."""
    if rows is None or rows.empty:
        return NONE
    both = _both_ways(rows, layers, column)
    if both.empty:
        return NONE
    calls = both.groupby(["workload", "op_type", "phase"])["count"].transform("sum")
    once = both.assign(shared=calls > 1).sort_values("shared").drop_duplicates(["config_id", "phase"], keep="last")
    per_call = {}
    for level, by in LEVELS:
        for k, g in once.groupby([by, "mode", "phase"] if by else ["mode", "phase"], dropna=True):
            if len(g) >= MIN_CONFIGS:
                per_call[(level, *(k if by else (None, *k)))] = ColdExtra.fit(g["alone"], g["bytes"], g["model"],
                                                                              g["shared"])
    got = InModel(per_call, {})
    cold = [got.extra_of(t, f, mo, ph, a, b) for t, f, mo, ph, a, b in
            zip(both["op_type"], both["family"], both["mode"], both["phase"], both["alone"], both["bytes"])]
    both["rest"] = (both["model"] - both["alone"] - np.asarray(cold, float)) * both["count"].astype(float)
    return InModel(per_call, per_iteration(both))


def per_iteration(both: pd.DataFrame) -> dict:
    """``(level, key, mode, phase) -> seconds``: per op type, what a workload's calls of it cost more in model order
    beyond their cold rooflines (``rest``, summed), the smallest over each profiled model's workloads (the batch least
    confounded by data that outgrew the caches; a large batch's difference of two timings of milliseconds has run
    several times its small batch's), the median over models (never below 0); a family's and every type's: the median
    over the (model, type) pairs they hold."""
    per_workload = both.groupby(["source", "workload", "op_type", "family", "mode", "phase"], dropna=False)[
        "rest"].sum().reset_index()
    per_model = per_workload.groupby(["source", "op_type", "family", "mode", "phase"], dropna=False)[
        "rest"].min().reset_index()
    out = {}
    for level, by in LEVELS:
        for k, g in per_model.groupby([by, "mode", "phase"] if by else ["mode", "phase"], dropna=True):
            out[(level, *(k if by else (None, *k)))] = max(float(g["rest"].median()), 0.0)
    return out
