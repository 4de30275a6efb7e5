"""A workload timed in turn with a profiled control, so that its time reads in the database's minutes.

A prediction rests on costs measured in some minutes; the workload it is checked against, timed in other minutes,
carries the host's drift between them, and on a shared VM that drift is as large as the errors looked for: in one
default study ResNet-18 at batch 1 ran 26.7 ms in its end-to-end job and 33.1 ms in a rotation's lead-in eight
minutes later, and RegNetY-400MF, never profiled, timed 31.5 ms in its own job and 21.9 ms in another run, against
20.3 and 20.4 ms predicted. The errors of the `predict_only` models are what the interval of any model never
profiled rests on (:mod:`opcost.analysis.calibration`): drift left in them widens every such interval and moves
every such error. Their end-to-end job therefore also times each one in turn with a control (:func:`choose`: the
run's first profiled model at its smallest batch in the same mode), each round both, the order swapped every round
(:func:`rounds`); the median of the rounds' ratios (`e2e` method :data:`METHOD`, ``vs_control``) times the
control's own reference in the database (opcost's reference: its rotation iterations, in the minutes its costs
were measured) is the workload's time in the database's minutes (:func:`in_database_minutes`), what its prediction
is checked against (`predictions` reference ``control``). generate()'s validation (:mod:`opcost.measure.generation`)
and the benchmarks time their workloads in turn with controls the same way.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

METHOD = "control"  # the `e2e` method (and `predictions` reference) of a workload timed in turn with a control
ROUNDS = 4  # rounds of a never-profiled workload's end-to-end job


def rounds(parts: dict[str, Callable[[], float]], n: int) -> dict[str, list[float]]:
    """Each of ``parts`` (name -> a timing that returns seconds) called once per round for ``n`` rounds, the order
    rotated every round (none is always first after a warm-up, or always after the same other): name -> its
    times."""
    names = list(parts)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(n):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(float(parts[k]()))
    return times


def choose(workloads: list[tuple[str, str, int]], entry_of: Callable[[str], dict]) -> dict[str, list]:
    """mode -> [model, entry, batch]: the control of a never-profiled workload of that mode, the first profiled
    model (``workloads``: :func:`opcost.config.workloads` of `models`, in config order) with the mode, at its
    smallest batch (``entry_of``: a model's entry)."""
    out: dict[str, list] = {}
    for name, mode, batch in workloads:
        if mode not in out or (out[mode][0] == name and batch < out[mode][2]):
            out[mode] = [name, entry_of(name), int(batch)]
    return out


def time_with_control(wl, control, settings, device: str, n: int = ROUNDS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(`e2e` row of method :data:`METHOD`, its `samples`) of the workload ``wl`` timed in turn with the workload
    ``control`` for ``n`` rounds (:func:`rounds`), each timing with ``settings``: the row's statistics are those of
    ``wl``'s samples over all rounds, ``control`` names the control's workload and ``vs_control`` is the median over
    rounds of ``wl``'s trimmed mean over the control's."""
    from opcost import tables
    from opcost.measure.e2e import e2e_frames
    from opcost.measure.timing import Measurement, measure
    from opcost.model.workload import workload_key

    taken: list = []

    def mine() -> float:
        taken.append(measure(wl.step, settings, device))
        return taken[-1].trimmed_mean

    times = rounds({"workload": mine, "control": lambda: measure(control.step, settings, device).trimmed_mean}, n)
    pooled = Measurement(np.concatenate([m.samples for m in taken]), max(m.calls_per_sample for m in taken),
                         sum(m.wall_s for m in taken), settings)
    row, samples = e2e_frames((wl.model.name, wl.batch, wl.mode), pooled, METHOD, device)
    ratio = float(np.median(np.asarray(times["workload"]) / np.asarray(times["control"])))
    row = tables.frame(tables.E2E, [dict(row.iloc[0], control=workload_key(control.model.name, control.mode,
                                                                            control.batch), vs_control=ratio)])
    return row, samples.assign(source=METHOD)


def in_database_minutes(e2e: pd.DataFrame, references: dict) -> float | None:
    """A workload's time in the database's minutes from its newest :data:`METHOD` row in ``e2e`` (its own rows):
    ``vs_control`` times its control's reference (``references``: (model, batch, mode) -> (seconds, method), as
    :func:`opcost.analysis.predict.references` gives them); None without such a row or reference."""
    from opcost.model.workload import parse_workload_key

    if "vs_control" not in e2e:
        return None
    rows = e2e[(e2e["method"] == METHOD) & e2e["vs_control"].notna() & e2e["control"].notna()]
    if rows.empty:
        return None
    row = rows.sort_values("timestamp").iloc[-1]
    model, mode, batch = parse_workload_key(str(row["control"]))
    ref = references.get((model, int(batch), mode))
    return float(row["vs_control"]) * ref[0] if ref else None
