"""What a run could not do: one line per failure, so that nothing fails silently.

A stage that cannot build or run a workload records the workload as failed and writes its outputs empty; a
configuration that cannot be replayed or timed is recorded and left out (profiling: a `measurements` row whose
status is ``failed: ...``). The rest of the run goes on. :func:`collect` gathers every failure of a run (table
:data:`opcost.tables.FAILURES`, written to ``results/failures.tsv``); :func:`text` is the short list printed at the
end of a run.
"""
from __future__ import annotations

import pandas as pd

from opcost.tables import FAILURES, frame

STAGE_ORDER = ("extract", "e2e", "e2e_tier", "insitu", "trace", "coplace", "profile")


def read_tsv(path) -> pd.DataFrame:
    """``results/failures.tsv`` as :func:`collect` wrote it (all columns as strings; no rows when all went well)."""
    return pd.read_csv(path, sep="\t", dtype="string")


def failure(e: BaseException) -> str:
    """One line naming an error: its type and the first line of its message (at most 300 characters)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def collect(stage_failures: pd.DataFrame, measurements: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Every failure of a run: the stages' failure rows, and one row per (workload, configuration) whose isolated
    profiling failed (status ``failed: ...`` in every row of the configuration: a configuration that failed in one
    placement but was measured in another is not a failure of the prediction)."""
    iso = measurements[measurements["source"] == "isolated"]
    ok = set(iso.loc[iso["status"] == "ok", "config_id"])
    bad = iso[iso["status"].str.startswith("failed").fillna(False) & ~iso["config_id"].isin(ok)]
    bad = bad.drop_duplicates("config_id")[["config_id", "op_type", "status"]]
    workloads = layers[["config_id", "model", "mode", "batch"]].drop_duplicates()
    prof = bad.merge(workloads, on="config_id", how="left")
    prof_rows = pd.DataFrame({
        "stage": "profile",
        "workload": prof["model"] + "/" + prof["mode"] + "/b" + prof["batch"].astype("string"),
        "config_id": prof["config_id"], "op_type": prof["op_type"],
        "reason": prof["status"].str.removeprefix("failed: "), "kind": "failed",
    }) if len(prof) else frame(FAILURES, [])
    stage_failures = frame(FAILURES, stage_failures)
    stage_failures["kind"] = stage_failures["kind"].fillna("failed")  # files of older versions: failures only
    out = pd.concat([stage_failures, frame(FAILURES, prof_rows)], ignore_index=True)
    order = {s: i for i, s in enumerate(STAGE_ORDER)}
    out = out.assign(_o=out["stage"].map(order).fillna(len(order)))
    return frame(FAILURES, out.sort_values(["workload", "_o", "config_id"], kind="stable").drop(columns="_o"))


def is_warning(failures: pd.DataFrame) -> pd.Series:
    """Which rows of a `failures` table are warnings (the workload ran and was measured) rather than failures."""
    if "kind" not in failures:
        return pd.Series(False, index=failures.index)
    return (failures["kind"] == "warning").fillna(False).astype(bool)


def text(failures: pd.DataFrame, limit: int = 20) -> str:
    """The short list: one line per failed workload (the stages that failed, the first reason) and per failed
    configuration (workload, stage, operator, reason), at most ``limit`` lines; then the warnings, one line each."""
    warned = is_warning(failures)
    warnings = [f"warning {r.workload}: {r.reason}" for r in failures[warned].itertuples()]
    failures = failures[~warned]
    tail = ([f"{len(warnings)} warning(s):", *warnings[:limit]] if warnings else []) + (
        [f"... and {len(warnings) - limit} more (results/failures.tsv)"] if len(warnings) > limit else [])
    if failures.empty:
        return "\n".join(["no failures", *tail])
    lines = []
    whole = failures[failures["config_id"].isna()]
    for wl, g in whole.groupby("workload", sort=False):
        lines.append(f"FAILED {wl} ({', '.join(g['stage'])}): {g['reason'].iloc[0]}")
    for r in failures[failures["config_id"].notna()].itertuples():
        lines.append(f"failed {r.workload} {r.stage} {r.op_type} {r.config_id}: {r.reason}")
    more = len(lines) - limit
    head = f"{len(whole['workload'].unique())} workload(s) failed, {int(failures['config_id'].notna().sum())} " \
           f"configuration failure(s):"
    return "\n".join([head, *lines[:limit]] + ([f"... and {more} more (results/failures.tsv)"] if more > 0 else [])
                     + tail)
