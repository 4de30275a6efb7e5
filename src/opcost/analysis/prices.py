"""What a tensor on a slower memory tier adds to the calls that read it, from a database's placement measurements
(:mod:`opcost.analysis.tiers`), for the placement advisor (:mod:`opcost.analysis.advise`).

:func:`slowdowns`: per configuration and phase, the slowdown of the measured placement realising a scenario
(activations, weights or all on the tier), else the median of its op type and phase there (its 10-90% range as the
interval), else of its phase. :func:`byte_prices`: the tier's extra seconds per byte read, fitted to the measured
placements of operator inputs that move at least the median bytes (bandwidth-bound): the price of parameters never
placed on the tier (``placement.params: fixed``), per op type where its placements moved as many bytes as the
parameters in question (:func:`byte_price`; no extrapolation from latency-bound transfers), else per phase.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd


def _quantiles(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    q = frame.groupby(keys)["slowdown"].quantile([0.1, 0.5, 0.9]).unstack()
    return q.set_axis(["low", "mid", "high"], axis=1)


def slowdowns(rows: pd.DataFrame, on_tier: pd.DataFrame) -> pd.DataFrame:
    """Per row (config_id, op_type, phase): the slowdown (mid, low, high) and whether it is the configuration's own
    measurement, else its op type's and phase's median (10-90%), else its phase's; NaN where none."""
    out = pd.DataFrame({"mid": np.nan, "low": np.nan, "high": np.nan, "own": False}, index=rows.index)
    if on_tier.empty:
        return out
    own = on_tier.drop_duplicates(["config_id", "phase"], keep="last").set_index(["config_id", "phase"])["slowdown"]
    key = pd.MultiIndex.from_arrays([rows["config_id"], rows["phase"]])
    mine = own.reindex(key).to_numpy(dtype=float)
    for keys in (["phase"], ["op_type", "phase"]):  # the narrower evidence last, so that it wins
        q = _quantiles(on_tier, keys)
        idx = pd.MultiIndex.from_frame(rows[keys]) if len(keys) > 1 else pd.Index(rows[keys[0]])
        got = q.reindex(idx)
        have = got["mid"].notna().to_numpy()
        for col in ("mid", "low", "high"):
            out.loc[have, col] = got[col].to_numpy()[have]
    have = np.isfinite(mine)
    for col in ("mid", "low", "high"):
        out.loc[have, col] = mine[have]
    out["own"] = have
    return out


def byte_prices(on_tier: pd.DataFrame, layers_all: pd.DataFrame, base: pd.Series, slow: str) -> dict:
    """(op type, phase) and (None, phase) -> (median, 10%, 90%) extra seconds per byte read from the slow tier, over
    the measured input placements (scenario `activations`) of that op type (of any) and phase that move at least
    the median bytes of those placements (bandwidth-bound), and the most bytes one of them moved."""
    from opcost.model.tensors import spec_bytes, specs

    held = layers_all.drop_duplicates("config_id").set_index("config_id")
    rows = []
    for r in on_tier.itertuples():
        if r.config_id not in held.index or (r.config_id, r.phase) not in base.index:
            continue
        nbytes = sum(spec_bytes(x) for x in specs(held.at[r.config_id, "inputs"]))
        if f"out:{slow}" in str(r.cls):
            nbytes += sum(spec_bytes(x) for x in specs(held.at[r.config_id, "outputs"]))
        if nbytes > 0:
            extra = max(r.slowdown - 1, 0.0) * float(base[(r.config_id, r.phase)])
            rows.append((r.op_type, r.phase, extra / nbytes, nbytes))
    out = {}
    if not rows:
        return out
    frame = pd.DataFrame(rows, columns=["op_type", "phase", "rate", "bytes"])
    for keys in (["phase"], ["op_type", "phase"]):
        for key, g in frame.groupby(keys):
            big = g.loc[g["bytes"] >= g["bytes"].median(), "rate"]
            key = key if len(keys) > 1 else (None, key[0] if isinstance(key, tuple) else key)
            out[key] = (*(float(big.quantile(q)) for q in (0.5, 0.1, 0.9)), float(g["bytes"].max()))
    return out


def byte_price(rates: dict, op_type: str, phase: str, nbytes: float) -> tuple | None:
    """The per-byte price of reading ``nbytes`` of parameters (:func:`byte_prices`): its op type's where that op type's
    placements moved as many bytes (no extrapolation from latency-bound transfers), else its phase's."""
    own = rates.get((op_type, phase))
    if own is not None and own[3] >= nbytes:
        return own[:3]
    got = rates.get((None, phase)) or rates.get((None, "forward"))
    return got[:3] if got else None


def lookup_share(row) -> float:
    """The share of its table an embedding call's forward reads (ids looked up / rows; at most 1); 1 for other op
    types and backward (a dense gradient: the whole table)."""
    from opcost.analysis.optypes import work
    from opcost.model.tensors import specs

    if work(str(row.op_type)) != "embedding" or row.phase != "forward":
        return 1.0
    rows = (json.loads(row.params) if isinstance(row.params, str) else {}).get("num_embeddings")
    ins = specs(row.inputs)
    ids = int(np.prod(ins[0]["T"])) if ins else 0
    return min(1.0, ids / rows) if isinstance(rows, int) and rows > 0 and ids else 1.0
