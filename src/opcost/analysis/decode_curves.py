"""A decoder's predicted steps across context lengths, beside its measured ones: the decode figure's input
(:func:`curves`). Each point is :func:`opcost.analysis.estimate.predict_workload`'s prediction of the step
(:mod:`opcost.analysis.decode` says what it rests on), with the step's memory bound."""
from __future__ import annotations

import logging

import pandas as pd

from opcost.analysis.decode import attention_share, bandwidth_curve, cache_bytes, weight_bytes
from opcost.analysis.estimate import predict_workload
from opcost.measure import bandwidth as bw
from opcost.model.extract import extract
from opcost.model.modes import decode_context, decode_mode
from opcost.model.sources import load_model
from opcost.model.workload import make_workload

log = logging.getLogger(__name__)


BEYOND = (2, 4)  # curves: the unmeasured context lengths, as multiples of the largest measured one


def curves(db: dict, db_dir=None, specs: dict | None = None, statistic: str | None = None, dtype: str = "float32",
           beyond=BEYOND, **chosen) -> pd.DataFrame:
    """Time per step against context length of every decode model and batch in ``db``'s layers: one row per
    (model, batch, context) at each context length measured for that model and at ``beyond`` × the largest, with
    :func:`opcost.analysis.estimate.predict_workload`'s prediction (``chosen``: its conditions) and interval, the
    workload's end-to-end reference where measured, and the share of attention and the cache update in the operator
    time (:func:`attention_share`) and the memory bound (``bound_s``: the bytes a step reads over this host's read
    bandwidth at that size, :func:`bandwidth_curve`; None for a database of another host). An unmeasured step is
    extracted now on the CPU in ``dtype`` from its model's config entry (``specs``: model name -> entry); a point
    that cannot be predicted is left out, with a warning."""
    held = db["layers"][["model", "batch", "mode"]].drop_duplicates()
    held = held.assign(context=held["mode"].map(decode_context)).dropna(subset=["context"])
    rows, curve = [], None
    for (model, batch), own in held.groupby(["model", "batch"]):
        measured = sorted(int(c) for c in own["context"])
        for context in measured + [int(k * measured[-1]) for k in beyond]:
            mode = decode_mode(context)
            try:
                layers = db["layers"][(db["layers"]["model"] == model) & (db["layers"]["batch"] == batch)
                                      & (db["layers"]["mode"] == mode)].reset_index(drop=True)
                if layers.empty:
                    layers = _extract(model, (specs or {}).get(model) or {}, int(batch), mode, dtype)
                pred = predict_workload(db, layers, db_dir, statistic, **chosen)
            except Exception as e:  # e.g. a context beyond the model's positions: the other points stand
                log.warning("decode curve %s b%s at context %d: cannot predict: %s", model, batch, context, e)
                continue
            reads = weight_bytes(layers) + cache_bytes(layers, context)
            curve = curve or bandwidth_curve(pred.conditions)
            rows.append({"model": model, "batch": int(batch), "context": context, "measured": context in measured,
                         "predicted_s": pred.predicted_s, "low_s": pred.low_s, "high_s": pred.high_s,
                         "measured_s": pred.measured_s, "estimated_share": pred.estimated_share,
                         "attention_share": attention_share(pred.layers, context),
                         "bound_s": reads / bw.at(curve, reads) if curve else None})
    return pd.DataFrame(rows, columns=["model", "batch", "context", "measured", "predicted_s", "low_s", "high_s",
                                       "measured_s", "estimated_share", "attention_share", "bound_s"])


def _extract(model: str, spec: dict, batch: int, mode: str, dtype: str) -> pd.DataFrame:
    """The `layers` rows of a decode step never extracted: its model built on the CPU, the cache prefilled, one step
    recorded."""
    return extract(make_workload(load_model(model, spec, "cpu", dtype), batch, mode)).reset_index(drop=True)
