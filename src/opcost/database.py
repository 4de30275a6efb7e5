"""The operator database: the configuration catalogue and the merged measurement tables under results/db/."""
from __future__ import annotations

import json

import pandas as pd

from .tables import CONFIGS, frame


def catalog(layers: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration id over all workloads (the profiling work list), with the models using it."""
    if layers.empty:
        return frame(CONFIGS, [])
    models = layers.groupby("config_id")["model"].agg(lambda s: json.dumps(sorted(set(s))))
    first = layers.drop_duplicates("config_id", keep="first").set_index("config_id")
    out = first.assign(models=models).reset_index()
    return frame(CONFIGS, out[CONFIGS.names])


def latest(measurements: pd.DataFrame, keys=("config_id", "source", "phase", "workload", "device", "placement")) -> pd.DataFrame:
    """The most recent row per key (a re-measurement supersedes the earlier one)."""
    if measurements.empty:
        return measurements
    keys = [k for k in keys if k in measurements.columns]
    return measurements.sort_values("timestamp").drop_duplicates(keys, keep="last")
