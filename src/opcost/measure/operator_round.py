"""One iteration's operator calls of a workload as the profile stage times them: what the glue between operators is
timed against (:mod:`opcost.measure.glue`)."""
from __future__ import annotations

from typing import Callable

import pandas as pd

from opcost.measure.rotation import (
    first_call,
    round_timer,
    with_iterations,
)
from opcost.measure.rotation_engine import (
    in_model_order,
    lead_ins,
    member_calls,
    references,
    replays,
)
from opcost.model.replay import ModelCache, mode_context


def operator_round(configs: pd.DataFrame, models_cfg: dict, device: str = "cpu", dtype: str = "float32",
                   e2e_every: int | None = None) -> tuple[Callable[[], list[float]], dict[str, str]]:
    """One iteration's operator calls of a workload (``configs``: its `configs` rows) as the profile stage times
    them under its CPU default (``cache: fresh``, ``order: model``), with its model's reference iteration closing
    every ``e2e_every``-th round after its lead-in, as there (default: the config's default; 0: none): a function
    that runs one rotation round and returns the seconds of each operator call, in call order
    (:func:`opcost.measure.rotation.round_timer`), and the configurations left out, {config_id: failure} (those
    that cannot be built or fail on a first call)."""
    from opcost.config import schema

    if e2e_every is None:
        e2e_every = int(schema()["properties"]["profile"]["properties"]["e2e_every"]["default"])
    rows = sorted(configs.to_dict("records"), key=first_call)
    models = ModelCache(models_cfg, device, dtype)
    failed: dict[str, str] = {}
    reps = replays(rows, models, device, failed)
    mode = rows[0]["mode"]
    with mode_context(mode):
        members = member_calls(reps, True, failed)
        kept = [row for row, _ in reps if row["config_id"] not in failed]
        rotation = in_model_order(members, kept, {row["config_id"]: rep for row, rep in reps}, True)
        iterations = references(rows, set(), models) if e2e_every > 0 else {}
        leads = lead_ins(iterations, device)
        if iterations:
            rotation = with_iterations(rotation, list(iterations.values()), e2e_every, list(leads.values()))
    one = round_timer(rotation, device, len(members))

    def run() -> list[float]:
        with mode_context(mode):
            return one()

    return run, failed
