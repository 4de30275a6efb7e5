"""What one generation step of a decoder costs (mode ``decode<L>``): time per step, i.e. per token of each sequence,
tokens per second, and the bytes a step must read.

The prediction is :func:`opcost.analysis.estimate.predict_workload`'s for the workload ``decode<L>`` at the batch
asked: measured costs where the database holds the step's configurations, the cost model's estimates for the rest
(a context length or batch never measured: attention and the cache update read L cached tokens and are estimated
from their FLOPs and bytes, which grow with L; the Linears' shapes do not depend on L and keep their measured costs
across context lengths, their configurations being shared), plus the overhead between operators, plus what a
slower memory level costs where the step's working set outgrows its model's measured steps' (:func:`level_shift`:
the measured costs and the overhead fitted to those steps hold the read rates of the level their working sets
lived in; a step whose cache spills from the last-level cache to DRAM reads every byte at DRAM's rate, from the
host's measured bandwidth curve, :mod:`opcost.measure.bandwidth`).

Bytes a step reads, from its extracted operators (``layers``):

* **weights**: Σ calls × the parameter bytes each operator reads (Linear weights and biases, embedding rows looked
  up, norm scales; :func:`opcost.analysis.features.features`' ``param_bytes``): at batch 1 a decode step reads
  every weight once, which bounds it from below by memory bandwidth;
* **key/value cache**: Σ calls × the bytes of the cached keys and values the step reads, the tensors of L tokens no
  operator of the step produced (the prefill's): each layer's keys and values, once each. (``DynamicCache`` reads
  them twice, in the copy of its update and in attention; the figure is the cache's size, what any step must read.)
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from opcost.model.modes import decode_context
from opcost.tables import CARRIED

_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def weight_bytes(layers: pd.DataFrame) -> float:
    """Bytes of parameters one iteration of ``layers`` reads (Σ calls × each forward call's parameter bytes)."""
    from opcost.analysis.features import features

    if layers.empty:
        return 0.0
    per_call = features(layers.assign(phase="forward"))["param_bytes"].astype(float)
    return float((layers["count"].astype(float) * per_call).sum())


def _cache_reads(inputs: str, feeds: str | None, context: int) -> float:
    """Bytes of cached keys and values one configuration's calls read: per call, its floating-point inputs of
    ``context`` tokens (second-last dimension) that no recorded call produced (``feeds`` :data:`CARRIED`, or null in
    catalogues extracted before carried inputs were marked: made by the prefill)."""
    specs = json.loads(inputs)
    total = 0.0
    for call in json.loads(feeds or "[]"):
        for spec, src in zip(specs, call):
            shape = spec.get("T") if isinstance(spec, dict) else None
            if ((src is None or src == CARRIED) and shape and len(shape) >= 3 and int(shape[-2]) == int(context)
                    and spec.get("dtype") in _ITEMSIZE):
                total += math.prod(shape) * _ITEMSIZE[spec["dtype"]]
    return total


def cache_bytes(layers: pd.DataFrame, context: int) -> float:
    """Bytes of the key/value cache a decode step at ``context`` reads (each cached tensor once per read)."""
    return float(sum(_cache_reads(i, f, context) for i, f in zip(layers["inputs"], layers["feeds"])))


def footprint(layers: pd.DataFrame, context: int) -> float:
    """Bytes a decode step at ``context`` touches, its working set from one step to the next: the weights it reads,
    the key/value cache it reads, and what the calls that read the cache write (Hugging Face's ``DynamicCache``
    copies each layer's keys and values into a new tensor one token longer: the old and the new are both live)."""
    written = 0.0
    for inputs, feeds, outputs, n in zip(layers["inputs"], layers["feeds"], layers["outputs"], layers["count"]):
        if _cache_reads(inputs, feeds, context) > 0:
            written += float(n) * sum(math.prod(s["T"]) * _ITEMSIZE.get(s.get("dtype"), 4)
                                      for s in json.loads(outputs or "[]") if isinstance(s, dict) and s.get("T"))
    return weight_bytes(layers) + cache_bytes(layers, context) + written


def level_shift(rows: pd.DataFrame, step_bytes: float, reference_bytes: float, curve: dict) -> float:
    """Seconds per step a decode step's operators (``rows``: a prediction's per-configuration rows, with
    ``count``) lose because the step's working set (``step_bytes``, :func:`footprint`) lies in a slower memory
    level than the one their costs hold: each configuration's bytes (Σ calls × its inputs, outputs and parameters)
    at the host's sustained read rate at the step's working set (``curve``:
    :func:`opcost.measure.bandwidth.sustained`), less the same bytes at the rate of the larger of
    ``reference_bytes`` (the largest working set among the model's measured steps, whose end-to-end times the
    overhead between operators holds) and the configuration's own bytes (timed in isolation, it read its own
    working set). 0 where the step's working set is no larger than the reference's."""
    from opcost.analysis.features import features
    from opcost.measure import bandwidth as bw

    if step_bytes <= reference_bytes or rows.empty:
        return 0.0
    own = features(rows)["bytes"].astype(float).to_numpy()
    slow, held = 1.0 / bw.sustained(curve, step_bytes), 1.0 / bw.sustained(curve, np.maximum(reference_bytes, own))
    return float((rows["count"].astype(float).to_numpy() * own * np.clip(slow - held, 0.0, None)).sum())


def attention_share(rows: pd.DataFrame, context: int) -> float:
    """The share of a prediction's operator time (``rows``: :attr:`Prediction.layers`) in attention and the cache's
    update: ``scaled_dot_product_attention`` and the calls that read the cache."""
    total = float(rows["total_s"].sum())
    if total <= 0:
        return 0.0
    reads = [_cache_reads(i, f, context) > 0 if isinstance(i, str) else False
             for i, f in zip(rows["inputs"], rows["feeds"])]
    attention = (rows["op_type"] == "scaled_dot_product_attention") | pd.Series(reads, index=rows.index)
    return float(rows.loc[attention, "total_s"].sum()) / total


def summary(pred, layers: pd.DataFrame, top: int = 8, curve: dict | None = None) -> dict:
    """What `opcost predict --mode decode` reports, from the :class:`~opcost.analysis.estimate.Prediction` of a
    ``decode<L>`` workload and its ``layers``: seconds per step with its interval, tokens per second (one token per
    sequence per step), the weight and key/value cache bytes a step reads, the memory bound (those bytes over the
    host's read bandwidth at that size, ``curve``: :func:`bandwidth_curve` where None; none for a database of
    another host) and the share of it the predicted and the measured step reach, the step's working set
    (:func:`footprint`) and what its memory level adds (``level_s``), and the op types taking most time."""
    from opcost.measure import bandwidth as bw

    context = decode_context(pred.mode)
    if context is None:
        raise ValueError(f"{pred.mode} is no decode mode")
    rate = lambda s: pred.batch / s if s > 0 else math.inf  # noqa: E731
    reads = weight_bytes(layers) + cache_bytes(layers, context)
    curve = curve or bandwidth_curve(pred.conditions)
    bound = reads / bw.at(curve, reads) if curve else None
    by_type = pred.by_op_type()
    return {"model": pred.model, "batch": int(pred.batch), "context": context, "mode": pred.mode, **pred.conditions,
            "step_s": pred.predicted_s, "step_low_s": pred.low_s, "step_high_s": pred.high_s,
            "tokens_per_s": rate(pred.predicted_s), "tokens_per_s_low": rate(pred.high_s),
            "tokens_per_s_high": rate(pred.low_s), "measured_step_s": pred.measured_s,
            "weight_bytes": weight_bytes(layers), "kv_cache_bytes": cache_bytes(layers, context), "bound_s": bound,
            "bound_fraction": bound / pred.predicted_s if bound else None,
            "measured_bound_fraction": bound / pred.measured_s if bound and pred.measured_s else None,
            "estimated_share": pred.estimated_share, "overhead_s": pred.overhead_s, "level_s": pred.level_s,
            "footprint_bytes": footprint(layers, context), "attention_share": attention_share(pred.layers, context),
            "top_op_types_s": {k: float(v) for k, v in by_type.head(top).items()}}


def bandwidth_curve(conditions: dict) -> dict | None:
    """The read-bandwidth curve of the host of ``conditions`` (the database's host, device and threads), when
    this is that host (:func:`opcost.measure.bandwidth.curve`); None on another host, whose bandwidth this one's
    cannot stand for."""
    import socket

    from opcost.measure import bandwidth

    host = conditions.get("host")
    if host is not None and str(host) != socket.gethostname():
        return None
    return bandwidth.curve(str(host or socket.gethostname()), str(conditions.get("device") or "cpu"),
                           conditions.get("threads"))
