"""Which host's costs predict a workload when a database holds several (a cluster's jobs on several nodes): costs
of different hosts are never mixed."""
from __future__ import annotations

import logging
from collections.abc import Mapping

import pandas as pd

log = logging.getLogger("opcost")


def prediction_host(measurements: pd.DataFrame, e2e: pd.DataFrame, config: Mapping) -> str | None:
    """The host whose costs predict a `predict_only` workload when the run's database holds several (a cluster's
    jobs on several nodes): the one its end-to-end run ran on, else the one with the most isolated measurements,
    with a warning; None when there is one (:func:`opcost.analysis.estimate.conditions` takes it). Costs of different
    hosts are never mixed."""
    m = measurements[(measurements["source"] == "isolated") & (measurements["status"] == "ok")
                     & (measurements["device"] == config["device"])]
    held = m["host"].dropna().astype(str).value_counts()
    if len(held) <= 1:
        return None
    ran_on = [h for h in e2e["host"].dropna().astype(str) if h in held.index]
    if ran_on:
        return ran_on[-1]
    log.warning("the database holds costs from %d hosts (%s): predicting from %s, the one with the most",
                len(held), ", ".join(held.index), held.index[0])
    return str(held.index[0])
