"""Prediction = sum over a workload's operator configurations of count x measured cost; validation against e2e."""
from __future__ import annotations

import pandas as pd

from .database import latest
from .tables import PREDICTIONS, frame


def costed_layers(layers: pd.DataFrame, measurements: pd.DataFrame, device: str,
                  source: str = "isolated") -> pd.DataFrame:
    """Layer rows joined with their cost (median_s; missing when unmeasured or failed) and count x cost."""
    ok = measurements[(measurements["status"] == "ok") & (measurements["source"] == source)
                      & (measurements["device"] == device)]
    # a configuration's cost per call is the sum over its phases (forward; in training also backward)
    cost = latest(ok).groupby("config_id", as_index=False)["median_s"].sum()
    out = layers.merge(cost, on="config_id", how="left")
    return out.assign(total_s=out["count"] * out["median_s"])


def predict(layers: pd.DataFrame, measurements: pd.DataFrame, e2e: pd.DataFrame, device: str,
            source: str = "isolated") -> pd.DataFrame:
    """One `predictions` row per workload present in both `layers` and `e2e`."""
    costed = costed_layers(layers, measurements, device, source)
    rows = []
    for (model, batch, mode), g in costed.groupby(["model", "batch", "mode"], sort=True):
        e = e2e[(e2e["model"] == model) & (e2e["batch"] == batch) & (e2e["mode"] == mode)
                & (e2e["device"] == device)]
        measured = float(latest(e, ("model", "batch", "mode", "device"))["median_s"].iloc[0]) if len(e) else None
        measured_ok = g["median_s"].notna()
        predicted = float(g.loc[measured_ok, "total_s"].sum())
        ratio = predicted / measured if measured else None
        rows.append({
            "model": model, "batch": int(batch), "mode": mode, "device": device, "source": source,
            "predicted_s": predicted, "measured_s": measured, "ratio": ratio,
            "error": ratio - 1 if ratio is not None else None,
            "configs": len(g), "configs_measured": int(measured_ok.sum()),
            "calls_covered": float(g.loc[measured_ok, "count"].sum() / g["count"].sum()),
        })
    return frame(PREDICTIONS, rows)
