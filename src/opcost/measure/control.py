"""A workload timed in turn with profiled controls, so that its time reads in the database's minutes.

A prediction rests on costs measured in some minutes; the workload it is checked against, timed in other minutes,
carries the host's drift between them, and on a shared VM that drift is as large as the errors looked for: in one
default study ResNet-18 at batch 1 ran 26.7 ms in its end-to-end job and 33.1 ms in a rotation's lead-in eight
minutes later, and RegNetY-400MF, never profiled, timed 31.5 ms in its own job and 21.9 ms in another run, against
20.3 and 20.4 ms predicted. The errors of the `predict_only` models are what the interval of any model never
profiled rests on (:mod:`opcost.analysis.calibration`): drift left in them widens every such interval and moves
every such error. Their end-to-end job therefore also times each one in turn with controls
(:func:`opcost.config.controls`: the run's first :data:`opcost.config.CONTROLS` profiled models in the same mode,
each at its smallest batch), each round all, the order rotated every round (:func:`rounds`); per control, the median
of the rounds' ratios (`e2e` method :data:`METHOD`, one row per control, ``vs_control``) times the control's own
reference in the database (opcost's reference: its rotation iterations, in the minutes its costs were measured) is
the workload's time in the database's minutes, and their median (:func:`in_database_minutes`) what its prediction is
checked against (`predictions` reference ``control``). The database's minutes are not one minute (each profiling job
ran in its own), so one control's reference can sit in a slower or faster minute than the costs an estimate rests
on: on 30 models drawn at random, timed in turn with ResNet-18 and tiny_bert, the error against either alone was 17%
and 16% in the median, against the two's median 9%. generate()'s validation (:mod:`opcost.measure.generation`) and
the benchmarks time their workloads in turn with controls the same way.
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


def time_with_control(wl, controls: list, settings, device: str, n: int = ROUNDS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(`e2e` rows of method :data:`METHOD`, one per control, and ``wl``'s `samples`) of the workload ``wl`` timed in
    turn with the workloads ``controls`` for ``n`` rounds (:func:`rounds`), each timing with ``settings``: a row's
    statistics are those of ``wl``'s samples over all rounds, ``control`` names its control's workload and
    ``vs_control`` is the median over rounds of ``wl``'s trimmed mean over that control's."""
    from opcost import tables
    from opcost.measure.e2e import e2e_frames
    from opcost.measure.timing import Measurement, measure
    from opcost.model.workload import workload_key

    taken: list = []

    def mine() -> float:
        taken.append(measure(wl.step, settings, device))
        return taken[-1].trimmed_mean

    parts = {"workload": mine, **{i: (lambda c=c: measure(c.step, settings, device).trimmed_mean)
                                  for i, c in enumerate(controls)}}
    times = rounds(parts, n)
    pooled = Measurement(np.concatenate([m.samples for m in taken]), max(m.calls_per_sample for m in taken),
                         sum(m.wall_s for m in taken), settings)
    row, samples = e2e_frames((wl.model.name, wl.batch, wl.mode), pooled, METHOD, device)
    mine_s = np.asarray(times["workload"])
    rows = [dict(row.iloc[0], control=workload_key(c.model.name, c.mode, c.batch),
                 vs_control=float(np.median(mine_s / np.asarray(times[i])))) for i, c in enumerate(controls)]
    return tables.frame(tables.E2E, rows), samples.assign(source=METHOD)


def in_minutes_of(ratios, control_s) -> np.ndarray:
    """Times measured as ratios to a control's, timed in turn (``ratios``), read in the minutes in which the control
    took ``control_s`` (one time, or one per ratio): each ratio times its control's time. The median of the result is
    the workload's time in those minutes (:func:`in_database_minutes`, generate()'s validation, the benchmarks)."""
    return np.asarray(ratios, dtype=float) * np.asarray(control_s, dtype=float)


def in_database_minutes(e2e: pd.DataFrame, references: dict) -> float | None:
    """A workload's time in the database's minutes from its newest :data:`METHOD` rows in ``e2e`` (its own rows):
    per control, ``vs_control`` times the control's reference (``references``: (model, batch, mode) -> (seconds,
    method), as :func:`opcost.analysis.predict.references` gives them), the median over controls; None without such
    a row or reference."""
    from opcost.model.workload import parse_workload_key

    if "vs_control" not in e2e:
        return None
    rows = e2e[(e2e["method"] == METHOD) & e2e["vs_control"].notna() & e2e["control"].notna()]
    rows = rows[rows["timestamp"] == rows["timestamp"].max()] if len(rows) else rows  # the newest job's
    ratios, refs = [], []
    for control, ratio in zip(rows["control"].astype(str), rows["vs_control"].astype(float)):
        model, mode, batch = parse_workload_key(control)
        if (ref := references.get((model, int(batch), mode))) is not None:
            ratios.append(ratio)
            refs.append(ref[0])
    return float(np.median(in_minutes_of(ratios, refs))) if ratios else None
