"""A database's rows timed in rotations, read in one minute of the host (:mod:`opcost.measure.speed`).

Each rotation times the host's speed probe among its members (`speed_s`: its median there). The run's database
(:func:`opcost.stages.analysing.database`) divides the time statistics of each such row (isolated rows of the default
placement, `e2e` rows of method `rotation`) by its rotation's speed over the median speed of its conditions' rows
(host, device, threads): what a sweep point measured in a slow minute and a model's configuration measured in a fast
one are then added up as if timed side by side, and a model never profiled, timed in turn with a profiled control
(:mod:`opcost.measure.control`), is read in the same minute. The `samples` table and the profiling shards keep the
times as timed. Two passes of the default study's sweep points minutes apart: 47% of the batch-8 points more than
25% apart as timed, 12% in one minute (benchmarks/sweep_reproducibility.py; benchmarks/records/measurements.md).
"""
from __future__ import annotations

import pandas as pd

SCALED = ("median_s", "trimmed_mean_s", "iqr_s", "ci_low_s", "ci_high_s")  # the time statistics scaled
CONDITIONS = ["host", "device", "threads"]


def reference_speeds(measurements: pd.DataFrame) -> pd.Series:
    """The median `speed_s` of the rows of each measurement condition (:data:`CONDITIONS`) that have one."""
    timed = measurements.dropna(subset=["speed_s"])
    if timed.empty:
        return pd.Series(dtype=float)
    return timed.groupby(CONDITIONS, dropna=False)["speed_s"].median()


def in_one_minute(table: pd.DataFrame, speeds: pd.Series) -> pd.DataFrame:
    """``table`` (`measurements` or `e2e`) with the time statistics of each row that has a `speed_s` multiplied by its
    conditions' reference speed (``speeds``: :func:`reference_speeds`) over its own; other rows as they were."""
    if "speed_s" not in table or speeds.empty or table["speed_s"].isna().all():
        return table
    ref = table[CONDITIONS].merge(speeds.rename("ref").reset_index(), on=CONDITIONS, how="left")["ref"]
    factor = (ref.to_numpy(dtype=float) / table["speed_s"].to_numpy(dtype=float))
    out = table.copy()
    ok = pd.notna(factor) & (factor > 0)
    for col in SCALED:
        if col in out:
            out.loc[ok, col] = out.loc[ok, col].astype(float) * factor[ok]
    return out
